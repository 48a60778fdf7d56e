//! One direction of an emulated path (sans-IO): one-way delay, a bottleneck rate, a
//! drop-tail queue in bytes or packets, and random loss.
//!
//! This is what `netem` plus `tbf` would do in the kernel, as a pure function of arrival
//! times: [`Link::offer`] takes a packet's arrival time and length and says whether it is
//! dropped (queue full, or random loss) or when it must be delivered at the far end: after
//! waiting for the packets ahead of it, its own transmission time at the bottleneck rate,
//! and the propagation delay. The I/O layer (TUN devices in `softtimers path`) delivers it
//! at that time with a soft event and reports how late it was.
//!
//! ```
//! use std::time::Duration;
//! use softtimer::{Instant, Span};
//! use softtimer_net::path::{Link, LinkConfig, Offer, QueueLimit};
//!
//! let hz = 1_000_000_000;
//! let config = LinkConfig {
//!     delay: Duration::from_millis(10),
//!     rate: Some("12M".parse().unwrap()), // 1500 B take 1 ms
//!     queue: QueueLimit::Packets(2),
//!     loss: 0.0,
//! };
//! let mut link = Link::new(config, hz, 1).unwrap();
//! let t0 = Instant::from_ticks(0);
//! let ms = |n: u64| t0 + Span::from_ticks(n * 1_000_000);
//! // Three packets at once: two fit (one in transmission, one waiting), the third is dropped.
//! assert!(matches!(link.offer(t0, 1500), Offer::Deliver { at, .. } if at == ms(11)));
//! assert!(matches!(link.offer(t0, 1500), Offer::Deliver { at, .. } if at == ms(12)));
//! assert!(matches!(link.offer(t0, 1500), Offer::QueueFull));
//! ```

use std::collections::VecDeque;
use std::time::Duration;

use rand::{Rng, SeedableRng, rngs::SmallRng};
use softtimer::{Instant, Span};

use crate::Rate;

/// How much the bottleneck queue holds (the packet in transmission included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueLimit {
    /// At most this many bytes.
    Bytes(u64),
    /// At most this many packets.
    Packets(u64),
}

/// One direction of a path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Bottleneck rate; `None`: no bottleneck (no queue either: a delay line of at most
    /// [`DELAY_LINE_PACKETS`] packets).
    pub rate: Option<Rate>,
    /// Drop-tail limit of the bottleneck queue (with a rate).
    pub queue: QueueLimit,
    /// Probability that a packet is lost at random, 0 ..= 1.
    pub loss: f64,
}

/// Why a configuration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// Loss outside 0 ..= 1.
    #[error("a loss probability must be between 0 and 1 (got {0})")]
    Loss(String),
    /// A queue that cannot hold one packet.
    #[error("a queue of {0} cannot hold a single packet")]
    Queue(String),
    /// A delay too long to represent.
    #[error("a delay of {0:?} is longer than an hour")]
    Delay(Duration),
}

/// What became of a packet offered to the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offer {
    /// Deliver it at the far end at `at`.
    Deliver {
        /// When it arrives at the far end.
        at: Instant,
        /// How long it waits in the queue before its transmission starts.
        queued: Span,
        /// Whether its transmission starts right as the previous packet's ends (the queue
        /// was not empty): its spacing from that packet is its own transmission time.
        back_to_back: bool,
    },
    /// The queue was full (drop-tail).
    QueueFull,
    /// Lost at random.
    Lost,
}

/// The least size a queue must hold: one full-size Ethernet frame.
pub const MIN_QUEUE_BYTES: u64 = 1500;

/// The most packets a link without a bottleneck holds in its delay line, as netem's `limit`
/// bounds its queue: a packet that arrives with this many still on their way is dropped
/// ([`Offer::QueueFull`]), so that a long delay at a high arrival rate does not hold every
/// packet in memory.
pub const DELAY_LINE_PACKETS: usize = 65_536;

/// One direction of an emulated path; see the module documentation.
pub struct Link {
    config: LinkConfig,
    hz: u64,
    delay: Span,
    /// When the bottleneck finishes the last packet accepted.
    busy_until: Option<Instant>,
    /// Transmission end and length of every packet accepted and not yet fully sent; without
    /// a bottleneck, delivery time and length of every packet on its way.
    in_queue: VecDeque<(Instant, u64)>,
    queued_bytes: u64,
    rng: SmallRng,
}

