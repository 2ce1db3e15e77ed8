//! Saving and restoring health records: the round trip in wall-clock time,
//! windows that ended while down, backends that are not (or no longer) the
//! same node, and the change signal.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::config::Config;
use crate::pool::close::Closer;
use crate::pool::health::QuarantineReason;
use crate::pool::registry::ConnEntry;
use crate::pool::report::{Report, Verdict};

const BASE: Duration = Duration::from_secs(60);

/// Pool `p` with backends `a`, `b`, `c` at ports 9, 10, 11; base 1m, max
/// 1h, one bad probe quarantines.
fn pool() -> Arc<Pool> {
    let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
                quarantine: { base: 1m, max: 1h }\n    health: { fall: 1 }\n    \
                backends:\n      - { name: a, addr: \"127.0.0.1:9\" }\n      \
                - { name: b, addr: \"127.0.0.1:10\" }\n      \
                - { name: c, addr: \"127.0.0.1:11\" }\n";
    let config = Config::parse(yaml, "inline.yaml".as_ref()).unwrap();
    Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()))
}

fn id(pool: &Pool, name: &str) -> u64 {
    let targets = pool.probing().probe_targets();
    targets.iter().find(|(_, c)| c.name == name).unwrap().0
}

/// A `down` probe of `name` applied at `now`.
fn down(pool: &Pool, name: &str, now: Instant) {
    let b = id(pool, name);
    let epoch = pool.probing().epoch_of(b).unwrap();
    pool.probing()
        .apply_probe(b, &Report::new(Verdict::Down, "refused"), epoch, now);
}

fn saved<'a>(all: &'a [SavedBackend], name: &str) -> &'a SavedBackend {
    all.iter().find(|s| s.name == name).unwrap()
}

fn close_to(a: SystemTime, b: SystemTime, within: Duration) -> bool {
    a.duration_since(b)
        .or_else(|_| b.duration_since(a))
        .is_ok_and(|d| d <= within)
}

#[test]
fn windows_and_strikes_survive_a_round_trip_through_json() {
    let old = pool();
    let wall = SystemTime::now();
    old.operator()
        .quarantine("a", Duration::from_secs(600))
        .unwrap();
    // b: taken out, its window over and still down: the second, doubled one.
    let now = Instant::now();
    down(&old, "b", now);
    down(&old, "b", now + BASE + Duration::from_secs(1));
    let out = old.saved().save();
    assert_eq!(out.len(), 3);
    let a = saved(&out, "a");
    let qa = a.quarantine.unwrap();
    assert_eq!(qa.reason, QuarantineReason::Manual);
    assert!(
        close_to(
            qa.until,
            wall + Duration::from_secs(600),
            Duration::from_secs(1)
        ),
        "{qa:?}"
    );
    let b = saved(&out, "b");
    assert_eq!(b.strikes, 2);
    assert_eq!(b.quarantine.unwrap().reason, QuarantineReason::Down);
    assert_eq!(b.last_probe.as_ref().unwrap().detail, "refused");

    let json = serde_json::to_string(&out).unwrap();
    let back: Vec<SavedBackend> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, out);

    let new = pool();
    let version = new.saved().changes().version();
    assert_eq!(new.saved().restore(&back, SystemTime::now()), 3);
    assert!(
        new.saved().changes().version() > version,
        "the writer is told"
    );
    let again = new.saved().save();
    for (was, is) in out.iter().zip(&again) {
        assert_eq!((&was.name, was.strikes), (&is.name, is.strikes));
        assert_eq!(was.base, is.base);
        assert_eq!(was.last_probe, is.last_probe);
        match (was.quarantine, is.quarantine) {
            (None, None) => {}
            (Some(w), Some(i)) => {
                assert_eq!(w.reason, i.reason);
                assert!(close_to(w.until, i.until, Duration::from_millis(100)));
            }
            other => panic!("{}: {other:?}", was.name),
        }
    }
    let snap = new.view().snapshot();
    assert_eq!(snap.backends[0].state, State::Quarantined);
    assert_eq!(snap.backends[1].state, State::Down);
    assert_eq!(snap.backends[1].strikes, 2);
    assert_eq!(snap.backends[2].state, State::Unknown);
}

