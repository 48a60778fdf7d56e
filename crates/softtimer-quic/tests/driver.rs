//! The driver end to end: two soft-timer loops on two threads, over loopback.

use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

mod driver_support;

use driver_support::{
    Stats, client_loop, default_client, default_server, run_client, start_server,
};

use softtimer_quic::perf::{ClientPlan, ClientReport, PerfClient, PerfServer, ServerReport};
use softtimer_quic::tls::{Identity, Trust, Tuning, client_config, server_config};
use softtimer_quic::{
    App, ConnId, Driver, DriverConfig, DriverStats, Pacing, QuicEvent, QuicLoop, VarInt,
};

/// One client run against a fresh server, both with `config`, the client trusting the
/// server's certificate (or any, if `insecure`); what each side reports, and the server
/// driver's counters.
fn transfer(
    config: DriverConfig,
    insecure: bool,
    plan: ClientPlan,
) -> (ClientReport, ServerReport, Stats) {
    let (report, served, stats, ()) = transfer_through(config, insecure, plan, |at| (at, ()));
    (report, served, stats)
}

/// [`transfer`] with the client sent to the address `route` gives for the server's (a
/// relay's), and what `route` returned besides, once the run is over.
fn transfer_through<R>(
    config: DriverConfig,
    insecure: bool,
    plan: ClientPlan,
    route: impl FnOnce(SocketAddr) -> (SocketAddr, R),
) -> (ClientReport, ServerReport, Stats, R) {
    let identity = Identity::self_signed(&["localhost"]).unwrap();
    let trust = if insecure {
        Trust::Insecure
    } else {
        Trust::Cert(identity.cert.clone())
    };
    let server = start_server(&identity, Tuning::default(), config.clone());
    let (to, extra) = route(server.addr);
    let report = run_client(to, trust, Tuning::default(), config, plan);
    server.stop.stop();
    let (served, stats) = server.done.join().unwrap();
    (report, served, stats, extra)
}

#[test]
fn a_10_mb_download_and_upload_arrive_byte_for_byte() {
    for pacing in [Pacing::Quinn, Pacing::PerPacket] {
        let config = DriverConfig {
            pacing,
            ..DriverConfig::default()
        };
        let plan = ClientPlan {
            download: 10_000_000,
            upload: 1_000_000,
            requests: 1,
            ..ClientPlan::default()
        };
        let (report, served, _) = transfer(config, false, plan);
        assert_eq!(report.error, None, "{pacing:?}");
        assert_eq!(report.download_bytes, 10_000_000, "{pacing:?}");
        assert_eq!(report.verified, Some(true), "{pacing:?}");
        assert_eq!(served.bytes_received, 1_000_000, "{pacing:?}");
        assert_eq!(served.requests, 1);
        assert!(report.handshake_us > 0.0);
    }
}

#[test]
fn a_download_and_upload_through_io_uring_arrive_byte_for_byte() {
    let ring = softtimer_rt::LoopConfig {
        io_backend: softtimer_rt::IoBackend::Uring,
        ..Default::default()
    };
    // Where io_uring is refused (a seccomp filter, an old kernel), there is nothing to test.
    let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
    match QuicLoop::new(ring.clone(), probe, DriverConfig::default(), None) {
        Ok(quic) => assert!(quic.socket().uses_ring()),
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    }
    let identity = Identity::self_signed(&["localhost"]).unwrap();
    let config_server = server_config(&identity, &Tuning::default()).unwrap();
    let (tx, rx) = mpsc::channel();
    let server_ring = ring.clone();
    let done = thread::spawn(move || {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut quic = QuicLoop::new(
            server_ring,
            socket,
            DriverConfig::default(),
            Some(config_server),
        )
        .unwrap();
        assert!(quic.socket().uses_ring());
        tx.send((quic.socket().local_addr().unwrap(), quic.stop_handle()))
            .unwrap();
        let mut app = PerfServer::new(None);
        quic.run(&mut app).unwrap();
        (app.report, quic.stats().clone())
    });
    let (addr, stop) = rx.recv().unwrap();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut quic = QuicLoop::new(ring, socket, DriverConfig::default(), None).unwrap();
    assert!(quic.socket().uses_ring());
    let client = client_config(&Trust::Cert(identity.cert.clone()), &Tuning::default()).unwrap();
    let now = quic.driver().now();
    let conn = quic.driver().connect(client, addr, "localhost").unwrap();
    let plan = ClientPlan {
        download: 5_000_000,
        upload: 500_000,
        requests: 3,
        ..ClientPlan::default()
    };
    let mut app = PerfClient::new(plan, conn, now);
    quic.run(&mut app).unwrap();
    let report = app.report;
    let client_io = quic.stats().clone();
    stop.stop();
    let (served, server_io) = done.join().unwrap();
    assert_eq!(report.error, None);
    assert_eq!(report.download_bytes, 15_000_000);
    assert_eq!(report.verified, Some(true));
    assert_eq!(served.bytes_received, 1_500_000);
    assert_eq!(served.requests, 3);
    // Every datagram went through the rings: sent by one side, received by the other.
    assert!(server_io.datagrams_sent > 10_000, "{server_io:?}");
    assert!(client_io.datagrams_received >= server_io.datagrams_sent * 9 / 10);
    assert_eq!(server_io.send_would_block + client_io.send_would_block, 0);
}

