//! A real dnsmasq on a loopback port serving the A, AAAA and SRV records a
//! test sets, for the backends-from-DNS tests.
//!
//! Each [`Dnsmasq`] owns a `dnsmasq` child process and a temp directory
//! (hosts file, query logs); both go away on drop, also when the test
//! panics. It is the authority for [`DOMAIN`] and knows nothing else: no
//! upstream servers, no system files.
//!
//! Things learned from dnsmasq 2.90 (Debian `dnsmasq-base`) that shape this
//! file:
//! - With `--no-resolv` and no servers, every question it cannot answer
//!   from its own records is REFUSED: an unknown name, and also a known
//!   name asked for a type it lacks (SRV or AAAA of a name with only an A).
//!   `--local=/test/` makes it the authority for `test`: there an unknown
//!   name is NXDOMAIN, and a known name with no record of the asked type is
//!   NOERROR with no answers, as is a name that only has names below it
//!   (`nodes.test` when the hosts file lists `x.nodes.test`). Names outside
//!   `test` stay REFUSED. So all three failures a resolver can see are at
//!   hand: see [`refused_name`], [`nxdomain_name`] and [`empty_hosts`].
//! - SIGHUP re-reads `--addn-hosts` (the next answer already shows it;
//!   [`Dnsmasq::set_hosts`] still queries until it does). `--srv-host` is
//!   never re-read, not even from a `--conf-file`: new SRV records need a
//!   restart ([`Dnsmasq::set_srv`]).
//! - UDP answers over 512 bytes are truncated (TC set) when the question
//!   has no EDNS: 30 of 60 A records come. With EDNS it sends at most its
//!   `--edns-packet-max`, 1232 by default, whatever size the client offers:
//!   60 A records fit (997 bytes, no TC), 76 do not (75 sent, TC set).
//!   hickory-resolver offers 1232, so a TC test needs more than 75 records.
//!   Over TCP on the same port every record comes.
//! - A TCP question is served by a forked child that inherits the listening
//!   socket and lives as long as the client keeps the connection: after a
//!   SIGKILL of the main process that child keeps answering, and the port
//!   stays taken. SIGTERM ends the children too, so stopping sends SIGTERM.
//! - A SRV answer carries the targets' A and AAAA records in its
//!   additional section.
//! - Started as root it switches to user `nobody` unless `--user` says
//!   otherwise, and `nobody` cannot read a 0700 temp dir: `--user=root`.
//!   (Not root, it switches nothing and `--user=root` is harmless.)
//! - `-k` keeps it in the foreground; `--pid-file` with no value writes no
//!   pid file; `--conf-file=/dev/null` keeps `/etc/dnsmasq.conf` out.
//! - `--log-queries` logs one `query[A] nodes.test from 127.0.0.1` line per
//!   question, which is how a test counts the proxy's lookups.

use std::collections::BTreeSet;
use std::fs;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process};
use tokio::time::Instant;

use crate::support::dns::{self, Qtype, Record, Transport};
use crate::support::litecoind::{find_program, peers_available};

/// The zone dnsmasq is the authority for: every name a test serves ends in
/// `.test`.
pub const DOMAIN: &str = "test";

/// The source address of this module's own questions, so that the query
/// log tells the proxy's lookups (from 127.0.0.1) apart from them.
pub const QUERY_SOURCE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 254));

/// Where the proxy's questions come from: it talks to 127.0.0.1.
const PROXY_SOURCE: &str = "127.0.0.1";

/// How long dnsmasq may take to answer its first question.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long answers may take to show a change.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Fresh ports tried before giving up on a bind race.
const START_ATTEMPTS: u32 = 5;

/// A name outside [`DOMAIN`]: dnsmasq answers REFUSED. (Not under
/// `.invalid`: resolvers answer NXDOMAIN for that one themselves, RFC 6761.)
pub fn refused_name() -> &'static str {
    "nodes.outside"
}

/// A name under [`DOMAIN`] that no hosts file lists: NXDOMAIN.
pub fn nxdomain_name() -> &'static str {
    "absent.test"
}

/// Hosts that leave `name` known but with no A or AAAA record: NOERROR
/// with an empty answer (one address on a name below it).
pub fn empty_hosts(name: &str) -> Vec<(IpAddr, String)> {
    vec![(
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, 253)),
        format!("below.{name}"),
    )]
}

/// One `--srv-host` record: `name` (`_service._proto.domain`) points at
/// `target:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Srv {
    pub name: String,
    pub target: String,
    pub port: u16,
    pub priority: u16,
    pub weight: u16,
}

