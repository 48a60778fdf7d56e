//! Time: [`sleep`], [`sleep_until`], [`interval`] and [`timeout`], each one soft event.
//!
//! A timer's deadline is a `std::time::Instant`; its soft event is scheduled when it is first
//! polled, at the measurement-clock time the deadline maps to (no rounding: the wheel is
//! exact to the tick), and fires at the first trigger state after it, which wakes the task.
//! Dropping a timer cancels its event; a timer that has completed leaves an event already
//! due to fire (at worst one stray wake of its task, cheaper than a cancel under the
//! facility's lock). Moving a deadline is O(1): an earlier one moves the
//! event in the wheel at once (a cancel and a schedule under one lock, keeping the waker); a
//! later one leaves the event where it is and re-arms when it fires, so a deadline pushed out
//! on every packet (an idle timeout) costs no wheel operation at all.
//!
//! A timer completes only when `std::time::Instant::now()` has reached its deadline: an event
//! that fires a little early (the TSC's rate against `CLOCK_MONOTONIC`) is armed again for the
//! rest. A deadline too far to represent (`Duration::MAX` from now) never completes and never
//! schedules anything.
//!
//! A timer belongs to the loop it was made on. Awaited after that loop has shut down (its
//! runtime dropped while a task of another runtime, another executor, or another of its
//! own loops still waited on it), it cannot fire: the shutdown wakes it, and a poll that
//! would have to wait panics, as a tokio timer of a runtime that has shut down does, rather
//! than wait for ever. A deadline already passed still completes. This holds for every timer
//! of the crate: [`Sleep`], [`Interval`], [`Timeout`], and quinn's and hyper's.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use softtimer::EventId;

/// The clock's types, here as `tokio::time` has its own: this crate's timers take
/// `std::time::Instant` itself, so a ported `use tokio::time::{Duration, Instant}` becomes
/// `use softtimer_async::time::{Duration, Instant}` and the values mix with `std`'s.
pub use std::time::{Duration, Instant};

use crate::executor::{self, LoopShared, TimerEvent};

/// Identifies the task a waker wakes (what `Waker::will_wake` compares), without keeping a
/// clone of it.
fn waker_identity(waker: &Waker) -> (usize, usize) {
    (waker.data() as usize, waker.vtable() as *const _ as usize)
}

/// How close to the batch's time a deadline must be for its first poll to read the clocks
/// rather than arm at once: a deadline this near may have passed since the batch began.
const NEAR: Duration = Duration::from_micros(50);

/// Now, for a deadline meant to pass at once: the time of the batch of task polls running on
/// this thread where there is one (never later than now, and what a first poll compares
/// with), so that the first poll completes without reading a clock.
fn now_at_once(shared: &LoopShared) -> Instant {
    executor::batch_time(shared).map_or_else(|| shared.time.now(), |(now, _)| now)
}

/// A scheduled soft event and what it was scheduled for.
#[derive(Debug)]
struct Armed {
    id: EventId,
    /// The deadline it was scheduled for.
    deadline: Instant,
    /// When it fires, on the measurement clock.
    due: softtimer::Instant,
    /// The task it wakes.
    waker: (usize, usize),
}

/// The timer under [`Sleep`], [`Interval`], and the quinn and hyper timers: a deadline and
/// at most one soft event for it.
pub(crate) struct TimerEntry {
    shared: Arc<LoopShared>,
    /// `None`: never.
    deadline: Option<Instant>,
    armed: Option<Armed>,
}

