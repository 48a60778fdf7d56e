//! Tail-loss probes: a sub-millisecond recovery timer the driver adds to quinn-proto.
//!
//! When the last packets of a flight are lost, no later packet arrives to reveal the gap, and
//! quinn-proto (as RFC 9002 asks) waits for its probe timeout: srtt + max(4 × rttvar, 1 ms) +
//! the peer's largest ACK delay, 25 ms by default, before it sends anything. A request whose
//! reply lost its last packet takes that long, on any runtime. TCP answers the same case with
//! a tail-loss probe (RACK-TLP, RFC 8985): about two smoothed RTTs after the last
//! transmission, with data still unacknowledged, it resends its last segment, and the ACK of
//! that reveals the loss.
//!
//! The driver does the like from outside quinn-proto: [`TailProbe`] decides when (a pure
//! state machine on the loop's clock), and the probe is a PING (`Connection::ping`; a driver
//! cannot make quinn-proto resend a chosen packet). The PING arrives after the gap, the peer
//! acknowledges it at once (RFC 9000 asks for an immediate ACK of an out-of-order packet), and
//! quinn-proto's time-threshold loss detection declares the lost packet lost and resends its
//! data: one round trip more than TCP's probe takes, and still a few milliseconds rather than
//! 25. Two smoothed RTTs on a 200 µs path is 400 µs, which a timer wheel of 1 ms cannot
//! express; on soft timers it is one more soft event.
//!
//! A peer that delays its ACK of the last, odd packet of a flight (RFC 9000 lets it wait
//! up to its `max_ack_delay`, 25 ms by default, for a second packet) looks, for a while,
//! like a peer that lost it. RFC 8985 (§7.2) adds the peer's worst-case ACK delay to the probe
//! when one segment is in flight, and Linux adds 200 ms (and floors every probe at two
//! jiffies); that would make the probe useless for a lost one-packet request or an odd reply
//! tail, the cases it is for. Here the probe learns the delay instead, per connection, as
//! RACK learns its reordering window (RFC 8985 §6.2): a probe that found no loss (quinn
//! declared none before the connection next sent data) met a peer that was only holding
//! its ACK, or answering later than two smoothed RTTs (a request/response peer acknowledges
//! a reply's tail with its next request); each such probe doubles an allowance added to the
//! probe's wait (from one smoothed RTT, up to [`MAX_ALLOWANCE`], 2 ms, which also bounds the
//! first step where the smoothed RTT is longer), and after 16 probes that found a loss the
//! allowance starts again from nothing. A peer that sends its next request within two
//! smoothed RTTs and 2 ms of a reply so stops drawing a PING (and a wake-up on both sides)
//! per request after a few, and a lost tail is still found within two smoothed RTTs and the
//! learned allowance. A peer that thinks longer, or holds its ACK of an odd tail for its
//! whole `max_ack_delay` (25 ms by default), draws a PING per flight: a probe that waited
//! that out would come no sooner than quinn-proto's own. With the cap at 25 ms, the lab's
//! request/response p99 under 1 % loss fell back to stock quinn's over a 2,000-request run.
//! The allowance is left out of a probe it would put at or past quinn-proto's own probe
//! timeout: where the peer promised a short `max_ack_delay` (1 ms gives a PTO of about
//! srtt + 2 ms), two smoothed RTTs and 2 ms would come after it, and such a flight is probed
//! two smoothed RTTs after its data instead, a PING per flight rather than no earlier probe
//! than quinn-proto's (E16 measures what that does to the request/response p99 with a 1 ms
//! ACK delay; `docs/RESULTS.md` has the figures).
//! [`DriverStats`](crate::DriverStats) counts the probes and those that found a loss.
//!
//! quinn-proto 0.11 does not say how many bytes are unacknowledged (its `bytes_in_flight`
//! is for its own tests, and only the congestion controller hears of it). The driver
//! derives what the probe needs, per connection, from what passes through it: data sent (the
//! counters of ack-eliciting frames in `Connection::stats`, read after each datagram it
//! polls), ACKs processed (the count of ACK frames received, read after each datagram it
//! hands in), and whether data is still outstanding after an ACK, from quinn-proto's next
//! timeout: quinn-proto keeps its loss-detection timer armed exactly while ack-eliciting data
//! is in flight, one PTO after the last of it, and once an ACK leaves nothing outstanding its
//! next timer is the idle timer, at least three PTOs on. That works with any congestion
//! controller.
//!
//! ```
//! use softtimer::{Instant, Span};
//! use softtimer_quic::probe::{Progress, TailProbe};
//!
//! let srtt = Span::from_ticks(200);
//! let mut probe = TailProbe::default();
//! // Data sent at t = 1000 and not yet acknowledged: probe at two smoothed RTTs.
//! probe.observe(Instant::from_ticks(1000), Progress::DATA_SENT, srtt, None);
//! assert_eq!(probe.deadline(), Some(Instant::from_ticks(1400)));
//! assert!(!probe.fire(Instant::from_ticks(1399)));
//! assert!(probe.fire(Instant::from_ticks(1400)));
//! // One probe per flight of new data.
//! assert_eq!(probe.deadline(), None);
//! ```

