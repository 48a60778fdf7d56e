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
//! Around that it provides what the kernel provided to the paper's facility:
//!
//! * **the idle policy** ([`IdlePolicy`], Section 5.1 made cheap): with no descriptor ready,
//!   block in `epoll_pwait2` with a precise timeout (timer slack at its minimum) until a short
//!   window before the next due time, then spin on trigger checks for the rest. The window is
//!   this machine's measured wake-up lateness, so one loop is both precise and cheap;
//! * **the adaptive backstop** ([`BackstopPlan`], the interrupt clock): a one-shot timer armed
//!   only while events are pending, at the later of the next due time and the last trigger
//!   state plus `X`, and pushed out while trigger states keep up (after FreeBSD's HPTS). The
//!   bound `T < actual < T + X + 1` holds even while the loop thread computes without system
//!   calls, and an idle loop, or a busy one that keeps up, takes no timer wake-ups;
//! * **deadlines** (Section 5.9, [`DeadlineDesign`]): by default a watcher on another CPU that
//!   sleeps until the earliest published deadline and fires only events whose deadline has
//!   really passed, so met deadlines cost the loop's core nothing;
//! * **the baselines** behind the same interface: events fired by a periodic `timerfd`
//!   ([`TimerMode::Timerfd`]), by a POSIX timer signal that interrupts the loop thread
//!   ([`EventLoop::with_timer_signal`], `unsafe`), and the reference without timers
//!   ([`TimerMode::Off`]: no facility consulted, no clock read, no helper thread).
//!
//! Every decision (idle, backstop arming, deadline arming) is a pure function in
//! [`policy`](IdlePolicy) of the times involved, and the loop is generic over the
//! [`softtimer::Clock`], so tests drive the decisions on a simulated clock.
//!
//! ## Where handlers run, and why that is sound
//!
//! A soft-event handler is `Fn(&mut SoftTimers<E, C>, Fired<E>) + Send + Sync`. It runs:
//!
//! * on the **loop thread**, at a trigger state: right after a system call returns inside
//!   one of the helpers, at the end of a batch of I/O callbacks, or in the idle loop;
//! * on the **backstop thread**, when the loop thread has run `X` past an event's due time
//!   without reaching a trigger state (it computes, or a handler is slow);
//! * on the **deadline watcher**, when an event's deadline has passed.
//!
//! The facility is behind a mutex, taken only when something is due (the fast path is a
//! clock read and an atomic load), so a handler never runs inside the facility's own
//! critical section. It never runs inside the loop thread's `malloc`: the helpers are other
//! threads, and the allocator is thread-safe. It cannot alias the loop thread's state: the
//! handler shares only what is `Sync`, which the compiler checks. The backstop thread
//! inherits the loop thread's CPU affinity and asks for `SCHED_FIFO`, so it preempts a
//! computing loop thread the way a timer interrupt would.
//!
//! What this design cannot do, measured in the tests and in `docs/RESULTS.md`: while a
//! handler itself runs longer than `X`, other due events wait for it (handlers never nest);
//! and a backstop thread without real-time priority on a busy core waits for the kernel's
//! scheduler.
//!
//! The timer-signal baseline does run handlers in signal context on the loop thread, like
//! an interrupt handler; its constructor is `unsafe` and takes the handler whose contract is
//! async-signal safety.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod backstop;
mod calibrate;
mod config;
mod cx;
mod error;
mod event_loop;
mod handle;
mod policy;
mod poll_set;
mod shared;
mod signal;
mod sys;
mod timerfd;

pub use calibrate::wakeup_lateness;
pub use config::{DeadlineDesign, LoopConfig, SpinWindow, TimerMode};
pub use cx::{Interest, LoopCx, Ready};
pub use error::RtError;
pub use event_loop::{EventLoop, HelperCpu, LoopTurn, LoopWaker, MAX_TOKEN, Parked, StopHandle};
pub use handle::LoopHandle;
pub use policy::{Arm, BackstopPlan, IdleAction, IdlePolicy, deadline_needs_arming};
pub use poll_set::PollSet;
pub use shared::{Counters, Handler};
pub use sys::{RecvBatch, send_batch};
pub use timerfd::periodic_timerfd;

/// The README's examples, compiled (and, where they end, run) as doctests so that they cannot
/// rot. They live here because this crate depends on both `softtimer` and itself.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
