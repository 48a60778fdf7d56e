//! Livelock-free receive, after Mogul and Ramakrishnan (*Eliminating Receive Livelock in an
//! Interrupt-driven Kernel*, Section 5.4): the scheduling policies of a receive path that
//! keeps forwarding at its maximum loss-free rate however hard it is flooded. All sans-IO:
//! each takes `now` (and what the I/O layer saw) and answers what to do.
//!
//! | technique | here |
//! | --- | --- |
//! | interrupts only start polling; while polling, the source is not re-armed | [`RoundRobin::mark_ready`] starts service; [`Serviced::Rearm`] says when to arm readiness again |
//! | round-robin over every source, with a per-callback packet quota | [`RoundRobin`], [`Quota`] |
//! | no intermediate queue: a packet taken is processed to completion; excess is dropped early, in the kernel's socket buffer | the I/O layer's contract (it takes at most the quota, and processes what it took) |
//! | queue-state feedback for a slower consumer: stop input at a high watermark, resume at a low one, or after a timeout | [`QueueFeedback`] |
//! | a CPU budget: stop input once packet work used its share of a period | [`CpuBudget`] |
//!
//! ```
//! use softtimer::{Instant, Span};
//! use softtimer_net::livelock::{Quota, RoundRobin, Serviced};
//!
//! // Two sockets; at most 10 packets per turn.
//! let mut rr = RoundRobin::new(2, Quota::packets(10).unwrap());
//! rr.mark_ready(0); // socket 0 became readable (its readiness is now disarmed)
//! rr.mark_ready(1);
//! let turn = rr.next_turn().unwrap();
//! assert_eq!((turn.source, turn.quota), (0, 10));
//! // Socket 0 had more than its quota: it goes to the back of the line.
//! assert_eq!(rr.serviced(0, 10), Serviced::Again);
//! assert_eq!(rr.next_turn().unwrap().source, 1);
//! // Socket 1 ran dry: arm its readiness again.
//! assert_eq!(rr.serviced(1, 3), Serviced::Rearm);
//! assert_eq!(rr.next_turn().unwrap().source, 0);
//! ```

use std::collections::VecDeque;

use softtimer::{Instant, Span};

/// Why a livelock control was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LivelockError {
    /// A packet quota of 0.
    #[error(
        "a quota of 0 packets per turn would never take a packet (want 1 or more, or unlimited)"
    )]
    ZeroQuota,
    /// Watermarks out of order or out of range.
    #[error("watermarks low {low} % and high {high} %: want 0 <= low < high <= 100")]
    Watermarks {
        /// The low watermark, % of capacity.
        low: u32,
        /// The high watermark, % of capacity.
        high: u32,
    },
    /// A queue of no capacity.
    #[error("a feedback queue needs a capacity of at least 1 packet")]
    ZeroCapacity,
    /// A CPU share outside 1–100 %.
    #[error("a CPU budget of {0} %: want 1 ..= 100")]
    Share(u32),
    /// A zero period or timeout.
    #[error("a {0} of zero length")]
    ZeroSpan(&'static str),
}

/// How many packets one source may handle per turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quota {
    /// At most this many (at least 1).
    Packets(u32),
    /// As many as are waiting: the configuration that livelocks (the paper's Fig. 6-3).
    Unlimited,
}

impl Quota {
    /// At most `n` packets per turn; `n` = 0 is refused.
    pub fn packets(n: u32) -> Result<Quota, LivelockError> {
        if n == 0 {
            Err(LivelockError::ZeroQuota)
        } else {
            Ok(Quota::Packets(n))
        }
    }

    /// The most one turn may take (`u32::MAX` for unlimited).
    pub fn limit(self) -> u32 {
        match self {
            Quota::Packets(n) => n,
            Quota::Unlimited => u32::MAX,
        }
    }
}

/// One source's turn: take at most `quota` packets from `source`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    /// The source (an index the caller gave its sockets).
    pub source: usize,
    /// The most packets to take.
    pub quota: u32,
}

