//! The soft-timer facility: the paper's API over the timing wheel.

use crate::clock::{Clock, SystemClock};
use crate::error::{ConfigError, ScheduleError};
use crate::source::TriggerSource;
use crate::time::{Instant, Span};
use crate::trigger_stats::TriggerStats;
use crate::wheel::{Link, NIL, NO_LOC, Node, Wheel};

/// The highest backstop frequency a facility accepts (100 kHz): faster than that a periodic
/// kernel timer costs more than it saves, which defeats the point of soft timers.
pub const MAX_INTERRUPT_CLOCK_HZ: u64 = 100_000;

/// The widest finest-level wheel slot a facility accepts, in ticks (2^32).
pub const MAX_SLOT_TICKS: u64 = 1 << 32;

/// The delays the facility refuses from here up (2^63 − 1 ticks, 112 years at 2.6 GHz):
/// clock times compare on a circle of 2^64 ticks, and a due time that far ahead would read
/// as one already passed.
const MAX_DELAY_TICKS: u64 = i64::MAX as u64;

const DUE: usize = 0;
const DEADLINE: usize = 1;

/// Settings of a facility.
#[derive(Clone, Debug)]
pub struct Config {
    /// Frequency of the backstop clock in Hz (the paper's `interrupt_clock_resolution`).
    /// 1 ..= 100 000; default 1000.
    pub interrupt_clock_hz: u64,
    /// Keep [`TriggerStats`] from the start. Default off.
    pub stats: bool,
    /// Events to make room for up front, so that the first ones do not grow the slab.
    pub capacity: usize,
    /// Width of the timing wheel's finest slots in measurement ticks: a power of two from 1
    /// to 2^32 (anything else is refused). Events inside one slot are still fired in exact
    /// due-time order; wider slots mean fewer cascades for near events and longer ordered
    /// inserts when many events share a slot. Default (`None`): the power of two closest
    /// below 30 ns (64 ticks on a 2 GHz TSC).
    pub slot_ticks: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            interrupt_clock_hz: 1000,
            stats: false,
            capacity: 0,
            slot_ticks: None,
        }
    }
}

/// Names one scheduled event. Cancelling an id whose event already fired or was cancelled is
/// a harmless no-op: the slab slot's generation tells a stale id from a live one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventId {
    index: u32,
    generation: u32,
}

