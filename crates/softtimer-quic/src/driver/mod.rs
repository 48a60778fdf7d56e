//! The sans-IO driver core: one quinn-proto `Endpoint` and its connections, their timers as
//! soft events, per-packet pacing, the tail-loss probe and compact closed-connection records.
//!
//! Datagrams go in ([`Driver::handle_datagram`]), transmits come out
//! ([`Driver::poll_transmit`]), and the next time the driver wants to be called comes out too
//! ([`Driver::poll_timeout`], then [`Driver::handle_timeout`]), with `now` always passed in,
//! as quinn-proto's `Endpoint` and `Connection` and smoltcp's `poll_at` work. The driver has no
//! socket, reads no clock on its own and starts no thread: [`QuicSocket`](crate::QuicSocket)
//! runs it on a UDP socket in a `softtimer-rt` loop, and [`sim`](crate::sim) runs two of them
//! against each other on a simulated clock.

mod closed;
mod config;
mod conn;
mod stats;
mod streams;
mod time;
mod transmit;

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use hdrhistogram::Histogram;
use quinn_proto::{
    ClientConfig, ConnectionError, ConnectionHandle, DatagramEvent, Dir, EcnCodepoint, Endpoint,
    EndpointConfig, EndpointEvent, ServerConfig, StreamId, VarInt,
};
use softtimer::{Clock, EventId, Instant, SoftTimers, Span, SystemClock, TriggerSource};

pub use closed::ClosedStats;
pub use config::{
    CidGeneratorFactory, ClosedState, DEFAULT_MAX_DATAGRAMS, DriverConfig, MAX_DRAIN_PERIOD,
    MAX_GRANULARITY, MAX_WAKE_LATENESS, Pacing,
};
pub use conn::ConnId;
pub use stats::DriverStats;
pub use transmit::Transmit;

use crate::error::{ConfigError, QuicError};
use crate::pacing::PacketPacer;
use closed::{Cid, ClosedTable, Late};
use conn::Slots;
use time::{TimeMap, std_base, wake_plan};

/// What the driver tells the application. More kinds may come: match with a wildcard arm.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuicEvent {
    /// The handshake completed.
    Connected(ConnId),
    /// The peer opened streams of this direction: take them with [`Driver::accept_bi`] or
    /// [`Driver::accept_uni`], and read each once taken: data that came with a stream's
    /// opening is not reported as [`Readable`] (quinn-proto's rule).
    ///
    /// [`Readable`]: QuicEvent::Readable
    StreamOpened(ConnId, Dir),
    /// A stream already taken has more data (or its end) to read.
    Readable(ConnId, StreamId),
    /// A stream that was blocked takes writes again.
    Writable(ConnId, StreamId),
    /// All data written to a finished stream was acknowledged.
    Finished(ConnId, StreamId),
    /// The peer asked us to stop sending on a stream, with its code. Writes to it fail
    /// from now on ([`StreamError::Stopped`](crate::StreamError::Stopped)); answer with
    /// [`Driver::reset`] (RFC 9000, 3.5), which also frees it: quinn-proto keeps a stream,
    /// and the peer's credit for it, until both its halves are closed.
    Stopped(ConnId, StreamId, VarInt),
    /// Unreliable datagrams arrived: take them with [`Driver::read_datagram`] until it
    /// gives `None` (this event comes again only when one arrives with none waiting).
    DatagramReceived(ConnId),
    /// The peer allows more streams of this direction: an [`Driver::open_bi`] or
    /// [`Driver::open_uni`] that gave `None` at its limit may be tried again.
    StreamsAvailable(ConnId, Dir),
    /// The datagram send buffer has room again after a [`DatagramError::Blocked`].
    ///
    /// [`DatagramError::Blocked`]: crate::DatagramError::Blocked
    DatagramsUnblocked(ConnId),
    /// The connection has ended: closed by the peer or by us
    /// ([`ConnectionError::LocallyClosed`]), timed out, reset or failed. Its statistics
    /// ([`Driver::connection_stats`]) can still be read while this event is handled. Its
    /// state is freed (or, with [`ClosedState::Compact`](crate::ClosedState::Compact),
    /// compacted) at a later `poll_*` or `handle_*` call once it is done: drained by
    /// quinn-proto, held to the drain period's end, or, compact, once its close is out.
    Lost(ConnId, ConnectionError),
}

