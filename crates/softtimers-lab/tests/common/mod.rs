//! Shared by the integration tests.

use std::path::PathBuf;

/// The external tool `name`, found as the lab finds it (on `PATH`). Where it is missing the
/// test is skipped with a printed reason, except under CI (`CI` set), where a missing tool
/// fails the test: CI installs every tool the tests use.
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = softtimers_lab::tools::find(name);
    if found.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!("{name} is not installed, and CI must test with it (see .ci/run)");
        }
        eprintln!("skipped: {name} is not installed (not on PATH)");
    }
    found
}
