//! A thread-safe handle to a loop's facility and descriptors: what code outside the loop's
//! callbacks (an async runtime's futures, inside `poll`, on any thread) uses to schedule and
//! cancel soft events and to register descriptors.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use rustix::event::epoll;
use softtimer::{Clock, EventId, Instant, SoftTimers, Span, SystemClock};

use crate::cx::{Interest, watch};
use crate::error::RtError;
use crate::shared::Shared;

/// A cloneable, `Send + Sync` handle to an [`EventLoop`](crate::EventLoop)'s facility and
/// epoll set ([`EventLoop::handle`](crate::EventLoop::handle)).
///
/// [`LoopCx`](crate::LoopCx) is what the loop hands its own callbacks; a handle is for code
/// that runs elsewhere: an async runtime's timer future schedules its soft event from inside
/// `poll`, and cancels it from `drop` on whatever thread drops it. Each call takes the
/// facility's lock (uncontended but for a helper thread firing) and republishes the next
/// time a trigger state has work, as the loop's own calls do; [`LoopHandle::with_timers`]
/// does several changes under one lock. A handle keeps the facility and the epoll set alive,
/// not the loop: once the loop is dropped, events scheduled through it never fire.
///
/// A handle does not wake the loop. An event scheduled from another thread while the loop is
/// blocked, earlier than what the loop blocks until, fires within the backstop's bound (by
/// the helper, up to `X` late, where the loop has a backstop; otherwise at the loop's next
/// trigger state): a caller that wants it on time wakes the loop with its
/// [`LoopWaker`](crate::LoopWaker) after scheduling, as `softtimer-async` does for a timer
/// armed off its loop's thread. (Waking on every change would cost the loop's own calls, the
/// common case, a fence each.)
///
/// ```
/// use std::time::Duration;
/// use softtimer_rt::{EventLoop, LoopConfig};
///
/// let ev: EventLoop<&str> = EventLoop::new(LoopConfig::default(), |_, _| {}).unwrap();
/// let handle = ev.handle();
/// let id = std::thread::spawn(move || {
///     let t = handle.span(Duration::from_millis(5));
///     handle.schedule_soft_event(t, "from another thread").unwrap()
/// })
/// .join()
/// .unwrap();
/// let handle = ev.handle();
/// assert_eq!(handle.pending(), 1);
/// // Moving an event is a cancel and a schedule under one lock.
/// let moved = handle
///     .with_timers(|timers| {
///         let event = timers.cancel(id).unwrap();
///         let t = Duration::from_millis(1);
///         let at = timers.measure_time() + timers.clock().span(t);
///         timers.schedule_at(at, event)
///     })
///     .unwrap();
/// assert!(moved.is_ok() && handle.pending() == 1);
/// # use softtimer::Clock;
/// ```
pub struct LoopHandle<E, C: Clock = SystemClock> {
    shared: Arc<Shared<E, C>>,
    epoll: Arc<OwnedFd>,
    timers_off: bool,
}

impl<E, C: Clock> Clone for LoopHandle<E, C> {
    fn clone(&self) -> Self {
        LoopHandle {
            shared: Arc::clone(&self.shared),
            epoll: Arc::clone(&self.epoll),
            timers_off: self.timers_off,
        }
    }
}

impl<E, C: Clock> std::fmt::Debug for LoopHandle<E, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopHandle")
            .field("timers_off", &self.timers_off)
            .finish_non_exhaustive()
    }
}

impl<E, C: Clock> LoopHandle<E, C> {
    pub(crate) fn new(shared: Arc<Shared<E, C>>, epoll: Arc<OwnedFd>, timers_off: bool) -> Self {
        LoopHandle {
            shared,
            epoll,
            timers_off,
        }
    }

    /// The measurement clock.
    pub fn clock(&self) -> &C {
        &self.shared.clock
    }

    /// The measurement clock's time (`measure_time()`).
    pub fn now(&self) -> Instant {
        self.shared.clock.now()
    }

    /// `duration` in ticks of the measurement clock (rounded up).
    pub fn span(&self, duration: Duration) -> Span {
        self.shared.clock.span(duration)
    }

