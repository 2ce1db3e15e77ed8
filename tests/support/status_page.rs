//! The status page as a person sees it, in a [`Tab`] of a real browser:
//! what the row of a backend shows, waits on it, its buttons, the command
//! result panel; and the pool of simulated Litecoin nodes the page tests
//! show.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use super::chromium::Tab;

/// Bound on every wait for the page: its refresh is 2 s.
pub const PAGE: Duration = Duration::from_secs(20);

/// Litecoin regtest message start, as `network: litecoin-regtest` sends it.
pub const REGTEST: [u8; 4] = [0xfa, 0xbf, 0xb5, 0xda];

/// Script for the row of backend `name` of pool `pool`, or `null`.
pub fn row(pool: &str, name: &str) -> String {
    format!(
        "[...document.querySelectorAll('tr.backend')]\
         .find(r => r.dataset.pool === {pool:?} && r.dataset.backend === {name:?})"
    )
}

/// Script for what the row of `pool`/`name` shows, as an object of cell
/// texts (or `null` while there is no such row).
pub fn view(pool: &str, name: &str) -> String {
    format!(
        "(() => {{ const el = {}; if (!el) return null;
           const t = s => el.querySelector(s).innerText.trim();
           return {{ state: t('.state'), name: t('.name'), quarantine: t('.quarantine'),
                     countdown: t('.countdown'), probe: t('.probe'), node: t('.node'),
                     cells: el.innerText,
                     backup: el.querySelector('.tag').checkVisibility() }}; }})()",
        row(pool, name)
    )
}

/// What the row of `pool`/`name` shows now.
pub async fn seen(tab: &mut Tab, pool: &str, name: &str) -> Value {
    tab.eval(&view(pool, name)).await
}

/// Wait until the row of `pool`/`name` satisfies `cond` (a JS expression
/// over `r`, the object of [`view`]); that row.
pub async fn seen_until(tab: &mut Tab, pool: &str, name: &str, cond: &str) -> Value {
    let script = format!("(r => r && ({cond}) ? r : null)({})", view(pool, name));
    tab.wait_for(&format!("{pool}/{name}: {cond}"), &script, PAGE)
        .await
}

/// Press a button (`quarantine` or `release`) in the row of `pool`/`name`,
/// after typing `window` into its duration field if given.
pub async fn press(tab: &mut Tab, pool: &str, name: &str, button: &str, window: Option<&str>) {
    let fill = window.map_or_else(String::new, |w| {
        format!("r.querySelector('input').value = {w:?};")
    });
    let script = format!(
        "(() => {{ const r = {}; {fill} const b = r.querySelector('button.{button}');
           if (b.disabled) return false; b.click(); return true; }})()",
        row(pool, name)
    );
    assert_eq!(tab.eval(&script).await, true, "{button} is disabled");
}

/// The text of the command result panel once it shows one containing `want`.
pub async fn result_with(tab: &mut Tab, want: &str) -> String {
    let script = format!(
        "(() => {{ const p = document.getElementById('result');
           return !p.hidden && p.innerText.includes({want:?}) ? p.innerText : null; }})()"
    );
    let v = tab
        .wait_for(&format!("a result with {want}"), &script, PAGE)
        .await;
    v.as_str().unwrap_or_default().to_owned()
}

/// Pool `ltc-p2p` in front of `nodes` (name, address, backup): simulated
/// Litecoin nodes probed with `bitcoin-p2p` every 300 ms, lagging at 3
/// blocks behind, no rebalance.
pub fn p2p_pool(nodes: &[(&str, SocketAddr, bool)]) -> String {
    let list: String = nodes
        .iter()
        .map(|(n, a, b)| format!("      - {{ name: {n}, addr: \"{a}\", backup: {b} }}\n"))
        .collect();
    format!(
        "  - name: ltc-p2p\n    listen: 127.0.0.1:0\n    rebalance: {{ interval: 0s }}\n    \
         health: {{ probe: bitcoin-p2p, network: litecoin-regtest, interval: 300ms, \
         timeout: 500ms, fall: 2, rise: 1, max_lag_blocks: 3 }}\n    backends:\n{list}"
    )
}
