//! Shared by the binary's integration tests: running the binary, asserting a clear refusal,
//! and the helpers the tools' own tests use (one copy, in `softtimers-tools`).
// Not every test binary that includes this module uses every helper.
#![allow(dead_code)]

use std::process::{Command, Output};

#[path = "../../../softtimers-tools/tests/common/mod.rs"]
pub mod common;

/// Runs the `softtimers` binary with `args`.
pub fn softtimers(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_softtimers"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Runs the `softtimers` binary with `args` on a thread of its own, for a command that
/// serves while the test drives it.
pub fn spawn_softtimers(args: &[&str]) -> std::thread::JoinHandle<Output> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    std::thread::spawn(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        softtimers(&args)
    })
}

/// Runs the `softtimers` binary with `args` on a thread, a command that binds `port`, and
/// waits until it has bound it (10 s at most: a loaded machine starts it slowly).
pub fn spawn_serving(port: u16, args: &[&str]) -> std::thread::JoinHandle<Output> {
    let server = spawn_softtimers(args);
    let timeout = std::time::Duration::from_secs(10);
    assert!(
        common::wait_for_port(port, timeout, || !server.is_finished()),
        "{args:?} did not bind port {port}"
    );
    server
}

/// A loopback port that was free for both UDP and TCP a moment ago. It is picked below the
/// kernel's ephemeral range (32768 and up by default), so that the connections other tests
/// open at the same time cannot take it between this check and the server's bind (a port
/// the kernel handed out for a UDP socket could go to another test's TCP client next).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    // Test binaries run at once: each starts at its own place in the range.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FIRST: u32 = 20_000;
    const COUNT: u32 = 12_000;
    let start = std::process::id().wrapping_mul(7_919) % COUNT;
    for _ in 0..COUNT {
        let step = NEXT.fetch_add(1, Ordering::Relaxed) % COUNT;
        let port = u16::try_from(FIRST + (start + step) % COUNT).expect("below 32,000");
        let udp = std::net::UdpSocket::bind(("127.0.0.1", port));
        let tcp = std::net::TcpListener::bind(("127.0.0.1", port));
        if udp.is_ok() && tcp.is_ok() {
            return port;
        }
    }
    panic!(
        "no loopback port free for both UDP and TCP in {FIRST}..{}",
        FIRST + COUNT
    );
}

/// Runs the binary with each of `cases`, a command line split at whitespace: each must fail
/// with an error, not a panic.
pub fn refused(cases: &[&str]) {
    for line in cases {
        let args: Vec<&str> = line.split_whitespace().collect();
        let out = softtimers(&args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// A scratch directory for one test, named after it and this process, made.
pub fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("softtimers-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Asserts that a run of the binary succeeded, showing its stderr if not.
pub fn succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The JSON a run wrote to `path`, read and the file removed.
pub fn take_json(path: &std::path::Path) -> serde_json::Value {
    let value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let _ = std::fs::remove_file(path);
    value
}
