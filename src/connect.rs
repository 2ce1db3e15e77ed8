//! Connect to a backend: resolve its name afresh, try each address, all
//! within one `connect_timeout` budget.

use std::io;
use std::time::Duration;

use tokio::net::TcpStream;

/// Why a backend connect failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The name did not resolve (or resolved to nothing).
    #[error("resolve {addr}: {source}")]
    Resolve {
        /// The backend address.
        addr: String,
        /// The resolver's error.
        source: io::Error,
    },
    /// Every resolved address refused or failed.
    #[error("connect to {addr}: {source}")]
    Connect {
        /// The backend address.
        addr: String,
        /// The last address's error.
        source: io::Error,
    },
    /// The budget ran out.
    #[error("connect to {addr}: timed out after {timeout:?}")]
    Timeout {
        /// The backend address.
        addr: String,
        /// The budget.
        timeout: Duration,
    },
}

impl ConnectError {
    /// Short reason for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ConnectError::Resolve { .. } => "resolve",
            ConnectError::Connect { source, .. }
                if source.kind() == io::ErrorKind::ConnectionRefused =>
            {
                "refused"
            }
            ConnectError::Connect { .. } if self.is_local() => "local_resources",
            ConnectError::Connect { .. } => "error",
            ConnectError::Timeout { .. } => "timeout",
        }
    }
}

impl ConnectError {
    /// This process ran out of descriptors or memory: says nothing about
    /// the backend.
    pub fn is_local(&self) -> bool {
        use rustix::io::Errno;
        let ConnectError::Connect { source, .. } = self else {
            return false;
        };
        // ADDRNOTAVAIL: out of ephemeral ports, another local resource.
        let local = [
            Errno::MFILE,
            Errno::NFILE,
            Errno::NOBUFS,
            Errno::NOMEM,
            Errno::ADDRNOTAVAIL,
        ];
        source
            .raw_os_error()
            .is_some_and(|code| local.iter().any(|e| e.raw_os_error() == code))
    }
}

/// Resolve `addr` (`host:port`) now, so a node that changed address is
/// followed, and connect to the first address that answers.
///
/// # Errors
/// A [`ConnectError`] saying which step failed.
pub async fn connect(addr: &str, timeout: Duration) -> Result<TcpStream, ConnectError> {
    match tokio::time::timeout(timeout, connect_any(addr)).await {
        Ok(result) => result,
        Err(_elapsed) => Err(ConnectError::Timeout {
            addr: addr.to_owned(),
            timeout,
        }),
    }
}

async fn connect_any(addr: &str) -> Result<TcpStream, ConnectError> {
    let resolve_err = |source| ConnectError::Resolve {
        addr: addr.to_owned(),
        source,
    };
    let mut last = None;
    for sa in tokio::net::lookup_host(addr).await.map_err(resolve_err)? {
        match TcpStream::connect(sa).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(source) => ConnectError::Connect {
            addr: addr.to_owned(),
            source,
        },
        None => resolve_err(io::Error::new(
            io::ErrorKind::NotFound,
            "no addresses found",
        )),
    })
}
