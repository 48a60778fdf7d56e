//! The kernel-TCP arm: the same perf exchange over plain blocking sockets with
//! `TCP_NODELAY`, each request framed as `[download u64][upload u64][upload bytes]` on one
//! connection; the connection's own counts of what it sent and resent come from `TCP_INFO`.
//! The server gives each connection a thread, as a blocking-socket server is written.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rustix::net::sockopt;
use softtimer_quic::perf::{ClientReport, Pattern, ServerReport};

use super::{ClientOptions, ServerOptions, check, count_request};

pub(super) fn tcp_server(opts: &ServerOptions) -> Result<ServerReport> {
    let listener = TcpListener::bind(opts.listen)
        .with_context(|| format!("cannot listen on {}", opts.listen))?;
    crate::output::announce_port("quic server", opts.listen, listener.local_addr());
    let server = Arc::new(Server {
        listening: OwnedFd::from(listener.try_clone().context("the listener")?),
        own: listener.local_addr().context("the listener's address")?,
        stop_after: opts.connections,
        state: Mutex::new(State::default()),
    });
    // Ctrl-C stops the server: the accept ends, and so does each connection's wait for its
    // next request; a request under way finishes first (a stalled one within PEER_TIMEOUT).
    let _interrupt = {
        let server = Arc::clone(&server);
        crate::interrupt::stop_on_interrupt(move || server.stop())
    };
    // A thread per connection, as a blocking-socket server is written: one client's
    // requests, or its pause between them, do not hold up another's.
    let accepted = std::thread::scope(|scope| -> Result<()> {
        // Said once while accepts keep failing for want of descriptors or memory.
        let mut short = false;
        loop {
            let (stream, peer) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(_) if server.is_stopping() => return Ok(()),
                Err(e) => match e.raw_os_error() {
                    Some(libc::ECONNABORTED) => continue,
                    // Out of descriptors or memory for now: say so, wait, and go on serving
                    // the connections already open rather than spin on accept.
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                        if !std::mem::replace(&mut short, true) {
                            eprintln!("softtimers quic server: accept: {e}; retrying every 100 ms");
                        }
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                    _ => {
                        server.stop();
                        return Err(e).context("accept");
                    }
                },
            };
            short = false;
            let _ = stream.set_nodelay(true);
            let Some((id, stream)) = server.open(stream) else {
                // Stopping: the connection that woke the accept, or one just too late.
                return Ok(());
            };
            let server = &server;
            let spawned = std::thread::Builder::new()
                .name("tcp-conn".into())
                .spawn_scoped(scope, move || server.serve(id, stream, peer));
            if let Err(e) = spawned {
                eprintln!("softtimers quic server: no thread for the connection from {peer}: {e}");
                server.close(id, ServerReport::default());
            }
        }
    });
    // Every connection's thread has ended (the scope joined them): its counts are in.
    let report = std::mem::take(&mut server.lock().report);
    accepted.map(|()| report)
}

/// The kernel-TCP server's shared state: its listener (to stop an accept), each open
/// connection (to stop a wait for a request) and what the closed ones served.
struct Server {
    /// A duplicate of the listener, shut down to end a blocked accept.
    listening: OwnedFd,
    own: std::net::SocketAddr,
    /// Stop after this many connections have closed.
    stop_after: Option<u64>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    stopping: bool,
    /// Each open connection's socket, shared with its thread, by its number.
    open: std::collections::HashMap<u64, Arc<TcpStream>>,
    next_id: u64,
    closed: u64,
    /// What the closed connections served, and every connection accepted.
    report: ServerReport,
}

impl Server {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_stopping(&self) -> bool {
        self.lock().stopping
    }

    /// Stops accepting and ends each open connection's wait for its next request: it
    /// finishes the request under way (one whose upload the stop cut short is answered as
    /// it stands) and closes. Idempotent.
    fn stop(&self) {
        let mut state = self.lock();
        if state.stopping {
            return;
        }
        state.stopping = true;
        for connection in state.open.values() {
            let _ = connection.shutdown(std::net::Shutdown::Read);
        }
        drop(state);
        if rustix::net::shutdown(&self.listening, rustix::net::Shutdown::Read).is_err() {
            // Wake the accept another way: a connection, which is not served.
            let _ = TcpStream::connect_timeout(&self.own, Duration::from_secs(1));
        }
    }

