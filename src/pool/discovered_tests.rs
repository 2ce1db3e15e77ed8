//! Discovered members under paused time: a member joins `unknown`, stays
//! while answers name it, is removed only after `hold` of successful
//! answers without it (its connections drained), keeps its connections and
//! record when it comes back within `hold`; a reload that keeps the entry
//! keeps them too; an upgrade carries them; a state file's record waits
//! for the lookup that finds its member.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::{self, Instant};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, Found, PoolConfig};
use crate::pool::close::Closer;
use crate::pool::health::State;
use crate::pool::registry::{ConnEntry, Lease, Pool};
use crate::pool::saved::SavedBackend;
use crate::pool::snapshot::QuarantineSnapshot;

const HOLD: Duration = Duration::from_secs(10);

fn config(backends: &str) -> PoolConfig {
    let yaml = format!(
        "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    rebalance: {{ interval: 0s }}\n    \
         discovery: {{ interval: 1s, hold: 10s }}\n    health: {{ drain_spread: 0s }}\n    \
         backends: [{backends}]\n"
    );
    Config::parse(&yaml, "inline.yaml".as_ref()).unwrap().pools[0].clone()
}

fn pool() -> Arc<Pool> {
    let c = config(
        "{ name: s, addr: \"static.invalid:9\" }, { name: ltc, discover: \"nodes.test:9333\" }",
    );
    Arc::new(Pool::new(c, CancellationToken::new()))
}

fn found(last: u8) -> Found {
    let addr = format!("127.0.0.{last}:9333").parse().unwrap();
    Found {
        key: format!("127.0.0.{last}:9333"),
        addr,
        lower_priority: false,
    }
}

fn names(pool: &Pool) -> Vec<String> {
    pool.view()
        .overview()
        .backends
        .into_iter()
        .map(|b| b.name)
        .collect()
}

/// A spliced connection on the backend selection picks.
fn connect(pool: &Arc<Pool>, id: u64) -> (Arc<Closer>, Lease, String) {
    let closer = Arc::new(Closer::new());
    let entry = ConnEntry::new("127.0.0.1:5".parse().unwrap(), closer.clone());
    let (lease, target) = pool.legs().reserve(id, entry, &[]).unwrap();
    assert!(
        pool.legs()
            .splice_if_wanted(target.id, target.usable, &closer, None)
    );
    (closer, lease, target.config.name.clone())
}

#[tokio::test(start_paused = true)]
async fn members_join_unknown_after_the_static_backends() {
    let pool = pool();
    assert_eq!(names(&pool), ["s"], "nothing found yet");
    let change = pool
        .discovery()
        .apply_lookup("ltc", vec![found(3), found(2)], Instant::now())
        .unwrap();
    assert_eq!(
        (change.added.len(), change.removed, change.members),
        (2, 0, 2)
    );
    assert_eq!(
        names(&pool),
        ["s", "ltc/127.0.0.2:9333", "ltc/127.0.0.3:9333"]
    );
    let snap = pool.view().overview();
    let member = &snap.backends[1];
    assert_eq!(member.state, State::Unknown);
    assert_eq!(member.addr, "127.0.0.2:9333");
    assert_eq!(member.discovered_from.as_deref(), Some("ltc"));
    assert_eq!(snap.backends[0].discovered_from, None);
    // The same answer again changes nothing.
    let again = pool
        .discovery()
        .apply_lookup("ltc", vec![found(2), found(3)], Instant::now())
        .unwrap();
    assert_eq!((again.added.len(), again.removed), (0, 0));
    assert!(
        pool.discovery()
            .apply_lookup("gone", vec![found(2)], Instant::now())
            .is_none()
    );
}

#[tokio::test(start_paused = true)]
async fn a_member_missing_for_hold_is_removed_and_drained() {
    let pool = pool();
    pool.discovery()
        .apply_lookup("ltc", vec![found(2), found(3)], Instant::now())
        .unwrap();
    pool.operator()
        .quarantine("s", Duration::from_secs(3600))
        .unwrap();
    // One connection on each member.
    let (c1, _l1, on1) = connect(&pool, 1);
    let (c2, _l2, on2) = connect(&pool, 2);
    assert_ne!(on1, on2);
    let (on_2, on_3) = if on1.ends_with(".2:9333") {
        (c1, c2)
    } else {
        (c2, c1)
    };
    // Answers without .3, for just under `hold` from the first of them:
    // it stays.
    for _ in 0..10 {
        time::advance(Duration::from_secs(1)).await;
        let c = pool
            .discovery()
            .apply_lookup("ltc", vec![found(2)], Instant::now())
            .unwrap();
        assert_eq!(c.removed, 0);
    }
    assert_eq!(names(&pool).len(), 3);
    assert!(!on_3.is_closing());
    time::advance(Duration::from_secs(1)).await;
    let c = pool
        .discovery()
        .apply_lookup("ltc", vec![found(2)], Instant::now())
        .unwrap();
    assert_eq!((c.removed, c.members), (1, 1));
    assert_eq!(names(&pool), ["s", "ltc/127.0.0.2:9333"]);
    pool.drains().step(Instant::now());
    assert!(
        on_3.is_closing(),
        "a removed member's connections are drained"
    );
    assert!(!on_2.is_closing());
}

