//! Stock quinn 0.11 on a current-thread tokio runtime, structured as quinn's own examples
//! (an accept loop, a task per connection and per stream), with every timer quinn arms
//! measured through a wrapper around its tokio timers.

use super::*;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context as TaskContext, Poll};

/// Stock quinn's tokio runtime, with every timer quinn arms measured: how late quinn
/// handled it against the deadline it set. quinn detects expiry by reading the
/// runtime's clock (`now() >= deadline`), so the clock read is where the first
/// observation of a passed deadline is recorded. Everything else is
/// `quinn::TokioRuntime`'s.
#[derive(Debug, Default)]
struct MeasuredRuntime {
    timers: Arc<Mutex<Timers>>,
}

#[derive(Debug)]
struct Timers {
    /// Deadlines armed and not yet seen passed, by timer.
    armed: Vec<(u64, Instant)>,
    next_id: u64,
    lateness: Histogram<u64>,
    expiries: u64,
}

impl Default for Timers {
    fn default() -> Self {
        Timers {
            armed: Vec::new(),
            next_id: 0,
            lateness: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("bounds"),
            expiries: 0,
        }
    }
}

impl Timers {
    fn arm(&mut self, id: u64, deadline: Instant) {
        match self.armed.iter_mut().find(|a| a.0 == id) {
            Some(a) => a.1 = deadline,
            None => self.armed.push((id, deadline)),
        }
    }

    fn observe(&mut self, now: Instant) {
        let Timers {
            armed,
            lateness,
            expiries,
            ..
        } = self;
        armed.retain(|&(_, deadline)| {
            if now < deadline {
                return true;
            }
            *expiries += 1;
            let late = now.duration_since(deadline).as_nanos() as u64;
            let _ = lateness.record(late.max(1));
            false
        });
    }
}

#[derive(Debug)]
struct MeasuredTimer {
    sleep: Pin<Box<dyn quinn::AsyncTimer>>,
    id: u64,
    timers: Arc<Mutex<Timers>>,
}

impl quinn::AsyncTimer for MeasuredTimer {
    fn reset(mut self: Pin<&mut Self>, i: Instant) {
        self.timers.lock().expect("lock").arm(self.id, i);
        self.sleep.as_mut().reset(i);
    }

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext) -> Poll<()> {
        self.sleep.as_mut().poll(cx)
    }
}

impl Drop for MeasuredTimer {
    fn drop(&mut self) {
        if let Ok(mut t) = self.timers.lock() {
            t.armed.retain(|a| a.0 != self.id);
        }
    }
}

impl quinn::Runtime for MeasuredRuntime {
    fn new_timer(&self, i: Instant) -> Pin<Box<dyn quinn::AsyncTimer>> {
        let mut t = self.timers.lock().expect("lock");
        let id = t.next_id;
        t.next_id += 1;
        t.arm(id, i);
        Box::pin(MeasuredTimer {
            sleep: quinn::TokioRuntime.new_timer(i),
            id,
            timers: Arc::clone(&self.timers),
        })
    }

    fn spawn(&self, future: Pin<Box<dyn std::future::Future<Output = ()> + Send>>) {
        quinn::TokioRuntime.spawn(future)
    }

    fn wrap_udp_socket(
        &self,
        socket: UdpSocket,
    ) -> std::io::Result<Arc<dyn quinn::AsyncUdpSocket>> {
        quinn::TokioRuntime.wrap_udp_socket(socket)
    }

    fn now(&self) -> Instant {
        let now = quinn::TokioRuntime.now();
        self.timers.lock().expect("lock").observe(now);
        now
    }
}

