//! # softtimer-net: rate-based clocking on soft timers
//!
//! The network half of the `softtimers` workspace. [`softtimer`] is the sans-IO facility
//! (schedule, trigger, backstop); `softtimer-rt` is the epoll event loop whose system-call
//! returns are its trigger states. This crate builds the paper's network uses on them:
//!
//! | piece | what it is | I/O |
//! | --- | --- | --- |
//! | [`Rate`] | a transmission rate, parsed as tools write it (`500M`) | none |
//! | [`pacer`] | the adaptive pacer of the soft-timers paper (Section 4.1): one event outstanding per flow, a target and a burst rate | none |
//! | [`departure`] | departure-time scheduling (Kobayashi's two-level transmission timer): packets stamped with the earliest time they may leave | none |
//! | [`burstiness`] | the burstiness index of Kobayashi's Section V, and inter-arrival statistics | none |
//! | [`poll`] | soft-timer network polling: the poll interval that finds an aggregation quota of packets per poll, back to readiness when idle | none |
//! | [`livelock`] | livelock-free receive (Mogul and Ramakrishnan): round-robin with a packet quota, queue-state feedback, a CPU budget | none |
//! | [`path`] | a link of an emulated path: one-way delay, a bottleneck rate, a drop-tail queue, random loss | none |
//! | [`udp`] | the header of a paced datagram; a receiver with kernel receive timestamps and drop counts, on `softtimer-rt`'s batched I/O | Linux |
//! | [`forward`] | the forwarding core: receive on one UDP socket, per-packet work, `sendmmsg` to the next hop | Linux |
//! | [`capture`] | observing a UDP port without owning it (`AF_PACKET`, kernel timestamps) | Linux |
//!
//! The sans-IO parts take `now` and return decisions, so they run on a
//! [`softtimer::SimClock`] in tests exactly as on the real clock. The I/O parts are thin:
//! the batched system calls themselves are `softtimer-rt`'s ([`softtimer_rt::RecvBatch`],
//! [`softtimer_rt::send_all`]). Start reading at [`pacer::FlowPacer`], the paper's pacer in
//! a page; `softtimers-tools`' `pace` is the program built on it.
#![deny(unsafe_code)] // allowed, block by block, in `udp` and `capture` only
#![warn(missing_docs)]

pub mod burstiness;
pub mod capture;
pub mod departure;
pub mod forward;
pub mod livelock;
pub mod pacer;
pub mod path;
pub mod poll;
mod rate;
pub mod udp;

pub use rate::{MAX_RATE_BPS, Rate, RateError};
