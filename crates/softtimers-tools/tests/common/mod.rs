//! Shared by the integration tests.

use std::path::PathBuf;

/// The external tool `name`, found as the lab finds it (on `PATH`). Where it is missing the
/// test is skipped with a printed reason, except under CI (`CI` set), where a missing tool
/// fails the test: CI installs every tool the tests use.
#[allow(dead_code)] // not every test binary that includes this module uses a tool
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = softtimers_tools::process::find(name);
    if found.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!("{name} is not installed, and CI must test with it (see .ci/run)");
        }
        eprintln!("skipped: {name} is not installed (not on PATH)");
    }
    found
}

/// Waits until a socket in this network namespace has `port` bound, up to `timeout`, while
/// `alive` says the server that should bind it still runs; whether it was bound. A server
/// started in another process is then ready for datagrams, however slowly a loaded machine
/// started it.
#[allow(dead_code)] // not every test binary that includes this module waits for a port
pub fn wait_for_port(
    port: u16,
    timeout: std::time::Duration,
    mut alive: impl FnMut() -> bool,
) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if softtimers_tools::netns::port_bound("/proc/net".as_ref(), port) {
            return true;
        }
        if !alive() || std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// One path at a time: the path tests measure timing, and two emulators and their traffic on
/// two cores would measure each other.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[allow(dead_code)] // not every test binary that includes this module runs paths
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[allow(dead_code)]
pub fn can_run_paths() -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI runs as root: the path emulator tests must run there"
    );
    eprintln!("skipped: the path emulator needs root (network namespaces and TUN devices)");
    false
}