/// What follows a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serviced {
    /// The source used its whole quota and may have more: it waits for its next turn,
    /// behind every other ready source.
    Again,
    /// The source ran dry: arm its readiness (the "interrupt") again.
    Rearm,
}

/// Round-robin service of ready sources, with a packet quota per turn.
#[derive(Clone, Debug)]
pub struct RoundRobin {
    quota: Quota,
    queue: VecDeque<usize>,
    queued: Vec<bool>,
}

impl RoundRobin {
    /// `sources` sources (numbered from 0), none ready.
    pub fn new(sources: usize, quota: Quota) -> RoundRobin {
        RoundRobin {
            quota,
            queue: VecDeque::with_capacity(sources),
            queued: vec![false; sources],
        }
    }

    /// Source `source` signalled readiness (its readiness is now disarmed until
    /// [`Serviced::Rearm`]); it joins the back of the line unless it is already in it.
    /// Unknown sources are ignored.
    pub fn mark_ready(&mut self, source: usize) {
        if let Some(queued) = self.queued.get_mut(source)
            && !*queued
        {
            *queued = true;
            self.queue.push_back(source);
        }
    }

    /// The next turn, `None` when no source is ready.
    pub fn next_turn(&self) -> Option<Turn> {
        let source = *self.queue.front()?;
        Some(Turn {
            source,
            quota: self.quota.limit(),
        })
    }

    /// The turn of `source` took `took` packets. A source that filled its quota goes to the
    /// back of the line; one that took less ran dry and leaves it.
    pub fn serviced(&mut self, source: usize, took: usize) -> Serviced {
        if let Some(i) = self.queue.iter().position(|&s| s == source) {
            self.queue.remove(i);
        }
        if took as u64 >= u64::from(self.quota.limit()) {
            self.queue.push_back(source);
            Serviced::Again
        } else {
            if let Some(q) = self.queued.get_mut(source) {
                *q = false;
            }
            Serviced::Rearm
        }
    }

    /// Whether any source waits for a turn.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty()
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }
}

/// Queue-state feedback (Section 6.6.1): where packets must wait for a slower consumer, stop
/// taking input when its queue reaches the high watermark and resume at the low one, or
/// after a timeout in case the consumer hangs.
///
/// ```
/// use softtimer::{Instant, Span};
/// use softtimer_net::livelock::QueueFeedback;
///
/// // The paper's screening queue: 32 packets, 75 % / 25 %, one tick (1 ms; 1 tick = 1 µs here).
/// let mut fb = QueueFeedback::new(32, 75, 25, Span::from_ticks(1000)).unwrap();
/// let t = Instant::from_ticks(0);
/// assert!(fb.input_allowed(23, t));
/// assert!(!fb.input_allowed(24, t)); // 75 % of 32
/// assert!(!fb.input_allowed(9, t)); // still above 25 %
/// assert!(fb.input_allowed(8, t)); // down to 25 %: resume
/// ```
#[derive(Clone, Debug)]
pub struct QueueFeedback {
    high: usize,
    low: usize,
    timeout: Span,
    inhibited_since: Option<Instant>,
    inhibitions: u64,
    timeouts: u64,
}

impl QueueFeedback {
    /// A queue of `capacity` packets, inhibiting input at `high_pct` % full and resuming at
    /// `low_pct` %, or `timeout` after inhibiting.
    pub fn new(
        capacity: usize,
        high_pct: u32,
        low_pct: u32,
        timeout: Span,
    ) -> Result<QueueFeedback, LivelockError> {
        if capacity == 0 {
            return Err(LivelockError::ZeroCapacity);
        }
        if low_pct >= high_pct || high_pct > 100 {
            return Err(LivelockError::Watermarks {
                low: low_pct,
                high: high_pct,
            });
        }
        if timeout == Span::from_ticks(0) {
            return Err(LivelockError::ZeroSpan("feedback timeout"));
        }
        let mark = |pct: u32| (capacity * pct as usize).div_ceil(100);
        Ok(QueueFeedback {
            high: mark(high_pct).max(1),
            low: mark(low_pct),
            timeout,
            inhibited_since: None,
            inhibitions: 0,
            timeouts: 0,
        })
    }

