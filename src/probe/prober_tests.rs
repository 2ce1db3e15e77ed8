use super::*;
use crate::pool::node::NodeFacts;
use crate::pool::saved::HealthChanges;

fn key(kind: ProbeKind, addr: &str, network: Network) -> ProbeKey {
    ProbeKey {
        kind,
        addr: addr.into(),
        url: None,
        magic: [0; 4],
        network,
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(1),
    }
}

#[tokio::test]
async fn electrum_servers_of_a_named_network_are_enlisted_while_probed() {
    let prober = Prober::new(TaskTracker::new(), CancellationToken::new());
    let regtest = Network::LitecoinRegtest;
    let a = prober.enlist(&key(ProbeKind::Electrum, "a:1", regtest));
    let b = prober.enlist(&key(ProbeKind::ElectrumTls, "b:1", regtest));
    assert!(a.is_some() && b.is_some());
    let p2p = prober.enlist(&key(ProbeKind::BitcoinP2p, "c:1", regtest));
    let custom = prober.enlist(&key(ProbeKind::Electrum, "d:1", Network::Custom));
    assert!(p2p.is_none() && custom.is_none());
    let chain = prober.chain(regtest).unwrap();
    let agreement = chain.agreement();
    for server in ["a:1", "b:1", "c:1"] {
        agreement.claim(server, 5000);
    }
    // A and B are all the servers whose word is needed.
    assert_eq!(agreement.wants_word("a:1", 0), Some(4000));
    assert_eq!(agreement.wants_word("c:1", 0), None);
    // With B's probe gone, A is alone.
    drop(b);
    assert_eq!(agreement.wants_word("a:1", 0), None);
    drop(a);
}

/// The health settings of a one-pool config with `health`.
fn health(health: &str) -> HealthConfig {
    let text = format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    health: {{ {health} }}\n    \
         backends: [h:1]\n"
    );
    let config = crate::config::Config::parse(&text, std::path::Path::new("t.yaml")).unwrap();
    config.pools[0].health.clone()
}

#[test]
fn each_pool_judges_the_node_by_its_own_requirement() {
    let plain = NodeFacts::p2p(0x0100_0409, 70016, "/LitecoinCore:0.21.2.1/", 5);
    let report = Report::with_height(Verdict::Healthy, 5, "height 5").with_node(plain);
    let mwebd = health("probe: bitcoin-p2p, network: litecoin-regtest, require_services: mwebd");
    let judged_mwebd = judged(&report, &mwebd);
    let why = judged_mwebd.unfit.as_ref().map(ToString::to_string);
    assert_eq!(
        why.as_deref(),
        Some("lacks compact_filters, mweb_light_client")
    );
    // The rest of the report is the probe's, untouched.
    assert_eq!(
        Report {
            unfit: None,
            ..judged_mwebd
        },
        report
    );
    let free = health("probe: bitcoin-p2p, network: litecoin-regtest");
    assert_eq!(judged(&report, &free).unfit, None);
    // No facts, nothing judged.
    let down = Report::new(Verdict::Down, "refused");
    assert_eq!(judged(&down, &mwebd), down);
}

#[test]
fn an_electrum_server_is_held_to_the_genesis_of_the_pools_network() {
    let regtest = pow::params(Network::LitecoinRegtest).unwrap().genesis_hex();
    let server = NodeFacts::electrum("ElectrumX 2.0.0", "1.4", Some("1.7"), Some(&regtest));
    let report = Report::new(Verdict::Unknown, "tip").with_node(server);
    let on_regtest = health("probe: electrum, network: litecoin-regtest");
    assert_eq!(judged(&report, &on_regtest).unfit, None);
    let on_mainnet = health("probe: electrum, network: litecoin");
    let why = judged(&report, &on_mainnet).unfit.map(|u| u.to_string());
    assert_eq!(why, Some(format!("genesis {regtest} is not litecoin's")));
    // A custom network has no genesis to hold it to.
    let custom = health("probe: electrum, magic: 0a0b0c0d");
    assert_eq!(requirement(&custom).genesis, None);
    assert_eq!(judged(&report, &custom).unfit, None);
}

