//! Spread drains of a pool under paused time: the closes come at the
//! instants the schedule names, oldest first; the last-leg rule holds at
//! each one; a backend back in service keeps the rest; `down` and `0s`
//! drain at once; a removed backend is drained and leaves nothing behind,
//! and so are the connections a live upgrade hands over for one.
//!
//! The test plays the drain task: it calls [`Drains::step`](crate::pool::drain::Drains::step) and
//! advances the paused clock to the deadline it returns.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{self, Instant};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::pool::close::{CloseReason, Closer};
use crate::pool::registry::{BackendId, ConnEntry, ConnId, Lease, Pool};
use crate::pool::report::{Report, Verdict};

const HOUR: Duration = Duration::from_secs(3600);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn yaml(spread: &str, names: &[&str]) -> String {
    let backends: Vec<String> = names
        .iter()
        // The address follows the name, so a reload keeps a backend.
        .map(|n| format!("{{ name: {n}, addr: \"{n}.invalid:9\" }}"))
        .collect();
    format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    rebalance: {{ interval: 0s }}\n    \
         quarantine: {{ base: 1h, max: 1h, failures: 3 }}\n    \
         health: {{ drain_spread: {spread}, fall: 1, rise: 1 }}\n    backends: [{}]\n",
        backends.join(", ")
    )
}

fn pool(spread: &str, names: &[&str]) -> Arc<Pool> {
    let config = Config::parse(&yaml(spread, names), "inline.yaml".as_ref()).unwrap();
    Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()))
}

/// One client connection as a session holds it.
struct Conn {
    id: ConnId,
    backend: BackendId,
    closer: Arc<Closer>,
    lease: Option<Lease>,
}

/// A pool with `per_backend` spliced connections on each backend, placed by
/// selection (least used, ties in config order), ids growing with arrival.
struct Bench {
    pool: Arc<Pool>,
    conns: Vec<Conn>,
    t0: Instant,
    /// (when, conn) of every close seen, in order.
    closes: Vec<(Duration, ConnId)>,
}

impl Bench {
    fn new(spread: &str, names: &[&str], per_backend: usize) -> Bench {
        let mut bench = Bench {
            pool: pool(spread, names),
            conns: Vec::new(),
            t0: Instant::now(),
            closes: Vec::new(),
        };
        for _ in 0..per_backend * names.len() {
            bench.arrive(&[]);
        }
        bench
    }

    /// A client placed by selection (`tried` failed for it) and spliced.
    fn arrive(&mut self, tried: &[BackendId]) -> ConnId {
        let id = self.conns.len() as ConnId + 1;
        let closer = Arc::new(Closer::new());
        let entry = ConnEntry::new("127.0.0.1:5".parse().unwrap(), closer.clone());
        let (lease, target) = self.pool.legs().reserve(id, entry, tried).unwrap();
        assert!(
            self.pool
                .legs()
                .splice_if_wanted(target.id, target.usable, &closer, None)
        );
        self.conns.push(Conn {
            id,
            backend: target.id,
            closer,
            lease: Some(lease),
        });
        id
    }

    /// Connection `id`, handed over by a live upgrade for backend `name`.
    fn take_over(&mut self, id: ConnId, name: &str) {
        let closer = Arc::new(Closer::handed(0, 0, Duration::ZERO));
        let entry = ConnEntry::new("127.0.0.1:5".parse().unwrap(), closer.clone());
        let addr = format!("{name}.invalid:9");
        let (lease, target) = self.pool.upgrade().take_conn(id, entry, name, &addr);
        self.conns.push(Conn {
            id,
            backend: target.id,
            closer,
            lease: Some(lease),
        });
    }

    fn id(&self, name: &str) -> BackendId {
        let m = self.pool.backends();
        m.active
            .iter()
            .find(|b| b.config().name == name)
            .unwrap()
            .id()
    }