impl TimerEntry {
    pub(crate) fn new(shared: Arc<LoopShared>, deadline: Option<Instant>) -> Self {
        TimerEntry {
            shared,
            deadline,
            armed: None,
        }
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    pub(crate) fn now(&self) -> Instant {
        self.shared.time.now()
    }

    /// Whether the deadline has passed.
    pub(crate) fn is_elapsed(&self) -> bool {
        self.deadline.is_some_and(|d| self.now() >= d)
    }

    /// Ready once the deadline has passed; otherwise makes sure a soft event at (or before)
    /// it will wake this task.
    ///
    /// In a batch of task polls the loop's batch time serves first (read once for the
    /// batch, never later than now): a deadline it shows passed has passed, and a first poll
    /// maps its deadline from it without reading a clock. Only a timer that is armed and not
    /// shown passed reads both clocks, to tell an event still pending from one that fired
    /// during the batch.
    pub(crate) fn poll_elapsed(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_elapsed_budgeted(cx, true)
    }

    /// [`TimerEntry::poll_elapsed`]; `budgeted`: a passed deadline takes a unit of the
    /// poll's budget (and with none left the task yields first). A timeout's timer is not
    /// budgeted, so that it fires even while the future it bounds spends the whole budget.
    fn poll_elapsed_budgeted(&mut self, cx: &mut Context<'_>, budgeted: bool) -> Poll<()> {
        self.poll_unless_shut(cx, budgeted).map(|elapsed| {
            elapsed.expect(
                "softtimer-async: a timer awaited after its loop shut down (its runtime was \
                 dropped, or the worker thread that ran the loop ended)",
            )
        })
    }

    /// [`TimerEntry::poll_elapsed_budgeted`], with an error (the runtime's "shut down") in
    /// place of the panic for a timer polled, not yet due, after its loop shut down: for a
    /// library's own timers, which say so to their caller.
    pub(crate) fn poll_unless_shut(
        &mut self,
        cx: &mut Context<'_>,
        budgeted: bool,
    ) -> Poll<std::io::Result<()>> {
        let Some(deadline) = self.deadline else {
            return Poll::Pending;
        };
        // The batch's time, if it shows the deadline passed, or nothing is armed and the
        // deadline is not within `NEAR` of it (a first poll); both clocks read now otherwise,
        // which is cheaper than arming and waking for a deadline that has just passed.
        let time = match executor::batch_time(&self.shared) {
            Some(batch)
                if batch.0 >= deadline
                    || (self.armed.is_none()
                        && deadline.saturating_duration_since(batch.0) > NEAR) =>
            {
                batch
            }
            _ => self.shared.time.pair(),
        };
        let (now, clock_now) = time;
        if now >= deadline {
            // A task that loops over passed deadlines (`sleep(Duration::ZERO)`) yields
            // after its poll's budget, as one that loops over a ready socket does.
            if budgeted && !executor::take_budget(cx) {
                return Poll::Pending;
            }
            self.complete(clock_now);
            return Poll::Ready(Ok(()));
        }
        if self.shared.is_closed() {
            return Poll::Ready(Err(crate::reactor::runtime_shut_down()));
        }
        let identity = waker_identity(cx.waker());
        if let Some(armed) = &self.armed
            && armed.deadline <= deadline
        {
            if clock_now < armed.due {
                if armed.waker == identity {
                    // Certainly still pending (the clock has not reached it), for this task.
                    return Poll::Pending;
                }
            } else if armed.deadline == deadline {
                // Fired (or about to) although the deadline has not passed by
                // `std::time::Instant`: the clocks' rates differ a little. Arm for the rest.
                let early = &self.shared.counters.early_fires;
                early.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.arm(deadline, time, cx.waker(), identity);
        Poll::Pending
    }

    /// The deadline has passed (`clock_now` on the measurement clock, read then or earlier):
    /// an event due by then has fired or fires at the next trigger state, and is left to
    /// it (at worst one spurious wake, which every future allows) rather than cancelled
    /// under the facility's lock; a later one is cancelled.
    fn complete(&mut self, clock_now: softtimer::Instant) {
        match &self.armed {
            Some(armed) if armed.due <= clock_now => self.armed = None,
            _ => self.cancel(),
        }
    }

    /// Schedules a soft event for `deadline` that wakes `waker`, replacing the armed one;
    /// `time` was read just before (or as the batch began).
    fn arm(
        &mut self,
        deadline: Instant,
        time: executor::BatchTime,
        waker: &Waker,
        identity: (usize, usize),
    ) {
        let due = self.shared.time.due_time_at(deadline, time);
        let old = self.armed.take().map(|a| a.id);
        let event = TimerEvent::Wake(waker.clone());
        // The pair's measurement-clock time spares the backstop's rule a clock read.
        let result = self.shared.timers.with_timers_at(time.1, |timers| {
            let replaced = old.and_then(|id| timers.cancel(id));
            (replaced, timers.schedule_at(due, event))
        });
        match result {
            Ok((replaced, Ok(id))) => {
                drop(replaced);
                self.armed = Some(Armed {
                    id,
                    deadline,
                    due,
                    waker: identity,
                });
                // Armed from another thread as the loop shut down: its last look at the
                // wheel may have come before this, so the event may never fire. Polled
                // again, the timer finds the loop closed.
                if self.shared.is_closed() {
                    waker.wake_by_ref();
                }
                self.tell_the_loop();
            }
            // The facility refused (it cannot on this runtime's loops): poll again rather
            // than never.
            Ok((replaced, Err(_))) => {
                drop(replaced);
                waker.wake_by_ref();
            }
            Err(_) => waker.wake_by_ref(),
        }
    }

    /// Moves the deadline (`None`: never). An earlier deadline moves the armed event now, in
    /// place (cancel and schedule under one lock, with the waker it holds); a later one
    /// re-arms lazily when the event fires.
    pub(crate) fn reset(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
        let Some(armed) = &self.armed else {
            return;
        };
        let Some(deadline) = deadline else {
            self.cancel();
            return;
        };
        if deadline >= armed.deadline {
            return;
        }
        let (id, waker) = (armed.id, armed.waker);
        let due = self.shared.time.due_time(deadline);
        let moved = self.shared.timers.with_timers(|timers| {
            timers
                .cancel(id)
                .map(|event| timers.schedule_at(due, event))
        });
        self.armed = match moved {
            Ok(Some(Ok(id))) => {
                self.tell_the_loop();
                Some(Armed {
                    id,
                    deadline,
                    due,
                    waker,
                })
            }
            // Already fired (the task is woken and will arm again), or refused.
            _ => None,
        };
    }

    /// Wakes the loop after an event was armed from a thread that does not run it (a
    /// `Handle::block_on`, another runtime's task): it may be blocked until a later time,
    /// and the backstop alone would fire the event up to its interval late. On the loop's
    /// own thread the loop is not blocked, and reads the next due time before it blocks.
    fn tell_the_loop(&self) {
        if !executor::is_current(Arc::as_ptr(&self.shared)) {
            self.shared.wake();
        }
    }

    /// Cancels the armed event, if any.
    pub(crate) fn cancel(&mut self) {
        if let Some(armed) = self.armed.take() {
            let event = self.shared.timers.cancel(armed.id);
            drop(event);
        }
    }
}

impl Drop for TimerEntry {
    fn drop(&mut self) {
        self.cancel();
    }
}

impl std::fmt::Debug for TimerEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimerEntry")
            .field("deadline", &self.deadline)
            .field("armed", &self.armed.is_some())
            .finish()
    }
}

/// The calling thread's loop, for a timer.
#[track_caller]
fn here() -> Arc<LoopShared> {
    executor::context_shared().expect(
        "softtimer-async timers are made on a runtime thread (inside block_on, a task, \
             Runtime::enter's context, or a blocking task)",
    )
}

/// The runtime's time: `std::time::Instant::now()`, or the simulated time of a runtime on a
/// simulated clock (on its loop's thread, in its context, or on one of its blocking threads).
/// Elsewhere, `std::time::Instant::now()`.
pub fn now() -> Instant {
    executor::with_current(|shared| shared.map_or_else(Instant::now, |s| s.time.now()))
}

/// A future that completes at a deadline: one soft event. See [`sleep`].
#[derive(Debug)]
#[must_use = "a Sleep does nothing unless awaited"]
pub struct Sleep {
    entry: TimerEntry,
}

impl Sleep {
    pub(crate) fn on(shared: Arc<LoopShared>, deadline: Option<Instant>) -> Sleep {
        Sleep {
            entry: TimerEntry::new(shared, deadline),
        }
    }

