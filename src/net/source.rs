//! Where a backend connection is made from (`source:`): the kernel's
//! choice, an address of this host, or the client's own address (a
//! transparent bind). Also the check, at start and before a reload, that
//! the process may do what its pools ask.

use std::io;
use std::net::{IpAddr, SocketAddr};

use rustix::io::Errno;
use socket2::{Domain, Protocol, Socket, Type};

use crate::config::{BackendSource, Config};

/// The README section that says what `source: client` needs.
const README: &str = "README \"Transparent source\"";

/// The local end of one backend connection, as the pool's `source` and the
/// client decide it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The kernel chooses (`source: proxy`; probes always).
    Proxy,
    /// This host's address; the port left to the kernel.
    Bound(IpAddr),
    /// The client's address, which the host does not own
    /// (`IP_TRANSPARENT` / `IPV6_TRANSPARENT`); the port left to the kernel.
    Transparent(IpAddr),
}

impl Origin {
    /// The origin `source` gives a connection of the client at `client`
    /// (the PROXY header's address when there was one).
    pub fn of(source: BackendSource, client: IpAddr) -> Origin {
        match source {
            BackendSource::Proxy => Origin::Proxy,
            BackendSource::Address(ip) => Origin::Bound(ip.to_canonical()),
            BackendSource::Client => Origin::Transparent(client.to_canonical()),
        }
    }

    /// The address to bind before connecting to `to`, or `None` for the
    /// kernel's choice; `Err(Fallback)` when the families differ (the proxy's own
    /// address is used then: a `source_fallback`).
    pub fn bind_for(self, to: SocketAddr) -> Result<Option<IpAddr>, Fallback> {
        let ip = match self {
            Origin::Proxy => return Ok(None),
            Origin::Bound(ip) | Origin::Transparent(ip) => ip,
        };
        if ip.is_ipv4() == to.is_ipv4() {
            Ok(Some(ip))
        } else {
            Err(Fallback)
        }
    }

    /// The client's address a connection to `to` is made from, when it is
    /// one (`source: client`, the same family).
    pub fn transparent_for(self, to: SocketAddr) -> Option<IpAddr> {
        match self {
            Origin::Transparent(ip) if ip.is_ipv4() == to.is_ipv4() => Some(ip),
            _ => None,
        }
    }

    /// Make `socket` (of `to`'s family) leave from this origin. `Ok(false)`
    /// when the families differ and the kernel chooses instead.
    ///
    /// # Errors
    /// The socket option or the bind failed: a matter of this host (the
    /// capability, the address), never of the backend.
    pub fn prepare(self, socket: &Socket, to: SocketAddr) -> io::Result<bool> {
        let Ok(bind) = self.bind_for(to) else {
            return Ok(false);
        };
        let Some(ip) = bind else {
            return Ok(true);
        };
        if matches!(self, Origin::Transparent(_)) {
            set_transparent(socket, ip)?;
        }
        // Port 0: the kernel picks one; never the client's own port (a
        // second connection of the client, or its TIME_WAIT, would collide).
        socket.bind(&SocketAddr::new(ip, 0).into())?;
        Ok(true)
    }
}

/// A client of the other address family than the backend: connected from
/// the proxy's own address instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fallback;

fn set_transparent(socket: &Socket, ip: IpAddr) -> io::Result<()> {
    match ip {
        IpAddr::V4(_) => socket.set_ip_transparent_v4(true),
        IpAddr::V6(_) => socket.set_ip_transparent_v6(true),
    }
}

/// What a config asks that this process cannot do.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// `source: client` without `CAP_NET_ADMIN` or `CAP_NET_RAW`.
    #[error(
        "pool {pool}: source: client needs CAP_NET_ADMIN or CAP_NET_RAW to connect from the \
         client's address (IP_TRANSPARENT: {err}); grant it (systemd: \
         AmbientCapabilities=CAP_NET_ADMIN), see {README}"
    )]
    Capability {
        /// The first pool that asks for it.
        pool: String,
        /// The kernel's answer.
        err: io::Error,
    },
    /// `source: <ip>` that is not an address of this host.
    #[error("pool {pool}: source {ip} cannot be bound: {err}")]
    Address {
        /// The pool.
        pool: String,
        /// Its `source`.
        ip: IpAddr,
        /// The kernel's answer.
        err: io::Error,
    },
}

