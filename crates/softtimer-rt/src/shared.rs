//! The facility as the loop thread and its helper threads (backstop, deadline watcher,
//! timer-signal handler) share it.
//!
//! The facility sits behind a mutex, but the trigger fast path never takes it: the earliest
//! time at which a trigger state has anything to do is published in an atomic after every
//! change, so a trigger state with nothing due is one clock read, one relaxed load and one
//! compare. Only when something is due does a thread lock the facility and fire.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rustix::event::{EventfdFlags, eventfd};
use rustix::time::{TimerfdClockId, TimerfdFlags, timerfd_create};
use softtimer::{Clock, EventId, Fired, Instant, SoftTimers, Span, TriggerSource};

use crate::config::DeadlineDesign;
use crate::error::RtError;
use crate::policy::{Arm, BackstopPlan, deadline_needs_arming};
use crate::timerfd::arm_oneshot;

/// A soft-event handler: called with the facility (to schedule and cancel, its own event
/// included) and the event that fired.
///
/// It runs on the loop thread at trigger states, or on a helper thread (the backstop, the
/// deadline watcher) when the loop thread is computing past an event's due time or deadline;
/// hence `Send + Sync`, which is what makes running it on either thread sound (see the crate
/// documentation).
pub type Handler<E, C> = dyn Fn(&mut SoftTimers<E, C>, Fired<E>) + Send + Sync + 'static;

/// What the runtime counted, as a snapshot ([`EventLoop::counters`](crate::EventLoop::counters)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Events fired, by the source of the trigger state (or timer) that fired them.
    pub fired_by: [u64; TriggerSource::COUNT],
    /// Times the backstop's one-shot timer was armed or moved (a system call each).
    pub backstop_arms: u64,
    /// Wake-ups of the backstop thread by its timer.
    pub backstop_wakeups: u64,
    /// Times a deadline timer was armed because a deadline was earlier than the armed one
    /// (lazy-timerfd design; a system call each).
    pub deadline_arms: u64,
    /// Wake-ups of the deadline service: timer expirations (lazy-timerfd), or timeouts and
    /// nudges of the watcher's sleep (watcher). The spinning watcher never sleeps.
    pub deadline_wakeups: u64,
    /// Times the loop woke a sleeping watcher because a deadline came earlier than the one it
    /// slept until (a system call each).
    pub watcher_nudges: u64,
    /// Deadline-service passes that found at least one expired deadline to enforce.
    pub deadline_enforced: u64,
    /// Timer-baseline expirations (timerfd reads or signals).
    pub timer_expirations: u64,
    /// Timer signals that found the facility busy and fired nothing.
    pub signal_busy: u64,
    /// Handler panics caught on a helper thread.
    pub handler_panics: u64,
    /// Time the loop thread spent spinning in its idle policy (waiting for a due time with
    /// nothing ready), ns: CPU time that is waiting, not work.
    pub idle_spin_ns: u64,
}

impl Counters {
    /// Events fired by `source`.
    pub fn fired(&self, source: TriggerSource) -> u64 {
        self.fired_by[source.index()]
    }

    /// Events fired by every source.
    pub fn fired_total(&self) -> u64 {
        self.fired_by.iter().sum()
    }
}

/// What lives under the lock: the facility, the counters its users update, and the state of
/// the one-shot timers that the rules in [`crate::policy`] move.
pub(crate) struct Locked<E, C: Clock> {
    pub facility: SoftTimers<E, C>,
    pub counters: Counters,
    /// When the backstop's timer is armed to expire.
    backstop_armed: Option<Instant>,
    /// When the lazy deadline timer is armed to expire.
    deadline_armed: Option<Instant>,
}

/// The trigger fast path's compare, wrap-safe: times are kept relative to an epoch, as the
/// facility keeps them, so the compare is an unsigned `<` on a circle-free number.
pub(crate) struct Gate {
    epoch: Instant,
    /// Relative time from which a trigger state has work; `u64::MAX`: never.
    next: AtomicU64,
}

impl Gate {
    fn new(epoch: Instant) -> Self {
        Gate {
            epoch,
            next: AtomicU64::new(u64::MAX),
        }
    }

    #[inline(always)]
    pub(crate) fn rel(&self, t: Instant) -> u64 {
        t.ticks().wrapping_sub(self.epoch.ticks())
    }