impl Srv {
    /// A record of weight 10.
    pub fn new(name: &str, target: &str, port: u16, priority: u16) -> Srv {
        Srv {
            name: name.to_owned(),
            target: target.to_owned(),
            port,
            priority,
            weight: 10,
        }
    }

    fn arg(&self) -> String {
        format!(
            "--srv-host={},{},{},{},{}",
            self.name, self.target, self.port, self.priority, self.weight
        )
    }

    fn record(&self) -> Record {
        Record::Srv {
            priority: self.priority,
            weight: self.weight,
            port: self.port,
            target: self.target.clone(),
        }
    }
}

/// A dnsmasq process on `127.0.0.1:port`; terminated on drop. The port
/// stays the same across [`Dnsmasq::stop`], [`Dnsmasq::start_again`] and
/// [`Dnsmasq::set_srv`].
pub struct Dnsmasq {
    bin: PathBuf,
    child: Option<Child>,
    port: u16,
    hosts: Vec<(IpAddr, String)>,
    srv: Vec<Srv>,
    /// Processes started so far; each writes its own query log.
    runs: usize,
    // Dropped after `child` is terminated in `Drop::drop`.
    dir: tempfile::TempDir,
}

enum StartError {
    PortTaken(String),
    Fatal(String),
}

impl Dnsmasq {
    /// Start one serving `hosts` (address, name) and `srv`, on a free port;
    /// waits until its answers show them.
    ///
    /// Returns `None` after the skip notice of [`peers_available`] when
    /// dnsmasq is not installed. Panics if it cannot be started.
    pub async fn start<N: AsRef<str>>(hosts: &[(IpAddr, N)], srv: &[Srv]) -> Option<Dnsmasq> {
        if !peers_available(&["dnsmasq"]) {
            return None;
        }
        let bin = find_program("dnsmasq")?;
        let dir = tempfile::Builder::new()
            .prefix("pin-proxy-dns-")
            .tempdir()
            .expect("create dnsmasq dir");
        let mut dns = Dnsmasq {
            bin,
            child: None,
            port: 0,
            hosts: owned(hosts),
            srv: srv.to_vec(),
            runs: 0,
            dir,
        };
        dns.write_hosts();
        let mut last_err = String::new();
        for _ in 0..START_ATTEMPTS {
            dns.port = free_port();
            match dns.run().await {
                Ok(()) => {
                    dns.settle(&BTreeSet::new(), &[]).await;
                    return Some(dns);
                }
                Err(StartError::PortTaken(msg)) => last_err = msg,
                Err(StartError::Fatal(msg)) => panic!("start dnsmasq: {msg}"),
            }
        }
        panic!("start dnsmasq: ports kept being taken ({START_ATTEMPTS} tries): {last_err}");
    }

    /// Its address, for `discovery: { resolver: ... }`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Serve `hosts` from now on: rewrite the hosts file and send SIGHUP,
    /// then query until the answers show the change. While stopped, only
    /// the file changes; [`Dnsmasq::start_again`] serves it.
    pub async fn set_hosts<N: AsRef<str>>(&mut self, hosts: &[(IpAddr, N)]) {
        let before = self.host_names();
        self.hosts = owned(hosts);
        self.write_hosts();
        let Some(child) = &self.child else { return };
        signal(child, Signal::HUP);
        self.settle(&before, &[]).await;
    }

    /// Serve `srv` as the SRV records from now on: dnsmasq reads them only
    /// at start, so it is restarted on the same port, and queried until
    /// the answers show them. While stopped, only the records change.
    pub async fn set_srv(&mut self, srv: &[Srv]) {
        let before = std::mem::replace(&mut self.srv, srv.to_vec());
        if self.child.is_none() {
            return;
        }
        self.stop();
        self.run_again().await;
        self.settle(&self.host_names(), &before).await;
    }

