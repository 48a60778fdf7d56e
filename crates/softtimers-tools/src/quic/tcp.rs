//! The kernel-TCP arm: the same perf exchange over plain blocking sockets with
//! `TCP_NODELAY`, each request framed as `[download u64][upload u64][upload bytes]` on one
//! connection; the connection's own counts of what it sent and resent come from `TCP_INFO`.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
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
    let mut report = ServerReport::default();
    let mut closed = 0;
    // Ctrl-C shuts the listener down, which ends a blocked accept (EINVAL), and the read
    // side of the connection being served, which ends a wait for its next request: the
    // report follows. A request under way finishes first (a stalled one within PEER_TIMEOUT).
    let interrupted = Arc::new(AtomicBool::new(false));
    let serving: Arc<Mutex<Option<OwnedFd>>> = Arc::new(Mutex::new(None));
    let _interrupt = {
        let listening = OwnedFd::from(listener.try_clone().context("the listener")?);
        let (flag, serving) = (Arc::clone(&interrupted), Arc::clone(&serving));
        let own = listener.local_addr().context("the listener's address")?;
        crate::interrupt::stop_on_interrupt(move || {
            flag.store(true, Ordering::Relaxed);
            if let Some(connection) = &*serving.lock().unwrap_or_else(PoisonError::into_inner) {
                let _ = rustix::net::shutdown(connection, rustix::net::Shutdown::Read);
            }
            if rustix::net::shutdown(&listening, rustix::net::Shutdown::Read).is_err() {
                // Wake the accept another way: a connection, which the loop does not serve.
                let _ = TcpStream::connect_timeout(&own, Duration::from_secs(1));
            }
        })
    };
    loop {
        let accepted = listener.accept();
        if interrupted.load(Ordering::Relaxed) {
            return Ok(report);
        }
        let (mut stream, peer) = accepted.context("accept")?;
        let _ = stream.set_nodelay(true);
        report.connections += 1;
        *serving.lock().unwrap_or_else(PoisonError::into_inner) =
            stream.try_clone().ok().map(OwnedFd::from);
        // One peer's error ends its connection, not the server (and not what it counted).
        let served = serve_connection(&mut stream, &mut report);
        serving
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Err(e) = served {
            eprintln!("softtimers quic server: the connection from {peer} ended: {e:#}");
        }
        // The connection's own count of what it sent and resent, as QUIC's stacks report
        // theirs (a plain socket has no other way to say).
        if let Some(c) = crate::tcp_info::counts(&stream) {
            *report.sent_packets.get_or_insert(0) += c.segments_out;
            *report.lost_packets.get_or_insert(0) += c.retransmitted;
        }
        closed += 1;
        if opts.connections.is_some_and(|n| closed >= n) {
            return Ok(report);
        }
    }
}

/// A connection's requests until the peer closes it, counted into `report` as they are
/// served. Between requests a client may pause as long as it likes (a peer that is gone
/// is found by TCP keepalive, within about a minute and a half); within one, a peer that
/// stops sending its upload or reading its download for [`PEER_TIMEOUT`] is given up on, so
/// that it cannot hold the (one-connection-at-a-time) server for ever.
fn serve_connection(stream: &mut TcpStream, report: &mut ServerReport) -> Result<()> {
    // Set once per connection: a request costs the system calls it did before.
    stream.set_read_timeout(Some(PEER_TIMEOUT))?;
    stream.set_write_timeout(Some(PEER_TIMEOUT))?;
    sockopt::set_socket_keepalive(&*stream, true)?;
    sockopt::set_tcp_keepidle(&*stream, Duration::from_secs(60))?;
    sockopt::set_tcp_keepintvl(&*stream, Duration::from_secs(10))?;
    sockopt::set_tcp_keepcnt(&*stream, 3)?;
    let pattern = Pattern::default();
    let mut sink = vec![0u8; 64 * 1024];
    let mut header = [0u8; 16];
    loop {
        if !read_header(stream, &mut header)? {
            return Ok(());
        }
        let download = u64::from_be_bytes(header[..8].try_into().expect("8"));
        let mut upload = u64::from_be_bytes(header[8..].try_into().expect("8"));
        while upload > 0 {
            let n = stream
                .read(&mut sink[..upload.min(65536) as usize])
                .context("reading an upload")?;
            if n == 0 {
                break;
            }
            upload -= n as u64;
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
fn read_header(stream: &mut TcpStream, header: &mut [u8; 16]) -> Result<bool> {
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
