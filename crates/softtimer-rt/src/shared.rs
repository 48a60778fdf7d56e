//! The facility as the loop thread and the backstop thread share it.
//!
//! The facility sits behind a mutex, but the trigger fast path never takes it: the earliest
//! time at which a trigger has anything to do is published in an atomic after every change,
//! so a trigger state with nothing due is one clock read, one relaxed load and one compare.
//! Only when something is due does the loop thread (or the backstop thread, or a timer
//! baseline) lock the facility and fire.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};
use softtimer::{
    Clock, EventId, Fired, SoftTimers, SystemClock, TriggerSource, monotonic_nanos, ticks_to_nanos,
};

use crate::error::RtError;

/// A soft-event handler: called with the facility (to schedule and cancel, its own event
/// included) and the event that fired.
///
/// It runs on the loop thread at trigger states, or on the backstop thread when the loop
/// thread has been computing past an event's due time; hence `Send + Sync`, which is what
/// makes running it on either thread sound (see the crate documentation).
pub type Handler<E> = dyn Fn(&mut SoftTimers<E>, Fired<E>) + Send + Sync + 'static;

/// Counters kept by the runtime, readable from any thread.
#[derive(Debug, Default)]
pub struct Counters {
    /// Events fired, by the source of the trigger state (or timer) that fired them.
    pub fired_by: [AtomicU64; TriggerSource::COUNT],
    /// Periodic backstop ticks.
    pub backstop_ticks: AtomicU64,
    /// Times the deadline timer was armed because a new deadline was earlier than the armed
    /// one (a system call on the scheduling thread).
    pub deadline_arms: AtomicU64,
    /// Times the deadline timer was armed again after it expired (on the backstop thread).
    pub deadline_rearms: AtomicU64,
    /// Deadline timer expirations.
    pub deadline_expirations: AtomicU64,
    /// Deadline expirations that found at least one event to fire (a real firing; the rest
    /// were lazy leftovers of deadlines whose events a trigger state had already fired).
    pub deadline_real: AtomicU64,
    /// Timer-baseline expirations (timerfd reads or signals).
    pub timer_expirations: AtomicU64,
    /// Timer signals that found the facility busy and fired nothing.
    pub signal_busy: AtomicU64,
    /// Whether the backstop thread got real-time priority.
    pub backstop_realtime: AtomicBool,
    /// Handler panics caught on the backstop thread.
    pub handler_panics: AtomicU64,
}

impl Counters {
    /// Counts events fired. Every caller holds the facility lock, so the counters have one
    /// writer at a time and a plain load and store suffice (no locked read-modify-write).
    fn add_fired(&self, source: TriggerSource, n: usize) {
        let counter = &self.fired_by[source.index()];
        counter.store(
            counter.load(Ordering::Relaxed) + n as u64,
            Ordering::Relaxed,
        );
    }

    /// Events fired by `source`.
    pub fn fired(&self, source: TriggerSource) -> u64 {
        self.fired_by[source.index()].load(Ordering::Relaxed)
    }

    /// Events fired by every source.
    pub fn fired_total(&self) -> u64 {
        self.fired_by
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}

/// The one-shot kernel timer that enforces deadlines (Section 5.9), armed lazily.
#[derive(Debug)]
pub(crate) struct DeadlineTimer {
    pub fd: OwnedFd,
    /// The clock time it is armed at; `u64::MAX` when disarmed.
    armed: AtomicU64,
    /// A (clock, CLOCK_MONOTONIC ns) pair to convert clock ticks to the timer's clock.
    base: (u64, u64),
    hz: u64,
}

impl DeadlineTimer {
    fn new(clock: &SystemClock) -> Result<Self, RtError> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )
        .map_err(|e| RtError::from(("timerfd_create", e)))?;
        Ok(DeadlineTimer {
            fd,
            armed: AtomicU64::new(u64::MAX),
            base: (clock.now(), monotonic_nanos()),
            hz: clock.resolution_hz(),
        })
    }

    /// Arms the timer at clock time `at` (a system call). Caller holds the facility lock.
    fn arm(&self, at: u64) {
        self.armed.store(at, Ordering::Relaxed);
        let ns = self.base.1 + ticks_to_nanos(at.saturating_sub(self.base.0), self.hz);
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: (ns / 1_000_000_000) as i64,
                // A zero it_value would disarm; the monotonic clock is never at exactly 0.
                tv_nsec: (ns % 1_000_000_000) as i64,
            },
        };
        // Arming can only fail on a bad descriptor, which ours is not.
        let _ = timerfd_settime(&self.fd, TimerfdTimerFlags::ABSTIME, &spec);
    }
}

pub(crate) struct Shared<E> {
    pub clock: SystemClock,
    facility: Mutex<SoftTimers<E>>,
    /// Clock time before which no trigger has anything to do (`u64::MAX`: never). Stays at
    /// `u64::MAX` under a timer baseline, where trigger states fire nothing.
    next_check: AtomicU64,
    publish: bool,
    handler: Box<Handler<E>>,
    pub deadline: DeadlineTimer,
    pub counters: Counters,
}

