//! The idle policy's learnt spin windows (calibrated, or a named precision's), kept per wait
//! length and learnt from the loop's own wake-ups (a pure rule: it is told each wake-up's lateness, reads no clock).

use softtimer::Span;

/// Wait-length buckets of [`WakeupWindows`]: waits under 64 µs, under 128 µs, … under
/// 8,192 µs, and longer.
const WAIT_BUCKETS: usize = 9;

/// A bucket whose waits are at least this many widest windows long aims its window at one
/// wake in [`TAIL_ONE_IN`], not ten: spinning through the lateness's tail costs at most a
/// fortieth of the wait there.
const TAIL_AIM_WAITS: u64 = 40;

/// The aim of the buckets of waits [`TAIL_AIM_WAITS`] widest windows long: one late wake in
/// this many, so that the 99th percentile of lateness is on time, not at the window's edge.
const TAIL_ONE_IN: u64 = 300;

/// The spin windows of a calibrated or named-precision idle policy, by how long the loop is
/// about to block, kept current from the loop's own wake-ups.
///
/// A blocked thread runs again a wake-up's lateness after its timeout, and that lateness
/// grows with the block (an idle CPU sinks deeper; a virtual one stops halt-polling and is
/// descheduled) and drifts with the host's load. So the window is kept per bucket of wait
/// length (doubling from 64 µs), starts from the calibration, and follows each timed block's
/// actual lateness towards its 90th percentile plus a margin: a wake later than the window
/// widens it by a sixteenth, an earlier one narrows it by a ninth of that, which balances
/// where one wake in ten is later. [`aiming_at`](Self::aiming_at) moves that aim (a named
/// precision keeps one wake in a hundred within an allowance past the window);
/// [`aiming_at_the_tail_before_long_waits`](Self::aiming_at_the_tail_before_long_waits)
/// moves it before waits of 8,192 µs and more (the calibrated policy's rule).
///
/// ```
/// use softtimer::Span;
/// use softtimer_rt::WakeupWindows;
///
/// let us = |n: u64| Span::from_ticks(n * 1_000); // a 1 GHz clock
/// // 10 µs before short waits, 40 µs before waits of 1 ms and more, 1 µs of margin.
/// let initial = |wait| if wait < us(1_000) { us(10) } else { us(40) };
/// let mut w = WakeupWindows::new(us(64), initial, us(1), us(2), us(200));
/// assert_eq!(w.window_for(us(100)), us(10));
/// assert_eq!(w.window_for(us(5_000)), us(40));
/// // Blocks of 5 ms keep waking 60 µs late: that bucket's window follows.
/// for _ in 0..200 {
///     w.observe(us(5_000), us(60));
/// }
/// assert!(w.window_for(us(5_000)) > us(60));
/// assert_eq!(w.window_for(us(100)), us(10), "other buckets keep theirs");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WakeupWindows {
    /// The shortest bucket's upper edge, ticks (each next edge doubles it).
    first_edge: u64,
    /// Each bucket's window, ticks.
    windows: [u64; WAIT_BUCKETS],
    /// Added to each wake's lateness before it is compared with the window.
    margin: u64,
    /// How late past its window a wake may come and still count as on time.
    allowance: u64,
    /// Per bucket: a wake that counts as late widens the window `narrowing` times as much as
    /// one that does not narrows it: the window balances where one wake in `narrowing + 1`
    /// is late.
    narrowing: [u64; WAIT_BUCKETS],
    min: u64,
    max: u64,
}

