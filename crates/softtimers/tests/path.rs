//! `softtimers path` as a command: bad input is refused, the command runs, a failing command's
//! status is reported, and without root it says so.

use std::process::Command;

mod support;

use support::common::{can_run_paths as can_run, serial};
use support::scratch;

#[test]
fn the_path_command_refuses_bad_input_and_runs_a_command() {
    let bin = env!("CARGO_BIN_EXE_softtimers");
    for (args, expect) in [
        (vec!["--delay=-5ms"], "positive"),
        (vec!["--rate", "0"], "rate"),
        (vec!["--queue", "100"], "single packet"),
        (vec!["--reverse-queue", "100"], "single packet"),
        (vec!["--loss", "2"], "between 0 and 1"),
    ] {
        let out = Command::new(bin)
            .arg("path")
            .args(&args)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        // Without root the refusal may be about permissions; with root it is about the value.
        if rustix::process::geteuid().is_root() || !args[0].contains("queue") {
            assert!(err.contains(expect), "{args:?}: {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    }
    let _serial = serial();
    if !can_run() {
        return;
    }
    let out = Command::new(bin)
        .args([
            "path",
            "--delay",
            "1ms",
            "--",
            "sh",
            "-c",
            "test -n \"$SOFTTIMERS_PATH_A\" && exit 3",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the command's failure is reported"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("status 3"), "{err}");

    // A command killed by a signal is said to be (it was "status 128").
    let out = Command::new(bin)
        .args(["path", "--delay", "1ms", "--", "sh", "-c", "kill -9 $$"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("killed by signal 9"), "{err}");
}

/// `SIGTERM` to `path` alone ends its command after a grace period, and the path still
/// reports (the report was lost and the command left running); Ctrl-C at a terminal, which
/// reaches the command too, leaves the command that grace period to finish on its own (a
/// second signal from `path` at once cut off a command's own summary).
#[test]
fn an_interrupted_path_ends_its_command_and_reports() {
    use std::io::BufRead as _;
    use std::os::unix::process::CommandExt as _;
    use std::time::{Duration, Instant};
    let _serial = serial();
    if !can_run() {
        return;
    }
    let dir = scratch("path-terminated");
    // A command that says it is ready, and on SIGINT takes half a second to finish cleanly.
    let command = "trap 'sleep 0.5; echo finished; exit 0' INT; echo ready; \
                   while :; do sleep 0.1; done";
    for (signal, group) in [("TERM", false), ("INT", true)] {
        let json = dir.join(format!("path-{signal}.json"));
        let mut path = Command::new(env!("CARGO_BIN_EXE_softtimers"))
            .args(["path", "--delay", "1ms", "--json"])
            .arg(&json)
            .args(["--", "sh", "-c", command])
            .process_group(0)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(path.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        let target = if group {
            format!("-{}", path.id())
        } else {
            path.id().to_string()
        };
        let signalled = Instant::now();
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), "--", &target])
            .status()
            .unwrap();
        assert!(sent.success());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        let status = path.wait().unwrap();
        let took = signalled.elapsed();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut path.stderr.take().unwrap(), &mut err).unwrap();
        if group {
            // The command's own SIGINT, its clean finish, and no SIGTERM from `path`.
            assert!(rest.contains("finished"), "{signal}: {rest} {err}");
            assert_eq!(status.code(), Some(0), "{signal}: {err}");
        } else {
            // The command heard nothing but `path`'s SIGTERM, after the grace period.
            assert!(
                took >= Duration::from_millis(1900),
                "{signal}: after {took:?}"
            );
            assert_eq!(status.code(), Some(1), "{signal}: {err}");
            assert!(err.contains("killed by signal 15"), "{signal}: {err}");
        }
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert!(report.get("a_to_b").is_some(), "{report}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn without_root_the_path_command_says_so() {
    let bin = env!("CARGO_BIN_EXE_softtimers");
    let out = if rustix::process::geteuid().is_root() {
        // Run a copy as `nobody`, from a directory anyone may enter (the build's may not be).
        let dir = scratch("nonroot");
        let copy = dir.join("softtimers");
        std::fs::copy(bin, &copy).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&copy)
            .args(["path", "--delay", "1ms", "--", "true"])
            .output();
        let _ = std::fs::remove_dir_all(&dir);
        match out {
            Ok(out) => out,
            Err(e) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "setpriv (util-linux) is needed on CI: {e}"
                );
                eprintln!("skipped: no setpriv to drop root with ({e})");
                return;
            }
        }
    } else {
        Command::new(bin)
            .args(["path", "--delay", "1ms", "--", "true"])
            .output()
            .unwrap()
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("need root"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
