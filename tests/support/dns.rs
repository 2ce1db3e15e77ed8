//! A minimal DNS client for tests: one question over UDP (with or without
//! EDNS) or TCP, and the reply's rcode, TC bit and A, AAAA and SRV answers.
//!
//! Hand-written so a test sees exactly what the server sent (a resolver
//! library turns REFUSED, NXDOMAIN and "no records" into one error, and
//! retries a truncated answer over TCP on its own).

use std::io::{Error, ErrorKind};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, UdpSocket};

/// Response codes the tests look at.
pub const NOERROR: u8 = 0;
/// The name does not exist.
pub const NXDOMAIN: u8 = 3;
/// The server will not answer (dnsmasq with no upstream, outside `--local`).
pub const REFUSED: u8 = 5;

/// How long one query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(1);

/// A record type to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qtype {
    A = 1,
    Aaaa = 28,
    Srv = 33,
}

/// How the question goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// UDP without EDNS: answers over 512 bytes come back truncated.
    Udp,
    /// UDP with an EDNS OPT record offering this payload size.
    UdpEdns(u16),
    /// TCP, length-prefixed: never truncated.
    Tcp,
}

/// One answer record.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Record {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        /// Without the trailing dot.
        target: String,
    },
    /// Any other type, by number.
    Other(u16),
}

/// A reply's header bits and answer section.
#[derive(Debug, Clone)]
pub struct Reply {
    pub rcode: u8,
    pub truncated: bool,
    pub answers: Vec<Record>,
}

impl Reply {
    /// The A and AAAA answers.
    pub fn ips(&self) -> Vec<IpAddr> {
        self.answers
            .iter()
            .filter_map(|r| match r {
                Record::A(ip) => Some(IpAddr::V4(*ip)),
                Record::Aaaa(ip) => Some(IpAddr::V6(*ip)),
                _ => None,
            })
            .collect()
    }
}

/// Ask `server` for `name`/`qtype`, from a socket bound to `source`
/// (port 0), so the server's query log tells these apart from others.
///
/// # Errors
/// I/O errors, a timeout (`TimedOut`), or a reply that does not parse or
/// does not match the question (`InvalidData`).
pub async fn query(
    server: SocketAddr,
    source: IpAddr,
    name: &str,
    qtype: Qtype,
    transport: Transport,
) -> std::io::Result<Reply> {
    let id = next_id();
    let edns = match transport {
        Transport::UdpEdns(size) => Some(size),
        Transport::Udp | Transport::Tcp => None,
    };
    let question = encode(id, name, qtype, edns)?;
    let exchange = async {
        match transport {
            Transport::Udp | Transport::UdpEdns(_) => {
                let sock = UdpSocket::bind((source, 0)).await?;
                // Connected, so a closed port is refused at once (ICMP)
                // instead of timing out.
                sock.connect(server).await?;
                sock.send(&question).await?;
                let mut buf = vec![0u8; 65535];
                let n = sock.recv(&mut buf).await?;
                buf.truncate(n);
                Ok::<_, Error>(buf)
            }
            Transport::Tcp => {
                let sock = match source {
                    IpAddr::V4(_) => TcpSocket::new_v4()?,
                    IpAddr::V6(_) => TcpSocket::new_v6()?,
                };
                sock.bind((source, 0).into())?;
                let mut stream = sock.connect(server).await?;
                let len = u16::try_from(question.len()).map_err(invalid)?;
                stream.write_all(&len.to_be_bytes()).await?;
                stream.write_all(&question).await?;
                let len = stream.read_u16().await?;
                let mut buf = vec![0u8; usize::from(len)];
                stream.read_exact(&mut buf).await?;
                Ok(buf)
            }
        }
    };
    let bytes = tokio::time::timeout(QUERY_TIMEOUT, exchange)
        .await
        .map_err(|_| Error::new(ErrorKind::TimedOut, format!("no answer from {server}")))??;
    decode(id, &bytes)
}

fn next_id() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0x5a5a);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn invalid(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::InvalidData, e.to_string())
}