#[test]
fn paced_pairs_arrive_byte_for_byte_in_half_the_sends() {
    let config = DriverConfig {
        pacing: Pacing::PerPacket,
        datagrams_per_departure: 2,
        ..DriverConfig::default()
    };
    let download = 4_000_000;
    let plan = ClientPlan {
        download,
        requests: 1,
        ..ClientPlan::default()
    };
    let (report, _, stats) = transfer(config, false, plan);
    assert_eq!(report.error, None);
    assert_eq!(report.verified, Some(true));
    assert_eq!(report.download_bytes, download);
    // No datagram of quinn's carries more than 1452 bytes by default.
    assert!(stats.io.datagrams_sent >= download / 1452, "{stats:?}");
    // Loopback takes GSO: the data leaves in pairs, so there are about half as many sends as
    // datagrams (the handshake's and the tail's single datagrams make it a little more).
    assert!(
        (stats.io.send_calls as f64) < 0.6 * stats.io.datagrams_sent as f64,
        "{stats:?}"
    );
}

#[test]
fn zero_datagrams_per_departure_is_refused() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let config = DriverConfig {
        pacing: Pacing::PerPacket,
        datagrams_per_departure: 0,
        ..DriverConfig::default()
    };
    let err = QuicLoop::new(Default::default(), socket, config, None)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("datagrams_per_departure"), "{err}");
}

#[test]
fn many_requests_on_one_connection_each_get_their_answer() {
    let plan = ClientPlan {
        download: 10_000,
        upload: 1_000,
        requests: 200,
        ..ClientPlan::default()
    };
    let (report, served, _) = transfer(DriverConfig::default(), true, plan);
    assert_eq!(report.error, None);
    assert_eq!(report.requests, 200);
    assert_eq!(report.latencies_us.len(), 200);
    assert_eq!(report.verified, Some(true));
    assert_eq!(served.requests, 200);
    assert!(report.p50_us > 0.0 && report.p50_us <= report.p99_us);
}

/// Opens many streams at once and checks every one is answered in full.
#[test]
fn a_vanished_peer_times_out_at_the_idle_timeout() {
    // The server answers the handshake, then its loop stops: the client's connection dies
    // by its idle timeout, which must fire at its time, not a tick later.
    let identity = Identity::self_signed(&["localhost"]).unwrap();
    let idle = Duration::from_millis(300);
    let tuning = Tuning {
        idle_timeout: idle,
        ..Tuning::default()
    };
    let server = start_server(&identity, tuning.clone(), DriverConfig::default());
    let (mut quic, conn) = client_loop(server.addr, &tuning);

    struct Vanish {
        stop: Option<softtimer_rt::StopHandle>,
        connected_at: Option<Instant>,
        lost_at: Option<Instant>,
        why: String,
    }
    impl App for Vanish {
        fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
            match event {
                QuicEvent::Connected(_) => {
                    // Stop the server; the handshake's last ACKs may still be in flight.
                    self.stop.take().unwrap().stop();
                    self.connected_at = Some(Instant::now());
                }
                QuicEvent::Lost(_, why) => {
                    self.lost_at = Some(Instant::now());
                    self.why = why.to_string();
                    driver.stop();
                }
                _ => {}
            }
        }
    }
    let mut app = Vanish {
        stop: Some(server.stop.clone()),
        connected_at: None,
        lost_at: None,
        why: String::new(),
    };
    quic.run(&mut app).unwrap();
    server.done.join().unwrap();
    let _ = conn;
    let waited = app.lost_at.unwrap() - app.connected_at.unwrap();
    assert!(app.why.contains("timed out"), "{}", app.why);
    // The idle timer restarts at the last packet received (the handshake's end), and quinn
    // takes the larger of the idle timeout and 3 PTOs (about 1 ms here).
    assert!(waited >= idle - Duration::from_millis(5), "{waited:?}");
    assert!(waited < idle + Duration::from_millis(50), "{waited:?}");
    let late = quic.driver().timer_lateness().max();
    assert!(late < 5_000_000, "a timer fired {late} ns late");
}