    #[inline(always)]
    fn instant(&self, rel: u64) -> Option<Instant> {
        (rel != u64::MAX).then(|| self.epoch + Span::from_ticks(rel))
    }
}

/// A sleeping deadline watcher's rendezvous with the loop: the earliest pending deadline the
/// loop published, when the watcher sleeps until, and the eventfd that wakes it early.
pub(crate) struct WatcherLink {
    /// Earliest pending deadline, relative to the gate's epoch; `u64::MAX`: none.
    pub deadline: AtomicU64,
    /// What the watcher sleeps until (relative); `u64::MAX`: sleeping with no deadline;
    /// [`AWAKE`](crate::backstop::AWAKE): not sleeping (it will look before it sleeps).
    pub sleeping_until: AtomicU64,
    pub wake: OwnedFd,
    pub spin: bool,
}

pub(crate) enum DeadlineService {
    /// No deadlines in this mode (baselines, or the "no timers" reference).
    Refused,
    LazyTimerfd(OwnedFd),
    Watcher(WatcherLink),
}

pub(crate) struct Shared<E, C: Clock> {
    pub clock: C,
    pub gate: Gate,
    locked: Mutex<Locked<E, C>>,
    handler: Box<Handler<E, C>>,
    /// Whether trigger states fire events (soft mode).
    soft: bool,
    /// The backstop's one-shot timer and its rule, when there is a backstop.
    pub backstop: Option<(OwnedFd, BackstopPlan)>,
    pub deadlines: DeadlineService,
    // Counted by helper threads without the lock.
    pub backstop_wakeups: AtomicU64,
    pub deadline_wakeups: AtomicU64,
    pub handler_panics: AtomicU64,
    /// Timer signals that found the facility locked, not yet moved into the counters.
    pub signal_busy: AtomicU64,
    /// Timer signals fire nothing: outside runs, and from a stop request on. A handler
    /// slower than the signal period would otherwise hold the thread in signal context for
    /// good: before a run, its owner would never reach it; during one, the loop would never
    /// see the request; after one, its owner could not drop it.
    pub signals_paused: Arc<AtomicBool>,
    pub backstop_realtime: AtomicBool,
    /// CPU time (ns) the helper threads used, by thread: backstop, watcher.
    pub backstop_cpu_ns: AtomicU64,
    pub watcher_cpu_ns: AtomicU64,
}

