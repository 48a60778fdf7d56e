//! Two drivers against each other on a simulated clock, through an in-memory link with a
//! delay, a rate and seeded loss: no socket, no sleep, no thread.
//!
//! [`Net`] runs the loop a [`QuicSocket`](crate::QuicSocket) runs, with the link in place of
//! the socket: at each step it hands every due timeout and every arrived datagram to its
//! driver, gives each application its turn, puts every transmit on the link, and moves the
//! [`SimClock`] to the next thing that happens. Every datagram is written down in a
//! [`Sent`] transcript; with a seeded driver ([`DriverConfig::rng_seed`](crate::DriverConfig))
//! and an Ed25519 certificate the transcript is the same on every run.
//!
//! ```
//! use std::time::Duration;
//! use softtimer::SimClock;
//! use softtimer_quic::perf::{ClientPlan, PerfClient, PerfServer};
//! use softtimer_quic::sim::{LinkConfig, Net, Side};
//! use softtimer_quic::tls::{Identity, Trust, Tuning, client_config, server_config};
//! use softtimer_quic::{Driver, DriverConfig};
//!
//! let clock = SimClock::new(1_000_000_000);
//! let identity = Identity::self_signed_ed25519(&["localhost"]).unwrap();
//! let server = server_config(&identity, &Tuning::default()).unwrap();
//! let config = DriverConfig { rng_seed: Some([7; 32]), ..DriverConfig::default() };
//! let server = Driver::new(clock.clone(), config.clone(), Some(server)).unwrap();
//! let mut client = Driver::new(clock.clone(), config, None).unwrap();
//! let server_addr = "10.0.0.2:4433".parse().unwrap();
//! let tls = client_config(&Trust::Cert(identity.cert.clone()), &Tuning::default()).unwrap();
//! let conn = client.connect(tls, server_addr, "localhost").unwrap();
//! let plan = ClientPlan { download: 100_000, ..ClientPlan::default() };
//! let app = PerfClient::new(plan, conn, client.latest());
//! let mut net = Net::new(
//!     clock,
//!     Side::new(client, app, "10.0.0.1:5000".parse().unwrap()),
//!     Side::new(server, PerfServer::new(None), server_addr),
//!     LinkConfig { delay: Duration::from_millis(5), ..LinkConfig::default() },
//! );
//! net.run_for(Duration::from_secs(5), |net| net.a.stopped);
//! assert!(net.a.app.succeeded());
//! assert_eq!(net.a.app.report.download_bytes, 100_000);
//! ```

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use softtimer::{Clock, Instant, SimClock, Span};

use crate::{App, Driver, Transmit};

/// One direction of the in-memory link.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub delay: Duration,
    /// The bottleneck's rate, bit/s (`None`: no serialisation delay).
    pub rate_bps: Option<u64>,
    /// The chance that a datagram is lost, 0 to 1.
    pub loss: f64,
    /// Seed of the loss draws.
    pub seed: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            delay: Duration::from_micros(100),
            rate_bps: None,
            loss: 0.0,
            seed: 1,
        }
    }
}

/// Which side sent a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum From {
    /// Side `a` (to `b`).
    A,
    /// Side `b` (to `a`).
    B,
}

/// A datagram the link carried (or lost), as the transcript has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// Its place among the datagrams its side sent, from 0.
    pub index: u64,
    /// Who sent it.
    pub from: From,
    /// When it was handed to the link.
    pub at: Instant,
    /// When it was due to leave ([`Transmit::departure`]).
    pub departure: Instant,
    /// Its size.
    pub size: usize,
    /// When it arrives; `None` if it was lost.
    pub arrives: Option<Instant>,
    /// Its bytes, when [`Net::keep_bytes`] is set (they differ from run to run).
    pub bytes: Option<Vec<u8>>,
}

struct InFlight {
    arrives: Instant,
    from: SocketAddr,
    bytes: Vec<u8>,
}

/// One direction of the link: a FIFO with a delay, a rate and seeded loss.
struct Link {
    config: LinkConfig,
    hz: u64,
    queue: VecDeque<InFlight>,
    busy_until: Instant,
    rng: SmallRng,
}

impl Link {
    fn new(config: LinkConfig, hz: u64) -> Link {
        Link {
            rng: SmallRng::seed_from_u64(config.seed),
            config,
            hz,
            queue: VecDeque::new(),
            busy_until: Instant::from_ticks(0),
        }
    }

