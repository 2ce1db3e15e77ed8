//! dnsmasq as the discovery benchmark's DNS server: one name with N A
//! records on 127.x loopback addresses, served from a hosts file that a
//! SIGHUP makes it read again; and a DNS query over TCP that says what
//! its answer holds.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rustix::process::{Pid, Signal, kill_process};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::child::Kid;
use crate::procfs;

/// Addresses per /24, skipping `.0` and `.251` up.
const PER_NET: usize = 250;
/// 127.1.0.0 to 127.255.255.255.
pub const MAX_MEMBERS: usize = 255 * 256 * PER_NET;

/// The `i`-th member's address: 127.1.0.1, …, 127.1.0.250, 127.1.1.1, …
pub fn address(i: usize) -> Ipv4Addr {
    let net = i / PER_NET;
    let b = 1 + net / 256;
    let c = net % 256;
    let d = 1 + i % PER_NET;
    Ipv4Addr::new(127, b as u8, c as u8, d as u8)
}

/// Write `n` addresses for `name` to `path` at once (a file renamed into
/// place), so dnsmasq never reads half of it.
///
/// # Errors
/// The file cannot be written.
pub fn write_hosts(path: &Path, name: &str, n: usize) -> anyhow::Result<()> {
    if n > MAX_MEMBERS {
        bail!("at most {MAX_MEMBERS} members fit in 127.1.0.0/8");
    }
    let text: String = (0..n).map(|i| format!("{} {name}\n", address(i))).collect();
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))
}

/// A dnsmasq serving a hosts file on a loopback port.
pub struct Dnsmasq {
    kid: Kid,
    /// Where it answers (UDP and TCP).
    pub addr: SocketAddr,
}

