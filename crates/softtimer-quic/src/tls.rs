//! TLS and transport settings for the driver: a certificate (self-signed, from PEM files or
//! PEM text), rustls on the `ring` provider, an ALPN list, and quinn-proto's
//! `TransportConfig` passed through; or a rustls configuration of the caller's own. The
//! [`Tuning`] every arm of the lab's comparisons shares, and the ALPN `perf` its tools speak,
//! are one use of them.
//!
//! ```
//! use std::sync::Arc;
//! use softtimer_quic::tls::{Identity, Trust, client_config_with, server_config_with};
//!
//! let identity = Identity::self_signed(&["localhost"]).unwrap();
//! let transport = Arc::new(quinn_proto::TransportConfig::default());
//! let server = server_config_with(&identity, &[b"h3", b"hq-interop"], Arc::clone(&transport));
//! let client = client_config_with(&Trust::Cert(identity.cert.clone()), &[b"h3"], transport);
//! assert!(server.is_ok() && client.is_ok());
//! ```

use std::sync::Arc;
use std::time::Duration;

use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use std::path::Path;

use quinn_proto::{
    AckFrequencyConfig, ClientConfig, ServerConfig, TransportConfig, VarInt,
    congestion::ControllerFactory,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};

use crate::{ConfigError, QuicError, TlsError};

/// The ALPN of the QUIC performance protocol (draft-banks-quic-performance).
pub const ALPN_PERF: &[u8] = b"perf";

/// A certificate chain and its key, DER encoded.
#[derive(Debug)]
pub struct Identity {
    /// The end-entity certificate.
    pub cert: CertificateDer<'static>,
    /// The certificates that chain it to a root, if any.
    pub chain: Vec<CertificateDer<'static>>,
    /// Its private key.
    pub key: PrivateKeyDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity {
            cert: self.cert.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

impl Identity {
    /// A fresh self-signed certificate for `names` (for example `["localhost"]`), on an
    /// ECDSA P-256 key, as rcgen makes by default.
    pub fn self_signed(names: &[&str]) -> Result<Identity, QuicError> {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let certified = rcgen::generate_simple_self_signed(names).map_err(TlsError::SelfSigned)?;
        Ok(Identity {
            cert: certified.cert.der().clone(),
            chain: Vec::new(),
            key: PrivatePkcs8KeyDer::from(certified.signing_key.serialize_der()).into(),
        })
    }

    /// A fresh self-signed certificate for `names` on an Ed25519 key: its signatures all
    /// have one length, so a handshake's datagram sizes do not vary from run to run (what a
    /// reproducible simulated run needs).
    pub fn self_signed_ed25519(names: &[&str]) -> Result<Identity, QuicError> {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let key =
            rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).map_err(TlsError::SelfSigned)?;
        let params = rcgen::CertificateParams::new(names).map_err(TlsError::SelfSigned)?;
        let cert = params.self_signed(&key).map_err(TlsError::SelfSigned)?;
        Ok(Identity {
            cert: cert.der().clone(),
            chain: Vec::new(),
            key: PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
        })
    }

    /// The certificate chain and key in PEM text (the end-entity certificate first, then its
    /// chain; the first private key found, PKCS #8, PKCS #1 or SEC1).
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Identity, QuicError> {
        Identity::parse(cert_pem, key_pem, "memory", "memory")
    }

    /// The certificate chain and key in the PEM files `cert` and `key`.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Identity, QuicError> {
        let (cert_pem, key_pem) = (read(cert)?, read(key)?);
        Identity::parse(
            &cert_pem,
            &key_pem,
            &cert.display().to_string(),
            &key.display().to_string(),
        )
    }

    fn parse(
        cert_pem: &[u8],
        key_pem: &[u8],
        cert_origin: &str,
        key_origin: &str,
    ) -> Result<Identity, QuicError> {
        let pem = |what, origin: &str, source| TlsError::Pem {
            what,
            origin: origin.to_string(),
            source,
        };
        let mut certs = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem("certificate", cert_origin, e))?
            .into_iter();
        let cert = certs.next().ok_or_else(|| {
            pem(
                "certificate",
                cert_origin,
                rustls::pki_types::pem::Error::NoItemsFound,
            )
        })?;
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| pem("private key", key_origin, e))?;
        Ok(Identity {
            cert,
            chain: certs.collect(),
            key,
        })
    }

    fn chain(&self) -> Vec<CertificateDer<'static>> {
        std::iter::once(self.cert.clone())
            .chain(self.chain.iter().cloned())
            .collect()
    }
}