    /// Carries one datagram from `from`, sent at `now`; returns when it arrives, unless lost.
    fn carry(
        &mut self,
        now: Instant,
        from: SocketAddr,
        bytes: Vec<u8>,
        drop: bool,
    ) -> Option<Instant> {
        let start = if self.busy_until.is_after(now) {
            self.busy_until
        } else {
            now
        };
        let done = match self.config.rate_bps {
            Some(rate) if rate > 0 => {
                let ns = (bytes.len() as u128 * 8 * 1_000_000_000).div_ceil(u128::from(rate));
                start + Span::from_duration(Duration::from_nanos(ns as u64), self.hz)
            }
            _ => start,
        };
        self.busy_until = done;
        let lost = drop || (self.config.loss > 0.0 && self.rng.random::<f64>() < self.config.loss);
        if lost {
            return None;
        }
        let arrives = done + Span::from_duration(self.config.delay, self.hz);
        self.queue.push_back(InFlight {
            arrives,
            from,
            bytes,
        });
        Some(arrives)
    }

    fn next_arrival(&self) -> Option<Instant> {
        self.queue.front().map(|d| d.arrives)
    }
}

/// A run of a simulation for at most a limit of simulated time: after each step, the clock
/// moves on to the earliest thing due ([`SimRun::advance`]). [`Net::run_for`] is one; a
/// harness of its own (other links, other measurements) makes another the same way.
///
/// ```
/// use std::time::Duration;
/// use softtimer::{Clock, SimClock, Span};
/// use softtimer_quic::sim::SimRun;
///
/// let clock = SimClock::new(1_000_000_000);
/// let start = clock.now();
/// let ms = |n| Span::from_duration(Duration::from_millis(n), clock.resolution_hz());
/// let mut run = SimRun::new(&clock, Duration::from_millis(10));
/// // Something is due in 1 ms: the clock moves there.
/// assert!(run.advance(&clock, Some(start + ms(1))));
/// assert_eq!(clock.now(), start + ms(1));
/// // The next thing is due after the run's end: the run ends, the clock at its end.
/// assert!(!run.advance(&clock, Some(start + ms(20))));
/// assert_eq!(clock.now(), start + ms(10));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SimRun {
    end: Instant,
    /// Steps in a row at one time.
    stuck: u32,
}

impl SimRun {
    /// A run of at most `limit` from `clock`'s time now.
    pub fn new(clock: &SimClock, limit: Duration) -> SimRun {
        SimRun {
            end: clock.now() + Span::from_duration(limit, clock.resolution_hz()),
            stuck: 0,
        }
    }

    /// Moves `clock` on to `next`, the earliest time anything is due; `false` (the clock set
    /// to the run's end) when nothing is due before the end. Something due now that two
    /// steps in a row did not take (a driver that cannot, at this time) moves the clock on
    /// by a tick rather than loop.
    pub fn advance(&mut self, clock: &SimClock, next: Option<Instant>) -> bool {
        let Some(next) = next.filter(|n| !n.is_after(self.end)) else {
            clock.set(self.end.ticks());
            return false;
        };
        if next.is_after(clock.now()) {
            clock.set(next.ticks());
            self.stuck = 0;
        } else {
            self.stuck += 1;
            if self.stuck > 2 {
                clock.advance(1);
                self.stuck = 0;
            }
        }
        true
    }
}

/// One endpoint of the simulation: a driver, its application, its address.
pub struct Side<A> {
    /// The driver.
    pub driver: Driver<SimClock>,
    /// Its application.
    pub app: A,
    /// Its address.
    pub addr: SocketAddr,
    /// Whether its application asked to stop ([`Driver::stop`]).
    pub stopped: bool,
}

impl<A: App<SimClock>> Side<A> {
    /// A side at `addr`.
    pub fn new(driver: Driver<SimClock>, app: A, addr: SocketAddr) -> Side<A> {
        Side {
            driver,
            app,
            addr,
            stopped: false,
        }
    }
}

/// Decides which datagrams the link loses, besides its random loss: `true` drops it.
pub type DropRule = Box<dyn FnMut(&Sent) -> bool>;

/// Two sides and the link between them.
pub struct Net<A, B> {
    clock: SimClock,
    /// Side `a`.
    pub a: Side<A>,
    /// Side `b`.
    pub b: Side<B>,
    ab: Link,
    ba: Link,
    /// Every datagram carried or lost, in the order sent.
    pub transcript: Vec<Sent>,
    /// Datagrams to lose on purpose.
    pub drop: Option<DropRule>,
    /// Keep every datagram's bytes in the transcript.
    pub keep_bytes: bool,
    /// Keep a transcript at all (on by default; off for long runs that measure memory).
    pub keep_transcript: bool,
    sent: [u64; 2],
    buf: Vec<u8>,
}

