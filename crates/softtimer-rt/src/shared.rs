//! The facility as the loop thread and its helper thread (the backstop's watch, the deadline
//! service) and the timer-signal handler share it.
//!
//! The facility sits behind a mutex, but the trigger fast path never takes it: the earliest
//! time at which a trigger state has anything to do is published in an atomic (the *gate*)
//! after every change, so a trigger state with nothing due is one clock read, one relaxed load
//! and one compare. Only when something is due does a thread lock the facility and fire.
//!
//! The same published time is what the backstop's watch reads from its own CPU
//! ([`BackstopWatch`]): the loop stores it anyway, so watching it costs the loop nothing. The
//! loop wakes a sleeping watch (one `write`) only when it publishes a time earlier than the one
//! the watch sleeps until. The values the helper writes (its sleep, its counters) live on
//! cache lines of their own, away from those the loop reads at every trigger state.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use rustix::event::{EventfdFlags, eventfd};
use rustix::time::{TimerfdClockId, TimerfdFlags, timerfd_create};
use softtimer::{Clock, EventId, Fired, Instant, SoftTimers, Span, TriggerSource};

use crate::config::DeadlineDesign;
use crate::error::RtError;
use crate::policy::{
    Arm, BackstopPlan, BackstopWatch, HelperPlacement, WatchAction, deadline_needs_arming,
    wake_needed,
};
use crate::timerfd::arm_oneshot;

mod one_shot;

/// A soft-event handler: called with the facility (to schedule and cancel, its own event
/// included) and the event that fired.
///
/// It runs on the loop thread at trigger states, or on the helper thread (the backstop's
/// watch, the deadline service) when the loop thread is computing past an event's due time or
/// deadline; hence `Send + Sync`, which is what makes running it on either thread sound (see
/// the crate documentation).
pub type Handler<E, C> = dyn Fn(&mut SoftTimers<E, C>, Fired<E>) + Send + Sync + 'static;

/// What the runtime counted, as a snapshot ([`EventLoop::counters`](crate::EventLoop::counters)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Events fired, by the source of the trigger state (or timer) that fired them.
    pub fired_by: [u64; TriggerSource::COUNT],
    /// Times the backstop's one-shot timer was armed or moved (a system call each): only
    /// when the helper shares the loop's only CPU ([`HelperPlacement::LoopCpu`]).
    pub backstop_arms: u64,
    /// Wake-ups of the helper for the delay bound: expiries of the one-shot timer
    /// ([`HelperPlacement::LoopCpu`]), or the watch's looks at the late line (elsewhere).
    pub backstop_wakeups: u64,
    /// Times a deadline timer was armed because a deadline was earlier than the armed one
    /// (lazy-timerfd design; a system call each).
    pub deadline_arms: u64,
    /// Wake-ups of the helper for a deadline: expiries of the lazy deadline timer, or the
    /// watch's sleep ending at a deadline. The spinning watch never sleeps.
    pub deadline_wakeups: u64,
    /// Times the loop woke the sleeping helper because it published a due time or deadline
    /// earlier than the one the helper slept until (a system call each).
    pub watcher_nudges: u64,
    /// Deadline-service passes that found at least one expired deadline to enforce.
    pub deadline_enforced: u64,
    /// Timer-baseline expirations (timerfd reads or signals).
    pub timer_expirations: u64,
    /// Timer signals that found the facility busy and fired nothing.
    pub signal_busy: u64,
    /// Handler panics caught on the helper thread.
    pub handler_panics: u64,
    /// Time the loop thread spent spinning in its idle policy (waiting for a due time with
    /// nothing ready), ns: CPU time that is waiting, not work.
    pub idle_spin_ns: u64,
    /// System calls the timer machinery made on the loop's core: arming a one-shot timer
    /// (backstop or lazy deadline), waking the helper, and every system call of the helper
    /// itself while it may run on the loop's CPU ([`HelperPlacement::shares_loop_cpu`]: on
    /// the loop's only CPU, or free to run where the loop does). Not the loop's own waits in
    /// `epoll_wait`, which it makes with or without timers. 0 while a busy loop whose helper
    /// is on another CPU keeps passing trigger states.
    pub loop_core_syscalls: u64,
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

/// Keeps a value on cache lines of its own (two: the adjacent-line prefetcher fetches pairs),
/// so that a thread writing it does not evict the lines another reads at every trigger state.
#[repr(align(128))]
pub(crate) struct OwnLines<T>(pub T);