impl MeasuredRuntime {
    fn side(&self, datagrams: u64, ios: u64) -> DriverSide {
        let t = self.timers.lock().expect("lock");
        let (p50, p99, max, hist) = timer_side(&t.lateness);
        DriverSide {
            datagrams_sent: Some(datagrams),
            send_calls: Some(ios),
            timeouts: t.expiries,
            timer_late_p50_us: p50,
            timer_late_p99_us: p99,
            timer_late_max_us: max,
            release_late_p99_us: None,
            timer_late_hist: hist,
            causes: None,
            tail_probes: None,
            tail_probes_finding_loss: None,
            spin_window_us: None,
            idle_spin_ms: None,
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")
}

fn endpoint(
    socket: UdpSocket,
    server: Option<quinn::ServerConfig>,
    runtime: Arc<MeasuredRuntime>,
) -> Result<quinn::Endpoint> {
    // The same socket buffers as the soft-timer driver asks for.
    let state = quinn::udp::UdpSocketState::new((&socket).into())?;
    let _ = state.set_send_buffer_size((&socket).into(), 8 << 20);
    let _ = state.set_recv_buffer_size((&socket).into(), 8 << 20);
    socket.set_nonblocking(true)?;
    quinn::Endpoint::new(quinn::EndpointConfig::default(), server, socket, runtime)
        .context("starting the quinn endpoint")
}

pub(super) fn server(
    opts: &ServerOptions,
    identity: &Identity,
    tuning: &Tuning,
) -> Result<(ServerReport, DriverSide)> {
    let config = server_config(identity, tuning)?;
    let measured = Arc::new(MeasuredRuntime::default());
    let quinn_rt = Arc::clone(&measured);
    let socket = UdpSocket::bind(opts.listen)
        .with_context(|| format!("cannot listen on {}", opts.listen))?;
    let rt = runtime()?;
    let connections = opts.connections;
    rt.block_on(async move {
        let endpoint = endpoint(socket, Some(config), quinn_rt)?;
        let report = Arc::new(std::sync::Mutex::new(ServerReport::default()));
        let udp = Arc::new(std::sync::Mutex::new((0u64, 0u64)));
        let mut tasks = tokio::task::JoinSet::new();
        let mut accepted = 0u64;
        while let Some(incoming) = endpoint.accept().await {
            accepted += 1;
            let report = Arc::clone(&report);
            let udp = Arc::clone(&udp);
            tasks.spawn(async move {
                let Ok(conn) = incoming.await else { return };
                report.lock().expect("lock").connections += 1;
                let mut streams = tokio::task::JoinSet::new();
                while let Ok((send, recv)) = conn.accept_bi().await {
                    let report = Arc::clone(&report);
                    streams.spawn(serve_stream(send, recv, report));
                }
                while streams.join_next().await.is_some() {}
                let stats = conn.stats();
                report.lock().expect("lock").add_path_stats(&stats.path);
                let mut u = udp.lock().expect("lock");
                u.0 += stats.udp_tx.datagrams;
                u.1 += stats.udp_tx.ios;
            });
            if connections.is_some_and(|n| accepted >= n) {
                break;
            }
        }
        while tasks.join_next().await.is_some() {}
        endpoint.wait_idle().await;
        let report = report.lock().expect("lock").clone();
        let (datagrams, ios) = *udp.lock().expect("lock");
        Ok((report, measured.side(datagrams, ios)))
    })
}

async fn serve_stream(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    report: Arc<std::sync::Mutex<ServerReport>>,
) {
    let mut header = [0u8; 8];
    if recv.read_exact(&mut header).await.is_err() {
        report.lock().expect("lock").aborted += 1;
        return;
    }
    let download = u64::from_be_bytes(header);
    let mut uploaded = 0u64;
    loop {
        match recv.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => uploaded += chunk.bytes.len() as u64,
            Ok(None) => break,
            Err(_) => {
                report.lock().expect("lock").aborted += 1;
                return;
            }
        }
    }
    let pattern = Pattern::default();
    let mut sent = 0;
    while sent < download {
        let chunk = pattern.at(sent, download - sent);
        if send.write_all(chunk).await.is_err() {
            report.lock().expect("lock").aborted += 1;
            return;
        }
        sent += chunk.len() as u64;
    }
    let _ = send.finish();
    let mut r = report.lock().expect("lock");
    r.requests += 1;
    r.bytes_sent += sent;
    r.bytes_received += uploaded;
}

pub(super) fn client(
    opts: &ClientOptions,
    trust: &Trust,
    tuning: &Tuning,
) -> Result<(ClientReport, DriverSide)> {
    let config = client_config(trust, tuning)?;
    let bind: SocketAddr = if opts.to.is_ipv6() {
        "[::]:0".parse()?
    } else {
        "0.0.0.0:0".parse()?
    };
    let socket = UdpSocket::bind(bind).context("binding the client socket")?;
    let rt = runtime()?;
    let plan = opts.plan.clone();
    let measured = Arc::new(MeasuredRuntime::default());
    let quinn_rt = Arc::clone(&measured);
    rt.block_on(async move {
        let endpoint = endpoint(socket, None, quinn_rt)?;
        let started = Instant::now();
        let connecting = endpoint
            .connect_with(config, opts.to, &opts.server_name)
            .map_err(|e| anyhow!("cannot connect: {e}"))?;
        let conn = match tokio::time::timeout(plan.connect_timeout, connecting).await {
            Err(_) => bail!(
                "no answer from the server within {} s",
                plan.connect_timeout.as_secs_f64()
            ),
            Ok(Err(e)) => bail!("the handshake failed: {e}"),
            Ok(Ok(conn)) => conn,
        };
        let mut report = ClientReport {
            handshake_us: started.elapsed().as_secs_f64() * 1e6,
            ..ClientReport::default()
        };
        if let Some((bytes, idle)) = plan.warmup {
            request(&conn, bytes, 0, false).await?;
            tokio::time::sleep(idle).await;
        }
        let mut verified = true;
        let first = Instant::now();
        for k in 0..plan.requests {
            if let Some(interval) = plan.interval {
                tokio::time::sleep_until((first + interval * k as u32).into()).await;
            }
            let start = Instant::now();
            verified &= request(&conn, plan.download, plan.upload, plan.verify).await?;
            count_request(&mut report, &plan, start);
        }
        report.elapsed_s = first.elapsed().as_secs_f64();
        let stats = conn.stats();
        report.rtt_us = stats.path.rtt.as_secs_f64() * 1e6;
        report.cwnd = stats.path.cwnd;
        report.sent_packets = stats.path.sent_packets;
        report.lost_packets = stats.path.lost_packets;
        report.congestion_events = stats.path.congestion_events;
        conn.close(0u32.into(), b"done");
        endpoint.wait_idle().await;
        report.summarize(plan.requests, plan.verify.then_some(verified));
        let side = measured.side(stats.udp_tx.datagrams, stats.udp_tx.ios);
        Ok((report, side))
    })
}

async fn request(
    conn: &quinn::Connection,
    download: u64,
    upload: u64,
    verify: bool,
) -> Result<bool> {
    let (mut send, mut recv) = conn.open_bi().await.context("opening a stream")?;
    send.write_all(&download.to_be_bytes()).await?;
    let pattern = Pattern::default();
    let mut sent = 0;
    while sent < upload {
        let chunk = pattern.at(sent, upload - sent);
        send.write_all(chunk).await?;
        sent += chunk.len() as u64;
    }
    send.finish()?;
    let mut got = 0u64;
    let mut ok = true;
    while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
        if verify {
            ok &= check(&chunk.bytes, got);
        }
        got += chunk.bytes.len() as u64;
    }
    if got != download {
        bail!("the server sent {got} of {download} bytes");
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quinn::Runtime;

    #[test]
    fn a_deadline_is_counted_once_when_a_clock_read_finds_it_passed() {
        let mut t = Timers::default();
        let base = Instant::now();
        let ms = Duration::from_millis;
        t.arm(0, base + ms(1));
        t.arm(1, base + ms(5));
        // Re-arming a timer moves its deadline; it stays one timer.
        t.arm(1, base + ms(3));
        t.observe(base);
        assert_eq!(t.expiries, 0);
        t.observe(base + ms(2));
        assert_eq!(t.expiries, 1);
        assert_eq!(t.lateness.len(), 1);
        let late = t.lateness.max();
        assert!((999_000..=1_001_000).contains(&late), "{late} ns");
        t.observe(base + ms(2));
        assert_eq!(t.expiries, 1, "counted twice");
        t.observe(base + ms(4));
        assert_eq!(t.expiries, 2);
        assert!(t.armed.is_empty());
    }

    #[test]
    fn the_measured_runtime_records_a_real_timers_lateness_and_forgets_dropped_ones() {
        let rt = runtime().unwrap();
        let measured = MeasuredRuntime::default();
        rt.block_on(async {
            let deadline = measured.now() + Duration::from_millis(2);
            let mut timer = measured.new_timer(deadline);
            std::future::poll_fn(|cx| timer.as_mut().poll(cx)).await;
            // quinn notices the expiry when it next reads the clock.
            let now = measured.now();
            assert!(now >= deadline);
            // A timer dropped before its deadline never counts.
            let dropped = measured.new_timer(now + Duration::from_millis(1));
            drop(dropped);
            tokio::time::sleep(Duration::from_millis(2)).await;
            let _ = measured.now();
        });
        let t = measured.timers.lock().unwrap();
        assert_eq!(t.expiries, 1);
        // tokio rounds a deadline up to its next millisecond tick: late, but not by much.
        let late = t.lateness.max();
        assert!(late < 1_000_000_000, "{late} ns");
        assert!(t.armed.is_empty(), "{:?}", t.armed);
    }
}
