//! The driver core on a simulated clock: two drivers through an in-memory link. No socket,
//! no sleep, no thread; every time below is simulated, and a run is reproducible.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use softtimer::{Instant, SimClock};
mod sim_support;

use sim_support::{
    HZ, client_addr, identity, insecure_net, paced_server, perf_net, seeded, server_addr, sim_net,
};
use softtimer_quic::idle::{AfterIdle, AfterIdleFactory};
use softtimer_quic::perf::{ClientPlan, PerfClient, PerfServer};
use softtimer_quic::sim::{From, LinkConfig, Net, Sent};
use softtimer_quic::tls::{Identity, Trust, Tuning};
use softtimer_quic::{App, ClosedState, ConnId, ConnectionError, Driver, DriverConfig, QuicEvent};

fn run_to_end(net: &mut Net<PerfClient, PerfServer>, limit: Duration) {
    let ended = net.run_for(limit, |n| n.a.stopped);
    assert!(
        ended,
        "the client did not finish in {limit:?} of simulated time"
    );
    let report = &net.a.app.report;
    assert_eq!(report.error, None);
    assert_eq!(report.verified, Some(true));
}

fn transfer(seed: u8, link: LinkConfig) -> Net<PerfClient, PerfServer> {
    let plan = ClientPlan {
        download: 300_000,
        upload: 200_000,
        requests: 3,
        ..ClientPlan::default()
    };
    let mut net = perf_net(
        plan,
        seeded(seed),
        seeded(seed + 1),
        &Tuning::default(),
        link,
    );
    run_to_end(&mut net, Duration::from_secs(20));
    net
}

#[test]
fn a_handshake_and_streams_both_ways_give_the_same_transcript_every_run() {
    let link = LinkConfig {
        delay: Duration::from_millis(2),
        rate_bps: Some(100_000_000),
        loss: 0.01,
        seed: 11,
    };
    let first = transfer(3, link.clone());
    assert_eq!(first.a.app.report.requests, 3);
    assert_eq!(first.a.app.report.download_bytes, 900_000);
    assert_eq!(first.a.app.report.upload_bytes, 600_000);
    assert_eq!(first.b.app.report.bytes_received, 600_000);
    assert!(
        first.a.app.report.handshake_us >= 4_000.0,
        "a round trip of 4 ms"
    );
    assert!(
        first.transcript.iter().any(|s| s.arrives.is_none()),
        "1 % loss lost nothing"
    );
    let second = transfer(3, link);
    assert_eq!(first.transcript.len(), second.transcript.len());
    assert!(
        first.transcript == second.transcript,
        "the transcripts differ at datagram {:?}",
        first
            .transcript
            .iter()
            .zip(&second.transcript)
            .position(|(a, b)| a != b)
    );
    assert_eq!(
        first.a.app.report.latencies_us,
        second.a.app.report.latencies_us
    );
}

/// A server that validates addresses answers the client's first Initial with a Retry (a
/// small datagram, its first), and the connection then comes up a round trip later; a
/// server that does not answers with its handshake.
#[test]
fn a_server_validating_addresses_sends_a_retry_and_the_connection_comes_up_a_round_trip_later() {
    let link = LinkConfig {
        delay: Duration::from_millis(5),
        ..LinkConfig::default()
    };
    let plan = || ClientPlan {
        download: 1000,
        requests: 1,
        ..ClientPlan::default()
    };
    let run = |validate_addresses| {
        let server = DriverConfig {
            validate_addresses,
            ..seeded(2)
        };
        let tuning = Tuning::default();
        let mut net = perf_net(plan(), seeded(1), server, &tuning, link.clone());
        run_to_end(&mut net, Duration::from_secs(5));
        let first_answer = net
            .transcript
            .iter()
            .find(|s| s.from == From::B)
            .map(|s| s.size)
            .expect("the server answered");
        let handshake = net.a.app.report.handshake_us;
        (net.b.driver.stats().retries, first_answer, handshake)
    };
    let (retries, first, handshake) = run(true);
    let (plain_retries, plain_first, plain_handshake) = run(false);
    assert_eq!((retries, plain_retries), (1, 0));
    // A Retry carries a token and no crypto frames; the handshake's first datagram is
    // padded to at least 1200 bytes.
    assert!(first < 200 && plain_first >= 1200, "{first} {plain_first}");
    // One more round trip of 10 ms.
    let extra = handshake - plain_handshake;
    assert!((9_000.0..11_000.0).contains(&extra), "{extra} µs");
}