    /// Counts a connection accepted and keeps its socket for [`Server::stop`] (shared, not
    /// duplicated: no descriptor to run out of); `None` once stopping (under the same lock
    /// as `stop`'s sweep, so that no connection opens after it unseen).
    fn open(&self, stream: TcpStream) -> Option<(u64, Arc<TcpStream>)> {
        let mut state = self.lock();
        if state.stopping {
            return None;
        }
        let id = state.next_id;
        state.next_id += 1;
        state.report.connections += 1;
        let stream = Arc::new(stream);
        state.open.insert(id, Arc::clone(&stream));
        Some((id, stream))
    }

    /// Serves connection `id` until its peer closes it, then counts it in.
    fn serve(&self, id: u64, stream: Arc<TcpStream>, peer: std::net::SocketAddr) {
        let mut served = ServerReport::default();
        // One peer's error ends its connection, not the server (and not what it counted).
        if let Err(e) = serve_connection(&stream, &mut served, || self.is_stopping()) {
            eprintln!("softtimers quic server: the connection from {peer} ended: {e:#}");
        }
        // The connection's own count of what it sent and resent, as QUIC's stacks report
        // theirs (a plain socket has no other way to say).
        if let Some(c) = crate::tcp_info::counts(&stream) {
            served.sent_packets = Some(c.segments_out);
            served.lost_packets = Some(c.retransmitted);
        }
        self.close(id, served);
    }

    /// Adds a closed connection's counts; stops the server once `stop_after` have closed and
    /// no other is open (as the soft stacks' server does).
    fn close(&self, id: u64, served: ServerReport) {
        let mut state = self.lock();
        state.open.remove(&id);
        let report = &mut state.report;
        report.requests += served.requests;
        report.bytes_sent += served.bytes_sent;
        report.bytes_received += served.bytes_received;
        if let Some(sent) = served.sent_packets {
            *report.sent_packets.get_or_insert(0) += sent;
        }
        if let Some(lost) = served.lost_packets {
            *report.lost_packets.get_or_insert(0) += lost;
        }
        state.closed += 1;
        let done = self.stop_after.is_some_and(|n| state.closed >= n) && state.open.is_empty();
        drop(state);
        if done {
            self.stop();
        }
    }
}

/// A connection's requests until the peer closes it, counted into `report` as they are
/// served. Between requests a client may pause as long as it likes (a peer that is gone
/// is found by TCP keepalive, within about a minute and a half); within one, a peer that
/// stops sending its upload or reading its download for [`PEER_TIMEOUT`] is given up on, so
/// that it cannot hold its thread for ever.
/// `stopping` tells an upload cut short by [`Server::stop`] (which shuts the socket's reading
/// half) from one the peer cut short.
fn serve_connection(
    mut stream: &TcpStream,
    report: &mut ServerReport,
    stopping: impl Fn() -> bool,
) -> Result<()> {
    // Set once per connection: a request costs the system calls it did before.
    stream.set_read_timeout(Some(PEER_TIMEOUT))?;
    stream.set_write_timeout(Some(PEER_TIMEOUT))?;
    sockopt::set_socket_keepalive(stream, true)?;
    sockopt::set_tcp_keepidle(stream, Duration::from_secs(60))?;
    sockopt::set_tcp_keepintvl(stream, Duration::from_secs(10))?;
    sockopt::set_tcp_keepcnt(stream, 3)?;
    let pattern = Pattern::default();
    let mut sink = vec![0u8; 64 * 1024];
    let mut header = [0u8; 16];
    loop {
        if !read_header(&mut stream, &mut header)? {
            return Ok(());
        }
        let download = u64::from_be_bytes(header[..8].try_into().expect("8"));
        let upload = u64::from_be_bytes(header[8..].try_into().expect("8"));
        let mut left = upload;
        while left > 0 {
            let n = stream
                .read(&mut sink[..left.min(65536) as usize])
                .context("reading an upload")?;
            // The server stopping ended the read: the request under way is finished with
            // what came. The peer closing within its upload gave the request up: not served
            // (the QUIC stacks' server resets such a request's stream and does not count it).
            if n == 0 && stopping() {
                break;
            }
            if n == 0 {
                bail!(
                    "an upload cut short after {} of its {upload} bytes",
                    upload - left
                );
            }
            left -= n as u64;
            report.bytes_received += n as u64;
        }
        let mut sent = 0;
        while sent < download {
            let chunk = pattern.at(sent, download - sent);
            let written = stream.write_all(chunk);
            report.bytes_sent += if written.is_ok() {
                chunk.len() as u64
            } else {
                0
            };
            written.with_context(|| format!("sending a {download}-byte download"))?;
            sent += chunk.len() as u64;
        }
        report.requests += 1;
    }
}