    /// How many more packets may go into a queue `len` long before it reaches the high
    /// watermark: a turn takes at most this many, so that the watermark holds per packet,
    /// not per turn.
    ///
    /// ```
    /// use softtimer::Span;
    /// use softtimer_net::livelock::QueueFeedback;
    ///
    /// let fb = QueueFeedback::new(32, 75, 25, Span::from_ticks(1_000)).unwrap();
    /// assert_eq!(fb.room(20), 4); // the high watermark is 24 packets
    /// assert_eq!(fb.room(30), 0);
    /// ```
    pub fn room(&self, len: usize) -> usize {
        self.high.saturating_sub(len)
    }

    /// With the queue `len` long at `now`: may input be taken?
    pub fn input_allowed(&mut self, len: usize, now: Instant) -> bool {
        match self.inhibited_since {
            Some(since) => {
                if len <= self.low {
                    self.inhibited_since = None;
                    true
                } else if now.saturating_since(since) >= self.timeout {
                    // The consumer may be hung: let input through for a moment; a queue
                    // still full inhibits it again at the next look, with a new timeout.
                    self.inhibited_since = None;
                    self.timeouts += 1;
                    true
                } else {
                    false
                }
            }
            None if len >= self.high => {
                self.inhibited_since = Some(now);
                self.inhibitions += 1;
                false
            }
            None => true,
        }
    }

    /// When input is inhibited: the time the timeout re-enables it.
    pub fn resume_by(&self) -> Option<Instant> {
        self.inhibited_since.map(|since| since + self.timeout)
    }

    /// How many times input was inhibited, and how many of those ended by the timeout.
    pub fn counts(&self) -> (u64, u64) {
        (self.inhibitions, self.timeouts)
    }
}

/// The CPU budget of Section 7: the time packet work took in the current period is summed, and
/// input stops once it reaches the configured share, until the period ends. Going idle clears
/// the sum.
///
/// ```
/// use softtimer::{Instant, Span};
/// use softtimer_net::livelock::CpuBudget;
///
/// // 50 % of a 10 ms period (1 tick = 1 µs).
/// let mut budget = CpuBudget::new(50, Span::from_ticks(10_000)).unwrap();
/// let t = Instant::from_ticks(0);
/// assert!(budget.input_allowed(t));
/// budget.charge(t, Span::from_ticks(5_000));
/// assert!(!budget.input_allowed(t + Span::from_ticks(6_000)));
/// // The next period starts afresh.
/// assert!(budget.input_allowed(t + Span::from_ticks(10_000)));
/// ```
#[derive(Clone, Debug)]
pub struct CpuBudget {
    period: Span,
    allowed: Span,
    start: Option<Instant>,
    used: Span,
    inhibited_periods: u64,
}

impl CpuBudget {
    /// Packet work may use `share_pct` % (1 ..= 100) of each `period` (the paper: 10 ms).
    pub fn new(share_pct: u32, period: Span) -> Result<CpuBudget, LivelockError> {
        if !(1..=100).contains(&share_pct) {
            return Err(LivelockError::Share(share_pct));
        }
        if period == Span::from_ticks(0) {
            return Err(LivelockError::ZeroSpan("CPU budget period"));
        }
        let allowed = (u128::from(period.ticks()) * u128::from(share_pct) / 100) as u64;
        Ok(CpuBudget {
            period,
            allowed: Span::from_ticks(allowed.max(1)),
            start: None,
            used: Span::from_ticks(0),
            inhibited_periods: 0,
        })
    }

