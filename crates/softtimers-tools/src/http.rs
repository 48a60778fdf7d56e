//! The HTTP workload: an event-driven HTTP/1.1 server in the spirit of the paper's Flash
//! server, and a load generator in the spirit of its S-client, both on `softtimer-rt`'s
//! event loop, so that every `accept`, `read` and `write` they make is a trigger state.
//!
//! The server serves one cached 6 KB file (at `/` and `/6k`), with and without keep-alive,
//! answers pipelined requests in order, `HEAD` without a body, `404` for other paths, `501`
//! for other methods, `400` (and a close) for malformed requests, and closes connections
//! idle for longer than its timeout.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use softtimer::EventId;
use softtimer_net::poll::{PollAction, PollController, PollerConfig};
use softtimer_rt::{Interest, LoopCx, LoopTurn, PollSet, Ready};

/// Size of the cached file the server serves.
pub const FILE_SIZE: usize = 6 * 1024;
/// The file's contents (the lab writes the same bytes for nginx to serve).
pub fn file_body() -> Vec<u8> {
    (0..FILE_SIZE).map(|i| b'a' + (i % 26) as u8).collect()
}
/// A request head larger than this is refused with 400.
const MAX_HEAD: usize = 16 * 1024;
const LISTENER: u64 = 0;
const SWEEP: u64 = 1;
const FIRST_CONN: u64 = 2;
/// The polled set's token in the loop (far above any connection's).
const POLL_SET: u64 = 1 << 48;
/// The most ready descriptors one poll takes.
const POLL_BATCH: usize = 256;

/// What the server has done, readable from any thread.
#[derive(Debug, Default)]
pub struct ServerCounters {
    /// Responses with status 200 written completely.
    pub ok: AtomicU64,
    /// Responses with another status (400, 404, 501).
    pub errors: AtomicU64,
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections closed for being idle.
    pub idle_closed: AtomicU64,
}

struct Conn {
    fd: OwnedFd,
    input: Vec<u8>,
    output: Vec<u8>,
    written: usize,
    /// Close once `output` is written (HTTP/1.0, `Connection: close`, or an error).
    close_after: bool,
    /// Watching for writability (output is waiting).
    want_write: bool,
    last_active: Instant,
}

/// What soft-timer polling did (see [`HttpServer::poll_with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollCounts {
    /// Polls of the server's sockets.
    pub polls: u64,
    /// Ready sockets (and accepted connections) those polls found.
    pub found: u64,
    /// Readiness events of the polled set that started polling (the "interrupts").
    pub interrupts: u64,
    /// Times the loop went idle while polling, and readiness was armed again.
    pub rearmed_idle: u64,
}

/// The server's sockets under soft-timer polling: they live in a [`PollSet`] of their own,
/// armed in the loop (interrupts) only while not polling.
struct Polled {
    set: PollSet,
    controller: PollController,
    /// Set by the loop's soft-event handler when the next poll is due.
    due: Arc<std::sync::atomic::AtomicBool>,
    pending: Option<EventId>,
    armed: bool,
    ready: Vec<Ready>,
    counts: PollCounts,
}

/// Where the server's descriptors are watched: the loop's epoll, or the polled set.
fn watch<E>(
    polled: Option<&Polled>,
    cx: &mut LoopCx<'_, E>,
    fd: impl AsFd,
    interest: Interest,
    token: u64,
    add: bool,
) -> Result<(), softtimer_rt::RtError> {
    match (polled, add) {
        (Some(p), true) => p.set.add(fd, interest, token),
        (Some(p), false) => p.set.modify(fd, interest, token),
        (None, true) => cx.register(fd, interest, token),
        (None, false) => cx.reregister(fd, interest, token),
    }
}

/// The server's state; drive it with [`HttpServer::on_ready`] from an event loop's `run`.
pub struct HttpServer {
    listener: TcpListener,
    sweep: OwnedFd,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    body: Vec<u8>,
    idle_timeout: Duration,
    counters: Arc<ServerCounters>,
    scratch: Vec<u8>,
    polled: Option<Polled>,
}