impl EventId {
    /// The id as one number (for logs and maps).
    pub fn to_u64(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// The id [`EventId::to_u64`] made.
    pub fn from_u64(raw: u64) -> Self {
        EventId {
            index: raw as u32,
            generation: (raw >> 32) as u32,
        }
    }
}

/// An event handed to the dispatch function when it fires.
#[derive(Debug)]
pub struct Fired<E> {
    /// The id [`SoftTimers::schedule_soft_event`] returned.
    pub id: EventId,
    /// The payload given at scheduling.
    pub event: E,
    /// When it was due (`scheduled_at + T + 1`).
    pub due: Instant,
    /// The time of the trigger state that fired it.
    pub now: Instant,
    /// What kind of trigger state fired it.
    pub source: TriggerSource,
}

impl<E> Fired<E> {
    /// How late it fired past its due time.
    pub fn late(&self) -> Span {
        self.now.saturating_since(self.due)
    }
}

/// A soft-timer facility: one per thread, like the kernel's per-CPU timer structures.
///
/// Events are scheduled `T` measurement ticks ahead and fire at the first *trigger state*
/// ([`SoftTimers::trigger`]) that finds `measure_time() − scheduled_at ≥ T + 1`. A coarse
/// periodic backstop ([`SoftTimers::backstop_tick`], every `X = measure_resolution /
/// interrupt_clock_resolution` ticks) bounds the delay: `T < actual < T + X + 1`.
///
/// An event carries a payload `E` of the caller's choosing; the trigger hands each due
/// payload to a dispatch function that also gets the facility back, so handlers can schedule
/// and cancel events (their own included) while they run. No allocation happens per event
/// once the slab has grown to the largest number pending.
///
/// ```
/// use softtimer::{SimClock, SoftTimers, Span, TriggerSource};
///
/// // A 1 MHz simulated clock: one tick is a microsecond.
/// let clock = SimClock::new(1_000_000);
/// let mut timers = SoftTimers::new(clock.clone()).unwrap();
///
/// #[derive(Debug, PartialEq)]
/// enum Event { Transmit(u32) }
///
/// let t = Span::from_ticks(20);
/// timers.schedule_soft_event(t, Event::Transmit(1)).unwrap();
/// clock.advance(20);
/// let mut sent = vec![];
/// // At T ticks the event is not due yet: it fires once T + 1 ticks have passed.
/// timers.trigger(TriggerSource::Recv, |_, fired| sent.push(fired.event));
/// assert!(sent.is_empty());
/// clock.advance(1);
/// timers.trigger(TriggerSource::Send, |timers, fired| {
///     sent.push(fired.event);
///     // Handlers may schedule the next event (measured from the trigger's clock read).
///     timers.schedule_from(fired.now, t, Event::Transmit(2)).unwrap();
/// });
/// assert_eq!(sent, vec![Event::Transmit(1)]);
/// assert_eq!(timers.pending(), 1);
/// ```
// The fields in order: what a firing trigger state reads (56 bytes, so that they share a
// cache line with the lock word of a mutex around the facility: a server's system calls
// between two trigger states evict the first-level cache, so each line touched is a miss),
// then the statistics' address and the due wheel, whose first 48 bytes hold what it reads,
// then what is read rarely.
#[repr(C)]
pub struct SoftTimers<E, C: Clock = SystemClock> {
    /// Facility time is `clock.now() - epoch`, so a clock near `u64::MAX` wraps harmlessly.
    epoch: u64,
    /// Facility time below which no trigger has anything to do (a lower bound of the
    /// earliest due time). The fast path of [`SoftTimers::trigger`] compares against it.
    next_check: u64,
    /// The latest facility time a trigger has processed; nothing is ever placed at or
    /// before it, so a pass of `trigger` always ends.
    floor: u64,
    nodes: Vec<Node<E>>,
    free: u32,
    /// Events in the deadline wheel (its length, kept here so that a pass need not read
    /// that wheel's line to learn it is empty).
    deadline_count: u32,
    stats: Option<Box<TriggerStats>>,
    due: Wheel,
    deadlines: Wheel,
    clock: C,
    interrupt_hz: u64,
    /// The earliest due time scheduled since [`SoftTimers::mark_scheduled`] (`u64::MAX`:
    /// none). Read by a loop about to block (and after each change by one backstop design);
    /// written by every schedule, a handler's during a firing pass too (one more line then):
    /// at the end, away from the fields every pass reads.
    scheduled_floor: u64,
}

impl<E, C: Clock> SoftTimers<E, C> {
    /// A facility on `clock` with the default [`Config`] (1 kHz backstop, no statistics).
    pub fn new(clock: C) -> Result<Self, ConfigError> {
        Self::with_config(clock, Config::default())
    }

    /// A facility on `clock` with `config`.
    pub fn with_config(clock: C, config: Config) -> Result<Self, ConfigError> {
        let measure_hz = clock.resolution_hz();
        if measure_hz == 0 {
            return Err(ConfigError::ZeroMeasureResolution);
        }
        let hz = config.interrupt_clock_hz;
        if hz == 0 || hz > MAX_INTERRUPT_CLOCK_HZ {
            return Err(ConfigError::InterruptClockOutOfRange {
                hz,
                max: MAX_INTERRUPT_CLOCK_HZ,
            });
        }
        if hz > measure_hz {
            return Err(ConfigError::InterruptFasterThanMeasure {
                interrupt_hz: hz,
                measure_hz,
            });
        }
        let shift = match config.slot_ticks {
            Some(ticks) if ticks.is_power_of_two() && ticks <= MAX_SLOT_TICKS => ticks.ilog2(),
            Some(ticks) => return Err(ConfigError::SlotWidth { ticks }),
            // About 30 ns: the largest power of two ≤ measure_hz / 30 MHz (64 ticks on a
            // 2 GHz TSC). Measured best of 1, 64, 256 and 1024 ticks (docs/RESULTS.md).
            None => (measure_hz / 30_000_000).max(1).ilog2(),
        };
        let epoch = clock.now().ticks();
        Ok(SoftTimers {
            clock,
            epoch,
            next_check: u64::MAX,
            floor: 0,
            nodes: Vec::with_capacity(config.capacity),
            free: NIL,
            deadline_count: 0,
            due: Wheel::new(DUE, shift, 0),
            deadlines: Wheel::new(DEADLINE, shift, 0),
            interrupt_hz: hz,
            scheduled_floor: u64::MAX,
            stats: config
                .stats
                .then(|| Box::new(TriggerStats::new(measure_hz))),
        })
    }