impl<E, C: Clock> Shared<E, C> {
    pub(crate) fn new(
        facility: SoftTimers<E, C>,
        handler: Box<Handler<E, C>>,
        soft: bool,
        backstop: bool,
        deadlines: Option<DeadlineDesign>,
    ) -> Result<Self, RtError>
    where
        C: Clone,
    {
        let clock = facility.clock().clone();
        let epoch = clock.now();
        let timerfd = || {
            timerfd_create(
                TimerfdClockId::Monotonic,
                TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
            )
            .map_err(|e| RtError::from(("timerfd_create", e)))
        };
        let plan = BackstopPlan {
            interval: facility.backstop_interval(),
        };
        let backstop = if soft && backstop {
            Some((timerfd()?, plan))
        } else {
            None
        };
        let deadlines = match deadlines {
            None => DeadlineService::Refused,
            Some(DeadlineDesign::LazyTimerfd) => DeadlineService::LazyTimerfd(timerfd()?),
            Some(design) => DeadlineService::Watcher(WatcherLink {
                deadline: AtomicU64::new(u64::MAX),
                sleeping_until: AtomicU64::new(crate::backstop::AWAKE),
                wake: eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)
                    .map_err(|e| RtError::from(("eventfd", e)))?,
                spin: design == DeadlineDesign::WatcherSpin,
            }),
        };
        Ok(Shared {
            clock,
            gate: Gate::new(epoch),
            locked: Mutex::new(Locked {
                facility,
                counters: Counters::default(),
                backstop_armed: None,
                deadline_armed: None,
            }),
            handler,
            soft,
            backstop,
            deadlines,
            backstop_wakeups: AtomicU64::new(0),
            deadline_wakeups: AtomicU64::new(0),
            handler_panics: AtomicU64::new(0),
            signal_busy: AtomicU64::new(0),
            signals_paused: Arc::new(AtomicBool::new(true)),
            backstop_realtime: AtomicBool::new(false),
            backstop_cpu_ns: AtomicU64::new(0),
            watcher_cpu_ns: AtomicU64::new(0),
        })
    }

    /// The trigger fast path's compare: nothing to do at `now`.
    #[inline(always)]
    pub(crate) fn nothing_due(&self, now: Instant) -> bool {
        self.gate.rel(now) < self.gate.next.load(Ordering::Relaxed)
    }

    /// When a trigger state next has work (an event due, or the backstop to push out).
    pub(crate) fn next_check(&self) -> Option<Instant> {
        self.gate.instant(self.gate.next.load(Ordering::Relaxed))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Locked<E, C>> {
        // A handler that panicked left the facility consistent (events are removed before
        // they are dispatched), so a poisoned lock is safe to take over.
        self.locked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, Locked<E, C>>> {
        match self.locked.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// A snapshot of the counters.
    pub(crate) fn counters(&self) -> Counters {
        let mut c = self.lock().counters;
        c.backstop_wakeups = self.backstop_wakeups.load(Ordering::Relaxed);
        c.deadline_wakeups = self.deadline_wakeups.load(Ordering::Relaxed);
        c.handler_panics = self.handler_panics.load(Ordering::Relaxed);
        c.signal_busy += self.signal_busy.load(Ordering::Relaxed);
        c
    }

    /// Fires everything due at `now` with the lock held, then republishes.
    #[inline]
    pub(crate) fn fire_locked(
        &self,
        locked: &mut Locked<E, C>,
        now: Instant,
        source: TriggerSource,
    ) -> usize {
        let handler = &self.handler;
        let fired = locked
            .facility
            .fire_due(now, source, |timers, event| handler(timers, event));
        locked.counters.fired_by[source.index()] += fired as u64;
        self.publish(locked, now);
        fired
    }

    /// Locks the facility and fires everything due at `now`.
    #[inline]
    pub(crate) fn fire(&self, now: Instant, source: TriggerSource) -> usize {
        let mut locked = self.lock();
        self.fire_locked(&mut locked, now, source)
    }

    /// Runs `f` on the locked facility and republishes.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut SoftTimers<E, C>) -> R) -> R {
        let mut locked = self.lock();
        let result = f(&mut locked.facility);
        let now = self.clock.now();
        self.publish(&mut locked, now);
        result
    }

    /// Whether deadlines are enforced in this configuration.
    pub(crate) fn deadlines_enforced(&self) -> bool {
        !matches!(self.deadlines, DeadlineService::Refused)
    }

    /// After any change to the facility (under the lock): applies the timer rules and
    /// publishes the next time a trigger state has work. `now` is the time of the trigger
    /// state (or scheduling call) that made the change.
    pub(crate) fn publish(&self, locked: &mut Locked<E, C>, now: Instant) {
        if !self.soft {
            return;
        }
        let facility = &locked.facility;
        let next_due = facility.next_trigger_time();
        let mut next = next_due.map_or(u64::MAX, |t| self.gate.rel(t));
        if let Some((fd, plan)) = &self.backstop {
            if let Arm::At(at) = plan.rearm(locked.backstop_armed, now, next_due) {
                arm_oneshot(fd, at.saturating_since(now), self.clock.resolution_hz());
                locked.backstop_armed = Some(at);
                locked.counters.backstop_arms += 1;
            }
            if next_due.is_some()
                && let Some(armed) = locked.backstop_armed
            {
                next = next.min(self.gate.rel(plan.revisit_at(armed)));
            }
        }
        if facility.pending_deadlines() > 0 || self.watcher_has_deadline() {
            self.publish_deadline(locked, now);
        }
        self.gate.next.store(next, Ordering::Release);
    }

    fn watcher_has_deadline(&self) -> bool {
        match &self.deadlines {
            DeadlineService::Watcher(link) => link.deadline.load(Ordering::Relaxed) != u64::MAX,
            _ => false,
        }
    }

    fn publish_deadline(&self, locked: &mut Locked<E, C>, now: Instant) {
        let next = locked.facility.next_deadline();
        match &self.deadlines {
            DeadlineService::Refused => {}
            DeadlineService::LazyTimerfd(fd) => {
                if let Some(at) = next
                    && deadline_needs_arming(locked.deadline_armed, at)
                {
                    arm_oneshot(fd, at.saturating_since(now), self.clock.resolution_hz());
                    locked.deadline_armed = Some(at);
                    locked.counters.deadline_arms += 1;
                }
            }
            DeadlineService::Watcher(link) => {
                let rel = next.map_or(u64::MAX, |t| self.gate.rel(t));
                if link.deadline.load(Ordering::Relaxed) == rel {
                    return;
                }
                // Pairs with the watcher's store of `sleeping_until` then load of `deadline`:
                // one of the two sides sees the other's store, so a new earlier deadline is
                // never missed by a watcher about to sleep.
                link.deadline.store(rel, Ordering::SeqCst);
                // Nudge a watcher sleeping past the new deadline, and mark it awake as we do,
                // so that the deadlines published before it has run again do not nudge it
                // again (on a busy machine that can be many).
                let mut seen = link.sleeping_until.load(Ordering::SeqCst);
                while !link.spin && rel < seen {
                    match link.sleeping_until.compare_exchange(
                        seen,
                        crate::backstop::AWAKE,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    ) {
                        Ok(_) => {
                            let _ = rustix::io::write(&link.wake, &1u64.to_ne_bytes());
                            locked.counters.watcher_nudges += 1;
                            break;
                        }
                        Err(current) => seen = current,
                    }
                }
            }
        }
    }

    /// Before the loop blocks until `wake` (its next certain trigger state): push the
    /// backstop out past it, so that a loop which wakes by itself is not also woken by the
    /// backstop.
    pub(crate) fn before_block(&self, wake: Instant) {
        let Some((fd, plan)) = &self.backstop else {
            return;
        };
        let mut locked = self.lock();
        let next_due = locked.facility.next_trigger_time();
        if let Arm::At(at) = plan.rearm(locked.backstop_armed, wake, next_due) {
            let now = self.clock.now();
            arm_oneshot(fd, at.saturating_since(now), self.clock.resolution_hz());
            locked.backstop_armed = Some(at);
            locked.counters.backstop_arms += 1;
            let next = next_due.map_or(u64::MAX, |t| self.gate.rel(t));
            let revisit = self.gate.rel(plan.revisit_at(at));
            self.gate.next.store(next.min(revisit), Ordering::Release);
        }
    }

    /// What the backstop thread does when its timer expires: fire what is due (the loop has
    /// gone `X` without a trigger state) and re-arm by the rule, as if this were a trigger
    /// state.
    pub(crate) fn on_backstop_expiry(&self) -> usize {
        self.backstop_wakeups.fetch_add(1, Ordering::Relaxed);
        let mut locked = self.lock();
        locked.backstop_armed = None;
        let now = self.clock.now();
        self.fire_locked(&mut locked, now, TriggerSource::Backstop)
    }

    /// What a deadline service does when a deadline may have passed: fire the events whose
    /// deadlines have (and only those), then republish.
    pub(crate) fn enforce_deadlines(&self) -> usize {
        let mut locked = self.lock();
        locked.deadline_armed = None;
        let now = self.clock.now();
        let handler = &self.handler;
        let source = TriggerSource::Deadline;
        let fired = locked
            .facility
            .fire_expired_deadlines(now, source, |timers, event| handler(timers, event));
        if fired > 0 {
            locked.counters.deadline_enforced += 1;
            locked.counters.fired_by[source.index()] += fired as u64;
        }
        self.publish(&mut locked, now);
        fired
    }

    /// Schedules with a deadline, refusing when nothing would enforce it.
    pub(crate) fn schedule_with_deadline(
        &self,
        t: Span,
        deadline: Span,
        event: E,
    ) -> Result<EventId, RtError> {
        if !self.deadlines_enforced() {
            return Err(RtError::DeadlinesNotEnforced);
        }
        let mut locked = self.lock();
        let now = self.clock.now();
        let id = locked
            .facility
            .schedule_with_deadline_from(now, t, deadline, event)?;
        self.publish(&mut locked, now);
        Ok(id)
    }

    pub(crate) fn lazy_deadline_fd(&self) -> Option<impl AsFd + '_> {
        match &self.deadlines {
            DeadlineService::LazyTimerfd(fd) => Some(fd),
            _ => None,
        }
    }
}
