//! Soft-timer network polling (Section 4.2 of the soft-timers paper): receive by polling from a
//! soft-timer event instead of waking on every readiness event, at an interval chosen so that
//! each poll finds, on average, a configured number of packets (the *aggregation quota*).
//!
//! [`PollController`] is the policy, sans-IO. It has two modes:
//!
//! - **interrupt**: the socket's readiness is armed in epoll, and a readiness event (the
//!   "interrupt") starts polling;
//! - **polling**: readiness is not armed; a soft-timer event polls the socket at the current
//!   interval, and the controller sets the next interval from the arrival rate it has seen so
//!   that a poll finds `quota` packets on average.
//!
//! Polling stops, and readiness is armed again, when the loop goes idle
//! ([`PollController::on_idle`]): as in the paper, an idle system takes the next packet by
//! interrupt, so polling never delays a packet the loop had time for. On a busy loop, polls
//! that find nothing lower the rate estimate and so stretch the interval up to its maximum;
//! a source still silent there for a few polls in a row ([`PollerConfig::with_empty_polls`])
//! goes back to readiness too.
//!
//! The arrival rate is a moving average (gain 1/8) of `found / time since the last poll` over
//! every poll, empty ones included: each sample is an unbiased estimate of the rate, so the
//! average settles on it and the interval on `quota / rate`.
//!
//! ```
//! use softtimer::{Instant, Span};
//! use softtimer_net::poll::{PollAction, PollController, PollerConfig};
//!
//! let hz = 1_000_000; // 1 tick = 1 µs
//! let mut poller = PollController::new(PollerConfig::new(5).unwrap(), hz);
//! let t0 = Instant::from_ticks(0);
//! // The socket became readable: start polling (readiness stays disarmed).
//! assert_eq!(poller.on_readiness(t0), PollAction::PollAt(t0));
//! // Packets arrive every 10 µs; each poll takes all that came since the last one.
//! let arrived_by = |t: Instant| t.ticks() / 10;
//! let mut taken = arrived_by(t0);
//! let mut next = poller.on_poll(t0, 1);
//! for _ in 0..200 {
//!     let PollAction::PollAt(at) = next else { panic!("still polling") };
//!     let found = arrived_by(at) - taken;
//!     taken += found;
//!     next = poller.on_poll(at, found as usize);
//! }
//! // The interval settles where a poll finds 5 packets: 50 µs.
//! assert!((poller.interval().ticks() as i64 - 50).abs() <= 2, "{:?}", poller.interval());
//! ```

use softtimer::{Instant, Span};

/// Why a poller configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PollerError {
    /// The aggregation quota is 0.
    #[error("an aggregation quota of 0 packets per poll would never poll (want 1 or more)")]
    ZeroQuota,
    /// The interval bounds are out of order or zero.
    #[error("poll interval bounds {min_ns} ns ..= {max_ns} ns: want 0 < min <= max")]
    Bounds {
        /// The shortest interval, ns.
        min_ns: u64,
        /// The longest interval, ns.
        max_ns: u64,
    },
    /// Zero empty polls before re-arming.
    #[error("re-arming after 0 empty polls would never poll (want 1 or more)")]
    ZeroEmptyPolls,
}

/// How a [`PollController`] polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollerConfig {
    quota: u32,
    min_interval_ns: u64,
    max_interval_ns: u64,
    empty_polls: u32,
}

impl PollerConfig {
    /// Polls that find `quota` packets on average (the paper used 1, 2, 5, 10 and 15), with
    /// intervals between 1 µs and 1 ms, back to interrupts after 2 empty polls in a row at the
    /// longest interval (or when the loop goes idle).
    pub fn new(quota: u32) -> Result<PollerConfig, PollerError> {
        if quota == 0 {
            return Err(PollerError::ZeroQuota);
        }
        Ok(PollerConfig {
            quota,
            min_interval_ns: 1_000,
            max_interval_ns: 1_000_000,
            empty_polls: 2,
        })
    }

    /// The shortest and longest poll interval, ns.
    pub fn with_interval_bounds(
        self,
        min_ns: u64,
        max_ns: u64,
    ) -> Result<PollerConfig, PollerError> {
        if min_ns == 0 || min_ns > max_ns {
            return Err(PollerError::Bounds { min_ns, max_ns });
        }
        Ok(PollerConfig {
            min_interval_ns: min_ns,
            max_interval_ns: max_ns,
            ..self
        })
    }