/// What a read found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadStatus {
    /// Everything available was read; more may come.
    Blocked,
    /// The stream's end was reached.
    Finished,
}

/// When the driver wants [`Driver::handle_timeout`] (or [`Driver::poll_transmit`], for a
/// paced departure) called next; at once, precise, while events wait for
/// [`Driver::poll_event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeout {
    /// The time.
    pub at: Instant,
    /// Whether the wake-up needs precision. `false` when it is for a paced departure, a
    /// tail-loss probe or the end of a drain period, with nothing precise (quinn-proto's
    /// timers, an application wake-up) due within [`DriverConfig::wake_lateness`] after it:
    /// a departure a wake-up late leaves later departures at their times, so the spacing
    /// holds, and a probe a wake-up late is still far ahead of quinn's probe timeout; a loop
    /// may block until it instead of spinning.
    pub spin: bool,
}

/// What the driver's soft events stand for.
#[derive(Clone, Copy, Debug)]
enum Timer {
    /// quinn-proto's timeout of the connection in this slot.
    Quinn(u32),
    /// The tail-loss probe of the connection in this slot.
    Probe(u32),
    /// The end of the drain-period override of the (full) connection in this slot.
    Hold(u32),
    /// An application wake-up ([`Driver::wake_at`]).
    App,
}