/// The index (among the server's datagrams) of the last datagram of the server's `nth`
/// burst of at least `min` datagrams sent at one instant: a reply's tail.
fn reply_tail(transcript: &[Sent], min: usize, nth: usize) -> u64 {
    let server: Vec<&Sent> = transcript.iter().filter(|s| s.from == From::B).collect();
    let mut bursts = Vec::new();
    let mut start = 0;
    for i in 1..=server.len() {
        if i == server.len() || server[i].at != server[start].at {
            if i - start >= min {
                bursts.push(server[i - 1].index);
            }
            start = i;
        }
    }
    bursts[nth - 1]
}

/// 30 requests of 8 KB over a 200 µs RTT, the 20th reply's last datagram lost: every
/// latency, µs, and the server's counters.
fn lose_a_reply_tail(tail_probe: bool) -> (Vec<f64>, softtimer_quic::DriverStats) {
    let plan = ClientPlan {
        download: 8000,
        requests: 30,
        ..ClientPlan::default()
    };
    let server = DriverConfig {
        tail_probe,
        ..seeded(2)
    };
    let link = LinkConfig::default();
    let mut clean = perf_net(
        plan.clone(),
        seeded(1),
        server.clone(),
        &Tuning::default(),
        link.clone(),
    );
    run_to_end(&mut clean, Duration::from_secs(10));
    let tail = reply_tail(&clean.transcript, 5, 20);
    let mut net = perf_net(plan, seeded(1), server, &Tuning::default(), link);
    net.drop = Some(Box::new(move |s| s.from == From::B && s.index == tail));
    run_to_end(&mut net, Duration::from_secs(10));
    assert_eq!(net.a.app.report.lost_packets, 0, "the client lost nothing");
    (net.a.app.report.latencies_us.clone(), net.b.driver.stats())
}

#[test]
fn a_lost_last_packet_is_found_by_the_tail_probe_within_two_srtt_and_the_loss_threshold() {
    let (latencies, stats) = lose_a_reply_tail(true);
    assert!(stats.tail_probes_finding_loss >= 1, "{stats:?}");
    let normal = latencies[18];
    let hit = latencies[19];
    // The probe two smoothed RTTs (400 µs) after the last ACK, its ACK a round trip later,
    // quinn-proto's time threshold (1 ms at least) from the lost packet's send, and the
    // retransmission's way: under 2 srtt + 1 ms + two round trips more than a clean request.
    let srtt = 200.0;
    let bound = 2.0 * srtt + 1000.0 + 2.0 * srtt;
    assert!(
        hit >= normal + 1000.0 && hit <= normal + bound,
        "the request whose tail was lost took {hit} µs (others {normal} µs)"
    );
}

#[test]
fn without_the_probe_a_lost_last_packet_waits_for_quinns_probe_timeout() {
    let (latencies, stats) = lose_a_reply_tail(false);
    assert_eq!(stats.tail_probes, 0);
    assert!(stats.timeouts > 0);
    // The PTO: srtt + max(4 rttvar, 1 ms) + the peer's 25 ms ACK delay, then a round trip.
    let hit = latencies[19];
    assert!(
        (26_000.0..40_000.0).contains(&hit),
        "the request whose tail was lost took {hit} µs"
    );
}

/// A client that notes when it connected and when, and why, its connection ended, and cuts
/// the link once connected.
struct Watch {
    cut: Rc<Cell<bool>>,
    connected_at: Option<Instant>,
    lost: Option<(Instant, ConnectionError)>,
}