#[test]
fn a_restored_window_takes_the_backend_out_at_once_and_stales_probes() {
    let pool = pool();
    let a = id(&pool, "a");
    let epoch = pool.probing().epoch_of(a).unwrap();
    let window = QuarantineSnapshot {
        until: SystemTime::now() + Duration::from_secs(300),
        reason: QuarantineReason::Manual,
    };
    let record = SavedBackend {
        base: State::Healthy,
        height: Some(7),
        proven: true,
        ..SavedBackend::new("a".into(), "127.0.0.1:9".into(), Some(window), 0)
    };
    assert_eq!(pool.saved().restore(&[record], SystemTime::now()), 1);
    for conn in 0..3 {
        let entry = ConnEntry::new("127.0.0.1:5".parse().unwrap(), Arc::new(Closer::new()));
        let (_lease, target) = pool.legs().reserve(conn, entry, &[]).unwrap();
        assert_ne!(target.config.name, "a", "client {conn} sent to a");
    }
    // A probe that started before the restore is dropped.
    let healthy = Report::new(Verdict::Healthy, "ok");
    pool.probing().apply_probe(
        a,
        &healthy,
        epoch,
        Instant::now() + Duration::from_secs(400),
    );
    let snap = pool.view().snapshot();
    assert_eq!(snap.backends[0].state, State::Quarantined);
    assert_eq!(
        (snap.backends[0].height, snap.backends[0].proven),
        (Some(7), true)
    );
}

/// A `healthy` probe of `name` applied at `now`.
fn healthy(pool: &Pool, name: &str, now: Instant) {
    let b = id(pool, name);
    let epoch = pool.probing().epoch_of(b).unwrap();
    pool.probing()
        .apply_probe(b, &Report::new(Verdict::Healthy, "ok"), epoch, now);
}

#[test]
fn a_window_that_ended_while_down_still_waits_for_a_probe_and_keeps_its_strikes() {
    let pool = pool();
    let wall = SystemTime::now();
    let ended = QuarantineSnapshot {
        until: wall - Duration::from_secs(1),
        reason: QuarantineReason::Down,
    };
    let mut record = SavedBackend::new("b".into(), "127.0.0.1:10".into(), Some(ended), 3);
    assert_eq!(pool.saved().restore(&[record.clone()], wall), 1);
    let b = &pool.view().snapshot().backends[1];
    assert_eq!((b.state, b.strikes), (State::Down, 3));
    assert!(b.quarantine.is_some(), "the ended window was dropped");
    // Out until a probe passes, not on the clock.
    assert!(!b.state.is_usable());

    // Still down: the next window is the fourth, 8 × base, not base.
    let before = SystemTime::now();
    down(&pool, "b", Instant::now());
    let b = &pool.view().snapshot().backends[1];
    assert_eq!(b.strikes, 4);
    let until = b.quarantine.unwrap().until;
    assert!(
        close_to(until, before + 8 * BASE, Duration::from_secs(1)),
        "{until:?}"
    );

    // Up again once its window ended: one passed probe (`rise: 1`) and it
    // is back.
    let fresh = self::pool();
    fresh.saved().restore(&[record.clone()], wall);
    healthy(&fresh, "b", Instant::now());
    let b = &fresh.view().snapshot().backends[1];
    assert_eq!((b.state, b.quarantine), (State::Healthy, None));

    // The same record, its window still running at `wall`: a probe that
    // passes does not shorten it.
    record.quarantine = record.quarantine.map(|q| QuarantineSnapshot {
        until: wall + Duration::from_secs(30),
        ..q
    });
    let fresh = self::pool();
    fresh.saved().restore(&[record], wall);
    healthy(&fresh, "b", Instant::now());
    assert_eq!(fresh.view().snapshot().backends[1].state, State::Down);
}