/// A datagram the driver holds (paced, or a response waiting to be polled).
pub(crate) struct Datagram {
    pub destination: SocketAddr,
    pub ecn: Option<EcnCodepoint>,
    pub src_ip: Option<IpAddr>,
    pub bytes: Vec<u8>,
    pub segment_size: Option<usize>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// One quinn-proto endpoint and its connections, sans IO.
///
/// Datagrams go in ([`handle_datagram`](Self::handle_datagram)), transmits come out
/// ([`poll_transmit`](Self::poll_transmit)), and the next time the driver wants to be called
/// comes out too ([`poll_timeout`](Self::poll_timeout), then
/// [`handle_timeout`](Self::handle_timeout)), with `now` always passed in; the application's
/// events come out of [`poll_event`](Self::poll_event) (or [`dispatch`](Self::dispatch) to an
/// [`App`](crate::App)). It owns quinn-proto's endpoint and connections, their timers as soft
/// events in a [`SoftTimers`] facility on the clock `C`, per-packet pacing, the tail-loss
/// probe, and the compact records of closed connections; it has no socket, reads its clock
/// only once (when built), and starts no thread. [`QuicSocket`](crate::QuicSocket) runs it on
/// a UDP socket; [`sim`](crate::sim) runs two of them through an in-memory link.
///
/// ```
/// use softtimer::SimClock;
/// use softtimer_quic::{Driver, DriverConfig};
///
/// let clock = SimClock::new(1_000_000_000);
/// let mut driver = Driver::new(clock, DriverConfig::default(), None).unwrap();
/// // Nothing to do yet: no transmit, no timer.
/// let mut buf = Vec::new();
/// assert!(driver.poll_transmit(driver.latest(), &mut buf).is_none());
/// assert!(driver.poll_timeout().is_none());
/// ```
pub struct Driver<C: Clock + Clone = SystemClock> {
    endpoint: Endpoint,
    conns: Slots,
    /// Connections to settle: their endpoint and application events, timers and close.
    unsettled: Vec<u32>,
    /// Connections to ask for datagrams, in order.
    sendable: VecDeque<u32>,
    /// Connections whose `Lost` event the application has taken.
    reported: Vec<u32>,
    events: VecDeque<QuicEvent>,
    /// Endpoint responses and closed-record answers, sent before anything else.
    responses: VecDeque<Datagram>,
    /// Paced datagrams due, with their departure times.
    released: VecDeque<(ConnId, Datagram, Instant)>,
    pacer: PacketPacer<ConnId, Datagram>,
    timers: SoftTimers<Timer, C>,
    /// The tail-loss probes and the ends of held connections' drains: soft events that need
    /// no precision ([`Timeout::spin`]).
    lax: SoftTimers<Timer, C>,
    /// The ends of the closed records' drain periods (by record index), apart from the
    /// connections' timers so that many of them do not slow those down.
    drains: SoftTimers<u32, C>,
    app_timer: Option<(EventId, Instant)>,
    closed: ClosedTable,
    config: DriverConfig,
    granularity: Option<Span>,
    wake_lateness: Span,
    cid_len: usize,
    /// The family of the socket the datagrams go through, where known (`true`: IPv6).
    socket_v6: Option<bool>,
    /// The socket refused a send for want of room ([`Driver::set_send_blocked`]).
    send_blocked: bool,
    map: TimeMap,
    latest: Instant,
    clock: C,
    spare: Vec<Vec<u8>>,
    stats: DriverStats,
    timer_lateness: Histogram<u64>,
    release_lateness: Histogram<u64>,
    stop: bool,
}

impl<C: Clock + Clone> Driver<C> {
    /// A driver on `clock`; a server when `server` is given (it can still connect as a
    /// client). The clock is read once, here, as the start of its time; every other time is
    /// passed in.
    pub fn new(
        clock: C,
        config: DriverConfig,
        server: Option<ServerConfig>,
    ) -> Result<Driver<C>, QuicError> {
        if config.max_datagrams == 0 {
            return Err(ConfigError::ZeroMaxDatagrams.into());
        }
        if config.datagrams_per_departure == 0 {
            return Err(ConfigError::ZeroPerDeparture.into());
        }
        if config.timer_granularity == Some(Duration::ZERO) {
            return Err(ConfigError::ZeroGranularity.into());
        }
        if let Some(g) = config.timer_granularity.filter(|&g| g > MAX_GRANULARITY) {
            return Err(ConfigError::Granularity(g).into());
        }
        if config.wake_lateness > MAX_WAKE_LATENESS {
            return Err(ConfigError::WakeLateness(config.wake_lateness).into());
        }
        if config.drain_period == Some(Duration::ZERO) {
            return Err(ConfigError::ZeroDrainPeriod.into());
        }
        if let Some(d) = config.drain_period.filter(|&d| d > MAX_DRAIN_PERIOD) {
            return Err(ConfigError::DrainPeriod(d).into());
        }
        let factory: CidGeneratorFactory = config.cid_generator.clone().unwrap_or_else(|| {
            Arc::new(|| Box::new(quinn_proto::RandomConnectionIdGenerator::default()))
        });
        let cid_len = factory().cid_len();
        let mut endpoint_config = EndpointConfig::default();
        let generator = Arc::clone(&factory);
        endpoint_config.cid_generator(move || generator());
        endpoint_config.rng_seed(config.rng_seed);
        let endpoint = Endpoint::new(
            Arc::new(endpoint_config),
            server.map(Arc::new),
            config.allow_mtu_discovery,
            config.rng_seed,
        );
        let timers: SoftTimers<Timer, C> =
            SoftTimers::new(clock.clone()).map_err(|e| QuicError::from(ConfigError::Timers(e)))?;
        let lax: SoftTimers<Timer, C> =
            SoftTimers::new(clock.clone()).map_err(|e| QuicError::from(ConfigError::Timers(e)))?;
        let drains: SoftTimers<u32, C> =
            SoftTimers::new(clock.clone()).map_err(|e| QuicError::from(ConfigError::Timers(e)))?;
        let hz = clock.resolution_hz();
        let start = timers.measure_time();
        let map = TimeMap {
            std: std_base(),
            soft: start,
            hz,
        };
        let granularity = config
            .timer_granularity
            .map(|g| Span::from_duration(g, hz).max(Span::from_ticks(1)));
        Ok(Driver {
            endpoint,
            conns: Slots::default(),
            unsettled: Vec::new(),
            sendable: VecDeque::new(),
            reported: Vec::new(),
            events: VecDeque::new(),
            responses: VecDeque::new(),
            released: VecDeque::new(),
            pacer: PacketPacer::new(start, hz),
            timers,
            lax,
            drains,
            app_timer: None,
            closed: ClosedTable::default(),
            granularity,
            wake_lateness: Span::from_duration(config.wake_lateness, hz),
            cid_len,
            socket_v6: None,
            send_blocked: false,
            config,
            map,
            latest: start,
            clock,
            spare: Vec::new(),
            stats: DriverStats::default(),
            timer_lateness: histogram(),
            release_lateness: histogram(),
            stop: false,
        })
    }

