//! A UDP flow the server's event handler sends while the server serves (E6, E7), and the
//! receiver that counts it.

use std::io::IoSlice;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use softtimer::{Fired, SoftTimers, Span};
use softtimer_rt::send_all;
use softtimers_tools::cpu::{CLIENT_CPU, pin_to};
use softtimers_tools::pace::SendCounters;

/// A UDP flow the server's event handler sends while the server serves (E6, E7): one
/// datagram of `size` bytes per event, to a receiver on the load generator's CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaceLoad {
    /// How the datagrams are clocked.
    pub clocking: Clocking,
    /// The target interval between datagrams, µs.
    pub target_interval_us: u64,
    /// UDP payload bytes.
    pub size: usize,
}

/// How a [`PaceLoad`] is clocked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Clocking {
    /// The adaptive pacer on soft timers: the next datagram at the target interval, or at
    /// `min_interval_us` while the flow is behind its target rate.
    Adaptive {
        /// The shortest interval allowed (the burst rate), µs.
        min_interval_us: u64,
    },
    /// One datagram per expiry of the setup's hardware timer, at the target interval (the
    /// expiries a late wake-up missed included, up to 64).
    PerExpiry,
    /// No pacing: the datagrams the target rate makes due, sent back to back every 1 ms (as
    /// a window is sent without rate-based clocking).
    Bursts,
}

/// The paced flow's state, reached from the event handler (which may run in signal
/// context: sends are single system calls, the counters are `pace`'s lock-free ones, and the pacer's lock
/// is taken only by the soft handler, never in a signal handler).
pub(crate) struct PaceSender {
    socket: std::net::UdpSocket,
    packet: Vec<u8>,
    load: PaceLoad,
    pacer: std::sync::Mutex<softtimer_net::pacer::FlowPacer>,
    interval: Span,
    start: AtomicU64,
    counters: SendCounters,
    hz: u64,
}

impl PaceSender {
    pub(crate) fn new(load: PaceLoad, to: SocketAddr, hz: u64) -> Result<Self> {
        use softtimer_net::{Rate, pacer};
        let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
        socket.connect(to)?;
        let bytes = load.size as u64;
        let target = Rate::from_packet_interval(bytes, load.target_interval_us * 1000)?;
        let burst = match load.clocking {
            Clocking::Adaptive { min_interval_us } => {
                Rate::from_packet_interval(bytes, min_interval_us.max(1) * 1000)?.max(target)
            }
            _ => target,
        };
        Ok(PaceSender {
            socket,
            packet: vec![0u8; load.size],
            load,
            pacer: std::sync::Mutex::new(pacer::FlowPacer::new(
                pacer::PacerConfig::new(target, burst)?,
                hz,
            )),
            interval: Span::from_micros(load.target_interval_us, hz),
            start: AtomicU64::new(u64::MAX),
            counters: SendCounters::default(),
            hz,
        })
    }

    /// Sends one datagram at `now`, counting it (a refused one is not counted).
    fn send_one(&self, now: softtimer::Instant) {
        if send_all(&self.socket, &[&[IoSlice::new(&self.packet)]], true).sent == 0 {
            return;
        }
        let at_ns = Span::from_ticks(now.ticks()).as_nanos(self.hz);
        let c = &self.counters;
        let gap_ns = (c.packets() > 0).then(|| at_ns.saturating_sub(c.last_ns()));
        c.sent(at_ns, gap_ns);
    }

    /// The event handler's work: send, then re-arm by the clocking rule.
    pub(crate) fn on_event(&self, timers: &mut SoftTimers<()>, ev: &Fired<()>) {
        let now = ev.now;
        let next = match self.load.clocking {
            Clocking::PerExpiry => {
                // One datagram per expiry, those of expiries the loop saw late included (a
                // timerfd read returns how many expired; the schedule says the same).
                let mut due = ev.due;
                for _ in 0..64 {
                    self.send_one(now);
                    due += self.interval;
                    if due.is_after(now) {
                        break;
                    }
                }
                if !due.is_after(now) {
                    // Still behind after 64: the remaining expiries are dropped, as a
                    // timer's overruns beyond what one read handles are. Re-arming in the
                    // past would fire the event again in the same pass, and a sender slower
                    // than its interval would never leave it.
                    let step = self.interval.ticks().max(1);
                    let missed = now.saturating_since(due).ticks() / step + 1;
                    due += Span::from_ticks(missed * step);
                }
                due
            }
            Clocking::Adaptive { .. } => {
                self.send_one(now);
                match self.pacer.try_lock() {
                    Ok(mut p) => p.on_sent(now, self.load.size as u64),
                    Err(_) => now + self.interval,
                }
            }
            Clocking::Bursts => {
                let start = match self.start.load(Ordering::Relaxed) {
                    u64::MAX => {
                        self.start.store(now.ticks(), Ordering::Relaxed);
                        now.ticks()
                    }
                    s => s,
                };
                let elapsed = now.ticks().saturating_sub(start);
                let due = elapsed / self.interval.ticks().max(1) + 1;
                while self.counters.packets() < due {
                    let before = self.counters.packets();
                    self.send_one(now);
                    if self.counters.packets() == before {
                        break;
                    }
                }
                ev.due + Span::from_micros(1000, self.hz)
            }
        };
        let _ = timers.schedule_at(next, ());
    }
}

/// What a paced flow achieved over a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct PaceOutcome {
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams the receiver got.
    pub received: u64,
    /// Mean interval between sends, µs.
    pub mean_interval_us: f64,
    /// Standard deviation of the intervals, µs.
    pub stddev_interval_us: f64,
}

impl PaceSender {
    pub(crate) fn outcome(&self, received: u64) -> PaceOutcome {
        let s = self.counters.summary();
        PaceOutcome {
            sent: s.packets,
            received,
            mean_interval_us: s.gap_mean_us,
            stddev_interval_us: s.gap_stddev_us,
        }
    }
}

/// Receives a paced flow on the load generator's CPU, waking every millisecond to take
/// what came in one `recvmmsg` batch, and counts it.
pub(crate) fn drain_udp(
    mut rx: softtimer_net::udp::TimestampedReceiver,
    stop: Arc<AtomicBool>,
) -> Result<u64> {
    let _pin = pin_to(CLIENT_CPU);
    rx.set_timeout(Duration::from_millis(20))?;
    let mut received = 0u64;
    loop {
        let n = rx.recv_batch()? as u64;
        received += n;
        if n == 0 && stop.load(Ordering::Relaxed) {
            return Ok(received);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