/// Reads a request's header into `header`: `false` when the peer closed between requests.
/// A read timeout ([`PEER_TIMEOUT`]) before the first byte is a client pausing between
/// requests, waited out; after it, a request cut short.
fn read_header(stream: &mut &TcpStream, header: &mut [u8; 16]) -> Result<bool> {
    let mut got = 0;
    while got < header.len() {
        match stream.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => bail!("a request cut short after {got} of its 16 header bytes"),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // SO_RCVTIMEO ran out (EAGAIN); a peer keepalive found gone is ETIMEDOUT, an error.
            Err(e) if got == 0 && e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e).context("reading a request"),
        }
    }
    Ok(true)
}

/// How long the TCP server waits on a peer that stalls within a request.
const PEER_TIMEOUT: Duration = Duration::from_secs(30);

pub(super) fn tcp_client(opts: &ClientOptions) -> Result<ClientReport> {
    let plan = &opts.plan;
    let started = Instant::now();
    let mut stream = TcpStream::connect_timeout(&opts.to, plan.connect_timeout)
        .with_context(|| format!("no TCP connection to {}", opts.to))?;
    let _ = stream.set_nodelay(true);
    let mut report = ClientReport {
        handshake_us: started.elapsed().as_secs_f64() * 1e6,
        ..ClientReport::default()
    };
    let pattern = Pattern::default();
    let mut buf = vec![0u8; 256 * 1024];
    let mut exchange = |stream: &mut TcpStream, download: u64, upload: u64| -> Result<bool> {
        let mut header = [0u8; 16];
        header[..8].copy_from_slice(&download.to_be_bytes());
        header[8..].copy_from_slice(&upload.to_be_bytes());
        stream.write_all(&header)?;
        let mut sent = 0;
        while sent < upload {
            let chunk = pattern.at(sent, upload - sent);
            stream.write_all(chunk)?;
            sent += chunk.len() as u64;
        }
        let mut got = 0;
        let mut ok = true;
        while got < download {
            let want = (download - got).min(buf.len() as u64) as usize;
            let n = stream.read(&mut buf[..want])?;
            if n == 0 {
                bail!("the server closed the connection after {got} of {download} bytes");
            }
            if plan.verify {
                ok &= check(&buf[..n], got);
            }
            got += n as u64;
        }
        Ok(ok)
    };
    if let Some((bytes, idle)) = plan.warmup {
        exchange(&mut stream, bytes, 0)?;
        std::thread::sleep(idle);
    }
    let mut verified = true;
    let first = Instant::now();
    for k in 0..plan.requests {
        if let Some(interval) = plan.interval {
            let at = first + interval * k as u32;
            if let Some(wait) = at.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let start = Instant::now();
        verified &= exchange(&mut stream, plan.download, plan.upload)?;
        count_request(&mut report, plan, start);
    }
    report.elapsed_s = first.elapsed().as_secs_f64();
    let _ = stream.shutdown(std::net::Shutdown::Both);
    report.summarize(plan.requests, plan.verify.then_some(verified));
    Ok(report)
}