#[test]
fn garbage_and_datagrams_for_unknown_connections_do_not_disturb_the_server() {
    let server = default_server();
    let junk = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut payloads: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0xff; 1200], vec![0x40; 40]];
    // A short-header packet for a connection ID nobody issued.
    let mut short = vec![0x41];
    short.extend_from_slice(&[0xab; 20]);
    short.extend_from_slice(&[0; 100]);
    payloads.push(short);
    // A long-header Initial with an absurd length field.
    let mut long = vec![0xc0, 0, 0, 0, 1, 8];
    long.extend_from_slice(&[1; 8]);
    long.extend_from_slice(&[0, 0, 0xbf, 0xff, 0xff, 0xff]);
    payloads.push(long);
    for p in &payloads {
        for _ in 0..10 {
            let _ = junk.send_to(p, server.addr);
        }
    }
    // The server still serves.
    let plan = ClientPlan {
        download: 100_000,
        ..ClientPlan::default()
    };
    let report = default_client(server.addr, Trust::Insecure, plan);
    server.stop.stop();
    let (served, stats) = server.done.join().unwrap();
    assert_eq!(report.error, None);
    assert_eq!(report.verified, Some(true));
    assert_eq!(served.requests, 1);
    // The junk reached the driver and was counted, none of it fatal: ignored (what
    // quinn-proto cannot parse or place), or answered with a stateless reset (the short
    // header for an unknown connection, as the rate limit allows). Identical datagrams from
    // one sender may arrive coalesced (GRO), so fewer than the 60 sent are counted; 50 were
    // here.
    let d = &stats.driver;
    assert!(d.datagrams_ignored + d.stateless_resets >= 40, "{d:?}");
    assert!(d.stateless_resets >= 1, "{d:?}");
}

#[test]
fn a_client_that_rejects_the_certificate_fails_with_a_clear_error() {
    let server = default_server();
    let report = default_client(server.addr, Trust::Nothing, ClientPlan::default());
    server.stop.stop();
    server.done.join().unwrap();
    let error = report.error.expect("refused");
    assert!(error.contains("handshake failed"), "{error}");
}