impl<A: App<SimClock>, B: App<SimClock>> Net<A, B> {
    /// `a` and `b` joined by a link with `link` in both directions (each direction draws its
    /// losses from its own seed: `link.seed` and `link.seed + 1`).
    pub fn new(clock: SimClock, a: Side<A>, b: Side<B>, link: LinkConfig) -> Net<A, B> {
        let hz = clock.resolution_hz();
        let back = LinkConfig {
            seed: link.seed.wrapping_add(1),
            ..link.clone()
        };
        Net {
            clock,
            a,
            b,
            ab: Link::new(link, hz),
            ba: Link::new(back, hz),
            transcript: Vec::new(),
            drop: None,
            keep_bytes: false,
            keep_transcript: true,
            sent: [0; 2],
            buf: Vec::new(),
        }
    }

    /// The simulated time now.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Runs until `done` says so or `limit` of simulated time has passed; returns whether
    /// `done` said so.
    pub fn run_for(&mut self, limit: Duration, mut done: impl FnMut(&Self) -> bool) -> bool {
        let mut run = SimRun::new(&self.clock, limit);
        loop {
            self.step();
            if done(self) {
                return true;
            }
            let next = [
                self.a.driver.poll_timeout().map(|t| t.at),
                self.b.driver.poll_timeout().map(|t| t.at),
                self.ab.next_arrival(),
                self.ba.next_arrival(),
            ]
            .into_iter()
            .flatten()
            .min();
            if !run.advance(&self.clock, next) {
                return false;
            }
        }
    }

    /// Runs each side once at the current time.
    pub fn step(&mut self) {
        let now = self.clock.now();
        Self::deliver(now, &mut self.ba, &mut self.a.driver, self.a.addr);
        Self::deliver(now, &mut self.ab, &mut self.b.driver, self.b.addr);
        Self::turn(now, &mut self.a);
        Self::turn(now, &mut self.b);
        self.send(now, From::A);
        self.send(now, From::B);
    }

    fn deliver(now: Instant, link: &mut Link, driver: &mut Driver<SimClock>, to: SocketAddr) {
        let _ = to;
        while link.queue.front().is_some_and(|d| !d.arrives.is_after(now)) {
            let d = link.queue.pop_front().expect("looked");
            driver.handle_datagram(now, d.from, None, None, &d.bytes);
        }
    }

    fn turn<X: App<SimClock>>(now: Instant, side: &mut Side<X>) {
        side.driver.handle_timeout(now);
        side.driver.dispatch(&mut side.app);
        if side.driver.take_stop() {
            side.stopped = true;
        }
    }

    fn send(&mut self, now: Instant, from: From) {
        loop {
            let (driver, addr) = match from {
                From::A => (&mut self.a.driver, self.a.addr),
                From::B => (&mut self.b.driver, self.b.addr),
            };
            let Some(t) = driver.poll_transmit(now, &mut self.buf) else {
                return;
            };
            let datagrams: Vec<Vec<u8>> = segments(&t, &self.buf).map(<[u8]>::to_vec).collect();
            for bytes in datagrams {
                self.carry(now, from, addr, &t, bytes);
            }
        }
    }

    fn carry(&mut self, now: Instant, from: From, addr: SocketAddr, t: &Transmit, bytes: Vec<u8>) {
        let side = from as usize;
        let mut sent = Sent {
            index: self.sent[side],
            from,
            at: now,
            departure: t.departure,
            size: bytes.len(),
            arrives: None,
            bytes: self.keep_bytes.then(|| bytes.clone()),
        };
        self.sent[side] += 1;
        let drop = self.drop.as_mut().is_some_and(|rule| rule(&sent));
        let link = match from {
            From::A => &mut self.ab,
            From::B => &mut self.ba,
        };
        sent.arrives = link.carry(now, addr, bytes, drop);
        if self.keep_transcript {
            self.transcript.push(sent);
        }
    }
}

/// The datagrams of a transmit (several with GSO).
fn segments<'a>(t: &Transmit, buf: &'a [u8]) -> impl Iterator<Item = &'a [u8]> {
    let size = t.segment_size.unwrap_or(t.size).max(1);
    buf[..t.size].chunks(size)
}