    /// How many polls in a row at the longest interval must find nothing before readiness is
    /// armed again.
    pub fn with_empty_polls(self, empty_polls: u32) -> Result<PollerConfig, PollerError> {
        if empty_polls == 0 {
            return Err(PollerError::ZeroEmptyPolls);
        }
        Ok(PollerConfig {
            empty_polls,
            ..self
        })
    }

    /// The aggregation quota: packets a poll should find on average.
    pub fn quota(&self) -> u32 {
        self.quota
    }
}

/// What the I/O layer does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollAction {
    /// Poll the socket at this time (a soft-timer event); keep readiness disarmed.
    PollAt(Instant),
    /// Stop polling and arm readiness (epoll) again: the next packet comes by "interrupt".
    ArmReadiness,
}

/// The poll-interval controller of soft-timer network polling (sans-IO).
#[derive(Clone, Debug)]
pub struct PollController {
    config: PollerConfig,
    hz: u64,
    polling: bool,
    interval: Span,
    /// Smoothed packets per tick, ×2^32 (fixed point: no float drift between runs).
    rate_fp: u64,
    rate_known: bool,
    last_poll: Option<Instant>,
    empty_in_a_row: u32,
    polls: u64,
    packets: u64,
}

/// The weight of a new sample in the smoothed arrival rate: 1/8, as TCP's SRTT.
const GAIN_SHIFT: u32 = 3;

impl PollController {
    /// A controller in interrupt mode, on a clock of `hz` ticks per second.
    pub fn new(config: PollerConfig, hz: u64) -> PollController {
        let min = Span::from_duration(std::time::Duration::from_nanos(config.min_interval_ns), hz)
            .max(Span::from_ticks(1));
        PollController {
            config,
            hz,
            polling: false,
            interval: min,
            rate_fp: 0,
            rate_known: false,
            last_poll: None,
            empty_in_a_row: 0,
            polls: 0,
            packets: 0,
        }
    }

    /// Whether it is polling (readiness disarmed).
    pub fn is_polling(&self) -> bool {
        self.polling
    }

    /// The current poll interval.
    pub fn interval(&self) -> Span {
        self.interval
    }

    /// Polls made and packets they found, since the controller was made.
    pub fn totals(&self) -> (u64, u64) {
        (self.polls, self.packets)
    }

    /// The socket became readable while readiness was armed: poll now, and keep polling.
    pub fn on_readiness(&mut self, now: Instant) -> PollAction {
        if !self.polling {
            self.polling = true;
            self.empty_in_a_row = 0;
            self.last_poll = None;
        }
        PollAction::PollAt(now)
    }

    /// A poll at `now` found `found` packets (all it took; a poll takes what is waiting, up to
    /// the caller's batch). Returns when to poll next, or to re-arm readiness.
    pub fn on_poll(&mut self, now: Instant, found: usize) -> PollAction {
        self.polls += 1;
        self.packets += found as u64;
        if let Some(last) = self.last_poll {
            let elapsed = now.saturating_since(last).ticks().max(1);
            let sample = ((found as u128) << 32) / u128::from(elapsed);
            let sample = sample.min(u128::from(u64::MAX)) as u64;
            if !self.rate_known {
                // The first estimate comes from a poll that found something: an empty poll
                // right after the interrupt says little about the rate (it may have come a
                // microsecond later), so until then the interval doubles instead.
                if found > 0 {
                    self.rate_fp = sample;
                    self.rate_known = true;
                }
            } else if sample >= self.rate_fp {
                self.rate_fp += (sample - self.rate_fp) >> GAIN_SHIFT;
            } else {
                self.rate_fp -= (self.rate_fp - sample).div_ceil(1 << GAIN_SHIFT);
            }
        }
        let probing = !self.rate_known && self.last_poll.is_some();
        self.last_poll = Some(now);
        self.interval = if probing {
            Span::from_ticks(self.interval.ticks().saturating_mul(2)).min(self.max_interval())
        } else {
            self.interval_for_quota()
        };
        if found == 0 && self.interval >= self.max_interval() {
            self.empty_in_a_row += 1;
            if self.empty_in_a_row >= self.config.empty_polls {
                return self.stop();
            }
        } else {
            self.empty_in_a_row = 0;
        }
        self.polling = true;
        PollAction::PollAt(now + self.interval)
    }

