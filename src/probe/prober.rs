//! Probe scheduling: one task per distinct probe (`ProbeKey`: same
//! address, kind, URL, magic, interval and timeout), shared by every pool
//! backend that asks for it, so a node behind several pools is probed once
//! per interval. Each result is fanned out to the subscribed backends.
//!
//! Each subscriber's pool judges the node by its own requirement
//! ([`judged`]): the facts are the node's, the fitness the pool's.
//!
//! The first probe runs at once; a probe whose last subscriber left stops.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use crate::config::{
    BackendConfig, HealthConfig, Network, ProbeKind, SecretUrl, default_probe_url,
};
use crate::net::connect;
use crate::pool::node::{self, Requirement};
use crate::pool::registry::{BackendId, Pool};
use crate::pool::report::{Report, Verdict};
use crate::probe::agreed::Enlisted;
use crate::probe::chain::{Chain, Proving};
use crate::probe::http::HttpProber;
use crate::probe::tls::AnyCertTls;
use crate::probe::{electrum, p2p, pow};

/// What makes two backends' probes the same probe.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ProbeKey {
    kind: ProbeKind,
    addr: String,
    url: Option<String>,
    magic: [u8; 4],
    /// Network name: whose headers prove a height.
    network: Network,
    interval: Duration,
    timeout: Duration,
}

/// The backends one probe task serves, and a bell that makes it probe at
/// once (a backend joined and has not been probed yet).
#[derive(Default)]
struct Subs {
    list: Mutex<Vec<(Weak<Pool>, BackendId)>>,
    now: Notify,
    /// Times a waiting probe reckoned its subscribers' windows.
    #[cfg(test)]
    looks: std::sync::atomic::AtomicUsize,
}

type Subscribers = Arc<Subs>;

/// The grid a waiting probe acts on a subscriber's window end by: at the
/// first look after the end, looks falling every `WINDOW_CHECK` from the
/// start of the wait.
const WINDOW_CHECK: Duration = Duration::from_secs(1);

impl Subs {
    /// The soonest end of a subscriber's quarantine window (or release)
    /// after `since`: it may be past already.
    fn soonest_end(&self, since: Instant) -> Option<Instant> {
        #[cfg(test)]
        self.looks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.list)
            .iter()
            .filter_map(|(pool, id)| pool.upgrade()?.probing().window_end(*id))
            .filter(|&end| end > since)
            .min()
    }

    /// A receiver of every health change in the subscribers' pools (a
    /// window begun, renewed or released), or `None` when they do not
    /// share one signal: the pools of a server all share its own, pools
    /// made apart (as in tests) may not.
    fn changes(&self) -> Option<watch::Receiver<u64>> {
        let list = lock(&self.list);
        let mut pools = list.iter().filter_map(|(pool, _)| pool.upgrade());
        let first = pools.next()?;
        let changes = first.saved().changes().clone();
        pools
            .all(|p| Arc::ptr_eq(p.saved().changes(), &changes))
            .then(|| changes.subscribe())
    }
}

/// The first look at or after `t` on the grid of [`WINDOW_CHECK`] steps
/// from `from`, one step at the earliest.
fn look_at(from: Instant, t: Instant) -> Instant {
    let steps = t.saturating_duration_since(from).as_nanos();
    look(from, steps.div_ceil(WINDOW_CHECK.as_nanos()).max(1))
}

/// The first look after `now` on that grid.
fn look_after(from: Instant, now: Instant) -> Instant {
    let steps = now.saturating_duration_since(from).as_nanos();
    look(from, steps / WINDOW_CHECK.as_nanos() + 1)
}

/// The `steps`-th look from `from` (a century's worth at most: windows
/// end within one).
fn look(from: Instant, steps: u128) -> Instant {
    let steps = u32::try_from(steps).unwrap_or(u32::MAX);
    let century = Duration::from_secs(100 * 365 * 86_400);
    from + WINDOW_CHECK.saturating_mul(steps).min(century)
}

