//! TLS for the driver: a self-signed certificate made at start-up, rustls on the `ring`
//! provider, ALPN `perf`, as quinn's own examples set it up; and the shared transport
//! settings every arm of an experiment uses.

use std::sync::Arc;
use std::time::Duration;

use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::{
    AckFrequencyConfig, ClientConfig, ServerConfig, TransportConfig, VarInt,
    congestion::ControllerFactory,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};

use crate::QuicError;
use crate::probe::FlightTracking;

/// The ALPN of the QUIC performance protocol (draft-banks-quic-performance).
pub const ALPN_PERF: &[u8] = b"perf";

/// A certificate and its key, DER encoded.
#[derive(Clone, Debug)]
pub struct Identity {
    /// The certificate.
    pub cert: CertificateDer<'static>,
    /// Its PKCS #8 private key, DER.
    pub key: Vec<u8>,
}

impl Identity {
    /// A fresh self-signed certificate for `names` (for example `["localhost"]`).
    pub fn self_signed(names: &[&str]) -> Result<Identity, QuicError> {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let certified = rcgen::generate_simple_self_signed(names)
            .map_err(|e| QuicError::Tls(format!("making a self-signed certificate: {e}")))?;
        Ok(Identity {
            cert: certified.cert.der().clone(),
            key: certified.signing_key.serialize_der(),
        })
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
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
    /// The congestion controller (quinn-proto's CUBIC by default). It is wrapped in
    /// [`FlightTracking`], which lets the driver's tail-loss probe see unacknowledged bytes
    /// and changes nothing of its behaviour.
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
}

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
            .finish_non_exhaustive()
    }
}

impl Tuning {
    /// quinn-proto's transport configuration with these settings.
    pub fn transport(&self) -> Result<TransportConfig, QuicError> {
        let window = VarInt::from_u64(self.window)
            .map_err(|_| QuicError::Config(format!("window {} is too large", self.window)))?;
        let idle = quinn_proto::IdleTimeout::try_from(self.idle_timeout)
            .map_err(|_| QuicError::Config("idle timeout is too large".into()))?;
        let mut t = TransportConfig::default();
        t.stream_receive_window(window)
            .receive_window(window)
            .send_window(self.window)
            .max_idle_timeout(Some(idle))
            .congestion_controller_factory(Arc::new(FlightTracking::new(Arc::clone(
                &self.controller,
            ))))
            .enable_segmentation_offload(self.gso);
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
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| QuicError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(
            vec![identity.cert.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(identity.key.clone())),
        )
        .map_err(|e| QuicError::Tls(format!("server certificate: {e}")))?;
    tls.alpn_protocols = vec![ALPN_PERF.to_vec()];
    let crypto =
        QuicServerConfig::try_from(tls).map_err(|e| QuicError::Tls(format!("server TLS: {e}")))?;
    let mut config = ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(Arc::new(tuning.transport()?));
    Ok(config)
}

/// Whom the client trusts.
#[derive(Clone, Debug)]
pub enum Trust {
    /// Exactly this certificate (the server's self-signed one).
    Cert(CertificateDer<'static>),
    /// Any certificate: for testing against a server whose certificate is unknown.
    Insecure,
    /// Nothing: every handshake fails (how a client without a trust root behaves).
    Nothing,
}

/// A client configuration with ALPN `perf` that trusts `trust`, with `tuning`.
pub fn client_config(trust: &Trust, tuning: &Tuning) -> Result<ClientConfig, QuicError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| QuicError::Tls(e.to_string()))?;
    let mut tls = match trust {
        Trust::Cert(cert) => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(cert.clone())
                .map_err(|e| QuicError::Tls(format!("trusted certificate: {e}")))?;
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::Nothing => builder
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
            .with_no_client_auth(),
    };
    tls.alpn_protocols = vec![ALPN_PERF.to_vec()];
    let crypto =
        QuicClientConfig::try_from(tls).map_err(|e| QuicError::Tls(format!("client TLS: {e}")))?;
    let mut config = ClientConfig::new(Arc::new(crypto));
    config.transport_config(Arc::new(tuning.transport()?));
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