impl WakeupWindows {
    /// Windows for buckets whose first edge is `first_edge`, each starting at `initial` of
    /// the bucket's typical wait (its lower edge; half the first edge for the first), kept
    /// within `min ..= max` and below half the bucket's shortest wait (so that some of its
    /// waits still block, and the window keeps learning: one as wide as the waits would spin
    /// through all of them and never be corrected), `margin` above the lateness it follows.
    /// A `max` below `min` is taken as `min`.
    pub fn new(
        first_edge: Span,
        initial: impl Fn(Span) -> Span,
        margin: Span,
        min: Span,
        max: Span,
    ) -> WakeupWindows {
        let first_edge = first_edge.ticks().max(1);
        let (min, max) = (min.ticks(), max.ticks().max(min.ticks()));
        let mut w = WakeupWindows {
            first_edge,
            windows: [0; WAIT_BUCKETS],
            margin: margin.ticks(),
            allowance: 0,
            narrowing: [9; WAIT_BUCKETS],
            min,
            max,
        };
        for b in 0..WAIT_BUCKETS {
            let start = initial(Span::from_ticks(w.typical(b))).ticks();
            w.windows[b] = w.bounded(b, start);
        }
        w
    }

    /// Aims the windows at one wake in `one_in` (at least 2; [`new`](Self::new) aims at one
    /// in ten) counting as late: a wake is late when its lateness plus the margin exceeds
    /// the window plus `allowance`. That is what a named precision asks (a p99 lateness
    /// within the allowance). A late wake widens the window by a sixteenth and an on-time
    /// one narrows it by `one_in − 1` times less, so one late stretch widens quickly and the
    /// window comes back slowly (at one in a hundred, by about e every 1,600 wakes): a
    /// lateness that a spin cannot remove (the host taking the CPU away) costs spin for a
    /// while.
    ///
    /// ```
    /// use softtimer::Span;
    /// use softtimer_rt::WakeupWindows;
    ///
    /// let us = |n: u64| Span::from_ticks(n * 1_000); // a 1 GHz clock
    /// // Keep 99 % of wakes within 5 µs past the window.
    /// let mut w = WakeupWindows::new(us(64), |_| us(10), Span::ZERO, us(1), us(200))
    ///     .aiming_at(100, us(5));
    /// // Wakes 30 µs late, one in twenty 80 µs late: the window follows the tail, less 5 µs.
    /// for i in 0..20_000 {
    ///     w.observe(us(500), if i % 20 == 0 { us(80) } else { us(30) });
    /// }
    /// let window = w.window_for(us(500));
    /// assert!(window > us(70) && window < us(80), "{window:?}");
    /// ```
    pub fn aiming_at(mut self, one_in: u32, allowance: Span) -> WakeupWindows {
        self.narrowing = [u64::from(one_in.max(2)) - 1; WAIT_BUCKETS];
        self.allowance = allowance.ticks();
        self
    }

    /// Before waits so long that even the widest window costs at most a fortieth of the wait
    /// in spinning (the buckets from 8,192 µs, with a widest window of 200 µs), starts at
    /// the widest window and aims at one wake in three hundred (the calibrated policy's
    /// rule): the tail of the lateness is cheap to spin through there, and the 99th
    /// percentile comes on time rather than at the window's edge. From the widest window
    /// down, not up from the calibration: a window learnt upwards would leave the wakes
    /// before it late. Down is slow: where wake-ups come on time the window halves in about
    /// 3,300 of them (half a minute of 10 ms waits). [`aiming_at`](Self::aiming_at) called
    /// after it sets every bucket's aim again, and leaves the windows where they are.
    ///
    /// ```
    /// use softtimer::Span;
    /// use softtimer_rt::WakeupWindows;
    ///
    /// let us = |n: u64| Span::from_ticks(n * 1_000); // a 1 GHz clock
    /// let w = WakeupWindows::new(us(64), |_| us(30), us(1), us(2), us(200))
    ///     .aiming_at_the_tail_before_long_waits();
    /// assert_eq!(w.window_for(us(10_000)), us(200));
    /// assert_eq!(w.window_for(us(5_000)), us(30));
    /// ```
    pub fn aiming_at_the_tail_before_long_waits(mut self) -> WakeupWindows {
        for b in 0..WAIT_BUCKETS {
            if self.typical(b) >= self.max.saturating_mul(TAIL_AIM_WAITS) {
                self.narrowing[b] = TAIL_ONE_IN - 1;
                self.windows[b] = self.bounded(b, self.max);
            }
        }
        self
    }