impl App<SimClock> for Watch {
    fn on_event(&mut self, driver: &mut Driver<SimClock>, event: QuicEvent) {
        match event {
            QuicEvent::Connected(_) => {
                self.connected_at = Some(driver.latest());
                self.cut.set(true);
            }
            QuicEvent::Lost(_, why) => {
                self.lost = Some((driver.latest(), why));
                driver.stop();
            }
            _ => {}
        }
    }
}

#[test]
fn a_vanished_peer_times_out_at_the_idle_timeout_to_the_nanosecond() {
    let idle = Duration::from_millis(300);
    let tuning = Tuning {
        idle_timeout: idle,
        ..Tuning::default()
    };
    let cut = Rc::new(Cell::new(false));
    let watch = Watch {
        cut: Rc::clone(&cut),
        connected_at: None,
        lost: None,
    };
    let mut net = insecure_net(&tuning, seeded(2), watch, PerfServer::new(None));
    net.drop = Some(Box::new(move |_| cut.get()));
    assert!(net.run_for(Duration::from_secs(5), |n| n.a.stopped));
    let (lost_at, why) = net.a.app.lost.clone().unwrap();
    assert_eq!(why, ConnectionError::TimedOut);
    // The idle timer restarts at the last datagram that reached the client.
    let last = net
        .transcript
        .iter()
        .filter(|s| s.from == From::B)
        .filter_map(|s| s.arrives)
        .max()
        .unwrap();
    let waited = lost_at.saturating_since(last).to_duration(HZ);
    assert!(
        waited >= idle && waited < idle + Duration::from_millis(100),
        "{waited:?}"
    );
    // On the simulated clock the timer fires exactly when quinn-proto asked.
    assert_eq!(net.a.driver.timer_lateness().max(), 1);
    assert!(
        net.a
            .app
            .connected_at
            .unwrap()
            .is_after(Instant::from_ticks(0))
    );
}

/// The time a 100-packet request after 1 s of idle takes with `mode`, over a 50 Mbit/s path
/// with a 20 ms RTT, after a 2 MB warm-up; and the server's window before that request.
fn after_idle(mode: AfterIdle) -> f64 {
    let tuning = Tuning {
        controller: Arc::new(AfterIdleFactory::new(mode)),
        ..Tuning::default()
    };
    let plan = ClientPlan {
        download: 120_000,
        requests: 1,
        warmup: Some((2_000_000, Duration::from_secs(1))),
        ..ClientPlan::default()
    };
    let link = LinkConfig {
        delay: Duration::from_millis(10),
        rate_bps: Some(50_000_000),
        ..LinkConfig::default()
    };
    let mut net = perf_net(plan, seeded(1), paced_server(), &tuning, link);
    run_to_end(&mut net, Duration::from_secs(30));
    net.a.app.report.latencies_us[0]
}

#[test]
fn after_idle_rate_based_clocking_resumes_faster_than_a_slow_start_restart() {
    let slow_start = after_idle(AfterIdle::SlowStart);
    let rate_based = after_idle(AfterIdle::RateBased);
    // 120 KB at 50 Mbit/s is 19 ms on the wire, plus a 20 ms round trip: the restart from
    // the initial window takes several more round trips.
    assert!(
        rate_based < 45_000.0 && slow_start > rate_based + 15_000.0,
        "after idle: rate-based {rate_based} µs, slow-start restart {slow_start} µs"
    );
}

/// A server that closes every connection as soon as it is up.
struct Closer;
impl App<SimClock> for Closer {
    fn on_event(&mut self, driver: &mut Driver<SimClock>, event: QuicEvent) {
        if let QuicEvent::Connected(c) = event {
            driver
                .close(c, softtimer_quic::VarInt::from_u32(7), b"go away")
                .unwrap();
        }
    }
}

/// A client that connects once and notes how it ended.
#[derive(Default)]
struct Once {
    lost: Option<ConnectionError>,
}
impl App<SimClock> for Once {
    fn on_event(&mut self, driver: &mut Driver<SimClock>, event: QuicEvent) {
        if let QuicEvent::Lost(_, why) = event {
            self.lost = Some(why);
            driver.stop();
        }
    }
}