use softtimer::{Instant, Span};

/// The largest allowance for a peer's late ACK ([`TailProbe::outcome`]): room for a peer's
/// think time between a reply and its next request, not for its delayed ACK (RFC 9000's
/// default `max_ack_delay` is 25 ms, and a probe that late comes no sooner than
/// quinn-proto's own probe timeout).
pub const MAX_ALLOWANCE: std::time::Duration = std::time::Duration::from_millis(2);

/// Probes that found a loss after which the learned allowance starts again from nothing
/// (RACK keeps its grown reordering window for 16 recoveries).
pub const ALLOWANCE_PERSISTS: u32 = 16;

/// What changed on a connection since the driver last looked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Ack-eliciting frames other than PING were sent (new or resent data, control frames).
    pub data_sent: bool,
    /// An ACK was processed.
    pub acked: bool,
    /// After both: whether anything ack-eliciting is still unacknowledged.
    pub outstanding: bool,
}

impl Progress {
    /// Data sent, nothing acknowledged yet.
    pub const DATA_SENT: Progress = Progress {
        data_sent: true,
        acked: false,
        outstanding: true,
    };
    /// An ACK that left nothing outstanding.
    pub const ALL_ACKED: Progress = Progress {
        data_sent: false,
        acked: true,
        outstanding: false,
    };
    /// An ACK after which data is still outstanding.
    pub const PARTLY_ACKED: Progress = Progress {
        data_sent: false,
        acked: true,
        outstanding: true,
    };
}

/// When to send a tail-loss probe: two smoothed RTTs and the learned allowance for the
/// peer's late ACKs after the latest transmission of data or ACK, while data is outstanding;
/// at most one probe per flight of new data (a probe's own PING does not count as data, so
/// probes do not feed themselves), and none once an ACK has left nothing outstanding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TailProbe {
    deadline: Option<Instant>,
    /// Whether the data sent since the last probe may still be probed for.
    budget: bool,
    /// Added to two smoothed RTTs: what the peer's late ACKs have taught.
    allowance: Span,
    /// Probes that found a loss since the allowance last grew.
    found_since_growth: u32,
}

impl TailProbe {
    /// Takes in what changed at `now`, with the connection's smoothed RTT and when
    /// quinn-proto's own probe timeout would fire (`quinn_probe_at`: its next timeout as seen
    /// after the last data sent, which is its loss-detection timer unless another of its
    /// timers comes first), where known. The learned allowance is left out of a probe it
    /// would put at or past that time: quinn-proto probes then anyway, and a peer that
    /// promised a short `max_ack_delay` (so a short PTO) is better probed two smoothed RTTs
    /// after the data than not before quinn-proto does. A time before those two smoothed
    /// RTTs is taken for another of quinn-proto's timers (pacing, an ACK it owes) and does
    /// not count.
    pub fn observe(
        &mut self,
        now: Instant,
        progress: Progress,
        srtt: Span,
        quinn_probe_at: Option<Instant>,
    ) {
        if progress.data_sent {
            self.budget = true;
        } else if progress.acked && !progress.outstanding {
            self.budget = false;
        }
        if !(progress.data_sent || progress.acked) {
            return;
        }
        let early = now + srtt.saturating_mul(2);
        let at = match quinn_probe_at {
            Some(quinn)
                if !quinn.is_before(early) && !(early + self.allowance).is_before(quinn) =>
            {
                early
            }
            _ => early + self.allowance,
        };
        self.deadline = (progress.outstanding && self.budget && !srtt.is_zero()).then_some(at);
    }

    /// When the probe is due, if one is armed.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the probe is due at `now`; if so it is taken (disarmed until new data).
    pub fn fire(&mut self, now: Instant) -> bool {
        match self.deadline {
            Some(at) if !at.is_after(now) => {
                self.deadline = None;
                self.budget = false;
                true
            }
            _ => false,
        }
    }

    /// What the last probe met, once known (when the connection next sends data): a loss,
    /// or a peer that was only late with its ACK, which doubles the allowance (from `srtt`,
    /// up to `max`).
    pub fn outcome(&mut self, found_loss: bool, srtt: Span, max: Span) {
        if found_loss {
            self.found_since_growth += 1;
            if self.found_since_growth >= ALLOWANCE_PERSISTS {
                self.allowance = Span::ZERO;
                self.found_since_growth = 0;
            }
        } else {
            self.allowance = self.allowance.saturating_mul(2).max(srtt).min(max);
            self.found_since_growth = 0;
        }
    }

    /// The allowance for the peer's late ACKs, learned so far.
    pub fn allowance(&self) -> Span {
        self.allowance
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: u64) -> Instant {
        Instant::from_ticks(t)
    }

    const SRTT: Span = Span::from_ticks(100);

