//! `loadgen`: the load tool behind bench/run.sh. Each measuring command
//! prints one JSON object on stdout (run.sh keeps and parses it) and a
//! readable line on stderr. Loopback targets only; every loop is bounded
//! in count and time.

mod admin;
mod child;
mod churn;
mod discovery;
mod dnsmasq;
mod drain;
mod echo;
mod idle;
mod iperf;
mod p2p;
mod pingpong;
mod ports;
mod procfs;
mod proxy;
mod soak;
mod table;
mod upgrade;
mod window;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use serde_json::Value;

/// Load tool for pin-proxy's benchmark.
#[derive(Debug, Parser)]
#[command(name = "loadgen")]
struct Cli {
    /// KEY=VALUE added to the JSON result (run.sh tags round, target, case).
    #[arg(long, global = true)]
    tag: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Echo backend. With --close-first, echo one request of that many bytes
    /// and then close ("backend closes first", for churn).
    EchoServer {
        #[arg(long)]
        listen: SocketAddr,
        /// More addresses to serve on (repeatable), in the same process.
        #[arg(long = "also-listen")]
        also: Vec<SocketAddr>,
        #[arg(long, value_name = "BYTES")]
        close_first: Option<usize>,
        #[command(flatten)]
        rt: Runtime,
    },
    /// Round trips of SIZE bytes on CONNS connections: p50/p99/max µs, req/s.
    Pingpong {
        #[command(flatten)]
        load: Load,
        #[arg(long, default_value_t = 1)]
        conns: usize,
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Upper bound on requests per connection.
        #[arg(long, default_value_t = 100_000_000)]
        max_requests: u64,
    },
    /// Connect, send, read the echo, let the backend close (or close
    /// first with --client-closes, against a plain echo server): conn/s.
    Churn {
        #[command(flatten)]
        load: Load,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Close right after the echo instead of waiting for the backend's close.
        #[arg(long)]
        client_closes: bool,
        /// Upper bound on connections per concurrent loop.
        #[arg(long, default_value_t = 10_000_000)]
        max_conns: u64,
        /// More targets (repeatable): the loops take --target and these in
        /// turn. Closing first, one client address and one target share
        /// one set of local ports, which the kernel may reuse only a
        /// second into TIME_WAIT: some 14,000 conn/s per target at the
        /// default port range, whatever sits behind it (bench/README.md).
        #[arg(long = "also-target")]
        also: Vec<SocketAddr>,
    },
    /// Open COUNT connections, verify and hold them; the proxy's RSS and CPU
    /// at each of STEPS and at COUNT.
    Idle {
        #[arg(long)]
        target: SocketAddr,
        #[arg(long)]
        count: usize,
        #[arg(long)]
        pid: u32,
        /// Intermediate counts, comma-separated (e.g. 1000,2500,5000,9000).
        #[arg(long, value_delimiter = ',')]
        steps: Vec<usize>,
        #[arg(long, default_value_t = 64)]
        parallel: usize,
        /// Seconds to hold at each step while metering idle CPU.
        #[arg(long, default_value_t = 2.0)]
        hold: f64,
        #[command(flatten)]
        rt: Runtime,
    },
    /// Run the iperf3 client against TARGET: Gbit/s and the proxy's CPU s per GB.
    Iperf {
        #[arg(long)]
        target: SocketAddr,
        /// More targets (repeatable), each its own iperf3 server or a
        /// proxy in front of one: one client each, all at once, and the
        /// figures summed. An iperf3 server reads every stream of a test
        /// on one thread, which several streams can saturate.
        #[arg(long = "also-target")]
        also: Vec<SocketAddr>,
        /// Parallel streams of each client.
        #[arg(long, default_value_t = 1)]
        streams: u32,
        /// Test seconds.
        #[arg(long, default_value_t = 10)]
        time: u32,
        #[arg(long)]
        pid: Option<u32>,
        /// Keep iperf3's JSON output here.
        #[arg(long)]
        raw: Option<PathBuf>,
    },
    /// Everything at once for --secs: verified streams, churn, hostile
    /// clients, admin traffic under live upgrades, reloads, DNS flaps,
    /// backends killed and frozen, quarantines and a cold restart; prints
    /// a table, exits 1 on any violation.
    Soak {
        #[command(flatten)]
        p: soak::Params,
        #[command(flatten)]
        rt: Runtime,
    },
    /// Print the Markdown summary of a results file (JSON lines from run.sh).
    Table {
        results: PathBuf,
        /// Column title for HAProxy (with its version).
        #[arg(long, default_value = "HAProxy")]
        haproxy: String,
    },
    /// Print a process's CPU seconds so far (utime + stime, all threads).
    Cpu {
        #[arg(long)]
        pid: u32,
    },
    /// Print N loopback TCP ports free now, below the kernel's range for
    /// outgoing connections (which the churn loads reuse), one per line.
    FreePorts { n: usize },
    /// Live upgrades of PROXY (a pin-proxy binary) under CONNS connections
    /// (PINGERS doing ping-pong): handover time, longest stall, RSS.
    Upgrade {
        #[arg(long)]
        proxy: PathBuf,
        #[arg(long, default_value_t = 1000)]
        conns: usize,
        #[arg(long, default_value_t = 64)]
        pingers: usize,
        #[arg(long, default_value_t = 3)]
        upgrades: usize,
        /// Run the proxy under `taskset -c CPUS`.
        #[arg(long)]
        proxy_cpus: Option<String>,
        #[command(flatten)]
        rt: Runtime,
    },
    /// P2P-shaped load: CONNS connections, stamped messages both ways every
    /// 1-2 s (random sizes and gaps): round trip and one-way delay
    /// percentiles, messages, errors, CPU of proxy, client and backend.
    P2p {
        #[command(flatten)]
        p: p2p::Params,
        #[command(flatten)]
        rt: Runtime,
    },
    /// The P2P load's backend: a hello, pings echoed, its own stamped
    /// announcements to every client.
    P2pServer {
        #[arg(long)]
        listen: SocketAddr,
        #[command(flatten)]
        shape: p2p::Shape,
        #[command(flatten)]
        rt: Runtime,
    },
    /// Spread drain of PROXY's backend holding CONNS idle clients (they
    /// redial), PINGERS doing ping-pong on the other: drain length, closes
    /// per 100 ms, close-to-echo gap, failed redials, pingers' stall.
    Drain {
        #[command(flatten)]
        p: drain::Params,
        #[command(flatten)]
        rt: Runtime,
    },
    /// PROXY (a pin-proxy binary) discovering MEMBERS backends from
    /// dnsmasq: lookup cost, CPU per lookup, RSS per member, time to see
    /// one more.
    Discovery {
        #[arg(long)]
        proxy: PathBuf,
        #[arg(long, default_value_t = 1000)]
        members: usize,
        /// Lookup interval (`500ms`, `1s`, `2m`).
        #[arg(long, default_value = "1s", value_parser = interval)]
        interval: Duration,
        /// Lookup intervals measured.
        #[arg(long, default_value_t = 30)]
        rounds: usize,
        #[arg(long, default_value = "/usr/sbin/dnsmasq")]
        dnsmasq: PathBuf,
        #[command(flatten)]
        rt: Runtime,
    },
}

