//! # softtimer-quic: QUIC on soft timers
//!
//! A driver for [quinn-proto](https://docs.rs/quinn-proto) 0.11 on the `softtimer-rt` event
//! loop. quinn's own runtime runs every timer on tokio's 1 ms wheel and paces with a token
//! bucket that lets 10 to 256 datagrams go every 2 ms, because its authors could not count on
//! a finer timer in user space. Here:
//!
//! * every timer quinn-proto asks for (`poll_timeout`: loss detection, ACK delay, idle,
//!   pacing) is a soft event, fired at the first trigger state after it is due, so it is
//!   handled within microseconds, with the backstop as the bound when the loop is busy;
//! * datagrams go in and out through quinn-udp's socket state (GSO, GRO and ECN exactly as
//!   stock quinn uses them), and each send and receive is a trigger state;
//! * with [`Pacing::PerPacket`], every datagram is stamped with its own departure time at
//!   1.25 × cwnd / srtt and released by the departure-time scheduler of `softtimer-net`
//!   ([`pacing::PacketPacer`]), so quinn's bursts leave evenly spaced (a closed
//!   connection's CONNECTION_CLOSE is not paced);
//! * a tail-loss probe ([`probe`]) two smoothed RTTs after the last transmission finds a lost
//!   last packet in about one RTT instead of quinn-proto's probe timeout, which includes the
//!   peer's 25 ms ACK delay: a sub-millisecond recovery timer that a 1 ms wheel cannot run;
//! * [`DriverConfig::timer_granularity`] rounds every timer up the way tokio's wheel does, to
//!   separate timer precision from everything else two runtimes differ in;
//! * [`perf`] speaks the QUIC performance protocol (draft-banks-quic-performance, ALPN
//!   `perf`), which quinn's `perf` tool and msquic's `secnetperf` also speak.
//!
//! An application sees [`QuicEvent`]s through its [`App`] and works its streams through the
//! [`Driver`]: `open_bi` or `accept_bi`, `write`, `finish`, `read`, `reset`, `stop_sending`
//! and `close` (see [`QuicLoop`]'s example).
//!
//! quinn-proto is used as published: what it fixes (its pacer's burst interval and minimum
//! burst, its 1 ms loss-detection granularity) is worked around from outside.
//!
//! The `softtimers quic` command and the lab's QUIC experiments are built on this crate.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod driver;
pub mod idle;
pub mod pacing;
pub mod perf;
pub mod probe;
pub mod tls;

pub use driver::{
    App, ConnId, DEFAULT_MAX_DATAGRAMS, Driver, DriverConfig, DriverStats, Pacing, QuicEvent,
    QuicLoop, ReadStatus, TransmitCauses, Wake,
};
pub use quinn_proto::StreamId;

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The TLS set-up was refused.
    #[error("TLS: {0}")]
    Tls(String),
    /// A setting is out of range.
    #[error("bad configuration: {0}")]
    Config(String),
    /// quinn-proto refused to start a connection.
    #[error("cannot connect: {0}")]
    Connect(quinn_proto::ConnectError),
    /// No such connection (it was drained).
    #[error("no connection {0}")]
    UnknownConnection(ConnId),
    /// A stream operation failed.
    #[error("{0}")]
    Stream(String),
    /// The connection failed.
    #[error("connection failed: {0}")]
    Connection(String),
    /// The event loop failed.
    #[error("event loop: {0}")]
    Loop(softtimer_rt::RtError),
}

impl QuicError {
    pub(crate) fn io(what: &'static str, source: std::io::Error) -> QuicError {
        QuicError::Io { what, source }
    }
}