    /// The current time on the measurement clock (`measure_time()`).
    #[inline(always)]
    pub fn measure_time(&self) -> Instant {
        self.clock.now()
    }

    /// Ticks per second of the measurement clock (`measure_resolution()`).
    pub fn measure_resolution(&self) -> u64 {
        self.clock.resolution_hz()
    }

    /// Frequency in Hz of the backstop that bounds the delay (`interrupt_clock_resolution()`).
    pub fn interrupt_clock_resolution(&self) -> u64 {
        self.interrupt_hz
    }

    /// `X`: the time between two backstop ticks. The delay bound is `T < actual < T + X + 1`.
    pub fn backstop_interval(&self) -> Span {
        Span::from_ticks(self.clock.resolution_hz() / self.interrupt_hz)
    }

    /// The clock the facility reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Events pending.
    pub fn pending(&self) -> usize {
        self.due.len()
    }

    /// Schedules `event` to fire at the first trigger state at least `T + 1` ticks from now
    /// (`schedule_soft_event(T, handler)`).
    ///
    /// # Errors
    ///
    /// [`ScheduleError::DelayOverflow`] for a delay of 2^63 − 1 ticks or more (decades at
    /// any clock rate: the clock's times compare on a circle, and a due time that far ahead
    /// would read as passed); [`ScheduleError::TooManyEvents`] when the facility holds as
    /// many events as it can name.
    #[inline]
    pub fn schedule_soft_event(&mut self, t: Span, event: E) -> Result<EventId, ScheduleError> {
        let now = self.clock.now();
        self.schedule_from(now, t, event)
    }

    /// As [`SoftTimers::schedule_soft_event`], measuring `T` from `now` (a value of
    /// [`SoftTimers::measure_time`] the caller already holds, such as [`Fired::now`]), which
    /// saves a clock read. A `now` from the past makes the event due that much sooner.
    #[inline]
    pub fn schedule_from(
        &mut self,
        now: Instant,
        t: Span,
        event: E,
    ) -> Result<EventId, ScheduleError> {
        let due = self.due_time(now, t)?;
        self.insert(due, None, event)
    }

    /// Schedules `event` at the clock time `due` (it fires at the first trigger state that
    /// reads a time ≥ `due`). A time already passed is due one tick after the latest trigger
    /// pass, so it fires at the next trigger state that reads a later time, and a handler
    /// that schedules into the past cannot make one pass loop forever.
    #[inline]
    pub fn schedule_at(&mut self, due: Instant, event: E) -> Result<EventId, ScheduleError> {
        let rel = due.ticks().wrapping_sub(self.epoch);
        // Clock values compare on a circle: more than 2^63 ticks "ahead" means behind.
        if rel.wrapping_sub(self.floor) > i64::MAX as u64 {
            return self.insert(self.floor + 1, None, event);
        }
        if rel == u64::MAX {
            return Err(ScheduleError::DelayOverflow { ticks: rel });
        }
        self.insert(rel, None, event)
    }

    /// Schedules `event` `T` ticks ahead with a deadline `deadline` ticks ahead (`deadline ≥
    /// T`): it fires at a trigger state after `T`, and a runtime that watches
    /// [`SoftTimers::next_deadline`] fires it no later than the deadline (Section 5.9).
    pub fn schedule_with_deadline(
        &mut self,
        t: Span,
        deadline: Span,
        event: E,
    ) -> Result<EventId, ScheduleError> {
        let now = self.clock.now();
        self.schedule_with_deadline_from(now, t, deadline, event)
    }