    /// The clock's reading now, for applications that time their own work (the driver's
    /// own decisions use only the times its calls are given).
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The latest time the driver was given: calls that take no `now` (connect, close,
    /// stream operations) act at it.
    pub fn latest(&self) -> Instant {
        self.latest
    }

    /// Ticks per second of the driver's clock.
    pub fn hz(&self) -> u64 {
        self.map.hz
    }

    /// The driver's configuration.
    pub fn config(&self) -> &DriverConfig {
        &self.config
    }

    /// The length of the connection IDs the driver issues.
    pub fn cid_len(&self) -> usize {
        self.cid_len
    }

    fn advance(&mut self, now: Instant) {
        if now.is_after(self.latest) {
            self.latest = now;
        }
        self.retire_reported();
    }

    /// Starts a connection to `remote`, checking its certificate against `server_name`.
    pub fn connect(
        &mut self,
        config: ClientConfig,
        remote: SocketAddr,
        server_name: &str,
    ) -> Result<ConnId, QuicError> {
        let remote = self.remote_for_socket(remote)?;
        let now = self.map.to_std(self.latest);
        let (ch, conn) = self
            .endpoint
            .connect(now, config, remote, server_name)
            .map_err(QuicError::Connect)?;
        let id = self.conns.insert(ch, conn);
        self.touch(id.slot);
        self.settle();
        Ok(id)
    }

    /// `remote` as the socket's family writes it: an IPv4 address on an IPv6 socket as
    /// the IPv4-mapped address (the form a dual-stack socket reports its peers in, which
    /// the handshake's replies must match); an IPv6 address on an IPv4 socket refused, unless
    /// it is IPv4-mapped.
    fn remote_for_socket(&self, remote: SocketAddr) -> Result<SocketAddr, QuicError> {
        Ok(match (self.socket_v6, remote) {
            (Some(true), SocketAddr::V4(v4)) => SocketAddr::V6(std::net::SocketAddrV6::new(
                v4.ip().to_ipv6_mapped(),
                v4.port(),
                0,
                0,
            )),
            (Some(false), SocketAddr::V6(v6)) => match v6.ip().to_ipv4_mapped() {
                Some(ip) => SocketAddr::from((ip, v6.port())),
                None => {
                    return Err(QuicError::Connect(
                        quinn_proto::ConnectError::InvalidRemoteAddress(remote),
                    ));
                }
            },
            _ => remote,
        })
    }

    /// Says whether the socket is refusing sends for want of room (`EAGAIN`): while it is,
    /// [`Driver::poll_timeout`] names no departure time, since what is due waits for the
    /// socket's writability rather than a time (a departure already due would otherwise
    /// ask for a wake-up at once, again and again).
    pub fn set_send_blocked(&mut self, blocked: bool) {
        self.send_blocked = blocked;
    }

    /// Says the family of the socket the driver's datagrams go through (`true`: IPv6), so
    /// that [`Driver::connect`] writes a remote address as that socket reports its peers.
    pub fn set_socket_family(&mut self, v6: bool) {
        self.socket_v6 = Some(v6);
    }

    /// A datagram arrived at `now` from `remote` (at the local address `local_ip`, if
    /// known, with its ECN marks). Malformed datagrams and datagrams for no connection are
    /// dropped (and counted); one for a closed connection gets what its record says.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        local_ip: Option<IpAddr>,
        ecn: Option<EcnCodepoint>,
        data: &[u8],
    ) {
        self.advance(now);
        self.stats.datagrams_received += 1;
        let dcid = Cid::destination(data, self.cid_len);
        if let Some(cid) = &dcid
            && self.closed.len() > 0
            && self.late_packet(cid, remote, local_ip)
        {
            return;
        }
        let now_std = self.map.to_std(now);
        let mut response = self.spare.pop().unwrap_or_default();
        response.clear();
        let event = self.endpoint.handle(
            now_std,
            remote,
            local_ip,
            ecn,
            BytesMut::from(data),
            &mut response,
        );
        match event {
            Some(DatagramEvent::ConnectionEvent(ch, event)) => {
                let slot = ch.0 as u32;
                // A connection whose close is out but that is not compacted yet (that waits
                // for its next call): compacted now, and the packet is a late one for its
                // record (quinn-proto's answer would go with the connection).
                if self.conns.at(slot).is_some_and(|c| c.conn.is_closed()) && self.retire(slot) {
                    // One the record does not know (another of the connection's IDs, or
                    // none read) is dropped, and counted as quinn-proto's drops are.
                    let taken = dcid
                        .as_ref()
                        .is_some_and(|cid| self.late_packet(cid, remote, local_ip));
                    if !taken {
                        self.stats.datagrams_ignored += 1;
                    }
                } else if let Some(c) = self.conns.at(slot) {
                    c.conn.handle_event(event);
                    if dcid.is_some() {
                        c.dcid = dcid;
                    }
                    self.touch(slot);
                }
            }
            Some(DatagramEvent::NewConnection(incoming))
                if self
                    .config
                    .max_connections
                    .is_some_and(|max| self.conns.len() >= max) =>
            {
                self.stats.connections_refused += 1;
                let t = self.endpoint.refuse(incoming, &mut response);
                self.respond(&t, response);
                response = Vec::new();
            }
            Some(DatagramEvent::NewConnection(incoming))
                if self.config.validate_addresses
                    && !incoming.remote_address_validated()
                    && incoming.may_retry() =>
            {
                match self.endpoint.retry(incoming, &mut response) {
                    Ok(t) => {
                        self.stats.retries += 1;
                        self.respond(&t, response);
                    }
                    // Looked at above: only an Incoming already retried is refused one.
                    Err(e) => {
                        let t = self.endpoint.refuse(e.into_incoming(), &mut response);
                        self.respond(&t, response);
                    }
                }
                response = Vec::new();
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                match self.endpoint.accept(incoming, now_std, &mut response, None) {
                    Ok((ch, conn)) => {
                        let id = self.conns.insert(ch, conn);
                        if let Some(c) = self.conns.at(id.slot) {
                            c.dcid = dcid;
                        }
                        self.touch(id.slot);
                    }
                    Err(e) => {
                        if let Some(t) = e.response {
                            self.respond(&t, response);
                            response = Vec::new();
                        }
                    }
                }
            }
            Some(DatagramEvent::Response(t)) => {
                if data.first().is_some_and(|b| b & 0x80 == 0) {
                    self.stats.stateless_resets += 1;
                }
                self.respond(&t, response);
                response = Vec::new();
            }
            None => self.stats.datagrams_ignored += 1,
        }
        if response.capacity() > 0 {
            self.spare.push(response);
        }
        // The connection settles (its events, timers, what the probe learns) at the next
        // poll, once for a whole batch of datagrams.
    }