fn header(status: &str, length: usize, keep_alive: bool) -> String {
    format!(
        "HTTP/1.1 {status}\r\nServer: softtimers\r\nContent-Type: text/plain\r\n\
         Content-Length: {length}\r\nConnection: {}\r\n\r\n",
        if keep_alive { "keep-alive" } else { "close" }
    )
}

/// A message's `Content-Length`: `None` without one, `Some(None)` if it is not a number.
fn content_length(headers: &[httparse::Header<'_>]) -> Option<Option<usize>> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(|h| {
            std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
        })
}

impl HttpServer {
    /// A server listening on `addr` (port 0: any free port). Connections idle for longer
    /// than `idle_timeout` are closed.
    pub fn bind(addr: SocketAddr, idle_timeout: Duration) -> Result<Self> {
        let listener =
            TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
        listener.set_nonblocking(true)?;
        // Sweep for idle connections ten times per timeout (at most every 100 ms).
        let period =
            (idle_timeout / 10).clamp(Duration::from_millis(1), Duration::from_millis(100));
        let sweep = softtimer_rt::periodic_timerfd(period)?;
        let body = file_body();
        Ok(HttpServer {
            listener,
            sweep,
            conns: Vec::new(),
            free: Vec::new(),
            body,
            idle_timeout,
            counters: Arc::default(),
            scratch: vec![0; 64 * 1024],
            polled: None,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Its counters.
    pub fn counters(&self) -> Arc<ServerCounters> {
        Arc::clone(&self.counters)
    }

    /// Open connections.
    pub fn open_connections(&self) -> usize {
        self.conns.iter().filter(|c| c.is_some()).count()
    }

    /// Serves by soft-timer polling (Section 4.2 of the soft-timers paper) instead of a
    /// readiness event per socket: the listener and the connections go into a [`PollSet`];
    /// its readiness (the "interrupt") only starts polling; while polling, the set is polled
    /// at soft-timer events at the interval `config`'s controller keeps (so that a poll finds
    /// its aggregation quota on average), and readiness is armed again when the loop is about
    /// to block or the polls run dry. Call before [`register`](Self::register); the loop's
    /// soft-event handler must set `due` (and nothing else needs to be scheduled on it), and
    /// the loop must be run with [`run_with`](softtimer_rt::EventLoop::run_with) handing its
    /// turns to [`on_turn`](Self::on_turn). `hz` is the loop clock's resolution.
    pub fn poll_with(
        &mut self,
        config: PollerConfig,
        hz: u64,
        due: Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<()> {
        self.polled = Some(Polled {
            set: PollSet::new(POLL_BATCH)?,
            controller: PollController::new(config, hz),
            due,
            pending: None,
            armed: false,
            ready: Vec::with_capacity(POLL_BATCH),
            counts: PollCounts::default(),
        });
        Ok(())
    }

    /// What polling did, if the server polls.
    pub fn poll_counts(&self) -> Option<PollCounts> {
        self.polled.as_ref().map(|p| p.counts)
    }

    /// Registers the listener and the idle sweep with the loop (the listener with the polled
    /// set, and the set with the loop, when the server polls).
    pub fn register<E>(&mut self, cx: &mut LoopCx<'_, E>) -> Result<()> {
        watch(
            self.polled.as_ref(),
            cx,
            &self.listener,
            Interest::READABLE,
            LISTENER,
            true,
        )?;
        cx.register(&self.sweep, Interest::READABLE, SWEEP)?;
        if let Some(p) = self.polled.as_mut() {
            cx.register(&p.set, Interest::READABLE, POLL_SET)?;
            p.armed = true;
        }
        Ok(())
    }

    /// A turn of the loop (see [`EventLoop::run_with`](softtimer_rt::EventLoop::run_with)):
    /// polls when the poll event has fired, and arms readiness again before the loop
    /// blocks. Returns whether it did anything. A server that does not poll does nothing.
    pub fn on_turn<E: Default>(&mut self, cx: &mut LoopCx<'_, E>, turn: LoopTurn) -> bool {
        let Some(p) = self.polled.as_mut() else {
            return false;
        };
        match turn {
            LoopTurn::Pass { .. } => {
                if p.due.swap(false, Ordering::Relaxed) {
                    p.pending = None;
                    self.poll_now(cx);
                    return true;
                }
                false
            }
            LoopTurn::BeforeBlock => {
                if p.armed {
                    return false;
                }
                p.counts.rearmed_idle += 1;
                let action = p.controller.on_idle();
                self.apply(cx, action);
                true
            }
        }
    }

    /// Polls the set now, serves what it found, and follows the controller.
    fn poll_now<E: Default>(&mut self, cx: &mut LoopCx<'_, E>) {
        let Some(p) = self.polled.as_mut() else {
            return;
        };
        let mut ready = std::mem::take(&mut p.ready);
        let _ = p.set.poll(cx, &mut ready);
        let accepted_before = self.counters.accepted.load(Ordering::Relaxed);
        let mut found = 0usize;
        for r in &ready {
            if r.token != LISTENER {
                found += 1;
            }
            self.dispatch(cx, *r);
        }
        // Each connection taken from the listener is an arrival, as a SYN is to the paper's
        // interface.
        found += (self.counters.accepted.load(Ordering::Relaxed) - accepted_before) as usize;
        let Some(p) = self.polled.as_mut() else {
            return;
        };
        p.ready = ready;
        p.counts.polls += 1;
        p.counts.found += found as u64;
        let action = p.controller.on_poll(cx.now(), found);
        self.apply(cx, action);
    }

    fn apply<E: Default>(&mut self, cx: &mut LoopCx<'_, E>, action: PollAction) {
        let Some(p) = self.polled.as_mut() else {
            return;
        };
        if let Some(id) = p.pending.take() {
            cx.cancel(id);
        }
        p.due.store(false, Ordering::Relaxed);
        match action {
            PollAction::PollAt(at) => {
                if p.armed && cx.deregister(&p.set).is_ok() {
                    p.armed = false;
                }
                let at = at.max(cx.now());
                match cx.schedule_at(at, E::default()) {
                    Ok(id) => p.pending = Some(id),
                    // The facility refused (full): fall back to interrupts.
                    Err(_) => Self::arm(p, cx),
                }
            }
            PollAction::ArmReadiness => Self::arm(p, cx),
        }
    }

    /// Arms the set's readiness in the loop; if epoll refuses, keeps polling every
    /// millisecond instead, so that the sockets are never left unwatched.
    fn arm<E: Default>(p: &mut Polled, cx: &mut LoopCx<'_, E>) {
        if p.armed {
            return;
        }
        if cx.register(&p.set, Interest::READABLE, POLL_SET).is_ok() {
            p.armed = true;
            return;
        }
        let at = cx.now() + cx.span(Duration::from_millis(1));
        p.pending = cx.schedule_at(at, E::default()).ok();
    }

    /// Handles one ready descriptor.
    pub fn on_ready<E: Default>(&mut self, cx: &mut LoopCx<'_, E>, ready: Ready) {
        if ready.token == POLL_SET {
            // The interrupt: polling starts (readiness is disarmed until it ends).
            let Some(p) = self.polled.as_mut() else {
                return;
            };
            p.counts.interrupts += 1;
            let action = p.controller.on_readiness(cx.now());
            if matches!(action, PollAction::PollAt(_)) {
                if p.armed && cx.deregister(&p.set).is_ok() {
                    p.armed = false;
                }
                self.poll_now(cx);
            }
            return;
        }
        self.dispatch(cx, ready);
    }

    fn dispatch<E>(&mut self, cx: &mut LoopCx<'_, E>, ready: Ready) {
        match ready.token {
            LISTENER => self.accept_all(cx),
            SWEEP => self.sweep(cx),
            token => {
                let slot = (token - FIRST_CONN) as usize;
                if ready.readable || ready.closed {
                    self.read(cx, slot);
                }
                if ready.writable {
                    self.flush(cx, slot);
                }
            }
        }
    }

    fn accept_all<E>(&mut self, cx: &mut LoopCx<'_, E>) {
        loop {
            let fd = match cx.accept(&self.listener) {
                Ok(fd) => fd,
                Err(_) => return, // WouldBlock, or a connection reset before we took it
            };
            let _ = rustix::net::sockopt::set_tcp_nodelay(&fd, true);
            let slot = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            let token = FIRST_CONN + slot as u64;
            if watch(
                self.polled.as_ref(),
                cx,
                &fd,
                Interest::READABLE,
                token,
                true,
            )
            .is_err()
            {
                self.free.push(slot);
                continue;
            }
            self.counters.accepted.fetch_add(1, Ordering::Relaxed);
            self.conns[slot] = Some(Conn {
                fd,
                input: Vec::new(),
                output: Vec::new(),
                written: 0,
                close_after: false,
                want_write: false,
                last_active: Instant::now(),
            });
        }
    }

    fn close<E>(&mut self, cx: &mut LoopCx<'_, E>, slot: usize) {
        if let Some(conn) = self.conns.get_mut(slot).and_then(Option::take) {
            let _ = match &self.polled {
                Some(p) => p.set.delete(&conn.fd),
                None => cx.deregister(&conn.fd),
            };
            self.free.push(slot);
        }
    }

    fn sweep<E>(&mut self, cx: &mut LoopCx<'_, E>) {
        let mut buf = [0u8; 8];
        let _ = cx.read(&self.sweep, &mut buf);
        let now = Instant::now();
        for slot in 0..self.conns.len() {
            let idle = self.conns[slot]
                .as_ref()
                .is_some_and(|c| now.duration_since(c.last_active) > self.idle_timeout);
            if idle {
                self.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
                self.close(cx, slot);
            }
        }
    }

    fn read<E>(&mut self, cx: &mut LoopCx<'_, E>, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let mut eof = false;
        loop {
            match cx.read(&conn.fd, &mut self.scratch) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => conn.input.extend_from_slice(&self.scratch[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    eof = true;
                    break;
                }
            }
        }
        conn.last_active = Instant::now();
        Self::parse(conn, &self.body, &self.counters);
        if eof {
            // The peer is gone (or half-closed): answer nothing more.
            return self.close(cx, slot);
        }
        self.flush(cx, slot);
    }

    /// Turns every complete request in the input into a response in the output.
    fn parse(conn: &mut Conn, body: &[u8], counters: &ServerCounters) {
        let mut consumed = 0;
        while !conn.close_after {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut request = httparse::Request::new(&mut headers);
            let input = &conn.input[consumed..];
            match request.parse(input) {
                Ok(httparse::Status::Complete(head)) => {
                    let length = match content_length(request.headers) {
                        None => 0,
                        Some(Some(n)) => n,
                        Some(None) => {
                            Self::respond(
                                conn,
                                "400 Bad Request",
                                b"bad content-length\n",
                                false,
                                true,
                                counters,
                            );
                            break;
                        }
                    };
                    if input.len() < head + length {
                        break; // the body is still coming
                    }
                    let version_10 = request.version == Some(0);
                    let connection = request
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("connection"))
                        .map(|h| h.value.to_ascii_lowercase());
                    let keep_alive = match connection.as_deref() {
                        Some(b"close") => false,
                        Some(b"keep-alive") => true,
                        _ => !version_10,
                    };
                    let (method, path) = (request.method.unwrap_or(""), request.path.unwrap_or(""));
                    let path = path.split('?').next().unwrap_or("");
                    match (method, path) {
                        ("GET", "/" | "/6k") => {
                            Self::respond(conn, "200 OK", body, false, !keep_alive, counters)
                        }
                        ("HEAD", "/" | "/6k") => {
                            Self::respond(conn, "200 OK", body, true, !keep_alive, counters)
                        }
                        ("GET" | "HEAD", _) => Self::respond(
                            conn,
                            "404 Not Found",
                            b"not found\n",
                            method == "HEAD",
                            !keep_alive,
                            counters,
                        ),
                        _ => Self::respond(
                            conn,
                            "501 Not Implemented",
                            b"not implemented\n",
                            false,
                            !keep_alive,
                            counters,
                        ),
                    }
                    consumed += head + length;
                }
                Ok(httparse::Status::Partial) => {
                    if input.len() > MAX_HEAD {
                        Self::respond(
                            conn,
                            "400 Bad Request",
                            b"request head too large\n",
                            false,
                            true,
                            counters,
                        );
                    }
                    break;
                }
                Err(_) => {
                    Self::respond(
                        conn,
                        "400 Bad Request",
                        b"malformed request\n",
                        false,
                        true,
                        counters,
                    );
                    break;
                }
            }
        }
        if conn.close_after {
            conn.input.clear();
        } else {
            conn.input.drain(..consumed);
        }
    }

    fn respond(
        conn: &mut Conn,
        status: &str,
        body: &[u8],
        head_only: bool,
        close: bool,
        counters: &ServerCounters,
    ) {
        conn.output
            .extend_from_slice(header(status, body.len(), !close).as_bytes());
        if !head_only {
            conn.output.extend_from_slice(body);
        }
        conn.close_after |= close;
        let counter = if status.starts_with("200") {
            &counters.ok
        } else {
            &counters.errors
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn flush<E>(&mut self, cx: &mut LoopCx<'_, E>, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        while conn.written < conn.output.len() {
            match cx.write(&conn.fd, &conn.output[conn.written..]) {
                Ok(n) => conn.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return self.close(cx, slot),
            }
        }
        let done = conn.written == conn.output.len();
        if done {
            conn.output.clear();
            conn.written = 0;
            if conn.close_after {
                return self.close(cx, slot);
            }
        }
        // Watch for writability only while output is left to write.
        let want_write = !done;
        if conn.want_write != want_write {
            conn.want_write = want_write;
            let interest = if want_write {
                Interest::BOTH
            } else {
                Interest::READABLE
            };
            let token = FIRST_CONN + slot as u64;
            let _ = watch(self.polled.as_ref(), cx, &conn.fd, interest, token, false);
        }
    }
}

/// An event loop for a load generator that stops itself `stop_after` from now (a soft event
/// whose handler stops the loop), with no backstop thread and no idle spinning: a client
/// should not compete with the server it loads.
pub fn client_loop(stop_after: Duration) -> Result<softtimer_rt::EventLoop<()>> {
    use std::sync::OnceLock;

    use softtimer_rt::{EventLoop, LoopConfig, StopHandle};
    let stopper: Arc<OnceLock<StopHandle>> = Arc::default();
    let stop = Arc::clone(&stopper);
    let mut ev: EventLoop<()> = EventLoop::new(
        LoopConfig {
            backstop: false,
            spin_window: softtimer_rt::SpinWindow::Fixed(Duration::ZERO),
            ..LoopConfig::default()
        },
        move |_, _| {
            if let Some(s) = stop.get() {
                s.stop();
            }
        },
    )?;
    let _ = stopper.set(ev.stop_handle());
    let limit = ev.span(stop_after);
    ev.cx().schedule_soft_event(limit, ())?;
    Ok(ev)
}

/// What a load run measured.
#[derive(Clone, Debug, Default)]
pub struct LoadResult {
    /// Complete responses with status 200.
    pub responses: u64,
    /// Responses with another status, and connections that failed.
    pub errors: u64,
    /// How long the load ran.
    pub elapsed: Duration,
}

impl LoadResult {
    /// Responses per second.
    pub fn rate(&self) -> f64 {
        self.responses as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

struct ClientConn {
    stream: TcpStream,
    input: Vec<u8>,
}

/// The load generator: `connections` concurrent connections to `addr`, each sending the next
/// `GET` as soon as the previous answer is complete (reconnecting each time unless
/// `keep_alive`), for `duration`, on an event loop of its own (run this on its own thread).
/// A response counts when it is a 200 with the 6 KB file ([`FILE_SIZE`] bytes); anything
/// else is an error.
pub fn run_load(
    addr: SocketAddr,
    connections: usize,
    keep_alive: bool,
    duration: Duration,
) -> Result<LoadResult> {
    run_load_for(addr, connections, keep_alive, duration, FILE_SIZE)
}

/// [`run_load`] against a server whose answer is a body of `body_len` bytes.
pub fn run_load_for(
    addr: SocketAddr,
    connections: usize,
    keep_alive: bool,
    duration: Duration,
    body_len: usize,
) -> Result<LoadResult> {
    // The run ends on a soft event a second after `duration` if the server has gone quiet,
    // so a server that stops answering cannot hang the generator.
    let mut ev = client_loop(duration + Duration::from_secs(1))?;
    let request: &[u8] = if keep_alive {
        b"GET /6k HTTP/1.1\r\nHost: softtimers\r\n\r\n"
    } else {
        b"GET /6k HTTP/1.1\r\nHost: softtimers\r\nConnection: close\r\n\r\n"
    };
    let connect = || -> Result<TcpStream> {
        let stream =
            TcpStream::connect(addr).with_context(|| format!("cannot connect to {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        Ok(stream)
    };
    let mut conns: Vec<ClientConn> = Vec::with_capacity(connections);
    for i in 0..connections {
        let stream = connect()?;
        ev.cx().register(&stream, Interest::READABLE, i as u64)?;
        conns.push(ClientConn {
            stream,
            input: Vec::with_capacity(8 * 1024),
        });
    }
    let mut result = LoadResult::default();
    let mut failure: Option<anyhow::Error> = None;
    let start = Instant::now();
    for c in &mut conns {
        let mut cx = ev.cx();
        cx.write(c.stream.as_fd(), request)?;
    }
    let mut buf = vec![0u8; 64 * 1024];
    ev.run(|cx, ready| {
        let i = ready.token as usize;
        let mut closed = false;
        loop {
            match cx.read(conns[i].stream.as_fd(), &mut buf) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => conns[i].input.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        // Complete responses in the input.
        let mut next = false;
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut response = httparse::Response::new(&mut headers);
            match response.parse(&conns[i].input) {
                Ok(httparse::Status::Complete(head)) => {
                    let length = content_length(response.headers).flatten().unwrap_or(0);
                    if conns[i].input.len() < head + length {
                        break;
                    }
                    if response.code == Some(200) && length == body_len {
                        result.responses += 1;
                    } else {
                        result.errors += 1;
                    }
                    conns[i].input.drain(..head + length);
                    next = true;
                }
                Ok(httparse::Status::Partial) => break,
                Err(_) => {
                    result.errors += 1;
                    conns[i].input.clear();
                    closed = true;
                    break;
                }
            }
        }
        if start.elapsed() >= duration {
            cx.stop();
            return;
        }
        if next && keep_alive && !closed {
            if cx.write(conns[i].stream.as_fd(), request).is_err() {
                closed = true;
            } else {
                return;
            }
        }
        if closed || (next && !keep_alive) {
            // Reconnect and send the next request.
            let _ = cx.deregister(conns[i].stream.as_fd());
            match connect() {
                Ok(stream) => {
                    conns[i] = ClientConn {
                        stream,
                        input: Vec::with_capacity(8 * 1024),
                    };
                    let ok = cx
                        .register(&conns[i].stream, Interest::READABLE, i as u64)
                        .is_ok()
                        && cx.write(conns[i].stream.as_fd(), request).is_ok();
                    if !ok {
                        result.errors += 1;
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    cx.stop();
                }
            }
        }
    })?;
    result.elapsed = start.elapsed();
    match failure {
        Some(e) => Err(e),
        None => Ok(result),
    }
}
