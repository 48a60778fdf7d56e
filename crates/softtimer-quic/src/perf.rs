//! The QUIC performance protocol (draft-banks-quic-performance), on the driver.
//!
//! ALPN `perf`. The client opens a bidirectional stream, sends the number of bytes it wants
//! back as a big-endian u64, then its upload, and finishes the stream; the server reads to
//! the end and answers with that many bytes. quinn's `perf` tool and msquic's `secnetperf`
//! speak it. The bytes served here follow a pattern (byte `i` of a response is `i % 251`),
//! so a client can check every byte it receives.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use softtimer::{Clock, Instant, Span};

use crate::{App, ConnId, Driver, QuicError, QuicEvent, ReadStatus, StreamError, StreamId, VarInt};

/// Length of the pattern's period.
const PERIOD: usize = 251;
/// One chunk of the pattern, long enough to start a write at any phase.
const CHUNK: usize = 64 * 1024;

/// Byte `offset` of every response (and upload).
pub fn pattern_byte(offset: u64) -> u8 {
    (offset % PERIOD as u64) as u8
}

/// A pattern buffer: `pattern_slice(buf, offset, len)` is the pattern from `offset`.
pub struct Pattern(Vec<u8>);

impl Default for Pattern {
    fn default() -> Self {
        Pattern(
            (0..CHUNK + PERIOD)
                .map(|i| pattern_byte(i as u64))
                .collect(),
        )
    }
}

impl Pattern {
    /// Up to 64 KiB of the pattern starting at `offset`, at most `len` bytes.
    pub fn at(&self, offset: u64, len: u64) -> &[u8] {
        let phase = (offset % PERIOD as u64) as usize;
        let n = (len.min(CHUNK as u64)) as usize;
        &self.0[phase..phase + n]
    }
}

#[derive(Default)]
struct ServerStream {
    header: Vec<u8>,
    response: u64,
    uploaded: u64,
    sent: u64,
    responding: bool,
}

/// What the server did.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ServerReport {
    /// Connections accepted.
    pub connections: u64,
    /// Requests answered in full.
    pub requests: u64,
    /// Bytes sent in responses.
    pub bytes_sent: u64,
    /// Bytes received in uploads.
    pub bytes_received: u64,
    /// Requests given up: shorter than the 8-byte header, or reset or stopped by the peer
    /// (the server resets and stops their streams, code [`ABORT_CODE`]).
    pub aborted: u64,
    /// Packets this side sent, over its closed connections (`None` where the stack does not
    /// say; the lab's kernel-TCP server fills it from `TCP_INFO`).
    pub sent_packets: Option<u64>,
    /// Packets this side declared lost (retransmitted), over its closed connections.
    pub lost_packets: Option<u64>,
}

impl ServerReport {
    /// Adds a closed connection's packet counts.
    pub fn add_path_stats(&mut self, stats: &quinn_proto::PathStats) {
        *self.sent_packets.get_or_insert(0) += stats.sent_packets;
        *self.lost_packets.get_or_insert(0) += stats.lost_packets;
    }
}

/// A perf-protocol server, as a driver [`App`].
pub struct PerfServer {
    streams: HashMap<(ConnId, StreamId), ServerStream>,
    pattern: Pattern,
    /// Stop after this many connections have closed (a failed handshake counts, as stock
    /// quinn's accept does), once no other is open or in its handshake (`None`: serve until
    /// stopped).
    pub stop_after_connections: Option<u64>,
    closed: u64,
    /// Set from another thread to close every connection and stop (see
    /// [`PerfServer::close_on`]).
    closing: Option<Arc<AtomicBool>>,
    /// The flag was seen and the connections closed (their path counts taken then).
    shut_down: bool,
    /// Connections up and not yet reported lost: whose path counts a shutdown takes.
    open: std::collections::HashSet<ConnId>,
    /// What was served so far.
    pub report: ServerReport,
}

/// The application error code of a [`PerfServer`]'s connections when it shuts down.
pub const SHUTDOWN_CODE: u32 = 0;
/// The reason a [`PerfServer`] gives its clients when it shuts down.
pub const SHUTDOWN_REASON: &[u8] = b"server shutting down";
/// The application error code with which a [`PerfServer`] resets (and stops) the stream of
/// a request it gives up: one shorter than the perf protocol's 8-byte header, or one the
/// peer reset or stopped.
pub const ABORT_CODE: u32 = 1;

