//! The driver: one quinn-proto `Endpoint` and its connections on one soft-timer event loop.

use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use quinn_proto::{
    ClientConfig, ConnectionHandle, DatagramEvent, Dir, Endpoint, EndpointConfig, Event,
    ServerConfig, StreamEvent, StreamId, VarInt,
};
use softtimer::{Clock, EventId, Fired, Instant, Span, SystemClock, TriggerSource};
use softtimer_rt::{EventLoop, Interest, LoopConfig, LoopCx, LoopTurn, Ready, StopHandle};

use crate::QuicError;
use crate::pacing::PacketPacer;
use crate::probe::{self, Flight, Progress, TailProbe};

/// The token of the driver's socket in the loop.
const SOCKET_TOKEN: u64 = 0;
/// Datagrams taken from the socket per `recvmmsg` call.
const RECV_BATCH: usize = 32;
/// Room per received message: with GRO, several datagrams arrive in one.
const RECV_SLOT: usize = 64 * 1024;
/// Receive calls per ready event before the loop looks at its timers again.
const RECV_CALLS_PER_PASS: usize = 8;
/// quinn's own cap on the datagrams of one GSO send (quinn 0.11 `MAX_TRANSMIT_SEGMENTS`).
pub const DEFAULT_MAX_DATAGRAMS: usize = 10;

/// A connection of the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(ConnectionHandle);

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0.0)
    }
}

/// How the datagrams of a connection are spaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Pacing {
    /// quinn-proto's own pacer: bursts of 10 to 256 datagrams every 2 ms, its pacing timer a
    /// soft event.
    #[default]
    Quinn,
    /// Every datagram (or every [`DriverConfig::datagrams_per_departure`] of them, sent
    /// together) gets its own departure time at 1.25 × cwnd / srtt and leaves from the
    /// departure-time scheduler ([`PacketPacer`]), as Linux's `fq` paces the kernel's TCP.
    /// A closed connection's CONNECTION_CLOSE leaves at once: like quinn-proto, the driver
    /// does not pace what is not congestion controlled.
    PerPacket,
}

/// How the driver runs its connections.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// Per-packet pacing or quinn's own.
    pub pacing: Pacing,
    /// Round every timer quinn-proto asks for up to this granularity (from the driver's
    /// start), the way tokio's 1 ms wheel rounds: to separate timer precision from everything
    /// else that differs between runtimes. `None`: fire at the time asked.
    pub timer_granularity: Option<Duration>,
    /// The most datagrams of one GSO send (quinn's pacer path only; capped by what the
    /// socket supports).
    pub max_datagrams: usize,
    /// With [`Pacing::PerPacket`], how many datagrams leave together at each departure
    /// time, as one GSO send. 1 spaces every datagram (a system call and, on an idle loop, a
    /// wake-up per datagram); 2 is the smallest burst Linux's TCP sends under pacing
    /// (`tcp_min_tso_segs`), at half the system calls, with pairs back to back. Capped by
    /// what the socket supports (1 without GSO).
    pub datagrams_per_departure: usize,
    /// `SO_SNDBUF` and `SO_RCVBUF` to ask for.
    pub socket_buffer: Option<usize>,
    /// Send a tail-loss probe (a PING) two smoothed RTTs after the latest data or ACK while
    /// data is unacknowledged, once per flight ([`probe`](crate::probe)): the peer's
    /// immediate ACK of it lets quinn-proto find a lost last packet about one RTT later,
    /// instead of after its probe timeout (which includes the peer's 25 ms ACK delay).
    /// Needs the connection's controller wrapped in [`probe::FlightTracking`], as
    /// [`Tuning`](crate::tls::Tuning) does; other connections get no probes.
    pub tail_probe: bool,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            pacing: Pacing::Quinn,
            timer_granularity: None,
            max_datagrams: DEFAULT_MAX_DATAGRAMS,
            datagrams_per_departure: 1,
            socket_buffer: Some(8 << 20),
            tail_probe: true,
        }
    }
}

/// What the driver tells the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuicEvent {
    /// The handshake completed.
    Connected(ConnId),
    /// The peer opened streams: take them with [`Driver::accept_bi`].
    StreamOpened(ConnId),
    /// A stream has data (or its end) to read.
    Readable(ConnId, StreamId),
    /// A stream that was blocked takes writes again.
    Writable(ConnId, StreamId),
    /// All data written to a finished stream was acknowledged.
    Finished(ConnId, StreamId),
    /// The peer asked us to stop sending on a stream.
    Stopped(ConnId, StreamId, u64),
    /// The connection is gone; why.
    Lost(ConnId, String),
}

/// What a read found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadStatus {
    /// Everything available was read; more may come.
    Blocked,
    /// The stream's end was reached.
    Finished,
    /// The peer reset the stream with this code.
    Reset(u64),
}

/// What caused datagrams to leave: a packet that arrived (an ACK, a request), a soft event
/// fired at a trigger state, one fired by the backstop, or the application.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TransmitCauses {
    /// Datagrams sent in a pass that received datagrams.
    pub packet: u64,
    /// Datagrams sent after a soft event fired at a trigger state.
    pub trigger_state: u64,
    /// Datagrams sent after a soft event fired by the backstop.
    pub backstop: u64,
    /// Datagrams sent after the application acted (a write, a new request).
    pub app: u64,
}

/// The driver's counters.
#[derive(Clone, Debug, Default)]
pub struct DriverStats {
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// `sendmsg` calls.
    pub send_calls: u64,
    /// Sends refused with `EAGAIN` (retried when writable).
    pub send_would_block: u64,
    /// quinn-proto timeouts handled.
    pub timeouts: u64,
    /// Tail-loss probes sent ([`DriverConfig::tail_probe`]). A probe with nothing lost
    /// (the peer was only delaying its ACK) costs one PING.
    pub tail_probes: u64,
    /// Tail-loss probes after which quinn-proto declared packets lost before the connection
    /// next sent data: the probes that found a loss.
    pub tail_probes_finding_loss: u64,
    /// Why datagrams left.
    pub causes: TransmitCauses,
}

