//! The loopback median: each stack's server answering the same stock-quinn client (the
//! `quinn-tokio` stack's) on loopback, 2,000 requests of 10 KB one after another on one
//! connection, server and client pinned to different CPUs. No path, no loss: what is left is
//! each server's own work per request (the response's generation, its writes, its wake-ups,
//! its ACK handling), read against `quinn-plain`, the server a user of quinn writes.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use softtimers_tools::process as tools;
use softtimers_tools::quic::{ClientRun, ServerRun, Stack};

use super::Latency;
use crate::harness::{pin_process, read_json};
use crate::targets::{Goal, TargetCheck};

use super::{
    QuicRow, SERVER_CPU, WAIT_LISTEN, finish_client_and_server, median, nan, per_round_ratios,
};

/// The rows' `workload` (and `scenario`).
pub const LOOPBACK_RR: &str = "loopback-rr-stock-client";

/// The servers it compares, `quinn-plain` (the anchor) first.
pub(super) const LOOPBACK_STACKS: [Stack; 3] = [Stack::QuinnPlain, Stack::Soft, Stack::QuinnTokio];

/// The client's CPU (the server's is the matrix's).
const LOOPBACK_CLIENT_CPU: usize = 0;

const LOOPBACK_PORT: u16 = 4434;

/// Requests per run (quick and full alike: the median of 2,000 is what is watched).
pub(super) const LOOPBACK_REQUESTS: u64 = 2_000;

/// Bytes per response.
const LOOPBACK_BYTES: u64 = 10_240;

/// Seconds one run takes beyond starting and stopping, for the progress estimate: 2,000
/// requests of about 60 µs (measured).
pub(super) const LOOPBACK_RUN_S: f64 = 0.12;

/// One run: `stack`'s server, the stock-quinn client, both on loopback.
pub(super) fn loopback_run(stack: Stack, round: usize, tmp: &Path) -> Result<QuicRow> {
    // Children start at the stock timer slack (see `StockTimerSlack`).
    let _stock_slack = softtimers_tools::cpu::stock_timer_slack();
    let exe = std::env::current_exe().context("finding the softtimers binary")?;
    let server_json = tmp.join("loopback-server.json");
    let client_json = tmp.join("loopback-client.json");
    let _ = std::fs::remove_file(&server_json);
    let _ = std::fs::remove_file(&client_json);
    let listen = format!("127.0.0.1:{LOOPBACK_PORT}");
    // A server whose client's close was lost ends at its idle timeout (quinn-plain keeps
    // quinn's default, and its client's close does not cross a lossy path here).
    let idle: &[&str] = if stack == Stack::QuinnPlain {
        &[]
    } else {
        &["--idle-timeout", "3s"]
    };
    let mut server = std::process::Command::new(&exe)
        .args([
            "quic",
            "server",
            "--listen",
            &listen,
            "--stack",
            stack.name(),
        ])
        .args(["--connections", "1", "--json"])
        .arg(&server_json)
        .args(idle)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the quic server")?;
    pin_process(server.id(), SERVER_CPU);
    if let Err(e) = wait_until_bound(&mut server, LOOPBACK_PORT) {
        tools::kill(&mut server);
        return Err(e);
    }
    let client = std::process::Command::new(&exe)
        .args(["quic", "client", "--to", &listen, "--stack"])
        .arg(Stack::QuinnTokio.name())
        .args(["--insecure", "--idle-timeout", "3s"])
        .arg("--download")
        .arg(LOOPBACK_BYTES.to_string())
        .arg("--requests")
        .arg(LOOPBACK_REQUESTS.to_string())
        .arg("--json")
        .arg(&client_json)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the quic client");
    let (client_result, server_result) =
        finish_client_and_server(client, server, LOOPBACK_CLIENT_CPU)?;
    client_result?;
    server_result?;
    let client: ClientRun = read_json(&client_json)?;
    let server: ServerRun = read_json(&server_json)?;
    Ok(loopback_row(stack, round, &client, &server))
}

/// Waits until the server (a child of this process) has its UDP socket bound on `port`.
fn wait_until_bound(child: &mut std::process::Child, port: u16) -> Result<()> {
    let deadline = Instant::now() + WAIT_LISTEN;
    loop {
        if softtimers_tools::netns::holds_udp_port(child.id(), port) {
            return Ok(());
        }
        if child
            .try_wait()
            .context("waiting for the server")?
            .is_some()
        {
            bail!(
                "the quic server exited before it listened on port {port} (is another process bound to it?)"
            );
        }
        if Instant::now() >= deadline {
            bail!("the quic server was not listening on UDP port {port} after {WAIT_LISTEN:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn loopback_row(stack: Stack, round: usize, client: &ClientRun, server: &ServerRun) -> QuicRow {
    let r = &client.report;
    let bytes = (r.download_bytes + r.upload_bytes) as f64;
    let per_mb = |ns: f64| {
        if bytes > 0.0 {
            ns / (bytes / 1e6)
        } else {
            nan()
        }
    };
    let side = server.driver.as_ref();
    QuicRow {
        stack: stack.name().into(),
        scenario: LOOPBACK_RR.into(),
        workload: Some(LOOPBACK_RR.into()),
        round,
        goodput_bps: r.goodput_bps,
        bottleneck_drops: 0,
        bottleneck_drops_second_half: nan(),
        sender_lost_packets: server.served.lost_packets.map_or(nan(), |n| n as f64),
        data_share: nan(),
        interarrival_stddev_us: nan(),
        sender_gap_stddev_us: nan(),
        queue_delay_p99_us: nan(),
        cpu_ns_per_mb: per_mb((server.cpu_ns + client.cpu_ns) as f64),
        server_cpu_ns_per_mb: per_mb(server.cpu_ns as f64),
        client_cpu_ns_per_mb: per_mb(client.cpu_ns as f64),
        latency: Latency::of(r),
        burstiness_index: nan(),
        server_timeouts: side.map_or(nan(), |d| d.timeouts as f64),
        server_timer_late_p50_us: side.map_or(nan(), |d| d.timer_late_p50_us),
        server_timer_late_p99_us: side.map_or(nan(), |d| d.timer_late_p99_us),
        server_timer_late_hist: Vec::new(),
        server_causes: side.and_then(|d| d.causes),
        idle_spin_ns_per_mb: nan(),
        spin_window_us: side.and_then(|d| d.spin_window_us).unwrap_or(nan()),
        server_send_calls: side.and_then(|d| d.send_calls).map_or(nan(), |n| n as f64),
        variant: None,
        timeline: Vec::new(),
        latencies_us: Vec::new(),
    }
}

/// The loopback median's targets: each server's p50 over quinn-plain's, per round.
pub(super) fn loopback_targets(rows: &[QuicRow]) -> Vec<TargetCheck> {
    [("soft", 1.0, "≤ 1.0"), ("quinn-tokio", 1.1, "≤ 1.1")]
        .into_iter()
        .map(|(stack, bound, goal)| {
            let m = median(per_round_ratios(
                rows,
                |r| r.round,
                |r| r.scenario == LOOPBACK_RR && r.stack == stack,
                |r| r.scenario == LOOPBACK_RR && r.stack == "quinn-plain",
                |r| r.latency.p50_us,
            ));
            let name = format!(
                "loopback request/response p50, 2,000 × 10 KB, stock-quinn client: \
                 {stack} / quinn-plain server"
            );
            let goal = Goal::at_most(bound, goal);
            TargetCheck::new(name, goal, m, crate::paper::ANCHOR_STOCK_QUINN)
        })
        .collect()
}
