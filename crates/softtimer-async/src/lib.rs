//! # softtimer-async: an async runtime on soft timers
//!
//! An async runtime whose reactor is the soft-timer event loop of `softtimer-rt`: `sleep`,
//! `interval` and `timeout` that fire microseconds after their deadline instead of up to a
//! millisecond, at a CPU cost the caller chooses ([`Precision`]); UDP datagrams that leave
//! at chosen times without waking a task per datagram ([`UdpSocket::send_at`],
//! [`PacedSender`]); and stock quinn ([`quinn::SoftRuntime`]) and hyper ([`hyper`]) on it.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use softtimer_async::{Runtime, time};
//!
//! let rt = Runtime::new().unwrap();
//! rt.block_on(async {
//!     // A precise 250 µs loop: each tick one soft event, re-armed from its own schedule.
//!     let mut ticks = time::interval(Duration::from_micros(250));
//!     let start = ticks.tick().await;
//!     for _ in 0..8 {
//!         let at = ticks.tick().await;
//!         assert!(Instant::now() >= at);
//!     }
//!     assert!(start.elapsed() >= Duration::from_millis(2));
//! });
//! ```
//!
//! ## The paper's trigger states, in an async runtime
//!
//! Aron and Druschel's soft timers check for due events at *trigger states*, moments the
//! system passes anyway, for the price of a clock read and a compare, and keep a coarse
//! interrupt only as a backstop. In an async runtime those moments are everywhere:
//!
//! | soft timers (the kernel) | this runtime |
//! | --- | --- |
//! | return from a system call | return from every system call a future makes (`recv`, `recvmmsg`, `send`, `sendmmsg`, `accept`, `read`, `write`, `connect`, `bind`, `shutdown`) and from the loop's `epoll_wait` |
//! | end of an interrupt handler | the end of every task poll: the runtime's own work makes the trigger states |
//! | the idle loop | the runtime's park: block in `epoll_wait` with a precise timeout until a window before the next due timer, spin on trigger checks for the rest ([`Precision`]) |
//! | the periodic interrupt that backs them up | `softtimer-rt`'s backstop, a one-shot timer armed only while the loop falls behind |
//! | a soft event and its handler | a timer (each `sleep`, `interval` tick, `timeout`, quinn's and hyper's timers) whose handler wakes its task; a paced departure whose handler sends the datagram |
//! | a network interrupt | edge-triggered readiness from the loop's epoll set |
//!
//! With nothing due, the check after a poll or a system call is one `rdtsc` and one compare.
//! A task waiting for a timer costs one `epoll_wait` and the spin window; a task woken on its
//! own loop thread is queued with no lock, atomic or system call beyond what `async-task`
//! does; a task woken from another thread goes through the loop's remote queue and an
//! eventfd write, made only while the loop is blocked.
//!
//! ## Layers
//!
//! | layer | what it is |
//! | --- | --- |
//! | `softtimer` | the facility: the timing wheel, `schedule`/`cancel`/`trigger`, the TSC clock |
//! | `softtimer-rt` | the event loop: its step form ([`softtimer_rt::EventLoop::poll_io`], [`softtimer_rt::EventLoop::park`]), a [`softtimer_rt::LoopWaker`] for other threads, a thread-safe [`softtimer_rt::LoopHandle`] for futures |
//! | [`Runtime`] | loops (one per thread, [`Builder::threads`]), each an executor on `async-task`; tasks ([`spawn`], [`JoinHandle`], [`AbortHandle`], [`JoinSet`]); a pool of threads for blocking work ([`spawn_blocking`]), and async code run from synchronous code on a thread of its own ([`Handle::block_on`]) |
//! | [`time`] | timers as soft events: `std::time::Instant` deadlines, never early, O(1) reset |
//! | [`UdpSocket`], [`TcpListener`], [`TcpStream`], [`UnixListener`], [`UnixStream`], [`UnixDatagram`] ([`net`]) | sockets on the loop's epoll set, each system call a trigger state; [`net::lookup_host`] resolves names on the blocking pool |
//! | [`PacedSender`], [`UdpSocket::send_at`] | departures from soft-event handlers (`softtimer-net`'s departure-time scheduler) |
//! | [`io::AsyncFd`] | any pollable descriptor (a TUN device, a pipe, an eventfd, a raw socket) on the loop's epoll set, as tokio's `AsyncFd`: wait for readiness, make the call, each one a trigger state |
//! | [`signal`] | Unix signals as futures ([`signal::ctrl_c`], [`signal::signal`]): a handler that writes an eventfd, a duplicate of which each listener's loop watches |
//! | [`quinn`], [`hyper`] | quinn's `Runtime`, hyper's `rt` traits (cargo features, on by default) |
//!
//! ## Cargo features
//!
//! All four are on by default; `default-features = false` gives the runtime, its timers,
//! sockets and paced sends alone. A ported tokio program that uses neither quinn nor hyper
//! wants `default-features = false, features = ["macros", "tokio-io"]`.
//!
//! | feature | what it adds | what it pulls in |
//! | --- | --- | --- |
//! | `macros` | `#[softtimer_async::main]` and `#[softtimer_async::test]`, as tokio's `#[tokio::main]` and `#[tokio::test]` | `softtimer-async-macros` (`syn`, `quote`) at build time |
//! | `quinn` | [`quinn::SoftRuntime`] | quinn 0.11 without its default features: no crypto provider and no tokio (a quinn program names its own, e.g. quinn's `rustls-ring`) |
//! | `hyper` | [`hyper`]'s executor, timer and I/O traits | hyper 1.x |
//! | `tokio-io` | tokio's `AsyncRead`/`AsyncWrite` on [`TcpStream`] and its halves, owned ([`TcpStream::into_split`]) and borrowed ([`TcpStream::split`]), and on [`UnixStream`] and its halves, for tokio codecs | tokio without its runtime |
//!
//! ## Porting from tokio
//!
//! | tokio | here |
//! | --- | --- |
//! | `#[tokio::main(flavor = "current_thread")]` | `#[softtimer_async::main]` (one loop, on `main`'s thread) |
//! | `#[tokio::main]` (tokio's default: a multi-thread pool) | `#[softtimer_async::main]` runs one loop: the program loses the pool's parallelism unless it spreads work over `threads = N` loops, next row |
//! | `#[tokio::main(worker_threads = N)]` | `threads = N`, which is not a work-stealing pool: N independent loops, a task staying on the loop that spawned it (`spawn` in `main` runs on `main`'s loop); spread work with [`Handle::spawn_on`] or a [`TcpListener::bind_reuse_port`] listener per loop ([`Builder::threads`]) |
//! | `tokio::time::{sleep, sleep_until, interval, timeout, Instant, Duration, MissedTickBehavior}` | [`time`], the same names (`Instant` is `std`'s) |
//! | `tokio::net::{UdpSocket, TcpListener, TcpStream, UnixStream, …, lookup_host}` | [`net`], the same names |
//! | `tokio::task::{spawn, spawn_local, spawn_blocking, yield_now, JoinSet, JoinHandle}` | [`task`], the same names (also at the crate's root) |
//! | `tokio::signal::ctrl_c`, `tokio::signal::unix::signal` | [`signal::ctrl_c`], [`signal::signal`] |
//! | `tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, …}` on a stream | the same (tokio with its `io-util` feature), with this crate's `tokio-io` feature (on by default): the streams implement tokio's `AsyncRead`/`AsyncWrite`, and the `futures-io` traits always |
//! | `tokio::sync`, `tokio::select!` | tokio's own, with `default-features = false, features = ["sync", "macros"]`: they need no tokio runtime |
//! | `#[tokio::test(start_paused = true)]` | `#[softtimer_async::test(simulated)]` |
//!
//! ## Where to start
//!
//! [`Runtime::block_on`] (or `#[softtimer_async::main]`) and [`time::sleep`]; then [`Precision`] for what a timer costs;
//! [`UdpSocket`] and [`PacedSender`] for pacing; [`quinn::SoftRuntime`] to put an unchanged
//! quinn program on soft timers. The examples: `quinn_echo` and `hyper_hello` (stock quinn
//! and hyper over loopback), `hyper_server` (a hyper server on several loops, a listener
//! each), `sleep_lateness` (timer lateness and CPU at each precision),
//! `many_sleepers` (CPU per fire with thousands of sleeping tasks), `spawn_cost` (CPU per task
//! spawned and awaited, and per poll). `softtimers lab async`
//! measures timers, paced UDP and hyper beside tokio and smol.
//! The source reads in this order: `executor.rs` (the loop thread's run, wake paths and
//! shutdown), `task.rs`, `time.rs`, `reactor.rs`, `net/`, `pace.rs`, `blocking.rs`,
//! `join_set.rs`, `signal.rs`.
//!
//! ## Fairness
//!
//! Tasks run roughly in the order they were woken (`block_on`'s future goes first on
//! each pass, and tasks woken from other threads join the queue after the batch running).
//! A task (or `block_on`'s future) that completes
//! 128 socket operations, readiness waits (`readable()`, `writable()`, quinn's writability
//! checks) or passed timers in one poll yields anyway, as under tokio's co-operative
//! budget, so that a loop over a flooded socket cannot starve the other tasks of its loop.
//! A [`time::timeout`]'s own deadline does not count, so it fires even then. [`yield_now`]
//! yields at once. `try_*` calls, quinn's sends themselves and paced sends do not count.
//!
//! ## Time
//!
//! The API speaks `std::time::Instant` and `Duration`, as quinn and hyper do. A deadline
//! becomes a soft event on the TSC the facility reads; `std::time::Instant` stays the
//! authority, so a timer never completes before its deadline even where the TSC's rate and
//! `CLOCK_MONOTONIC`'s differ (they do, by parts per million): an event that fires a little
//! early is armed again for the rest ([`RuntimeStats::early_fires`] counts those). For tests,
//! [`Builder::simulated`] runs a runtime on a [`softtimer::SimClock`], whose time jumps to the
//! next due timer when nothing can run.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod blocking;
mod clock;
mod executor;
mod foreign;
#[cfg(feature = "hyper")]
pub mod hyper;
pub mod io;
mod join_set;
pub mod net;
mod pace;
mod precision;
#[cfg(feature = "quinn")]
pub mod quinn;
mod reactor;
mod runtime;
pub mod signal;
pub mod task;
pub mod time;