/// Where the soft-event handler notes what fired (it runs at a trigger state, possibly on
/// the backstop thread, and cannot touch the driver).
#[derive(Default)]
struct FireLog {
    fired: AtomicU64,
    backstop: AtomicU64,
}

/// The payload of the driver's soft events: "look at the timers".
#[derive(Clone, Copy, Debug)]
pub struct Wake;

struct Conn {
    conn: quinn_proto::Connection,
    /// quinn-proto's next timeout, and when the driver will act on it (rounded up when a
    /// granularity is set).
    timeout: Option<(std::time::Instant, Instant)>,
    connected: bool,
    dirty: bool,
    /// The tail-loss probe, and what the driver last saw of the connection's flight.
    probe: TailProbe,
    seen: FlightSeen,
}

/// A connection's congestion controller as the flight registry knows it, by its key.
#[derive(Default)]
enum Controller {
    /// Not looked up yet.
    #[default]
    Unknown,
    /// Its flight record (looked up again if quinn replaces the controller).
    Tracked(usize, Arc<Flight>),
    /// Not in the registry (a factory not wrapped in `FlightTracking`): not looked up
    /// again, which would take the registry's lock every turn. A connection's controllers
    /// all come from one factory, so a replacement is untracked too.
    Untracked(usize),
}

/// The counters a tail-loss probe is decided from, as last seen.
#[derive(Default)]
struct FlightSeen {
    /// What the registry said of the connection's controller.
    controller: Controller,
    data_frames: u64,
    acks: u64,
    /// quinn's lost-packet count when the last probe went out, until data is sent again.
    lost_at_probe: Option<u64>,
}

/// Ack-eliciting frames sent, other than PING (a probe's own).
fn data_frames(f: &quinn_proto::FrameStats) -> u64 {
    f.stream
        + f.crypto
        + f.reset_stream
        + f.stop_sending
        + f.max_data
        + f.max_stream_data
        + f.max_streams_bidi
        + f.max_streams_uni
        + f.data_blocked
        + f.stream_data_blocked
        + f.streams_blocked_bidi
        + f.streams_blocked_uni
        + f.new_connection_id
        + f.retire_connection_id
        + f.new_token
        + f.datagram
        + f.path_challenge
        + f.path_response
        + f.ack_frequency
        + f.immediate_ack
        + u64::from(f.handshake_done)
}

struct Datagram {
    destination: SocketAddr,
    ecn: Option<quinn_proto::EcnCodepoint>,
    src_ip: Option<std::net::IpAddr>,
    bytes: Vec<u8>,
    segment_size: Option<usize>,
}

/// Maps the loop's clock onto the `std::time::Instant`s quinn-proto works in.
#[derive(Clone, Copy)]
struct TimeMap {
    std: std::time::Instant,
    soft: Instant,
    hz: u64,
}

impl TimeMap {
    fn to_std(self, t: Instant) -> std::time::Instant {
        self.std + t.saturating_since(self.soft).to_duration(self.hz)
    }
    fn to_soft(self, t: std::time::Instant) -> Instant {
        self.soft + Span::from_duration(t.saturating_duration_since(self.std), self.hz)
    }
}

