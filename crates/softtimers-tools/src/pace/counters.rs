//! The paced-sender core every paced sender of the workspace shares: what it counts as
//! datagrams leave, lock-free, so that a timer-signal handler may count too (atomics, one
//! writer at a time: the facility runs one handler at a time), and the summary of it. `pace`
//! counts with it, and so does the flow the lab's server loop paces while it serves (E6, E7).

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// What a paced sender counted: datagrams, refusals, system calls, the first and last send
/// time, and the gaps between a flow's consecutive sends.
///
/// ```
/// use softtimers_tools::pace::SendCounters;
/// let c = SendCounters::default();
/// c.sent(1_000, None);
/// c.sent(1_100, Some(100));
/// c.sent(1_300, Some(200));
/// let s = c.summary();
/// assert_eq!((s.packets, s.span_ns), (3, 300));
/// assert_eq!((s.gap_mean_us, s.gap_max_us), (0.15, 0.2));
/// ```
#[derive(Debug, Default)]
pub struct SendCounters {
    calls: AtomicU64,
    packets: AtomicU64,
    refused: AtomicU64,
    /// The last refusal's `errno` (0: none, or none known).
    last_error: AtomicI32,
    first_ns: AtomicU64,
    last_ns: AtomicU64,
    gaps: AtomicU64,
    gap_sum_ns: AtomicU64,
    /// The sum of squared gaps, µs², as `f64` bits.
    gap_sum_sq_us2_bits: AtomicU64,
    gap_max_ns: AtomicU64,
}

/// A summary of [`SendCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SendSummary {
    /// Datagrams sent.
    pub packets: u64,
    /// Datagrams the kernel refused.
    pub refused: u64,
    /// The last refusal's `errno`, when known.
    pub last_error: Option<i32>,
    /// Send system calls.
    pub calls: u64,
    /// From the first send to the last, ns.
    pub span_ns: u64,
    /// The mean gap between a flow's consecutive sends, µs.
    pub gap_mean_us: f64,
    /// Their standard deviation, µs.
    pub gap_stddev_us: f64,
    /// The longest, µs.
    pub gap_max_us: f64,
}

impl SendCounters {
    /// A datagram left at `at_ns` (any clock, the same for every call), `gap_ns` after its
    /// flow's previous one (`None` for a flow's first).
    pub fn sent(&self, at_ns: u64, gap_ns: Option<u64>) {
        if self.packets.fetch_add(1, Ordering::Relaxed) == 0 {
            self.first_ns.store(at_ns, Ordering::Relaxed);
        }
        self.last_ns.store(at_ns, Ordering::Relaxed);
        if let Some(gap_ns) = gap_ns {
            self.gaps.fetch_add(1, Ordering::Relaxed);
            self.gap_sum_ns.fetch_add(gap_ns, Ordering::Relaxed);
            let gap_us = gap_ns as f64 / 1000.0;
            let sum = f64::from_bits(self.gap_sum_sq_us2_bits.load(Ordering::Relaxed));
            self.gap_sum_sq_us2_bits
                .store((sum + gap_us * gap_us).to_bits(), Ordering::Relaxed);
            self.gap_max_ns.fetch_max(gap_ns, Ordering::Relaxed);
        }
    }

    /// `n` datagrams counted as sent were refused by the kernel after all (a batch's), the
    /// last with `errno` where it is known.
    pub fn unsent(&self, n: u64, errno: Option<i32>) {
        self.refused.fetch_add(n, Ordering::Relaxed);
        self.packets.fetch_sub(n, Ordering::Relaxed);
        self.note_error(errno);
    }

    /// A datagram the kernel refused, not counted as sent, with `errno` where it is known.
    pub fn refused(&self, errno: Option<i32>) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        self.note_error(errno);
    }

    fn note_error(&self, errno: Option<i32>) {
        if let Some(errno) = errno.filter(|&e| e != 0) {
            self.last_error.store(errno, Ordering::Relaxed);
        }
    }

    /// `n` send system calls were made.
    pub fn calls(&self, n: u64) {
        self.calls.fetch_add(n, Ordering::Relaxed);
    }

    /// Datagrams sent so far.
    pub fn packets(&self) -> u64 {
        self.packets.load(Ordering::Relaxed)
    }

    /// When the last datagram left (the clock `sent` was given).
    pub fn last_ns(&self) -> u64 {
        self.last_ns.load(Ordering::Relaxed)
    }

    /// What was counted.
    pub fn summary(&self) -> SendSummary {
        let gaps = self.gaps.load(Ordering::Relaxed).max(1) as f64;
        let mean_us = self.gap_sum_ns.load(Ordering::Relaxed) as f64 / gaps / 1000.0;
        let var = f64::from_bits(self.gap_sum_sq_us2_bits.load(Ordering::Relaxed)) / gaps
            - mean_us * mean_us;
        SendSummary {
            packets: self.packets(),
            refused: self.refused.load(Ordering::Relaxed),
            last_error: Some(self.last_error.load(Ordering::Relaxed)).filter(|&e| e != 0),
            calls: self.calls.load(Ordering::Relaxed),
            span_ns: self
                .last_ns()
                .saturating_sub(self.first_ns.load(Ordering::Relaxed)),
            gap_mean_us: mean_us,
            gap_stddev_us: var.max(0.0).sqrt(),
            gap_max_us: self.gap_max_ns.load(Ordering::Relaxed) as f64 / 1000.0,
        }
    }
}