/// Resolves at the next change `rx` sees; never without one.
async fn changed(rx: Option<&mut watch::Receiver<u64>>) {
    if let Some(rx) = rx
        && rx.changed().await.is_ok()
    {
        return;
    }
    std::future::pending().await
}

/// Owns the probe tasks.
#[derive(Clone)]
pub struct Prober {
    probes: Arc<Mutex<HashMap<ProbeKey, Subscribers>>>,
    /// What is known of each network's chain, shared by its probes.
    chains: Arc<Mutex<HashMap<Network, Arc<Chain>>>>,
    http: Option<Arc<HttpProber>>,
    /// TLS for `electrum-tls`.
    tls: Option<AnyCertTls>,
    tracker: TaskTracker,
    token: CancellationToken,
}

impl Prober {
    /// A prober whose tasks run on `tracker` until `token` is cancelled.
    pub fn new(tracker: TaskTracker, token: CancellationToken) -> Prober {
        let http = match HttpProber::new() {
            Ok(h) => Some(Arc::new(h)),
            Err(err) => {
                warn!(err = %err, "http_prober_unavailable");
                None
            }
        };
        let tls = match AnyCertTls::new() {
            Ok(tls) => Some(tls),
            Err(err) => {
                warn!(err = %err, "tls_prober_unavailable");
                None
            }
        };
        Prober {
            probes: Arc::default(),
            chains: Arc::default(),
            http,
            tls,
            tracker,
            token,
        }
    }

    /// Probe every backend of `pool`, once its backends are judged against
    /// its requirement now on what their nodes last told (a reload, a
    /// state file or a live upgrade may have changed the requirement since
    /// their probes judged them): the first probes take their time.
    pub fn watch(&self, pool: &Arc<Pool>) {
        let req = requirement(&pool.config().health);
        pool.probing().judge_again(&req, Instant::now());
        for (id, backend) in pool.probing().probe_targets() {
            self.subscribe(pool, id, &backend);
        }
    }

    /// Re-subscribe `pool`'s backends after a reload: removed backends stop
    /// being probed, added ones are probed at once, changed settings take
    /// effect.
    pub fn rewatch(&self, pool: &Arc<Pool>) {
        let weak = Arc::downgrade(pool);
        for subs in lock(&self.probes).values() {
            lock(&subs.list).retain(|(p, _)| !p.ptr_eq(&weak));
        }
        self.watch(pool);
    }

    /// Probe the backend `id` of `pool` that has just joined (a member
    /// found by discovery): its first probe runs at once.
    pub fn watch_one(&self, pool: &Arc<Pool>, id: BackendId, backend: &BackendConfig) {
        self.subscribe(pool, id, backend);
    }

    fn subscribe(&self, pool: &Arc<Pool>, id: BackendId, backend: &BackendConfig) {
        let (key, url) = key_of(&pool.config().health, backend);
        let mut probes = lock(&self.probes);
        if let Some(subs) = probes.get(&key) {
            lock(&subs.list).push((Arc::downgrade(pool), id));
            // Its first probe runs now, not an interval later.
            subs.now.notify_one();
            return;
        }
        let subs: Subscribers = Arc::default();
        lock(&subs.list).push((Arc::downgrade(pool), id));
        probes.insert(key.clone(), subs.clone());
        // Enlisted before any probe runs, for as long as its task does.
        let enlisted = self.enlist(&key);
        let this = self.clone();
        self.tracker.spawn(async move {
            this.probe_loop(key, url, subs).await;
            drop(enlisted);
        });
    }

    /// An Electrum server of a named network is one of those whose word
    /// an agreed anchor needs (see [`crate::probe::agreed`]).
    fn enlist(&self, key: &ProbeKey) -> Option<Enlisted> {
        match key.kind {
            ProbeKind::Electrum | ProbeKind::ElectrumTls => self
                .chain(key.network)
                .map(|chain| Enlisted::new(chain, &key.addr)),
            _ => None,
        }
    }