impl<T> std::ops::Deref for OwnLines<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A relative time no event has: "never" in the gate, "no deadline", "sleeping with no alarm".
const NEVER: u64 = u64::MAX;

/// `sleeping_until` of a helper that is not sleeping: it looks at the published times before
/// it sleeps again, so the loop never wakes it.
const AWAKE: u64 = 0;

/// What lives under the lock: the facility, the counters its users update, and the state of
/// the one-shot timers that the rules in [`crate::policy`] move. In this order: the facility
/// first, so that its hot fields share a cache line with the lock word before it; then the
/// backstop's two fields, which bring `fired_by`, written at every firing pass, to the start
/// of a line of its own (its first eight sources; the layout test below checks both: the
/// facility's size decides it too); the deadline timer's field last.
#[repr(C)]
pub(crate) struct Locked<E, C: Clock> {
    pub facility: SoftTimers<E, C>,
    /// When the backstop's timer is armed to expire.
    backstop_armed: Option<Instant>,
    /// The exact earliest due time the loop read before it last blocked (clock ticks;
    /// [`NEVER`]: none), which the backstop's rule uses in place of the facility's coarser
    /// lower bound for as long as nothing earlier is scheduled
    /// ([`SoftTimers::mark_scheduled`]). Without it, a loop that blocks until an event in a
    /// coarse slot pushes the timer past the slot's start plus `X`, and its next trigger
    /// state, reading only the slot's start, pulls it back: two system calls a block.
    backstop_due: u64,
    /// Events fired, by source (copied into the counters by [`Shared::counters`]).
    fired_by: [u64; TriggerSource::COUNT],
    pub counters: Counters,
    /// When the lazy deadline timer is armed to expire.
    deadline_armed: Option<Instant>,
}

/// The trigger fast path's compare, wrap-safe: times are kept relative to an epoch, as the
/// facility keeps them, so the compare is an unsigned `<` on a circle-free number.
pub(crate) struct Gate {
    epoch: Instant,
    /// Relative time from which a trigger state has work; [`NEVER`]: never.
    next: AtomicU64,
}

impl Gate {
    fn new(epoch: Instant) -> Self {
        Gate {
            epoch,
            next: AtomicU64::new(NEVER),
        }
    }

    #[inline(always)]
    pub(crate) fn rel(&self, t: Instant) -> u64 {
        t.ticks().wrapping_sub(self.epoch.ticks())
    }

    #[inline(always)]
    fn instant(&self, rel: u64) -> Option<Instant> {
        (rel != NEVER).then(|| self.epoch + Span::from_ticks(rel))
    }
}

/// Republishes when dropped, however the change made under the lock ended (a handler's or a
/// caller's panic unwinding through it included): trigger states and the helper must see
/// what the facility holds, or an event scheduled before the panic stays hidden from both.
struct Republish<'s, 'l, E, C: Clock> {
    shared: &'s Shared<E, C>,
    locked: &'l mut Locked<E, C>,
    now: Option<Instant>,
}

impl<E, C: Clock> Drop for Republish<'_, '_, E, C> {
    #[inline]
    fn drop(&mut self) {
        self.shared.publish(self.locked, self.now);
    }
}

/// The helper's rendezvous with the loop: the earliest deadline the loop published, what the
/// helper sleeps until, and the eventfd that wakes it early. Written by the helper at every
/// wake-up, so it lives on lines of its own.
pub(crate) struct HelperLink {
    /// Earliest pending deadline, relative to the gate's epoch; [`NEVER`]: none.
    pub deadline: AtomicU64,
    /// What the helper sleeps until (relative); [`NEVER`]: sleeping with no alarm;
    /// [`AWAKE`]: not sleeping.
    pub sleeping_until: AtomicU64,
    pub wake: OwnedFd,
    /// The watcher-spin deadline design was asked for (the helper spins where it does not
    /// share the loop's only CPU: [`Shared::helper_spins`]).
    pub spin: bool,
}