impl Link {
    /// A link on a clock at `hz`; `seed` fixes the random losses.
    pub fn new(config: LinkConfig, hz: u64, seed: u64) -> Result<Link, LinkError> {
        if !(0.0..=1.0).contains(&config.loss) || config.loss.is_nan() {
            return Err(LinkError::Loss(config.loss.to_string()));
        }
        match config.queue {
            QueueLimit::Bytes(b) if b < MIN_QUEUE_BYTES => {
                return Err(LinkError::Queue(format!("{b} bytes")));
            }
            QueueLimit::Packets(0) => return Err(LinkError::Queue("0 packets".into())),
            _ => {}
        }
        if config.delay > Duration::from_secs(3600) {
            return Err(LinkError::Delay(config.delay));
        }
        Ok(Link {
            config,
            hz,
            delay: Span::from_duration(config.delay, hz),
            busy_until: None,
            in_queue: VecDeque::new(),
            queued_bytes: 0,
            rng: SmallRng::seed_from_u64(seed),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Bytes in the queue at the last offer (the packet in transmission included).
    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Decides the fate of a packet of `len` bytes arriving at `now`.
    pub fn offer(&mut self, now: Instant, len: u64) -> Offer {
        if self.config.loss > 0.0 && self.rng.random::<f64>() < self.config.loss {
            return Offer::Lost;
        }
        let Some(rate) = self.config.rate else {
            // The delay line: packets still on their way, by delivery time (in order).
            while let Some(&(at, _)) = self.in_queue.front() {
                if at.is_after(now) {
                    break;
                }
                self.in_queue.pop_front();
            }
            if self.in_queue.len() >= DELAY_LINE_PACKETS {
                return Offer::QueueFull;
            }
            let at = now + self.delay;
            self.in_queue.push_back((at, len));
            return Offer::Deliver {
                at,
                queued: Span::ZERO,
                back_to_back: false,
            };
        };
        while let Some(&(end, bytes)) = self.in_queue.front() {
            if end.is_after(now) {
                break;
            }
            self.in_queue.pop_front();
            self.queued_bytes -= bytes;
        }
        let full = match self.config.queue {
            QueueLimit::Bytes(limit) => self.queued_bytes + len > limit,
            QueueLimit::Packets(limit) => self.in_queue.len() as u64 >= limit,
        };
        if full {
            return Offer::QueueFull;
        }
        let (start, back_to_back) = match self.busy_until {
            Some(busy) if busy.is_after(now) => (busy, true),
            _ => (now, false),
        };
        let end = start + rate.span_for_bytes(len, self.hz);
        self.busy_until = Some(end);
        self.in_queue.push_back((end, len));
        self.queued_bytes += len;
        Offer::Deliver {
            at: end + self.delay,
            queued: start.saturating_since(now),
            back_to_back,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HZ: u64 = 1_000_000_000;

    /// Without a bottleneck, the delay line holds at most `DELAY_LINE_PACKETS`: one more
    /// arriving at once is dropped, and room comes back as packets are delivered.
    #[test]
    fn a_delay_line_without_a_bottleneck_is_bounded() {
        let mut link = Link::new(
            LinkConfig {
                delay: Duration::from_secs(30),
                rate: None,
                queue: QueueLimit::Bytes(64_000),
                loss: 0.0,
            },
            HZ,
            1,
        )
        .unwrap();
        let t0 = Instant::from_ticks(0);
        for _ in 0..DELAY_LINE_PACKETS {
            assert!(matches!(link.offer(t0, 1500), Offer::Deliver { .. }));
        }
        assert_eq!(link.offer(t0, 1500), Offer::QueueFull);
        let later = t0 + Span::from_duration(Duration::from_secs(30), HZ);
        assert!(matches!(link.offer(later, 1500), Offer::Deliver { .. }));
    }

    fn link(rate: &str, queue: QueueLimit, loss: f64) -> Link {
        Link::new(
            LinkConfig {
                delay: Duration::from_micros(500),
                rate: Some(rate.parse().unwrap()),
                queue,
                loss,
            },
            HZ,
            7,
        )
        .unwrap()
    }

    #[test]
    fn bad_configurations_are_refused() {
        let ok = LinkConfig {
            delay: Duration::ZERO,
            rate: None,
            queue: QueueLimit::Bytes(64_000),
            loss: 0.0,
        };
        assert!(Link::new(ok, HZ, 0).is_ok());
        for bad in [
            LinkConfig { loss: -0.1, ..ok },
            LinkConfig { loss: 1.5, ..ok },
            LinkConfig {
                loss: f64::NAN,
                ..ok
            },
            LinkConfig {
                queue: QueueLimit::Bytes(1000),
                ..ok
            },
            LinkConfig {
                queue: QueueLimit::Packets(0),
                ..ok
            },
            LinkConfig {
                delay: Duration::from_secs(7200),
                ..ok
            },
        ] {
            assert!(Link::new(bad, HZ, 0).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_saturated_link_delivers_at_exactly_its_rate() {
        // 100 Mbit/s: 1250 B every 100 µs; offer faster than that, one packet at a time.
        let mut l = link("100M", QueueLimit::Packets(1000), 0.0);
        let t0 = Instant::from_ticks(0);
        let mut last = None;
        for i in 0..500u64 {
            let now = t0 + Span::from_ticks(i * 50_000);
            let Offer::Deliver { at, .. } = l.offer(now, 1250) else {
                panic!("dropped {i}");
            };
            if let Some(prev) = last {
                assert_eq!(at.saturating_since(prev), Span::from_ticks(100_000));
            }
            last = Some(at);
        }
    }

    #[test]
    fn the_queue_limit_in_bytes_drops_the_tail() {
        let mut l = link("10M", QueueLimit::Bytes(10_000), 0.0);
        let t0 = Instant::from_ticks(0);
        let fates: Vec<Offer> = (0..10).map(|_| l.offer(t0, 1500)).collect();
        let delivered = fates
            .iter()
            .filter(|f| matches!(f, Offer::Deliver { .. }))
            .count();
        assert_eq!(delivered, 6); // 6 × 1500 ≤ 10 000 < 7 × 1500
        assert!(fates[6..].iter().all(|f| *f == Offer::QueueFull));
        // Once the first packet has left (1.2 ms at 10 Mbit/s), one more fits.
        let later = t0 + Span::from_ticks(1_200_000);
        assert!(matches!(l.offer(later, 1500), Offer::Deliver { .. }));
        assert_eq!(l.offer(later, 1500), Offer::QueueFull);
    }

    #[test]
    fn random_loss_is_near_its_probability() {
        let mut l = link("1G", QueueLimit::Packets(1_000_000), 0.01);
        let t0 = Instant::from_ticks(0);
        let lost = (0..100_000u64)
            .filter(|i| l.offer(t0 + Span::from_ticks(i * 20_000), 100) == Offer::Lost)
            .count();
        assert!((800..1200).contains(&lost), "{lost}");
    }

    proptest! {
        /// Against a reference: the delivery time is the arrival, plus the wait for every
        /// packet ahead, plus the packet's own transmission, plus the delay; deliveries stay
        /// in order; the queue never holds more than its limit.
        #[test]
        fn deliveries_match_a_reference_queue(
            gaps in proptest::collection::vec(0u64..400_000, 1..300),
            lens in proptest::collection::vec(40u64..1500, 300),
            limit in 1u64..20,
        ) {
            let rate: Rate = "20M".parse().unwrap();
            let mut l = link("20M", QueueLimit::Packets(limit), 0.0);
            let mut now = Instant::from_ticks(1_000);
            let mut reference_busy = now;
            let mut ends: VecDeque<Instant> = VecDeque::new();
            let mut last_at: Option<Instant> = None;
            for (gap, len) in gaps.iter().zip(&lens) {
                now += Span::from_ticks(*gap);
                while ends.front().is_some_and(|e| !e.is_after(now)) {
                    ends.pop_front();
                }
                let fate = l.offer(now, *len);
                if ends.len() as u64 >= limit {
                    prop_assert_eq!(fate, Offer::QueueFull);
                    continue;
                }
                let start = if reference_busy.is_after(now) { reference_busy } else { now };
                let end = start + rate.span_for_bytes(*len, HZ);
                reference_busy = end;
                ends.push_back(end);
                let expected = end + Span::from_ticks(500_000);
                match fate {
                    Offer::Deliver { at, .. } => {
                        prop_assert_eq!(at, expected);
                        if let Some(prev) = last_at {
                            prop_assert!(!prev.is_after(at));
                        }
                        last_at = Some(at);
                    }
                    other => prop_assert!(false, "{:?}", other),
                }
            }
        }
    }
}