fn closing_net(closed_state: ClosedState, drain: Option<Duration>) -> Net<Once, Closer> {
    let server = DriverConfig {
        closed_state,
        drain_period: drain,
        ..seeded(2)
    };
    let mut net = insecure_net(&Tuning::default(), server, Once::default(), Closer);
    net.keep_bytes = true;
    assert!(net.run_for(Duration::from_secs(5), |n| n.a.stopped));
    net
}

/// A late 1-RTT packet for the server's closed connection: a short header with the
/// connection ID the client used (from its last long-header packet), and 60 bytes.
fn late_packet(net: &Net<Once, Closer>) -> Vec<u8> {
    let long = net
        .transcript
        .iter()
        .rev()
        .filter(|s| s.from == From::A)
        .find_map(|s| s.bytes.clone().filter(|b| b[0] & 0x80 != 0))
        .unwrap();
    let len = long[5] as usize;
    let mut late = vec![0x41];
    late.extend_from_slice(&long[6..6 + len]);
    late.extend((0..60u8).map(|i| i.wrapping_mul(37)));
    late
}

/// The server's close datagram as it first sent it.
fn close_sent<B>(net: &Net<Once, B>) -> Vec<u8> {
    net.transcript
        .iter()
        .rev()
        .find(|s| s.from == From::B)
        .and_then(|s| s.bytes.clone())
        .unwrap()
}

/// Hands `late` to the server `n` times; returns what it answered each time.
fn knock<B: App<SimClock>>(net: &mut Net<Once, B>, late: &[u8], n: usize) -> Vec<Option<Vec<u8>>> {
    let now = net.now();
    let mut answers = Vec::new();
    for _ in 0..n {
        net.b
            .driver
            .handle_datagram(now, client_addr(), None, None, late);
        let mut buf = Vec::new();
        let answer = net.b.driver.poll_transmit(now, &mut buf).map(|t| {
            assert_eq!(t.destination, client_addr());
            buf.clone()
        });
        answers.push(answer);
    }
    answers
}

#[test]
fn a_closed_connection_becomes_a_record_that_repeats_its_close_then_expires_to_a_reset() {
    let mut net = closing_net(ClosedState::Compact, None);
    match &net.a.app.lost {
        Some(ConnectionError::ApplicationClosed(close)) => {
            assert_eq!(close.error_code, softtimer_quic::VarInt::from_u32(7));
            assert_eq!(&close.reason[..], b"go away");
        }
        other => panic!("the client saw {other:?}"),
    }
    let server = &mut net.b.driver;
    // quinn-proto's connection is gone at once; a record holds the close.
    let _ = server.poll_timeout();
    assert_eq!(server.connections(), 0);
    assert_eq!(server.closed_held(), 1);
    let late = late_packet(&net);
    let close = close_sent(&net);
    let answers = knock(&mut net, &late, 4);
    assert_eq!(
        answers,
        [Some(close.clone()), Some(close.clone()), None, Some(close)],
        "the close is repeated byte for byte to the 1st, 2nd and 4th late packet"
    );
    let stats = net.b.driver.stats().closed;
    assert_eq!(
        (stats.compacted, stats.late_answered, stats.late_dropped),
        (1, 3, 1)
    );
    // After three PTOs (about 80 ms here) the record expires, and quinn-proto's endpoint
    // answers a late packet with a stateless reset.
    net.run_for(Duration::from_millis(200), |_| false);
    assert_eq!(net.b.driver.closed_held(), 0);
    assert_eq!(net.b.driver.stats().closed.expired, 1);
    let answer = knock(&mut net, &late, 1)
        .remove(0)
        .expect("a stateless reset");
    assert_ne!(answer, close_sent(&net));
    assert_eq!(net.b.driver.stats().stateless_resets, 1);
}

