//! The adaptive pacer of the soft-timers paper (Section 4.1): rate-based clocking with one
//! transmission event outstanding per flow.
//!
//! Scheduling a series of events at fixed intervals gives the right average rate, but soft
//! timers fire at the first trigger state after they are due, so several events can fall due
//! together after a long gap and leave as a burst. The paper schedules one event at a time
//! instead, and keeps the average rate since the start of the current *train* of packets:
//! normally the next event is one target interval later; while the train is behind its
//! target, the next event is one *burst* interval later, until it has caught up.
//!
//! [`FlowPacer`] is that rule for one flow, sans-IO: it is told when a packet left and how
//! large it was, and answers when the next may leave. It computes the train's schedule from
//! its total bytes, so per-packet rounding never adds up, and it never schedules the next
//! packet earlier than the burst rate allows or later than the target schedule requires:
//! `next = max(train_start + train_bytes / target, now + bytes / burst)`.
//! When the train is on schedule the first term is one target interval away; when it is
//! behind, the second term (the burst interval) wins until it catches up. This is the
//! paper's rule, with the switch back to the target interval made at the exact moment the
//! average catches up instead of one packet later.
//!
//! [`FlowSet`] paces many flows on one [`SoftTimers`] facility: each flow has at most one
//! event pending, one trigger state may send one packet for each of several due flows, and
//! rates may change at any time (a congestion controller changes them on every ACK).
//!
//! ```
//! use softtimer::{Clock, SimClock, SoftTimers, TriggerSource};
//! use softtimer_net::Rate;
//! use softtimer_net::pacer::{FlowSet, PacerConfig};
//!
//! let clock = SimClock::new(1_000_000_000); // 1 tick = 1 ns
//! let mut timers = SoftTimers::new(clock.clone()).unwrap();
//! let mut flows = FlowSet::new(clock.resolution_hz());
//! // 1500-byte packets at 120 Mbit/s: one every 100 µs; bursts at up to 1.2 Gbit/s.
//! let config = PacerConfig::new("120M".parse().unwrap(), "1.2G".parse().unwrap()).unwrap();
//! let flow = flows.add(config);
//! flows.wake(&mut timers, flow, clock.now()).unwrap();
//!
//! let mut sent = 0;
//! for _ in 0..10_000 {
//!     clock.advance(1_000); // a trigger state every µs
//!     let now = clock.now();
//!     flows.on_trigger(&mut timers, now, TriggerSource::User, |_flow| {
//!         sent += 1;
//!         Some(1500) // a packet of 1500 bytes left
//!     });
//! }
//! assert_eq!(sent, 100); // 10 ms at one packet per 100 µs
//! ```

use softtimer::{Clock, EventId, Instant, ScheduleError, SoftTimers, TriggerSource};

use crate::Rate;

/// Why a pacer configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacerError {
    /// The burst rate is below the target rate, so the flow could never catch up.
    #[error("the burst rate {burst} is below the target rate {target}")]
    BurstBelowTarget {
        /// The target rate.
        target: Rate,
        /// The burst rate asked for.
        burst: Rate,
    },
    /// No flow has this id.
    #[error("no flow {0}")]
    UnknownFlow(usize),
    /// The facility refused the flow's event.
    #[error("scheduling the flow's next transmission: {0}")]
    Schedule(#[from] ScheduleError),
}

/// A flow's target and maximal burst rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacerConfig {
    target: Rate,
    burst: Rate,
}

impl PacerConfig {
    /// Paces at `target`, catching up at no more than `burst` (`burst ≥ target`).
    pub fn new(target: Rate, burst: Rate) -> Result<PacerConfig, PacerError> {
        if burst < target {
            return Err(PacerError::BurstBelowTarget { target, burst });
        }
        Ok(PacerConfig { target, burst })
    }

    /// Paces at `target` and never faster: the "timer-driven pacing at the target interval"
    /// the paper compares with.
    pub fn fixed(target: Rate) -> PacerConfig {
        PacerConfig {
            target,
            burst: target,
        }
    }

    /// The target rate.
    pub fn target(&self) -> Rate {
        self.target
    }

    /// The maximal burst rate.
    pub fn burst(&self) -> Rate {
        self.burst
    }
}