impl<E> Shared<E> {
    pub(crate) fn new(
        facility: SoftTimers<E>,
        handler: Box<Handler<E>>,
        soft_mode: bool,
    ) -> Result<Self, RtError> {
        let clock = *facility.clock();
        Ok(Shared {
            deadline: DeadlineTimer::new(&clock)?,
            clock,
            facility: Mutex::new(facility),
            next_check: AtomicU64::new(u64::MAX),
            publish: soft_mode,
            handler,
            counters: Counters::default(),
        })
    }

    /// The trigger fast path's compare.
    #[inline(always)]
    pub(crate) fn nothing_due(&self, now: u64) -> bool {
        now < self.next_check.load(Ordering::Relaxed)
    }

    /// When a trigger state next has work, if ever.
    pub(crate) fn next_check(&self) -> Option<u64> {
        let at = self.next_check.load(Ordering::Relaxed);
        (at != u64::MAX).then_some(at)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, SoftTimers<E>> {
        // A handler that panicked left the facility consistent (events are removed before
        // they are dispatched), so a poisoned lock is safe to take over.
        self.facility.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, SoftTimers<E>>> {
        match self.facility.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Publishes the facility's next trigger time for the fast path. Caller holds the lock.
    #[inline]
    pub(crate) fn publish(&self, facility: &SoftTimers<E>) {
        if self.publish {
            let at = facility.next_trigger_time().unwrap_or(u64::MAX);
            self.next_check.store(at, Ordering::Release);
        }
    }

    /// Fires everything due at `now` with the facility already locked.
    pub(crate) fn fire_locked(
        &self,
        facility: &mut SoftTimers<E>,
        now: u64,
        source: TriggerSource,
    ) -> usize {
        let handler = &self.handler;
        let fired = facility.fire_due(now, source, |timers, event| handler(timers, event));
        if fired > 0 {
            self.counters.add_fired(source, fired);
        }
        self.arm_earliest_deadline(facility);
        self.publish(facility);
        fired
    }

    /// Handlers schedule straight on the facility, so after a pass the earliest deadline
    /// may be earlier than the armed one: arm it then (only then: a system call).
    fn arm_earliest_deadline(&self, facility: &mut SoftTimers<E>) {
        if facility.pending_deadlines() == 0 {
            return;
        }
        if let Some(at) = facility.next_deadline()
            && at < self.deadline.armed.load(Ordering::Relaxed)
        {
            self.deadline.arm(at);
            self.counters.deadline_arms.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Locks the facility and fires everything due at `now`.
    pub(crate) fn fire(&self, now: u64, source: TriggerSource) -> usize {
        let mut facility = self.lock();
        self.fire_locked(&mut facility, now, source)
    }

    /// Runs `f` on the locked facility and republishes the next trigger time.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut SoftTimers<E>) -> R) -> R {
        let mut facility = self.lock();
        let result = f(&mut facility);
        self.publish(&facility);
        result
    }

    /// Schedules with a deadline and arms the deadline timer if this deadline is the
    /// earliest (lazily: a later deadline never touches the timer).
    pub(crate) fn schedule_with_deadline(
        &self,
        t: u64,
        deadline: u64,
        event: E,
    ) -> Result<EventId, RtError> {
        let mut facility = self.lock();
        let now = self.clock.now();
        let id = facility.schedule_with_deadline_from(now, t, deadline, event)?;
        let at = now + deadline + 1;
        if at < self.deadline.armed.load(Ordering::Relaxed) {
            self.deadline.arm(at);
            self.counters.deadline_arms.fetch_add(1, Ordering::Relaxed);
        }
        self.publish(&facility);
        Ok(id)
    }

    /// What the backstop thread does when the deadline timer expires: fire the events whose
    /// deadlines have passed (and only those), then arm the timer at the next deadline, if
    /// any.
    pub(crate) fn on_deadline_expiry(&self) -> usize {
        let mut facility = self.lock();
        self.counters
            .deadline_expirations
            .fetch_add(1, Ordering::Relaxed);
        let now = self.clock.now();
        let handler = &self.handler;
        let source = TriggerSource::Deadline;
        let fired =
            facility.fire_expired_deadlines(now, source, |timers, event| handler(timers, event));
        if fired > 0 {
            self.counters.deadline_real.fetch_add(1, Ordering::Relaxed);
            self.counters.add_fired(source, fired);
        }
        self.deadline.armed.store(u64::MAX, Ordering::Relaxed);
        if let Some(next) = facility.next_deadline() {
            self.deadline.arm(next);
            self.counters
                .deadline_rearms
                .fetch_add(1, Ordering::Relaxed);
        }
        self.publish(&facility);
        fired
    }

    pub(crate) fn deadline_fd(&self) -> impl AsFd + '_ {
        &self.deadline.fd
    }
}