    /// The loop has nothing else to do: stop polling and take the next packet by interrupt
    /// (an idle loop never delays a packet to aggregate it).
    pub fn on_idle(&mut self) -> PollAction {
        self.stop()
    }

    fn stop(&mut self) -> PollAction {
        self.polling = false;
        self.empty_in_a_row = 0;
        self.last_poll = None;
        PollAction::ArmReadiness
    }

    fn min_interval(&self) -> Span {
        Span::from_duration(
            std::time::Duration::from_nanos(self.config.min_interval_ns),
            self.hz,
        )
        .max(Span::from_ticks(1))
    }

    fn max_interval(&self) -> Span {
        Span::from_duration(
            std::time::Duration::from_nanos(self.config.max_interval_ns),
            self.hz,
        )
        .max(self.min_interval())
    }

    /// quota / rate, within the bounds.
    fn interval_for_quota(&self) -> Span {
        let (min, max) = (self.min_interval(), self.max_interval());
        if !self.rate_known {
            return min;
        }
        if self.rate_fp == 0 {
            return max;
        }
        let ticks = (u128::from(self.config.quota) << 32) / u128::from(self.rate_fp);
        Span::from_ticks(ticks.min(u128::from(u64::MAX)) as u64).clamp(min, max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_empty_first_poll_doubles_the_interval_instead_of_guessing_a_rate_of_zero() {
        let mut c = PollController::new(PollerConfig::new(5).unwrap(), 1_000_000);
        let t0 = Instant::from_ticks(1_000);
        assert_eq!(c.on_readiness(t0), PollAction::PollAt(t0));
        // The interrupt's poll took what was there; the next, 1 µs later, finds nothing.
        let PollAction::PollAt(t1) = c.on_poll(t0, 1) else {
            panic!("still polling")
        };
        let first = c.interval();
        let PollAction::PollAt(t2) = c.on_poll(t1, 0) else {
            panic!("still polling")
        };
        assert_eq!(
            c.interval().ticks(),
            first.ticks() * 2,
            "doubled, not the maximum"
        );
        // Then packets every 10 µs: the first poll that finds some sets the rate, and the
        // interval heads for quota / rate = 50 µs.
        let mut at = t2;
        let mut taken = at.ticks() / 10;
        for _ in 0..300 {
            let found = at.ticks() / 10 - taken;
            taken += found;
            match c.on_poll(at, found as usize) {
                PollAction::PollAt(next) => at = next,
                PollAction::ArmReadiness => panic!("steady arrivals stopped polling"),
            }
        }
        assert!(
            (c.interval().ticks() as i64 - 50).abs() <= 3,
            "{:?}",
            c.interval()
        );
    }

    const HZ: u64 = 1_000_000_000; // 1 tick = 1 ns

    /// Drives a controller with arrivals every `gap_ns` from t = 0 until `stop_ns`, polling
    /// when it says; returns (mean found per poll over the last half, the final action).
    fn drive(quota: u32, gap_ns: u64, stop_ns: u64, until_ns: u64) -> (f64, PollController) {
        let mut c = PollController::new(PollerConfig::new(quota).unwrap(), HZ);
        let arrivals_by = |t: u64| t.min(stop_ns).checked_div(gap_ns).unwrap_or(0);
        let mut taken = 0u64;
        let mut action = c.on_readiness(Instant::from_ticks(gap_ns));
        let mut founds = Vec::new();
        while let PollAction::PollAt(at) = action {
            if at.ticks() > until_ns {
                break;
            }
            let waiting = arrivals_by(at.ticks()) - taken;
            taken += waiting;
            founds.push(waiting as f64);
            action = c.on_poll(at, waiting as usize);
        }
        let half = &founds[founds.len() / 2..];
        let mean = half.iter().sum::<f64>() / half.len().max(1) as f64;
        (mean, c)
    }

    #[test]
    fn converges_to_the_quota_for_steady_arrivals() {
        for quota in [1, 2, 5, 10, 15] {
            for gap_ns in [2_000u64, 10_000, 50_000] {
                let (mean, c) = drive(quota, gap_ns, u64::MAX, 200_000_000);
                assert!(
                    (mean - f64::from(quota)).abs() <= 0.1 * f64::from(quota) + 0.05,
                    "quota {quota}, a packet every {gap_ns} ns: {mean} per poll"
                );
                assert!(c.is_polling());
                let want = gap_ns * u64::from(quota);
                let got = c.interval().ticks();
                assert!(got.abs_diff(want) * 10 <= want, "interval {got} vs {want}");
            }
        }
    }

    #[test]
    fn backs_off_to_interrupts_when_arrivals_stop() {
        // Packets every 10 µs for 20 ms, then none: two empty polls re-arm readiness.
        let mut c = PollController::new(PollerConfig::new(5).unwrap(), HZ);
        let mut action = c.on_readiness(Instant::from_ticks(0));
        let mut taken = 0u64;
        let mut rearmed_at = None;
        while let PollAction::PollAt(at) = action {
            let waiting = at.ticks().min(20_000_000) / 10_000 - taken;
            taken += waiting;
            action = c.on_poll(at, waiting as usize);
            if action == PollAction::ArmReadiness {
                rearmed_at = Some(at.ticks());
            }
            assert!(
                at.ticks() < 40_000_000,
                "still polling long after the last packet"
            );
        }
        let t = rearmed_at.expect("re-armed");
        assert!((22_000_000..40_000_000).contains(&t), "re-armed at {t} ns");
        assert!(!c.is_polling());
        assert_eq!(taken, 2000, "every packet taken before re-arming");
        // The next readiness event polls at once.
        let now = Instant::from_ticks(50_000_000);
        assert_eq!(c.on_readiness(now), PollAction::PollAt(now));
    }

    #[test]
    fn an_idle_loop_takes_packets_by_interrupt() {
        let mut c = PollController::new(PollerConfig::new(10).unwrap(), HZ);
        c.on_readiness(Instant::from_ticks(0));
        c.on_poll(Instant::from_ticks(0), 3);
        assert!(c.is_polling());
        assert_eq!(c.on_idle(), PollAction::ArmReadiness);
        assert!(!c.is_polling());
    }

    #[test]
    fn the_interval_stays_within_its_bounds() {
        let config = PollerConfig::new(1)
            .unwrap()
            .with_interval_bounds(5_000, 100_000)
            .unwrap();
        let mut c = PollController::new(config, HZ);
        c.on_readiness(Instant::from_ticks(0));
        // A flood: 1000 packets per poll at 1 µs apart wants a tiny interval.
        let mut t = 0;
        for _ in 0..100 {
            t += 1_000;
            c.on_poll(Instant::from_ticks(t), 1000);
        }
        assert_eq!(c.interval().ticks(), 5_000);
        // A trickle: one packet a second wants a huge one.
        for _ in 0..100 {
            t += 1_000_000_000;
            c.on_poll(Instant::from_ticks(t), 1);
        }
        assert_eq!(c.interval().ticks(), 100_000);
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert_eq!(PollerConfig::new(0), Err(PollerError::ZeroQuota));
        let ok = PollerConfig::new(1).unwrap();
        assert!(ok.with_interval_bounds(0, 10).is_err());
        assert!(ok.with_interval_bounds(10, 5).is_err());
        assert_eq!(ok.with_empty_polls(0), Err(PollerError::ZeroEmptyPolls));
    }

    proptest! {
        /// Whatever it is told, the next poll is never in the past nor past the longest
        /// interval, and an empty streak of the configured length always re-arms.
        #[test]
        fn decisions_stay_sane(founds in proptest::collection::vec(0usize..5000, 1..200),
                               steps in proptest::collection::vec(1u64..10_000_000, 200)) {
            let mut c = PollController::new(PollerConfig::new(3).unwrap(), HZ);
            let mut now = Instant::from_ticks(1);
            c.on_readiness(now);
            let mut empties = 0;
            for (found, step) in founds.iter().zip(&steps) {
                now += Span::from_ticks(*step);
                let action = c.on_poll(now, *found);
                empties = if *found == 0 { empties + 1 } else { 0 };
                match action {
                    PollAction::PollAt(at) => {
                        prop_assert!(!now.is_after(at));
                        prop_assert!(at.saturating_since(now).ticks() <= 1_000_000);

                    }
                    PollAction::ArmReadiness => {
                        prop_assert!(empties >= 2, "re-armed after {} empty polls", empties);
                        empties = 0;
                        c.on_readiness(now);
                    }
                }
            }
        }
    }
}
