//! # softtimer-rt: an event loop whose system-call returns are trigger states
//!
//! The runtime layer of the `softtimers` workspace. It owns a [`softtimer::SoftTimers`]
//! facility per loop thread and makes every return from a system call the loop issues a
//! *trigger state*, tagged by source (`syscall`, `send`, `recv`, `accept`, `loop`, `idle`):
//! the I/O helpers of [`LoopCx`] (`recv`, `recvmmsg`, `send`, `sendmmsg`, `accept`, `read`,
//! `write`) check for due soft events right after the system call returns, so user code
//! never writes the check. `softtimer-net` builds pacing and polling on it; the lab measures
//! it.
//!
//! The layers, bottom up: `sys.rs` (the thin Linux layer, and the workspace's one batched
//! UDP I/O: [`RecvBatch`] and [`send_all`]), `policy.rs` (the idle, backstop and deadline
//! decisions as pure functions of time), `config.rs`, `shared.rs` (what the loop thread
//! and its helper threads share: the facility, the counters), `backstop.rs` (the helper
//! threads), `cx.rs` (the I/O helpers that are trigger states), `event_loop.rs` (the loop
//! itself). Start reading at [`EventLoop::run_with`] and [`LoopCx`]; `tests/event_loop.rs`
//! runs every mode end to end. `uring/` is the io_uring backend ([`IoBackend::Uring`]):
//! its bookkeeping in `uring/mod.rs`, its ring and the memory the kernel uses in
//! `uring/sys.rs`, and the loop's wait on it in `event_loop/ring_wait.rs`; `tests/uring.rs`
//! runs it end to end. The `unsafe` code is in `sys.rs` and `uring/sys.rs`, in the
//! timer-signal path (`signal.rs`, and the constructor in `event_loop.rs` that installs the
//! handler), and in [`alloc_count`], the counting allocator benchmarks and tests install to
//! report memory per event.
//!
//! Around that it provides what the kernel provided to the paper's facility:
//!
//! * **the idle policy** ([`IdlePolicy`], Section 5.1 made cheap): with no descriptor ready,
//!   block in `epoll_pwait2` with a precise timeout (the thread's timer slack at its minimum
//!   while a loop lives on it, given back when the last is dropped) until a short
//!   window before the next due time, then spin on trigger checks for the rest. The window is
//!   this machine's measured wake-up lateness, kept per wait length from the loop's own
//!   wake-ups, so one loop is both precise and cheap; a program that names the precision
//!   it needs gets windows learnt the same way towards it ([`SpinWindow::Precision`]), or
//!   an up-front plan of window and batch from the probe ([`plan_precision`]);
//! * **the backstop** (the interrupt clock), kept off the loop's core: a helper thread on
//!   another CPU (its [`BackstopWatch`]) reads the earliest due time the loop publishes anyway
//!   for its own fast path, sleeps until `X` past it, and fires only what the loop really left
//!   overdue, after the way FreeBSD's HPTS keeps its callout only as a backstop to the pacer
//!   its trigger points run. The bound `T < actual < T + X + 1` holds even while the loop
//!   thread computes without system calls; a busy loop that keeps passing trigger states makes
//!   no system call for it ([`Counters::loop_core_syscalls`]), and an idle loop with nothing
//!   pending wakes nothing. Where the helper can only share the loop's CPU
//!   ([`HelperPlacement`]), the loop arms an adaptive one-shot timer instead ([`BackstopPlan`]);
//! * **deadlines** (Section 5.9, [`DeadlineDesign`]): by default the same helper also sleeps
//!   until the earliest published deadline and fires only events whose deadline has really
//!   passed, so met deadlines cost the loop's core nothing;
//! * **this machine's wake-up floor** ([`wakeup_probe`]): lateness and CPU per wake-up of a
//!   precise sleep, at normal and real-time priority, where the calibrated idle policy's
//!   spin windows start;
//! * **the baselines** behind the same interface: events fired by a periodic `timerfd`
//!   ([`TimerMode::Timerfd`]), by a POSIX timer signal that interrupts the loop thread
//!   ([`EventLoop::with_timer_signal`], `unsafe`), and the reference without timers
//!   ([`TimerMode::Off`]: no facility consulted, no clock read, no helper thread).
//!
//! Every decision (idle, the backstop's watch and its placement, timer arming) is a pure
//! function in [`policy`](IdlePolicy) of the times involved, and the loop is generic over the
//! [`softtimer::Clock`], so tests drive the decisions on a simulated clock.
//!
//! ## Where handlers run, and why that is sound
//!
//! A soft-event handler is `Fn(&mut SoftTimers<E, C>, Fired<E>) + Send + Sync`. It runs:
//!
//! * on the **loop thread**, at a trigger state: right after a system call returns inside
//!   one of the helpers, at the end of a batch of I/O callbacks, or in the idle loop;
//! * on the **helper thread**, when the loop thread has run (almost) `X` past an event's due
//!   time without reaching a trigger state (it computes, or a handler is slow), or when an
//!   event's deadline has passed.
//!
//! The facility is behind a mutex, taken only when something is due (the fast path is a
//! clock read and an atomic load), so a handler never runs inside the facility's own
//! critical section. It never runs inside the loop thread's `malloc`: the helper is another
//! thread, and the allocator is thread-safe. It cannot alias the loop thread's state: the
//! handler shares only what is `Sync`, which the compiler checks. The helper asks for
//! `SCHED_FIFO`, so that its wake-ups are prompt and, on the loop's CPU, preempt a computing
//! loop thread the way a timer interrupt would.
//!
//! What this design cannot do, measured in the tests and in `docs/RESULTS.md`: while a
//! handler itself runs longer than `X`, other due events wait for it (handlers never nest);
//! a helper without real-time priority on a busy core waits for the kernel's scheduler; and
//! the helper's look once per `X` while events are pending costs the CPU it runs on a
//! wake-up each time ([`wakeup_probe`] says how much).
//!
//! The timer-signal baseline does run handlers in signal context on the loop thread, like
//! an interrupt handler; its constructor is `unsafe` and takes the handler whose contract is
//! async-signal safety.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod alloc_count;
mod backstop;
mod calibrate;
mod config;
mod cx;
mod error;
mod event_loop;
mod handle;
mod policy;
mod poll_set;
mod precision;
mod shared;
mod signal;
mod sys;
mod timerfd;
mod uring;

pub use calibrate::{
    LONG_WAIT, LONG_WAIT_SAMPLES, SHORT_WAIT, WakeupCost, WakeupProbe, long_wait_window,
    wakeup_lateness, wakeup_probe,
};
pub use config::{DeadlineDesign, IoBackend, LoopConfig, SpinWindow, TimerMode};
pub use cx::{Interest, LoopCx, Ready};
pub use error::RtError;
pub use event_loop::{EventLoop, HelperCpu, LoopTurn, LoopWaker, MAX_TOKEN, Parked, StopHandle};
pub use handle::LoopHandle;
pub use policy::{
    Arm, BackstopPlan, BackstopWatch, HelperPlacement, IdleAction, IdlePolicy, WakeupWindows,
    WatchAction, deadline_needs_arming, place_helper, unpinned_placement, wake_needed,
};
pub use poll_set::PollSet;
pub use precision::{PrecisionPlan, plan_precision};
pub use shared::{Counters, Handler};
pub use sys::{BatchSent, Datagram, RecvBatch, send_all, send_batch};
pub use timerfd::periodic_timerfd;
pub use uring::{
    Received, RingCounters, RingFd, RingRecv, RingStats, SendOptions, UringOptions,
    UringUnavailable,
};