    fn ids_on(&self, backend: BackendId) -> Vec<ConnId> {
        let on = self.conns.iter().filter(|c| c.backend == backend);
        on.map(|c| c.id).collect()
    }

    /// Note the connections asked to close since the last look.
    fn look(&mut self) {
        let now = Instant::now() - self.t0;
        for c in &self.conns {
            if c.closer.is_closing() && !self.closes.iter().any(|(_, id)| *id == c.id) {
                self.closes.push((now, c.id));
            }
        }
    }

    /// Play the drain task until `until` (since `t0`): step, note the
    /// closes, sleep to the next deadline. Ends at `until` exactly.
    async fn run_until(&mut self, until: Duration) {
        let end = self.t0 + until;
        loop {
            let next = self.pool.drains().step(Instant::now());
            self.look();
            let at = next.filter(|&at| at <= end).unwrap_or(end);
            if at > Instant::now() {
                time::advance(at - Instant::now()).await;
            }
            if Instant::now() >= end && next.is_none_or(|n| n > end) {
                self.look();
                return;
            }
        }
    }

    fn quarantine(&mut self, name: &str) {
        self.pool.operator().quarantine(name, HOUR).unwrap();
        self.look();
    }

    /// Apply one probe verdict to `name` now.
    fn probe(&mut self, name: &str, verdict: Verdict) {
        let id = self.id(name);
        let epoch = self.pool.probing().epoch_of(id).unwrap();
        let report = Report::new(verdict, "test");
        self.pool
            .probing()
            .apply_probe(id, &report, epoch, Instant::now());
        self.look();
    }

    /// Bring a quarantined `name` back: release, then a passed probe.
    fn bring_back(&mut self, name: &str) {
        assert_eq!(self.pool.operator().release(name), Ok(true));
        self.probe(name, Verdict::Healthy);
        assert!(self.usable(name));
    }

    fn usable(&self, name: &str) -> bool {
        let m = self.pool.backends();
        let b = m.active.iter().find(|b| b.config().name == name).unwrap();
        b.health().is_usable()
    }

    fn closed_ids(&self) -> Vec<ConnId> {
        self.closes.iter().map(|(_, id)| *id).collect()
    }

    fn close_times(&self) -> Vec<Duration> {
        self.closes.iter().map(|(at, _)| *at).collect()
    }
}

fn every_100ms(from: u64, n: u64) -> Vec<Duration> {
    (0..n).map(|i| ms(from + 100 * i)).collect()
}

#[tokio::test(start_paused = true)]
async fn fifty_connections_close_over_the_spread_oldest_first() {
    let mut bench = Bench::new("5s", &["a", "b"], 50);
    let (a, b) = (bench.id("a"), bench.id("b"));
    bench.quarantine("a");
    bench.run_until(ms(20_000)).await;

    // One every 100 ms from 0 to 4.9 s, never two at once, oldest first.
    assert_eq!(bench.close_times(), every_100ms(0, 50));
    assert_eq!(bench.closed_ids(), bench.ids_on(a));
    for c in bench.conns.iter().filter(|c| c.backend == a) {
        assert_eq!(c.closer.reason(), CloseReason::Drained);
    }
    assert!(
        bench
            .ids_on(b)
            .iter()
            .all(|id| !bench.closed_ids().contains(id))
    );
    assert!(
        bench.pool.backends().active[0].drain().is_none(),
        "the drain ended"
    );
    assert_eq!(bench.pool.drains().step(Instant::now()), None);
}

#[tokio::test(start_paused = true)]
async fn zero_spread_closes_every_connection_at_once() {
    let mut bench = Bench::new("0s", &["a", "b"], 50);
    let a = bench.id("a");
    bench.quarantine("a");
    assert_eq!(bench.close_times(), vec![Duration::ZERO; 50]);
    assert_eq!(bench.closed_ids(), bench.ids_on(a));
    assert_eq!(
        bench.pool.drains().step(Instant::now()),
        None,
        "nothing left"
    );
}