impl PerfServer {
    /// A server that serves until stopped, or until `stop_after_connections` have closed.
    pub fn new(stop_after_connections: Option<u64>) -> Self {
        PerfServer {
            streams: HashMap::new(),
            pattern: Pattern::default(),
            stop_after_connections,
            closed: 0,
            closing: None,
            shut_down: false,
            open: std::collections::HashSet::new(),
            report: ServerReport::default(),
        }
    }

    /// Shuts down once `flag` is set: at its next turn the server closes every connection
    /// (application code [`SHUTDOWN_CODE`], reason [`SHUTDOWN_REASON`]) and stops the loop,
    /// which sends the closes first (waiting up to 100 ms for a full socket to take them).
    /// Clients learn at once that the server is gone, instead
    /// of at their idle timeout. Whoever sets the flag wakes the loop
    /// ([`softtimer_rt::LoopWaker`]) so that the turn comes.
    ///
    /// ```no_run
    /// use std::sync::{Arc, atomic::{AtomicBool, Ordering}};
    /// use softtimer_quic::{QuicLoop, perf::PerfServer};
    /// # fn serve(mut quic: QuicLoop) -> Result<(), softtimer_quic::QuicError> {
    /// let closing = Arc::new(AtomicBool::new(false));
    /// let mut server = PerfServer::new(None).close_on(Arc::clone(&closing));
    /// let waker = quic.event_loop().waker();
    /// // On Ctrl-C, say: close every connection, then stop.
    /// std::thread::spawn(move || {
    ///     closing.store(true, Ordering::Release);
    ///     waker.wake();
    /// });
    /// quic.run(&mut server)?;
    /// # Ok(()) }
    /// ```
    pub fn close_on(mut self, flag: Arc<AtomicBool>) -> Self {
        self.closing = Some(flag);
        self
    }

    fn read<C: Clock + Clone>(&mut self, driver: &mut Driver<C>, conn: ConnId, stream: StreamId) {
        // A late event for a stream already answered: nothing to read.
        let Some(state) = self.streams.get_mut(&(conn, stream)) else {
            return;
        };
        let before = state.uploaded;
        let status = driver.read(conn, stream, |mut data| {
            if state.header.len() < 8 {
                let take = (8 - state.header.len()).min(data.len());
                state.header.extend_from_slice(&data[..take]);
                data = &data[take..];
            }
            state.uploaded += data.len() as u64;
        });
        self.report.bytes_received += state.uploaded - before;
        match status {
            Ok(ReadStatus::Finished) if state.responding => {}
            Ok(ReadStatus::Finished) => {
                if state.header.len() < 8 {
                    // Not a perf request: nothing to answer.
                    self.abort(driver, conn, stream);
                    return;
                }
                state.response = u64::from_be_bytes(state.header[..8].try_into().expect("8"));
                state.responding = true;
                self.write(driver, conn, stream);
            }
            Ok(ReadStatus::Blocked) => {}
            // A request read to its end whose answer waits for flow-control credit: quinn-proto
            // may report the stream readable again, and it has nothing more to read.
            Err(QuicError::Stream(StreamError::Closed { .. })) if state.responding => {}
            Err(_) => self.abort(driver, conn, stream),
        }
    }

    /// Gives up a request (not a perf request, or reset or stopped by the peer): counts it
    /// and closes both halves of its stream, so that the peer hears of it now rather than
    /// at its idle timeout, the peer's stop is answered with a reset (RFC 9000, 3.5), and
    /// quinn-proto, which frees a stream only with both halves closed, gives the stream's
    /// credit back to the peer.
    fn abort<C: Clock + Clone>(&mut self, driver: &mut Driver<C>, conn: ConnId, stream: StreamId) {
        self.report.aborted += 1;
        self.streams.remove(&(conn, stream));
        let code = VarInt::from_u32(ABORT_CODE);
        let _ = driver.reset(conn, stream, code);
        let _ = driver.stop_sending(conn, stream, code);
    }