#[test]
fn a_draining_connection_sends_nothing_and_the_full_design_keeps_the_connection() {
    // The client's side: the server closed it, so it drains and answers nothing.
    let mut net = closing_net(ClosedState::Compact, None);
    let from_server = close_sent(&net);
    let now = net.now();
    let client = &mut net.a.driver;
    let _ = client.poll_timeout();
    assert_eq!(client.closed_held(), 1);
    client.handle_datagram(now, server_addr(), None, None, &from_server);
    let mut buf = Vec::new();
    assert!(client.poll_transmit(now, &mut buf).is_none());
    assert_eq!(client.stats().closed.late_dropped, 1);

    // Full: quinn-proto's connection stays (it answers only packets it can decrypt).
    let mut full = closing_net(ClosedState::Full, Some(Duration::from_secs(10)));
    let _ = full.b.driver.poll_timeout();
    assert_eq!(full.b.driver.closed_held(), 0);
    assert_eq!(full.b.driver.connections(), 1);
    // Held past quinn-proto's own drain, to the override's end.
    held_then_freed(&mut full, Driver::connections, 5, 6);
}

/// Runs `net` on for `held` seconds, after which the server still holds one of what `count`
/// counts, and for `freed` more, after which it holds none.
fn held_then_freed(
    net: &mut Net<Once, Closer>,
    count: impl Fn(&Driver<SimClock>) -> usize,
    held: u64,
    freed: u64,
) {
    net.run_for(Duration::from_secs(held), |_| false);
    assert_eq!(count(&net.b.driver), 1, "after {held} s");
    net.run_for(Duration::from_secs(freed), |_| false);
    assert_eq!(count(&net.b.driver), 0, "after {held} s and {freed} s");
}

#[test]
fn a_drain_period_override_holds_records_until_it_ends() {
    let mut net = closing_net(ClosedState::Compact, Some(Duration::from_secs(60)));
    held_then_freed(&mut net, Driver::closed_held, 30, 31);
}

#[test]
fn an_alpn_mismatch_fails_the_handshake_with_tls_no_application_protocol() {
    let transport = Arc::new(quinn_proto::TransportConfig::default());
    let server_tls =
        softtimer_quic::tls::server_config_with(identity(), &[b"perf"], transport.clone()).unwrap();
    let client_tls =
        softtimer_quic::tls::client_config_with(&Trust::Insecure, &[b"h3"], transport).unwrap();
    let mut net = sim_net(
        (seeded(1), client_tls),
        (seeded(2), server_tls),
        (|_, _| Once::default(), PerfServer::new(None)),
        LinkConfig::default(),
    );
    assert!(net.run_for(Duration::from_secs(5), |n| n.a.stopped));
    match &net.a.app.lost {
        Some(ConnectionError::ConnectionClosed(close)) => {
            // TLS alert 120, no_application_protocol, as a QUIC crypto error.
            assert_eq!(
                close.error_code,
                quinn_proto::TransportErrorCode::crypto(120)
            );
        }
        other => panic!("the client saw {other:?}"),
    }
}

