//! What a sender does after an idle period, as a quinn-proto congestion controller.
//!
//! The TCP paper's Section V (rate-based clocking after idle): a connection that was idle
//! for longer than its retransmission timeout either restarts slow start from the initial
//! window (what RFC 5681 asks of TCP, and Linux does with `tcp_slow_start_after_idle`), or,
//! with rate-based clocking, resumes at the rate it measured before the idle period: its
//! window is that rate times the RTT, and the pacer spreads the window at that rate instead
//! of bursting it. [`AfterIdleFactory`] wraps quinn-proto's CUBIC with either behaviour;
//! between idle periods it is CUBIC unchanged.
//!
//! ```
//! use std::sync::Arc;
//! use softtimer_quic::idle::{AfterIdle, AfterIdleFactory};
//! use softtimer_quic::tls::Tuning;
//!
//! let tuning = Tuning {
//!     controller: Arc::new(AfterIdleFactory::new(AfterIdle::RateBased)),
//!     ..Tuning::default()
//! };
//! assert!(tuning.transport().is_ok());
//! ```

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn_proto::RttEstimator;
use quinn_proto::congestion::{Controller, ControllerFactory, CubicConfig};

/// The least idle time that counts as an idle period (Linux's minimum RTO).
pub const MIN_IDLE: Duration = Duration::from_millis(200);

/// What to do after an idle period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterIdle {
    /// Nothing: quinn-proto's CUBIC keeps its window (RFC 9002 does not ask for a restart).
    Keep,
    /// Slow-start restart: back to the initial window.
    SlowStart,
    /// Rate-based clocking: the window becomes the delivery rate measured before the idle
    /// period times the RTT, paced out at that rate.
    RateBased,
}

/// Builds [`AfterIdle`] controllers around quinn-proto's CUBIC.
#[derive(Debug)]
pub struct AfterIdleFactory {
    mode: AfterIdle,
    cubic: Arc<CubicConfig>,
}

impl AfterIdleFactory {
    /// CUBIC with its default settings, and `mode` after idle.
    pub fn new(mode: AfterIdle) -> Self {
        AfterIdleFactory {
            mode,
            cubic: Arc::new(CubicConfig::default()),
        }
    }
}

impl ControllerFactory for AfterIdleFactory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        let inner = Arc::clone(&self.cubic).build(now, current_mtu);
        Box::new(AfterIdleController {
            mode: self.mode,
            cubic: Arc::clone(&self.cubic),
            inner,
            mtu: current_mtu,
            last_activity: None,
            srtt: Duration::ZERO,
            idle_after: MIN_IDLE,
            meter_start: None,
            meter_bytes: 0,
            delivery_rate: None,
            restarts: 0,
        })
    }
}

struct AfterIdleController {
    mode: AfterIdle,
    cubic: Arc<CubicConfig>,
    inner: Box<dyn Controller>,
    mtu: u16,
    last_activity: Option<Instant>,
    srtt: Duration,
    idle_after: Duration,
    meter_start: Option<Instant>,
    meter_bytes: u64,
    /// Bytes per second delivered over the last full RTT that was not application-limited.
    delivery_rate: Option<f64>,
    restarts: u64,
}

impl AfterIdleController {
    fn restart(&mut self, now: Instant) {
        self.restarts += 1;
        match self.mode {
            AfterIdle::Keep => {}
            AfterIdle::SlowStart => {
                self.inner = Arc::clone(&self.cubic).build(now, self.mtu);
            }
            AfterIdle::RateBased => {
                // A fresh CUBIC whose window is the measured rate × RTT: it grows from there
                // as CUBIC does, and the pacer spreads it at the rate.
                let Some(rate) = self.delivery_rate else {
                    return;
                };
                let window = (rate * self.srtt.as_secs_f64()) as u64;
                let mut config = CubicConfig::default();
                config.initial_window(window.max(self.inner.initial_window()));
                self.inner = Arc::new(config).build(now, self.mtu);
            }
        }
        self.meter_start = None;
        self.meter_bytes = 0;
    }
}

impl AfterIdleController {
    /// An acknowledgement of `bytes` at `now` with the smoothed RTT `srtt`: the delivery
    /// rate over each full RTT that was not application-limited, and the idle threshold.
    fn note_ack(&mut self, now: Instant, bytes: u64, app_limited: bool, srtt: Duration) {
        self.srtt = srtt;
        self.idle_after = MIN_IDLE.max(srtt * 2);
        self.last_activity = Some(now);
        let start = *self.meter_start.get_or_insert(now);
        self.meter_bytes += bytes;
        let elapsed = now.saturating_duration_since(start);
        if elapsed >= self.srtt && !elapsed.is_zero() {
            if !app_limited {
                self.delivery_rate = Some(self.meter_bytes as f64 / elapsed.as_secs_f64());
            }
            self.meter_start = Some(now);
            self.meter_bytes = 0;
        }
    }
}

