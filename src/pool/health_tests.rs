//! Table tests of the health rules.

use super::*;

const S: Duration = Duration::from_secs(1);

fn policy() -> Policy {
    Policy {
        base: 10 * S,
        max: 35 * S,
        failures: 3,
        fall: 2,
        rise: 2,
    }
}

fn q(reason: QuarantineReason, window: Duration) -> Effect {
    Effect::Quarantined { reason, window }
}

#[test]
fn windows_double_and_cap() {
    let p = policy();
    let w: Vec<_> = (1..=5).map(|s| p.window(s)).collect();
    assert_eq!(w, [10 * S, 20 * S, 35 * S, 35 * S, 35 * S]);
    assert_eq!(p.window(u32::MAX), 35 * S);
}

#[test]
fn one_bad_probe_between_good_ones_changes_nothing() {
    let (p, t) = (policy(), Instant::now());
    let mut h = BackendHealth::default();
    for v in [
        ProbeOutcome::Healthy,
        ProbeOutcome::Down,
        ProbeOutcome::Healthy,
    ] {
        assert_eq!(h.probe(v, t, &p), Effect::None);
        assert!(h.is_usable());
    }
    assert_eq!(h.probe(ProbeOutcome::Down, t, &p), Effect::None);
    assert_eq!(
        h.probe(ProbeOutcome::Down, t, &p),
        q(QuarantineReason::Down, 10 * S)
    );
    assert_eq!(h.state(), State::Down);
    assert!(!h.is_usable());
}

#[test]
fn a_node_that_keeps_failing_escalates_and_one_success_resets() {
    let (p, mut t) = (policy(), Instant::now());
    let mut h = BackendHealth::default();
    h.probe(ProbeOutcome::Lagging, t, &p);
    assert_eq!(
        h.probe(ProbeOutcome::Lagging, t, &p),
        q(QuarantineReason::Lagging, 10 * S)
    );
    assert_eq!(h.state(), State::Lagging);
    let mut windows = Vec::new();
    for _ in 0..3 {
        // Inside the window a bad probe neither extends nor shortens it.
        assert_eq!(h.probe(ProbeOutcome::Down, t + S, &p), Effect::None);
        t = h.quarantine.unwrap().until;
        match h.probe(ProbeOutcome::Down, t, &p) {
            Effect::Quarantined { window, .. } => windows.push(window),
            other => panic!("expected re-quarantine, got {other:?}"),
        }
    }
    assert_eq!(windows, [20 * S, 35 * S, 35 * S]);
    // Window over, `rise` = 2 passes bring it back; then a pass in service resets.
    t = h.quarantine.unwrap().until;
    assert_eq!(h.probe(ProbeOutcome::Healthy, t, &p), Effect::None);
    assert!(!h.is_usable(), "one pass is not rise=2");
    assert_eq!(h.probe(ProbeOutcome::Healthy, t, &p), Effect::Released);
    assert_eq!(h.state(), State::Healthy);
    assert_eq!(h.probe(ProbeOutcome::Healthy, t, &p), Effect::None);
    assert_eq!(h.strikes, 0);
    h.probe(ProbeOutcome::Down, t, &p);
    assert_eq!(
        h.probe(ProbeOutcome::Down, t, &p),
        q(QuarantineReason::Down, 10 * S)
    );
}

#[test]
fn return_is_probe_gated_and_passes_inside_the_window_do_not_count() {
    let (p, t) = (policy(), Instant::now());
    let mut h = BackendHealth::default();
    h.probe(ProbeOutcome::Unhealthy, t, &p);
    h.probe(ProbeOutcome::Unhealthy, t, &p);
    for _ in 0..5 {
        assert_eq!(h.probe(ProbeOutcome::Healthy, t + S, &p), Effect::None);
    }
    assert_eq!(h.state(), State::Unhealthy);
    let after = t + 10 * S;
    assert!(
        !h.is_usable(),
        "the window ending alone brings nothing back"
    );
    assert_eq!(h.probe(ProbeOutcome::Healthy, after, &p), Effect::None);
    assert_eq!(h.probe(ProbeOutcome::Unknown, after, &p), Effect::None);
    assert_eq!(h.good_probes, 0, "unknown is not a pass");
    h.probe(ProbeOutcome::Healthy, after, &p);
    assert_eq!(h.probe(ProbeOutcome::Healthy, after, &p), Effect::Released);
}