#[tokio::test(start_paused = true)]
async fn a_down_backend_is_drained_at_once_despite_the_spread() {
    let mut bench = Bench::new("5s", &["a", "b"], 50);
    let a = bench.id("a");
    bench.probe("a", Verdict::Down);
    assert_eq!(bench.close_times(), vec![Duration::ZERO; 50]);
    assert_eq!(bench.closed_ids(), bench.ids_on(a));

    // Client connects that fail make it down too.
    let mut bench = Bench::new("5s", &["a", "b"], 10);
    let a = bench.id("a");
    for _ in 0..3 {
        // Each failure a new incident: it began after the last one.
        time::advance(ms(1)).await;
        bench.pool.legs().record_connect(a, Instant::now(), false);
    }
    bench.look();
    assert_eq!(bench.closed_ids(), bench.ids_on(a));
}

#[tokio::test(start_paused = true)]
async fn a_backend_back_in_service_within_the_window_keeps_the_rest() {
    let mut bench = Bench::new("5s", &["a", "b"], 50);
    let a = bench.id("a");
    bench.quarantine("a");
    bench.run_until(ms(1050)).await;
    assert_eq!(bench.close_times(), every_100ms(0, 11));

    // Released: its window is over, its next probe decides; nothing more
    // is closed meanwhile, nor once that probe brings it back.
    assert_eq!(bench.pool.operator().release("a"), Ok(true));
    bench.run_until(ms(1500)).await;
    assert_eq!(bench.closes.len(), 11);
    bench.probe("a", Verdict::Healthy);
    bench.run_until(ms(20_000)).await;
    assert_eq!(bench.closes.len(), 11, "closed after it was back");
    assert_eq!(bench.closed_ids(), bench.ids_on(a)[..11]);
    assert!(bench.pool.backends().active[0].drain().is_none());
}

#[tokio::test(start_paused = true)]
async fn unhealthy_by_probe_is_spread_and_stops_when_healthy_again() {
    let mut bench = Bench::new("10s", &["a", "b"], 10);
    bench.probe("a", Verdict::Unhealthy);
    assert!(!bench.usable("a"));
    // 10 over 10 s: one a second.
    bench.run_until(ms(3500)).await;
    assert_eq!(bench.close_times(), [ms(0), ms(1000), ms(2000), ms(3000)]);
    bench.bring_back("a");
    bench.run_until(ms(20_000)).await;
    assert_eq!(bench.closes.len(), 4);
}

/// Checked again before each close: with the other backend out too, the
/// drain holds; once it is usable again the drain goes on at its pace.
#[tokio::test(start_paused = true)]
async fn the_last_leg_rule_holds_at_every_close() {
    let mut bench = Bench::new("5s", &["a", "b"], 50);
    let a = bench.id("a");
    bench.quarantine("a");
    held_by_b_then_resumed(&mut bench, a).await;
}

/// A's drain, started at 0, with B out from 1.05 s to 3 s: A is then the
/// last leg and nothing more of it closes; once B is back, A's drain
/// resumes at once, at the same pace, oldest first.
async fn held_by_b_then_resumed(bench: &mut Bench, a: BackendId) {
    bench.run_until(ms(1050)).await;
    assert_eq!(bench.closes.len(), 11);
    bench.quarantine("b");
    assert_eq!(
        bench.pool.drains().step(Instant::now()),
        None,
        "no deadline while held"
    );
    bench.run_until(ms(3000)).await;
    assert_eq!(bench.closes.len(), 11, "closed the last leg");
    assert!(
        bench
            .ids_on(bench.id("b"))
            .iter()
            .all(|id| !bench.closed_ids().contains(id))
    );

    bench.bring_back("b");
    bench.run_until(ms(20_000)).await;
    let mut expected = every_100ms(0, 11);
    expected.extend(every_100ms(3000, 39));
    assert_eq!(bench.close_times(), expected);
    assert_eq!(bench.closed_ids(), bench.ids_on(a));
}