/// One quinn-proto endpoint, its connections and its UDP socket, driven by a soft-timer
/// event loop ([`QuicLoop`]): datagrams are read and written at trigger states, and every
/// timer quinn-proto asks for is a soft event.
pub struct Driver {
    endpoint: Endpoint,
    socket: UdpSocket,
    udp: quinn_udp::UdpSocketState,
    conns: HashMap<ConnectionHandle, Conn>,
    events: VecDeque<QuicEvent>,
    config: DriverConfig,
    clock: SystemClock,
    map: TimeMap,
    pacer: PacketPacer<ConnectionHandle, Datagram>,
    released: Vec<(ConnectionHandle, Datagram)>,
    spare: Vec<Vec<u8>>,
    recv_buf: Vec<u8>,
    send_buf: Vec<u8>,
    /// A send refused with `EAGAIN`, sent again when the socket is writable.
    blocked: Option<Datagram>,
    wake: Option<(EventId, Instant)>,
    app_wake: Option<Instant>,
    log: Arc<FireLog>,
    seen_fired: u64,
    seen_backstop: u64,
    received_in_pass: bool,
    stats: DriverStats,
    timer_lateness: Histogram<u64>,
    release_lateness: Histogram<u64>,
    max_datagrams: usize,
    /// Datagrams per paced departure (one GSO send).
    per_departure: usize,
    stop: bool,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

fn udp_ecn(ecn: quinn_proto::EcnCodepoint) -> quinn_udp::EcnCodepoint {
    match ecn {
        quinn_proto::EcnCodepoint::Ect0 => quinn_udp::EcnCodepoint::Ect0,
        quinn_proto::EcnCodepoint::Ect1 => quinn_udp::EcnCodepoint::Ect1,
        quinn_proto::EcnCodepoint::Ce => quinn_udp::EcnCodepoint::Ce,
    }
}

fn proto_ecn(ecn: quinn_udp::EcnCodepoint) -> quinn_proto::EcnCodepoint {
    match ecn {
        quinn_udp::EcnCodepoint::Ect0 => quinn_proto::EcnCodepoint::Ect0,
        quinn_udp::EcnCodepoint::Ect1 => quinn_proto::EcnCodepoint::Ect1,
        quinn_udp::EcnCodepoint::Ce => quinn_proto::EcnCodepoint::Ce,
    }
}

impl Driver {
    fn new(
        socket: UdpSocket,
        config: DriverConfig,
        server: Option<ServerConfig>,
        clock: SystemClock,
    ) -> Result<Driver, QuicError> {
        if config.max_datagrams == 0 {
            return Err(QuicError::Config("max_datagrams must be at least 1".into()));
        }
        if config.datagrams_per_departure == 0 {
            return Err(QuicError::Config(
                "datagrams_per_departure must be at least 1".into(),
            ));
        }
        if config.timer_granularity == Some(Duration::ZERO) {
            return Err(QuicError::Config(
                "a timer granularity of zero: leave it unset to fire at the time asked".into(),
            ));
        }
        socket
            .set_nonblocking(true)
            .map_err(|e| QuicError::io("making the socket non-blocking", e))?;
        let udp = quinn_udp::UdpSocketState::new((&socket).into())
            .map_err(|e| QuicError::io("preparing the UDP socket", e))?;
        if let Some(bytes) = config.socket_buffer {
            // Best effort, as quinn's users do: the kernel caps it at net.core.*mem_max.
            let _ = udp.set_send_buffer_size((&socket).into(), bytes);
            let _ = udp.set_recv_buffer_size((&socket).into(), bytes);
        }
        let endpoint = Endpoint::new(
            Arc::new(EndpointConfig::default()),
            server.map(Arc::new),
            false,
            None,
        );
        let hz = clock.resolution_hz();
        let map = TimeMap {
            std: std::time::Instant::now(),
            soft: clock.now(),
            hz,
        };
        let max_datagrams = config.max_datagrams.min(udp.max_gso_segments()).max(1);
        let per_departure = config
            .datagrams_per_departure
            .min(udp.max_gso_segments())
            .max(1);
        Ok(Driver {
            endpoint,
            socket,
            udp,
            conns: HashMap::new(),
            events: VecDeque::new(),
            pacer: PacketPacer::new(map.soft, hz),
            config,
            clock,
            map,
            released: Vec::new(),
            spare: Vec::new(),
            recv_buf: vec![0; RECV_BATCH * RECV_SLOT],
            send_buf: Vec::with_capacity(64 * 1024),
            blocked: None,
            wake: None,
            app_wake: None,
            log: Arc::new(FireLog::default()),
            seen_fired: 0,
            seen_backstop: 0,
            received_in_pass: false,
            stats: DriverStats::default(),
            timer_lateness: histogram(),
            release_lateness: histogram(),
            max_datagrams,
            per_departure,
            stop: false,
        })
    }

    /// The loop clock's time now.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Ticks per second of the loop's clock.
    pub fn hz(&self) -> u64 {
        self.map.hz
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> Result<SocketAddr, QuicError> {
        self.socket
            .local_addr()
            .map_err(|e| QuicError::io("reading the local address", e))
    }

    /// The driver's configuration.
    pub fn config(&self) -> &DriverConfig {
        &self.config
    }

    /// Starts a connection to `remote`, checking its certificate against `server_name`.
    pub fn connect(
        &mut self,
        config: ClientConfig,
        remote: SocketAddr,
        server_name: &str,
    ) -> Result<ConnId, QuicError> {
        let now = self.map.to_std(self.clock.now());
        let (ch, conn) = self
            .endpoint
            .connect(now, config, remote, server_name)
            .map_err(QuicError::Connect)?;
        self.insert(ch, conn);
        Ok(ConnId(ch))
    }

    fn insert(&mut self, ch: ConnectionHandle, conn: quinn_proto::Connection) {
        self.conns.insert(
            ch,
            Conn {
                conn,
                timeout: None,
                connected: false,
                dirty: true,
                probe: TailProbe::default(),
                seen: FlightSeen::default(),
            },
        );
    }

    fn conn(&mut self, id: ConnId) -> Result<&mut Conn, QuicError> {
        let c = self
            .conns
            .get_mut(&id.0)
            .ok_or(QuicError::UnknownConnection(id))?;
        c.dirty = true;
        Ok(c)
    }

    /// Opens a bidirectional stream; `None` while the peer's stream limit is reached.
    pub fn open_bi(&mut self, id: ConnId) -> Result<Option<StreamId>, QuicError> {
        Ok(self.conn(id)?.conn.streams().open(Dir::Bi))
    }

    /// Takes a bidirectional stream the peer opened, if any is waiting.
    pub fn accept_bi(&mut self, id: ConnId) -> Result<Option<StreamId>, QuicError> {
        Ok(self.conn(id)?.conn.streams().accept(Dir::Bi))
    }

    /// Writes what the stream takes of `data`; 0 when it is blocked by flow control or
    /// congestion (a [`QuicEvent::Writable`] follows).
    pub fn write(&mut self, id: ConnId, stream: StreamId, data: &[u8]) -> Result<usize, QuicError> {
        match self.conn(id)?.conn.send_stream(stream).write(data) {
            Ok(n) => Ok(n),
            Err(quinn_proto::WriteError::Blocked) => Ok(0),
            Err(e) => Err(QuicError::Stream(format!("write on stream {stream}: {e}"))),
        }
    }

    /// Ends the stream: the peer reads to its end once everything written has arrived.
    pub fn finish(&mut self, id: ConnId, stream: StreamId) -> Result<(), QuicError> {
        self.conn(id)?
            .conn
            .send_stream(stream)
            .finish()
            .map_err(|e| QuicError::Stream(format!("finish on stream {stream}: {e}")))
    }

    /// Abandons the sending side of `stream`: the peer's reads end with
    /// [`ReadStatus::Reset`] and this `code`; what was written and not yet acknowledged is not
    /// sent again.
    pub fn reset(&mut self, id: ConnId, stream: StreamId, code: u32) -> Result<(), QuicError> {
        self.conn(id)?
            .conn
            .send_stream(stream)
            .reset(VarInt::from_u32(code))
            .map_err(|e| QuicError::Stream(format!("reset of stream {stream}: {e}")))
    }

    /// Asks the peer to stop sending on `stream` with `code` (the peer sees
    /// [`QuicEvent::Stopped`]); data still arriving on it is discarded.
    pub fn stop_sending(
        &mut self,
        id: ConnId,
        stream: StreamId,
        code: u32,
    ) -> Result<(), QuicError> {
        self.conn(id)?
            .conn
            .recv_stream(stream)
            .stop(VarInt::from_u32(code))
            .map_err(|e| QuicError::Stream(format!("stop-sending on stream {stream}: {e}")))
    }

    /// Hands every chunk of `stream` available now to `sink`, in order, and says whether
    /// more may come.
    pub fn read(
        &mut self,
        id: ConnId,
        stream: StreamId,
        mut sink: impl FnMut(&[u8]),
    ) -> Result<ReadStatus, QuicError> {
        let c = self.conn(id)?;
        let mut recv = c.conn.recv_stream(stream);
        let mut chunks = recv
            .read(true)
            .map_err(|e| QuicError::Stream(format!("read on stream {stream}: {e}")))?;
        let status = loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => sink(&chunk.bytes),
                Ok(None) => break ReadStatus::Finished,
                Err(quinn_proto::ReadError::Blocked) => break ReadStatus::Blocked,
                Err(quinn_proto::ReadError::Reset(code)) => break ReadStatus::Reset(code.into()),
            }
        };
        // Whether flow-control credit must be sent: the next flush polls every dirty
        // connection anyway.
        let _ = chunks.finalize();
        Ok(status)
    }