    /// A datagram for `cid` from `remote`: whether a closed connection's record took it
    /// (answered with the close again, or dropped).
    fn late_packet(&mut self, cid: &Cid, remote: SocketAddr, local_ip: Option<IpAddr>) -> bool {
        match self.closed.on_packet(cid, remote) {
            Late::Unknown => false,
            Late::Drop => true,
            Late::Answer(close, to) => {
                let d = Datagram {
                    destination: to,
                    ecn: None,
                    src_ip: local_ip,
                    bytes: close.to_vec(),
                    segment_size: None,
                };
                self.responses.push_back(d);
                true
            }
        }
    }

    fn respond(&mut self, t: &quinn_proto::Transmit, mut bytes: Vec<u8>) {
        bytes.truncate(t.size);
        self.responses.push_back(Datagram {
            destination: t.destination,
            ecn: t.ecn,
            src_ip: t.src_ip,
            bytes,
            segment_size: t.segment_size,
        });
    }

    /// Handles every timer due at `now`: quinn-proto's timeouts, tail-loss probes, the ends
    /// of drain periods, application wake-ups. Harmless when nothing is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
        while let Some(fired) = self.drains.pop_due(now, TriggerSource::User) {
            self.closed.expire(fired.event);
        }
        let now_std = self.map.to_std(now);
        while let Some(fired) = self.timers.pop_due(now, TriggerSource::User) {
            self.on_timer(fired.event, fired.id, now, now_std);
        }
        while let Some(fired) = self.lax.pop_due(now, TriggerSource::User) {
            self.on_timer(fired.event, fired.id, now, now_std);
        }
    }

