//! # softtimer-quic: QUIC on soft timers
//!
//! A driver for [quinn-proto](https://docs.rs/quinn-proto) 0.11 whose every timer is a soft
//! event. quinn's own runtime runs every timer on tokio's 1 ms wheel and paces with a token
//! bucket that lets 10 to 256 datagrams go every 2 ms, because its authors could not count on
//! a finer timer in user space. Here:
//!
//! * every timer quinn-proto asks for (`poll_timeout`: loss detection, ACK delay, idle,
//!   pacing) is a soft event, fired at the first trigger state after it is due, so it is
//!   handled within microseconds, with the backstop as the bound when the loop is busy;
//! * with [`Pacing::PerPacket`], every datagram is stamped with its own departure time at
//!   1.25 × cwnd / srtt and released by the departure-time scheduler of `softtimer-net`
//!   ([`pacing::PacketPacer`]), so quinn's bursts leave evenly spaced (a closed
//!   connection's CONNECTION_CLOSE is not paced);
//! * a tail-loss probe ([`probe`]) two smoothed RTTs (and an allowance learned from the
//!   peer's late ACKs) after the last transmission finds a lost last packet in about one RTT
//!   instead of quinn-proto's probe timeout, which includes the peer's 25 ms ACK delay: a
//!   sub-millisecond recovery timer that a 1 ms wheel cannot run;
//! * a closed connection is kept, for the drain period RFC 9000 §10.2 asks for, as a compact
//!   record (its connection ID, the peer's address, the close datagram to repeat, one soft
//!   event) instead of quinn-proto's whole `Connection`, as the TCP paper keeps TIME_WAIT
//!   outside the socket ([`ClosedState`]);
//! * [`DriverConfig::timer_granularity`] rounds every timer up the way tokio's wheel does, to
//!   separate timer precision from everything else two runtimes differ in;
//! * streams both ways and one way, and unreliable datagrams (RFC 9221): the last two off
//!   unless [`tls::Tuning`] turns them on, so that a peer cannot fill memory with what an
//!   application never reads;
//! * [`perf`] speaks the QUIC performance protocol (draft-banks-quic-performance, ALPN
//!   `perf`), which quinn's `perf` tool and msquic's `secnetperf` also speak.
//!
//! ## Layers, and where to start reading
//!
//! | layer | what it is |
//! | --- | --- |
//! | [`Driver`] | the sans-IO core: datagrams in, transmits and the next timeout out, `now` passed in; quinn-proto's endpoint and connections, their timers in a [`softtimer::SoftTimers`] facility, pacing, the probe, closed records |
//! | [`QuicSocket`] | the I/O shell: the driver on a UDP socket through quinn-udp (GSO, GRO, ECN), in a `softtimer-rt` loop the application owns |
//! | [`QuicLoop`] | a `QuicSocket` on a loop of its own, with hooks for other sockets and work |
//! | [`App`] | what an application does with the driver's [`QuicEvent`]s |
//! | [`tls`] | certificates (self-signed, PEM files, a rustls configuration), ALPN, transport settings |
//! | [`sim`] | two drivers against each other on a simulated clock through an in-memory link |
//!
//! Start with [`Driver`], then [`QuicSocket::poll`].
//!
//! ## What is deterministic
//!
//! On a [`softtimer::SimClock`] with [`DriverConfig::rng_seed`] set, and the same certificate
//! for every run (an Ed25519 one: its signatures have one length), the transcript of a run —
//! when each datagram leaves and arrives, and its size — is the same every time. What is not:
//! the bytes themselves (rustls and quinn-proto draw keys and connection IDs from the system's
//! randomness), and rustls reads the wall clock to check a certificate's validity.
//!
//! quinn-proto is used as published: what it fixes (its pacer's burst interval and minimum
//! burst, its 1 ms loss-detection granularity) is worked around from outside.
//!
//! The `softtimers quic` command and the lab's QUIC experiments are built on this crate.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod driver;
mod error;
pub mod idle;
mod io;
pub mod pacing;
pub mod perf;
pub mod probe;
mod quic_loop;
pub mod sim;
pub mod tls;

pub use driver::{
    CidGeneratorFactory, ClosedState, ClosedStats, ConnId, DEFAULT_MAX_DATAGRAMS, Driver,
    DriverConfig, DriverStats, MAX_DRAIN_PERIOD, MAX_GRANULARITY, MAX_WAKE_LATENESS, Pacing,
    QuicEvent, ReadStatus, Timeout, Transmit,
};
pub use error::{ConfigError, DatagramError, QuicError, StreamError, TlsError};
pub use io::{FireNotes, IoStats, QuicSocket, TransmitCauses};
pub use quic_loop::{App, QUIC_TOKEN, QuicLoop, Wake};
/// quinn-proto itself, for what its configuration types name (a client's `ClientConfig`,
/// `ValidationTokenConfig`, `TransportConfig`) without a dependency of one's own.
pub use quinn_proto;
pub use quinn_proto::{ConnectionError, Dir, EcnCodepoint, StreamId, VarInt};
