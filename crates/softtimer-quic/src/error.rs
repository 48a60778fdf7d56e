//! What can go wrong, as types: a stream's reset or stop with its code, TLS and configuration
//! errors with their sources. A connection's end is an event, with quinn-proto's own
//! `ConnectionError` ([`QuicEvent::Lost`](crate::QuicEvent::Lost)).

use std::path::PathBuf;

use quinn_proto::{StreamId, VarInt};

use crate::ConnId;

/// What can go wrong (more may come: match with a wildcard arm).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QuicError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The TLS set-up was refused.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A setting is out of range.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// quinn-proto refused to start a connection.
    #[error("cannot connect")]
    Connect(#[source] quinn_proto::ConnectError),
    /// No such connection: it never existed, or it has closed and its state is gone.
    #[error("no connection {0}")]
    UnknownConnection(ConnId),
    /// The connection has ended (closed by either side, timed out, reset or failed; its
    /// state is kept until it drains): it opens no stream and takes no write or datagram. A
    /// [`QuicEvent::Lost`](crate::QuicEvent::Lost) says why.
    #[error("connection {0} has ended")]
    ConnectionEnded(ConnId),
    /// A stream operation failed.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// An unreliable datagram was not sent.
    #[error(transparent)]
    Datagram(#[from] DatagramError),
    /// The event loop failed.
    #[error("event loop")]
    Loop(#[source] softtimer_rt::RtError),
}

impl QuicError {
    pub(crate) fn io(what: &'static str, source: std::io::Error) -> QuicError {
        QuicError::Io { what, source }
    }

    /// The stream error, if this is one.
    pub fn as_stream(&self) -> Option<&StreamError> {
        match self {
            QuicError::Stream(e) => Some(e),
            _ => None,
        }
    }
}

/// Why a stream operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The peer reset the stream (RESET_STREAM): what it sent is abandoned.
    #[error("stream {stream} was reset by the peer with code {code}")]
    Reset {
        /// The stream.
        stream: StreamId,
        /// The peer's application error code.
        code: VarInt,
    },
    /// The peer asked us to stop sending (STOP_SENDING): the stream takes no more writes.
    #[error("stream {stream} was stopped by the peer with code {code}")]
    Stopped {
        /// The stream.
        stream: StreamId,
        /// The peer's application error code.
        code: VarInt,
    },
    /// The stream (or this side of it) is not open: never opened, already finished and
    /// read to its end, or reset. A read of a stream already read to its end gives this,
    /// not [`StreamError::Reset`].
    #[error("stream {stream} is closed")]
    Closed {
        /// The stream.
        stream: StreamId,
    },
    /// An ordered read after an unordered one (quinn-proto's `IllegalOrderedRead`).
    #[error("ordered read of stream {stream} after an unordered read")]
    IllegalOrderedRead {
        /// The stream.
        stream: StreamId,
    },
    /// A write (finish, reset) of the peer's unidirectional stream, or a read (stop) of
    /// this side's: each has only the other half.
    #[error("{stream} carries data the other way")]
    WrongDirection {
        /// The stream.
        stream: StreamId,
    },
}

impl StreamError {
    /// The stream.
    pub fn stream(&self) -> StreamId {
        match *self {
            StreamError::Reset { stream, .. }
            | StreamError::Stopped { stream, .. }
            | StreamError::Closed { stream }
            | StreamError::IllegalOrderedRead { stream }
            | StreamError::WrongDirection { stream } => stream,
        }
    }

    /// The peer's error code, for a reset or a stop.
    pub fn code(&self) -> Option<VarInt> {
        match *self {
            StreamError::Reset { code, .. } | StreamError::Stopped { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// Why an unreliable datagram (RFC 9221) was not sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DatagramError {
    /// This side's transport settings do not take datagrams
    /// ([`Tuning::datagrams`](crate::tls::Tuning::datagrams) off, quinn-proto's
    /// `datagram_receive_buffer_size(None)`): quinn-proto sends none then either.
    #[error("datagrams are off in this side's transport settings")]
    Disabled,
    /// The peer did not offer to take datagrams (or the handshake has not told us yet).
    #[error("the peer does not take datagrams")]
    UnsupportedByPeer,
    /// Larger than the path and the peer allow now ([`Driver::max_datagram_size`](crate::Driver::max_datagram_size)).
    #[error("a datagram of {size} bytes is larger than the connection takes ({max:?})")]
    TooLarge {
        /// The datagram's size.
        size: usize,
        /// The largest the connection takes now.
        max: Option<usize>,
    },
    /// The send buffer is full and the datagram was not to displace older ones: here it is
    /// back; [`QuicEvent::DatagramsUnblocked`](crate::QuicEvent::DatagramsUnblocked) says
    /// when there is room.
    #[error("the datagram send buffer is full")]
    Blocked(bytes::Bytes),
}

/// Why a TLS set-up was refused.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen could not make a self-signed certificate.
    #[error("making a self-signed certificate")]
    SelfSigned(#[source] rcgen::Error),
    /// A PEM file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A PEM text does not parse, or holds no item of the kind needed.
    #[error("{what} in {origin}")]
    Pem {
        /// What was looked for (`certificate`, `private key`).
        what: &'static str,
        /// Where (a path, or `memory`).
        origin: String,
        /// The parser's error.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// rustls refused the configuration (a certificate and key that do not match, a
    /// certificate it cannot use, a trust root it cannot parse).
    #[error("{what}")]
    Rustls {
        /// What was being set up.
        what: &'static str,
        /// rustls's error.
        #[source]
        source: rustls::Error,
    },
    /// The rustls configuration offers no cipher suite QUIC can use for its Initial packets
    /// (TLS 1.3 with `TLS13_AES_128_GCM_SHA256`).
    #[error("the rustls configuration has no cipher suite QUIC can start with")]
    NoInitialCipherSuite(#[source] quinn_proto::crypto::rustls::NoInitialCipherSuite),
}

/// A setting out of range (more may come: match with a wildcard arm).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// [`DriverConfig::max_datagrams`](crate::DriverConfig::max_datagrams) is 0.
    #[error("max_datagrams must be at least 1")]
    ZeroMaxDatagrams,
    /// [`DriverConfig::datagrams_per_departure`](crate::DriverConfig::datagrams_per_departure)
    /// is 0.
    #[error("datagrams_per_departure must be at least 1")]
    ZeroPerDeparture,
    /// A timer granularity of zero.
    #[error("a timer granularity of zero: leave it unset to fire at the time asked")]
    ZeroGranularity,
    /// A timer granularity past [`MAX_GRANULARITY`](crate::MAX_GRANULARITY).
    #[error("a timer granularity of {0:?}: at most a second")]
    Granularity(std::time::Duration),
    /// A wake lateness past [`MAX_WAKE_LATENESS`](crate::MAX_WAKE_LATENESS).
    #[error("a wake lateness of {0:?}: at most a second")]
    WakeLateness(std::time::Duration),
    /// A drain period of zero.
    #[error("a drain period of zero: leave it unset to drain for quinn-proto's three PTOs")]
    ZeroDrainPeriod,
    /// A drain period past [`MAX_DRAIN_PERIOD`](crate::MAX_DRAIN_PERIOD).
    #[error("a drain period of {0:?}: at most a day")]
    DrainPeriod(std::time::Duration),
    /// A flow-control window too large for QUIC's variable-length integers.
    #[error("window {0} is too large")]
    Window(u64, #[source] quinn_proto::VarIntBoundsExceeded),
    /// An idle timeout too large for QUIC's variable-length integers.
    #[error("idle timeout {0:?} is too large")]
    IdleTimeout(
        std::time::Duration,
        #[source] quinn_proto::VarIntBoundsExceeded,
    ),
    /// The soft-timer facility refused its settings.
    #[error("the driver's timer facility")]
    Timers(#[source] softtimer::ConfigError),
}