/// A client that fails open onto the draining backend (every usable one
/// failed for it) is closed by the running drain, at its pace.
#[tokio::test(start_paused = true)]
async fn a_fail_open_arrival_is_closed_by_the_running_drain() {
    let mut bench = Bench::new("10s", &["a", "b"], 2);
    let (a, b) = (bench.id("a"), bench.id("b"));
    bench.quarantine("a");
    bench.run_until(ms(1000)).await;
    let late = bench.arrive(&[b]);
    assert_eq!(bench.conns.last().unwrap().backend, a, "failed open onto a");
    bench.run_until(ms(20_000)).await;
    let on_a = bench.ids_on(a);
    assert_eq!(bench.closed_ids(), on_a);
    assert_eq!(on_a.last(), Some(&late));
    // 2 planned over 10 s: 0 and 5 s; the arrival keeps the pace: 10 s.
    assert_eq!(bench.close_times(), [ms(0), ms(5000), ms(10_000)]);
}

#[tokio::test(start_paused = true)]
async fn a_backend_removed_by_a_reload_is_drained_and_leaves_nothing_behind() {
    let mut bench = Bench::new("5s", &["a", "b"], 50);
    let a = bench.id("a");
    let next = Config::parse(&yaml("5s", &["b"]), "inline.yaml".as_ref()).unwrap();
    bench.pool.reconfigure(next.pools[0].clone());
    bench.look();

    // Out of selection and of snapshots at once, still drained.
    let names: Vec<String> = bench
        .pool
        .view()
        .snapshot()
        .backends
        .into_iter()
        .map(|b| b.name)
        .collect();
    assert_eq!(names, ["b"]);
    assert_eq!(bench.pool.backends().leaving.len(), 1);
    let newcomer = bench.arrive(&[]);
    assert_ne!(
        bench.conns.last().unwrap().backend,
        a,
        "conn {newcomer} placed on a"
    );

    bench.run_until(ms(20_000)).await;
    assert_eq!(bench.close_times(), every_100ms(0, 50));
    assert_eq!(bench.closed_ids(), bench.ids_on(a));
    for c in bench.conns.iter().filter(|c| c.backend == a) {
        assert_eq!(c.closer.reason(), CloseReason::BackendRemoved);
    }
    // Its sessions end: their leases unregister from the leaving backend,
    // and the last one takes it away.
    assert_eq!(
        bench.pool.backends().leaving.len(),
        1,
        "connections still registered"
    );
    for c in bench.conns.iter_mut().filter(|c| c.backend == a) {
        c.lease = None;
    }
    assert!(bench.pool.backends().leaving.is_empty());
    assert_eq!(bench.pool.drains().step(Instant::now()), None);
}

/// A live upgrade's new process whose config has no `a`: the connections
/// handed over for `a` join one leaving backend, kept until all have come
/// over, then drained as a reload drains them.
#[tokio::test(start_paused = true)]
async fn connections_taken_over_for_a_removed_backend_drain_as_on_a_reload() {
    let mut bench = Bench::new("5s", &["b"], 0);
    // Handed over idlest first, not oldest first.
    (1..=50).rev().for_each(|id| bench.take_over(id, "a"));
    (51..=60).for_each(|id| bench.take_over(id, "b"));
    bench.conns.sort_by_key(|c| c.id);
    let a = bench.conns[0].backend;
    assert_eq!(bench.ids_on(a), (1..=50).collect::<Vec<_>>());
    assert_eq!(bench.pool.backends().leaving.len(), 1);
    bench.pool.drains().step(Instant::now());
    bench.look();
    assert!(bench.closes.is_empty(), "closed before all came over");

    bench.pool.drains().recheck();
    held_by_b_then_resumed(&mut bench, a).await;
    for c in bench.conns.iter_mut().filter(|c| c.backend == a) {
        assert_eq!(c.closer.reason(), CloseReason::BackendRemoved);
        c.lease = None;
    }
    assert!(bench.pool.backends().leaving.is_empty());
}