/// One flow's pacing state (sans-IO): when may its next packet leave.
///
/// ```
/// use softtimer::{Instant, Span};
/// use softtimer_net::pacer::{FlowPacer, PacerConfig};
///
/// let hz = 1_000_000; // 1 tick = 1 µs
/// let config = PacerConfig::new("12M".parse().unwrap(), "24M".parse().unwrap()).unwrap();
/// let mut pacer = FlowPacer::new(config, hz);
/// let start = Instant::from_ticks(0);
/// // 1500 bytes at 12 Mbit/s: one packet per ms.
/// assert_eq!(pacer.on_sent(start, 1500), start + Span::from_ticks(1000));
/// // The event fired 600 µs late: the train is behind, so the next one is a burst
/// // interval (500 µs) away instead of the 400 µs the schedule would want.
/// let late = start + Span::from_ticks(1600);
/// assert_eq!(pacer.on_sent(late, 1500), late + Span::from_ticks(500));
/// ```
#[derive(Clone, Debug)]
pub struct FlowPacer {
    config: PacerConfig,
    hz: u64,
    /// When the current train started, if one is going.
    train_start: Option<Instant>,
    /// Bytes sent since the train started.
    train_bytes: u64,
    last_sent: Option<Instant>,
    last_bytes: u64,
}

impl FlowPacer {
    /// A flow paced by `config` on a clock of `hz` ticks per second.
    pub fn new(config: PacerConfig, hz: u64) -> FlowPacer {
        FlowPacer {
            config,
            hz,
            train_start: None,
            train_bytes: 0,
            last_sent: None,
            last_bytes: 0,
        }
    }

    /// The rates in force.
    pub fn config(&self) -> PacerConfig {
        self.config
    }

    /// A packet of `bytes` left at `now`; returns the earliest time the next may leave.
    pub fn on_sent(&mut self, now: Instant, bytes: u64) -> Instant {
        let start = *self.train_start.get_or_insert(now);
        self.train_bytes = self.train_bytes.saturating_add(bytes);
        self.last_sent = Some(now);
        self.last_bytes = bytes;
        let on_schedule = start + self.config.target.span_for_bytes(self.train_bytes, self.hz);
        let burst = now + self.config.burst.span_for_bytes(bytes, self.hz);
        if on_schedule.is_after(burst) {
            on_schedule
        } else {
            burst
        }
    }

    /// When the next packet may leave, if one has been sent in the current train.
    pub fn next_send(&self) -> Option<Instant> {
        let start = self.train_start?;
        let last = self.last_sent?;
        let on_schedule = start + self.config.target.span_for_bytes(self.train_bytes, self.hz);
        let burst = last + self.config.burst.span_for_bytes(self.last_bytes, self.hz);
        Some(if on_schedule.is_after(burst) {
            on_schedule
        } else {
            burst
        })
    }

    /// Whether the train is behind its target schedule at `now` (it would send at the burst
    /// rate).
    pub fn is_behind(&self, now: Instant) -> bool {
        match self.train_start {
            Some(start) => {
                now.is_after(start + self.config.target.span_for_bytes(self.train_bytes, self.hz))
            }
            None => false,
        }
    }

    /// The flow had nothing to send: its train ends, and the next packet starts a new one (so
    /// idle time is not "caught up" as a burst).
    pub fn end_train(&mut self) {
        self.train_start = None;
        self.train_bytes = 0;
    }

    /// New rates, in force from the next packet: the train restarts at the last packet sent,
    /// so the next one leaves one new target interval after it (or at once if that has
    /// passed).
    pub fn set_config(&mut self, config: PacerConfig) {
        self.config = config;
        match self.last_sent {
            Some(last) if self.train_start.is_some() => {
                self.train_start = Some(last);
                self.train_bytes = self.last_bytes;
            }
            _ => self.end_train(),
        }
    }

    /// The average rate of the current train over `[train start, now]`, if it has sent.
    pub fn train_rate(&self, now: Instant) -> Option<Rate> {
        let start = self.train_start?;
        Rate::measured(
            self.train_bytes,
            now.saturating_since(start).ticks(),
            self.hz,
        )
    }
}

/// A flow's id in a [`FlowSet`].
pub type FlowId = usize;

struct FlowSlot {
    pacer: FlowPacer,
    /// The flow's one pending transmission event.
    event: Option<EventId>,
}

/// Many paced flows on one soft-timer facility, each with at most one transmission event
/// pending. The facility's payload is the flow's id.
///
/// The caller owns the facility (it may be shared with other users of `FlowId` events) and
/// calls [`FlowSet::on_trigger`] at its trigger states, or hands fired events to
/// [`FlowSet::on_fired`] from its own firing loop.
pub struct FlowSet {
    hz: u64,
    flows: Vec<FlowSlot>,
    /// Flows found due in one trigger pass (kept to avoid allocating per pass).
    due: Vec<FlowId>,
}