/// A query with one question and recursion desired.
fn encode(id: u16, name: &str, qtype: Qtype, edns: Option<u16>) -> std::io::Result<Vec<u8>> {
    let mut msg = Vec::with_capacity(64);
    msg.extend_from_slice(&id.to_be_bytes());
    msg.extend_from_slice(&0x0100u16.to_be_bytes());
    let additional = u16::from(edns.is_some());
    for count in [1, 0, 0, additional] {
        msg.extend_from_slice(&count.to_be_bytes());
    }
    for label in name.trim_end_matches('.').split('.') {
        let len = u8::try_from(label.len())
            .ok()
            .filter(|l| (1..64).contains(l))
            .ok_or_else(|| invalid(format!("bad label in {name:?}")))?;
        msg.push(len);
        msg.extend_from_slice(label.as_bytes());
    }
    msg.push(0);
    msg.extend_from_slice(&(qtype as u16).to_be_bytes());
    msg.extend_from_slice(&1u16.to_be_bytes());
    if let Some(size) = edns {
        // OPT: root name, type 41, class = payload size, TTL 0, no data.
        msg.push(0);
        msg.extend_from_slice(&41u16.to_be_bytes());
        msg.extend_from_slice(&size.to_be_bytes());
        msg.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    Ok(msg)
}

/// Reads a message, bounds-checked: a short or looping message is an
/// error, never a panic.
struct Cursor<'a> {
    msg: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> std::io::Result<&[u8]> {
        let bytes = self
            .msg
            .get(self.at..self.at + n)
            .ok_or_else(|| invalid("message ends early"))?;
        self.at += n;
        Ok(bytes)
    }

    fn u16(&mut self) -> std::io::Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A name at the cursor, following compression pointers.
    fn name(&mut self) -> std::io::Result<String> {
        let mut labels = Vec::new();
        let mut at = self.at;
        let mut resume = None;
        for _ in 0..128 {
            let len = *self.msg.get(at).ok_or_else(|| invalid("name ends early"))?;
            match len {
                0 => {
                    self.at = resume.unwrap_or(at + 1);
                    return Ok(labels.join("."));
                }
                l if l & 0xc0 == 0xc0 => {
                    let low = *self.msg.get(at + 1).ok_or_else(|| invalid("bad pointer"))?;
                    resume.get_or_insert(at + 2);
                    at = usize::from(l & 0x3f) << 8 | usize::from(low);
                }
                l => {
                    let label = self
                        .msg
                        .get(at + 1..at + 1 + usize::from(l))
                        .ok_or_else(|| invalid("label ends early"))?;
                    labels.push(String::from_utf8_lossy(label).into_owned());
                    at += 1 + usize::from(l);
                }
            }
        }
        Err(invalid("name pointers loop"))
    }
}

fn decode(id: u16, msg: &[u8]) -> std::io::Result<Reply> {
    let mut c = Cursor { msg, at: 0 };
    if c.u16()? != id {
        return Err(invalid("reply to another query"));
    }
    let flags = c.u16()?;
    let (questions, answers) = (c.u16()?, c.u16()?);
    c.take(4)?;
    for _ in 0..questions {
        c.name()?;
        c.take(4)?;
    }
    let mut records = Vec::with_capacity(usize::from(answers));
    for _ in 0..answers {
        c.name()?;
        let rtype = c.u16()?;
        c.take(6)?;
        let len = usize::from(c.u16()?);
        let end = c.at + len;
        let record = match rtype {
            1 => {
                let b: [u8; 4] = c.take(len)?.try_into().map_err(invalid)?;
                Record::A(Ipv4Addr::from(b))
            }
            28 => {
                let b: [u8; 16] = c.take(len)?.try_into().map_err(invalid)?;
                Record::Aaaa(Ipv6Addr::from(b))
            }
            33 => Record::Srv {
                priority: c.u16()?,
                weight: c.u16()?,
                port: c.u16()?,
                target: c.name()?,
            },
            other => {
                c.take(len)?;
                Record::Other(other)
            }
        };
        if c.at != end {
            return Err(invalid(format!("record of type {rtype} has a bad length")));
        }
        records.push(record);
    }
    Ok(Reply {
        // The low four bits; extended rcodes need EDNS and are not asked for.
        rcode: (flags & 0x000f) as u8,
        truncated: flags & 0x0200 != 0,
        answers: records,
    })
}