#[tokio::test(start_paused = true)]
async fn the_last_usable_leg_is_kept_when_its_member_goes() {
    let pool = pool();
    pool.discovery()
        .apply_lookup("ltc", vec![found(2), found(4)], Instant::now())
        .unwrap();
    pool.operator()
        .quarantine("s", Duration::from_secs(3600))
        .unwrap();
    pool.operator()
        .quarantine("ltc/127.0.0.4:9333", Duration::from_secs(3600))
        .unwrap();
    let (closer, _lease, on) = connect(&pool, 1);
    assert_eq!(on, "ltc/127.0.0.2:9333");
    pool.discovery()
        .apply_lookup("ltc", vec![found(4)], Instant::now())
        .unwrap();
    time::advance(HOLD).await;
    let c = pool
        .discovery()
        .apply_lookup("ltc", vec![found(4)], Instant::now())
        .unwrap();
    assert_eq!(c.removed, 1);
    pool.drains().step(Instant::now());
    assert!(
        !closer.is_closing(),
        "nothing else is usable: the last leg stays"
    );
}

#[tokio::test(start_paused = true)]
async fn a_member_back_within_hold_keeps_its_connections_and_record() {
    let pool = pool();
    pool.discovery()
        .apply_lookup("ltc", vec![found(2), found(3)], Instant::now())
        .unwrap();
    pool.operator()
        .quarantine("ltc/127.0.0.3:9333", Duration::from_secs(3600))
        .unwrap();
    let (closer, _lease, on) = connect(&pool, 1);
    assert_eq!(on, "s");
    // .3 missing, then back before `hold`.
    for _ in 0..5 {
        time::advance(Duration::from_secs(1)).await;
        pool.discovery()
            .apply_lookup("ltc", vec![found(2)], Instant::now())
            .unwrap();
    }
    let c = pool
        .discovery()
        .apply_lookup("ltc", vec![found(2), found(3)], Instant::now())
        .unwrap();
    assert_eq!((c.added.len(), c.removed), (0, 0), "it never left");
    let snap = pool.view().overview();
    let b3 = snap
        .backends
        .iter()
        .find(|b| b.name.ends_with(".3:9333"))
        .unwrap();
    assert_eq!(b3.state, State::Quarantined, "its window is its own");
    assert!(!closer.is_closing());
    // And `hold` counts again from the next answer that leaves it out.
    for _ in 0..9 {
        time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            pool.discovery()
                .apply_lookup("ltc", vec![found(2)], Instant::now())
                .unwrap()
                .removed,
            0
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_flapping_answer_changes_membership_once() {
    let pool = pool();
    let mut changes = 0;
    for round in 0..40 {
        time::advance(Duration::from_secs(1)).await;
        let other = if round % 2 == 0 { found(3) } else { found(4) };
        let c = pool
            .discovery()
            .apply_lookup("ltc", vec![found(2), other], Instant::now())
            .unwrap();
        changes += usize::from(!c.added.is_empty() || c.removed > 0);
    }
    // .3 joins in round 0, .4 in round 1; nothing after.
    assert_eq!(changes, 2);
    assert_eq!(names(&pool).len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_reload_that_keeps_the_entry_keeps_its_members() {
    let pool = pool();
    pool.discovery()
        .apply_lookup("ltc", vec![found(2)], Instant::now())
        .unwrap();
    pool.operator()
        .quarantine("ltc/127.0.0.2:9333", Duration::from_secs(3600))
        .unwrap();
    // Same entry, now a backup; another static backend.
    pool.reconfigure(config(
        "{ name: s, addr: \"static.invalid:9\" }, { name: t, addr: \"t.invalid:9\" }, \
         { name: ltc, discover: \"nodes.test:9333\", backup: true }",
    ));
    let snap = pool.view().overview();
    let m = snap
        .backends
        .iter()
        .find(|b| b.name == "ltc/127.0.0.2:9333")
        .unwrap();
    assert_eq!(m.state, State::Quarantined);
    assert!(m.backup, "the entry's new settings apply");
    // Another lookup: its members go.
    pool.reconfigure(config(
        "{ name: s, addr: \"static.invalid:9\" }, { name: ltc, discover: \"other.test:9333\" }",
    ));
    assert_eq!(names(&pool), ["s"]);
}

#[tokio::test(start_paused = true)]
async fn an_upgrade_carries_members_with_their_records() {
    let old = pool();
    old.discovery()
        .apply_lookup("ltc", vec![found(2), found(3)], Instant::now())
        .unwrap();
    old.operator()
        .quarantine("ltc/127.0.0.3:9333", Duration::from_secs(3600))
        .unwrap();
    time::advance(Duration::from_secs(4)).await;
    old.discovery()
        .apply_lookup("ltc", vec![found(2)], Instant::now())
        .unwrap();
    let handed = old.upgrade().state();
    let json = serde_json::to_string(&handed).unwrap();
    let handed = serde_json::from_str(&json).unwrap();

    let new = pool();
    new.upgrade().take(&handed);
    assert_eq!(names(&new), names(&old));
    let counts = |p: &Pool| p.backends().sources[0].lookups;
    assert_eq!(counts(&new), (2, 0), "lookup counters go on");
    let snap = new.view().overview();
    let b3 = snap
        .backends
        .iter()
        .find(|b| b.name.ends_with(".3:9333"))
        .unwrap();
    assert_eq!(b3.state, State::Quarantined);
    // .3 was left out by the answer just before the upgrade: `hold`
    // counts from there, across the upgrade.
    time::advance(Duration::from_secs(9)).await;
    assert_eq!(
        new.discovery()
            .apply_lookup("ltc", vec![found(2)], Instant::now())
            .unwrap()
            .removed,
        0
    );
    time::advance(Duration::from_secs(1)).await;
    assert_eq!(
        new.discovery()
            .apply_lookup("ltc", vec![found(2)], Instant::now())
            .unwrap()
            .removed,
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a_saved_record_waits_for_its_member() {
    let pool = pool();
    let until = SystemTime::now() + Duration::from_secs(600);
    let quarantine = Some(QuarantineSnapshot {
        until,
        reason: crate::pool::health::QuarantineReason::Manual,
    });
    let saved = vec![
        SavedBackend::new(
            "ltc/127.0.0.2:9333".into(),
            "127.0.0.2:9333".into(),
            quarantine,
            2,
        ),
        SavedBackend::new(
            "ltc/127.0.0.9:9333".into(),
            "127.0.0.9:9333".into(),
            None,
            3,
        ),
    ];
    assert_eq!(pool.saved().restore(&saved, SystemTime::now()), 0);
    // Kept in what is saved until a lookup has spoken.
    assert_eq!(pool.saved().save().len(), 3);
    pool.discovery()
        .apply_lookup("ltc", vec![found(2)], Instant::now())
        .unwrap();
    let snap = pool.view().overview();
    let b2 = &snap.backends[1];
    assert_eq!((b2.state, b2.strikes), (State::Quarantined, 2));
    // .9 was not in the first answer: its record is dropped.
    let kept: Vec<String> = pool.saved().save().into_iter().map(|s| s.name).collect();
    assert_eq!(kept, ["s", "ltc/127.0.0.2:9333"]);
}

#[tokio::test(start_paused = true)]
async fn a_dns_outage_does_not_count_toward_hold() {
    let pool = pool();
    pool.discovery()
        .apply_lookup("ltc", vec![found(2), found(3)], Instant::now())
        .unwrap();
    // Six holds without a successful answer, then one without .3: it stays
    // until `hold` of answers have left it out.
    time::advance(HOLD * 6).await;
    let c = pool
        .discovery()
        .apply_lookup("ltc", vec![found(2)], Instant::now())
        .unwrap();
    assert_eq!((c.removed, c.members), (0, 2));
    time::advance(HOLD - Duration::from_millis(1)).await;
    assert_eq!(
        pool.discovery()
            .apply_lookup("ltc", vec![found(2)], Instant::now())
            .unwrap()
            .removed,
        0
    );
    time::advance(Duration::from_millis(1)).await;
    assert_eq!(
        pool.discovery()
            .apply_lookup("ltc", vec![found(2)], Instant::now())
            .unwrap()
            .removed,
        1
    );
}

#[tokio::test(start_paused = true)]
async fn a_member_left_out_shows_when_it_leaves() {
    let pool = pool();
    pool.discovery()
        .apply_lookup("ltc", vec![found(2), found(3)], Instant::now());
    time::advance(Duration::from_secs(2)).await;
    pool.discovery()
        .apply_lookup("ltc", vec![found(2)], Instant::now());
    let wall = SystemTime::now();
    let status = pool.view().overview();
    let by = |name: &str| {
        status
            .backends
            .iter()
            .find(|b| b.name == name)
            .unwrap()
            .clone()
    };
    assert_eq!(by("ltc/127.0.0.2:9333").leaving_at, None);
    assert_eq!(by("s").leaving_at, None);
    let at = by("ltc/127.0.0.3:9333").leaving_at.expect("leaving");
    let left = at.duration_since(wall).unwrap_or_default();
    assert!(
        left > HOLD - Duration::from_secs(2) && left <= HOLD + Duration::from_secs(1),
        "{left:?}"
    );
    // Named again: it stays.
    pool.discovery()
        .apply_lookup("ltc", vec![found(2), found(3)], Instant::now());
    assert_eq!(
        pool.view()
            .overview()
            .backends
            .iter()
            .find(|b| b.name == "ltc/127.0.0.3:9333")
            .unwrap()
            .leaving_at,
        None
    );
}