    /// Stop it (a DNS outage: questions are refused at the socket). The
    /// port is kept for [`Dnsmasq::start_again`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child);
        }
    }

    /// Start it again on the same port with the current records; waits
    /// until the answers show them.
    pub async fn start_again(&mut self) {
        assert!(self.child.is_none(), "dnsmasq is running");
        self.run_again().await;
        self.settle(&BTreeSet::new(), &[]).await;
    }

    /// Freeze it (SIGSTOP): questions are neither answered nor refused, so
    /// the proxy's lookups time out. [`Dnsmasq::thaw`] undoes it.
    pub fn freeze(&self) {
        signal(
            self.child.as_ref().expect("dnsmasq is running"),
            Signal::STOP,
        );
    }

    /// Let a frozen dnsmasq answer again (SIGCONT).
    pub fn thaw(&self) {
        signal(
            self.child.as_ref().expect("dnsmasq is running"),
            Signal::CONT,
        );
    }

    /// Questions for `name` of type `qtype` that came from the proxy (not
    /// from this module) so far, over every run.
    pub fn queries(&self, qtype: Qtype, name: &str) -> usize {
        let ends =
            format!("query[{}] {name} from {PROXY_SOURCE}", qtype_name(qtype)).to_ascii_lowercase();
        (0..self.runs)
            .map(|run| fs::read_to_string(self.log_path(run)).unwrap_or_default())
            .map(|log| {
                log.lines()
                    .filter(|l| l.trim_end().to_ascii_lowercase().ends_with(&ends))
                    .count()
            })
            .sum()
    }

    /// Wait until the proxy asked `more` further questions for `name` of
    /// type `qtype`: its lookups, counted, instead of guessing their times.
    pub async fn wait_queries(&self, qtype: Qtype, name: &str, more: usize, timeout: Duration) {
        let want = self.queries(qtype, name) + more;
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.queries(qtype, name);
            if seen >= want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {more} more {qtype:?} lookups of {name} (at {seen} of {want})"
            );
            // The query log has no notification: look again shortly.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn hosts_path(&self) -> PathBuf {
        self.dir.path().join("hosts")
    }

    fn log_path(&self, run: usize) -> PathBuf {
        self.dir.path().join(format!("queries-{run}.log"))
    }

    /// Written beside and renamed over, so dnsmasq never reads half a file.
    fn write_hosts(&self) {
        let text: String = self
            .hosts
            .iter()
            .map(|(ip, name)| format!("{ip} {name}\n"))
            .collect();
        let new = self.hosts_path().with_extension("new");
        fs::write(&new, text).expect("write hosts");
        fs::rename(&new, self.hosts_path()).expect("install hosts");
    }

    fn host_names(&self) -> BTreeSet<String> {
        self.hosts.iter().map(|(_, n)| n.clone()).collect()
    }

    /// Start on the current port, retrying while the port is still held
    /// (by a TCP child of the last run that has not exited yet).
    async fn run_again(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.run().await {
                Ok(()) => return,
                Err(StartError::PortTaken(msg)) if Instant::now() < deadline => {
                    eprintln!("dnsmasq: port {} still taken ({msg}); again", self.port);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(StartError::PortTaken(msg) | StartError::Fatal(msg)) => {
                    panic!("start dnsmasq again on port {}: {msg}", self.port)
                }
            }
        }
    }

    /// Spawn on `self.port` and wait until it answers a question.
    async fn run(&mut self) -> Result<(), StartError> {
        let run = self.runs;
        self.runs += 1;
        let stderr_path = self.dir.path().join(format!("stderr-{run}.log"));
        let stderr = fs::File::create(&stderr_path)
            .map_err(|e| StartError::Fatal(format!("create {}: {e}", stderr_path.display())))?;
        let mut child = Command::new(&self.bin)
            .args([
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--pid-file",
            ])
            .args(["--user=root", "--no-resolv", "--no-hosts", "--local-ttl=0"])
            .arg(format!("--addn-hosts={}", self.hosts_path().display()))
            .arg(format!("--local=/{DOMAIN}/"))
            .args(["--listen-address=127.0.0.1", "--bind-interfaces"])
            .arg(format!("--port={}", self.port))
            .arg("--log-queries")
            .arg(format!("--log-facility={}", self.log_path(run).display()))
            .args(self.srv.iter().map(Srv::arg))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| StartError::Fatal(format!("spawn {}: {e}", self.bin.display())))?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let text = fs::read_to_string(&stderr_path).unwrap_or_default();
                let msg = format!("exited with {status}: {}", text.trim());
                return Err(if text.contains("Address already in use") {
                    StartError::PortTaken(msg)
                } else {
                    StartError::Fatal(msg)
                });
            }
            let name = format!("ready.{DOMAIN}");
            let probe = dns::query(self.addr(), QUERY_SOURCE, &name, Qtype::A, Transport::Udp);
            if probe.await.is_ok() {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() >= deadline {
                terminate(&mut child);
                return Err(StartError::Fatal(format!(
                    "no answer on port {} within {START_TIMEOUT:?}",
                    self.port
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Query (over TCP, so nothing is truncated) until every name served
    /// now, and every name of `old_hosts` and `old_srv`, answers exactly
    /// the current records.
    async fn settle(&self, old_hosts: &BTreeSet<String>, old_srv: &[Srv]) {
        let mut names: BTreeSet<String> = old_hosts | &self.host_names();
        let mut srv_names: BTreeSet<String> = self.srv.iter().map(|s| s.name.clone()).collect();
        srv_names.extend(old_srv.iter().map(|s| s.name.clone()));
        // A name that only has names below it answers empty: check it too.
        names.extend(self.hosts.iter().filter_map(|(_, n)| {
            n.split_once('.')
                .map(|(_, parent)| parent.to_owned())
                .filter(|p| p.contains('.'))
        }));
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let mut wrong = Vec::new();
            for name in &names {
                let want: BTreeSet<IpAddr> = self
                    .hosts
                    .iter()
                    .filter(|(_, n)| n.eq_ignore_ascii_case(name))
                    .map(|(ip, _)| *ip)
                    .collect();
                let mut got = BTreeSet::new();
                for qtype in [Qtype::A, Qtype::Aaaa] {
                    match self.ask(name, qtype).await {
                        Ok(reply) => got.extend(reply.ips()),
                        Err(e) => wrong.push(format!("{name} {qtype:?}: {e}")),
                    }
                }
                if got != want {
                    wrong.push(format!("{name}: {got:?}, want {want:?}"));
                }
            }
            for name in &srv_names {
                let want: BTreeSet<Record> = self
                    .srv
                    .iter()
                    .filter(|s| &s.name == name)
                    .map(Srv::record)
                    .collect();
                match self.ask(name, Qtype::Srv).await {
                    Ok(reply) => {
                        let got: BTreeSet<Record> = reply.answers.into_iter().collect();
                        if got != want {
                            wrong.push(format!("{name} SRV: {got:?}, want {want:?}"));
                        }
                    }
                    Err(e) => wrong.push(format!("{name} SRV: {e}")),
                }
            }
            if wrong.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "dnsmasq answers never showed the records: {}",
                wrong.join("; ")
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn ask(&self, name: &str, qtype: Qtype) -> std::io::Result<dns::Reply> {
        dns::query(self.addr(), QUERY_SOURCE, name, qtype, Transport::Tcp).await
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        self.stop();
    }
}

fn owned<N: AsRef<str>>(hosts: &[(IpAddr, N)]) -> Vec<(IpAddr, String)> {
    hosts
        .iter()
        .map(|(ip, n)| (*ip, n.as_ref().to_owned()))
        .collect()
}

fn qtype_name(qtype: Qtype) -> &'static str {
    match qtype {
        Qtype::A => "A",
        Qtype::Aaaa => "AAAA",
        Qtype::Srv => "SRV",
    }
}

/// A port free for both UDP and TCP on 127.0.0.1 just now.
/// A port free for UDP and TCP, below the kernel's ephemeral range: while
/// a test has dnsmasq stopped, its port is then never taken as the local
/// port of some other test's outgoing connection (those come from the
/// ephemeral range, thousands a second in the e2e suite) before it starts
/// again on it.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FLOOR: u32 = 10_000;
    let below = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|&low| low > FLOOR + 1_000)
        .unwrap_or(32_768);
    let span = below - FLOOR;
    // Each test process starts somewhere else in the span.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let seed = std::process::id().wrapping_mul(2_654_435_761)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed).wrapping_add(seed);
        let port = u16::try_from(FLOOR + n % span).expect("below 65536");
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok()
            && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
        {
            return port;
        }
    }
    panic!("no free port between {FLOOR} and {below}");
}

fn signal(child: &Child, sig: Signal) {
    send(child, sig).unwrap_or_else(|e| panic!("signal dnsmasq {}: {e}", child.id()));
}

fn send(child: &Child, sig: Signal) -> std::io::Result<()> {
    let pid = i32::try_from(child.id())
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| std::io::Error::other("not a pid"))?;
    Ok(kill_process(pid, sig)?)
}

/// SIGTERM (which also ends its TCP children), after a SIGCONT in case it
/// is frozen; SIGKILL if it has not exited within a few seconds.
fn terminate(child: &mut Child) {
    // Errors mean it has exited already: the wait below reaps it.
    let _ = send(child, Signal::CONT).and_then(|()| send(child, Signal::TERM));
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // It did not go: make sure, then reap it. An error here means it is gone.
    let _ = child.kill();
    let _ = child.wait();
}