    /// The deadline; `None` for a sleep too long to represent, which never completes (where
    /// tokio's returns an `Instant` about 30 years away).
    pub fn deadline(&self) -> Option<Instant> {
        self.entry.deadline()
    }

    /// Whether the deadline has passed.
    pub fn is_elapsed(&self) -> bool {
        self.entry.is_elapsed()
    }

    /// Moves the deadline, in place (see the [module documentation](self)).
    pub fn reset(&mut self, deadline: Instant) {
        self.entry.reset(Some(deadline));
    }
}

impl Sleep {
    /// Polls as awaiting it does, but with the runtime's "shut down" error where awaiting
    /// panics (a timer not yet due whose loop has shut down): for the crate's own back-off
    /// timers, whose callers hear of a shutdown as an error.
    pub(crate) fn poll_unless_shut(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.entry.poll_unless_shut(cx, true)
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.entry.poll_elapsed(cx)
    }
}

/// Waits for `duration`: at the first trigger state after it has passed (how soon after
/// depends on the runtime's [`Precision`](crate::Precision)), never before. A zero duration
/// completes at once; `Duration::MAX` never completes.
///
/// ```
/// use std::time::{Duration, Instant};
/// use softtimer_async::{Runtime, time::sleep};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let start = Instant::now();
///     sleep(Duration::from_micros(50)).await;
///     assert!(start.elapsed() >= Duration::from_micros(50));
/// });
/// ```
///
/// # Panics
///
/// Outside a runtime thread; and when polled with its deadline still ahead after its
/// runtime has shut down (see the [module documentation](self)).
#[track_caller]
pub fn sleep(duration: Duration) -> Sleep {
    let shared = here();
    let now = match duration.is_zero() {
        true => now_at_once(&shared),
        false => shared.time.now(),
    };
    let deadline = now.checked_add(duration);
    Sleep::on(shared, deadline)
}

/// Waits until `deadline` (see [`sleep`]). A deadline already passed completes without a
/// timer: at the first poll, or, in a task that has run long after its batch of polls began,
/// at the loop's next trigger state.
///
/// # Panics
///
/// Outside a runtime thread; and when polled with its deadline still ahead after its
/// runtime has shut down (see the [module documentation](self)).
#[track_caller]
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep::on(here(), Some(deadline))
}

