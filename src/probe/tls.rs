//! TLS for probes that check a server's liveness and height, not its
//! identity: any certificate is accepted (Electrum servers commonly run
//! self-signed ones), while the handshake's signatures are still verified
//! against the certificate the server sent, so the session is with whoever
//! holds that certificate's key.

use std::io;
use std::net::IpAddr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A TLS client that accepts any server certificate.
#[derive(Clone)]
pub struct AnyCertTls {
    connector: TlsConnector,
}

impl AnyCertTls {
    /// A client with the `ring` provider and rustls' safe protocol versions.
    ///
    /// # Errors
    /// When rustls refuses those settings.
    pub fn new() -> Result<AnyCertTls, rustls::Error> {
        // Passed explicitly rather than installed as the process default,
        // as the HTTP prober does: no global state.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        Ok(AnyCertTls {
            connector: TlsConnector::from(Arc::new(config)),
        })
    }

    /// Handshake on `tcp`, connected to `addr` (`host:port`): the host is
    /// sent as SNI when it is a name.
    ///
    /// # Errors
    /// The handshake failed: the server closed or reset (`UnexpectedEof`,
    /// `ConnectionReset`), or did not speak TLS we accept (`InvalidData`).
    pub async fn connect(&self, addr: &str, tcp: TcpStream) -> io::Result<TlsStream<TcpStream>> {
        let peer = tcp.peer_addr()?.ip();
        self.connector.connect(server_name(addr, peer), tcp).await
    }
}

/// The name to present for `addr`: its host when that is a DNS name or an
/// address (rustls sends SNI only for names), else the peer's address.
fn server_name(addr: &str, peer: IpAddr) -> ServerName<'static> {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).unwrap_or_else(|_| ServerName::from(peer))
}

/// Trusts every certificate, checks every handshake signature.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sni_is_the_host_part() {
        let peer = IpAddr::from([10, 0, 0, 1]);
        let name = |addr| server_name(addr, peer).to_str().into_owned();
        assert_eq!(name("electrum.example.net:50002"), "electrum.example.net");
        assert_eq!(name("127.0.0.1:50002"), "127.0.0.1");
        assert_eq!(name("[::1]:50002"), "::1");
        assert!(matches!(
            server_name("[::1]:50002", peer),
            ServerName::IpAddress(_)
        ));
        // Not a valid name: the peer's address instead.
        assert_eq!(name("bad_name!:50002"), "10.0.0.1");
    }
}
