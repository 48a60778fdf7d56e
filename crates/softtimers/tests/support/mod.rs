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

/// Runs the binary with each of `cases`: each must fail with an error, not a panic.
pub fn refused(cases: &[&[&str]]) {
    for args in cases {
        let out = softtimers(args);
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