/// A removed backend put back by the next reload, while still drained,
/// returns with the connections it has left.
#[tokio::test(start_paused = true)]
async fn a_removed_backend_put_back_keeps_what_it_has_left() {
    let mut bench = Bench::new("5s", &["a", "b"], 50);
    let a = bench.id("a");
    let parse = |names: &[&str]| {
        let c = Config::parse(&yaml("5s", names), "inline.yaml".as_ref()).unwrap();
        c.pools[0].clone()
    };
    bench.pool.reconfigure(parse(&["b"]));
    bench.run_until(ms(1050)).await;
    bench.pool.reconfigure(parse(&["a", "b"]));
    bench.run_until(ms(20_000)).await;
    assert_eq!(bench.closes.len(), 11);
    assert!(bench.pool.backends().leaving.is_empty());
    assert_eq!(bench.id("a"), a, "the same backend, not a new one");
    assert_eq!(bench.pool.view().snapshot().backends[0].connections, 50);
}

/// A removed backend keeps the last-leg rule too: held while no backend is
/// usable, then on at the same pace, not in a burst.
#[tokio::test(start_paused = true)]
async fn a_removed_backend_is_held_as_the_last_leg_and_resumes_at_its_pace() {
    let mut bench = Bench::new("5s", &["a", "b"], 50);
    let a = bench.id("a");
    let next = Config::parse(&yaml("5s", &["b"]), "inline.yaml".as_ref()).unwrap();
    bench.pool.reconfigure(next.pools[0].clone());
    held_by_b_then_resumed(&mut bench, a).await;
}

/// Its window over but not yet stepped past, a spread drain's backend is
/// found down: the rest go at once.
#[tokio::test(start_paused = true)]
async fn a_backend_found_down_mid_drain_loses_the_rest_at_once() {
    let mut bench = Bench::new("5s", &["a", "b"], 50);
    let a = bench.id("a");
    bench.pool.operator().quarantine("a", ms(1000)).unwrap();
    bench.run_until(ms(950)).await;
    assert_eq!(bench.closes.len(), 10);
    time::advance(ms(60)).await;
    bench.probe("a", Verdict::Down);
    let mut expected = every_100ms(0, 10);
    expected.extend(vec![ms(1010); 40]);
    assert_eq!(bench.close_times(), expected);
    assert_eq!(bench.closed_ids(), bench.ids_on(a));
}

/// Quarantined by hand while it is the last usable backend: its
/// connections are kept and counted in the answer; once another backend
/// is usable they drain.
#[tokio::test(start_paused = true)]
async fn quarantining_the_last_usable_backend_keeps_and_reports_its_connections() {
    let mut bench = Bench::new("0s", &["a", "b"], 3);
    let (a, b) = (bench.id("a"), bench.id("b"));
    assert_eq!(
        bench.pool.operator().quarantine("a", HOUR),
        Ok(0),
        "b takes a's clients"
    );
    bench.look();
    assert_eq!(bench.closed_ids(), bench.ids_on(a));
    assert_eq!(
        bench.pool.operator().quarantine("b", HOUR),
        Ok(3),
        "b is the last leg"
    );
    bench.run_until(ms(5000)).await;
    assert_eq!(bench.closes.len(), 3, "b's connections kept");
    assert_eq!(
        bench
            .pool
            .operator()
            .quarantine("nope", HOUR)
            .map_err(|e| e.backend),
        Err("nope".to_owned())
    );
    bench.bring_back("a");
    bench.run_until(ms(6000)).await;
    let mut closed = bench.ids_on(a);
    closed.extend(bench.ids_on(b));
    assert_eq!(bench.closed_ids(), closed, "b drained once a is back");
}
