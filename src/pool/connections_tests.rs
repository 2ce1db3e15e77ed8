//! Unit tests of one connection seen and acted on: the listing's order,
//! filters and bounds, a close by id, a shed's choice and pace.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::config::Config;
use crate::pool::close::Closer;
use crate::pool::registry::{Lease, LegSocket, LegSource, Target};

/// Pool `p` of backends `a` and `b`, drains spread over 1 s.
fn pool() -> Arc<Pool> {
    let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    \
                health: { drain_spread: 1s }\n    \
                backends: [{ name: a, addr: \"127.0.0.1:9\" }, { name: b, addr: \"127.0.0.1:10\" }]\n";
    let config = Config::parse(yaml, "inline.yaml".as_ref()).unwrap();
    Arc::new(Pool::new(config.pools[0].clone(), CancellationToken::new()))
}

struct Conn {
    closer: Arc<Closer>,
    target: Target,
    _lease: Lease,
    leg: Arc<Leg>,
}

/// A backend leg's socket, as the registry sees it: its local address.
struct Leg(SocketAddr);

impl LegSocket for Leg {
    fn local(&self) -> Option<SocketAddr> {
        Some(self.0)
    }
}

/// Connection `id` from `client`, spliced from the local port `id`
/// (least-used: 1, 3, 5... on `a`, 2, 4, 6... on `b`).
fn connect(pool: &Arc<Pool>, id: ConnId, client: &str, via: Option<&str>) -> Conn {
    let closer = Arc::new(Closer::new());
    let via = via.map(|v| v.parse().unwrap());
    let entry = ConnEntry::new(client.parse().unwrap(), closer.clone()).via(via);
    let (lease, target) = pool.legs().reserve(id, entry, &[]).unwrap();
    let leg = Arc::new(Leg(SocketAddr::from((
        [127, 0, 0, 1],
        u16::try_from(id).unwrap(),
    ))));
    let source: LegSource = Arc::downgrade(&leg) as LegSource;
    assert!(
        pool.legs()
            .splice_if_wanted(target.id, target.usable, &closer, Some((id, source)))
    );
    Conn {
        closer,
        target,
        _lease: lease,
        leg,
    }
}

fn ids(listed: &Listed) -> Vec<ConnId> {
    listed.conns.iter().map(|c| c.conn).collect()
}

fn all() -> ConnFilter {
    ConnFilter::default()
}

#[test]
fn a_listing_is_newest_first_across_backends_bounded_by_its_limit() {
    let pool = pool();
    let conns: Vec<Conn> = (1..=7)
        .map(|id| connect(&pool, id, "192.0.2.1:4000", None))
        .collect();
    assert_eq!(conns[0].target.config.name, "a");
    assert_eq!(conns[1].target.config.name, "b");
    let listed = pool.connections().list(&all(), 100, None).unwrap();
    assert_eq!(listed.total, 7);
    assert_eq!(ids(&listed), [7, 6, 5, 4, 3, 2, 1]);
    let listed = pool.connections().list(&all(), 3, None).unwrap();
    assert_eq!((listed.total, ids(&listed)), (7, vec![7, 6, 5]));
    // Below an id a listing across pools has enough newer ones than.
    let listed = pool.connections().list(&all(), 3, Some(5)).unwrap();
    assert_eq!((listed.total, ids(&listed)), (7, vec![4, 3, 2]));
    let on_b = ConnFilter {
        backend: Some("b".to_owned()),
        ..all()
    };
    let listed = pool.connections().list(&on_b, 2, None).unwrap();
    assert_eq!((listed.total, ids(&listed)), (3, vec![6, 4]));
    assert!(listed.conns.iter().all(|c| c.backend.name == "b"));
    let nowhere = ConnFilter {
        backend: Some("c".to_owned()),
        ..all()
    };
    assert!(pool.connections().list(&nowhere, 2, None).is_none());
    assert_eq!(pool.connections().list(&all(), 0, None).unwrap().total, 7);
}

#[test]
fn a_listing_filters_by_client_network_and_says_where_each_stands() {
    let pool = pool();
    let _a = connect(&pool, 1, "10.1.2.3:5000", None);
    let b = connect(&pool, 2, "[::ffff:10.1.9.9]:5001", Some("192.0.2.9:7000"));
    let _c = connect(&pool, 3, "10.2.0.1:5002", None);
    let _d = connect(&pool, 4, "[2001:db8::1]:5003", None);
    let net = |s: &str| ConnFilter {
        client: Some(s.parse().unwrap()),
        ..all()
    };
    let listed = pool
        .connections()
        .list(&net("10.1.0.0/16"), 100, None)
        .unwrap();
    assert_eq!((listed.total, ids(&listed)), (2, vec![2, 1]));
    let listed = pool
        .connections()
        .list(&net("2001:db8::/32"), 100, None)
        .unwrap();
    assert_eq!(ids(&listed), [4]);
    // The total counts every match, beyond the limit.
    let listed = pool
        .connections()
        .list(&net("10.0.0.0/8"), 1, None)
        .unwrap();
    assert_eq!((listed.total, ids(&listed)), (3, vec![3]));

    let listed = pool.connections().list(&all(), 100, None).unwrap();
    let two = &listed.conns[2];
    assert_eq!(two.conn, 2);
    assert_eq!(two.client, "[::ffff:10.1.9.9]:5001".parse().unwrap());
    assert_eq!(two.via, Some("192.0.2.9:7000".parse().unwrap()));
    assert_eq!(two.source(), Some("127.0.0.1:2".parse().unwrap()));
    assert_eq!(two.phase, ConnPhase::Spliced);
    assert_eq!(listed.conns[3].via, None);
    assert!(two.idle < Duration::from_secs(60));
    // The source is asked of the socket when shown: a closed one has none.
    drop(b.leg);
    assert_eq!(two.source(), None);
}

#[test]
fn a_connection_still_connecting_has_no_source_and_a_draining_one_says_so() {
    let pool = pool();
    let closer = Arc::new(Closer::new());
    let entry = ConnEntry::new("10.0.0.1:1".parse().unwrap(), closer.clone());
    let (_lease, _) = pool.legs().reserve(1, entry, &[]).unwrap();
    let _on_b = connect(&pool, 2, "10.0.0.1:2", None);
    let listed = pool.connections().list(&all(), 10, None).unwrap();
    let first = &listed.conns[1];
    assert_eq!((first.phase, first.source()), (ConnPhase::Connecting, None));
    // A quarantine drains `a`: its spliced connections will be closed.
    let _on_a = connect(&pool, 3, "10.0.0.1:3", None);
    pool.operator()
        .quarantine("a", Duration::from_secs(60))
        .unwrap();
    let listed = pool.connections().list(&all(), 10, None).unwrap();
    let phases: Vec<ConnPhase> = listed.conns.iter().map(|c| c.phase).collect();
    assert_eq!(
        phases,
        [
            ConnPhase::Draining,
            ConnPhase::Spliced,
            ConnPhase::Connecting
        ]
    );
}

#[test]
fn idle_time_counts_from_the_last_byte_carried_over_a_handover() {
    let pool = pool();
    let closer = Arc::new(Closer::handed(10, 20, Duration::from_secs(120)));
    let entry = ConnEntry::new("10.0.0.1:1".parse().unwrap(), closer.clone());
    let (_lease, target) = pool.legs().reserve(1, entry, &[]).unwrap();
    assert!(
        pool.legs()
            .splice_if_wanted(target.id, target.usable, &closer, None)
    );
    let listed = pool.connections().list(&all(), 10, None).unwrap();
    let c = &listed.conns[0];
    assert!(c.idle >= Duration::from_secs(120), "{:?}", c.idle);
    assert_eq!((c.bytes_up, c.bytes_down), (10, 20));
    closer.touch(Tick::now());
    let listed = pool.connections().list(&all(), 10, None).unwrap();
    assert!(listed.conns[0].idle < Duration::from_secs(60));
}

#[test]
fn close_closes_exactly_the_one_named() {
    let pool = pool();
    let conns: Vec<Conn> = (1..=4)
        .map(|id| connect(&pool, id, "10.0.0.1:1", None))
        .collect();
    assert!(pool.connections().close(3));
    assert!(!pool.connections().close(99));
    for (i, c) in conns.iter().enumerate() {
        assert_eq!(c.closer.is_closing(), i == 2, "connection {}", i + 1);
    }
    assert_eq!(conns[2].closer.reason(), CloseReason::Admin);
}

#[test]
fn a_shed_closes_a_backends_newest_on_the_drain_pace() {
    let pool = pool();
    let conns: Vec<Conn> = (1..=10)
        .map(|id| connect(&pool, id, "10.0.0.1:1", None))
        .collect();
    let t0 = Instant::now();
    // `a` holds 1, 3, 5, 7, 9: the newest three are 9, 7, 5.
    let shed = pool.connections().shed("a", 3).unwrap();
    assert_eq!(shed, [9, 7, 5]);
    let closing = |c: &Conn| c.closer.is_closing();
    assert!(closing(&conns[8]), "the first at once");
    assert!(!closing(&conns[6]) && !closing(&conns[4]));
    assert_eq!(conns[8].closer.reason(), CloseReason::Shed);
    let listed = pool.connections().list(&all(), 100, None).unwrap();
    let draining: Vec<ConnId> = listed
        .conns
        .iter()
        .filter(|c| c.phase == ConnPhase::Draining)
        .map(|c| c.conn)
        .collect();
    assert_eq!(draining, [9, 7, 5]);
    // Three over 1 s: at 0, 333 ms and 667 ms.
    let next = pool.drains().step(t0).unwrap();
    assert!(next > t0 + Duration::from_millis(300), "{:?}", next - t0);
    pool.drains().step(t0 + Duration::from_millis(400));
    assert!(closing(&conns[6]) && !closing(&conns[4]));
    assert_eq!(pool.drains().step(t0 + Duration::from_millis(800)), None);
    assert!(closing(&conns[4]));
    assert_eq!(conns[4].closer.reason(), CloseReason::Shed);
    // Nothing else on `a` or `b` was touched; a second shed takes the
    // newest not shed yet.
    let others = [0, 1, 2, 3, 5, 7, 9];
    assert!(others.iter().all(|&i| !closing(&conns[i])));
    assert_eq!(pool.connections().shed("a", 1).unwrap(), [3]);
    assert_eq!(
        pool.connections().shed("b", 0).unwrap(),
        Vec::<ConnId>::new()
    );
    assert!(pool.connections().shed("c", 1).is_err());
}

#[test]
fn a_shed_while_another_runs_takes_others_and_closes_them_all() {
    let pool = pool();
    let conns: Vec<Conn> = (1..=8)
        .map(|id| connect(&pool, id, "10.0.0.1:1", None))
        .collect();
    let t0 = Instant::now();
    assert_eq!(pool.connections().shed("b", 2).unwrap(), [8, 6]);
    assert_eq!(pool.connections().shed("b", 5).unwrap(), [4, 2]);
    // 8 went at once; 6, 4, 2 are paced over 1 s from the second shed.
    let mut at = t0;
    for _ in 0..10 {
        match pool.drains().step(at) {
            Some(next) => at = next,
            None => break,
        }
    }
    for (i, c) in conns.iter().enumerate() {
        assert_eq!(c.closer.is_closing(), i % 2 == 1, "connection {}", i + 1);
    }
}
