//! `softtimers quic`: interoperability between our driver and stock quinn on tokio, and the
//! command's errors.

use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::{common, free_port, succeeded};

const BIN: &str = env!("CARGO_BIN_EXE_softtimers");

/// Starts `softtimers quic server` of `stack` on a free loopback port with `options`, its
/// stderr to `stderr`, and waits until it listens; returns it and its address.
fn start_server(stack: &str, options: &[&str], stderr: Stdio) -> (std::process::Child, String) {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut server = Command::new(BIN)
        .args(["quic", "server", "--listen", &addr, "--stack", stack])
        .args(options)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    if !common::wait_for_port(port, Duration::from_secs(10), || {
        matches!(server.try_wait(), Ok(None))
    }) {
        softtimers_tools::process::kill(&mut server);
        panic!("the {stack} server did not bind {addr}");
    }
    (server, addr)
}

/// [`start_server`] for one connection.
fn serve_one_connection(stack: &str) -> (std::process::Child, String) {
    start_server(stack, &["--connections", "1"], Stdio::inherit())
}

/// `softtimers quic client --to addr --insecure --stack stack`, to add to.
fn quic_client(addr: &str, stack: &str) -> Command {
    let mut client = Command::new(BIN);
    client.args([
        "quic",
        "client",
        "--to",
        addr,
        "--insecure",
        "--stack",
        stack,
    ]);
    client
}

