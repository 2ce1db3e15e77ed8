//! Micro-benchmark: does choosing a backend and the rebalance tick cost
//! O(backends), whatever the number of registered connections?
//!
//! For each (backends, registered connections) it times, in ns per call:
//! - `Pool::reserve` + dropping its lease (the accept path: lock, build the
//!   candidates, `select::pick`, register; then unregister);
//! - `select::pick` alone (pure, over the candidates);
//! - `Pool::rebalance_plan` on a balanced pool (plans from the live registry and
//!   returns without connecting, as every tick of a balanced pool does);
//! - `rebalance::plan` alone (pure, over the loads);
//! - `Pool::status` and its JSON (what `GET /status` builds per pool: an
//!   overview that counts each backend's connections without listing them);
//! - `Pool::snapshot` (every connection copied out, for the state file and
//!   the demo): O(connections) by design, so it is timed too.
//!
//! Run: `cargo bench --manifest-path bench/loadgen/Cargo.toml --bench registry`
//! (add `-- --quick` for shorter timings).

use std::hint::black_box;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pin_proxy::config::{Config, PoolConfig};
use pin_proxy::pool::close::Closer;
use pin_proxy::pool::rebalance::{self, Load};
use pin_proxy::pool::registry::{ConnEntry, Lease, Pool};
use pin_proxy::pool::select::{self, Candidate};
use tokio_util::sync::CancellationToken;

/// (backends, registered connections) to measure.
const CASES: [(usize, usize); 7] = [
    (4, 10),
    (4, 1_000),
    (4, 100_000),
    (2, 100_000),
    (16, 100_000),
    (64, 10),
    (64, 100_000),
];

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let budget = Duration::from_millis(if quick { 50 } else { 300 });
    println!(
        "| backends | registered conns | reserve + release, ns | select::pick, ns | Pool::rebalance_plan (balanced), ns | rebalance::plan, ns | /status (Pool::status + JSON), ns | Pool::snapshot (every conn), ns |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    // Warm caches and the allocator first; the first case reads high otherwise.
    measure(4, 10, budget);
    for (backends, conns) in CASES {
        let [reserve, pick, tick, plan, status, snapshot] = measure(backends, conns, budget);
        println!(
            "| {backends} | {conns} | {reserve:.0} | {pick:.0} | {tick:.0} | {plan:.0} | {status:.0} | {snapshot:.0} |"
        );
    }
}

/// ns per call of reserve + release, pick, tick, plan, status and snapshot
/// with `conns` connections registered on `backends` backends.
fn measure(backends: usize, conns: usize, budget: Duration) -> [f64; 6] {
    let token = CancellationToken::new();
    let pool = Arc::new(Pool::new(pool_config(backends), token.clone()));
    let entry = ConnEntry::new(
        SocketAddr::from(([127, 0, 0, 1], 40000)),
        Arc::new(Closer::new()),
    );
    // Least-used selection spreads them evenly: the pool is balanced.
    let held: Vec<Lease> = (0..conns as u64)
        .map(|id| {
            pool.legs()
                .reserve(id, entry.clone(), &[])
                .expect("a backend")
                .0
        })
        .collect();
    let mut next_id = conns as u64;
    let reserve = time_per_op(budget, || {
        let lease = pool.legs().reserve(next_id, entry.clone(), &[]);
        next_id += 1;
        drop(black_box(lease));
    });
    let cands = candidates(backends, conns);
    let pick = time_per_op(budget, || {
        black_box(select::pick(black_box(&cands)));
    });
    // A balanced pool: the tick asks for a plan and gets none.
    let tick = time_per_op(budget, || {
        black_box(pool.rebalance().plan());
    });
    let loads = loads(backends, conns);
    let plan = time_per_op(budget, || {
        black_box(rebalance::plan(black_box(&loads), 2));
    });
    let status = time_per_op(budget, || {
        let json =
            serde_json::to_vec(&pin_proxy::inspect::status(&pool)).expect("status serializes");
        black_box(json);
    });
    let snapshot = time_per_op(budget, || {
        black_box(pool.view().snapshot());
    });
    drop(held);
    [reserve, pick, tick, plan, status, snapshot]
}

/// Call `op` in growing batches until `budget` is spent; ns per call.
fn time_per_op(budget: Duration, mut op: impl FnMut()) -> f64 {
    let (mut calls, mut batch) = (0u64, 1u64);
    let start = Instant::now();
    while start.elapsed() < budget {
        for _ in 0..batch {
            op();
        }
        calls += batch;
        batch = (batch * 2).min(1 << 20);
    }
    start.elapsed().as_nanos() as f64 / calls as f64
}

fn pool_config(backends: usize) -> PoolConfig {
    let mut yaml = String::from(
        "pools:\n  - name: bench\n    listen: 127.0.0.1:1\n    max_connections: 1000000\n    backends:\n",
    );
    for i in 0..backends {
        yaml.push_str(&format!("      - 127.0.0.1:{}\n", 20000 + i));
    }
    let config = Config::parse(&yaml, Path::new("bench.yaml")).expect("bench config is valid");
    config.pools.into_iter().next().expect("one pool")
}

fn candidates(backends: usize, conns: usize) -> Vec<Candidate> {
    (0..backends)
        .map(|_| Candidate {
            usable: true,
            backup: false,
            live: conns / backends,
            last_failure: None,
            tried: false,
            refused: false,
            unfit: false,
        })
        .collect()
}

fn loads(backends: usize, conns: usize) -> Vec<Load> {
    (0..backends)
        .map(|_| Load {
            usable: true,
            backup: false,
            live: conns / backends,
        })
        .collect()
}