    fn write<C: Clock + Clone>(&mut self, driver: &mut Driver<C>, conn: ConnId, stream: StreamId) {
        let Some(state) = self.streams.get_mut(&(conn, stream)) else {
            return;
        };
        if !state.responding {
            return;
        }
        while state.sent < state.response {
            let chunk = self.pattern.at(state.sent, state.response - state.sent);
            match driver.write(conn, stream, chunk) {
                Ok(0) => return,
                Ok(n) => {
                    state.sent += n as u64;
                    self.report.bytes_sent += n as u64;
                }
                Err(_) => {
                    self.abort(driver, conn, stream);
                    return;
                }
            }
        }
        let _ = driver.finish(conn, stream);
        self.report.requests += 1;
        self.streams.remove(&(conn, stream));
    }
}

impl<C: Clock + Clone> App<C> for PerfServer {
    fn on_turn(&mut self, driver: &mut Driver<C>) -> bool {
        if !self
            .closing
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Acquire))
        {
            return false;
        }
        if !self.shut_down {
            self.shut_down = true;
            // Counted now (the loop stops before the connections drain): those not counted
            // at their loss already.
            for &conn in &self.open {
                if let Some(stats) = driver.connection_stats(conn) {
                    self.report.add_path_stats(&stats.path);
                }
            }
            // Every connection, those still in their handshake too.
            for conn in driver.connection_ids() {
                let _ = driver.close(conn, VarInt::from_u32(SHUTDOWN_CODE), SHUTDOWN_REASON);
            }
        }
        driver.stop();
        true
    }

    fn on_event(&mut self, driver: &mut Driver<C>, event: QuicEvent) {
        match event {
            QuicEvent::Connected(conn) => {
                self.report.connections += 1;
                self.open.insert(conn);
            }
            QuicEvent::StreamOpened(conn, quinn_proto::Dir::Bi) => {
                while let Ok(Some(stream)) = driver.accept_bi(conn) {
                    self.streams.insert((conn, stream), ServerStream::default());
                    self.read(driver, conn, stream);
                }
            }
            QuicEvent::Readable(conn, stream) => self.read(driver, conn, stream),
            QuicEvent::Writable(conn, stream) => self.write(driver, conn, stream),
            QuicEvent::Stopped(conn, stream, _) if self.streams.contains_key(&(conn, stream)) => {
                self.abort(driver, conn, stream);
            }
            // A response written whole and counted, stopped before the peer had it all: the
            // rest is not sent (RFC 9000, 3.5), and the stream is freed.
            QuicEvent::Stopped(conn, stream, _) => {
                let _ = driver.reset(conn, stream, VarInt::from_u32(ABORT_CODE));
            }
            QuicEvent::Lost(conn, _) => {
                let was_open = self.open.remove(&conn);
                // Counted at the shutdown already if it was up then.
                if !(self.shut_down && was_open)
                    && let Some(stats) = driver.connection_stats(conn)
                {
                    self.report.add_path_stats(&stats.path);
                }
                self.streams.retain(|(c, _), _| *c != conn);
                // A handshake that failed counts too, as stock quinn's accept does: a server
                // told to serve one client ends after a client that refused its certificate.
                self.closed += 1;
                // Those still open, or still in their handshake, finish first: a second
                // client is not cut off mid-request or mid-handshake.
                if self
                    .stop_after_connections
                    .is_some_and(|n| self.closed >= n)
                    && driver.live_connections() == 0
                {
                    driver.stop();
                }
            }
            // The perf protocol has bidirectional streams only. A peer given others (a
            // transport of the caller's that allows them) is told to stop, and its datagrams
            // are read and dropped, so that neither is held unread.
            QuicEvent::StreamOpened(conn, quinn_proto::Dir::Uni) => {
                while let Ok(Some(stream)) = driver.accept_uni(conn) {
                    let _ = driver.stop_sending(conn, stream, VarInt::from_u32(0));
                }
            }
            QuicEvent::DatagramReceived(conn) => {
                while let Ok(Some(_)) = driver.read_datagram(conn) {}
            }
            _ => {}
        }
    }
}