#[test]
fn manual_quarantine_lasts_exactly_its_window() {
    let (p, t) = (policy(), Instant::now());
    let mut h = BackendHealth::default();
    h.probe(ProbeOutcome::Healthy, t, &p);
    h.quarantine_manual(5 * S, t);
    assert_eq!(h.state(), State::Quarantined);
    for _ in 0..4 {
        assert_eq!(h.probe(ProbeOutcome::Healthy, t + 4 * S, &p), Effect::None);
        assert_eq!(h.probe(ProbeOutcome::Down, t + 4 * S, &p), Effect::None);
    }
    assert_eq!(h.quarantine.unwrap().until, t + 5 * S, "not extended");
    h.probe(ProbeOutcome::Healthy, t + 5 * S, &p);
    assert_eq!(
        h.probe(ProbeOutcome::Healthy, t + 5 * S, &p),
        Effect::Released
    );
}

#[test]
fn release_ends_the_window_but_stays_probe_gated() {
    let (p, t) = (policy(), Instant::now());
    let mut h = BackendHealth::default();
    assert!(!h.release(t), "nothing to release");
    assert_eq!(h.epoch, 0, "a no-op release changes nothing");
    h.quarantine_manual(60 * S, t);
    let e = h.epoch;
    assert!(h.release(t + S));
    assert!(h.epoch > e);
    assert!(!h.is_usable());
    h.probe(ProbeOutcome::Healthy, t + S, &p);
    assert_eq!(h.probe(ProbeOutcome::Healthy, t + S, &p), Effect::Released);
}

#[test]
fn connect_failures_quarantine_and_one_outage_counts_once() {
    let (p, t0) = (policy(), Instant::now());
    let mut h = BackendHealth::default();
    // Ten attempts started together all fail: one incident.
    for i in 0..10 {
        assert_eq!(h.connect_failed(t0, t0 + S + i * S / 100, &p), Effect::None);
    }
    assert_eq!(h.connect_failures, 1);
    assert!(h.is_usable(), "below quarantine.failures");
    assert_eq!(h.connect_failed(t0 + 2 * S, t0 + 2 * S, &p), Effect::None);
    let e = h.epoch;
    assert_eq!(
        h.connect_failed(t0 + 3 * S, t0 + 3 * S, &p),
        q(QuarantineReason::ConnectFailures, 10 * S)
    );
    assert_eq!(h.state(), State::Down);
    assert!(
        h.epoch > e,
        "a client-traffic quarantine makes running probes stale"
    );
}

#[test]
fn a_successful_connect_resets_the_failure_count() {
    let (p, t) = (policy(), Instant::now());
    let mut h = BackendHealth::default();
    h.connect_failed(t, t, &p);
    h.connect_failed(t + S, t + S, &p);
    h.connect_succeeded();
    assert_eq!(h.connect_failures, 0);
    assert_eq!(h.state(), State::Healthy);
    assert_eq!(h.connect_failed(t + 2 * S, t + 2 * S, &p), Effect::None);
}

#[test]
fn unknown_verdicts_keep_a_backend_usable() {
    let (p, t) = (policy(), Instant::now());
    let mut h = BackendHealth::default();
    h.probe(ProbeOutcome::Healthy, t, &p);
    for _ in 0..5 {
        assert_eq!(h.probe(ProbeOutcome::Unknown, t, &p), Effect::None);
    }
    assert_eq!(h.state(), State::Unknown);
    assert!(h.is_usable());
}

fn client(n: u8) -> IpAddr {
    IpAddr::from([10, 0, 0, n])
}

#[test]
fn closes_at_once_count_as_failures_although_every_connect_succeeds() {
    // A node that banned our address: every connect succeeds, every
    // connection is closed at once, whoever the client.
    let (p, t) = (policy(), Instant::now());
    let mut h = BackendHealth::default();
    let mut effects = Vec::new();
    for i in 0..3u8 {
        let at = t + S * u32::from(i);
        h.connect_succeeded();
        effects.push(h.closed_at_once(client(i), at, at, &p));
    }
    assert_eq!(
        effects,
        [
            (Effect::None, true),
            (Effect::None, true),
            (q(QuarantineReason::ConnectFailures, 10 * S), true)
        ]
    );
    assert_eq!(h.state(), State::Down);
}

#[test]
fn closes_at_once_from_one_address_never_reach_the_threshold() {
    // One client sending garbage the node drops: its matter, not the node's.
    let (p, t) = (policy(), Instant::now());
    let mut h = BackendHealth::default();
    let counted: Vec<bool> = (0..9u32)
        .map(|i| {
            let at = t + S * i;
            let (effect, counted) = h.closed_at_once(client(1), at, at, &p);
            assert_eq!(effect, Effect::None, "close {i}");
            counted
        })
        .collect();
    assert_eq!(counted[..3], [true, true, false], "one short of failures");
    assert!(counted[3..].iter().all(|c| !c));
    assert_eq!((h.closes_at_once, h.failures(&p)), (9, 2));
    assert!(h.is_usable());
    // A second address: the node refuses clients, not one client.
    assert_eq!(
        h.closed_at_once(client(2), t + 10 * S, t + 10 * S, &p),
        (q(QuarantineReason::ConnectFailures, 10 * S), true)
    );
}