/// What an [`Interval`] does when it falls behind by a whole period or more (its task was
/// busy, or not polled): tokio's `MissedTickBehavior`, with one difference. tokio applies
/// it to a tick more than 5 ms late (its timers' millisecond, and some), so that its
/// `Delay` and `Skip` leave a tick a few milliseconds late on schedule; here a tick is
/// behind once it is a whole period late, which for a period of microseconds comes long
/// before 5 ms. A 20 ms interval whose tick came 10 ms late ticks again 10 ms later under
/// every behaviour here, and 20 ms later under tokio's `Delay`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissedTickBehavior {
    /// Tick as fast as possible until caught up: the ticks keep their schedule and their
    /// count (the default).
    #[default]
    Burst,
    /// Start again from now: the next tick is a period after the late one.
    Delay,
    /// Keep the schedule, skipping the ticks already missed: the next tick is the first
    /// scheduled time after now.
    Skip,
}

impl MissedTickBehavior {
    /// The tick after one scheduled at `tick` and taken at `now`.
    fn next(self, tick: Instant, now: Instant, period: Duration) -> Option<Instant> {
        let on_time = tick.checked_add(period)?;
        if period.is_zero() || now < on_time {
            return Some(on_time);
        }
        match self {
            MissedTickBehavior::Burst => Some(on_time),
            MissedTickBehavior::Delay => now.checked_add(period),
            MissedTickBehavior::Skip => {
                let behind = now.duration_since(tick).as_nanos();
                let period_ns = period.as_nanos();
                let ahead = period_ns - behind % period_ns;
                now.checked_add(Duration::from_nanos(u64::try_from(ahead).ok()?))
            }
        }
    }
}

