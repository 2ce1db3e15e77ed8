//! Free loopback ports for the benchmark's listeners, taken below the
//! kernel's range for outgoing connections (`ip_local_port_range`). A port
//! from that range can be taken again between the moment it is found free
//! and the moment a proxy binds it: the churn loads open some 10,000
//! connections a second, each on a port of that range, and one still live
//! or in `TIME_WAIT` on the port makes the bind fail ("Address already in
//! use"), which cost `run.sh` an idle round in most runs.

use std::net::TcpListener;

use anyhow::{Context, bail};

/// Where the kernel's range for outgoing connections starts.
const RANGE_FILE: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// The lowest port handed out: the ones below are privileged.
const LOWEST: u16 = 1024;

/// Held by each test that binds ports [`free`] gave it, from the call
/// until it is done with them: a port found free is bound only a moment
/// later, and two tests running at once would be given the same ones.
#[cfg(test)]
pub static TEST_PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `n` distinct ports of 127.0.0.1 free now, below the kernel's range for
/// outgoing connections, highest first.
///
/// # Errors
/// When the range cannot be read or fewer than `n` ports are free below it.
pub fn free(n: usize) -> anyhow::Result<Vec<u16>> {
    let text = std::fs::read_to_string(RANGE_FILE).with_context(|| format!("read {RANGE_FILE}"))?;
    free_below(range_start(&text)?, n)
}

/// The first port of an `ip_local_port_range` line ("32768\t60999").
fn range_start(text: &str) -> anyhow::Result<u16> {
    let first = text.split_whitespace().next().context("empty port range")?;
    first
        .parse()
        .with_context(|| format!("bad port range {text:?}"))
}

/// `n` distinct ports free now below `start`. Each is held while the
/// next is looked for, so none comes twice.
fn free_below(start: u16, n: usize) -> anyhow::Result<Vec<u16>> {
    let mut held = Vec::with_capacity(n);
    for port in (LOWEST..start).rev() {
        if held.len() == n {
            break;
        }
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
        }
    }
    if held.len() < n {
        bail!(
            "only {} of {n} ports free between {LOWEST} and {start}",
            held.len()
        );
    }
    held.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_from_below_the_outgoing_range_distinct_and_bindable() {
        let text = std::fs::read_to_string(RANGE_FILE).unwrap();
        let start = range_start(&text).unwrap();
        let ports = free(6).unwrap();
        assert_eq!(ports.len(), 6);
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 6, "{ports:?}");
        for p in &ports {
            assert!((LOWEST..start).contains(p), "{p} not below {start}");
        }
        // Given back: each can be bound again.
        for p in &ports {
            TcpListener::bind(("127.0.0.1", *p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        }
    }

    #[test]
    fn a_port_range_line_parses_and_garbage_is_refused() {
        assert_eq!(range_start("32768\t60999\n").unwrap(), 32768);
        assert!(range_start("").is_err());
        assert!(range_start("x 60999").is_err());
    }

    #[test]
    fn too_few_free_ports_is_an_error() {
        // Nothing lies below the lowest port handed out.
        assert!(free_below(LOWEST, 1).is_err());
    }
}
