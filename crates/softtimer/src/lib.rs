//! # softtimer: microsecond soft timers for user-space networking
//!
//! This crate is the core of the `softtimers` workspace: the *soft-timer facility* of Aron &
//! Druschel (ACM TOCS 18(3), 2000), in user space. An event scheduled `T` ticks ahead fires
//! at the first **trigger state** after it is due — a moment the program passes anyway, such
//! as the return from a system call or the end of an event-loop batch — so that firing it
//! costs a function call instead of a timer interrupt. A coarse periodic **backstop** bounds
//! the delay: with `X = measure_resolution / interrupt_clock_resolution`, an event fires at
//! `T < actual < T + X + 1` ticks after it was scheduled.
//!
//! The crate is sans-IO: the facility never blocks, sleeps or starts a thread. It reads a
//! [`Clock`] and returns decisions; `softtimer-rt` (the event loop) calls
//! [`SoftTimers::trigger`] at its trigger states and drives the backstop, and
//! `softtimer-net` builds pacing and polling on top.
//!
//! | piece | what it is |
//! | --- | --- |
//! | [`SystemClock`] | the measurement clock: invariant TSC, or `CLOCK_MONOTONIC` |
//! | [`SimClock`] | a simulated clock for deterministic tests |
//! | [`SoftTimers`] | the facility: schedule, cancel, trigger, backstop, deadlines |
//! | [`Instant`], [`Span`] | typed time: a clock reading (compared on a circle) and a length in ticks |
//! | [`TriggerStats`] | trigger states by source, trigger intervals, firing delays |
//!
//! The layers, bottom up: `time.rs` (typed time), `clock.rs` (the clocks and the choice of
//! the TSC), `wheel.rs` (the hierarchical timing wheel: slots of `2^k` ticks, exact order
//! inside a slot, a free list of nodes), `facility.rs` (the paper's API over the wheel: the
//! trigger check, the backstop, deadlines), `trigger_stats.rs`. Start reading at
//! [`SoftTimers::trigger`] and [`SoftTimers::schedule_soft_event`]; the model tests
//! (`tests/model.rs`) state the facility's contract against a plain sorted list.
//!
//! ```
//! use softtimer::{SimClock, SoftTimers, Span, TriggerSource};
//!
//! let clock = SimClock::new(1_000_000); // 1 tick = 1 µs
//! let mut timers = SoftTimers::new(clock.clone()).unwrap();
//! let id = timers.schedule_soft_event(Span::from_ticks(50), "retransmit").unwrap();
//! timers.schedule_soft_event(Span::from_ticks(10), "send next packet").unwrap();
//! timers.cancel(id);
//!
//! clock.advance(11);
//! let mut fired = Vec::new();
//! timers.trigger(TriggerSource::Recv, |_, ev| fired.push(ev.event));
//! assert_eq!(fired, ["send next packet"]);
//! assert_eq!(timers.next_expiry(), None);
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod clock;
mod error;
mod facility;
mod source;
mod time;
mod trigger_stats;
mod wheel;

pub use clock::{Clock, ClockInfo, ClockSource, SimClock, SystemClock, monotonic_nanos};
pub use error::{ConfigError, ScheduleError};
pub use facility::{Config, EventId, Fired, MAX_INTERRUPT_CLOCK_HZ, MAX_SLOT_TICKS, SoftTimers};
pub use source::TriggerSource;
pub use time::{Instant, Span};
pub use trigger_stats::TriggerStats;