#[test]
fn closes_at_once_of_one_incident_count_once_and_a_served_client_resets() {
    let (p, t) = (policy(), Instant::now());
    let mut h = BackendHealth::default();
    // Three clients connected at t, all closed: one incident.
    for i in 0..3 {
        h.closed_at_once(client(i), t, t + S, &p);
    }
    assert_eq!(h.closes_at_once, 1);
    // A failed connect adds to the same count.
    assert_eq!(h.connect_failed(t + 2 * S, t + 2 * S, &p), Effect::None);
    // A connection the node served: the closes were the clients' doing.
    h.served();
    assert_eq!(h.closed_from, ClosedFrom::Nobody);
    assert_eq!(
        h.closed_at_once(client(1), t + 3 * S, t + 3 * S, &p),
        (Effect::None, true)
    );
    assert!(h.is_usable());
    // One close from one address and a connect failure: the close
    // counts (it is under the cap), so the node is out.
    assert_eq!(
        h.connect_failed(t + 4 * S, t + 4 * S, &p),
        q(QuarantineReason::ConnectFailures, 10 * S)
    );
}

#[test]
fn a_self_loop_takes_out_at_once_and_again_for_longer_while_it_lasts() {
    let (p, t) = (policy(), Instant::now());
    let mut h = BackendHealth::default();
    assert_eq!(h.self_loop(t, &p), q(QuarantineReason::SelfLoop, 10 * S));
    assert_eq!(h.state(), State::Down);
    assert_eq!(h.self_loop(t + 9 * S, &p), Effect::None);
    assert_eq!(
        h.self_loop(t + 10 * S, &p),
        q(QuarantineReason::SelfLoop, 20 * S)
    );
}

/// Counters are indexed by `index()`: it must be the position in `ALL`.
#[test]
fn vocabulary_indices_are_positions_in_all() {
    for (i, o) in ProbeOutcome::ALL.into_iter().enumerate() {
        assert_eq!(o.index(), i, "{o:?}");
    }
    for (i, r) in QuarantineReason::ALL.into_iter().enumerate() {
        assert_eq!(r.index(), i, "{r:?}");
    }
}

#[test]
fn a_probe_that_found_it_down_orders_fail_open_like_a_failed_connect() {
    let p = policy();
    let t0 = Instant::now();
    let mut probed = BackendHealth::default();
    let mut dialled = BackendHealth::default();
    assert_eq!(probed.failed_at(), None);
    dialled.connect_failed(t0, t0 + S, &p);
    probed.probe(ProbeOutcome::Down, t0 + 2 * S, &p);
    assert_eq!(probed.failed_at(), Some(t0 + 2 * S));
    assert!(dialled.failed_at() < probed.failed_at());
    // Not down (lagging, unhealthy) is not a failed connect.
    let mut lagging = BackendHealth::default();
    lagging.probe(ProbeOutcome::Lagging, t0 + 3 * S, &p);
    assert_eq!(lagging.failed_at(), None);
    // The probe does not merge client failures into its incident: a connect
    // begun before it still counts.
    probed.connect_failed(t0 + S, t0 + 3 * S, &p);
    assert_eq!(probed.connect_failures, 1);
}

/// Counts put back from a saved record (a state file is outside input)
/// at their largest: the next failure, probe or quarantine stays at the
/// top instead of overflowing (a panic in a debug build, a wrap to 0 and
/// a window back at `base` in a release one).
#[test]
fn counts_restored_at_their_largest_do_not_overflow() {
    let (p, t0) = (policy(), Instant::now());
    let top = Counts {
        strikes: u32::MAX,
        connect_failures: u32::MAX - 1,
        closes_at_once: u32::MAX,
        bad_probes: u32::MAX,
        good_probes: u32::MAX,
    };
    let mut h = BackendHealth::default();
    h.restore(None, top);
    assert_eq!(
        h.connect_failed(t0, t0 + S, &p),
        q(QuarantineReason::ConnectFailures, 35 * S),
        "the longest window"
    );
    assert_eq!(h.strikes, u32::MAX);
    assert_eq!(h.connect_failures, u32::MAX);
    let mut h = BackendHealth::default();
    h.restore(None, top);
    assert_eq!(
        h.probe(ProbeOutcome::Unhealthy, t0, &p),
        q(QuarantineReason::Unhealthy, 35 * S)
    );
    let mut h = BackendHealth::default();
    h.restore(None, top);
    h.probe(ProbeOutcome::Healthy, t0, &p);
    assert!(h.is_usable());
}