    fn roll(&mut self, now: Instant) {
        match self.start {
            Some(start) if now.saturating_since(start) < self.period => {}
            Some(start) => {
                // Whole periods since `start`: the new one starts on the period grid.
                let periods = now.saturating_since(start).ticks() / self.period.ticks();
                self.start = Some(start + Span::from_ticks(periods * self.period.ticks()));
                self.used = Span::from_ticks(0);
            }
            None => {
                self.start = Some(now);
                self.used = Span::from_ticks(0);
            }
        }
    }

    /// Packet work took `spent`, ending at `now`.
    pub fn charge(&mut self, now: Instant, spent: Span) {
        self.roll(now);
        let was_within = self.used < self.allowed;
        self.used = Span::from_ticks(self.used.ticks().saturating_add(spent.ticks()));
        if was_within && self.used >= self.allowed {
            self.inhibited_periods += 1;
        }
    }

    /// May packet input run at `now`?
    pub fn input_allowed(&mut self, now: Instant) -> bool {
        self.roll(now);
        self.used < self.allowed
    }

    /// When the current period ends (input resumes then if it is inhibited).
    pub fn period_end(&self) -> Option<Instant> {
        self.start.map(|s| s + self.period)
    }

    /// The loop went idle: clear the running total, as the paper's idle thread does.
    pub fn on_idle(&mut self) {
        self.used = Span::from_ticks(0);
    }