impl FlowSet {
    /// An empty set on a clock of `hz` ticks per second.
    pub fn new(hz: u64) -> FlowSet {
        FlowSet {
            hz,
            flows: Vec::new(),
            due: Vec::new(),
        }
    }

    /// Adds a flow (idle: call [`FlowSet::wake`] when it has data).
    pub fn add(&mut self, config: PacerConfig) -> FlowId {
        self.flows.push(FlowSlot {
            pacer: FlowPacer::new(config, self.hz),
            event: None,
        });
        self.flows.len() - 1
    }

    /// How many flows.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// Whether there are no flows.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// The pacer of `flow`.
    pub fn pacer(&self, flow: FlowId) -> Option<&FlowPacer> {
        self.flows.get(flow).map(|f| &f.pacer)
    }

    fn slot_mut(&mut self, flow: FlowId) -> Result<&mut FlowSlot, PacerError> {
        self.flows
            .get_mut(flow)
            .ok_or(PacerError::UnknownFlow(flow))
    }

    /// Whether `flow` has a transmission event pending.
    pub fn is_scheduled(&self, flow: FlowId) -> bool {
        self.flows.get(flow).is_some_and(|f| f.event.is_some())
    }

    /// `flow` has data to send: schedules its transmission event, at its next send time or
    /// at once, unless one is already pending.
    pub fn wake<E: From<FlowId>, C: Clock>(
        &mut self,
        timers: &mut SoftTimers<E, C>,
        flow: FlowId,
        now: Instant,
    ) -> Result<(), PacerError> {
        let slot = self.slot_mut(flow)?;
        if slot.event.is_some() {
            return Ok(());
        }
        let at = match slot.pacer.next_send() {
            Some(t) if t.is_after(now) => t,
            _ => now,
        };
        slot.event = Some(timers.schedule_at(at, E::from(flow))?);
        Ok(())
    }

    /// New rates for `flow`, in force from its next packet. A pending event is moved to the
    /// new schedule.
    pub fn set_config<E: From<FlowId>, C: Clock>(
        &mut self,
        timers: &mut SoftTimers<E, C>,
        flow: FlowId,
        config: PacerConfig,
    ) -> Result<(), PacerError> {
        let slot = self.slot_mut(flow)?;
        slot.pacer.set_config(config);
        if let Some(id) = slot.event.take() {
            timers.cancel(id);
            let at = slot
                .pacer
                .next_send()
                .unwrap_or_else(|| timers.measure_time());
            slot.event = Some(timers.schedule_at(at, E::from(flow))?);
        }
        Ok(())
    }

    /// A transmission event of `flow` fired at `now`: `send` sends at most one packet of the
    /// flow and returns its size, or `None` when the flow has nothing to send (its train
    /// ends and it waits for [`FlowSet::wake`]). Schedules the flow's next event.
    pub fn on_fired<E: From<FlowId>, C: Clock>(
        &mut self,
        timers: &mut SoftTimers<E, C>,
        flow: FlowId,
        now: Instant,
        send: impl FnOnce(FlowId) -> Option<u64>,
    ) -> Result<bool, PacerError> {
        let slot = self.slot_mut(flow)?;
        slot.event = None;
        match send(flow) {
            Some(bytes) => {
                let next = slot.pacer.on_sent(now, bytes);
                slot.event = Some(timers.schedule_at(next, E::from(flow))?);
                Ok(true)
            }
            None => {
                slot.pacer.end_train();
                Ok(false)
            }
        }
    }

    /// A trigger state at `now`: fires every due flow (one packet each) through `send`.
    /// Returns how many packets left. Events whose payload is not a flow of this set are
    /// dropped, so give the set a facility of its own or use [`FlowSet::on_fired`].
    pub fn on_trigger<C: Clock>(
        &mut self,
        timers: &mut SoftTimers<FlowId, C>,
        now: Instant,
        source: TriggerSource,
        mut send: impl FnMut(FlowId) -> Option<u64>,
    ) -> usize {
        // Drain first, then send: a flow re-armed at `now` waits for the next trigger state
        // instead of looping in this one.
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        while let Some(fired) = timers.pop_due(now, source) {
            due.push(fired.event);
        }
        let mut sent = 0;
        for &flow in &due {
            if let Ok(true) = self.on_fired(timers, flow, now, &mut send) {
                sent += 1;
            }
        }
        self.due = due;
        sent
    }
}