#[test]
fn certificate_files_that_do_not_parse_are_refused_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("softtimer-quic-pem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let garbage = dir.join("garbage.pem");
    std::fs::write(
        &garbage,
        b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let empty = dir.join("empty.pem");
    std::fs::write(&empty, b"nothing here").unwrap();
    let missing = dir.join("missing.pem");
    let err = Identity::from_pem_files(&garbage, &garbage).unwrap_err();
    assert!(
        matches!(
            &err,
            softtimer_quic::QuicError::Tls(softtimer_quic::TlsError::Pem {
                what: "certificate",
                ..
            })
        ),
        "{err:?}"
    );
    let err = Identity::from_pem_files(&empty, &empty).unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
    let err = Identity::from_pem_files(&missing, &missing).unwrap_err();
    assert!(
        matches!(
            &err,
            softtimer_quic::QuicError::Tls(softtimer_quic::TlsError::Read { .. })
        ),
        "{err:?}"
    );
    assert!(Trust::pem_file(&garbage).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A client sending `requests` requests of 8 KB replies every 2 ms, where each end asks
/// its peer (ACK frequency) to acknowledge only every 8 packets or within 10 ms: the client
/// holds its ACK of a reply until its next request.
fn a_peer_holding_its_acks(requests: u64) -> (ClientPlan, Tuning) {
    let plan = ClientPlan {
        download: 8000,
        requests,
        interval: Some(Duration::from_millis(2)),
        ..ClientPlan::default()
    };
    let tuning = Tuning {
        ack_every: Some(8),
        max_ack_delay: Some(Duration::from_millis(10)),
        ..Tuning::default()
    };
    (plan, tuning)
}

#[test]
fn a_peer_that_acknowledges_a_reply_with_its_next_request_stops_drawing_probes() {
    // Requests every 2 ms over a 200 µs RTT; each end asks its peer (ACK frequency) to
    // acknowledge only every 8 packets or within 10 ms, so the client holds its ACK of a
    // reply of seven datagrams until its next request. A probe two smoothed RTTs after the
    // reply meets that held ACK, finds nothing lost, and teaches the probe to wait longer:
    // after a few, the probe waits out the client's think time.
    let (plan, tuning) = a_peer_holding_its_acks(40);
    let mut net = perf_net(plan, seeded(1), seeded(2), &tuning, LinkConfig::default());
    run_to_end(&mut net, Duration::from_secs(10));
    let stats = net.b.driver.stats();
    assert_eq!(stats.tail_probes_finding_loss, 0);
    assert!(
        (1..=6).contains(&stats.tail_probes),
        "{} probes over 40 replies",
        stats.tail_probes
    );
}

#[test]
fn a_tail_probe_is_waited_for_without_spinning() {
    // The same held ACKs: after the first reply the server's next wake-up is its probe,
    // which needs no precision (a wake-up late against quinn's 25 ms probe timeout), so the
    // loop running the driver may block until it rather than spin.
    let (plan, tuning) = a_peer_holding_its_acks(2);
    let server = DriverConfig {
        wake_lateness: Duration::from_micros(50),
        ..seeded(2)
    };
    let mut net = perf_net(plan, seeded(1), server, &tuning, LinkConfig::default());
    let mut soon = Vec::new();
    for _ in 0..400 {
        net.run_for(Duration::from_micros(25), |_| false);
        let now = net.now();
        if let Some(t) = net.b.driver.poll_timeout()
            && t.at.saturating_since(now) < softtimer::Span::from_micros(2000, HZ)
        {
            soon.push((t.at.saturating_since(now).as_nanos(HZ) / 1000, t.spin));
        }
    }
    assert!(net.b.driver.stats().tail_probes >= 1);
    assert!(
        !soon.is_empty() && soon.iter().all(|&(_, spin)| !spin),
        "{soon:?}"
    );
}

/// The request whose reply loses its last datagram (the 30th), with `plan` and `tuning`:
/// asserts that a tail probe found the loss, and returns the latency of the request before
/// it and of that request, µs.
fn lose_the_30th_reply_tail(plan: ClientPlan, tuning: &Tuning) -> (f64, f64) {
    let link = LinkConfig::default();
    let mut clean = perf_net(plan.clone(), seeded(1), seeded(2), tuning, link.clone());
    run_to_end(&mut clean, Duration::from_secs(10));
    let tail = reply_tail(&clean.transcript, 5, 30);
    let mut net = perf_net(plan, seeded(1), seeded(2), tuning, link);
    net.drop = Some(Box::new(move |s| s.from == From::B && s.index == tail));
    run_to_end(&mut net, Duration::from_secs(10));
    let stats = net.b.driver.stats();
    assert!(stats.tail_probes_finding_loss >= 1, "{stats:?}");
    let latencies = &net.a.app.report.latencies_us;
    (latencies[28], latencies[29])
}

/// How much longer than the others a request whose reply tail was lost may take, µs, on a
/// 200 µs RTT: the probe by two smoothed RTTs and at most the allowance's cap (2 ms), its ACK
/// a round trip later, quinn's time threshold (1 ms) and the retransmission's round trip.
const PROBED_RECOVERY_US: f64 = 2.0 * 200.0 + 2000.0 + 1000.0 + 2.0 * 200.0;

#[test]
fn after_learning_a_late_peer_a_lost_reply_tail_is_still_found_long_before_quinns_probe_timeout() {
    // The peer of the test above (it holds its ACK of a reply until its next request, 2 ms
    // later) has taught the probe to wait out its think time; then a reply's last datagram is
    // lost. The client, waiting for it, sends nothing; the probe, two smoothed RTTs and the
    // learned allowance after the last send, draws the ACK that shows the loss. quinn-proto's
    // own probe timeout would wait for the peer's 10 ms ACK delay on top of srtt + 4 rttvar.
    let (plan, tuning) = a_peer_holding_its_acks(40);
    let (normal, hit) = lose_the_30th_reply_tail(plan, &tuning);
    assert!(
        hit >= normal + 1000.0 && hit <= normal + PROBED_RECOVERY_US && hit < 10_000.0,
        "the request whose tail was lost took {hit} µs (others {normal} µs)"
    );
}

#[test]
fn a_peer_that_thinks_longer_than_the_allowance_still_has_its_lost_tail_found_early() {
    // Requests every 20 ms with quinn's default ACK delay (25 ms): the first probes meet a
    // held ACK and teach the probe an allowance. A lost reply tail is still found a few ms
    // after it was sent, not after quinn's probe timeout (srtt + 4 rttvar + 25 ms). (On the
    // lab's emulated path, whose jitter this link does not model, an allowance capped at
    // 25 ms climbed to its cap over 2,000 requests; the 2 ms cap is checked there, by E16.)
    let plan = ClientPlan {
        download: 8000,
        requests: 40,
        interval: Some(Duration::from_millis(20)),
        ..ClientPlan::default()
    };
    let (normal, hit) = lose_the_30th_reply_tail(plan, &Tuning::default());
    assert!(
        hit >= normal + 1000.0 && hit <= normal + PROBED_RECOVERY_US,
        "the request whose tail was lost took {hit} µs (others {normal} µs)"
    );
}

#[test]
fn a_peer_that_promised_a_short_ack_delay_has_its_lost_tail_probed_before_quinns_probe_timeout() {
    // The held-ACK peer, but each end asks for an ACK within 1 ms, so quinn-proto's probe
    // timeout is about srtt + 1 ms (its timer granularity) + 1 ms. Held ACKs teach the probe
    // an allowance up to 2 ms; two smoothed RTTs and that would come after quinn-proto's own
    // probe, so the allowance is left out and the lost tail is probed two smoothed RTTs
    // after the last send.
    let (plan, mut tuning) = a_peer_holding_its_acks(40);
    tuning.max_ack_delay = Some(Duration::from_millis(1));
    let (normal, hit) = lose_the_30th_reply_tail(plan, &tuning);
    // The probe (two smoothed RTTs), its ACK (a round trip), quinn's time threshold (its
    // 1 ms granularity) and the retransmission's round trip. quinn-proto's probe timeout
    // alone is 2.2 ms after the tail, and a probe with the allowance would come after it.
    let probed = 2.0 * 200.0 + 200.0 + 1000.0 + 200.0;
    assert!(
        hit >= normal + 1000.0 && hit <= normal + probed + 200.0,
        "the request whose tail was lost took {hit} µs (others {normal} µs)"
    );
}

/// Notes the connections that come up, and closes none.
#[derive(Default)]
struct Up(Vec<ConnId>);
impl App<SimClock> for Up {
    fn on_event(&mut self, _: &mut Driver<SimClock>, event: QuicEvent) {
        if let QuicEvent::Connected(id) = event {
            self.0.push(id);
        }
    }
}

#[test]
fn a_packet_that_crosses_the_close_before_the_record_is_made_is_answered_by_the_record() {
    let mut net = insecure_net(
        &Tuning::default(),
        seeded(2),
        Once::default(),
        Up::default(),
    );
    net.keep_bytes = true;
    assert!(net.run_for(Duration::from_secs(1), |n| !n.b.app.0.is_empty()));
    net.run_for(Duration::from_millis(50), |_| false);
    // The server closes, and its close leaves; nothing has asked the driver for its next
    // timeout since, so quinn-proto's connection is still there.
    let id = net.b.app.0[0];
    net.b
        .driver
        .close(id, softtimer_quic::VarInt::from_u32(3), b"bye")
        .unwrap();
    net.step();
    let close = close_sent(&net);
    assert_eq!(net.b.driver.connections(), 1);
    assert_eq!(net.b.driver.closed_held(), 0);
    // Meanwhile the client, not yet aware, sends a byte on a new stream.
    let now = net.now();
    let client = &mut net.a.driver;
    let conn = client.connection_ids()[0];
    let stream = client.open_bi(conn).unwrap().unwrap();
    client.write(conn, stream, b"late").unwrap();
    let mut buf = Vec::new();
    let t = client.poll_transmit(now, &mut buf).expect("a packet");
    let late = buf[..t.segment_size.unwrap_or(t.size)].to_vec();
    // It makes the record, which answers it with the close, byte for byte.
    assert_eq!(knock(&mut net, &late, 1), [Some(close)]);
    assert_eq!(net.b.driver.connections(), 0);
    assert_eq!(net.b.driver.closed_held(), 1);
    assert_eq!(net.b.driver.stats().closed.late_answered, 1);
}

/// A client that opens a stream, writes to it and keeps writing on every turn, noting what
/// the peer's STOP_SENDING does to it.
#[derive(Default)]
struct Writer {
    stream: Option<(ConnId, softtimer_quic::StreamId)>,
    stopped_event: Option<softtimer_quic::VarInt>,
    write_error: Option<softtimer_quic::QuicError>,
}
impl App<SimClock> for Writer {
    fn on_event(&mut self, driver: &mut Driver<SimClock>, event: QuicEvent) {
        match event {
            QuicEvent::Connected(c) => {
                let s = driver.open_bi(c).unwrap().expect("a stream is open to us");
                driver.write(c, s, b"hello").unwrap();
                self.stream = Some((c, s));
            }
            QuicEvent::Stopped(_, _, code) => self.stopped_event = Some(code),
            _ => {}
        }
    }
    fn on_turn(&mut self, driver: &mut Driver<SimClock>) -> bool {
        let Some((c, s)) = self.stream else {
            return false;
        };
        if self.write_error.is_some() {
            return false;
        }
        match driver.write(c, s, b"more") {
            Ok(_) => true,
            Err(e) => {
                self.write_error = Some(e);
                driver.stop();
                false
            }
        }
    }
}

/// A server that asks the peer to stop sending on every stream it opens, with code 42.
struct Stopper;
impl App<SimClock> for Stopper {
    fn on_event(&mut self, driver: &mut Driver<SimClock>, event: QuicEvent) {
        if let QuicEvent::StreamOpened(c, softtimer_quic::Dir::Bi) = event {
            while let Ok(Some(s)) = driver.accept_bi(c) {
                driver
                    .stop_sending(c, s, softtimer_quic::VarInt::from_u32(42))
                    .unwrap();
            }
        }
    }
}

#[test]
fn a_stream_the_peer_stops_fails_its_writes_with_stopped_and_the_code() {
    let mut net = insecure_net(&Tuning::default(), seeded(2), Writer::default(), Stopper);
    assert!(net.run_for(Duration::from_secs(5), |n| n.a.stopped));
    let (_, stream) = net.a.app.stream.unwrap();
    let code = softtimer_quic::VarInt::from_u32(42);
    assert_eq!(net.a.app.stopped_event, Some(code));
    match net.a.app.write_error.take() {
        Some(softtimer_quic::QuicError::Stream(softtimer_quic::StreamError::Stopped {
            stream: s,
            code: c,
        })) => assert_eq!((s, c), (stream, code)),
        other => panic!("{other:?}"),
    }
}