#[test]
fn records_of_other_nodes_are_ignored() {
    let old = pool();
    old.operator()
        .quarantine("a", Duration::from_secs(600))
        .unwrap();
    old.operator()
        .quarantine("b", Duration::from_secs(600))
        .unwrap();
    let mut out = old.saved().save();
    // b moved to another address: another node, however it is named.
    out[1].addr = "127.0.0.1:12".into();
    // A backend the config no longer has.
    out[2].name = "gone".into();
    let new = pool();
    assert_eq!(new.saved().restore(&out, SystemTime::now()), 1);
    let states: Vec<State> = new
        .view()
        .snapshot()
        .backends
        .iter()
        .map(|b| b.state)
        .collect();
    assert_eq!(states, [State::Quarantined, State::Unknown, State::Unknown]);
    assert_eq!(new.saved().restore(&[], SystemTime::now()), 0);
}

#[test]
fn every_change_worth_saving_bumps_the_signal_and_nothing_else_does() {
    let pool = pool();
    let mut seen = pool.saved().changes().subscribe();
    let mut bumped = || {
        let yes = seen.has_changed().unwrap();
        seen.borrow_and_update();
        yes
    };
    let b = id(&pool, "b");
    pool.legs().record_served(b);
    assert!(!bumped(), "served changes nothing saved");
    pool.operator()
        .quarantine("a", Duration::from_secs(60))
        .unwrap();
    assert!(bumped(), "manual quarantine");
    assert!(pool.operator().release("a").unwrap());
    assert!(bumped(), "release");
    down(&pool, "b", Instant::now());
    assert!(bumped(), "probe quarantine");
    // Still down inside its window: nothing saved changes.
    down(&pool, "b", Instant::now());
    assert!(!bumped(), "a probe inside the window");
    let c = id(&pool, "c");
    pool.legs().record_connect(c, Instant::now(), true);
    assert!(bumped(), "unknown to healthy");
    pool.legs().record_connect(c, Instant::now(), true);
    assert!(!bumped(), "healthy again");
    let now = Instant::now();
    for _ in 0..3 {
        pool.legs().record_connect(c, now, false);
    }
    // One incident, counted once; below `failures` nothing saved changes.
    assert!(!bumped(), "one connect incident");
}

#[test]
fn a_window_from_a_wrong_clock_is_capped_at_the_longest_it_could_be() {
    let pool = pool();
    let wall = SystemTime::now();
    let century = Duration::from_secs(100 * 365 * 86_400);
    let window = |until, reason| Some(QuarantineSnapshot { until, reason });
    let far = |reason| window(wall + century, reason);
    let records = [
        SavedBackend::new(
            "a".into(),
            "127.0.0.1:9".into(),
            far(QuarantineReason::Down),
            2,
        ),
        SavedBackend::new(
            "b".into(),
            "127.0.0.1:10".into(),
            far(QuarantineReason::Manual),
            0,
        ),
        SavedBackend::new(
            "c".into(),
            "127.0.0.1:11".into(),
            window(wall + 10 * BASE, QuarantineReason::Lagging),
            1,
        ),
    ];
    assert_eq!(pool.saved().restore(&records, wall), 3);
    let snap = pool.view().snapshot();
    let until = |i: usize| snap.backends[i].quarantine.unwrap().until;
    let second = Duration::from_secs(1);
    // Automatic: `quarantine.max` (1h) from now; manual: the longest an
    // operator can ask for; one within bounds: as saved.
    let wanted = [60 * BASE, MAX_MANUAL_WINDOW, 10 * BASE];
    for (i, want) in wanted.into_iter().enumerate() {
        let got = until(i);
        assert!(close_to(got, wall + want, second), "{i}: {got:?}");
    }
    assert_eq!(snap.backends[0].state, State::Down);
    assert_eq!(snap.backends[1].state, State::Quarantined);
}
