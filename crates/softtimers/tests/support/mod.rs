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

/// A loopback UDP port that was free a moment ago, picked by binding and releasing it.
pub fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