/// What the helper counts, on lines of their own.
#[derive(Default)]
pub(crate) struct HelperCounts {
    pub backstop_wakeups: AtomicU64,
    pub deadline_wakeups: AtomicU64,
    /// The helper's system calls while it may share the loop's CPU.
    pub loop_core_syscalls: AtomicU64,
    /// Timer signals that found the facility locked, not yet moved into the counters (the
    /// signal handler runs on the loop thread: it is here only to stay off the hot lines).
    pub signal_busy: AtomicU64,
    pub backstop_realtime: AtomicBool,
    /// CPU time (ns) the helper used on the loop's CPU, and elsewhere.
    pub loop_cpu_ns: AtomicU64,
    pub other_cpu_ns: AtomicU64,
}

pub(crate) enum DeadlineService {
    /// No deadlines in this mode (baselines, or the "no timers" reference).
    Refused,
    LazyTimerfd(OwnedFd),
    /// The helper watches the published deadline.
    Watched,
}

/// The backstop's two forms: the watch's parameters (`X`, the helper's wake-up lateness),
/// and the one-shot timer with its rule for when the helper shares the loop's only CPU.
pub(crate) struct Backstop {
    pub timer: OwnedFd,
    pub plan: BackstopPlan,
    margin: Span,
}

// The fields in order: one cache line read at every trigger state (the gate and the clock)
// and when something is due (the handler, the modes), then the lock and the facility, then
// what is read rarely, then the lines the helper writes.
#[repr(C)]
pub(crate) struct Shared<E, C: Clock> {
    pub gate: Gate,
    pub clock: C,
    handler: Box<Handler<E, C>>,
    /// Whether trigger states fire events (soft mode).
    soft: bool,
    /// Whether the one-shot timer, armed by the loop, enforces the bound (the helper shares
    /// the loop's only CPU). Set with `placement`.
    timer_enforces: AtomicBool,
    /// Whether the helper's watch reads the gate to enforce the bound. Set with `placement`.
    watched: AtomicBool,
    /// The error number of the system call the helper stopped on (0: it has not stopped
    /// on one); the loop looks at every pass, with `handler_panics`. Linux's numbers are
    /// below 256 (one byte, which fits the line's padding after the flags above).
    helper_errno: AtomicU8,
    /// Handler panics caught on the helper thread (the loop looks at every pass).
    pub handler_panics: AtomicU32,
    /// The earliest deadline last published to the helper (relative; [`NEVER`]: none), so
    /// that publishing reads no line the helper writes. Only used under the lock.
    deadline_published: AtomicU64,
    locked: Mutex<Locked<E, C>>,
    /// Where the helper runs: decides who enforces the bound. Set once, by the helper, before
    /// the loop's constructor returns.
    placement: OnceLock<HelperPlacement>,
    pub backstop: Option<Backstop>,
    pub deadlines: DeadlineService,
    /// Timer signals fire nothing: outside runs, and from a stop request on. A handler
    /// slower than the signal period would otherwise hold the thread in signal context for
    /// good: before a run, its owner would never reach it; during one, the loop would never
    /// see the request; after one, its owner could not drop it.
    pub signals_paused: Arc<AtomicBool>,
    // Written by the helper.
    pub link: Option<OwnLines<HelperLink>>,
    pub helper: OwnLines<HelperCounts>,
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
        // The facility's own epoch: an event it clamps to just after its start (one scheduled
        // in the past before anything fired) must read as due here too, not as before the
        // gate's epoch, which would wrap it to never.
        let epoch = facility.epoch();
        let timerfd = || {
            timerfd_create(
                TimerfdClockId::Monotonic,
                TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
            )
            .map_err(|e| RtError::from(("timerfd_create", e)))
        };
        let backstop = if soft && backstop {
            Some(Backstop {
                timer: timerfd()?,
                plan: BackstopPlan {
                    interval: facility.backstop_interval(),
                },
                margin: Span::ZERO,
            })
        } else {
            None
        };
        let deadline_service = match deadlines {
            None => DeadlineService::Refused,
            Some(DeadlineDesign::LazyTimerfd) => DeadlineService::LazyTimerfd(timerfd()?),
            Some(_) => DeadlineService::Watched,
        };
        // Soft mode always has a helper: the watch, the deadline service, or both.
        let link = if soft {
            Some(OwnLines(HelperLink {
                deadline: AtomicU64::new(NEVER),
                sleeping_until: AtomicU64::new(AWAKE),
                wake: eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)
                    .map_err(|e| RtError::from(("eventfd", e)))?,
                spin: deadlines == Some(DeadlineDesign::WatcherSpin),
            }))
        } else {
            None
        };
        Ok(Shared {
            gate: Gate::new(epoch),
            clock,
            handler,
            soft,
            timer_enforces: AtomicBool::new(false),
            watched: AtomicBool::new(false),
            handler_panics: AtomicU32::new(0),
            helper_errno: AtomicU8::new(0),
            deadline_published: AtomicU64::new(NEVER),
            placement: OnceLock::new(),
            locked: Mutex::new(Locked {
                facility,
                backstop_armed: None,
                backstop_due: NEVER,
                fired_by: [0; TriggerSource::COUNT],
                counters: Counters::default(),
                deadline_armed: None,
            }),
            backstop,
            deadlines: deadline_service,
            signals_paused: Arc::new(AtomicBool::new(true)),
            link,
            helper: OwnLines(HelperCounts::default()),
        })
    }

    /// Sets how early the watch fires (its wake-up lateness); before the helper starts.
    pub(crate) fn set_watch_margin(&mut self, margin: Span) {
        if let Some(backstop) = &mut self.backstop {
            backstop.margin = margin;
        }
    }

    /// Records where the helper runs; once, by the helper, before the loop runs.
    pub(crate) fn set_placement(&self, placement: HelperPlacement) {
        if self.placement.set(placement).is_ok() {
            let backstop = self.backstop.is_some();
            self.timer_enforces
                .store(backstop && !placement.watches(), Ordering::Release);
            self.watched
                .store(backstop && placement.watches(), Ordering::Release);
        }
    }

    /// Whether the helper spins (the watcher-spin design, on a CPU other than the loop's
    /// only one) rather than sleeps: a spinning helper is never woken.
    pub(crate) fn helper_spins(&self) -> bool {
        self.link.as_ref().is_some_and(|l| l.spin)
            && self.placement().is_some_and(HelperPlacement::watches)
    }

    /// The helper stopped on a system call that failed with `errno`: the loop reports it
    /// from now on.
    pub(crate) fn helper_failed(&self, errno: rustix::io::Errno) {
        // EIO for a number past a byte (Linux has none): the loop must still see it.
        let errno = u8::try_from(errno.raw_os_error())
            .ok()
            .filter(|&e| e != 0)
            .unwrap_or(5);
        self.helper_errno.store(errno, Ordering::Release);
    }

    /// What the loop reports before each pass: a handler that panicked on the helper thread,
    /// or a helper that stopped on a failed system call (either is for good: the loop has
    /// lost an event, or the bound).
    #[inline]
    pub(crate) fn helper_trouble(&self) -> Result<(), RtError> {
        if self.handler_panics.load(Ordering::Relaxed) > 0 {
            return Err(RtError::HandlerPanicked);
        }
        match self.helper_errno.load(Ordering::Relaxed) {
            0 => Ok(()),
            errno => Err(RtError::HelperStopped(std::io::Error::from_raw_os_error(
                i32::from(errno),
            ))),
        }
    }

    /// Where the helper runs (`None`: no helper).
    pub(crate) fn placement(&self) -> Option<HelperPlacement> {
        self.placement.get().copied()
    }

    /// The watch's rule: the late line when the backstop is on and the helper enforces it.
    pub(crate) fn watch(&self) -> BackstopWatch {
        match &self.backstop {
            Some(b) => BackstopWatch::new(
                b.plan.interval,
                b.margin,
                self.placement().is_some_and(HelperPlacement::watches),
            ),
            None => BackstopWatch::new(Span::ZERO, Span::ZERO, false),
        }
    }

    /// The one-shot timer's rule, when it enforces the bound (the helper on the loop's CPU).
    #[inline]
    fn backstop_timer(&self) -> Option<&Backstop> {
        if self.timer_enforces.load(Ordering::Relaxed) {
            self.backstop.as_ref()
        } else {
            None
        }
    }

    /// The trigger fast path's compare: nothing to do at `now`.
    #[inline(always)]
    pub(crate) fn nothing_due(&self, now: Instant) -> bool {
        self.gate.rel(now) < self.gate.next.load(Ordering::Relaxed)
    }

    /// When a trigger state next has work (an event due, or the backstop timer to push out).
    pub(crate) fn next_check(&self) -> Option<Instant> {
        self.gate.instant(self.gate.next.load(Ordering::Relaxed))
    }

    /// The published earliest trigger time and deadline, as the helper reads them.
    pub(crate) fn watched_times(&self) -> (Option<Instant>, Option<Instant>) {
        let deadline = self
            .link
            .as_ref()
            .map_or(NEVER, |l| l.deadline.load(Ordering::SeqCst));
        (
            self.gate.instant(self.gate.next.load(Ordering::SeqCst)),
            self.gate.instant(deadline),
        )
    }

    /// Says what the helper sleeps until (`None`: it is awake; `Some(None)`: with no alarm).
    pub(crate) fn set_sleeping_until(&self, until: Option<Option<Instant>>) {
        if let Some(link) = &self.link {
            let encoded = match until {
                None => AWAKE,
                Some(None) => NEVER,
                // Never AWAKE itself: that would read as "not sleeping".
                Some(Some(t)) => self.gate.rel(t).max(AWAKE + 1),
            };
            link.sleeping_until.store(encoded, Ordering::SeqCst);
        }
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
        let locked = self.lock();
        let mut c = locked.counters;
        c.fired_by = locked.fired_by;
        drop(locked);
        let helper = &self.helper;
        c.backstop_wakeups = helper.backstop_wakeups.load(Ordering::Relaxed);
        c.deadline_wakeups = helper.deadline_wakeups.load(Ordering::Relaxed);
        c.loop_core_syscalls += helper.loop_core_syscalls.load(Ordering::Relaxed);
        c.signal_busy += helper.signal_busy.load(Ordering::Relaxed);
        c.handler_panics = u64::from(self.handler_panics.load(Ordering::Relaxed));
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
        let guard = Republish {
            shared: self,
            locked,
            now: Some(now),
        };
        let fired = guard
            .locked
            .facility
            .fire_due(now, source, |timers, event| handler(timers, event));
        guard.locked.fired_by[source.index()] += fired as u64;
        fired
    }

    /// Locks the facility and fires everything due at `now`.
    #[inline]
    pub(crate) fn fire(&self, now: Instant, source: TriggerSource) -> usize {
        let mut locked = self.lock();
        self.fire_locked(&mut locked, now, source)
    }

    /// Runs `f` on the locked facility and republishes.
    #[inline]
    pub(crate) fn with<R>(
        &self,
        now: Option<Instant>,
        f: impl FnOnce(&mut SoftTimers<E, C>) -> R,
    ) -> R {
        let mut locked = self.lock();
        let guard = Republish {
            shared: self,
            locked: &mut locked,
            now,
        };
        f(&mut guard.locked.facility)
    }

    /// Whether deadlines are enforced in this configuration.
    pub(crate) fn deadlines_enforced(&self) -> bool {
        !matches!(self.deadlines, DeadlineService::Refused)
    }

    /// After any change to the facility (under the lock): publishes the next time a trigger
    /// state has work and the earliest deadline, applies the one-shot timers' rules where
    /// they are in use, and wakes the helper if it sleeps past what was published. `now` is
    /// the time of the trigger state that made the change, if there was one (the timer rules
    /// read the clock otherwise).
    #[inline]
    pub(crate) fn publish(&self, locked: &mut Locked<E, C>, now: Option<Instant>) {
        if !self.soft {
            return;
        }
        let next_due = locked.facility.next_trigger_time();
        let mut next = next_due.map_or(NEVER, |t| self.gate.rel(t));
        // Whether the helper's alarm may have come earlier, so that it may have to be woken.
        let mut earlier = false;
        if let Some(backstop) = self.backstop_timer() {
            let now = now.unwrap_or_else(|| self.clock.now());
            let plan = backstop.plan;
            let rule_due = Self::backstop_due(locked, next_due);
            if let Arm::At(at) = plan.rearm(locked.backstop_armed, now, rule_due) {
                self.arm_backstop(backstop, locked, at);
            }
            if next_due.is_some()
                && let Some(armed) = locked.backstop_armed
            {
                next = next.min(self.gate.rel(plan.revisit_at(armed)));
            }
        } else if self.watched.load(Ordering::Relaxed) {
            // The watch reads the gate: a later time only makes it wake early, harmlessly.
            earlier = next < self.gate.next.load(Ordering::Relaxed);
        }
        if locked.facility.pending_deadlines() > 0
            || self.deadline_published.load(Ordering::Relaxed) != NEVER
        {
            earlier |= self.publish_deadline(locked);
        }
        if earlier {
            // Pairs with the helper's store of `sleeping_until` then load of these times: one
            // of the two sides sees the other's store, so the helper never sleeps past a time
            // published while it was about to sleep.
            self.gate.next.store(next, Ordering::SeqCst);
            self.wake_helper(locked);
        } else {
            self.gate.next.store(next, Ordering::Release);
        }
    }

    /// Publishes the earliest deadline (watched design) or arms the lazy deadline timer;
    /// returns whether the watched deadline came earlier.
    fn publish_deadline(&self, locked: &mut Locked<E, C>) -> bool {
        let next = locked.facility.next_deadline();
        match &self.deadlines {
            DeadlineService::Refused => false,
            DeadlineService::LazyTimerfd(fd) => {
                if let Some(at) = next
                    && deadline_needs_arming(locked.deadline_armed, at)
                {
                    // Relative to a fresh reading: an older `now` would make it expire late.
                    let now = self.clock.now();
                    arm_oneshot(fd, at.saturating_since(now), self.clock.resolution_hz());
                    locked.deadline_armed = Some(at);
                    locked.counters.deadline_arms += 1;
                    locked.counters.loop_core_syscalls += 1;
                }
                false
            }
            DeadlineService::Watched => {
                let rel = next.map_or(NEVER, |t| self.gate.rel(t));
                let published = self.deadline_published.load(Ordering::Relaxed);
                if rel == published {
                    return false;
                }
                self.deadline_published.store(rel, Ordering::Relaxed);
                let earlier = rel < published;
                if let Some(link) = &self.link {
                    // A later deadline only makes a helper that misses it wake early: no
                    // pairing with its sleep is needed (and a plain store is no locked
                    // instruction, which a met deadline per event would otherwise pay).
                    let order = if earlier {
                        Ordering::SeqCst
                    } else {
                        Ordering::Release
                    };
                    link.deadline.store(rel, order);
                }
                earlier
            }
        }
    }

    /// Wakes the helper if it sleeps past its alarm as just published, marking it awake as
    /// we do, so that the times published before it has run again do not wake it again (on a
    /// busy machine that can be many). Only the loop thread (or a thread scheduling through
    /// the loop) can find it asleep: the helper publishes only while awake.
    fn wake_helper(&self, locked: &mut Locked<E, C>) {
        let Some(link) = &self.link else {
            return;
        };
        if self.helper_spins() {
            return;
        }
        let (next, deadline) = self.watched_times();
        let alarm = self.watch().alarm(next, deadline);
        let mut seen = link.sleeping_until.load(Ordering::SeqCst);
        loop {
            let sleeping = match seen {
                AWAKE => None,
                NEVER => Some(None),
                rel => Some(self.gate.instant(rel)),
            };
            if !wake_needed(sleeping, alarm) {
                return;
            }
            match link.sleeping_until.compare_exchange(
                seen,
                AWAKE,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    let _ = rustix::io::write(&link.wake, &1u64.to_ne_bytes());
                    locked.counters.watcher_nudges += 1;
                    locked.counters.loop_core_syscalls += 1;
                    return;
                }
                Err(current) => seen = current,
            }
        }
    }

    /// What the watch does at the late line: if the earliest event is still pending past it
    /// under the lock (the loop may have fired it since the watch looked), fire everything
    /// due, as the paper's interrupt clock does; otherwise nothing.
    pub(crate) fn fire_overdue(&self) -> usize {
        let mut locked = self.lock();
        let now = self.clock.now();
        let next = locked.facility.next_trigger_time();
        if self.watch().decide(now, next, None) != WatchAction::FireOverdue {
            // What the helper watched was out of date: bring it up to date, or the helper
            // would wake for it again at once.
            self.publish(&mut locked, Some(now));
            return 0;
        }
        self.fire_locked(&mut locked, now, TriggerSource::Backstop)
    }

    /// What the deadline service does when a deadline may have passed: fire the events whose
    /// deadlines have (and only those), then republish.
    pub(crate) fn enforce_deadlines(&self) -> usize {
        let mut locked = self.lock();
        locked.deadline_armed = None;
        let now = self.clock.now();
        let handler = &self.handler;
        let source = TriggerSource::Deadline;
        let guard = Republish {
            shared: self,
            locked: &mut locked,
            now: Some(now),
        };
        let fired = guard
            .locked
            .facility
            .fire_expired_deadlines(now, source, |timers, event| handler(timers, event));
        if fired > 0 {
            guard.locked.counters.deadline_enforced += 1;
            guard.locked.fired_by[source.index()] += fired as u64;
        }
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
        self.publish(&mut locked, Some(now));
        Ok(id)
    }

    pub(crate) fn lazy_deadline_fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.deadlines {
            DeadlineService::LazyTimerfd(fd) => Some(fd.as_fd()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offsets in `shared` of: the lock word, the facility, `fired_by`.
    fn layout<C: Clock + Clone>(clock: C) -> (usize, usize, usize) {
        let facility: SoftTimers<(), C> = SoftTimers::new(clock).unwrap();
        let shared =
            Arc::new(Shared::new(facility, Box::new(|_, _| {}), true, true, None).unwrap());
        let base = Arc::as_ptr(&shared) as usize;
        let lock_word = &shared.locked as *const _ as usize - base;
        let locked = shared.lock();
        (
            lock_word,
            &locked.facility as *const _ as usize - base,
            locked.fired_by.as_ptr() as usize - base,
        )
    }

    /// A helper that stopped on a failed system call is reported, with its error, by every
    /// pass from then on; a handler panic is reported first.
    #[test]
    fn a_stopped_helper_is_reported_with_its_error_until_the_loop_is_rebuilt() {
        let facility: SoftTimers<(), _> =
            SoftTimers::new(softtimer::SimClock::new(1_000_000)).unwrap();
        let shared = Shared::new(facility, Box::new(|_, _| {}), true, true, None).unwrap();
        assert!(shared.helper_trouble().is_ok());
        shared.helper_failed(rustix::io::Errno::BADF);
        for _ in 0..2 {
            match shared.helper_trouble() {
                Err(RtError::HelperStopped(e)) => {
                    assert_eq!(
                        e.raw_os_error(),
                        Some(rustix::io::Errno::BADF.raw_os_error())
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        shared.handler_panics.fetch_add(1, Ordering::Relaxed);
        assert!(matches!(
            shared.helper_trouble(),
            Err(RtError::HandlerPanicked)
        ));
        // The error names the call, and leaves its cause to the source.
        let text = RtError::HelperStopped(std::io::Error::from_raw_os_error(9)).to_string();
        assert!(
            text.contains("epoll_wait") && !text.contains("descriptor"),
            "{text}"
        );
    }

    /// A loop that read the earliest due time and then, before it blocked, had an earlier
    /// event scheduled (from another thread) is told not to block until the time it read;
    /// a later event changes nothing.
    #[test]
    fn an_earlier_event_scheduled_before_the_block_is_not_blocked_past() {
        let clock = softtimer::SimClock::new(1_000_000);
        let facility: SoftTimers<(), _> = SoftTimers::new(clock).unwrap();
        let shared = Shared::new(facility, Box::new(|_, _| {}), true, true, None).unwrap();
        let at = |ticks| Span::from_ticks(ticks);
        shared.with(None, |t| t.schedule_soft_event(at(50_000), ()).unwrap());
        let due = shared.next_expiry_for_block().expect("one pending");
        shared.with(None, |t| t.schedule_soft_event(at(90_000), ()).unwrap());
        assert!(shared.before_block(due, Some(due)), "a later event");
        let due = shared.next_expiry_for_block().expect("two pending");
        shared.with(None, |t| t.schedule_soft_event(at(10_000), ()).unwrap());
        assert!(!shared.before_block(due, Some(due)), "an earlier event");
        let due = shared.next_expiry_for_block();
        assert!(shared.before_block(due.unwrap(), due), "read again");
    }

    /// A firing trigger state touches few cache lines: the shared state's first line (gate,
    /// clock, handler), one holding the lock word and the facility's first 56 bytes (what a
    /// pass reads), and one holding the fired counters of the loop's sources.
    #[test]
    fn a_firing_pass_touches_few_lines() {
        for (lock_word, facility, fired_by) in [
            layout(softtimer::SystemClock::new()),
            layout(softtimer::SimClock::new(1_000_000)),
        ] {
            assert_eq!(lock_word / 64, 1, "the lock word on the second line");
            assert_eq!(lock_word / 64, (facility + 55) / 64, "facility header");
            assert_eq!(fired_by % 64, 0, "fired_by starts a line");
        }
    }
}