/// A pool with one backend `a`, subscribed to a probe task's list, and
/// that probe's key with an interval of an hour.
fn one_subscriber() -> (Arc<Pool>, Subscribers, ProbeKey) {
    subscriber_of(one_pool(None))
}

/// A pool with one backend `a`, with a change signal of its own or `changes`.
fn one_pool(changes: Option<&Arc<HealthChanges>>) -> Arc<Pool> {
    let text = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
                backends: [{ name: a, addr: \"h:1\" }]\n";
    let config = crate::config::Config::parse(text, std::path::Path::new("t.yaml")).unwrap();
    let pool = Pool::new(config.pools[0].clone(), CancellationToken::new());
    Arc::new(match changes {
        Some(changes) => pool.with_changes(changes.clone()),
        None => pool,
    })
}

/// `pool`'s backend `a` subscribed to a probe task's list, and that
/// probe's key with an interval of an hour.
fn subscriber_of(pool: Arc<Pool>) -> (Arc<Pool>, Subscribers, ProbeKey) {
    let (id, _) = pool.probing().probe_targets()[0].clone();
    let subs: Subscribers = Arc::default();
    lock(&subs.list).push((Arc::downgrade(&pool), id));
    let key = ProbeKey {
        interval: Duration::from_secs(3600),
        ..key(ProbeKind::Connect, "h:1", Network::Custom)
    };
    (pool, subs, key)
}

/// Wait for the next probe (the last began at `started`); how long the
/// wait lasted: on paused time, exactly when it woke (to the timer's
/// millisecond).
async fn wait(prober: &Prober, key: &ProbeKey, subs: &Subs, started: Instant) -> Duration {
    wait_while(prober, (key, subs, started), Duration::ZERO, || {}).await
}

/// As [`wait`], with `act` done `after` into the wait.
async fn wait_while(
    prober: &Prober,
    (key, subs, started): (&ProbeKey, &Subs, Instant),
    after: Duration,
    act: impl FnOnce(),
) -> Duration {
    let t0 = Instant::now();
    let meanwhile = async {
        tokio::time::sleep(after).await;
        act();
    };
    let (woke, ()) = tokio::join!(prober.wait_next(key, subs, started), meanwhile);
    assert!(woke, "not a shutdown");
    let d = t0.elapsed();
    Duration::from_millis(d.as_millis() as u64)
}

fn looks(subs: &Subs) -> usize {
    subs.looks.load(std::sync::atomic::Ordering::Relaxed)
}

fn quarantine(pool: &Pool, ms: u64) {
    pool.operator()
        .quarantine("a", Duration::from_millis(ms))
        .unwrap();
}

const HOUR: u64 = 3_600_000;

#[tokio::test(start_paused = true)]
async fn with_nothing_due_a_probe_sleeps_its_whole_interval_in_one_look() {
    let prober = Prober::new(TaskTracker::new(), CancellationToken::new());
    let (_pool, subs, key) = one_subscriber();
    let waited = wait(&prober, &key, &subs, Instant::now()).await;
    assert_eq!(waited, key.interval);
    // Once going to sleep, once at the interval: not once a second.
    assert_eq!(looks(&subs), 2);
}

#[tokio::test(start_paused = true)]
async fn a_window_end_is_acted_on_at_the_first_look_after_it() {
    let prober = Prober::new(TaskTracker::new(), CancellationToken::new());
    let (pool, subs, key) = one_subscriber();
    let started = Instant::now();
    quarantine(&pool, 2500);
    let waited = wait(&prober, &key, &subs, started).await;
    assert_eq!(waited, Duration::from_secs(3));
    assert_eq!(looks(&subs), 2, "asleep until the look that acts");
}

#[tokio::test(start_paused = true)]
async fn a_window_begun_or_released_while_a_probe_waits_moves_its_wake() {
    let prober = Prober::new(TaskTracker::new(), CancellationToken::new());
    let (pool, subs, key) = one_subscriber();
    // Begun 10 s into the wait, for 4.5 s: acted on at the look at 15 s.
    let waited = wait_while(
        &prober,
        (&key, &subs, Instant::now()),
        Duration::from_secs(10),
        || {
            quarantine(&pool, 4500);
        },
    )
    .await;
    assert_eq!(waited, Duration::from_secs(15));
    assert_eq!(looks(&subs), 3, "going to sleep, at the change, at 15 s");
    // An hour's window released 3.3 s into the wait: acted on at 4 s.
    let started = Instant::now();
    quarantine(&pool, HOUR);
    let waited = wait_while(
        &prober,
        (&key, &subs, started),
        Duration::from_millis(3300),
        || {
            assert_eq!(pool.operator().release("a"), Ok(true));
        },
    )
    .await;
    assert_eq!(waited, Duration::from_secs(4));
}

#[tokio::test(start_paused = true)]
async fn subscribers_without_one_change_signal_are_looked_at_every_step() {
    let prober = Prober::new(TaskTracker::new(), CancellationToken::new());
    let (pool, subs, key) = one_subscriber();
    // A second pool made apart: a signal of its own.
    let (other, other_subs, _) = one_subscriber();
    let other_entry = lock(&other_subs.list)[0].clone();
    lock(&subs.list).push(other_entry);
    assert!(subs.changes().is_none());
    let at = Duration::from_millis(10_500);
    let waited = wait_while(&prober, (&key, &subs, Instant::now()), at, || {
        quarantine(&pool, 4000);
    })
    .await;
    assert_eq!(waited, Duration::from_secs(15));
    assert_eq!(looks(&subs), 16, "one look a second, from 0 s to 15 s");
    drop(other);
}

#[tokio::test(start_paused = true)]
async fn looks_fall_from_the_start_of_the_wait_and_only_ends_since_the_probe_count() {
    let prober = Prober::new(TaskTracker::new(), CancellationToken::new());
    let (pool, subs, key) = one_subscriber();
    // The probe began 300 ms before the wait: the looks still fall on
    // whole seconds from the wait's start.
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    quarantine(&pool, 2500);
    let waited = wait(&prober, &key, &subs, started).await;
    assert_eq!(waited, Duration::from_secs(3));
    // A window that ended after the probe began but before the wait: the
    // first look acts on it.
    let started = Instant::now();
    quarantine(&pool, 200);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let waited = wait(&prober, &key, &subs, started).await;
    assert_eq!(waited, Duration::from_secs(1));
    // One that ended before the probe began: the probe saw it out.
    quarantine(&pool, 200);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let waited = wait(&prober, &key, &subs, Instant::now()).await;
    assert_eq!(waited, key.interval);
}

#[tokio::test(start_paused = true)]
async fn an_end_learnt_of_at_a_change_waits_for_the_next_look() {
    let prober = Prober::new(TaskTracker::new(), CancellationToken::new());
    let changes = Arc::new(HealthChanges::default());
    let (pool, subs, key) = subscriber_of(one_pool(Some(&changes)));
    let back = one_pool(Some(&changes));
    // A backend not yet among the subscribers ends a window at 1.2 s; it
    // joins them at 2.5 s (as a discovered member returns with the window
    // it left with), told by a change: acted on at the look at 3 s, as
    // a look would have found it, not at 2.5 s.
    let started = Instant::now();
    quarantine(&back, 1200);
    let waited = wait_while(
        &prober,
        (&key, &subs, started),
        Duration::from_millis(2500),
        || {
            let (id, _) = back.probing().probe_targets()[0].clone();
            lock(&subs.list).push((Arc::downgrade(&back), id));
            quarantine(&pool, HOUR);
        },
    )
    .await;
    assert_eq!(waited, Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn the_bell_ends_a_wait_at_once() {
    let prober = Prober::new(TaskTracker::new(), CancellationToken::new());
    let (_pool, subs, key) = one_subscriber();
    let at = Duration::from_millis(700);
    let waited = wait_while(&prober, (&key, &subs, Instant::now()), at, || {
        subs.now.notify_one();
    })
    .await;
    assert_eq!(waited, at);
}
