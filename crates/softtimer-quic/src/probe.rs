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
//! There is no allowance for a delayed ACK. RFC 8985 adds the peer's worst-case ACK delay
//! when a single segment is out, and Linux 200 ms, which would make the probe useless for a
//! lost one-packet request; here a peer that is only delaying its ACK of an odd last packet
//! gets a PING it did not need (it then holds two unacknowledged packets and acknowledges
//! both at once). [`DriverStats`](crate::DriverStats) counts the probes and those that found
//! a loss.
//!
//! quinn-proto does not say how many bytes are unacknowledged, but it tells its congestion
//! controller after every ACK. [`FlightTracking`] wraps a controller factory so that each
//! controller it builds also records that figure where the driver can find it (keyed by the
//! controller's address, which `Connection::congestion_state` reveals). [`Tuning`] wraps
//! its controller this way; a connection whose controller is not wrapped gets no probes.
//!
//! ```
//! use softtimer::{Instant, Span};
//! use softtimer_quic::probe::{Progress, TailProbe};
//!
//! let srtt = Span::from_ticks(200);
//! let mut probe = TailProbe::default();
//! // Data sent at t = 1000 and not yet acknowledged: probe at two smoothed RTTs.
//! probe.observe(Instant::from_ticks(1000), Progress::DATA_SENT, srtt);
//! assert_eq!(probe.deadline(), Some(Instant::from_ticks(1400)));
//! assert!(!probe.fire(Instant::from_ticks(1399)));
//! assert!(probe.fire(Instant::from_ticks(1400)));
//! // One probe per flight of new data.
//! assert_eq!(probe.deadline(), None);
//! ```
//!
//! [`Tuning`]: crate::tls::Tuning

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant as StdInstant;

use quinn_proto::RttEstimator;
use quinn_proto::congestion::{Controller, ControllerFactory, ControllerMetrics};
use softtimer::{Instant, Span};

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

/// When to send a tail-loss probe: two smoothed RTTs after the latest transmission of data
/// or ACK, while data is outstanding; at most one probe per flight of new data (a probe's own
/// PING does not count as data, so probes do not feed themselves), and none once an ACK has
/// left nothing outstanding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TailProbe {
    deadline: Option<Instant>,
    /// Whether the data sent since the last probe may still be probed for.
    budget: bool,
}

impl TailProbe {
    /// Takes in what changed at `now`, with the connection's smoothed RTT.
    pub fn observe(&mut self, now: Instant, progress: Progress, srtt: Span) {
        if progress.data_sent {
            self.budget = true;
        } else if progress.acked && !progress.outstanding {
            self.budget = false;
        }
        if !(progress.data_sent || progress.acked) {
            return;
        }
        self.deadline = (progress.outstanding && self.budget && !srtt.is_zero())
            .then(|| now + srtt.saturating_mul(2));
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
}

/// What a tracked controller saw of its connection's flight, for the driver.
#[derive(Debug, Default)]
pub(crate) struct Flight {
    /// Unacknowledged bytes in flight after the latest ACK.
    in_flight: AtomicU64,
    /// ACKs processed so far.
    acks: AtomicU64,
}

impl Flight {
    /// Bytes in flight after the latest ACK, and how many ACKs have been processed.
    pub(crate) fn read(&self) -> (u64, u64) {
        (
            self.in_flight.load(Ordering::Relaxed),
            self.acks.load(Ordering::Relaxed),
        )
    }
}

/// Live tracked controllers by address. quinn-proto keeps each controller boxed, so its
/// address is stable for its life; it is removed when the controller is dropped.
static FLIGHTS: LazyLock<Mutex<HashMap<usize, Arc<Flight>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn flights() -> std::sync::MutexGuard<'static, HashMap<usize, Arc<Flight>>> {
    // A panic elsewhere while holding the lock leaves a map that is still consistent.
    FLIGHTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The address that identifies a controller: the data pointer of the trait object.
pub(crate) fn controller_key(controller: &dyn Controller) -> usize {
    controller as *const dyn Controller as *const () as usize
}

/// The flight record of the controller at `key`, if it is a tracked one.
pub(crate) fn flight_at(key: usize) -> Option<Arc<Flight>> {
    flights().get(&key).cloned()
}

/// Wraps a congestion controller factory so that the driver can see each connection's
/// unacknowledged bytes; the controllers behave exactly as the wrapped ones.
///
/// ```
/// use std::sync::Arc;
/// use quinn_proto::congestion::CubicConfig;
/// use softtimer_quic::probe::FlightTracking;
///
/// let mut transport = quinn_proto::TransportConfig::default();
/// transport.congestion_controller_factory(Arc::new(FlightTracking::new(Arc::new(
///     CubicConfig::default(),
/// ))));
/// ```
pub struct FlightTracking {
    inner: Arc<dyn ControllerFactory + Send + Sync>,
}

impl std::fmt::Debug for FlightTracking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlightTracking").finish_non_exhaustive()
    }
}

impl FlightTracking {
    /// Tracks the controllers `inner` builds.
    pub fn new(inner: Arc<dyn ControllerFactory + Send + Sync>) -> FlightTracking {
        FlightTracking { inner }
    }
}

impl ControllerFactory for FlightTracking {
    fn build(self: Arc<Self>, now: StdInstant, current_mtu: u16) -> Box<dyn Controller> {
        Tracked::boxed(Arc::clone(&self.inner).build(now, current_mtu))
    }
}

