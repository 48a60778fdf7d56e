//! `softtimers pace` and `softtimers sink` on loopback: every datagram sent is counted, the
//! rate is right, and bad input is a clear error.

use std::process::Command;
use std::time::Duration;

mod common;

use softtimer_net::Rate;
use softtimers_lab::pace::{self, PaceOptions, PaceTimer, SinkInput, SinkOptions, SinkTarget};

fn softtimers(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_softtimers"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Runs a sink on loopback and `pace` with `timer` into it; returns both reports.
fn pace_into_sink(
    timer: PaceTimer,
    rate: &str,
    flows: u32,
    burst_gap: Duration,
) -> (pace::PaceReport, pace::SinkReport) {
    pace_into_sink_with(timer, pace::Scheduler::PerFlow, rate, flows, burst_gap)
}

/// As [`pace_into_sink`], with the scheduler of the flows chosen.
fn pace_into_sink_with(
    timer: PaceTimer,
    scheduler: pace::Scheduler,
    rate: &str,
    flows: u32,
    burst_gap: Duration,
) -> (pace::PaceReport, pace::SinkReport) {
    let rx = pace::bind_sink("127.0.0.1:0".parse().unwrap()).unwrap();
    let to = rx.local_addr().unwrap();
    let mut input = SinkInput::from(rx);
    let options = SinkOptions {
        target: SinkTarget::Listen(to),
        duration: Some(Duration::from_secs(20)),
        idle: Duration::from_millis(500),
        rtt: Duration::from_millis(100),
        bottleneck: Some(rate.parse().unwrap()),
        burst_gap,
        expected_rate: Some(rate.parse().unwrap()),
    };
    let sink = std::thread::spawn(move || pace::sink_on(&mut input, &options).unwrap());
    let sent = pace::pace(&PaceOptions {
        to,
        rate: rate.parse().unwrap(),
        burst: None,
        size: 1472,
        flows,
        duration: Duration::from_millis(800),
        timer,
        spin_window: softtimer_rt::SpinWindow::Calibrated,
        batch: true,
        scheduler,
    })
    .unwrap();
    (sent, sink.join().unwrap())
}

#[test]
fn the_sink_counts_every_datagram_and_the_rate_is_right() {
    use pace::Scheduler::{Departure, PerFlow};
    for (timer, scheduler, flows) in [
        (PaceTimer::Soft, PerFlow, 1),
        (PaceTimer::Soft, PerFlow, 4),
        (PaceTimer::Soft, Departure, 4),
        (PaceTimer::Timerfd, PerFlow, 1),
    ] {
        let case = format!("{timer:?} {scheduler:?} {flows} flows");
        let (sent, got) =
            pace_into_sink_with(timer, scheduler, "50M", flows, Duration::from_micros(2));
        assert!(sent.packets > 1000, "{case}: only {} sent", sent.packets);
        assert_eq!(sent.send_errors, 0, "{case}");
        assert_eq!(got.packets, sent.packets, "{case}: the sink lost datagrams");
        assert_eq!(
            (got.missing, got.foreign, got.kernel_drops),
            (0, 0, 0),
            "{case}"
        );
        assert_eq!(got.bytes, sent.packets * 1472);
        // The rate, at the sender and at the sink, within 1 % of the target. The per-flow
        // pacers make up a stall. Under departure times, a flow more than one interval
        // (942 µs) late leaves at once and banks no credit, so a sender stalled by a busy
        // host (CI runs tests side by side) loses the stalled time: runs with a gap over
        // 1 ms get 5 %.
        let catches_up = scheduler == PerFlow || got.gaps_over_1ms == 0;
        let allowed_pct = if catches_up { 1.0 } else { 5.0 };
        assert!(
            sent.conformance_pct < allowed_pct,
            "{case}: sender {sent:?}, sink {got:?}"
        );
        let off_pct = (got.rate_bps - 50e6).abs() / 50e6 * 100.0;
        assert!(
            off_pct < allowed_pct,
            "{case}: sink measured {} bit/s: {got:?}",
            got.rate_bps
        );
        // One datagram every 235.5 µs: the mean inter-arrival says so (it is the rate seen
        // another way, so it gets the same allowance). The flows start staggered over one
        // interval rather than four at a time.
        let mean_tolerance_us = (235.52 * allowed_pct / 100.0).max(3.0);
        assert!(
            (got.interarrival_mean_us - 235.52).abs() < mean_tolerance_us,
            "{case}: {got:?}"
        );
        assert!(got.burstiness_index.is_some());
        assert_eq!(got.flows, u64::from(flows), "{case}");
        assert!(
            got.flow_packets_max - got.flow_packets_min <= 2,
            "{case}: the flows did not share the rate: {got:?}"
        );
        // Departure times keep the flows' phases; the per-flow pacers start staggered too,
        // but each catches up on its own after a stall, so their phases wander. A stall of
        // the sender (a busy host: CI runs tests side by side) makes every flow late at
        // once, and a flow that is late leaves now, without credit: the phases meet. So the
        // phases are checked on runs the host left alone.
        if scheduler == Departure && got.gaps_over_1ms <= 3 {
            assert!(
                got.interarrival_p50_us > 150.0,
                "{case}: the flows arrived together: {got:?}"
            );
        }
        assert!(sent.send_calls <= sent.packets, "{case}");
    }
}

/// When the loop is behind, every datagram already due leaves in one `sendmmsg`: at 100
/// flows and 1 Gbit/s the aggregate interval is 11.8 µs, below what a trigger state costs
/// here, so batches form; none of their datagrams is lost on the way.
#[test]
fn datagrams_due_together_leave_in_one_system_call() {
    for scheduler in [pace::Scheduler::PerFlow, pace::Scheduler::Departure] {
        let (sent, got) = pace_into_sink_with(
            PaceTimer::Soft,
            scheduler,
            "1G",
            100,
            Duration::from_micros(2),
        );
        assert_eq!(sent.send_errors, 0, "{scheduler:?}");
        assert!(
            sent.send_calls < sent.packets,
            "{scheduler:?}: {} send calls for {} datagrams",
            sent.send_calls,
            sent.packets
        );
        assert_eq!(
            got.packets + got.kernel_drops,
            sent.packets,
            "{scheduler:?}: {got:?}"
        );
    }
}

#[test]
fn unpaced_sending_is_bursty_at_the_sink() {
    // Datagrams 235 µs apart when paced; back to back on loopback they come a system call
    // apart (a few µs, more in a debug build).
    let (sent, got) = pace_into_sink(PaceTimer::None, "50M", 1, Duration::from_micros(50));
    assert_eq!(got.packets, sent.packets);
    assert!(
        got.longest_burst > 10,
        "back-to-back sending left no burst: {got:?}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let cases: [&[&str]; 12] = [
        &["pace", "--to", "127.0.0.1:9", "--rate", "0"],
        &[
            "pace",
            "--to",
            "127.0.0.1:9",
            "--rate",
            "1M",
            "--spin-window",
            "5s",
        ],
        &["pace", "--to", "127.0.0.1:9", "--rate", "-5M"],
        &["pace", "--to", "127.0.0.1:9", "--rate", "fast"],
        &["pace", "--to", "127.0.0.1:9", "--rate", "5000T"],
        &[
            "pace",
            "--to",
            "127.0.0.1:9",
            "--rate",
            "1M",
            "--size",
            "70000",
        ],
        &[
            "pace",
            "--to",
            "127.0.0.1:9",
            "--rate",
            "1M",
            "--size",
            "10",
        ],
        &["pace", "--to", "not-an-address", "--rate", "1M"],
        &["sink", "--listen", "127.0.0.1:9", "--duration", "soon"],
        &["sink", "--duration", "1s"],
        &["sink", "--listen", "127.0.0.1:9", "--observe", "9"],
        &["sink", "--observe", "9", "--interface", "no-such-if0"],
    ];
    for args in cases {
        let out = softtimers(args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A timer that cannot fire that often is refused before anything is sent.
    let err = pace::check_pace(&PaceOptions {
        to: "127.0.0.1:9".parse().unwrap(),
        rate: Rate::from_bits_per_sec(100_000_000_000).unwrap(),
        burst: None,
        size: 64,
        flows: 1,
        duration: Duration::from_secs(1),
        timer: PaceTimer::Timerfd,
        spin_window: softtimer_rt::SpinWindow::Calibrated,
        batch: true,
        scheduler: pace::Scheduler::PerFlow,
    })
    .unwrap_err();
    assert!(err.to_string().contains("1 µs"), "{err}");
}

#[test]
fn pace_and_sink_write_the_json_the_checks_read() {
    let dir = std::env::temp_dir().join(format!("softtimers-pace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sink_json = dir.join("sink.json");
    let pace_json = dir.join("pace.json");
    // A port picked by binding and releasing it.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let sink = {
        let (listen, json) = (listen.clone(), sink_json.clone());
        std::thread::spawn(move || {
            softtimers(&[
                "sink",
                "--listen",
                &listen,
                "--duration",
                "3s",
                "--json",
                json.to_str().unwrap(),
            ])
        })
    };
    assert!(
        common::wait_for_port(port, Duration::from_secs(10), || !sink.is_finished()),
        "the sink did not bind {listen}"
    );
    let out = softtimers(&[
        "pace",
        "--to",
        &listen,
        "--rate",
        "20M",
        "--duration",
        "500ms",
        "--json",
        pace_json.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = sink.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&pace_json).unwrap()).unwrap();
    for key in [
        "target_bps",
        "achieved_bps",
        "conformance_pct",
        "packets",
        "cpu_ns_per_packet",
        "timer",
    ] {
        assert!(p.get(key).is_some(), "pace JSON lacks {key}: {p}");
    }
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sink_json).unwrap()).unwrap();
    for key in [
        "packets",
        "rate_bps",
        "interarrival_mean_us",
        "interarrival_stddev_us",
        "longest_burst",
        "burstiness_index",
    ] {
        assert!(s.get(key).is_some(), "sink JSON lacks {key}: {s}");
    }
    assert_eq!(s["packets"], p["packets"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `sink --observe` measures datagrams to a port another socket owns, as the owner would.
/// As root; elsewhere it must refuse, saying what it needs.
#[test]
fn the_sink_observes_a_port_it_does_not_own() {
    let owner = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = owner.local_addr().unwrap();
    let json = std::env::temp_dir().join(format!("softtimers-observe-{}.json", std::process::id()));
    let sink = {
        let (port, json) = (to.port().to_string(), json.clone());
        std::thread::spawn(move || {
            softtimers(&[
                "sink",
                "--observe",
                &port,
                "--duration",
                "5s",
                "--idle",
                "300ms",
                "--json",
                json.to_str().unwrap(),
            ])
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    if !rustix::process::geteuid().is_root() {
        let out = sink.join().unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("CAP_NET_RAW"));
        return;
    }
    let drained = {
        let owner = owner.try_clone().unwrap();
        owner
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let mut owned = 0u64;
            while owner.recv(&mut buf).is_ok() {
                owned += 1;
            }
            owned
        })
    };
    let sent = pace::pace(&PaceOptions {
        to,
        rate: "20M".parse().unwrap(),
        burst: None,
        size: 1000,
        flows: 1,
        duration: Duration::from_millis(500),
        timer: PaceTimer::Soft,
        spin_window: softtimer_rt::SpinWindow::Calibrated,
        batch: true,
        scheduler: pace::Scheduler::PerFlow,
    })
    .unwrap();
    let out = sink.join().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(got["source"], format!("capture lo:{}", to.port()));
    assert_eq!(got["packets"], sent.packets, "{got}");
    assert_eq!(got["bytes"], sent.packets * 1000);
    assert_eq!(
        (got["missing"].as_u64(), got["malformed"].as_u64()),
        (Some(0), Some(0))
    );
    // One datagram every 400 µs.
    let mean = got["interarrival_mean_us"].as_f64().unwrap();
    assert!((mean - 400.0).abs() < 5.0, "{got}");
    // The owner got them all too: observing took nothing away.
    assert_eq!(drained.join().unwrap(), sent.packets);
}

#[test]
fn forwarding_commands_refuse_bad_input() {
    let cases: [&[&str]; 7] = [
        &["flood", "--to", "127.0.0.1:9", "--rate", "0"],
        &["flood", "--to", "127.0.0.1:9", "--rate", "1000000000"],
        &[
            "flood",
            "--to",
            "127.0.0.1:9",
            "--rate",
            "1000",
            "--size",
            "0",
        ],
        &[
            "router",
            "--listen",
            "127.0.0.1:0",
            "--forward-to",
            "127.0.0.1:9",
            "--quota",
            "0",
        ],
        &[
            "router",
            "--listen",
            "127.0.0.1:0",
            "--forward-to",
            "127.0.0.1:9",
            "--cpu-budget",
            "0",
        ],
        &[
            "router",
            "--listen",
            "127.0.0.1:0",
            "--forward-to",
            "127.0.0.1:9",
            "--cpu-budget",
            "101",
        ],
        &[
            "router",
            "--listen",
            "127.0.0.1:0",
            "--forward-to",
            "nowhere",
            "--duration",
            "1s",
        ],
    ];
    for args in cases {
        let out = softtimers(args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// The router forwards every datagram on loopback at a low rate, in both designs.
#[test]
fn the_router_forwards_every_datagram_at_a_low_rate() {
    for design in ["polling", "baseline"] {
        if design == "baseline" && !rustix::process::geteuid().is_root() {
            continue; // its receive thread needs SCHED_FIFO
        }
        let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // The first datagram may wait for the router and the flood to start on a loaded host.
        sink.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let port = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let listen = format!("127.0.0.1:{port}");
        let json = std::env::temp_dir().join(format!(
            "softtimers-router-{design}-{}.json",
            std::process::id()
        ));
        let router = {
            let (listen, to, json) = (
                listen.clone(),
                sink.local_addr().unwrap().to_string(),
                json.clone(),
            );
            let design = design.to_string();
            std::thread::spawn(move || {
                softtimers(&[
                    "router",
                    "--listen",
                    &listen,
                    "--forward-to",
                    &to,
                    "--design",
                    &design,
                    // Long enough that a flood slow to start on a loaded host still ends
                    // well inside the run.
                    "--duration",
                    "3s",
                    "--json",
                    json.to_str().unwrap(),
                ])
            })
        };
        let reader = std::thread::spawn(move || {
            let mut got = 0;
            let mut buf = [0u8; 64];
            while got < 1000 && sink.recv(&mut buf).is_ok() {
                got += 1;
                sink.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            }
            got
        });
        assert!(
            common::wait_for_port(port, Duration::from_secs(10), || !router.is_finished()),
            "{design}: the router did not bind {listen}"
        );
        let flood = softtimers(&[
            "flood",
            "--to",
            &listen,
            "--rate",
            "2000",
            "--duration",
            "500ms",
        ]);
        assert!(
            flood.status.success(),
            "{}",
            String::from_utf8_lossy(&flood.stderr)
        );
        let got = reader.join().unwrap();
        let out = router.join().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let _ = std::fs::remove_file(&json);
        assert_eq!(report["received"], 1000, "{design}: {report}");
        assert_eq!(got, 1000, "{design}: the sink got {got} of 1000; {report}");
        assert_eq!(report["forwarded"], 1000, "{design}: {report}");
        assert_eq!(report["dropped_in_queue"], 0, "{design}: {report}");
    }
}

/// Garbage, short datagrams and a forged header with the largest sequence number are counted
/// and measured, never a crash.
#[test]
fn the_sink_counts_garbage_and_forged_headers() {
    let rx = pace::bind_sink("127.0.0.1:0".parse().unwrap()).unwrap();
    let to = rx.local_addr().unwrap();
    let mut input = SinkInput::from(rx);
    let options = SinkOptions {
        target: SinkTarget::Listen(to),
        duration: Some(Duration::from_secs(5)),
        idle: Duration::from_millis(300),
        rtt: Duration::from_millis(100),
        bottleneck: None,
        burst_gap: Duration::from_micros(2),
        expected_rate: None,
    };
    let sink = std::thread::spawn(move || pace::sink_on(&mut input, &options).unwrap());
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    for i in 0..5u8 {
        tx.send_to(&[i.wrapping_mul(37); 100], to).unwrap();
    }
    tx.send_to(&[1, 2, 3], to).unwrap();
    let mut forged = [0u8; 64];
    softtimer_net::udp::PacketHeader {
        flow: 0,
        seq: u64::MAX,
        sent_ns: 0,
    }
    .write(&mut forged);
    tx.send_to(&forged, to).unwrap();
    tx.send_to(&forged, to).unwrap(); // the same again: reordered, not a crash
    let got = sink.join().unwrap();
    assert_eq!(got.packets, 8);
    assert_eq!(got.foreign, 6);
    assert_eq!(got.flows, 1);
    assert_eq!((got.truncated, got.kernel_drops), (0, 0));
}