/// The file at `path`.
fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// rustls's refusal of `what`.
fn refused(what: &'static str) -> impl FnOnce(rustls::Error) -> TlsError {
    move |source| TlsError::Rustls { what, source }
}

/// A connection's idle timeout unless [`Tuning::idle_timeout`] says otherwise.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The transport settings every arm of a comparison shares, so that only the runtime and
/// the pacing differ: flow-control windows, the congestion controller, MTU discovery, ACK
/// frequency, idle timeout.
#[derive(Clone)]
pub struct Tuning {
    /// Per-stream and connection receive window, and the send window, bytes. Set it to at
    /// least twice the path's bandwidth-delay product.
    pub window: u64,
    /// The congestion controller (quinn-proto's CUBIC by default; the driver's tail-loss
    /// probe works with any).
    pub controller: Arc<dyn ControllerFactory + Send + Sync>,
    /// Idle timeout of a connection.
    pub idle_timeout: Duration,
    /// Whether path MTU discovery runs (off: every datagram is 1200 bytes).
    pub mtu_discovery: bool,
    /// Ask the peer (quinn-proto's ACK-frequency extension) to acknowledge only every this
    /// many ack-eliciting packets; `None` leaves the default of every other packet.
    pub ack_every: Option<u32>,
    /// The largest ACK delay to ask the peer for, with `ack_every`.
    pub max_ack_delay: Option<Duration>,
    /// Segmentation offload (GSO) for sends of several datagrams in one call.
    pub gso: bool,
    /// Unidirectional streams the peer may have open at once (0, the default: none; the
    /// application takes them with [`Driver::accept_uni`](crate::Driver::accept_uni) on
    /// [`QuicEvent::StreamOpened`](crate::QuicEvent::StreamOpened)). Off by default so that
    /// an application that reads no such stream gives a peer no credit to fill memory and
    /// the receive window with one.
    pub uni_streams: u32,
    /// Whether this side takes and sends unreliable datagrams (RFC 9221; off by default, for
    /// the same reason): a receive buffer of [`DATAGRAM_BUFFER`] bytes, read with
    /// [`Driver::read_datagram`](crate::Driver::read_datagram) on
    /// [`QuicEvent::DatagramReceived`](crate::QuicEvent::DatagramReceived). quinn-proto sends
    /// datagrams only where both sides have them on.
    pub datagrams: bool,
}

/// The datagram receive buffer with [`Tuning::datagrams`], bytes: quinn-proto's default,
/// about a second of 10 Mbit/s.
pub const DATAGRAM_BUFFER: usize = 1_250_000;

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            window: 16 << 20,
            controller: Arc::new(quinn_proto::congestion::CubicConfig::default()),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            mtu_discovery: false,
            ack_every: None,
            max_ack_delay: None,
            gso: true,
            uni_streams: 0,
            datagrams: false,
        }
    }
}

impl std::fmt::Debug for Tuning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tuning")
            .field("window", &self.window)
            .field("idle_timeout", &self.idle_timeout)
            .field("mtu_discovery", &self.mtu_discovery)
            .field("ack_every", &self.ack_every)
            .field("max_ack_delay", &self.max_ack_delay)
            .field("gso", &self.gso)
            .field("uni_streams", &self.uni_streams)
            .field("datagrams", &self.datagrams)
            .finish_non_exhaustive()
    }
}

impl Tuning {
    /// quinn-proto's transport configuration with these settings.
    pub fn transport(&self) -> Result<TransportConfig, QuicError> {
        let window =
            VarInt::from_u64(self.window).map_err(|e| ConfigError::Window(self.window, e))?;
        let idle = quinn_proto::IdleTimeout::try_from(self.idle_timeout)
            .map_err(|e| ConfigError::IdleTimeout(self.idle_timeout, e))?;
        let mut t = TransportConfig::default();
        t.stream_receive_window(window)
            .receive_window(window)
            .send_window(self.window)
            .max_idle_timeout(Some(idle))
            .congestion_controller_factory(Arc::clone(&self.controller))
            .enable_segmentation_offload(self.gso)
            // Unless asked for, a peer is given no credit for unidirectional streams and no
            // DATAGRAM support, rather than having what it sends on them taken, acknowledged
            // and never read (its memory held, the connection's receive window used up).
            .max_concurrent_uni_streams(VarInt::from_u32(self.uni_streams))
            .datagram_receive_buffer_size(self.datagrams.then_some(DATAGRAM_BUFFER));
        if !self.mtu_discovery {
            t.mtu_discovery_config(None);
        }
        if self.ack_every.is_some() || self.max_ack_delay.is_some() {
            let mut ack = AckFrequencyConfig::default();
            if let Some(n) = self.ack_every {
                ack.ack_eliciting_threshold(VarInt::from_u32(n.saturating_sub(1)));
            }
            ack.max_ack_delay(self.max_ack_delay);
            // The extension's default (2) lets a receiver sit on one out-of-order packet;
            // keep RFC 9000's immediate ACK of it, which the default transport has and the
            // driver's tail-loss probe relies on.
            ack.reordering_threshold(VarInt::from_u32(1));
            t.ack_frequency_config(Some(ack));
        }
        Ok(t)
    }
}