    /// [`SoftTimers::schedule_with_deadline`] measuring from a clock value the caller holds;
    /// the deadline's clock time is then `now + deadline + 1`.
    pub fn schedule_with_deadline_from(
        &mut self,
        now: Instant,
        t: Span,
        deadline: Span,
        event: E,
    ) -> Result<EventId, ScheduleError> {
        if deadline < t {
            return Err(ScheduleError::DeadlineBeforeDelay {
                delay: t.ticks(),
                deadline: deadline.ticks(),
            });
        }
        let due = self.due_time(now, t)?;
        let deadline_due = self.due_time(now, deadline)?;
        self.insert(due, Some(deadline_due), event)
    }

    /// Cancels an event. Returns its payload if it was pending; `None` (and nothing else
    /// happens) if it already fired, was cancelled, or never existed.
    pub fn cancel(&mut self, id: EventId) -> Option<E> {
        let node = self.nodes.get(id.index as usize)?;
        if node.generation != id.generation || node.payload.is_none() {
            return None;
        }
        let event = self.take(id.index);
        // `next_check` stays a valid lower bound while events remain (a trigger that finds
        // nothing due refreshes it); with none left there is nothing to check for.
        if self.due.len() == 0 {
            self.next_check = u64::MAX;
        }
        Some(event)
    }

    /// Whether `id` names a pending event.
    pub fn is_pending(&self, id: EventId) -> bool {
        self.nodes
            .get(id.index as usize)
            .is_some_and(|n| n.generation == id.generation && n.payload.is_some())
    }

    /// The trigger-state check. With nothing due it is one clock read and one compare.
    /// Otherwise it removes each due event, in due-time order, and calls `dispatch` with it.
    /// Returns how many events fired.
    ///
    /// The read is [`Clock::now_unordered`] (a plain `rdtsc` on the TSC): the cheapest read
    /// there is, and it can only see a time earlier than program order, so it can delay an
    /// event by nanoseconds but never fire one early.
    #[inline(always)]
    pub fn trigger<F>(&mut self, source: TriggerSource, dispatch: F) -> usize
    where
        F: FnMut(&mut Self, Fired<E>),
    {
        let now = self.clock.now_unordered();
        self.trigger_at(now, source, dispatch)
    }

    /// [`SoftTimers::trigger`] with a clock value the caller already read. The facility's
    /// time is monotonic even if `now` is a little behind the last one seen.
    #[inline(always)]
    pub fn trigger_at<F>(&mut self, now: Instant, source: TriggerSource, dispatch: F) -> usize
    where
        F: FnMut(&mut Self, Fired<E>),
    {
        if let Some(stats) = self.stats.as_deref_mut() {
            stats.record_trigger(source, now);
        }
        if now.ticks().wrapping_sub(self.epoch) < self.next_check {
            return 0;
        }
        self.run_due(now, source, dispatch)
    }

    /// Fires every event due at `now` without counting a trigger state: for a runtime that
    /// checks the fast path itself (against [`SoftTimers::next_trigger_time`]) and keeps its
    /// own trigger statistics. Firing delays are still recorded.
    #[inline]
    pub fn fire_due<F>(&mut self, now: Instant, source: TriggerSource, dispatch: F) -> usize
    where
        F: FnMut(&mut Self, Fired<E>),
    {
        if now.ticks().wrapping_sub(self.epoch) < self.next_check {
            return 0;
        }
        self.run_due(now, source, dispatch)
    }

    /// The clock time before which no trigger state has anything to do: a lower bound on
    /// the earliest due time, exact when that event is in the wheel's finest level. `None`
    /// when nothing is pending. This is what the trigger fast path compares against.
    pub fn next_trigger_time(&self) -> Option<Instant> {
        (self.next_check != u64::MAX).then(|| self.instant(self.next_check))
    }

    /// What the periodic backstop calls every `X` ticks: runs every overdue event.
    #[inline]
    pub fn backstop_tick<F>(&mut self, dispatch: F) -> usize
    where
        F: FnMut(&mut Self, Fired<E>),
    {
        self.trigger(TriggerSource::Backstop, dispatch)
    }

    /// When the earliest pending event is due; `None` when nothing is pending.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.due.earliest(&self.nodes).map(|t| self.instant(t))
    }

