//! `softtimers pace`, `sink`, `flood` and `router` as commands: bad input is a clear error,
//! the JSON the lab reads is written, `sink --observe` measures another program's port, and
//! the router forwards every datagram.

use std::time::Duration;

mod support;

use support::{
    free_port, refused, scratch, softtimers, spawn_serving, spawn_softtimers, succeeded, take_json,
};

use softtimers_tools::pace::{self, PaceOptions, PaceTimer};

#[test]
fn bad_input_is_a_clear_error() {
    let cases = [
        "pace --to 127.0.0.1:9 --rate 0",
        "pace --to 127.0.0.1:9 --rate 1M --spin-window 5s",
        "pace --to 127.0.0.1:9 --rate -5M",
        "pace --to 127.0.0.1:9 --rate fast",
        "pace --to 127.0.0.1:9 --rate 5000T",
        "pace --to 127.0.0.1:9 --rate 1M --size 70000",
        "pace --to 127.0.0.1:9 --rate 1M --size 10",
        "pace --to not-an-address --rate 1M",
        "sink --listen 127.0.0.1:9 --duration soon",
        "sink --duration 1s",
        "sink --listen 127.0.0.1:9 --observe 9",
        "sink --observe 9 --interface no-such-if0",
        "sink --listen 127.0.0.1:0 --duration 0s",
        "sink --listen 127.0.0.1:0 --idle 0s",
        "sink --listen 127.0.0.1:0 --idle 7200s",
        "sink --listen 127.0.0.1:0 --gso-segment 5",
        "sink --listen 127.0.0.1:0 --interface eth0",
        "compute --duration 0s",
        "quic server --listen 127.0.0.1:0 --connections 0",
        "quic client --to 127.0.0.1:9 --connect-timeout 0s",
        "quic client --to 127.0.0.1:9 --download 1k --stack quinn-tokio --io uring",
    ];
    refused(&cases);
}

/// A run too short for a second datagram says so instead of printing "NaN Mbit/s".
#[test]
fn a_run_shorter_than_one_interval_says_so() {
    let closed = format!("127.0.0.1:{}", free_port());
    let out = softtimers(&[
        "pace",
        "--to",
        &closed,
        "--rate",
        "5k",
        "--duration",
        "100ms",
    ]);
    succeeded(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("NaN"), "{text}");
    assert!(text.contains("fewer than two datagrams"), "{text}");
}

/// Runs the command `server` (`--listen` a free loopback port, then `server_options`) and,
/// once it has bound the port, the command `client` (`--to` that port, then
/// `client_options`); both must succeed.
fn serve_and_send(server: &str, server_options: &[&str], client: &str, client_options: &[&str]) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let server = spawn_serving(
        port,
        &[&[server, "--listen", &listen], server_options].concat(),
    );
    succeeded(&softtimers(
        &[&[client, "--to", &listen], client_options].concat(),
    ));
    succeeded(&server.join().unwrap());
}

/// The JSON `what` wrote to `path` (the file removed), which must have each of `keys`.
fn json_with(what: &str, path: &std::path::Path, keys: &[&str]) -> serde_json::Value {
    let json = take_json(path);
    for key in keys {
        assert!(json.get(key).is_some(), "{what} JSON lacks {key}: {json}");
    }
    json
}