    /// Closes the connection with an application error `code` and `reason`.
    pub fn close(&mut self, id: ConnId, code: u32, reason: &str) -> Result<(), QuicError> {
        let now = self.map.to_std(self.clock.now());
        self.conn(id)?.conn.close(
            now,
            VarInt::from_u32(code),
            Bytes::copy_from_slice(reason.as_bytes()),
        );
        Ok(())
    }

    /// The connection's statistics (RTT, congestion window, losses, datagrams).
    pub fn connection_stats(&self, id: ConnId) -> Option<quinn_proto::ConnectionStats> {
        self.conns.get(&id.0).map(|c| c.conn.stats())
    }

    /// Connections open (not yet drained).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Departures waiting in the pacer (datagrams, or GSO batches of
    /// [`DriverConfig::datagrams_per_departure`]); always 0 under [`Pacing::Quinn`]. An
    /// application that wants its last data to leave before it stops the loop waits for this
    /// to reach 0; a connection's close never waits here.
    pub fn paced_datagrams(&self) -> usize {
        self.pacer.len()
    }

    /// The driver's counters.
    pub fn stats(&self) -> &DriverStats {
        &self.stats
    }

    /// How late quinn-proto's timeouts were handled past the time it asked for, ns.
    pub fn timer_lateness(&self) -> &Histogram<u64> {
        &self.timer_lateness
    }

    /// How late paced datagrams left past their departure times, ns.
    pub fn release_lateness(&self) -> &Histogram<u64> {
        &self.release_lateness
    }

    /// Asks for a turn at `at` (an application timer); the earliest asked for wins until
    /// it has passed.
    pub fn wake_at(&mut self, at: Instant) {
        self.app_wake = Some(match self.app_wake {
            Some(t) if t.is_after(at) => at,
            Some(t) => t,
            None => at,
        });
    }

    /// Makes [`QuicLoop::run`] return at the end of this turn, after sending what is due
    /// (a connection's close included). Paced datagrams not yet due stay queued
    /// ([`paced_datagrams`](Self::paced_datagrams)), and a datagram the socket refused
    /// this turn (its buffer full) is not sent.
    pub fn stop(&mut self) {
        self.stop = true;
    }

    /// Reads every datagram waiting (a bounded number of calls) and hands them to quinn.
    fn on_readable(&mut self, cx: &mut LoopCx<'_, Wake>) {
        let mut buf = std::mem::take(&mut self.recv_buf);
        let mut metas = [quinn_udp::RecvMeta::default(); RECV_BATCH];
        for _ in 0..RECV_CALLS_PER_PASS {
            let result = {
                let mut iovs: Vec<IoSliceMut<'_>> =
                    buf.chunks_mut(RECV_SLOT).map(IoSliceMut::new).collect();
                self.udp.recv((&self.socket).into(), &mut iovs, &mut metas)
            };
            cx.trigger(TriggerSource::Recv);
            let n = match result {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An ICMP error for an earlier send (a peer gone): quinn learns of it by its
                // timers, as stock quinn does.
                Err(_) => continue,
            };
            let now = self.map.to_std(cx.now());
            for (meta, slot) in metas.iter().zip(buf.chunks(RECV_SLOT)).take(n) {
                let stride = meta.stride.max(1);
                for datagram in slot[..meta.len].chunks(stride) {
                    self.stats.datagrams_received += 1;
                    self.received_in_pass = true;
                    self.handle_datagram(now, meta, datagram);
                }
            }
        }
        self.recv_buf = buf;
    }