impl Dnsmasq {
    /// Start `bin` on a free loopback port, serving only `hosts` as the
    /// whole of `domain`, logging to `log`; retried on another port when it
    /// cannot bind.
    ///
    /// # Errors
    /// It cannot be started, or exits at once three times.
    pub async fn start(
        bin: &Path,
        hosts: &Path,
        domain: &str,
        log: &Path,
    ) -> anyhow::Result<Dnsmasq> {
        let mut last = None;
        for _ in 0..3 {
            let addr = free_udp_and_tcp()?;
            let out = std::fs::File::create(log)?;
            let mut cmd = Command::new(bin);
            cmd.arg("-k")
                .arg(format!("--port={}", addr.port()))
                .args([
                    "--listen-address=127.0.0.1",
                    "--bind-interfaces",
                    "--no-resolv",
                    "--no-hosts",
                    "--conf-file=/dev/null",
                    "--user=root",
                    "--pid-file=",
                    "--local-ttl=0",
                ])
                .arg(format!("--addn-hosts={}", hosts.display()))
                // Its own zone: AAAA queries get an empty answer, not the
                // REFUSED of a server with no upstream.
                .arg(format!("--local=/{domain}/"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(out));
            let mut kid = Kid::spawn(&mut cmd, "dnsmasq")?;
            // Up when it accepts on its TCP port; gone when it could not bind.
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Err(e) = kid.alive() {
                    last = Some(e);
                    break;
                }
                if TcpStream::connect(addr).await.is_ok() {
                    return Ok(Dnsmasq { kid, addr });
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            last.get_or_insert_with(|| anyhow::anyhow!("dnsmasq did not listen within 5 s"));
        }
        let why = std::fs::read_to_string(log).unwrap_or_default();
        Err(last.unwrap_or_else(|| anyhow::anyhow!("dnsmasq did not start")))
            .with_context(|| format!("dnsmasq: {}", why.trim()))
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.kid.pid()
    }

    /// Nanoseconds on a CPU of it and of the children serving TCP now (one
    /// that ended meanwhile is not counted).
    ///
    /// # Errors
    /// It is gone.
    pub fn on_cpu_ns(&self) -> anyhow::Result<u64> {
        let children = children(self.pid())?;
        let served: u64 = children
            .iter()
            .filter_map(|&c| procfs::on_cpu_ns(c).ok())
            .sum();
        Ok(procfs::on_cpu_ns(self.pid())? + served)
    }

    /// Have it read its hosts file again (SIGHUP).
    ///
    /// # Errors
    /// It is gone.
    pub fn reload(&mut self) -> anyhow::Result<()> {
        self.kid.alive()?;
        let pid = i32::try_from(self.pid())
            .ok()
            .and_then(Pid::from_raw)
            .context("dnsmasq's pid")?;
        kill_process(pid, Signal::HUP).context("SIGHUP dnsmasq")
    }

    /// End the processes it forked to serve TCP connections. Each serves
    /// its connection from the data it had when forked (up to 100 queries
    /// or 150 s, dnsmasq's `TCP_MAX_QUERIES` and `CHILD_LIFETIME`), so a
    /// client that keeps its connection sees a reload only after that.
    ///
    /// # Errors
    /// Its children cannot be listed or signalled.
    pub fn end_tcp_children(&self) -> anyhow::Result<usize> {
        let children = children(self.pid())?;
        for &child in &children {
            let pid = i32::try_from(child).ok().and_then(Pid::from_raw);
            let pid = pid.context("a child's pid")?;
            // Gone already: it finished its connection meanwhile.
            let _ = kill_process(pid, Signal::KILL);
        }
        Ok(children.len())
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        // Before the parent: killed, it no longer ends them itself.
        // A failure leaves them to end with their connections.
        let _ = self.end_tcp_children();
    }
}

/// The children of every thread of `pid` (`/proc/PID/task/*/children`).
fn children(pid: u32) -> anyhow::Result<Vec<u32>> {
    let dir = format!("/proc/{pid}/task");
    let mut out = Vec::new();
    for task in std::fs::read_dir(&dir).with_context(|| format!("read {dir}"))? {
        let path = task?.path().join("children");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        out.extend(
            text.split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    Ok(out)
}

/// A loopback port free for both UDP and TCP a moment ago.
fn free_udp_and_tcp() -> anyhow::Result<SocketAddr> {
    for _ in 0..16 {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = tcp.local_addr()?;
        if UdpSocket::bind(addr).is_ok() {
            return Ok(addr);
        }
    }
    bail!("no loopback port free for both UDP and TCP in 16 tries")
}

/// What one answer held.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    /// Answer records (all A records for a hosts-file name).
    pub records: usize,
    /// The DNS message's size, without TCP's length prefix.
    pub bytes: usize,
    /// The TC flag.
    pub truncated: bool,
    /// The response code (0 = NOERROR).
    pub rcode: u8,
    /// From connecting to the last byte.
    pub elapsed: Duration,
}

/// Ask `server` over TCP for `name`'s A records.
///
/// # Errors
/// No answer within 5 s, or not a DNS answer to this query.
pub async fn query_a(server: SocketAddr, name: &str) -> anyhow::Result<Answer> {
    const ID: u16 = 0x5a17;
    let mut msg = Vec::with_capacity(64);
    // Header: id, flags (RD), 1 question, no other records.
    for v in [ID, 0x0100, 1, 0, 0, 0] {
        msg.extend_from_slice(&v.to_be_bytes());
    }
    for label in name.trim_end_matches('.').split('.') {
        let len = u8::try_from(label.len())
            .ok()
            .filter(|l| (1..64).contains(l));
        let len = len.with_context(|| format!("bad label in {name:?}"))?;
        msg.push(len);
        msg.extend_from_slice(label.as_bytes());
    }
    msg.push(0);
    msg.extend_from_slice(&[0, 1, 0, 1]); // type A, class IN
    let started = Instant::now();
    let exchange = async {
        let mut s = TcpStream::connect(server).await?;
        let mut framed = (msg.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&msg);
        s.write_all(&framed).await?;
        let len = s.read_u16().await? as usize;
        let mut answer = vec![0u8; len];
        s.read_exact(&mut answer).await?;
        anyhow::Ok(answer)
    };
    let answer = tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .context("no DNS answer within 5 s")??;
    let elapsed = started.elapsed();
    let word = |i: usize| {
        answer
            .get(i..i + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let (Some(id), Some(flags), Some(ancount)) = (word(0), word(2), word(6)) else {
        bail!("a DNS answer of {} bytes", answer.len());
    };
    if id != ID || flags & 0x8000 == 0 {
        bail!("not an answer to our query");
    }
    Ok(Answer {
        records: usize::from(ancount),
        bytes: answer.len(),
        truncated: flags & 0x0200 != 0,
        rcode: (flags & 0x000f) as u8,
        elapsed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_skip_network_and_broadcast() {
        assert_eq!(address(0), Ipv4Addr::new(127, 1, 0, 1));
        assert_eq!(address(249), Ipv4Addr::new(127, 1, 0, 250));
        assert_eq!(address(250), Ipv4Addr::new(127, 1, 1, 1));
        assert_eq!(address(999), Ipv4Addr::new(127, 1, 3, 250));
        assert_eq!(address(MAX_MEMBERS - 1), Ipv4Addr::new(127, 255, 255, 250));
    }
}