/// What a client asks of the server.
#[derive(Clone, Debug)]
pub struct ClientPlan {
    /// Bytes to download per request.
    pub download: u64,
    /// Bytes to upload per request.
    pub upload: u64,
    /// Requests, one after another on one connection.
    pub requests: u64,
    /// Start request `k` at `k × interval` after the first (an application-limited
    /// sender); `None`: each as soon as the previous completes.
    pub interval: Option<Duration>,
    /// Wait this long before the first request after the handshake (an idle connection).
    pub warmup: Option<(u64, Duration)>,
    /// Check every byte received against the pattern.
    pub verify: bool,
    /// Give up if the handshake has not completed by then.
    pub connect_timeout: Duration,
}

impl ClientReport {
    /// Fills the latency percentiles and goodput from `latencies_us`, `elapsed_s` and
    /// `download_bytes`, and `verified` (`None`: not checked) against the `requests` planned:
    /// one summary for every stack that fills a report.
    pub fn summarize(&mut self, requests: u64, verified: Option<bool>) {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
        for &l in &self.latencies_us {
            let _ = h.record((l as u64).max(1));
        }
        if !h.is_empty() {
            self.p50_us = h.value_at_quantile(0.5) as f64;
            self.p90_us = h.value_at_quantile(0.9) as f64;
            self.p99_us = h.value_at_quantile(0.99) as f64;
            self.p999_us = h.value_at_quantile(0.999) as f64;
        }
        if self.elapsed_s > 0.0 {
            self.goodput_bps = self.download_bytes as f64 * 8.0 / self.elapsed_s;
        }
        self.verified = verified.map(|ok| ok && self.requests == requests);
    }
}

