//! The load generators that drive the server runs: the project's own (HTTP and UDP RPC,
//! from `softtimers-tools`) and `wrk`, pinned to the client CPU.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use softtimers_tools::cpu::{CLIENT_CPU, pin_process, pin_to};
use softtimers_tools::http::run_load_for;
use softtimers_tools::process as tools;
use softtimers_tools::rpc::run_rpc_load;

use super::Workload;

/// Which load generator drives the HTTP workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Client {
    /// The project's own S-client-style generator (no installation needed).
    #[default]
    Own,
    /// `wrk`, as a cross-check of the same server (must be installed).
    Wrk,
}

impl Client {
    /// The name on the command line and in JSON (`own`, `wrk`).
    pub fn name(self) -> &'static str {
        match self {
            Client::Own => "own",
            Client::Wrk => "wrk",
        }
    }
}

/// Runs `wrk` (one thread, 32 connections) against `addr` for `duration` on the client CPU
/// and returns its requests per second and how long it ran.
fn run_wrk(addr: SocketAddr, keep_alive: bool, duration: Duration) -> Result<(f64, Duration)> {
    // Children start at the stock timer slack (see `StockTimerSlack`).
    let _stock_slack = softtimers_tools::cpu::stock_timer_slack();
    let binary = tools::require(tools::WRK, "wrk").context("--client wrk")?;
    let secs = duration.as_secs().max(1);
    let mut cmd = std::process::Command::new(&binary);
    cmd.args(["-t1", "-c32", &format!("-d{secs}s")]);
    if !keep_alive {
        cmd.args(["-H", "Connection: close"]);
    }
    cmd.arg(format!("http://{addr}/6k"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let start = Instant::now();
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", binary.display()))?;
    pin_process(child.id(), CLIENT_CPU);
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rate = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .with_context(|| format!("wrk printed no Requests/sec: {text}"))?;
    if text.contains("Non-2xx or 3xx responses") {
        anyhow::bail!("wrk saw error responses: {text}");
    }
    Ok((rate, start.elapsed()))
}

/// The project's load generator got no valid response in its whole run: the server hung,
/// answered wrongly (`errors`), or was left no time to answer (a timer signal every few µs
/// can take its whole core).
#[derive(Debug, thiserror::Error)]
#[error(
    "the load generator got no 200 response with a {body_len}-byte body from {addr} ({errors} \
     errors)"
)]
pub struct NoResponse {
    /// The server's address.
    pub addr: SocketAddr,
    /// The body length a valid response has.
    pub body_len: usize,
    /// Responses with another status or length, and connections that failed.
    pub errors: u64,
}

/// Runs the load generator `client` for `workload` against `addr` on the client CPU (call
/// on a thread of its own); returns its rate and how long it ran. The project's generator
/// counts only 200s with a body of `body_len` bytes (HTTP workloads).
pub fn run_client(
    addr: SocketAddr,
    workload: Workload,
    client: Client,
    duration: Duration,
    body_len: usize,
) -> Result<(f64, Duration)> {
    let _pin = pin_to(CLIENT_CPU);
    match (workload, client) {
        (Workload::Rpc, _) => {
            let r = run_rpc_load(addr, 32, duration)?;
            Ok((r.rate(), r.elapsed))
        }
        (w, Client::Wrk) => run_wrk(addr, w.keep_alive(), duration),
        (w, Client::Own) => {
            let r = run_load_for(addr, 32, w.keep_alive(), duration, body_len)?;
            if r.responses == 0 {
                return Err(NoResponse {
                    addr,
                    body_len,
                    errors: r.errors,
                }
                .into());
            }
            Ok((r.rate(), r.elapsed))
        }
    }
}

/// Checks that `--client` can run here (wrk installed where asked for).
pub fn check_client(client: Client) -> Result<()> {
    match client {
        Client::Own => Ok(()),
        Client::Wrk => tools::require(tools::WRK, "wrk")
            .map(|_| ())
            .context("--client wrk"),
    }
}