/// What every load command takes.
#[derive(Debug, clap::Args)]
struct Load {
    #[arg(long)]
    target: SocketAddr,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Unrecorded seconds before.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// The proxy to meter (CPU per request / connection).
    #[arg(long)]
    pid: Option<u32>,
    #[command(flatten)]
    rt: Runtime,
}

#[derive(Debug, Clone, Copy, clap::Args)]
struct Runtime {
    /// Runtime threads; 1 = single-threaded (for the pinned test);
    /// default: one per CPU this process may use.
    #[arg(long)]
    threads: Option<usize>,
}

fn main() -> anyhow::Result<()> {
    raise_nofile();
    let cli = Cli::parse();
    let tags = cli.tag;
    let report = |v: Value| report(v, &tags);
    match cli.command {
        Command::EchoServer {
            listen,
            also,
            close_first,
            rt,
        } => {
            let all = std::iter::once(listen).chain(also).collect();
            block_on(rt, echo::serve(all, close_first))
        }
        Command::Upgrade {
            proxy,
            conns,
            pingers,
            upgrades,
            proxy_cpus,
            rt,
        } => {
            let p = upgrade::Params {
                proxy,
                conns,
                pingers,
                upgrades,
                proxy_cpus,
            };
            report(block_on(rt, upgrade::run(p))?)
        }
        Command::P2p { p, rt } => report(block_on(rt, p2p::run(p))?),
        Command::P2pServer { listen, shape, rt } => block_on(rt, p2p::serve(listen, shape)),
        Command::Drain { p, rt } => report(block_on(rt, drain::run(p))?),
        Command::Soak { p, rt } => report(block_on(rt, soak::run(p))?),
        Command::Discovery {
            proxy,
            members,
            interval,
            rounds,
            dnsmasq,
            rt,
        } => {
            let p = discovery::Params {
                proxy,
                dnsmasq,
                members,
                interval,
                rounds,
            };
            report(block_on(rt, discovery::run(p))?)
        }
        Command::Pingpong {
            load,
            conns,
            size,
            max_requests,
        } => {
            let p = pingpong::Params {
                target: load.target,
                conns,
                size,
                warmup: secs(load.warmup)?,
                duration: secs(load.duration)?,
                max_requests,
                pid: load.pid,
            };
            report(block_on(load.rt, pingpong::run(p))?)
        }
        Command::Churn {
            load,
            concurrency,
            size,
            client_closes,
            max_conns,
            also,
        } => {
            let p = churn::Params {
                targets: std::iter::once(load.target).chain(also).collect(),
                concurrency,
                size,
                client_closes,
                warmup: secs(load.warmup)?,
                duration: secs(load.duration)?,
                max_conns,
                pid: load.pid,
            };
            report(block_on(load.rt, churn::run(p))?)
        }
        Command::Idle {
            target,
            count,
            pid,
            steps,
            parallel,
            hold,
            rt,
        } => {
            let p = idle::Params {
                target,
                count,
                steps,
                parallel: parallel.max(1),
                hold: secs(hold)?,
                pid,
            };
            report(block_on(rt, idle::run(p))?)
        }
        Command::Iperf {
            target,
            also,
            streams,
            time,
            pid,
            raw,
        } => {
            let p = iperf::Params {
                targets: std::iter::once(target).chain(also).collect(),
                streams,
                time,
                pid,
                raw,
            };
            let single = Runtime { threads: Some(1) };
            report(block_on(single, iperf::run(p))?)
        }
        Command::Table { results, haproxy } => {
            print!("{}", table::render(&results, &haproxy)?);
            Ok(())
        }
        Command::Cpu { pid } => {
            println!("{}", procfs::cpu_seconds(pid)?);
            Ok(())
        }
        Command::FreePorts { n } => free_ports(n),
    }
}