impl Controller for AfterIdleController {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        if let Some(last) = self.last_activity
            && now.saturating_duration_since(last) > self.idle_after
        {
            self.restart(now);
        }
        self.last_activity = Some(now);
        self.inner.on_sent(now, bytes, last_packet_number);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.note_ack(now, bytes, app_limited, rtt.get());
        self.inner.on_ack(now, sent, bytes, app_limited, rtt);
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        largest_packet_num_acked: Option<u64>,
    ) {
        self.inner
            .on_end_acks(now, in_flight, app_limited, largest_packet_num_acked);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.inner
            .on_congestion_event(now, sent, is_persistent_congestion, lost_bytes);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.mtu = new_mtu;
        self.inner.on_mtu_update(new_mtu);
    }

    fn window(&self) -> u64 {
        self.inner.window()
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(AfterIdleController {
            mode: self.mode,
            cubic: Arc::clone(&self.cubic),
            inner: self.inner.clone_box(),
            mtu: self.mtu,
            last_activity: self.last_activity,
            srtt: self.srtt,
            idle_after: self.idle_after,
            meter_start: self.meter_start,
            meter_bytes: self.meter_bytes,
            delivery_rate: self.delivery_rate,
            restarts: self.restarts,
        })
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

    const MTU: u16 = 1200;

    fn controller(mode: AfterIdle, now: Instant) -> AfterIdleController {
        let boxed = Arc::new(AfterIdleFactory::new(mode)).build(now, MTU);
        *boxed
            .into_any()
            .downcast::<AfterIdleController>()
            .expect("the factory builds its own controller")
    }

    /// A window well above the initial one, as after a transfer's slow start (CUBIC's own
    /// growth needs quinn-proto's RTT estimator, which only quinn-proto can make).
    const GROWN_WINDOW: u64 = 400_000;

    /// Sends and acknowledges `rate` bytes/s for one second in 1 ms steps at RTT 100 ms with
    /// a grown window, then stays idle for `idle` and sends once more; returns the window
    /// before and after that send, and the idle periods the controller counted.
    fn busy_then_idle(mode: AfterIdle, rate: u64, idle: Duration) -> (u64, u64, u64) {
        let t0 = Instant::now();
        let mut c = controller(mode, t0);
        let mut grown = CubicConfig::default();
        grown.initial_window(GROWN_WINDOW);
        c.inner = Arc::new(grown).build(t0, MTU);
        let srtt = Duration::from_millis(100);
        let per_ms = rate / 1000;
        let mut now = t0;
        for pn in 0..1000 {
            now += Duration::from_millis(1);
            c.on_sent(now, per_ms, pn);
            c.note_ack(now, per_ms, false, srtt);
        }
        let before = c.window();
        c.on_sent(now + idle, per_ms, 1000);
        (before, c.window(), c.restarts)
    }

    #[test]
    fn rate_based_clocking_resumes_at_the_rate_measured_before_idle() {
        // 6.25 MB/s (50 Mbit/s) at RTT 100 ms: a window of 625 KB.
        let (_, after, restarts) =
            busy_then_idle(AfterIdle::RateBased, 6_250_000, Duration::from_secs(1));
        assert_eq!(restarts, 1);
        let bdp = 625_000.0;
        assert!(
            (after as f64 - bdp).abs() <= 0.02 * bdp,
            "window {after} after idle, against the measured rate × RTT {bdp}"
        );
    }

    #[test]
    fn slow_start_restart_goes_back_to_the_initial_window() {
        let (before, after, restarts) =
            busy_then_idle(AfterIdle::SlowStart, 6_250_000, Duration::from_secs(1));
        assert_eq!((restarts, before), (1, GROWN_WINDOW));
        let initial = controller(AfterIdle::SlowStart, Instant::now()).initial_window();
        assert!(initial < GROWN_WINDOW / 10);
        assert_eq!(after, initial);
    }

    #[test]
    fn keep_and_short_pauses_leave_the_window_alone() {
        let (before, after, restarts) =
            busy_then_idle(AfterIdle::Keep, 6_250_000, Duration::from_secs(1));
        assert_eq!((restarts, before, after), (1, GROWN_WINDOW, GROWN_WINDOW));
        // A pause shorter than two RTTs (and than the 200 ms floor) is no idle period.
        let (_, after, restarts) =
            busy_then_idle(AfterIdle::SlowStart, 6_250_000, Duration::from_millis(150));
        assert_eq!((restarts, after), (0, GROWN_WINDOW));
    }

    #[test]
    fn an_application_limited_rate_is_not_resumed() {
        // Only application-limited acknowledgements: no rate measured, so rate-based
        // clocking has nothing to resume at and keeps CUBIC's window.
        let t0 = Instant::now();
        let mut c = controller(AfterIdle::RateBased, t0);
        let mut grown = CubicConfig::default();
        grown.initial_window(GROWN_WINDOW);
        c.inner = Arc::new(grown).build(t0, MTU);
        let mut now = t0;
        for pn in 0..500 {
            now += Duration::from_millis(1);
            c.on_sent(now, 1200, pn);
            c.note_ack(now, 1200, true, Duration::from_millis(20));
        }
        let before = c.window();
        c.on_sent(now + Duration::from_secs(1), 1200, 500);
        assert_eq!(c.delivery_rate, None);
        assert_eq!(
            (c.restarts, before, c.window()),
            (1, GROWN_WINDOW, GROWN_WINDOW)
        );
    }
}