    async fn probe_loop(self, key: ProbeKey, url: Option<SecretUrl>, subs: Subscribers) {
        let mut started = Instant::now();
        loop {
            let Some(live) = self.live_subscribers(&key, &subs) else {
                return;
            };
            // A backend that is this proxy would be answered by another
            // backend through our own listener: never probe through
            // ourselves; take it out as a client connect would.
            if let Some(to) = self.self_loop(&key, &live).await {
                for (pool, id, _) in live {
                    pool.legs().record_self_loop(id, to);
                }
            } else {
                started = Instant::now();
                let report = tokio::select! {
                    () = self.token.cancelled() => return,
                    r = self.run(&key, url.as_ref(), &live) => r,
                };
                let now = Instant::now();
                for (pool, id, epoch) in live {
                    let report = judged(&report, &pool.config().health);
                    pool.probing().apply_probe(id, &report, epoch, now);
                }
            }
            if !self.wait_next(&key, &subs, started).await {
                return;
            }
        }
    }

    /// Wait until the next probe is due: an interval from now, a joining
    /// backend's bell, or the end of a subscriber's quarantine window (or
    /// its release) since the last probe began, acted on at the first
    /// look after it, looks falling every [`WINDOW_CHECK`]: traffic
    /// returns on the `rise` probes right after a window, not up to an
    /// interval later. The wait sleeps to the look that acts, and wakes
    /// between only when a backend's health changes (a window begun,
    /// renewed or released) to reckon it again, so a probe with nothing
    /// due stays asleep (subscribers without a shared change signal are
    /// looked at on every step). False at shutdown.
    async fn wait_next(&self, key: &ProbeKey, subs: &Subs, started: Instant) -> bool {
        let from = Instant::now();
        let due = from + key.interval;
        // Acted on no earlier than the look at or after this: after a
        // change, the next one; an end learnt of late (a member back with
        // the window it left with) waits for it, as it did for a look.
        let mut first = from;
        loop {
            // Subscribed before looking: a change after the look wakes us.
            let mut changes = subs.changes();
            let now = Instant::now();
            let mut wake = subs.soonest_end(started).map_or(due, |end| {
                look_at(from, end).max(look_at(from, first)).min(due)
            });
            if now >= wake {
                return true;
            }
            if changes.is_none() {
                wake = wake.min(look_after(from, now));
            }
            tokio::select! {
                () = self.token.cancelled() => return false,
                () = subs.now.notified() => return true,
                () = tokio::time::sleep_until(wake) => {}
                () = changed(changes.as_mut()) => first = Instant::now(),
            }
        }
    }

    /// Subscribers still configured, with their epochs now; `None` (and
    /// the probe removed) once there are none.
    fn live_subscribers(
        &self,
        key: &ProbeKey,
        subs: &Subscribers,
    ) -> Option<Vec<(Arc<Pool>, BackendId, u64)>> {
        let mut probes = lock(&self.probes);
        let mut list = lock(&subs.list);
        list.retain(|(pool, id)| {
            pool.upgrade()
                .is_some_and(|p| !p.token.is_cancelled() && p.probing().epoch_of(*id).is_some())
        });
        if list.is_empty() {
            probes.remove(key);
            return None;
        }
        Some(
            list.iter()
                .filter_map(|(pool, id)| {
                    let pool = pool.upgrade()?;
                    let epoch = pool.probing().epoch_of(*id)?;
                    Some((pool, *id, epoch))
                })
                .collect(),
        )
    }