    fn handle_datagram(
        &mut self,
        now: std::time::Instant,
        meta: &quinn_udp::RecvMeta,
        data: &[u8],
    ) {
        let mut response = Vec::new();
        let event = self.endpoint.handle(
            now,
            meta.addr,
            meta.dst_ip,
            meta.ecn.map(proto_ecn),
            BytesMut::from(data),
            &mut response,
        );
        match event {
            Some(DatagramEvent::ConnectionEvent(ch, event)) => {
                if let Some(c) = self.conns.get_mut(&ch) {
                    c.conn.handle_event(event);
                    c.dirty = true;
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                match self.endpoint.accept(incoming, now, &mut response, None) {
                    Ok((ch, conn)) => self.insert(ch, conn),
                    Err(e) => {
                        if let Some(t) = e.response {
                            self.send_now(Datagram::from_transmit(&t, &response));
                        }
                    }
                }
            }
            Some(DatagramEvent::Response(t)) => {
                self.send_now(Datagram::from_transmit(&t, &response));
            }
            None => {}
        }
    }

    /// Sends one datagram (or GSO batch) now; keeps it if the socket is full.
    fn send_now(&mut self, d: Datagram) -> bool {
        if self.blocked.is_some() {
            // Order matters less than not losing it: it goes after the blocked one.
            return false;
        }
        let transmit = quinn_udp::Transmit {
            destination: d.destination,
            ecn: d.ecn.map(udp_ecn),
            contents: &d.bytes,
            segment_size: d.segment_size,
            src_ip: d.src_ip,
        };
        self.stats.send_calls += 1;
        match self.udp.send((&self.socket).into(), &transmit) {
            Ok(()) => {
                let count = d
                    .segment_size
                    .map_or(1, |s| d.bytes.len().div_ceil(s.max(1)) as u64);
                self.stats.datagrams_sent += count;
                self.count_cause(count);
                self.spare.push(d.bytes);
                true
            }
            Err(_) => {
                // quinn-udp reports only EAGAIN; anything else it logged and dropped.
                self.stats.send_would_block += 1;
                self.blocked = Some(d);
                false
            }
        }
    }

    fn count_cause(&mut self, count: u64) {
        let fired = self.log.fired.load(Ordering::Relaxed);
        let backstop = self.log.backstop.load(Ordering::Relaxed);
        let causes = &mut self.stats.causes;
        if backstop != self.seen_backstop {
            causes.backstop += count;
        } else if fired != self.seen_fired {
            causes.trigger_state += count;
        } else if self.received_in_pass {
            causes.packet += count;
        } else {
            causes.app += count;
        }
    }

    /// Timers, connection events and application events: everything before transmits.
    fn drive(&mut self, now: Instant) {
        let now_std = self.map.to_std(now);
        for c in self.conns.values_mut() {
            if let Some((asked, act_at)) = c.timeout
                && !act_at.is_after(now)
            {
                c.conn.handle_timeout(now_std);
                c.dirty = true;
                c.timeout = None;
                self.stats.timeouts += 1;
                let late = now_std.saturating_duration_since(asked).as_nanos() as u64;
                let _ = self.timer_lateness.record(late.max(1));
            }
            if let Some(at) = c.probe.deadline()
                && !round_up(self.map, self.config.timer_granularity, at).is_after(now)
                && c.probe.fire(now)
                && !c.conn.is_closed()
            {
                c.conn.ping();
                c.dirty = true;
                self.stats.tail_probes += 1;
                c.seen.lost_at_probe = Some(c.conn.stats().path.lost_packets);
            }
        }
        if let Some(t) = self.app_wake
            && !t.is_after(now)
        {
            self.app_wake = None;
        }
        let mut drained = Vec::new();
        for (&ch, c) in self.conns.iter_mut() {
            if !c.dirty {
                continue;
            }
            while let Some(event) = c.conn.poll_endpoint_events() {
                let gone = event.is_drained();
                if let Some(back) = self.endpoint.handle_event(ch, event) {
                    c.conn.handle_event(back);
                }
                if gone {
                    drained.push(ch);
                }
            }
            while let Some(event) = c.conn.poll() {
                let id = ConnId(ch);
                let out = match event {
                    Event::Connected => {
                        c.connected = true;
                        Some(QuicEvent::Connected(id))
                    }
                    Event::ConnectionLost { reason } => {
                        Some(QuicEvent::Lost(id, reason.to_string()))
                    }
                    Event::Stream(StreamEvent::Opened { dir: Dir::Bi }) => {
                        Some(QuicEvent::StreamOpened(id))
                    }
                    Event::Stream(StreamEvent::Readable { id: s }) => {
                        Some(QuicEvent::Readable(id, s))
                    }
                    Event::Stream(StreamEvent::Writable { id: s }) => {
                        Some(QuicEvent::Writable(id, s))
                    }
                    Event::Stream(StreamEvent::Finished { id: s }) => {
                        Some(QuicEvent::Finished(id, s))
                    }
                    Event::Stream(StreamEvent::Stopped { id: s, error_code }) => {
                        Some(QuicEvent::Stopped(id, s, error_code.into()))
                    }
                    _ => None,
                };
                self.events.extend(out);
            }
        }
        for ch in drained {
            if let Some(c) = self.conns.remove(&ch)
                && !c.connected
                && !self
                    .events
                    .iter()
                    .any(|e| matches!(e, QuicEvent::Lost(id, _) if *id == ConnId(ch)))
            {
                self.events.push_back(QuicEvent::Lost(
                    ConnId(ch),
                    "drained before it connected".into(),
                ));
            }
            self.pacer.remove(ch);
        }
    }

    /// Everything quinn-proto has to send, paced or not; then the driver's next wake-up.
    fn flush(&mut self, cx: &mut LoopCx<'_, Wake>) -> bool {
        let now = cx.now();
        let now_std = self.map.to_std(now);
        let mut sent_any = false;
        match self.config.pacing {
            Pacing::Quinn => {
                let handles: Vec<ConnectionHandle> = self.conns.keys().copied().collect();
                for ch in handles {
                    while self.blocked.is_none() {
                        let mut buf = std::mem::take(&mut self.send_buf);
                        buf.clear();
                        let c = self.conns.get_mut(&ch).expect("listed");
                        let Some(t) = c.conn.poll_transmit(now_std, self.max_datagrams, &mut buf)
                        else {
                            self.send_buf = buf;
                            break;
                        };
                        let d = Datagram::from_transmit(&t, &buf);
                        self.send_buf = buf;
                        sent_any |= self.send_now(d);
                        cx.trigger(TriggerSource::Send);
                    }
                }
            }
            Pacing::PerPacket => loop {
                sent_any |= self.release(cx, now);
                let mut pushed = false;
                let handles: Vec<ConnectionHandle> = self.conns.keys().copied().collect();
                for ch in handles {
                    if self.blocked.is_some() {
                        continue;
                    }
                    // A closed connection's CONNECTION_CLOSE leaves at once, ahead of its
                    // queue: it is not congestion controlled (quinn-proto does not pace it
                    // either), and a loop that stops right after a close must not leave it
                    // queued, or the peer waits out its idle timeout.
                    let closing = self.conns[&ch].conn.is_closed();
                    if !closing && self.pacer.queued(ch) > 0 {
                        continue;
                    }
                    let mut buf = self.spare.pop().unwrap_or_default();
                    buf.clear();
                    let c = self.conns.get_mut(&ch).expect("listed");
                    let Some(t) = c.conn.poll_transmit(now_std, self.per_departure, &mut buf)
                    else {
                        self.spare.push(buf);
                        continue;
                    };
                    if c.connected {
                        let stats = c.conn.stats();
                        let srtt = Span::from_duration(stats.path.rtt, self.map.hz);
                        self.pacer.set_window(ch, stats.path.cwnd, srtt);
                    } else {
                        // No RTT sample yet: like the kernel before its first sample, do
                        // not pace the handshake.
                        self.pacer.clear_rate(ch);
                    }
                    buf.truncate(t.size);
                    let d = Datagram {
                        destination: t.destination,
                        ecn: t.ecn,
                        src_ip: t.src_ip,
                        bytes: buf,
                        segment_size: t.segment_size,
                    };
                    pushed = true;
                    if closing {
                        sent_any |= self.send_now(d);
                        cx.trigger(TriggerSource::Send);
                        continue;
                    }
                    let len = d.bytes.len() as u64;
                    self.pacer.push(ch, now, len, d);
                }
                if !pushed {
                    break;
                }
            },
        }
        for c in self.conns.values_mut() {
            c.dirty = false;
        }
        self.seen_fired = self.log.fired.load(Ordering::Relaxed);
        self.seen_backstop = self.log.backstop.load(Ordering::Relaxed);
        self.received_in_pass = false;
        self.schedule_wake(cx);
        sent_any
    }

    /// Sends the paced datagrams due at `now`.
    fn release(&mut self, cx: &mut LoopCx<'_, Wake>, now: Instant) -> bool {
        if self.blocked.is_some() {
            return false;
        }
        let mut due = std::mem::take(&mut self.released);
        due.clear();
        let before = self.pacer.next_departure();
        if self.pacer.release(now, &mut due) == 0 {
            self.released = due;
            return false;
        }
        // The first datagram's stamp bounds how late the batch is.
        if let Some(first) = before {
            let late = now.saturating_since(first).as_nanos(self.map.hz);
            let _ = self.release_lateness.record(late.max(1));
        }
        let mut sent = false;
        for (_, d) in due.drain(..) {
            sent |= self.send_now(d);
            cx.trigger(TriggerSource::Send);
        }
        self.released = due;
        sent
    }

    fn schedule_wake(&mut self, cx: &mut LoopCx<'_, Wake>) {
        let departure = self.pacer.next_departure();
        // quinn's timers and the application's wake-ups: the events that need precision.
        let mut precise: Option<Instant> = None;
        let mut earliest = |t: Instant| {
            precise = Some(match precise {
                Some(n) if n.is_after(t) => t,
                Some(n) => n,
                None => t,
            });
        };
        if let Some(t) = self.app_wake {
            earliest(t);
        }
        if self.config.tail_probe {
            self.observe_flights(cx.now());
        }
        let map = self.map;
        let granularity = self.config.timer_granularity;
        for c in self.conns.values() {
            if let Some(at) = c.probe.deadline() {
                earliest(round_up(map, granularity, at));
            }
        }
        let mut timeouts = Vec::new();
        for (&ch, c) in self.conns.iter_mut() {
            match c.conn.poll_timeout() {
                Some(asked) => timeouts.push((ch, asked)),
                None => c.timeout = None,
            }
        }
        for (ch, asked) in timeouts {
            let act_at = round_up(map, granularity, map.to_soft(asked));
            if let Some(c) = self.conns.get_mut(&ch) {
                c.timeout = Some((asked, act_at));
            }
            earliest(act_at);
        }
        let (next, spin) = wake_plan(departure, precise, cx.spin_window());
        cx.set_idle_spin(spin);
        match (next, self.wake) {
            (Some(t), Some((_, at))) if t == at => {}
            (next, current) => {
                if let Some((id, _)) = current {
                    cx.cancel(id);
                }
                self.wake = None;
                if let Some(t) = next
                    && let Ok(id) = cx.schedule_at(t, Wake)
                {
                    self.wake = Some((id, t));
                }
            }
        }
    }

    /// Feeds each connection's tail-loss probe what changed since the last turn: data
    /// sent, ACKs processed, and whether anything is left unacknowledged.
    fn observe_flights(&mut self, now: Instant) {
        let hz = self.map.hz;
        for c in self.conns.values_mut() {
            if !c.connected {
                continue;
            }
            // quinn-proto replaces a connection's controller when its path changes. A record
            // only the driver still holds belongs to a controller that is gone, even if the
            // new one sits at the same address.
            let key = probe::controller_key(c.conn.congestion_state());
            let stale = match &c.seen.controller {
                Controller::Unknown => true,
                Controller::Tracked(k, f) => *k != key || Arc::strong_count(f) == 1,
                Controller::Untracked(k) => *k != key,
            };
            if stale {
                c.seen.controller = match probe::flight_at(key) {
                    Some(f) => {
                        // A new controller counts ACKs from zero: that is not an ACK.
                        c.seen.acks = f.read().1;
                        Controller::Tracked(key, f)
                    }
                    None => Controller::Untracked(key),
                };
            }
            let Controller::Tracked(_, flight) = &c.seen.controller else {
                continue;
            };
            let (in_flight, acks) = flight.read();
            let stats = c.conn.stats();
            let data = data_frames(&stats.frame_tx);
            let data_sent = data > c.seen.data_frames;
            let progress = Progress {
                data_sent,
                acked: acks != c.seen.acks,
                outstanding: data_sent || in_flight > 0,
            };
            c.seen.data_frames = data;
            c.seen.acks = acks;
            if data_sent
                && let Some(lost) = c.seen.lost_at_probe.take()
                && stats.path.lost_packets > lost
            {
                self.stats.tail_probes_finding_loss += 1;
            }
            c.probe
                .observe(now, progress, Span::from_duration(stats.path.rtt, hz));
        }
    }

    fn on_writable(&mut self, cx: &mut LoopCx<'_, Wake>) {
        if let Some(d) = self.blocked.take() {
            self.send_now(d);
            cx.trigger(TriggerSource::Send);
        }
    }
}

/// `t` rounded up to `granularity` from the driver's start (tokio's wheel rounds this way).
fn round_up(map: TimeMap, granularity: Option<Duration>, t: Instant) -> Instant {
    let Some(g) = granularity else {
        return t;
    };
    let g = Span::from_duration(g, map.hz).ticks().max(1);
    let since = t.saturating_since(map.soft).ticks();
    let rounded = since.div_ceil(g) * g;
    map.soft + Span::from_ticks(rounded)
}

/// When the driver wakes next, and whether the loop may spin before it: at the earlier of the
/// next paced departure and the next event that needs precision (one of quinn's timers, an
/// application wake-up). A departure may run a wake-up late (later departures keep their
/// times, so the spacing holds), so the loop blocks until it instead of spinning, unless a
/// precise event is due within `window` (a wake-up's lateness) after it.
fn wake_plan(
    departure: Option<Instant>,
    precise: Option<Instant>,
    window: Span,
) -> (Option<Instant>, bool) {
    match (departure, precise) {
        (Some(d), Some(p)) if p.is_after(d + window) => (Some(d), false),
        (Some(d), Some(p)) => (Some(if p.is_after(d) { d } else { p }), true),
        (Some(d), None) => (Some(d), false),
        (None, p) => (p, true),
    }
}

impl Datagram {
    fn from_transmit(t: &quinn_proto::Transmit, buf: &[u8]) -> Datagram {
        Datagram {
            destination: t.destination,
            ecn: t.ecn,
            src_ip: t.src_ip,
            bytes: buf[..t.size].to_vec(),
            segment_size: t.segment_size,
        }
    }
}

/// What the application does with the driver's events, on the loop thread.
pub trait App {
    /// An event of a connection or stream.
    fn on_event(&mut self, driver: &mut Driver, event: QuicEvent);
    /// Once per turn of the loop, after the events and before the driver sends: the place
    /// to start work that is not an answer to an event (a request on a timer). Returns
    /// whether it did anything.
    fn on_turn(&mut self, driver: &mut Driver) -> bool {
        let _ = driver;
        false
    }
}

/// A [`Driver`] and the soft-timer event loop that runs it, on the calling thread.
///
/// An echo server: every stream a client opens gets back what the client sent on it, once the
/// client has finished it; a stream that cannot be read closes its connection.
///
/// ```no_run
/// use std::net::UdpSocket;
/// use softtimer_quic::{App, Driver, DriverConfig, QuicEvent, QuicLoop, ReadStatus};
/// use softtimer_quic::tls::{Identity, Tuning, server_config};
///
/// #[derive(Default)]
/// struct Echo {
///     // What each stream has sent so far (a real server would bound this).
///     pending: std::collections::HashMap<(softtimer_quic::ConnId, softtimer_quic::StreamId), Vec<u8>>,
/// }
/// impl App for Echo {
///     fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
///         match event {
///             QuicEvent::StreamOpened(conn) => {
///                 // Take the new streams; their data arrives as Readable events.
///                 while let Ok(Some(stream)) = driver.accept_bi(conn) {
///                     self.pending.insert((conn, stream), Vec::new());
///                 }
///             }
///             QuicEvent::Readable(conn, stream) => {
///                 // A stream already answered may still be reported readable: skip it.
///                 let Some(buf) = self.pending.get_mut(&(conn, stream)) else {
///                     return;
///                 };
///                 match driver.read(conn, stream, |chunk| buf.extend_from_slice(chunk)) {
///                     Ok(ReadStatus::Finished) => {
///                         let data = self.pending.remove(&(conn, stream)).unwrap_or_default();
///                         // Short replies fit the stream's window; a long one would go on
///                         // writing at each Writable event.
///                         let _ = driver.write(conn, stream, &data);
///                         let _ = driver.finish(conn, stream);
///                     }
///                     Ok(ReadStatus::Blocked) => {}
///                     Ok(ReadStatus::Reset(_)) | Err(_) => {
///                         self.pending.remove(&(conn, stream));
///                         let _ = driver.close(conn, 1, "bad stream");
///                     }
///                 }
///             }
///             _ => {}
///         }
///     }
/// }
///
/// let identity = Identity::self_signed(&["localhost"]).unwrap();
/// let server = server_config(&identity, &Tuning::default()).unwrap();
/// let socket = UdpSocket::bind("127.0.0.1:4433").unwrap();
/// let mut quic = QuicLoop::new(Default::default(), socket, DriverConfig::default(), Some(server)).unwrap();
/// quic.run(&mut Echo::default()).unwrap();
/// ```
pub struct QuicLoop {
    ev: EventLoop<Wake>,
    driver: Driver,
}

impl QuicLoop {
    /// A loop on `socket`; a server when `server` is given (a client can still connect).
    pub fn new(
        loop_config: LoopConfig,
        socket: UdpSocket,
        config: DriverConfig,
        server: Option<ServerConfig>,
    ) -> Result<QuicLoop, QuicError> {
        let log = Arc::new(FireLog::default());
        let handler_log = Arc::clone(&log);
        let mut ev = EventLoop::new(loop_config, move |_, fired: Fired<Wake>| {
            handler_log.fired.fetch_add(1, Ordering::Relaxed);
            if fired.source == TriggerSource::Backstop {
                handler_log.backstop.fetch_add(1, Ordering::Relaxed);
            }
        })
        .map_err(QuicError::Loop)?;
        let mut driver = Driver::new(socket, config, server, *ev.clock())?;
        driver.log = log;
        ev.cx()
            .register(&driver.socket, Interest::READABLE, SOCKET_TOKEN)
            .map_err(QuicError::Loop)?;
        Ok(QuicLoop { ev, driver })
    }