    /// A soft event of the driver's has fired.
    fn on_timer(&mut self, timer: Timer, id: EventId, now: Instant, now_std: std::time::Instant) {
        match timer {
            Timer::Quinn(slot) => {
                let Some(c) = self.conns.at(slot) else {
                    return;
                };
                let Some((event, asked)) = c.timer else {
                    return;
                };
                if event != id {
                    return;
                }
                c.timer = None;
                c.conn.handle_timeout(now_std);
                self.stats.timeouts += 1;
                let late = now_std.saturating_duration_since(asked).as_nanos() as u64;
                let _ = self.timer_lateness.record(late.max(1));
                self.touch(slot);
            }
            Timer::Probe(slot) => {
                let Some(c) = self.conns.at(slot) else {
                    return;
                };
                if c.probe_timer.map(|(event, _)| event) != Some(id) {
                    return;
                }
                c.probe_timer = None;
                if c.probe.fire(now) && !c.conn.is_closed() {
                    c.conn.ping();
                    c.flight.lost_at_probe = Some(c.conn.stats().path.lost_packets);
                    self.stats.tail_probes += 1;
                }
                // Settled either way: a probe whose deadline moved on since the timer was
                // armed (a paced send) is armed again for it.
                self.touch(slot);
            }
            Timer::Hold(slot) => {
                if let Some(c) = self.conns.at(slot)
                    && c.ending.hold == Some(id)
                {
                    c.ending.hold_over = true;
                    self.touch(slot);
                }
            }
            Timer::App => self.app_timer = None,
        }
    }