/// A server configuration presenting `identity`, ALPN `perf`, with `tuning`.
pub fn server_config(identity: &Identity, tuning: &Tuning) -> Result<ServerConfig, QuicError> {
    server_config_with(identity, &[ALPN_PERF], Arc::new(tuning.transport()?))
}

/// A server configuration presenting `identity`, offering the protocols `alpn` (in order of
/// preference; a client that offers none of them fails its handshake with TLS's
/// `no_application_protocol`), with quinn-proto's `transport` settings.
pub fn server_config_with(
    identity: &Identity,
    alpn: &[&[u8]],
    transport: Arc<TransportConfig>,
) -> Result<ServerConfig, QuicError> {
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(refused("TLS 1.3 on the ring provider"))?
        .with_no_client_auth()
        .with_single_cert(identity.chain(), identity.key.clone_key())
        .map_err(refused("the server's certificate and key"))?;
    tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    server_config_from_rustls(tls, transport)
}

/// A server configuration from a rustls configuration of the caller's own (TLS 1.3, its
/// own certificates, ALPN and client authentication), with quinn-proto's `transport`.
pub fn server_config_from_rustls(
    tls: rustls::ServerConfig,
    transport: Arc<TransportConfig>,
) -> Result<ServerConfig, QuicError> {
    let crypto = QuicServerConfig::try_from(tls).map_err(TlsError::NoInitialCipherSuite)?;
    let mut config = ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(transport);
    Ok(config)
}

/// Whom the client trusts.
#[derive(Clone, Debug)]
pub enum Trust {
    /// Exactly this certificate (the server's self-signed one).
    Cert(CertificateDer<'static>),
    /// These roots.
    Roots(Arc<rustls::RootCertStore>),
    /// Any certificate: for testing against a server whose certificate is unknown.
    Insecure,
    /// Nothing: every handshake fails (how a client without a trust root behaves).
    Nothing,
}

impl Trust {
    /// The certificates in the PEM file `path` as roots.
    pub fn pem_file(path: &Path) -> Result<Trust, QuicError> {
        let pem = read(path)?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|source| TlsError::Pem {
                what: "certificate",
                origin: path.display().to_string(),
                source,
            })?;
            roots.add(cert).map_err(refused("a trusted certificate"))?;
        }
        Ok(Trust::Roots(Arc::new(roots)))
    }
}

/// A client configuration with ALPN `perf` that trusts `trust`, with `tuning`.
pub fn client_config(trust: &Trust, tuning: &Tuning) -> Result<ClientConfig, QuicError> {
    client_config_with(trust, &[ALPN_PERF], Arc::new(tuning.transport()?))
}

/// A client configuration that trusts `trust`, offers the protocols `alpn`, with
/// quinn-proto's `transport` settings.
pub fn client_config_with(
    trust: &Trust,
    alpn: &[&[u8]],
    transport: Arc<TransportConfig>,
) -> Result<ClientConfig, QuicError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(refused("TLS 1.3 on the ring provider"))?;
    let mut tls = match trust {
        Trust::Cert(cert) => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(cert.clone())
                .map_err(refused("the trusted certificate"))?;
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::Roots(roots) => builder
            .with_root_certificates(Arc::clone(roots))
            .with_no_client_auth(),
        Trust::Nothing => builder
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
            .with_no_client_auth(),
    };
    tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    client_config_from_rustls(tls, transport)
}

/// A client configuration from a rustls configuration of the caller's own, with
/// quinn-proto's `transport`.
pub fn client_config_from_rustls(
    tls: rustls::ClientConfig,
    transport: Arc<TransportConfig>,
) -> Result<ClientConfig, QuicError> {
    let crypto = QuicClientConfig::try_from(tls).map_err(TlsError::NoInitialCipherSuite)?;
    let mut config = ClientConfig::new(Arc::new(crypto));
    config.transport_config(transport);
    Ok(config)
}

/// Accepts any server certificate, but still checks the handshake signatures.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
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
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
