//! # softtimer-rt: an event loop whose system-call returns are trigger states
//!
//! The runtime layer of the `softtimers` workspace. It owns a [`softtimer::SoftTimers`]
//! facility per loop thread and makes every return from a system call the loop issues a
//! *trigger state*, tagged by source (`syscall`, `send`, `recv`, `accept`, `loop`, `idle`):
//! the I/O helpers of [`LoopCx`] (`recv`, `recvmmsg`, `send`, `sendmmsg`, `accept`, `read`,
//! `write`) check for due soft events right after the system call returns, so user code
//! never writes the check.
//!
//! Around that it provides what the kernel provided to the paper's facility:
//!
//! * **the idle policy** (Section 5.1): when a soft event is due before the next backstop
//!   tick the loop spins on trigger checks; otherwise it blocks in `epoll_wait` until the
//!   event is due or a backstop period has passed;
//! * **the periodic backstop** (the interrupt clock): a thread that wakes every
//!   `X = 1 / interrupt_clock_resolution` and fires overdue events, so the bound
//!   `T < actual < T + X + 1` holds even while the loop thread computes without system
//!   calls;
//! * **the deadline backstop** (Section 5.9): a one-shot kernel timer at the earliest
//!   deadline, armed only when a new deadline is earlier than the armed one, so the common
//!   case (a trigger state came first) costs no system call;
//! * **the baselines** behind the same interface ([`TimerMode`]): events fired by a periodic
//!   `timerfd` through epoll, or by a POSIX timer signal that interrupts the loop thread.
//!
//! ## Where handlers run, and why that is sound
//!
//! A soft-event handler is `Fn(&mut SoftTimers<E>, Fired<E>) + Send + Sync`. It runs:
//!
//! * on the **loop thread**, at a trigger state: right after a system call returns inside
//!   one of the helpers, at the end of a batch of I/O callbacks, or in the idle loop;
//! * on the **backstop thread**, when the loop thread has run past an event's due time
//!   without reaching a trigger state (it computes, or a handler is slow).
//!
//! The facility is behind a mutex, taken only when something is due (the fast path is a
//! clock read and an atomic load), so a handler never runs inside the facility's own
//! critical section. It never runs inside the loop thread's `malloc`: the backstop is
//! another thread, and the allocator is thread-safe. It cannot alias the loop thread's
//! state: the handler shares only what is `Sync`, which the compiler checks. The backstop
//! thread inherits the loop thread's CPU affinity and asks for `SCHED_FIFO`, so it preempts
//! a computing loop thread the way a timer interrupt would.
//!
//! What this design cannot do, measured in the tests and in `docs/RESULTS.md`: while a
//! handler itself runs longer than `X`, other due events wait for it (handlers never nest);
//! and a backstop thread without real-time priority on a busy core waits for the kernel's
//! scheduler.
//!
//! The timer-signal baseline does run handlers in signal context on the loop thread, like
//! an interrupt handler; enabling it is `unsafe` ([`TimerMode::signal`]) and its contract is
//! async-signal safety.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod backstop;
mod error;
mod event_loop;
mod shared;
mod signal;
mod sys;
mod timerfd;

pub use error::RtError;
pub use event_loop::{
    EventLoop, Interest, LoopConfig, LoopCx, MAX_TOKEN, Ready, StopHandle, TimerMode,
};
pub use shared::{Counters, Handler};
pub use sys::RecvBatch;
pub use timerfd::periodic_timerfd;

/// The README's examples, compiled (and, where they end, run) as doctests so that they cannot
/// rot. They live here because this crate depends on both `softtimer` and itself.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
