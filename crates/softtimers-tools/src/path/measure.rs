//! What the emulator measures of each direction as it goes: delay error and queueing delay
//! histograms, the spacing of packets before and after the bottleneck, a timeline in 50 ms
//! buckets, and the burstiness of the sender against the bottleneck.

use std::time::Duration;

use anyhow::Result;
use hdrhistogram::Histogram;
use softtimer::Instant;
use softtimer_net::burstiness::{Bottleneck, BurstinessIndex};
use softtimer_net::path::{Link, LinkConfig};

use super::{DirectionReport, Quantiles};

pub(super) const TIMELINE_BUCKET: Duration = Duration::from_millis(50);

pub(super) struct Direction {
    pub(super) link: Link,
    /// Kobayashi's index of the sender's packets against this direction's bottleneck.
    pub(super) burstiness: Option<BurstinessIndex>,
    pub(super) report: DirectionReport,
    pub(super) delay_error: Histogram<u64>,
    pub(super) queue_delay: Histogram<u64>,
    pub(super) last_written: Option<Instant>,
    pub(super) expected_span: u64,
    pub(super) actual_span: u64,
    pub(super) timeline: Vec<Bucket>,
    pub(super) input_gaps: Gaps,
    pub(super) output_gaps: Gaps,
}

/// One 50 ms stretch of a direction's timeline.
#[derive(Clone, Copy, Default)]
pub(super) struct Bucket {
    pub(super) max_queue_delay_ns: u64,
    pub(super) bytes: u64,
    pub(super) queue_drops: u64,
}

/// Running mean and variance of gaps (Welford), idle gaps left out.
#[derive(Default)]
pub(super) struct Gaps {
    pub(super) last: Option<Instant>,
    pub(super) n: u64,
    pub(super) mean: f64,
    pub(super) m2: f64,
}

impl Gaps {
    const IDLE_NS: u64 = 10_000_000;
    pub(super) fn add(&mut self, t: Instant, hz: u64) {
        if let Some(prev) = self.last {
            let g = t.saturating_since(prev).as_nanos(hz);
            if g <= Self::IDLE_NS {
                let x = g as f64 / 1000.0;
                self.n += 1;
                let d = x - self.mean;
                self.mean += d / self.n as f64;
                self.m2 += d * (x - self.mean);
            }
        }
        self.last = Some(t);
    }
    pub(super) fn stddev(&self) -> Option<f64> {
        (self.n >= 2).then(|| (self.m2 / (self.n - 1) as f64).sqrt())
    }
}

impl Direction {
    pub(super) fn new(config: LinkConfig, rtt: Duration, hz: u64, seed: u64) -> Result<Direction> {
        let burstiness = match (config.rate, rtt.is_zero()) {
            (Some(rate), false) => Some(BurstinessIndex::new(
                Bottleneck::Rate {
                    bits_per_sec: rate.bits_per_sec(),
                    rtt_ns: rtt.as_nanos() as u64,
                },
                20,
            )),
            _ => None,
        };
        Ok(Direction {
            burstiness,
            link: Link::new(config, hz, seed)?,
            report: DirectionReport::default(),
            delay_error: Histogram::new_with_bounds(1, 60_000_000_000, 3)?,
            queue_delay: Histogram::new_with_bounds(1, 60_000_000_000, 3)?,
            last_written: None,
            expected_span: 0,
            actual_span: 0,
            timeline: Vec::new(),
            input_gaps: Gaps::default(),
            output_gaps: Gaps::default(),
        })
    }

    pub(super) fn bucket(&mut self, at: Instant, start: Instant, hz: u64) -> &mut Bucket {
        let ns = at.saturating_since(start).as_nanos(hz);
        let i = (ns / TIMELINE_BUCKET.as_nanos() as u64) as usize;
        if self.timeline.len() <= i {
            self.timeline.resize(i + 1, Bucket::default());
        }
        &mut self.timeline[i]
    }

    pub(super) fn finish(mut self) -> DirectionReport {
        let r = &mut self.report;
        r.delay_error = Quantiles::of_ns(&self.delay_error);
        r.queue_delay = Quantiles::of_ns(&self.queue_delay);
        r.sender_gap_stddev_us = self.input_gaps.stddev();
        r.interarrival_stddev_us = self.output_gaps.stddev();
        r.burstiness_index = self.burstiness.as_ref().and_then(BurstinessIndex::index);
        if r.back_to_back >= 10 && self.actual_span > 0 {
            r.rate_error_pct =
                Some((self.expected_span as f64 / self.actual_span as f64 - 1.0) * 100.0);
        }
        r.queue_drops_second_half = drops_in_second_half(&self.timeline);
        let secs = TIMELINE_BUCKET.as_secs_f64();
        r.timeline = self
            .timeline
            .iter()
            .enumerate()
            .map(|(i, b)| {
                (
                    i as f64 * secs,
                    b.max_queue_delay_ns as f64 / 1e6,
                    b.bytes as f64 * 8.0 / secs / 1e6,
                )
            })
            .collect();
        self.report
    }
}

/// Queue drops from the bucket in which the delivered bytes pass half of their total on;
/// none if nothing was delivered. Halving by bytes, not by time, keeps a stray late packet
/// (a probe, a close) from moving the middle.
pub(super) fn drops_in_second_half(timeline: &[Bucket]) -> u64 {
    let total: u64 = timeline.iter().map(|b| b.bytes).sum();
    if total == 0 {
        return 0;
    }
    let mut delivered = 0;
    let middle = timeline
        .iter()
        .position(|b| {
            delivered += b.bytes;
            delivered * 2 > total
        })
        .unwrap_or(timeline.len());
    timeline[middle..].iter().map(|b| b.queue_drops).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(bytes: u64, queue_drops: u64) -> Bucket {
        Bucket {
            max_queue_delay_ns: 0,
            bytes,
            queue_drops,
        }
    }

    #[test]
    fn second_half_drops_count_from_where_half_the_bytes_were_delivered() {
        // 60 bytes delivered in buckets 2..=7; the 31st byte comes in bucket 5, so the
        // second half is 5..=7 and the idle tail after it.
        let timeline = [
            bucket(0, 0),
            bucket(0, 0),
            bucket(10, 40),
            bucket(10, 0),
            bucket(10, 2),
            bucket(10, 3),
            bucket(10, 0),
            bucket(10, 4),
            bucket(0, 1),
        ];
        assert_eq!(drops_in_second_half(&timeline), 3 + 4 + 1);
        // Exactly half by the end of bucket 1: the second half starts after it.
        let even = [bucket(1, 5), bucket(1, 6), bucket(2, 7)];
        assert_eq!(drops_in_second_half(&even), 7);
        // A stray packet long after the transfer does not move the middle.
        let mut strayed = timeline.to_vec();
        strayed.extend([bucket(0, 0); 20]);
        strayed.push(bucket(1, 0));
        assert_eq!(drops_in_second_half(&strayed), 3 + 4 + 1);
        // Nothing delivered: no second half.
        assert_eq!(drops_in_second_half(&[bucket(0, 9)]), 0);
        assert_eq!(drops_in_second_half(&[]), 0);
    }
}