#[test]
fn pace_and_sink_write_the_json_the_checks_read() {
    let dir = scratch("pace");
    let sink_json = dir.join("sink.json");
    let pace_json = dir.join("pace.json");
    serve_and_send(
        "sink",
        &["--duration", "3s", "--json", sink_json.to_str().unwrap()],
        "pace",
        &[
            "--rate",
            "20M",
            "--duration",
            "500ms",
            "--json",
            pace_json.to_str().unwrap(),
        ],
    );
    let p = json_with(
        "pace",
        &pace_json,
        &[
            "target_bps",
            "achieved_bps",
            "conformance_pct",
            "packets",
            "cpu_ns_per_packet",
            "timer",
        ],
    );
    let s = json_with(
        "sink",
        &sink_json,
        &[
            "packets",
            "rate_bps",
            "interarrival_mean_us",
            "interarrival_stddev_us",
            "longest_burst",
            "burstiness_index",
        ],
    );
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
    let sink = spawn_softtimers(&[
        "sink",
        "--observe",
        &to.port().to_string(),
        "--duration",
        "5s",
        "--idle",
        "300ms",
        "--json",
        json.to_str().unwrap(),
    ]);
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
        size: 1000,
        duration: Duration::from_millis(500),
        timer: PaceTimer::Soft,
        spin_window: softtimer_rt::SpinWindow::Calibrated,
        ..PaceOptions::new(to, "20M".parse().unwrap())
    })
    .unwrap();
    let out = sink.join().unwrap();
    succeeded(&out);
    let got = take_json(&json);
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
    let cases = [
        "flood --to 127.0.0.1:9 --rate 0",
        "flood --to 127.0.0.1:9 --rate 1000000000",
        "flood --to 127.0.0.1:9 --rate 1000 --size 0",
        "router --listen 127.0.0.1:0 --forward-to 127.0.0.1:9 --quota 0",
        "router --listen 127.0.0.1:0 --forward-to 127.0.0.1:9 --cpu-budget 0",
        "router --listen 127.0.0.1:0 --forward-to 127.0.0.1:9 --cpu-budget 101",
        "router --listen 127.0.0.1:0 --forward-to nowhere --duration 1s",
    ];
    refused(&cases);
    // Refused for what they are, before the router's socket is bound; a listener on every
    // address loops through another of the host's own addresses too (the one its route out
    // uses, where it has one).
    let port = free_port();
    let own = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("198.51.100.1:9").and_then(|()| s.local_addr()))
        .map(|a| a.ip().to_string());
    let mut pairs = vec![
        ("127.0.0.1", "127.0.0.1".to_string()),
        ("0.0.0.0", "127.0.0.1".into()),
    ];
    let route_out = match own {
        Ok(own) => {
            pairs.push(("0.0.0.0", own));
            true
        }
        Err(e) => {
            eprintln!("no route out ({e}): the own-address and other-host cases are not run");
            false
        }
    };
    for (listen, to) in pairs {
        let out = softtimers(&[
            "router",
            "--listen",
            &format!("{listen}:{port}"),
            "--forward-to",
            &format!("{to}:{port}"),
            "--duration",
            "1s",
        ]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("reaches the router itself"), "{listen}: {err}");
    }
    // Another host on the same port is a next hop, not a loop (the documentation range:
    // nothing answers, nothing comes back).
    if !route_out {
        return;
    }
    let out = softtimers(&[
        "router",
        "--listen",
        &format!("0.0.0.0:{port}"),
        "--forward-to",
        &format!("198.51.100.1:{port}"),
        "--duration",
        "100ms",
    ]);
    succeeded(&out);
}