#[test]
fn an_unreachable_server_gives_up_at_the_connect_timeout() {
    // A bound socket nobody reads: no answer, no ICMP.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let started = Instant::now();
    let plan = ClientPlan {
        connect_timeout: Duration::from_millis(300),
        ..ClientPlan::default()
    };
    let report = default_client(silent.local_addr().unwrap(), Trust::Insecure, plan);
    let took = started.elapsed();
    let error = report.error.expect("no answer");
    assert!(error.contains("no answer"), "{error}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

/// A UDP relay between one client and `server` that loses the last datagram of the `nth`
/// burst of at least `min_burst` datagrams from the server (a burst ends after 1 ms without
/// another): the tail of a reply, which no later packet reveals as lost.
struct TailDropRelay {
    addr: SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Datagrams it dropped.
    done: thread::JoinHandle<u64>,
}

/// A relay's socket on loopback, its address, and the flag that stops it. The socket is
/// non-blocking, read with short sleeps: a socket read timeout sleeps whole jiffies (4 ms at
/// 250 Hz), which would hold every datagram that long.
fn relay_socket() -> (
    UdpSocket,
    SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_nonblocking(true).unwrap();
    let addr = socket.local_addr().unwrap();
    (socket, addr, Default::default())
}

fn tail_drop_relay(server: SocketAddr, min_burst: usize, nth: usize) -> TailDropRelay {
    use std::sync::atomic::Ordering;
    let (socket, addr, stop) = relay_socket();
    let stopped = std::sync::Arc::clone(&stop);
    let done = thread::spawn(move || {
        let quiet = Duration::from_millis(1);
        let mut client: Option<SocketAddr> = None;
        let mut held: Option<Vec<u8>> = None;
        let mut burst = 0;
        let mut long_bursts = 0;
        let mut last_from_server = Instant::now();
        let mut dropped = 0;
        let mut buf = vec![0u8; 65536];
        while !stopped.load(Ordering::Relaxed) {
            let got = socket.recv_from(&mut buf);
            if got.is_err() {
                thread::sleep(Duration::from_micros(50));
            }
            if let Ok((n, from)) = got {
                if from == server {
                    if let (Some(d), Some(c)) = (held.take(), client) {
                        // A full socket buffer loses it, as a congested link would.
                        let _ = socket.send_to(&d, c);
                    }
                    held = Some(buf[..n].to_vec());
                    burst += 1;
                    last_from_server = Instant::now();
                } else {
                    client = Some(from);
                    let _ = socket.send_to(&buf[..n], server);
                }
            }
            if held.is_some() && last_from_server.elapsed() >= quiet {
                let d = held.take().unwrap();
                if burst >= min_burst {
                    long_bursts += 1;
                }
                if burst >= min_burst && long_bursts == nth {
                    dropped += 1;
                } else if let Some(c) = client {
                    let _ = socket.send_to(&d, c);
                }
                burst = 0;
            }
        }
        dropped
    });
    TailDropRelay { addr, stop, done }
}

/// 30 requests of 8 KB in turn through a relay that loses the last datagram of the 20th
/// reply (the earlier ones settle the RTT estimate): the slowest request (µs), and the
/// server driver's counters.
fn lose_the_reply_tail(tail_probe: bool) -> (f64, DriverStats) {
    let config = DriverConfig {
        tail_probe,
        ..DriverConfig::default()
    };
    let plan = ClientPlan {
        download: 8000,
        requests: 30,
        ..ClientPlan::default()
    };
    // 8 KB is 6 datagrams, one burst within quinn's initial window.
    let (report, _, stats, relay) = transfer_through(config, false, plan, |server| {
        let relay = tail_drop_relay(server, 5, 20);
        (relay.addr, relay)
    });
    relay.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let dropped = relay.done.join().unwrap();
    assert_eq!(report.error, None);
    assert_eq!(report.verified, Some(true));
    assert_eq!(dropped, 1, "the relay did not drop the reply's tail");
    assert_eq!(report.lost_packets, 0, "the client lost nothing it sent");
    let slowest = report.latencies_us.iter().copied().fold(0.0, f64::max);
    (slowest, stats.driver)
}

#[test]
fn a_lost_reply_tail_is_recovered_by_the_tail_probe_before_quinns_probe_timeout() {
    // quinn-proto's own probe timeout includes the peer's largest ACK delay, 25 ms by
    // default, so without the probe the request cannot finish sooner than that.
    let (without, stats) = lose_the_reply_tail(false);
    assert_eq!(stats.tail_probes, 0);
    assert!(
        without >= 25_000.0,
        "the slowest request took {without} µs without a probe"
    );
    // With it: the probe two smoothed RTTs after the last ACK, the client's immediate ACK of
    // it, quinn's time-threshold loss detection (1 ms at least), the relay's 1 ms holds: a
    // few ms. Anything under 25 ms is a recovery that did not wait for quinn's timeout.
    let (with, stats) = lose_the_reply_tail(true);
    assert!(stats.tail_probes_finding_loss >= 1, "{stats:?}");
    assert!(
        with < 24_000.0,
        "the slowest request took {with} µs with the probe (without: {without} µs)"
    );
}

/// A UDP relay between one client and `server` that holds every datagram `delay` before
/// passing it on, both ways: a path with an RTT of twice `delay`.
struct DelayRelay {
    addr: SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    done: thread::JoinHandle<()>,
}

fn delay_relay(server: SocketAddr, delay: Duration) -> DelayRelay {
    use std::sync::atomic::Ordering;
    let (socket, addr, stop) = relay_socket();
    let stopped = std::sync::Arc::clone(&stop);
    let done = thread::spawn(move || {
        let mut client: Option<SocketAddr> = None;
        let mut held: std::collections::VecDeque<(Instant, SocketAddr, Vec<u8>)> =
            Default::default();
        let mut buf = vec![0u8; 65536];
        while !stopped.load(Ordering::Relaxed) {
            match socket.recv_from(&mut buf) {
                Ok((n, from)) => {
                    let to = if from == server {
                        client
                    } else {
                        client = Some(from);
                        Some(server)
                    };
                    if let Some(to) = to {
                        held.push_back((Instant::now() + delay, to, buf[..n].to_vec()));
                    }
                }
                Err(_) => thread::sleep(Duration::from_micros(50)),
            }
            while held
                .front()
                .is_some_and(|(due, _, _)| *due <= Instant::now())
            {
                let (_, to, d) = held.pop_front().unwrap();
                let _ = socket.send_to(&d, to);
            }
        }
    });
    DelayRelay { addr, stop, done }
}

/// A client that uploads as fast as its pacer lets it, then, `quit_after` the handshake,
/// closes the connection and stops its loop in the same turn. It gives up (stops without a
/// close) if the connection is lost or at `give_up_at`, so a failure cannot hang the test.
struct UploadThenQuit {
    conn: ConnId,
    stream: Option<softtimer_quic::StreamId>,
    quit_after: Duration,
    quit_at: Option<softtimer::Instant>,
    give_up_at: softtimer::Instant,
    closed: bool,
}

impl UploadThenQuit {
    fn upload(&mut self, driver: &mut Driver) {
        let Some(stream) = self.stream else { return };
        let chunk = [0u8; 16_384];
        while driver.write(self.conn, stream, &chunk).unwrap_or(0) > 0 {}
    }
}

impl App for UploadThenQuit {
    fn on_event(&mut self, driver: &mut Driver, event: QuicEvent) {
        match event {
            QuicEvent::Connected(_) => {
                self.stream = driver.open_bi(self.conn).unwrap();
                let after = softtimer::Span::from_duration(self.quit_after, driver.hz());
                self.quit_at = Some(driver.now() + after);
                self.upload(driver);
            }
            QuicEvent::Writable(..) => self.upload(driver),
            QuicEvent::Lost(..) => driver.stop(),
            _ => {}
        }
    }

    fn on_turn(&mut self, driver: &mut Driver) -> bool {
        let now = driver.now();
        if !self.give_up_at.is_after(now) {
            driver.stop();
            return true;
        }
        driver.wake_at(self.give_up_at);
        let Some(at) = self.quit_at else { return false };
        if at.is_after(now) {
            driver.wake_at(at);
            return false;
        }
        if driver.paced_datagrams() == 0 {
            // Quit while the pacer holds a datagram: that is the case under test.
            let ticks = driver.hz() / 10_000;
            driver.wake_at(now + softtimer::Span::from_ticks(ticks));
            return false;
        }
        self.quit_at = None;
        driver
            .close(self.conn, VarInt::from_u32(0), b"bye")
            .unwrap();
        self.closed = true;
        driver.stop();
        true
    }
}

#[test]
fn a_paced_client_that_closes_and_stops_at_once_still_tells_the_server() {
    // Through a 40 ms RTT the client's initial window paces its upload at a datagram every
    // 2.6 ms; it closes while the pacer holds its next datagram, and stops its loop in that
    // turn. Its CONNECTION_CLOSE must leave all the same, or the server,
    // which stops once its one connection has closed, waits out its 30 s idle timeout.
    let identity = Identity::self_signed(&["localhost"]).unwrap();
    let config = DriverConfig {
        pacing: Pacing::PerPacket,
        ..DriverConfig::default()
    };
    let server_cfg = server_config(&identity, &Tuning::default()).unwrap();
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let server_driver = config.clone();
    let server = thread::spawn(move || {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut quic =
            QuicLoop::new(Default::default(), socket, server_driver, Some(server_cfg)).unwrap();
        tx.send((quic.socket().local_addr().unwrap(), quic.stop_handle()))
            .unwrap();
        let mut app = PerfServer::new(Some(1));
        quic.run(&mut app).unwrap();
        let _ = done_tx.send(app.report.bytes_received);
    });
    let (addr, stop) = rx.recv().unwrap();
    let relay = delay_relay(addr, Duration::from_millis(20));
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut quic = QuicLoop::new(Default::default(), socket, config, None).unwrap();
    let client = client_config(&Trust::Insecure, &Tuning::default()).unwrap();
    let conn = quic
        .driver()
        .connect(client, relay.addr, "localhost")
        .unwrap();
    let give_up_at = quic.driver().now()
        + softtimer::Span::from_duration(Duration::from_secs(10), quic.driver().hz());
    let mut app = UploadThenQuit {
        conn,
        stream: None,
        quit_after: Duration::from_millis(50),
        quit_at: None,
        give_up_at,
        closed: false,
    };
    quic.run(&mut app).unwrap();
    // The close is 20 ms away on the relay; a busy host gets ample time.
    let served = done_rx.recv_timeout(Duration::from_secs(5));
    stop.stop();
    server.join().unwrap();
    relay.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    relay.done.join().unwrap();
    assert!(
        app.closed,
        "the client gave up before it could close with a datagram held"
    );
    assert!(
        matches!(served, Ok(bytes) if bytes > 0),
        "the server did not hear the client's close: {served:?}"
    );
}