    /// When to call [`handle_timeout`](Self::handle_timeout) (or, for a paced departure,
    /// [`poll_transmit`](Self::poll_transmit)) next; `None` when nothing is pending. Events
    /// not yet taken ([`poll_event`](Self::poll_event)) make it now (the latest time the
    /// driver was given), precise: a send can raise one (a datagram buffer with room again,
    /// a close made outside the application's turn), and it should not wait for the next
    /// packet or timer.
    pub fn poll_timeout(&mut self) -> Option<Timeout> {
        self.retire_reported();
        self.settle();
        if !self.events.is_empty() {
            return Some(Timeout {
                at: self.latest,
                spin: true,
            });
        }
        let departure = if self.send_blocked {
            // The socket's writability resumes sending, not a time.
            None
        } else if self.released.is_empty() {
            self.pacer.next_departure()
        } else {
            Some(self.latest)
        };
        let precise = self.timers.next_expiry();
        // The end of a closed record needs no precision, and with many records held the
        // exact next one may take a walk over a coarse slot of the wheel: the facility's
        // lower bound (read in constant time) wakes the driver at worst a little early, and
        // like a departure it does not ask the loop to spin. Nor do a tail-loss probe (a
        // wake-up late on a wait of two RTTs and more, against quinn's probe timeout of
        // 25 ms) and the end of a held connection's drain: a loop that spun before a probe
        // would look at its sockets only between slices of the spin, late for the very
        // packet (the next request) that makes the probe needless.
        let earliest = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) if a.is_after(b) => Some(b),
            (None, b) => b,
            (a, _) => a,
        };
        let departure = earliest(departure, self.drains.next_trigger_time());
        let departure = earliest(departure, self.lax.next_expiry());
        let (at, spin) = wake_plan(departure, precise, self.wake_lateness);
        at.map(|at| Timeout { at, spin })
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<QuicEvent> {
        self.settle();
        let event = self.events.pop_front()?;
        if let QuicEvent::Lost(id, _) = &event
            && let Some(c) = self.conns.get_mut(*id)
        {
            c.ending.reported = true;
            self.reported.push(id.slot);
        }
        Some(event)
    }

    /// Hands every pending event to `app`, gives it its turn, and hands it the events its
    /// turn caused: what a loop does between taking datagrams in and sending. Returns whether
    /// the application did anything.
    pub fn dispatch<A: crate::App<C>>(&mut self, app: &mut A) -> bool {
        let mut did = false;
        while let Some(event) = self.poll_event() {
            app.on_event(self, event);
            did = true;
        }
        did |= app.on_turn(self);
        while let Some(event) = self.poll_event() {
            app.on_event(self, event);
            did = true;
        }
        did
    }

    /// Marks a connection for settling and for a transmit poll.
    fn touch(&mut self, slot: u32) {
        if let Some(c) = self.conns.at(slot) {
            if !c.unsettled {
                c.unsettled = true;
                self.unsettled.push(slot);
            }
            if !c.sendable {
                c.sendable = true;
                self.sendable.push_back(slot);
            }
        }
    }

    /// Settles every touched connection: its endpoint events, its application events, what
    /// the probe learns of ACKs, its timers, and its close.
    fn settle(&mut self) {
        while let Some(slot) = self.unsettled.pop() {
            self.settle_one(slot);
        }
    }

    fn settle_one(&mut self, slot: u32) {
        let Some(id) = self.conns.id(slot) else {
            return;
        };
        let ch = ConnectionHandle(slot as usize);
        let now = self.latest;
        let hz = self.map.hz;
        let mut resend = false;
        {
            let Some(c) = self.conns.at(slot) else { return };
            c.unsettled = false;
            while let Some(event) = c.conn.poll_endpoint_events() {
                if event.is_drained() {
                    c.ending.drained = true;
                    continue;
                }
                if let Some(back) = self.endpoint.handle_event(ch, event) {
                    c.conn.handle_event(back);
                    resend = true;
                }
            }
            c.take_events(id, &mut self.events);
            if self.config.tail_probe {
                c.observe_acks(now, hz);
            }
        }
        if resend {
            self.touch(slot);
        }
        self.note_close(slot);
        if self.conns.at(slot).is_some_and(|c| c.ending.reported) && self.retire(slot) {
            return;
        }
        self.refresh_timers(slot);
    }

    /// Notices that a connection has closed: when, its `Lost` event if quinn-proto gives
    /// none (a local close, a drain before any), and the drain-period override.
    fn note_close(&mut self, slot: u32) {
        let Some(id) = self.conns.id(slot) else {
            return;
        };
        let now = self.latest;
        let hold = match self.config.drain_period {
            Some(d) if self.config.closed_state == ClosedState::Full => {
                Some(now + Span::from_duration(d, self.map.hz))
            }
            _ => None,
        };
        let c = self.conns.at(slot).expect("listed");
        if !(c.conn.is_closed() || c.ending.drained) || c.ending.closed_at.is_some() {
            return;
        }
        c.ending.closed_at = Some(now);
        if c.ending.lost.is_none() {
            c.ending.lost = Some(ConnectionError::LocallyClosed);
            self.events
                .push_back(QuicEvent::Lost(id, ConnectionError::LocallyClosed));
        }
        if let Some(at) = hold
            && let Ok(event) = self.lax.schedule_at(at, Timer::Hold(slot))
        {
            self.conns.at(slot).expect("listed").ending.hold = Some(event);
        }
    }

    /// Schedules a connection's quinn-proto timeout and probe as soft events, where they
    /// changed.
    fn refresh_timers(&mut self, slot: u32) {
        let map = self.map;
        let granularity = self.granularity;
        let Some(c) = self.conns.at(slot) else { return };
        let asked = c.conn.poll_timeout();
        if asked != c.timer.map(|(_, t)| t) {
            if let Some((event, _)) = c.timer.take() {
                self.timers.cancel(event);
            }
            if let Some(t) = asked {
                let at = map.round_up(granularity, map.to_soft(t));
                if let Ok(event) = self.timers.schedule_at(at, Timer::Quinn(slot)) {
                    c.timer = Some((event, t));
                }
            }
        }
        let probe = c.probe.deadline().map(|t| map.round_up(granularity, t));
        if probe != c.probe_timer.map(|(_, t)| t) {
            if let Some((event, _)) = c.probe_timer.take() {
                self.lax.cancel(event);
            }
            if let Some(at) = probe
                && let Ok(event) = self.lax.schedule_at(at, Timer::Probe(slot))
            {
                c.probe_timer = Some((event, at));
            }
        }
    }

    /// Frees or compacts the closed connections whose end the application has just seen,
    /// if their time has come; the others are retried when their state next changes
    /// ([`settle_one`](Self::settle_one)), so this list never holds a connection long.
    fn retire_reported(&mut self) {
        for slot in std::mem::take(&mut self.reported) {
            self.retire(slot);
        }
    }

    /// Frees or compacts a connection if its time has come; returns whether it is gone.
    fn retire(&mut self, slot: u32) -> bool {
        let compact = self.config.closed_state == ClosedState::Compact;
        let Some(c) = self.conns.at(slot) else {
            return true;
        };
        let e = &c.ending;
        if !e.reported || e.closed_at.is_none() {
            return false;
        }
        let ready = if e.drained {
            // quinn-proto is done with it; the full design holds it to the override's end.
            e.hold.is_none() || e.hold_over
        } else if compact {
            // Once quinn-proto has nothing more to send and its close is out.
            e.close_is_out()
        } else {
            e.hold_over
        };
        if !ready {
            return false;
        }
        let drained = e.drained;
        let closed_at = e.closed_at.unwrap_or(self.latest);
        let record = (compact && !drained).then(|| {
            let drain_end = match self.config.drain_period {
                Some(d) => closed_at + Span::from_duration(d, self.map.hz),
                None => c
                    .conn
                    .poll_timeout()
                    .map_or(self.latest, |t| self.map.to_soft(t)),
            };
            // The peer closed: draining, it sends nothing more (quinn-proto may have sent
            // one close in reply, as RFC 9000 §10.2.2 allows, but not again).
            let peer_closed = matches!(
                c.ending.lost,
                Some(
                    ConnectionError::ApplicationClosed(_)
                        | ConnectionError::ConnectionClosed(_)
                        | ConnectionError::Reset
                )
            );
            let close = c.ending.close_datagram.take().filter(|_| !peer_closed);
            (c.dcid, c.peer(), close, drain_end)
        });
        self.free(slot);
        if let Some((Some(cid), peer, close, drain_end)) = record
            && drain_end.is_after(self.latest)
        {
            let index = self.closed.next_index();
            if self.drains.schedule_at(drain_end, index).is_ok() {
                self.closed.insert(cid, peer, close.as_deref());
            }
        }
        true
    }

    /// Forgets a connection: its timers, its pacer flow, and quinn-proto's endpoint state.
    fn free(&mut self, slot: u32) {
        let Some(id) = self.conns.id(slot) else {
            return;
        };
        let Some(c) = self.conns.remove(slot) else {
            return;
        };
        if let Some((event, _)) = c.timer {
            self.timers.cancel(event);
        }
        for event in [c.probe_timer.map(|t| t.0), c.ending.hold]
            .into_iter()
            .flatten()
        {
            self.lax.cancel(event);
        }
        self.pacer.remove(id);
        let _ = self
            .endpoint
            .handle_event(ConnectionHandle(slot as usize), EndpointEvent::drained());
    }

    /// Asks the loop running the driver to stop at the end of its turn, after sending what
    /// is due (a connection's close included).
    pub fn stop(&mut self) {
        self.stop = true;
    }

    /// Whether [`stop`](Self::stop) was asked for; clears the request.
    pub fn take_stop(&mut self) -> bool {
        std::mem::take(&mut self.stop)
    }
}