    /// The driver, to connect or look at counters between runs.
    pub fn driver(&mut self) -> &mut Driver {
        &mut self.driver
    }

    /// The event loop (its counters and trigger statistics).
    pub fn event_loop(&self) -> &EventLoop<Wake> {
        &self.ev
    }

    /// Stops [`run`](Self::run) from another thread.
    pub fn stop_handle(&self) -> StopHandle {
        self.ev.stop_handle()
    }

    /// Runs the loop, handing events to `app`, until the app calls [`Driver::stop`] or the
    /// loop is stopped.
    pub fn run<A: App>(&mut self, app: &mut A) -> Result<(), QuicError> {
        let QuicLoop { ev, driver } = self;
        driver.stop = false;
        // Both callbacks need the driver; the loop never runs them at once.
        let cell = std::cell::RefCell::new(&mut *driver);
        let mut watching_writable = false;
        let mut loop_error: Option<QuicError> = None;
        let result = ev.run_with(
            |cx, ready: Ready| {
                if ready.token != SOCKET_TOKEN {
                    return;
                }
                let mut driver = cell.borrow_mut();
                if ready.writable {
                    driver.on_writable(cx);
                }
                if ready.readable || ready.closed {
                    driver.on_readable(cx);
                }
            },
            |cx, turn| {
                if matches!(turn, LoopTurn::BeforeBlock) {
                    return false;
                }
                let mut guard = cell.borrow_mut();
                let driver: &mut Driver = &mut guard;
                let now = cx.now();
                driver.drive(now);
                let mut did = !driver.events.is_empty();
                while let Some(event) = driver.events.pop_front() {
                    app.on_event(driver, event);
                }
                did |= app.on_turn(driver);
                // What the app did may produce events of its own (a stream it finished).
                driver.drive(now);
                while let Some(event) = driver.events.pop_front() {
                    app.on_event(driver, event);
                    did = true;
                }
                did |= driver.flush(cx);
                let want_writable = driver.blocked.is_some();
                if want_writable != watching_writable {
                    let interest = if want_writable {
                        Interest::BOTH
                    } else {
                        Interest::READABLE
                    };
                    if let Err(e) = cx.reregister(&driver.socket, interest, SOCKET_TOKEN) {
                        loop_error = Some(QuicError::Loop(e));
                        cx.stop();
                    }
                    watching_writable = want_writable;
                }
                if driver.stop {
                    cx.stop();
                }
                did
            },
        );
        let _ = cell.into_inner();
        if watching_writable {
            let _ = ev
                .cx()
                .reregister(&driver.socket, Interest::READABLE, SOCKET_TOKEN);
        }
        result.map_err(QuicError::Loop)?;
        match loop_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ticks: u64) -> Instant {
        Instant::from_ticks(ticks)
    }