    #[test]
    fn data_outstanding_is_probed_two_srtt_after_the_latest_progress() {
        let mut p = TailProbe::default();
        p.observe(at(0), Progress::DATA_SENT, SRTT, None);
        assert_eq!(p.deadline(), Some(at(200)));
        // An ACK that leaves data outstanding moves the probe on.
        p.observe(at(150), Progress::PARTLY_ACKED, SRTT, None);
        assert_eq!(p.deadline(), Some(at(350)));
        assert!(!p.fire(at(349)));
        assert!(p.fire(at(350)));
        assert!(!p.fire(at(351)), "fired twice");
    }

    #[test]
    fn everything_acknowledged_cancels_the_probe() {
        let mut p = TailProbe::default();
        p.observe(at(0), Progress::DATA_SENT, SRTT, None);
        p.observe(at(120), Progress::ALL_ACKED, SRTT, None);
        assert_eq!(p.deadline(), None);
        assert!(!p.fire(at(1000)));
        // Something that is not data left outstanding (an MTU probe, say) and then an ACK
        // arms nothing: the flight it could have probed for is acknowledged.
        p.observe(at(1100), Progress::PARTLY_ACKED, SRTT, None);
        assert_eq!(p.deadline(), None);
    }

    #[test]
    fn one_probe_per_flight_of_new_data() {
        let mut p = TailProbe::default();
        p.observe(at(0), Progress::DATA_SENT, SRTT, None);
        assert!(p.fire(at(200)));
        // The probe's ACK arrives with the lost packet still outstanding: no second probe,
        // quinn-proto's own loss detection takes it from here.
        p.observe(at(320), Progress::PARTLY_ACKED, SRTT, None);
        assert_eq!(p.deadline(), None);
        // The retransmission is new data: it may be probed for again.
        p.observe(at(1000), Progress::DATA_SENT, SRTT, None);
        assert_eq!(p.deadline(), Some(at(1200)));
    }

    #[test]
    fn probes_that_meet_a_late_ack_teach_an_allowance_and_losses_end_it() {
        let max = Span::from_ticks(1000);
        let mut p = TailProbe::default();
        // Each probe that found no loss doubles the wait after two smoothed RTTs, from one.
        for want in [100, 200, 400, 800, 1000, 1000] {
            p.outcome(false, SRTT, max);
            assert_eq!(p.allowance(), Span::from_ticks(want));
        }
        p.observe(at(0), Progress::DATA_SENT, SRTT, None);
        assert_eq!(p.deadline(), Some(at(1200)));
        // Losses found keep it for a while, then it starts again from nothing.
        for _ in 1..ALLOWANCE_PERSISTS {
            p.outcome(true, SRTT, max);
        }
        assert_eq!(p.allowance(), max);
        p.outcome(true, SRTT, max);
        assert_eq!(p.allowance(), Span::ZERO);
        p.observe(at(0), Progress::DATA_SENT, SRTT, None);
        assert_eq!(p.deadline(), Some(at(200)));
    }

    #[test]
    fn an_allowance_that_would_reach_quinns_probe_timeout_is_left_out() {
        let mut p = TailProbe::default();
        for _ in 0..4 {
            p.outcome(false, SRTT, Span::from_ticks(1000));
        }
        assert_eq!(p.allowance(), Span::from_ticks(800));
        // quinn-proto's probe at 2,000: two smoothed RTTs and the allowance come before it.
        p.observe(at(0), Progress::DATA_SENT, SRTT, Some(at(2000)));
        assert_eq!(p.deadline(), Some(at(1000)));
        // A peer that asked for a short ACK delay, so quinn-proto probes at 900: two smoothed
        // RTTs alone, which still come before it.
        p.observe(at(0), Progress::DATA_SENT, SRTT, Some(at(900)));
        assert_eq!(p.deadline(), Some(at(200)));
        // Measured from an ACK that leaves data outstanding, against the same timer: 300 + 200
        // + 800 would pass it.
        p.observe(at(300), Progress::PARTLY_ACKED, SRTT, Some(at(1200)));
        assert_eq!(p.deadline(), Some(at(500)));
        // A timeout of quinn-proto's before two smoothed RTTs (its pacing timer, say) is not
        // its probe: the allowance stays.
        p.observe(at(0), Progress::DATA_SENT, SRTT, Some(at(150)));
        assert_eq!(p.deadline(), Some(at(1000)));
        // The allowance is kept for the next flight.
        assert_eq!(p.allowance(), Span::from_ticks(800));
    }

    #[test]
    fn nothing_new_leaves_the_deadline_alone_and_no_rtt_sample_arms_nothing() {
        let mut p = TailProbe::default();
        p.observe(at(0), Progress::DATA_SENT, SRTT, None);
        let quiet = Progress {
            data_sent: false,
            acked: false,
            outstanding: true,
        };
        p.observe(at(50), quiet, SRTT, None);
        assert_eq!(p.deadline(), Some(at(200)));
        let mut fresh = TailProbe::default();
        fresh.observe(at(0), Progress::DATA_SENT, Span::from_ticks(0), None);
        assert_eq!(fresh.deadline(), None);
    }
}