    fn check_timers_on(&self) -> Result<(), RtError> {
        if self.timers_off {
            Err(RtError::TimersOff)
        } else {
            Ok(())
        }
    }

    /// Schedules `event` `t` ahead (see [`SoftTimers::schedule_soft_event`]).
    pub fn schedule_soft_event(&self, t: Span, event: E) -> Result<EventId, RtError> {
        self.with_timers(|f| f.schedule_soft_event(t, event))?
            .map_err(RtError::from)
    }

    /// Schedules `event` at the clock time `at` (see [`SoftTimers::schedule_at`]).
    pub fn schedule_at(&self, at: Instant, event: E) -> Result<EventId, RtError> {
        self.with_timers(|f| f.schedule_at(at, event))?
            .map_err(RtError::from)
    }

    /// Cancels an event; its payload if it was pending. The payload is handed back rather
    /// than dropped under the facility's lock, so dropping it may do anything.
    pub fn cancel(&self, id: EventId) -> Option<E> {
        self.shared.with(None, |f| f.cancel(id))
    }

    /// Whether `id` names a pending event.
    pub fn is_pending(&self, id: EventId) -> bool {
        self.shared.lock().facility.is_pending(id)
    }

    /// Events pending.
    pub fn pending(&self) -> usize {
        self.shared.lock().facility.pending()
    }

    /// Runs `f` on the facility under its lock, then republishes the next time a trigger
    /// state has work (and moves the backstop by its rule): several changes for one lock.
    /// `f` must not call back into this loop's handles (the lock is not reentrant), and
    /// what it takes out of the facility is best dropped after it returns. Refused on a loop
    /// with timers off.
    pub fn with_timers<R>(&self, f: impl FnOnce(&mut SoftTimers<E, C>) -> R) -> Result<R, RtError> {
        self.check_timers_on()?;
        Ok(self.shared.with(None, f))
    }

    /// [`with_timers`](Self::with_timers) with `now`, a reading of the loop's clock taken
    /// a moment before (never later than now), which spares the backstop's rule a clock read
    /// of its own: what a runtime that reads the clock once for a batch of work passes. The
    /// rule only decides with it whether the one-shot backstop (where it is in use) must
    /// move, and where to: an older `now` may keep an expiry it would have pushed out or
    /// choose an earlier one (a wake-up that finds nothing), never one past the bound.
    /// A kernel timer that is armed is measured from a fresh reading (that costs a system
    /// call anyway).
    ///
    /// ```
    /// use softtimer::{Clock, Span};
    /// use softtimer_rt::{EventLoop, LoopConfig};
    ///
    /// let ev = EventLoop::new(LoopConfig::default(), |_, _: softtimer::Fired<u32>| {}).unwrap();
    /// let handle = ev.handle();
    /// let now = ev.clock().now();
    /// let id = handle
    ///     .with_timers_at(now, |t| t.schedule_soft_event(Span::from_ticks(1 << 40), 7))
    ///     .unwrap()
    ///     .unwrap();
    /// assert_eq!(handle.with_timers(|t| t.cancel(id)).unwrap(), Some(7));
    /// ```
    pub fn with_timers_at<R>(
        &self,
        now: Instant,
        f: impl FnOnce(&mut SoftTimers<E, C>) -> R,
    ) -> Result<R, RtError> {
        self.check_timers_on()?;
        Ok(self.shared.with(Some(now), f))
    }

    /// Watches `fd` for `interest` (see [`LoopCx::register`](crate::LoopCx::register)).
    /// Its readiness reaches the loop's `on_ready` under `token`.
    pub fn register(&self, fd: impl AsFd, interest: Interest, token: u64) -> Result<(), RtError> {
        watch(&self.epoll, fd, interest, token, true)
    }

    /// Changes what a registered `fd` is watched for.
    pub fn reregister(&self, fd: impl AsFd, interest: Interest, token: u64) -> Result<(), RtError> {
        watch(&self.epoll, fd, interest, token, false)
    }

    /// Stops watching `fd` (closing it does too, if it has no duplicates).
    pub fn deregister(&self, fd: impl AsFd) -> Result<(), RtError> {
        epoll::delete(&*self.epoll, fd).map_err(|e| RtError::from(("epoll_ctl", e)))
    }
}