struct Tracked {
    inner: Box<dyn Controller>,
    flight: Arc<Flight>,
}

impl Tracked {
    fn boxed(inner: Box<dyn Controller>) -> Box<dyn Controller> {
        let flight = Arc::new(Flight::default());
        let tracked: Box<dyn Controller> = Box::new(Tracked {
            inner,
            flight: Arc::clone(&flight),
        });
        flights().insert(controller_key(tracked.as_ref()), flight);
        tracked
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        let key = self as *const Tracked as *const () as usize;
        flights().remove(&key);
    }
}

impl Controller for Tracked {
    fn on_sent(&mut self, now: StdInstant, bytes: u64, last_packet_number: u64) {
        self.inner.on_sent(now, bytes, last_packet_number);
    }

    fn on_ack(
        &mut self,
        now: StdInstant,
        sent: StdInstant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.inner.on_ack(now, sent, bytes, app_limited, rtt);
    }

    fn on_end_acks(
        &mut self,
        now: StdInstant,
        in_flight: u64,
        app_limited: bool,
        largest_packet_num_acked: Option<u64>,
    ) {
        self.flight.in_flight.store(in_flight, Ordering::Relaxed);
        self.flight.acks.fetch_add(1, Ordering::Relaxed);
        self.inner
            .on_end_acks(now, in_flight, app_limited, largest_packet_num_acked);
    }

    fn on_congestion_event(
        &mut self,
        now: StdInstant,
        sent: StdInstant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.inner
            .on_congestion_event(now, sent, is_persistent_congestion, lost_bytes);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.inner.on_mtu_update(new_mtu);
    }

    fn window(&self) -> u64 {
        self.inner.window()
    }

    fn metrics(&self) -> ControllerMetrics {
        self.inner.metrics()
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Tracked::boxed(self.inner.clone_box())
    }

    fn initial_window(&self) -> u64 {
        self.inner.initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
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
        p.observe(at(0), Progress::DATA_SENT, SRTT);
        assert_eq!(p.deadline(), Some(at(200)));
        // An ACK that leaves data outstanding moves the probe on.
        p.observe(at(150), Progress::PARTLY_ACKED, SRTT);
        assert_eq!(p.deadline(), Some(at(350)));
        assert!(!p.fire(at(349)));
        assert!(p.fire(at(350)));
        assert!(!p.fire(at(351)), "fired twice");
    }

    #[test]
    fn everything_acknowledged_cancels_the_probe() {
        let mut p = TailProbe::default();
        p.observe(at(0), Progress::DATA_SENT, SRTT);
        p.observe(at(120), Progress::ALL_ACKED, SRTT);
        assert_eq!(p.deadline(), None);
        assert!(!p.fire(at(1000)));
        // Something that is not data left outstanding (an MTU probe, say) and then an ACK
        // arms nothing: the flight it could have probed for is acknowledged.
        p.observe(at(1100), Progress::PARTLY_ACKED, SRTT);
        assert_eq!(p.deadline(), None);
    }

    #[test]
    fn one_probe_per_flight_of_new_data() {
        let mut p = TailProbe::default();
        p.observe(at(0), Progress::DATA_SENT, SRTT);
        assert!(p.fire(at(200)));
        // The probe's ACK arrives with the lost packet still outstanding: no second probe,
        // quinn-proto's own loss detection takes it from here.
        p.observe(at(320), Progress::PARTLY_ACKED, SRTT);
        assert_eq!(p.deadline(), None);
        // The retransmission is new data: it may be probed for again.
        p.observe(at(1000), Progress::DATA_SENT, SRTT);
        assert_eq!(p.deadline(), Some(at(1200)));
    }

    #[test]
    fn nothing_new_leaves_the_deadline_alone_and_no_rtt_sample_arms_nothing() {
        let mut p = TailProbe::default();
        p.observe(at(0), Progress::DATA_SENT, SRTT);
        let quiet = Progress {
            data_sent: false,
            acked: false,
            outstanding: true,
        };
        p.observe(at(50), quiet, SRTT);
        assert_eq!(p.deadline(), Some(at(200)));
        let mut fresh = TailProbe::default();
        fresh.observe(at(0), Progress::DATA_SENT, Span::from_ticks(0));
        assert_eq!(fresh.deadline(), None);
    }

    #[test]
    fn a_tracked_controller_reports_its_flight_until_dropped() {
        let factory = Arc::new(FlightTracking::new(Arc::new(
            quinn_proto::congestion::CubicConfig::default(),
        )));
        let now = StdInstant::now();
        let mut controller = factory.build(now, 1200);
        let key = controller_key(controller.as_ref());
        let flight = flight_at(key).expect("registered");
        assert_eq!(flight.read(), (0, 0));
        controller.on_end_acks(now, 3600, false, Some(7));
        assert_eq!(flight.read(), (3600, 1));
        let copy = controller.clone_box();
        let copy_key = controller_key(copy.as_ref());
        assert_ne!(copy_key, key);
        let copy_flight = flight_at(copy_key).expect("registered");
        // Other tests build controllers too, and one may reuse a freed address: what must
        // be gone is this controller's record.
        let gone = |key: usize, flight: &Arc<Flight>| {
            flight_at(key).is_none_or(|f| !Arc::ptr_eq(&f, flight))
        };
        drop(controller);
        assert!(gone(key, &flight), "still registered after drop");
        drop(copy);
        assert!(gone(copy_key, &copy_flight));
    }
}