    /// Periods in which the budget ran out.
    pub fn inhibited_periods(&self) -> u64 {
        self.inhibited_periods
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_flooded_source_does_not_starve_another() {
        let mut rr = RoundRobin::new(2, Quota::packets(5).unwrap());
        // Source 0 is flooded: it always fills its quota. Source 1 has 7 packets.
        let mut waiting = [usize::MAX, 7];
        rr.mark_ready(0);
        rr.mark_ready(1);
        let mut taken = [0usize; 2];
        for _ in 0..6 {
            let turn = rr.next_turn().expect("a ready source");
            let took = waiting[turn.source].min(turn.quota as usize);
            waiting[turn.source] = waiting[turn.source].saturating_sub(took);
            taken[turn.source] += took;
            rr.serviced(turn.source, took);
        }
        assert_eq!(
            taken[1], 7,
            "source 1 got all its packets despite the flood"
        );
        assert_eq!(taken[0], 20);
        // Source 1 ran dry and left the line; marking it again brings it back once.
        rr.mark_ready(1);
        rr.mark_ready(1);
        assert_eq!(rr.queue.len(), 2);
    }

    #[test]
    fn unlimited_quota_serves_one_source_until_dry() {
        let mut rr = RoundRobin::new(2, Quota::Unlimited);
        rr.mark_ready(0);
        rr.mark_ready(1);
        let turn = rr.next_turn().unwrap();
        assert_eq!(turn.quota, u32::MAX);
        assert_eq!(rr.serviced(0, 100_000), Serviced::Rearm);
        assert_eq!(rr.next_turn().unwrap().source, 1);
        assert!(matches!(Quota::packets(0), Err(LivelockError::ZeroQuota)));
        rr.mark_ready(7); // unknown: ignored
        assert_eq!(rr.queue.len(), 1);
    }

    #[test]
    fn feedback_stops_at_the_high_mark_and_resumes_at_the_low_one_or_on_timeout() {
        let tick = Span::from_ticks(1_000);
        let mut fb = QueueFeedback::new(32, 75, 25, tick).unwrap();
        let t0 = Instant::from_ticks(0);
        // Filling: allowed up to 23, inhibited at 24.
        for len in 0..24 {
            assert!(fb.input_allowed(len, t0), "len {len}");
        }
        assert!(!fb.input_allowed(24, t0));
        // Draining: inhibited until 8 (25 %).
        for len in (9..=24).rev() {
            assert!(
                !fb.input_allowed(len, t0 + Span::from_ticks(10)),
                "len {len}"
            );
        }
        assert!(fb.input_allowed(8, t0 + Span::from_ticks(20)));
        assert_eq!(fb.counts(), (1, 0));
        // The consumer hangs with the queue full: input resumes after one tick.
        let t1 = t0 + Span::from_ticks(100);
        assert!(!fb.input_allowed(30, t1));
        assert_eq!(fb.resume_by(), Some(t1 + tick));
        assert!(!fb.input_allowed(30, t1 + Span::from_ticks(999)));
        assert!(fb.input_allowed(30, t1 + tick));
        // Still full: inhibited again, with a fresh timeout.
        assert!(!fb.input_allowed(30, t1 + tick));
        assert_eq!(fb.counts(), (3, 1));
    }

    #[test]
    fn bad_feedback_and_budgets_are_refused() {
        let tick = Span::from_ticks(1);
        assert!(matches!(
            QueueFeedback::new(32, 25, 75, tick),
            Err(LivelockError::Watermarks { .. })
        ));
        assert!(QueueFeedback::new(32, 50, 50, tick).is_err());
        assert!(QueueFeedback::new(32, 101, 50, tick).is_err());
        assert!(QueueFeedback::new(0, 75, 25, tick).is_err());
        assert!(QueueFeedback::new(32, 75, 25, Span::from_ticks(0)).is_err());
        for share in [0, 101, 1000] {
            assert_eq!(
                CpuBudget::new(share, tick).unwrap_err(),
                LivelockError::Share(share)
            );
        }
        assert!(CpuBudget::new(50, Span::from_ticks(0)).is_err());
    }

    /// A flood: every moment input is allowed, a batch of packet work runs; otherwise other
    /// work does. Returns packet work's share of the time.
    fn flood_share(share: u32, batch_cost: u64, periods: u64) -> f64 {
        let period = Span::from_ticks(10_000_000); // 10 ms at 1 ns a tick
        let mut budget = CpuBudget::new(share, period).unwrap();
        let mut now = Instant::from_ticks(0);
        let end = period.ticks() * periods;
        let (mut packet, mut other) = (0u64, 0u64);
        while now.ticks() < end {
            if budget.input_allowed(now) {
                now += Span::from_ticks(batch_cost);
                budget.charge(now, Span::from_ticks(batch_cost));
                packet += batch_cost;
            } else {
                now += Span::from_ticks(batch_cost);
                other += batch_cost;
            }
        }
        packet as f64 / (packet + other) as f64
    }

    #[test]
    fn a_budget_bounds_packet_work_under_flood() {
        for share in [25, 50, 75, 100] {
            let got = flood_share(share, 37_000, 200); // 37 µs batches
            let want = f64::from(share) / 100.0;
            assert!(
                (got - want).abs() <= 0.10 * want.max(0.1),
                "{share} %: {got}"
            );
        }
        let got = flood_share(50, 37_000, 200);
        assert!((0.45..=0.55).contains(&got), "50 %: {got}");
    }

    #[test]
    fn going_idle_clears_the_running_total() {
        let mut budget = CpuBudget::new(10, Span::from_ticks(1_000)).unwrap();
        let t = Instant::from_ticks(0);
        budget.charge(t, Span::from_ticks(100));
        assert!(!budget.input_allowed(t));
        budget.on_idle();
        assert!(budget.input_allowed(t));
        assert_eq!(budget.inhibited_periods(), 1);
        assert_eq!(budget.period_end(), Some(t + Span::from_ticks(1_000)));
    }

    proptest! {
        /// Round-robin is work-conserving and fair: with every source always full, each gets
        /// a turn within `sources` turns of its last.
        #[test]
        fn round_robin_is_fair(sources in 1usize..20, quota in 1u32..50, turns in 1usize..400) {
            let mut rr = RoundRobin::new(sources, Quota::packets(quota).unwrap());
            for s in 0..sources {
                rr.mark_ready(s);
            }
            let mut last = vec![0usize; sources];
            for turn in 1..=turns {
                let t = rr.next_turn().unwrap();
                prop_assert!(turn - last[t.source] <= sources);
                last[t.source] = turn;
                prop_assert_eq!(rr.serviced(t.source, quota as usize), Serviced::Again);
            }
        }
    }
}