/// Ticks every period: one soft event outstanding, re-armed at each tick. See [`interval`].
#[derive(Debug)]
pub struct Interval {
    entry: TimerEntry,
    period: Duration,
    missed: MissedTickBehavior,
    /// Made by [`interval`]: the first tick is due at once, without a timer.
    first_due: bool,
}

impl Interval {
    /// Waits for the next tick; returns the time it was scheduled for.
    pub async fn tick(&mut self) -> Instant {
        std::future::poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// Polls for the next tick.
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        let Some(tick) = self.entry.deadline() else {
            return Poll::Pending;
        };
        if self.first_due {
            if !executor::take_budget(cx) {
                return Poll::Pending;
            }
            self.first_due = false;
        } else if self.entry.poll_elapsed(cx).is_pending() {
            return Poll::Pending;
        }
        let next = self.missed.next(tick, self.entry.now(), self.period);
        self.entry.reset(next);
        Poll::Ready(tick)
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// What it does when it falls behind.
    pub fn missed_tick_behavior(&self) -> MissedTickBehavior {
        self.missed
    }

    /// Sets what it does when it falls behind.
    pub fn set_missed_tick_behavior(&mut self, behavior: MissedTickBehavior) {
        self.missed = behavior;
    }

    /// Restarts the schedule: the next tick a period from now.
    pub fn reset(&mut self) {
        self.reset_after(self.period);
    }

    /// Restarts the schedule from now: the next tick at once.
    pub fn reset_immediately(&mut self) {
        let now = self.entry.now();
        self.entry.reset(Some(now));
        self.first_due = true;
    }

    /// Restarts the schedule: the next tick `after` from now (never, past what an `Instant`
    /// can hold), then every period.
    pub fn reset_after(&mut self, after: Duration) {
        let next = self.entry.now().checked_add(after);
        self.reset_to(next);
    }

    /// Restarts the schedule: the next tick at `deadline` (at once if it has passed), then
    /// every period.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use softtimer_async::{Runtime, time::{interval, timeout}};
    ///
    /// let rt = Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let mut ticks = interval(Duration::from_secs(3600));
    ///     ticks.tick().await; // the first tick, at once
    ///     let soon = Instant::now() + Duration::from_micros(300);
    ///     ticks.reset_at(soon);
    ///     assert_eq!(ticks.tick().await, soon);
    ///     ticks.reset_immediately();
    ///     let now = timeout(Duration::from_secs(10), ticks.tick()).await;
    ///     assert!(now.expect("the tick came at once") <= Instant::now());
    ///     let before = Instant::now();
    ///     ticks.reset_after(Duration::from_micros(200));
    ///     let at = ticks.tick().await;
    ///     assert!(at >= before + Duration::from_micros(200) && Instant::now() >= at);
    /// });
    /// ```
    pub fn reset_at(&mut self, deadline: Instant) {
        self.reset_to(Some(deadline));
    }

    fn reset_to(&mut self, next: Option<Instant>) {
        self.first_due = false;
        self.entry.reset(next);
    }
}

/// Ticks every `period`, the first tick at once. A zero period ticks at every call.
///
/// ```
/// use std::time::{Duration, Instant};
/// use softtimer_async::{Runtime, time::{MissedTickBehavior, interval}};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let mut ticks = interval(Duration::from_micros(200));
///     ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
///     let first = ticks.tick().await;
///     for _ in 0..10 {
///         let at = ticks.tick().await;
///         assert!(Instant::now() >= at);
///     }
///     assert!(first.elapsed() >= Duration::from_millis(2));
/// });
/// ```
///
/// # Panics
///
/// Outside a runtime thread; and when polled with its deadline still ahead after its
/// runtime has shut down (see the [module documentation](self)).
#[track_caller]
pub fn interval(period: Duration) -> Interval {
    let shared = here();
    let start = shared.time.now();
    Interval {
        first_due: true,
        ..interval_on(shared, start, period)
    }
}

/// Ticks every `period` from `start` (the first tick at `start`).
///
/// # Panics
///
/// Outside a runtime thread; and when polled with its deadline still ahead after its
/// runtime has shut down (see the [module documentation](self)).
#[track_caller]
pub fn interval_at(start: Instant, period: Duration) -> Interval {
    interval_on(here(), start, period)
}

fn interval_on(shared: Arc<LoopShared>, start: Instant, period: Duration) -> Interval {
    Interval {
        entry: TimerEntry::new(shared, Some(start)),
        period,
        missed: MissedTickBehavior::default(),
        first_due: false,
    }
}

/// The error of a [`timeout`] whose deadline passed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("deadline has elapsed")]
pub struct Elapsed(());

/// A timeout as an I/O error (`TimedOut`), as tokio's, so that
/// `timeout(d, socket.recv(buf)).await??` works in a function returning `io::Result`.
impl From<Elapsed> for std::io::Error {
    fn from(elapsed: Elapsed) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::TimedOut, elapsed)
    }
}