impl SourceError {
    /// A missing privilege: restarting will not help (exit 3, as a listen
    /// port that needs one). An address not on the host yet may come.
    pub fn is_lasting(&self) -> bool {
        matches!(self, SourceError::Capability { .. })
    }
}

/// Check that every pool's `source` can be used by this process: the
/// transparent option is permitted, each `source` address is this host's.
/// Done before `run` binds anything and before a reload changes anything.
///
/// # Errors
/// The first pool whose `source` cannot be used, saying why.
pub fn check(config: &Config) -> Result<(), SourceError> {
    let mut transparent_checked = false;
    for pool in &config.pools {
        match pool.source {
            BackendSource::Proxy => {}
            BackendSource::Client if transparent_checked => {}
            BackendSource::Client => {
                transparent_checked = true;
                may_be_transparent().map_err(|err| SourceError::Capability {
                    pool: pool.name.clone(),
                    err,
                })?;
            }
            BackendSource::Address(ip) => {
                can_bind(ip.to_canonical()).map_err(|err| SourceError::Address {
                    pool: pool.name.clone(),
                    ip,
                    err,
                })?;
            }
        }
    }
    Ok(())
}

fn probe_socket(domain: Domain) -> io::Result<Socket> {
    Socket::new(domain, Type::STREAM.cloexec(), Some(Protocol::TCP))
}

/// The kernel lets this process set `IP_TRANSPARENT` (IPv4, or IPv6 on a
/// host without IPv4 sockets).
fn may_be_transparent() -> io::Result<()> {
    match probe_socket(Domain::IPV4) {
        Ok(s) => s.set_ip_transparent_v4(true),
        Err(e) if e.raw_os_error() == Some(Errno::AFNOSUPPORT.raw_os_error()) => {
            probe_socket(Domain::IPV6)?.set_ip_transparent_v6(true)
        }
        Err(e) => Err(e),
    }
}

fn can_bind(ip: IpAddr) -> io::Result<()> {
    let s = probe_socket(Domain::for_address(SocketAddr::new(ip, 0)))?;
    s.bind(&SocketAddr::new(ip, 0).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().expect("address")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("IP")
    }

    #[test]
    fn the_origin_follows_source_and_client() {
        let client = ip("::ffff:198.18.1.2");
        assert_eq!(Origin::of(BackendSource::Proxy, client), Origin::Proxy);
        assert_eq!(
            Origin::of(BackendSource::Client, client),
            Origin::Transparent(ip("198.18.1.2")),
            "an IPv4-mapped client is the IPv4 address it is"
        );
        assert_eq!(
            Origin::of(BackendSource::Address(ip("10.0.0.5")), client),
            Origin::Bound(ip("10.0.0.5"))
        );
    }

    #[test]
    fn another_family_falls_back_to_the_kernels_choice() {
        let v4 = Origin::Transparent(ip("198.18.1.2"));
        assert_eq!(
            v4.bind_for(sa("198.18.3.2:9333")),
            Ok(Some(ip("198.18.1.2")))
        );
        assert_eq!(v4.bind_for(sa("[::1]:9333")), Err(Fallback));
        let v6 = Origin::Bound(ip("::1"));
        assert_eq!(v6.bind_for(sa("127.0.0.1:1")), Err(Fallback));
        assert_eq!(Origin::Proxy.bind_for(sa("[::1]:1")), Ok(None));
    }

    #[test]
    fn a_bound_origin_connects_from_its_address_with_a_kernel_port() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let to = listener.local_addr().expect("addr");
        let socket = probe_socket(Domain::IPV4).expect("socket");
        assert!(
            Origin::Bound(ip("127.0.0.2"))
                .prepare(&socket, to)
                .expect("bind")
        );
        socket.connect(&to.into()).expect("connect");
        let (_, peer) = listener.accept().expect("accept");
        assert_eq!(peer.ip(), ip("127.0.0.2"));
        assert_ne!(peer.port(), 0);
    }

    #[test]
    fn an_address_not_on_the_host_is_refused_by_the_check() {
        let yaml = "pools:\n  - name: p\n    listen: 127.0.0.1:0\n    source: 198.51.100.7\n    \
                    backends: [{name: a, addr: \"127.0.0.1:1\"}]\n";
        let config = Config::parse(yaml, std::path::Path::new("t.yaml")).expect("config");
        let err = check(&config).expect_err("198.51.100.7 is no address of this host");
        assert!(!err.is_lasting());
        assert!(
            err.to_string()
                .starts_with("pool p: source 198.51.100.7 cannot be bound"),
            "{err}"
        );
    }
}