    /// Starts a watch on what is scheduled from now on: [`SoftTimers::earliest_scheduled`]
    /// then says how early anything scheduled after this call is due.
    ///
    /// [`SoftTimers::next_trigger_time`] is only a lower bound on the earliest due time (the
    /// start of a coarse slot), and [`SoftTimers::next_expiry`] scans a slot for the exact
    /// one. A caller that has paid for the exact time once can keep using it, as a lower
    /// bound, for as long as nothing earlier has been scheduled since (cancelling and firing
    /// only make the earliest due time later): this watch tells it so at the cost of one
    /// compare per schedule.
    ///
    /// There is one watch: a mark ends the one before. `softtimer-rt`'s event loop keeps it
    /// for its backstop (a mark made by its handler or through its handle would end the
    /// loop's watch early, and its delay bound with it), so the two methods are hidden from
    /// these docs; use them on a facility no event loop owns.
    ///
    /// ```
    /// use softtimer::{SimClock, SoftTimers, Span};
    ///
    /// let clock = SimClock::new(1_000_000);
    /// let mut timers = SoftTimers::new(clock.clone()).unwrap();
    /// timers.schedule_soft_event(Span::from_ticks(5_000), ()).unwrap();
    /// let exact = timers.next_expiry().unwrap();
    /// timers.mark_scheduled();
    /// assert_eq!(timers.earliest_scheduled(), None);
    /// timers.schedule_soft_event(Span::from_ticks(9_000), ()).unwrap();
    /// // Nothing earlier than `exact` came since: it is still a lower bound.
    /// assert!(timers.earliest_scheduled().unwrap() >= exact);
    /// timers.schedule_soft_event(Span::from_ticks(10), ()).unwrap();
    /// assert!(timers.earliest_scheduled().unwrap() < exact);
    /// ```
    #[doc(hidden)]
    pub fn mark_scheduled(&mut self) {
        self.scheduled_floor = u64::MAX;
    }

    /// The earliest due time among the events scheduled since the last
    /// [`SoftTimers::mark_scheduled`] (or since the facility was made), whether or not they
    /// are still pending; `None` when nothing has been scheduled since.
    #[doc(hidden)]
    pub fn earliest_scheduled(&self) -> Option<Instant> {
        (self.scheduled_floor != u64::MAX).then(|| self.instant(self.scheduled_floor))
    }

    /// Events pending that have a deadline.
    pub fn pending_deadlines(&self) -> usize {
        debug_assert_eq!(self.deadline_count as usize, self.deadlines.len());
        self.deadline_count as usize
    }

    /// What a deadline timer calls when it expires (Section 5.9): fires, in deadline order,
    /// every event whose deadline is at or before `now`, and nothing else (events that are
    /// due but within their deadline wait for a trigger state). Returns how many fired.
    pub fn fire_expired_deadlines<F>(
        &mut self,
        now: Instant,
        source: TriggerSource,
        dispatch: F,
    ) -> usize
    where
        F: FnMut(&mut Self, Fired<E>),
    {
        self.dispatch_each(move |t| t.pop_expired_deadline(now, source), dispatch)
    }

    /// The pull form of a trigger state: removes and returns the earliest event due at
    /// `now`, or `None` when nothing is (as tokio's `DelayQueue::poll_expired` does). Calling
    /// it until `None` fires the same events in the same order as [`SoftTimers::fire_due`].
    ///
    /// ```
    /// use softtimer::{SimClock, SoftTimers, Span, TriggerSource};
    /// let clock = SimClock::new(1_000_000);
    /// let mut timers = SoftTimers::new(clock.clone()).unwrap();
    /// timers.schedule_soft_event(Span::from_ticks(5), 'a').unwrap();
    /// timers.schedule_soft_event(Span::from_ticks(2), 'b').unwrap();
    /// clock.advance(10);
    /// let now = clock.now();
    /// let mut order = vec![];
    /// while let Some(fired) = timers.pop_due(now, TriggerSource::User) {
    ///     order.push(fired.event);
    /// }
    /// assert_eq!(order, ['b', 'a']);
    /// # use softtimer::Clock;
    /// ```
    #[inline]
    pub fn pop_due(&mut self, now: Instant, source: TriggerSource) -> Option<Fired<E>> {
        let rel_now = self.facility_time(now);
        if rel_now < self.next_check {
            return None;
        }
        self.floor = self.floor.max(rel_now);
        let (index, settled) = match self.due.pop_due_or_next(&mut self.nodes, rel_now) {
            Ok(popped) => popped,
            Err(next_check) => {
                self.settle(next_check, rel_now);
                return None;
            }
        };
        if self.nodes[index as usize].loc[DEADLINE] != NO_LOC {
            self.deadlines.remove(&mut self.nodes, index);
            self.deadline_count -= 1;
        }
        // The last due event: the pass is over once its handler has run (unless the handler
        // schedules into the past, which `insert` notes), so record what the next pop would
        // find now, while the wheel's lines are at hand.
        if let Some(next_check) = settled {
            self.settle(next_check, rel_now);
        }
        Some(self.fired(index, rel_now, now, source))
    }