    /// A wait of bucket `b`: the first bucket's middle, another's lower edge.
    fn typical(&self, b: usize) -> u64 {
        match b {
            0 => self.first_edge / 2,
            _ => self.first_edge.saturating_mul(1 << (b - 1)),
        }
    }

    /// `window` within the bounds, and below half of bucket `b`'s shortest wait (the
    /// first's middle).
    fn bounded(&self, b: usize, window: u64) -> u64 {
        let cap = (self.typical(b) / 2).max(self.min);
        window.clamp(self.min, self.max.min(cap))
    }

    fn bucket(&self, wait: Span) -> usize {
        // 0 below the first edge, then one more per doubling.
        let ratio = wait.ticks() / self.first_edge;
        ((u64::BITS - ratio.leading_zeros()) as usize).min(WAIT_BUCKETS - 1)
    }

    /// Whether a wait of `wait` falls in the shortest bucket (under the first edge).
    pub(crate) fn is_shortest(&self, wait: Span) -> bool {
        self.bucket(wait) == 0
    }

    /// The window before a due time `wait` away.
    pub fn window_for(&self, wait: Span) -> Span {
        Span::from_ticks(self.windows[self.bucket(wait)])
    }

    /// A block of `wait` woke `late` after its timeout (zero: on time or early).
    pub fn observe(&mut self, wait: Span, late: Span) {
        let b = self.bucket(wait);
        let w = self.windows[b];
        let step = (w / 16).max(1);
        let moved = if late.ticks().saturating_add(self.margin) > w.saturating_add(self.allowance) {
            w.saturating_add(step)
        } else {
            w.saturating_sub((step / self.narrowing[b]).max(1))
        };
        self.windows[b] = self.bounded(b, moved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(t: u64) -> Span {
        Span::from_ticks(t)
    }

    /// Feeds `w` `rounds` wakes of 5 ms blocks, each late by 0..100 µs spread evenly (a
    /// fixed shuffle from `seed`, which it advances), and returns the median window over the
    /// second half, in ticks of a 1 GHz clock.
    fn settled_on_uniform_lateness(w: &mut WakeupWindows, seed: &mut u64, rounds: usize) -> u64 {
        let wait = span(5_000_000);
        let mut seen = Vec::with_capacity(rounds / 2 + 1);
        for i in 0..rounds {
            *seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            w.observe(wait, span((*seed >> 33) % 100_000));
            if i >= rounds / 2 {
                seen.push(w.window_for(wait).ticks());
            }
        }
        seen.sort_unstable();
        seen[seen.len() / 2]
    }

    #[test]
    fn the_windows_follow_each_wait_lengths_ninetieth_percentile_of_lateness() {
        // A 1 GHz clock: 64 µs is 64,000 ticks.
        let us = |n: u64| span(n * 1_000);
        let mut w = WakeupWindows::new(us(64), |_| us(10), us(1), us(2), us(200));
        // Buckets: < 64 µs, < 128, < 256, ...; the last holds everything from 8,192 µs on.
        assert_eq!(w.bucket(us(63)), 0);
        assert_eq!(w.bucket(us(64)), 1);
        assert_eq!(w.bucket(us(200)), 2);
        assert_eq!(w.bucket(us(1_000_000)), WAIT_BUCKETS - 1);
        // Lateness spread evenly over 0..100 µs (a fixed shuffle): the window settles near
        // the 90th percentile plus the margin, 91 µs, not at either end.
        let median = settled_on_uniform_lateness(&mut w, &mut 1, 40_000);
        assert!((84_000..=98_000).contains(&median), "{median}");
        // Always 50 µs late: the window follows to about 51; other buckets keep theirs.
        for _ in 0..2_000 {
            w.observe(us(300), us(50));
        }
        let grown = w.window_for(us(300)).ticks();
        assert!((48_000..=56_000).contains(&grown), "{grown}");
        assert_eq!(w.window_for(us(10)), us(10));
        // Never past half its bucket's shortest wait, nor outside the bounds.
        for _ in 0..5_000 {
            w.observe(us(100), us(10_000));
            w.observe(us(20_000), us(10_000));
        }
        assert_eq!(w.window_for(us(100)), us(32));
        assert_eq!(w.window_for(us(20_000)), us(200));
        for _ in 0..5_000 {
            w.observe(us(20_000), span(0));
        }
        assert_eq!(w.window_for(us(20_000)), us(2));
    }

    #[test]
    fn before_waits_forty_widest_windows_long_the_windows_aim_at_the_tail() {
        let us = |n: u64| span(n * 1_000);
        // The widest window 200 µs: waits from 8,192 µs (the last bucket's) are past 40 of
        // them, waits of 4,096..8,192 µs are not.
        let mut w = WakeupWindows::new(us(64), |_| us(10), us(1), us(2), us(200))
            .aiming_at_the_tail_before_long_waits();
        // Those start at the widest window, the others where they are told.
        assert_eq!(w.window_for(us(10_000)), us(200));
        assert_eq!(w.window_for(us(5_000)), us(10));
        let mut seed: u64 = 3;
        let (mut short, mut long) = (Vec::new(), Vec::new());
        for i in 0..400_000 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let late = span((seed >> 33) % 100_000);
            w.observe(us(5_000), late);
            w.observe(us(10_000), late);
            if i >= 200_000 {
                short.push(w.window_for(us(5_000)).ticks());
                long.push(w.window_for(us(10_000)).ticks());
            }
        }
        let median = |v: &mut Vec<u64>| {
            v.sort_unstable();
            v[v.len() / 2]
        };
        // Lateness spread evenly over 0..100 µs, plus the 1 µs margin: the tenth latest
        // wake in a hundred before 5 ms waits, the latest in three hundred before 10 ms
        // waits.
        let (short, long) = (median(&mut short), median(&mut long));
        assert!((86_000..=96_000).contains(&short), "{short}");
        assert!((97_000..=106_000).contains(&long), "{long}");
        // Without the rule, every bucket aims at one in ten.
        let plain = WakeupWindows::new(us(64), |_| us(10), us(1), us(2), us(200));
        assert_eq!(plain.narrowing, [9; WAIT_BUCKETS]);
        assert_eq!(plain.window_for(us(10_000)), us(10));
    }

    #[test]
    fn a_named_precision_keeps_one_wake_in_a_hundred_within_its_allowance() {
        let us = |n: u64| span(n * 1_000);
        let calibrated = WakeupWindows::new(us(64), |_| us(10), us(1), us(1), us(200));
        let mut within = calibrated.aiming_at(100, us(30));
        // Lateness spread evenly over 0..100 µs: the window settles near the 99th
        // percentile less the allowance and plus the margin, 70 µs, well away from where the
        // calibrated aim (one in ten) settles, 91 µs.
        let mut seed = 7;
        let median = settled_on_uniform_lateness(&mut within, &mut seed, 200_000);
        assert!((66_000..=74_000).contains(&median), "{median}");
        // A wake-up precise enough on its own: the window shrinks to the floor and stays.
        for _ in 0..20_000 {
            within.observe(us(300), us(20));
        }
        assert_eq!(within.window_for(us(300)), us(1));
        // Aiming at fewer than one in two is taken as one in two: the median.
        let mut half = calibrated.aiming_at(0, Span::ZERO);
        assert_eq!(half, calibrated.aiming_at(2, Span::ZERO));
        let median = settled_on_uniform_lateness(&mut half, &mut seed, 20_000);
        assert!((40_000..=60_000).contains(&median), "{median}");
    }
}
