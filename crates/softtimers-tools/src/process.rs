//! External programs the lab and its tests use (curl, wrk, nginx): one lookup, on `PATH`,
//! used everywhere, so that a test and the code it tests agree on whether a tool is there.

use std::path::{Path, PathBuf};

use std::process::Child;

use anyhow::{Result, anyhow, bail};

/// `wrk`, the cross-check load generator (`lab --client wrk`).
pub const WRK: &str = "wrk";
/// `nginx`, the server the HTTP server is compared with (`lab nginx`).
pub const NGINX: &str = "nginx";
/// `curl`, which the HTTP server's tests use as an independent client.
pub const CURL: &str = "curl";

/// The executable `name` in a directory of `PATH`, if there is one.
pub fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// The executable `name`, or an error saying how to install it (Debian package `package`).
pub fn require(name: &str, package: &str) -> Result<PathBuf> {
    find(name)
        .ok_or_else(|| anyhow!("{name} is not installed (not on PATH; apt-get install {package})"))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Kills `child` and reaps it (a run abandoned on an error); errors are moot by then.
pub fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Waits for `child` (a program the lab started, with its stderr piped); an error carrying
/// its stderr if it failed.
pub fn finish(mut child: Child, what: &str) -> Result<()> {
    let status = child.wait()?;
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read as _;
            let _ = e.read_to_string(&mut err);
        }
        bail!("{what} failed ({status}): {}", err.trim());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_is_on_path_and_nothing_else() {
        assert!(find("sh").is_some(), "sh is on every PATH");
        assert!(find("no-such-tool-softtimers").is_none());
        let err = require("no-such-tool-softtimers", "nothing").unwrap_err();
        assert!(format!("{err}").contains("is not installed"), "{err}");
    }
}