pub use blocking::spawn_blocking;
pub use join_set::JoinSet;
pub use net::{TcpListener, TcpStream, UdpSocket, UnixDatagram, UnixListener, UnixStream};
pub use pace::{Departure, PacedSender};
pub use precision::Precision;
pub use runtime::{Builder, EnterGuard, Handle, Runtime, RuntimeStats};
#[cfg(feature = "macros")]
pub use softtimer_async_macros::{main, test};
pub use task::{AbortHandle, JoinError, JoinHandle, spawn, spawn_local, yield_now};

/// The README's examples, compiled (and, where they end, run) as doctests so that they cannot
/// rot. They live here because this crate depends on `softtimer`, `softtimer-rt` and itself
/// (with its attributes, the `macros` feature).
#[cfg(all(doctest, feature = "macros"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// Re-exported for [`UdpSocket::send_transmit`] and [`UdpSocket::recv_segments`].
pub use quinn_udp::{EcnCodepoint, RecvMeta, Transmit};
/// Re-exported for [`Builder::simulated`] and [`Runtime::trigger_stats`].
pub use softtimer::{SimClock, TriggerStats};
/// Re-exported for [`PacedSender::new`].
pub use softtimer_net::Rate;
/// Re-exported for [`Builder::loop_config`] and [`UdpSocket::recv_batch`].
pub use softtimer_rt::{DeadlineDesign, LoopConfig, RecvBatch};