impl Default for ClientPlan {
    fn default() -> Self {
        ClientPlan {
            download: 1 << 20,
            upload: 0,
            requests: 1,
            interval: None,
            warmup: None,
            verify: true,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// What the client measured.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ClientReport {
    /// Handshake time, µs.
    pub handshake_us: f64,
    /// Requests completed.
    pub requests: u64,
    /// Bytes downloaded (responses).
    pub download_bytes: u64,
    /// Bytes uploaded.
    pub upload_bytes: u64,
    /// From the first request's start to the last byte, s.
    pub elapsed_s: f64,
    /// Download goodput over `elapsed_s`, bit/s.
    pub goodput_bps: f64,
    /// Request latency (stream opened to last response byte), µs.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Every latency, µs, in request order.
    pub latencies_us: Vec<f64>,
    /// Whether every byte matched the pattern (`None`: not checked).
    pub verified: Option<bool>,
    /// Smoothed RTT at the end, µs.
    pub rtt_us: f64,
    /// Congestion window at the end, bytes.
    pub cwnd: u64,
    /// Packets quinn-proto sent and declared lost (this side).
    pub sent_packets: u64,
    /// Packets this side declared lost.
    pub lost_packets: u64,
    /// Congestion events.
    pub congestion_events: u64,
    /// What went wrong, if the run failed.
    pub error: Option<String>,
}

enum ClientState {
    Connecting,
    Idle,
    Warmup { stream: StreamId },
    Request(Request),
    Done,
}

struct Request {
    stream: StreamId,
    start: Instant,
    header_sent: usize,
    uploaded: u64,
    finished_upload: bool,
    received: u64,
}

/// A perf-protocol client, as a driver [`App`]: connects, runs its plan, closes.
pub struct PerfClient {
    plan: ClientPlan,
    conn: ConnId,
    started: Instant,
    first_request: Option<Instant>,
    next_start: Option<Instant>,
    state: ClientState,
    pattern: Pattern,
    verified: bool,
    /// What was measured (complete after the loop returns).
    pub report: ClientReport,
}

impl PerfClient {
    /// A client for the connection `conn` the driver just started (at `started`).
    pub fn new(plan: ClientPlan, conn: ConnId, started: Instant) -> Self {
        PerfClient {
            plan,
            conn,
            started,
            first_request: None,
            next_start: None,
            state: ClientState::Connecting,
            pattern: Pattern::default(),
            verified: true,
            report: ClientReport::default(),
        }
    }

    fn micros<C: Clock + Clone>(driver: &Driver<C>, span: Span) -> f64 {
        span.as_nanos(driver.hz()) as f64 / 1000.0
    }

    fn fail<C: Clock + Clone>(&mut self, driver: &mut Driver<C>, why: String) {
        if self.report.error.is_none() {
            self.report.error = Some(why);
        }
        let _ = driver.close(self.conn, VarInt::from_u32(1), b"error");
        self.state = ClientState::Done;
        driver.stop();
    }

    fn start_request<C: Clock + Clone>(&mut self, driver: &mut Driver<C>) {
        let now = driver.now();
        match driver.open_bi(self.conn) {
            Ok(Some(stream)) => {
                self.first_request.get_or_insert(now);
                self.state = ClientState::Request(Request {
                    stream,
                    start: now,
                    header_sent: 0,
                    uploaded: 0,
                    finished_upload: false,
                    received: 0,
                });
                self.pump_upload(driver);
            }
            Ok(None) => self.fail(driver, "the server allows no stream".into()),
            Err(e) => self.fail(driver, e.to_string()),
        }
    }

    fn pump_upload<C: Clock + Clone>(&mut self, driver: &mut Driver<C>) {
        let ClientState::Request(r) = &mut self.state else {
            return;
        };
        let header = self.plan.download.to_be_bytes();
        while r.header_sent < 8 {
            match driver.write(self.conn, r.stream, &header[r.header_sent..]) {
                Ok(0) => return,
                Ok(n) => r.header_sent += n,
                Err(e) => return self.fail(driver, e.to_string()),
            }
        }
        while r.uploaded < self.plan.upload {
            let chunk = self.pattern.at(r.uploaded, self.plan.upload - r.uploaded);
            match driver.write(self.conn, r.stream, chunk) {
                Ok(0) => return,
                Ok(n) => r.uploaded += n as u64,
                Err(e) => return self.fail(driver, e.to_string()),
            }
        }
        if !r.finished_upload {
            r.finished_upload = true;
            self.report.upload_bytes += r.uploaded;
            if let Err(e) = driver.finish(self.conn, r.stream) {
                self.fail(driver, e.to_string());
            }
        }
    }

    fn read_response<C: Clock + Clone>(&mut self, driver: &mut Driver<C>, stream: StreamId) {
        let verify = self.plan.verify;
        let ClientState::Request(r) = &mut self.state else {
            // A warm-up response: read and drop.
            if let ClientState::Warmup { stream: s } = self.state
                && s == stream
            {
                match driver.read(self.conn, stream, |_| {}) {
                    Ok(ReadStatus::Finished) => {
                        let idle = self.plan.warmup.map(|w| w.1).unwrap_or_default();
                        self.state = ClientState::Idle;
                        self.next_start = Some(driver.now() + driver_span(driver, idle));
                        driver.wake_at(self.next_start.expect("set"));
                    }
                    Ok(ReadStatus::Blocked) => {}
                    Err(e) => self.fail(driver, read_failure(&e)),
                }
            }
            return;
        };
        if r.stream != stream {
            return;
        }
        let mut ok = true;
        let mut received = r.received;
        let status = driver.read(self.conn, stream, |data| {
            if verify {
                for (i, &b) in data.iter().enumerate() {
                    if b != pattern_byte(received + i as u64) {
                        ok = false;
                        break;
                    }
                }
            }
            received += data.len() as u64;
        });
        self.report.download_bytes += received - r.received;
        r.received = received;
        self.verified &= ok;
        match status {
            Ok(ReadStatus::Finished) => {
                let now = driver.now();
                let latency = Self::micros(driver, now.saturating_since(r.start));
                // A response of the wrong length is a failed run, whether bytes are verified
                // or not (a server that finished early must not pass for one that served).
                if r.received != self.plan.download {
                    let (got, asked) = (r.received, self.plan.download);
                    self.fail(
                        driver,
                        format!("the server answered {got} bytes where {asked} were asked"),
                    );
                    return;
                }
                self.report.latencies_us.push(latency);
                self.report.requests += 1;
                self.report.elapsed_s = Self::micros(
                    driver,
                    now.saturating_since(self.first_request.unwrap_or(now)),
                ) / 1e6;
                self.state = ClientState::Idle;
                if self.report.requests >= self.plan.requests {
                    self.finish(driver);
                } else if let Some(interval) = self.plan.interval {
                    let first = self.first_request.unwrap_or(now);
                    let k = self.report.requests;
                    // Saturating: a plan of a vast interval waits "for ever", never panics.
                    let after = interval.saturating_mul(u32::try_from(k).unwrap_or(u32::MAX));
                    let at = first + driver_span(driver, after);
                    self.next_start = Some(at);
                    driver.wake_at(at);
                } else {
                    self.start_request(driver);
                }
            }
            Ok(ReadStatus::Blocked) => {}
            Err(e) => self.fail(driver, read_failure(&e)),
        }
    }

    fn finish<C: Clock + Clone>(&mut self, driver: &mut Driver<C>) {
        self.fill_stats(driver);
        let _ = driver.close(self.conn, VarInt::from_u32(0), b"done");
        self.state = ClientState::Done;
        driver.stop();
    }

    fn fill_stats<C: Clock + Clone>(&mut self, driver: &mut Driver<C>) {
        let verified = self.plan.verify.then_some(self.verified);
        self.report.summarize(self.plan.requests, verified);
        let r = &mut self.report;
        if let Some(stats) = driver.connection_stats(self.conn) {
            r.rtt_us = stats.path.rtt.as_secs_f64() * 1e6;
            r.cwnd = stats.path.cwnd;
            r.sent_packets = stats.path.sent_packets;
            r.lost_packets = stats.path.lost_packets;
            r.congestion_events = stats.path.congestion_events;
        }
    }

    /// Whether the plan ran to the end.
    pub fn succeeded(&self) -> bool {
        self.report.error.is_none() && self.report.requests == self.plan.requests
    }
}

fn driver_span<C: Clock + Clone>(driver: &Driver<C>, d: Duration) -> Span {
    // At most a year: a span near the clock's range would wrap a time into the past.
    Span::from_duration(d.min(Duration::from_secs(365 * 24 * 3600)), driver.hz())
}

/// Why a response could not be read, for the report.
fn read_failure(e: &QuicError) -> String {
    match e {
        QuicError::Stream(StreamError::Reset { code, .. }) => {
            format!("the server reset the stream (code {code})")
        }
        e => e.to_string(),
    }
}

impl<C: Clock + Clone> App<C> for PerfClient {
    fn on_event(&mut self, driver: &mut Driver<C>, event: QuicEvent) {
        match event {
            QuicEvent::Connected(_) => {
                let now = driver.now();
                self.report.handshake_us = Self::micros(driver, now.saturating_since(self.started));
                if let Some((bytes, _)) = self.plan.warmup {
                    match driver.open_bi(self.conn) {
                        Ok(Some(stream)) => {
                            let _ = driver.write(self.conn, stream, &bytes.to_be_bytes());
                            let _ = driver.finish(self.conn, stream);
                            self.state = ClientState::Warmup { stream };
                        }
                        _ => self.fail(driver, "cannot open the warm-up stream".into()),
                    }
                } else {
                    self.start_request(driver);
                }
            }
            QuicEvent::Readable(_, stream) => self.read_response(driver, stream),
            QuicEvent::Writable(..) => self.pump_upload(driver),
            QuicEvent::Lost(_, why) if !matches!(self.state, ClientState::Done) => {
                let why = if matches!(self.state, ClientState::Connecting) {
                    format!("the handshake failed: {why}")
                } else {
                    format!("the connection was lost: {why}")
                };
                self.report.error = Some(why);
                self.state = ClientState::Done;
                driver.stop();
            }
            _ => {}
        }
    }

    fn on_turn(&mut self, driver: &mut Driver<C>) -> bool {
        let now = driver.now();
        match self.state {
            ClientState::Connecting => {
                let deadline = self.started + driver_span(driver, self.plan.connect_timeout);
                if !deadline.is_after(now) {
                    let secs = self.plan.connect_timeout.as_secs_f64();
                    self.fail(driver, format!("no answer from the server within {secs} s"));
                    return true;
                }
                driver.wake_at(deadline);
                false
            }
            ClientState::Idle => match self.next_start {
                Some(at) if !at.is_after(now) => {
                    self.next_start = None;
                    self.start_request(driver);
                    true
                }
                Some(at) => {
                    driver.wake_at(at);
                    false
                }
                None => false,
            },
            _ => false,
        }
    }
}