    #[test]
    fn a_departure_alone_is_waited_for_without_spinning() {
        assert_eq!(
            wake_plan(Some(at(100)), None, Span::from_ticks(20)),
            (Some(at(100)), false)
        );
    }

    #[test]
    fn a_timer_well_after_the_departure_leaves_the_departure_unspun() {
        assert_eq!(
            wake_plan(Some(at(100)), Some(at(121)), Span::from_ticks(20)),
            (Some(at(100)), false)
        );
    }

    #[test]
    fn a_timer_within_a_window_after_the_departure_keeps_the_spin_and_the_departure_time() {
        // At exactly d + window, and inside it: wake for the departure, spinning, so that the
        // timer after it is not a wake-up late.
        for p in [101, 110, 120] {
            assert_eq!(
                wake_plan(Some(at(100)), Some(at(p)), Span::from_ticks(20)),
                (Some(at(100)), true),
                "timer at {p}"
            );
        }
    }

    #[test]
    fn a_timer_first_is_woken_for_with_the_spin() {
        assert_eq!(
            wake_plan(Some(at(100)), Some(at(80)), Span::from_ticks(20)),
            (Some(at(80)), true)
        );
        assert_eq!(
            wake_plan(Some(at(100)), Some(at(100)), Span::from_ticks(20)),
            (Some(at(100)), true)
        );
        assert_eq!(
            wake_plan(None, Some(at(80)), Span::from_ticks(20)),
            (Some(at(80)), true)
        );
    }

    #[test]
    fn nothing_pending_wakes_for_nothing() {
        assert_eq!(wake_plan(None, None, Span::from_ticks(20)), (None, true));
    }
}