/// Sends the kernel refuses are counted and said why, by every sender, and a router's
/// counts add up when its next hop refuses: pace to a port nothing listens on said nothing
/// wrong but a halved rate, flood blamed its own speed, and the router's baseline lost them.
#[test]
fn refused_sends_are_counted_and_explained() {
    let closed = format!("127.0.0.1:{}", free_port());
    let dir = scratch("refused");
    let json = dir.join("pace.json");
    let out = softtimers(&[
        "pace",
        "--to",
        &closed,
        "--rate",
        "5M",
        "--duration",
        "200ms",
        "--json",
        json.to_str().unwrap(),
    ]);
    succeeded(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Connection refused"), "{text}");
    let report = take_json(&json);
    assert!(report["send_errors"].as_u64().unwrap() > 0, "{report}");
    assert!(
        report["last_send_error"]
            .as_str()
            .unwrap()
            .contains("refused"),
        "{report}"
    );

    let out = softtimers(&[
        "flood",
        "--to",
        &closed,
        "--rate",
        "1000",
        "--duration",
        "200ms",
    ]);
    succeeded(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("refused by the kernel (the last: Connection refused"),
        "{text}"
    );
    assert!(!text.contains("as fast as this sender goes"), "{text}");

    for design in ["polling", "baseline"] {
        if design == "baseline" && !rustix::process::geteuid().is_root() {
            continue; // its receive thread needs SCHED_FIFO
        }
        let json = dir.join(format!("router-{design}.json"));
        serve_and_send(
            "router",
            &[
                "--forward-to",
                &closed,
                "--design",
                design,
                "--duration",
                "2s",
                "--json",
                json.to_str().unwrap(),
            ],
            "flood",
            &["--rate", "1000", "--duration", "300ms"],
        );
        let r = take_json(&json);
        let count = |k: &str| r[k].as_u64().unwrap();
        assert!(count("send_errors") > 0, "{design}: {r}");
        assert_eq!(
            count("received"),
            count("forwarded")
                + count("dropped_in_queue")
                + count("send_errors")
                + count("too_long"),
            "{design}: {r}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
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
        let json = std::env::temp_dir().join(format!(
            "softtimers-router-{design}-{}.json",
            std::process::id()
        ));
        let to = sink.local_addr().unwrap().to_string();
        let reader = std::thread::spawn(move || {
            let mut got = 0;
            let mut buf = [0u8; 64];
            while got < 1000 && sink.recv(&mut buf).is_ok() {
                got += 1;
                sink.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            }
            got
        });
        // The router runs long enough that a flood slow to start on a loaded host still ends
        // well inside the run.
        serve_and_send(
            "router",
            &[
                "--forward-to",
                &to,
                "--design",
                design,
                "--duration",
                "3s",
                "--json",
                json.to_str().unwrap(),
            ],
            "flood",
            &["--rate", "2000", "--duration", "500ms"],
        );
        let got = reader.join().unwrap();
        let report = take_json(&json);
        assert_eq!(report["received"], 1000, "{design}: {report}");
        assert_eq!(got, 1000, "{design}: the sink got {got} of 1000; {report}");
        assert_eq!(report["forwarded"], 1000, "{design}: {report}");
        assert_eq!(report["dropped_in_queue"], 0, "{design}: {report}");
    }
}

/// Ctrl-C ends a sink that would wait for more, and it still prints and writes what it
/// measured (it used to exit at once, losing the run); a second Ctrl-C quits at once.
#[test]
fn ctrl_c_ends_a_sink_with_its_report() {
    use std::process::{Command, Stdio};
    let dir = scratch("sink-interrupted");
    let json = dir.join("sink.json");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let sink = Command::new(env!("CARGO_BIN_EXE_softtimers"))
        .args(["sink", "--listen", &listen, "--idle", "60s", "--json"])
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(support::common::wait_for_port(
        port,
        Duration::from_secs(10),
        || true
    ));
    succeeded(&softtimers(&[
        "pace",
        "--to",
        &listen,
        "--rate",
        "5M",
        "--duration",
        "100ms",
    ]));
    let interrupt = |pid: u32| {
        let sent = Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    };
    interrupt(sink.id());
    let out = sink.wait_with_output().unwrap();
    succeeded(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(" datagrams, "), "{text}");
    let report = json_with("sink", &json, &["packets"]);
    assert!(report["packets"].as_u64().unwrap() >= 40, "{report}");

    // A program that cannot stop early (here pace, for 60 s) ends at the first signal.
    let pace = Command::new(env!("CARGO_BIN_EXE_softtimers"))
        .args(["pace", "--to", &listen, "--rate", "1M", "--duration", "60s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once its handler is in place (before it, SIGINT's default would end it, not the handler).
    let catches_sigint = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", pace.id())).unwrap();
        let caught = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .unwrap_or(0);
        caught & (1 << (2 - 1)) != 0
    };
    let start = std::time::Instant::now();
    while !catches_sigint() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "pace never caught SIGINT"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    interrupt(pace.id());
    let out = pace.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let _ = std::fs::remove_dir_all(dir);
}