    /// One probe of `key`, boxed: the probe task, alive for every
    /// backend, then carries a pointer rather than room for the largest
    /// kind (TLS, HTTP, a header proof); the room is taken only while a
    /// probe runs.
    fn run<'a>(
        &'a self,
        key: &'a ProbeKey,
        url: Option<&'a SecretUrl>,
        live: &'a [(Arc<Pool>, BackendId, u64)],
    ) -> Pin<Box<dyn Future<Output = Report> + Send + 'a>> {
        Box::pin(async move {
            let (addr, timeout) = (key.addr.as_str(), key.timeout);
            // A claim is proven only when some pool would act on it.
            let wanted = |height: u64| {
                live.iter()
                    .any(|(p, id, _)| p.probing().needs_proof(*id, height))
            };
            let chain = self.chain(key.network);
            let proving = chain.as_deref().map(|chain| Proving {
                chain,
                wanted: &wanted,
            });
            let params = pow::params(key.network);
            match (key.kind, url, &self.http) {
                (ProbeKind::BitcoinP2p, _, _) => {
                    p2p::probe_proving(addr, key.magic, timeout, proving).await
                }
                (ProbeKind::Connect, _, _) => match connect::connect(addr, timeout).await {
                    Ok(_) => Report::new(Verdict::Healthy, "connected"),
                    Err(err) => Report::new(Verdict::Down, err.kind().as_str()),
                },
                (ProbeKind::Blockbook, Some(url), Some(http)) => {
                    http.blockbook(addr, url, timeout).await
                }
                (ProbeKind::Http, Some(url), Some(http)) => http.http(addr, url, timeout).await,
                (ProbeKind::Blockbook | ProbeKind::Http, _, _) => {
                    Report::new(Verdict::Unknown, "no HTTP client")
                }
                (ProbeKind::Electrum, _, _) => {
                    electrum::probe(addr, None, params, proving, timeout).await
                }
                (ProbeKind::ElectrumTls, _, _) => match &self.tls {
                    Some(tls) => electrum::probe(addr, Some(tls), params, proving, timeout).await,
                    None => Report::new(Verdict::Unknown, "no TLS client"),
                },
            }
        })
    }
}

impl Prober {
    /// Our own listener the probed address reaches, if any.
    async fn self_loop(
        &self,
        key: &ProbeKey,
        live: &[(Arc<Pool>, BackendId, u64)],
    ) -> Option<SocketAddr> {
        let (pool, _, _) = live.first()?;
        let reached = crate::net::own::reached_by_name(pool.own(), &key.addr);
        tokio::time::timeout(key.timeout, reached)
            .await
            .ok()
            .flatten()
    }

    /// The shared chain of `network`; none for a custom magic.
    fn chain(&self, network: Network) -> Option<Arc<Chain>> {
        let params = pow::params(network)?;
        let mut chains = lock(&self.chains);
        Some(
            chains
                .entry(params.network)
                .or_insert_with(|| Arc::new(Chain::new(params)))
                .clone(),
        )
    }
}

/// The probe a backend with `health` needs, and the URL it asks.
fn key_of(health: &HealthConfig, backend: &BackendConfig) -> (ProbeKey, Option<SecretUrl>) {
    let url = backend
        .probe_url
        .clone()
        .or_else(|| default_probe_url(health.probe, &backend.addr).map(SecretUrl));
    let key = ProbeKey {
        kind: health.probe,
        addr: backend.addr.clone(),
        url: url.as_ref().map(|u| u.expose().to_string()),
        magic: health.magic,
        network: health.network,
        interval: health.interval,
        timeout: health.timeout,
    };
    (key, url)
}

/// What a pool with `health` asks of its backends' nodes.
pub fn requirement(health: &HealthConfig) -> Requirement {
    let genesis = pow::params(health.network).map(pow::ChainParams::genesis_hex);
    Requirement::of(health, genesis)
}

/// `report` with the judgement of a pool with `health` on the node it
/// describes ([`Report::unfit`]); a report without node facts is not
/// judged.
pub fn judged(report: &Report, health: &HealthConfig) -> Report {
    let unfit = report
        .node
        .as_ref()
        .and_then(|facts| node::judge(&requirement(health), facts).err());
    Report {
        unfit,
        ..report.clone()
    }
}

/// One probe of `backend` as a pool with `health` makes it, judged as the
/// prober judges it for that pool: what its tools and tests see of a node.
/// No height is proven.
///
/// Never panics; returns within the probe's timeout (plus scheduling delay).
pub async fn probe_once(health: &HealthConfig, backend: &BackendConfig) -> Report {
    let prober = Prober::new(TaskTracker::new(), CancellationToken::new());
    let (key, url) = key_of(health, backend);
    let report = prober.run(&key, url.as_ref(), &[]).await;
    judged(&report, health)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
#[path = "prober_tests.rs"]
mod tests;