    /// Nothing is due at `rel_now` any more: the next trigger state has work at `next_check`.
    #[inline]
    fn settle(&mut self, next_check: u64, rel_now: u64) {
        self.next_check = next_check;
        // Deadlines at or before `floor` belong to events that have fired (an event is due no
        // later than its deadline), so the deadline wheel may move up too: that keeps
        // `next_deadline` a look at one near slot.
        if self.deadline_count > 0 {
            self.deadlines.advance(&mut self.nodes, rel_now);
        }
    }

    /// Removes and returns the event with the earliest deadline at or before `now`, whether
    /// or not other events are due (the pull form of [`SoftTimers::fire_expired_deadlines`]).
    pub fn pop_expired_deadline(
        &mut self,
        now: Instant,
        source: TriggerSource,
    ) -> Option<Fired<E>> {
        let rel_now = self.facility_time(now);
        self.floor = self.floor.max(rel_now);
        let index = self.deadlines.pop_due(&mut self.nodes, rel_now)?;
        self.deadline_count -= 1;
        self.due.remove(&mut self.nodes, index);
        // The due wheel lost an event: its cached lower bound stays valid, but refresh it.
        self.next_check = self.due.next_check(&self.nodes);
        Some(self.fired(index, rel_now, now, source))
    }

    /// The earliest deadline among pending events that have one.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines
            .earliest(&self.nodes)
            .map(|t| self.instant(t))
    }

    /// Statistics, if they are on.
    pub fn stats(&self) -> Option<&TriggerStats> {
        self.stats.as_deref()
    }

    /// Turns statistics on (keeping what was counted) or off (dropping it).
    pub fn set_stats(&mut self, on: bool) {
        match (on, self.stats.is_some()) {
            (true, false) => {
                self.stats = Some(Box::new(TriggerStats::new(self.clock.resolution_hz())))
            }
            (false, true) => self.stats = None,
            _ => {}
        }
    }

    /// Clears the statistics (if they are on).
    pub fn reset_stats(&mut self) {
        if let Some(stats) = self.stats.as_deref_mut() {
            stats.reset();
        }
    }

    /// The clock time the facility counts from (its construction's reading): a runtime that
    /// keeps times relative to it, as the facility does, sees the facility's times as they are.
    pub fn epoch(&self) -> Instant {
        Instant::from_ticks(self.epoch)
    }

    /// Facility time (ticks since the epoch) to clock time.
    #[inline(always)]
    fn instant(&self, rel: u64) -> Instant {
        Instant::from_ticks(rel.wrapping_add(self.epoch))
    }

    /// The facility time of a clock value given to a pop. A value from before the facility
    /// was built (behind the latest pass on the circle, yet numerically beyond it once the
    /// epoch is taken off) would otherwise read as a time about 2^64 ticks ahead, at which
    /// every event is due: it is read as the facility's start, at which nothing is.
    #[inline(always)]
    fn facility_time(&self, now: Instant) -> u64 {
        let rel = now.ticks().wrapping_sub(self.epoch);
        if rel > self.floor && rel - self.floor > i64::MAX as u64 {
            0
        } else {
            rel
        }
    }

    #[inline(always)]
    fn due_time(&self, now: Instant, t: Span) -> Result<u64, ScheduleError> {
        // Clock times compare on a circle of 2^64 ticks: a due time half of it or more ahead
        // would read as one already passed (to the facility's next-due time and to every
        // runtime's decisions on it), so such a delay is refused, not taken.
        if t.ticks() >= MAX_DELAY_TICKS {
            return Err(ScheduleError::DelayOverflow { ticks: t.ticks() });
        }
        // A `now` from before the facility was built counts as its first tick, as it does
        // when firing.
        self.facility_time(now)
            .checked_add(t.ticks())
            .and_then(|x| x.checked_add(1))
            .filter(|&x| x != u64::MAX)
            .ok_or(ScheduleError::DelayOverflow { ticks: t.ticks() })
    }

    #[inline]
    fn insert(
        &mut self,
        due: u64,
        deadline: Option<u64>,
        event: E,
    ) -> Result<EventId, ScheduleError> {
        let due = due.max(self.floor + 1);
        let index = self.alloc(event)?;
        let node = &mut self.nodes[index as usize];
        node.links[DUE].when = due;
        let generation = node.generation;
        if let Some(deadline) = deadline {
            node.links[DEADLINE].when = deadline.max(due);
            self.deadlines.insert(&mut self.nodes, index);
            self.deadline_count += 1;
        }
        let start = self.due.insert(&mut self.nodes, index);
        self.next_check = self.next_check.min(start);
        self.scheduled_floor = self.scheduled_floor.min(due);
        Ok(EventId { index, generation })
    }

    #[inline]
    fn alloc(&mut self, event: E) -> Result<u32, ScheduleError> {
        if self.free != NIL {
            let index = self.free;
            let node = &mut self.nodes[index as usize];
            self.free = node.links[DUE].next;
            node.payload = Some(event);
            return Ok(index);
        }
        let index = u32::try_from(self.nodes.len())
            .ok()
            .filter(|&i| i != NIL)
            .ok_or(ScheduleError::TooManyEvents {
                limit: u64::from(NIL),
            })?;
        self.nodes.push(Node {
            links: [Link::EMPTY; 2],
            loc: [NO_LOC; 2],
            generation: 0,
            payload: Some(event),
        });
        Ok(index)
    }

    /// Removes a pending node from its wheels and frees its slot; returns the payload.
    #[inline]
    fn take(&mut self, index: u32) -> E {
        let i = index as usize;
        if self.nodes[i].loc[DUE] != NO_LOC {
            self.due.remove(&mut self.nodes, index);
        }
        if self.nodes[i].loc[DEADLINE] != NO_LOC {
            self.deadlines.remove(&mut self.nodes, index);
            self.deadline_count -= 1;
        }
        self.release(index)
    }

    #[inline]
    fn release(&mut self, index: u32) -> E {
        let node = &mut self.nodes[index as usize];
        node.generation = node.generation.wrapping_add(1);
        node.links[DUE].next = self.free;
        self.free = index;
        node.payload.take().expect("a pending node has a payload")
    }

    /// Frees a node just removed from the wheels and describes it as fired.
    #[inline]
    fn fired(&mut self, index: u32, rel_now: u64, now: Instant, source: TriggerSource) -> Fired<E> {
        let node = &self.nodes[index as usize];
        let id = EventId {
            index,
            generation: node.generation,
        };
        let due = node.links[DUE].when;
        let event = self.release(index);
        if let Some(stats) = self.stats.as_deref_mut() {
            stats.on_fire(Span::from_ticks(rel_now.saturating_sub(due)));
        }
        Fired {
            id,
            event,
            due: self.instant(due),
            now,
            source,
        }
    }

    #[inline(never)]
    fn run_due<F>(&mut self, now: Instant, source: TriggerSource, dispatch: F) -> usize
    where
        F: FnMut(&mut Self, Fired<E>),
    {
        self.dispatch_each(move |t| t.pop_due(now, source), dispatch)
    }

    /// Hands each event `pop` removes to `dispatch`, until `pop` finds none; how many.
    #[inline(always)]
    fn dispatch_each<P, F>(&mut self, mut pop: P, mut dispatch: F) -> usize
    where
        P: FnMut(&mut Self) -> Option<Fired<E>>,
        F: FnMut(&mut Self, Fired<E>),
    {
        let mut fired = 0;
        while let Some(event) = pop(self) {
            fired += 1;
            dispatch(self, event);
        }
        fired
    }
}

impl<E, C: Clock> std::fmt::Debug for SoftTimers<E, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftTimers")
            .field("pending", &self.pending())
            .field("measure_resolution", &self.measure_resolution())
            .field("interrupt_clock_resolution", &self.interrupt_hz)
            .field("stats", &self.stats.is_some())
            .finish_non_exhaustive()
    }
}