fn secs(s: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s).with_context(|| format!("bad duration {s}"))
}

/// `500ms`, `1s`, `2m`, or plain seconds.
pub fn interval(s: &str) -> Result<Duration, String> {
    let (num, unit) = match s.trim() {
        t if t.ends_with("ms") => (&t[..t.len() - 2], 1e-3),
        t if t.ends_with('s') => (&t[..t.len() - 1], 1.0),
        t if t.ends_with('m') => (&t[..t.len() - 1], 60.0),
        t => (t, 1.0),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms, 1s or 2m"))?;
    Duration::try_from_secs_f64(n * unit).map_err(|e| format!("{s:?}: {e}"))
}

fn block_on<T>(rt: Runtime, fut: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    let runtime = match rt.threads {
        Some(1) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
        Some(0) => bail!("--threads must be at least 1"),
        Some(n) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build()?,
        None => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
    };
    runtime.block_on(fut)
}

fn report(mut v: Value, tags: &[String]) -> anyhow::Result<()> {
    for tag in tags {
        let (k, val) = tag
            .split_once('=')
            .with_context(|| format!("--tag {tag:?} is not KEY=VALUE"))?;
        // Numbers stay numbers, so rounds sort and compare as such.
        let val = serde_json::from_str::<Value>(val)
            .ok()
            .filter(Value::is_number)
            .unwrap_or_else(|| Value::String(val.to_owned()));
        window::merge(&mut v, serde_json::json!({ k: val }));
    }
    println!("{}", serde_json::to_string(&v)?);
    Ok(())
}

/// Print them, one per line ([`ports::free`]).
fn free_ports(n: usize) -> anyhow::Result<()> {
    for port in ports::free(n)? {
        println!("{port}");
    }
    Ok(())
}

/// Idle tests hold thousands of sockets: use the whole hard limit.
fn raise_nofile() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let old = getrlimit(Resource::Nofile);
    let want = Rlimit {
        current: old.maximum,
        maximum: old.maximum,
    };
    // Refused: the old limit stays, and the idle test reports failed opens.
    let _ = setrlimit(Resource::Nofile, want);
}