/// Sends the server the terminal's Ctrl-C.
fn interrupt(server: &std::process::Child) {
    let sent = Command::new("kill")
        .args(["-INT", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// Runs a server of `server_stack` for one connection and a client of `client_stack`
/// against it; returns the client's JSON.
fn transfer(server_stack: &str, client_stack: &str) -> serde_json::Value {
    transfer_with(server_stack, client_stack, &[]).0
}

/// [`transfer`] with the server's `options`; returns the client's JSON and the server's.
fn transfer_with(
    server_stack: &str,
    client_stack: &str,
    options: &[&str],
) -> (serde_json::Value, serde_json::Value) {
    let dir = std::env::temp_dir().join(format!(
        "st-quic-{}-{server_stack}-{client_stack}{}",
        std::process::id(),
        options.join("")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let cert = dir.join("cert.der");
    let mut server = Command::new(BIN)
        .args([
            "quic",
            "server",
            "--listen",
            &addr,
            "--stack",
            server_stack,
            "--connections",
            "1",
        ])
        .arg("--cert-out")
        .arg(&cert)
        .args(options)
        .arg("--json")
        .arg(dir.join("server.json"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !cert.exists() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if !common::wait_for_port(port, Duration::from_secs(10), || {
        matches!(server.try_wait(), Ok(None))
    }) {
        softtimers_tools::process::kill(&mut server);
        panic!("the server did not bind {addr}");
    }
    let json = dir.join("client.json");
    let out = Command::new(BIN)
        .args(["quic", "client", "--to", &addr, "--stack", client_stack])
        .args([
            "--download",
            "3M",
            "--upload",
            "100k",
            "--requests",
            "3",
            "--cert",
        ])
        .arg(&cert)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let status = server.wait().unwrap();
    succeeded(&out);
    assert!(status.success());
    let read = |path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    };
    let (client, server) = (read(json), read(dir.join("server.json")));
    let _ = std::fs::remove_dir_all(&dir);
    (client, server)
}

#[test]
fn our_client_and_a_stock_quinn_server_transfer_and_verify_data() {
    let v = transfer("quinn-tokio", "soft");
    assert_eq!(v["report"]["verified"], true);
    assert_eq!(v["report"]["download_bytes"], 9_000_000);
    assert_eq!(v["report"]["upload_bytes"], 300_000);
}

#[test]
fn a_stock_quinn_client_and_our_server_transfer_and_verify_data() {
    for ours in ["soft", "soft-paced"] {
        let v = transfer(ours, "quinn-tokio");
        assert_eq!(v["report"]["verified"], true, "{ours}");
        assert_eq!(v["report"]["download_bytes"], 9_000_000, "{ours}");
    }
}

#[test]
fn unchanged_quinn_on_the_async_runtime_serves_and_fetches_both_ways() {
    for (server, client) in [("quinn-async", "quinn-tokio"), ("soft", "quinn-async")] {
        let v = transfer(server, client);
        assert_eq!(v["report"]["verified"], true, "{server} to {client}");
        assert_eq!(
            v["report"]["download_bytes"], 9_000_000,
            "{server} to {client}"
        );
        assert_eq!(v["stack"], client);
    }
}

#[test]
fn a_server_with_retry_validates_each_clients_address_first() {
    for (server, client) in [("soft", "quinn-tokio"), ("quinn-tokio", "soft")] {
        let (c, s) = transfer_with(server, client, &["--retry"]);
        assert_eq!(c["report"]["verified"], true, "{server} to {client}");
        assert_eq!(s["served"]["connections"], 1, "{server}: {s}");
        assert_eq!(s["retries"], 1, "{server}: {s}");
    }
    // Without it, no Retry, and the report says so by leaving the count out.
    let (_, s) = transfer_with("soft", "soft", &[]);
    assert!(s["retries"].is_null(), "{s}");
    let out = Command::new(BIN)
        .args([
            "quic",
            "server",
            "--listen",
            "127.0.0.1:0",
            "--stack",
            "kernel-tcp",
        ])
        .arg("--retry")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--retry") && err.contains("kernel-tcp"),
        "{err}"
    );
}

#[test]
fn unreachable_servers_and_untrusted_certificates_are_clear_errors() {
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let out = Command::new(BIN)
        .args([
            "quic",
            "client",
            "--to",
            &addr,
            "--download",
            "1k",
            "--insecure",
        ])
        .args(["--connect-timeout", "300ms"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no answer from the server"), "{err}");

    let (mut server, listen) = serve_one_connection("soft");
    let out = Command::new(BIN)
        .args(["quic", "client", "--to", &listen, "--download", "1k"])
        .output()
        .unwrap();
    let _ = server.wait();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--cert FILE or --insecure"), "{err}");

    for bad in [["--download", "-3"], ["--window", "1k"]] {
        let out = Command::new(BIN)
            .args(["quic", "client", "--to", &listen, "--insecure"])
            .args(if bad[0] == "--download" {
                vec![format!("{}={}", bad[0], bad[1])]
            } else {
                vec![
                    "--download".into(),
                    "1k".into(),
                    bad[0].into(),
                    bad[1].into(),
                ]
            })
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{err}");
    }
    // Pacing settings that make no sense are refused with the reason.
    for (bad, says) in [
        (vec!["--per-departure", "0"], "at least 1"),
        (vec!["--per-departure", "2"], "soft-paced only"),
        (vec!["--spin", "2s"], "busy loop"),
        (
            vec!["--spin", "0", "--stack", "quinn-tokio"],
            "soft-timer stacks only",
        ),
        (
            vec!["--no-tail-probe", "--stack", "kernel-tcp"],
            "soft-timer stacks only",
        ),
        (
            vec!["--idle-timeout", "3s", "--stack", "kernel-tcp"],
            "QUIC stacks only",
        ),
        (vec!["--idle-timeout", "1ms"], "out of range"),
        (vec!["--idle-timeout", "100000s"], "out of range"),
    ] {
        let out = Command::new(BIN)
            .args([
                "quic",
                "client",
                "--to",
                &listen,
                "--insecure",
                "--download",
                "1k",
            ])
            .args(&bad)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{bad:?}: {err}");
    }
}

/// quinn's own `perf` client keeps quinn's default 1.25 MB stream window, so the answer to a
/// request whose upload took several datagrams waits for credit with the request read to its
/// end, while quinn-proto still holds a `Readable` event for each of the upload's later STREAM
/// frames. Reading the finished stream again fails, and the server once took that for an abort
/// and dropped the answer, so every such request hung at the window.
#[test]
fn an_answer_larger_than_the_clients_stream_window_completes() {
    use softtimer_quic::tls::{Trust, Tuning, client_config};
    for stack in ["soft", "soft-paced"] {
        let (server, addr) = serve_one_connection(stack);
        // Killed if the test fails before the server has exited by itself.
        let mut server = KillOnDrop(server);
        let tuning = Tuning {
            window: 64 * 1024,
            ..Tuning::default()
        };
        let config = client_config(&Trust::Insecure, &tuning).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let download: u64 = 1_000_000;
        let answered = rt.block_on(async {
            let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
            endpoint.set_default_client_config(config);
            let conn = endpoint
                .connect(addr.parse().unwrap(), "localhost")
                .unwrap()
                .await
                .unwrap();
            let mut answered = Vec::new();
            for _ in 0..3 {
                let (mut send, mut recv) = conn.open_bi().await.unwrap();
                send.write_all(&download.to_be_bytes()).await.unwrap();
                send.write_all(&[42u8; 100_000]).await.unwrap();
                send.finish().unwrap();
                // As quinn's perf does: read the answer once the upload is acknowledged.
                let _ = send.stopped().await;
                let read = tokio::time::timeout(
                    Duration::from_secs(10),
                    recv.read_to_end(2 * download as usize),
                )
                .await;
                answered.push(read.map(|r| r.map(|b| b.len() as u64).ok()));
            }
            conn.close(0u32.into(), b"done");
            endpoint.wait_idle().await;
            answered
        });
        let status = server.0.wait().unwrap();
        for a in &answered {
            assert_eq!(
                *a,
                Ok(Some(download)),
                "{stack}: an answer did not complete: {answered:?}"
            );
        }
        assert!(status.success());
    }
}

/// A child process killed when dropped (a test that fails must not leave its server running).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        softtimers_tools::process::kill(&mut self.0);
    }
}

/// A kernel-TCP server told to stop after two connections, `bad_peer` given its address
/// first, then a good client's download of 100 KB: the server's standard error and its JSON
/// report once it has exited.
fn tcp_server_after(tag: &str, bad_peer: impl FnOnce(&str)) -> (String, serde_json::Value) {
    let dir = std::env::temp_dir().join(format!("st-quic-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("server.json");
    let options = ["--connections", "2", "--json", json.to_str().unwrap()];
    let (mut server, addr) = start_server("kernel-tcp", &options, Stdio::piped());
    bad_peer(&addr);
    let out = Command::new(BIN)
        .args(["quic", "client", "--to", &addr, "--stack", "kernel-tcp"])
        .args(["--download", "100k"])
        .output()
        .unwrap();
    succeeded(&out);
    let status = server.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut server.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    let v = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(dir);
    (stderr, v)
}

/// One peer's bad request ends its own connection, not the kernel-TCP server: a header that
/// asks for 2^64 − 1 bytes and then closes made the server exit with "Broken pipe", losing
/// what it had counted and refusing the next client.
#[test]
fn a_bad_tcp_peer_does_not_take_the_server_down() {
    let (stderr, v) = tcp_server_after("badpeer", |addr| {
        use std::io::Write;
        let mut bad = std::net::TcpStream::connect(addr).unwrap();
        let mut header = [0xffu8; 16];
        header[8..].fill(0);
        bad.write_all(&header).unwrap();
        // Closed before the answer: the server's writes fail.
    });
    assert!(
        stderr.contains("ended"),
        "the bad connection is reported: {stderr}"
    );
    assert_eq!(v["served"]["connections"], 2, "{v}");
    assert!(v["served"]["requests"].as_u64().unwrap() >= 1, "{v}");
}

/// An upload the peer cuts short is a request given up, not one served: the kernel-TCP
/// server answered it and counted it as a request, where the QUIC stacks' server resets it.
#[test]
fn a_tcp_upload_cut_short_is_not_counted_as_a_request() {
    let (stderr, v) = tcp_server_after("cutup", |addr| {
        use std::io::{Read, Write};
        let mut cut = std::net::TcpStream::connect(addr).unwrap();
        let mut header = [0u8; 16];
        header[..8].copy_from_slice(&1_000u64.to_be_bytes());
        header[8..].copy_from_slice(&100_000u64.to_be_bytes());
        cut.write_all(&header).unwrap();
        cut.write_all(&[0u8; 10]).unwrap();
        cut.shutdown(std::net::Shutdown::Write).unwrap();
        // Nothing comes back: the server gives the request up and closes.
        let mut answer = Vec::new();
        let _ = cut.read_to_end(&mut answer);
        assert!(answer.is_empty(), "answered {} bytes", answer.len());
    });
    assert!(
        stderr.contains("an upload cut short after 10 of its 100000 bytes"),
        "{stderr}"
    );
    assert_eq!(v["served"]["connections"], 2, "{v}");
    assert_eq!(v["served"]["requests"], 1, "{v}");
}

/// The kernel-TCP server serves its connections side by side: a client that connects and
/// sends nothing does not hold up the next one (the server used to serve one connection at
/// a time, so the second client waited for the first to leave).
#[test]
fn the_tcp_server_serves_connections_side_by_side() {
    let dir = std::env::temp_dir().join(format!("st-quic-tcp-side-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("server.json");
    let options = ["--connections", "2", "--json", json.to_str().unwrap()];
    let (server, addr) = start_server("kernel-tcp", &options, Stdio::inherit());
    let mut server = KillOnDrop(server);
    let idle = std::net::TcpStream::connect(&addr).unwrap();
    let mut client = Command::new(BIN)
        .args(["quic", "client", "--to", &addr, "--stack", "kernel-tcp"])
        .args(["--download", "100k"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            softtimers_tools::process::kill(&mut client);
            panic!("the second client was still waiting after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = client.wait_with_output().unwrap();
    succeeded(&out);
    // The idle connection's close is the second: the server reports and exits.
    drop(idle);
    assert!(server.0.wait().unwrap().success());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["served"]["connections"], 2, "{v}");
    assert_eq!(v["served"]["requests"], 1, "{v}");
    assert_eq!(v["served"]["bytes_sent"], 100_000, "{v}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A server without `--connections` serves until Ctrl-C: the signal ends the run and the
/// server reports what it served (it used to exit at once, so that mode never reported).
#[test]
fn ctrl_c_ends_a_server_with_its_report() {
    let dir = std::env::temp_dir().join(format!("st-quic-interrupted-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (stack, client_stack) in [
        ("soft", "soft"),
        ("quinn-tokio", "soft"),
        ("kernel-tcp", "kernel-tcp"),
    ] {
        let json = dir.join(format!("{stack}.json"));
        let options = ["--json", json.to_str().unwrap()];
        let (mut server, addr) = start_server(stack, &options, Stdio::null());
        let client = quic_client(&addr, client_stack)
            .args(["--download", "100k"])
            .output()
            .unwrap();
        succeeded(&client);
        interrupt(&server);
        let status = server.wait().unwrap();
        assert!(status.success(), "{stack}: {status}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(v["served"]["connections"], 1, "{stack}: {v}");
        assert_eq!(v["served"]["bytes_sent"], 100_000, "{stack}: {v}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Ctrl-C on a QUIC server closes its connections: a client in the middle of a run hears at
/// once that the server shut down (the soft stacks used to stop without a word, and their
/// clients waited out their 30 s idle timeout, "timed out"), and the server's report counts
/// the packets of the connections it closed.
#[test]
fn ctrl_c_on_a_quic_server_closes_its_connections() {
    let dir = std::env::temp_dir().join(format!("st-quic-close-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for stack in ["soft", "soft-paced", "quinn-tokio"] {
        let json = dir.join(format!("{stack}.json"));
        let options = ["--json", json.to_str().unwrap()];
        let (mut server, addr) = start_server(stack, &options, Stdio::null());
        // Fifty seconds of requests: still running when the server goes.
        let mut client = quic_client(&addr, "soft")
            .args([
                "--requests",
                "1000",
                "--interval",
                "50ms",
                "--download",
                "1k",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Connected and requesting by then (a handshake on loopback takes milliseconds).
        std::thread::sleep(Duration::from_millis(1500));
        interrupt(&server);
        assert!(server.wait().unwrap().success(), "{stack}");
        let start = Instant::now();
        while client.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(20) {
                softtimers_tools::process::kill(&mut client);
                panic!("{stack}: the client was never told the server had gone");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = client.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{stack}: the run should have been cut short"
        );
        assert!(
            stderr.contains("closed by peer: server shutting down (code 0)"),
            "{stack}: {stderr}"
        );
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(v["served"]["connections"], 1, "{stack}: {v}");
        assert!(
            v["served"]["sent_packets"].as_u64().unwrap() > 0,
            "{stack}: {v}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A server told to listen on port 0 says which port it got, so that a client can reach it.
#[test]
fn a_server_on_port_0_says_where_it_listens() {
    use std::io::BufRead;
    for stack in ["soft", "kernel-tcp"] {
        let mut server = Command::new(BIN)
            .args([
                "quic",
                "server",
                "--listen",
                "127.0.0.1:0",
                "--stack",
                stack,
            ])
            .args(["--connections", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(server.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("softtimers quic server: listening on ")
            .unwrap_or_else(|| panic!("{stack}: {line}"))
            .to_string();
        let client = quic_client(&addr, stack)
            .args(["--download", "10k"])
            .output()
            .unwrap();
        succeeded(&client);
        assert!(server.wait().unwrap().success(), "{stack}");
    }
}

/// Ctrl-C ends a kernel-TCP server that waits on a connected client's next request (it
/// waited for ever; a second Ctrl-C lost the report).
#[test]
fn ctrl_c_ends_a_tcp_server_waiting_on_an_idle_client() {
    let dir = std::env::temp_dir().join(format!("st-quic-idle-tcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("server.json");
    let options = ["--json", json.to_str().unwrap()];
    let (mut server, addr) = start_server("kernel-tcp", &options, Stdio::null());
    let idle = std::net::TcpStream::connect(&addr).unwrap();
    // Accepted and waiting on it: the server's stderr says nothing, so give it a moment.
    std::thread::sleep(Duration::from_millis(300));
    interrupt(&server);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = server.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            softtimers_tools::process::kill(&mut server);
            panic!("the server kept waiting on its idle client");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["served"]["connections"], 1, "{v}");
    drop(idle);
    let _ = std::fs::remove_dir_all(dir);
}