pin_project_lite::pin_project! {
    /// A future with a deadline. See [`timeout`].
    #[derive(Debug)]
    #[must_use = "a Timeout does nothing unless awaited"]
    pub struct Timeout<F> {
        #[pin]
        future: F,
        sleep: Sleep,
    }
}

impl<F> Timeout<F> {
    /// The future it runs.
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// The future it runs, to change (a `Timeout` not pinned yet).
    pub fn get_mut(&mut self) -> &mut F {
        &mut self.future
    }

    /// The future it runs, its deadline dropped (and its soft event cancelled).
    pub fn into_inner(self) -> F {
        self.future
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.future.poll(cx) {
            return Poll::Ready(Ok(out));
        }
        // Outside the budget: the future may have spent it all (a flooded socket).
        this.sleep
            .entry
            .poll_elapsed_budgeted(cx, false)
            .map(|()| Err(Elapsed(())))
    }
}

/// Runs `future` for at most `duration`: its output, or [`Elapsed`] (and the future
/// dropped) when the deadline passes first. One soft event, cancelled when the future wins.
///
/// ```
/// use std::time::Duration;
/// use softtimer_async::{Runtime, time::{sleep, timeout}};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     assert!(timeout(Duration::from_micros(100), sleep(Duration::from_secs(5))).await.is_err());
///     assert_eq!(timeout(Duration::from_secs(5), async { 3 }).await, Ok(3));
/// });
/// ```
///
/// # Panics
///
/// Outside a runtime thread; and when polled with its deadline still ahead after its
/// runtime has shut down (see the [module documentation](self)).
#[track_caller]
pub fn timeout<F: IntoFuture>(duration: Duration, future: F) -> Timeout<F::IntoFuture> {
    Timeout {
        future: future.into_future(),
        sleep: sleep(duration),
    }
}

/// Runs `future` until `deadline` at most (see [`timeout`]).
///
/// # Panics
///
/// Outside a runtime thread; and when polled with its deadline still ahead after its
/// runtime has shut down (see the [module documentation](self)).
#[track_caller]
pub fn timeout_at<F: IntoFuture>(deadline: Instant, future: F) -> Timeout<F::IntoFuture> {
    Timeout {
        future: future.into_future(),
        sleep: sleep_until(deadline),
    }
}
