//! QUIC on soft timers against stock quinn on tokio and the kernel's TCP, through the path
//! emulator: bulk transfers behind a bottleneck (`quic`), response time after idle with
//! slow-start restart against rate-based clocking (E14, the TCP paper's Tables X–XI), and
//! request/response under random loss with the recovery timers each runtime took (E16).
//!
//! Every run makes a fresh path (namespaces `a` and `b`, the emulator pinned to CPU 0), runs
//! `softtimers quic server` in `b` (pinned to CPU 1) and `softtimers quic client` in `a`
//! (CPU 0), each writing its JSON, and reads back the emulator's own record.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use softtimer_net::path::{LinkConfig, QueueLimit};

use crate::harness::{ExpOptions, pin_process, read_json};
use crate::path::{ADDR_B, PathReport, PathSpec, RunningPath, Side};
use crate::plot::{LineChart, Series, line_chart};
use crate::quic::Stack;
use crate::report::{Rendered, Section};
use crate::targets::{TargetCheck, targets_table};
use crate::tools;

const EMULATOR_CPU: usize = 0;
const SERVER_CPU: usize = 1;
const CLIENT_CPU: usize = 0;

/// One transfer through the emulated path.
#[derive(Clone, Debug)]
struct Run<'a> {
    stack: Stack,
    spec: PathSpec,
    server_args: Vec<&'a str>,
    client_args: Vec<String>,
}

/// What one run measured, from the three JSON files.
struct Measured {
    client: serde_json::Value,
    server: serde_json::Value,
    path: PathReport,
}

fn f(v: &serde_json::Value, path: &[&str]) -> f64 {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_f64().unwrap_or(f64::NAN)
}

fn run_once(run: &Run<'_>, tmp: &Path) -> Result<Measured> {
    let exe = std::env::current_exe().context("finding the softtimers binary")?;
    let path = RunningPath::start("q", run.spec, Some(EMULATOR_CPU))?;
    let server_json = tmp.join("server.json");
    let client_json = tmp.join("client.json");
    let _ = std::fs::remove_file(&server_json);
    let _ = std::fs::remove_file(&client_json);
    let listen = format!("{ADDR_B}:4433");
    let stack = run.stack.name();
    let mut server = path
        .command(Side::B, &exe)
        .args(["quic", "server", "--listen", &listen, "--stack", stack])
        .args(["--connections", "1", "--json"])
        .arg(&server_json)
        .args(&run.server_args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the quic server")?;
    pin_process(server.id(), SERVER_CPU);
    std::thread::sleep(Duration::from_millis(300));
    let client = path
        .command(Side::A, &exe)
        .args([
            "quic",
            "client",
            "--to",
            &listen,
            "--stack",
            stack,
            "--insecure",
        ])
        .arg("--json")
        .arg(&client_json)
        .args(&run.client_args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the quic client")?;
    pin_process(client.id(), CLIENT_CPU);
    let client_result = tools::finish(client, "the quic client");
    if client_result.is_err() {
        let _ = server.kill();
    }
    let server_result = tools::finish(server, "the quic server");
    let report = path.finish()?;
    client_result?;
    server_result?;
    Ok(Measured {
        client: read_json(&client_json)?,
        server: read_json(&server_json)?,
        path: report,
    })
}

fn link(delay: Duration, rate: Option<&str>, queue: QueueLimit, loss: f64) -> LinkConfig {
    LinkConfig {
        delay,
        rate: rate.map(|r| r.parse().expect("a valid rate")),
        queue,
        loss,
    }
}

/// Why the QUIC steps cannot run here, if they cannot.
fn cannot_run() -> Option<String> {
    crate::netns::Namespaces::check()
        .err()
        .map(|e| e.to_string())
}

/// The median of the finite values (NaN for none).
fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    crate::summary::median(&v)
}

// ---------------------------------------------------------------------------------------
// quic: bulk and request/response

/// A row of `quic.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QuicRow {
    /// `quinn-tokio`, `soft`, `soft-paced` or `kernel-tcp`.
    pub stack: String,
    /// The scenario, e.g. `bulk-50M-20ms-0.25bdp` or `rr-200us-1%`.
    pub scenario: String,
    /// Round (rounds interleave the stacks).
    pub round: usize,
    /// Download goodput, bit/s.
    #[serde(deserialize_with = "crate::summary::num")]
    pub goodput_bps: f64,
    /// Packets dropped at the bottleneck queue (the emulator's count, data direction).
    pub bottleneck_drops: u64,
    /// Packets the sender declared lost (QUIC stacks; `null` for TCP).
    #[serde(deserialize_with = "crate::summary::num")]
    pub sender_lost_packets: f64,
    /// Inter-arrival stddev at the receiver, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub interarrival_stddev_us: f64,
    /// The sender's departure-gap stddev (before the bottleneck), µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub sender_gap_stddev_us: f64,
    /// Queueing delay at the bottleneck, p99, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub queue_delay_p99_us: f64,
    /// CPU time of both sides per megabyte moved, ns.
    #[serde(deserialize_with = "crate::summary::num")]
    pub cpu_ns_per_mb: f64,
    /// Request latency p50, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p50_us: f64,
    /// p99.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p99_us: f64,
    /// p99.9.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p999_us: f64,
    /// Over time (bulk): (s, queue delay ms, Mbit/s).
    pub timeline: Vec<(f64, f64, f64)>,
}

/// `quic.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QuicResult {
    /// `quick` or `full`.
    pub mode: String,
    /// Why it did not run here, if it did not.
    #[serde(default)]
    pub skipped: Option<String>,
    /// One row per stack, scenario and round.
    pub rows: Vec<QuicRow>,
    /// The targets.
    pub targets: Vec<TargetCheck>,
}

struct Bulk {
    name: &'static str,
    rate: &'static str,
    rate_bps: f64,
    rtt: Duration,
    bdp_fraction: f64,
}

fn bulks(quick: bool) -> Vec<Bulk> {
    let mut v = vec![Bulk {
        name: "bulk-50M-20ms-0.25bdp",
        rate: "50M",
        rate_bps: 50e6,
        rtt: Duration::from_millis(20),
        bdp_fraction: 0.25,
    }];
    if !quick {
        v.push(Bulk {
            name: "bulk-50M-20ms-1bdp",
            rate: "50M",
            rate_bps: 50e6,
            rtt: Duration::from_millis(20),
            bdp_fraction: 1.0,
        });
        v.push(Bulk {
            name: "bulk-500M-1ms-1bdp",
            rate: "500M",
            rate_bps: 500e6,
            rtt: Duration::from_millis(1),
            bdp_fraction: 1.0,
        });
    }
    v
}

const BULK_STACKS: [Stack; 4] = [
    Stack::QuinnTokio,
    Stack::Soft,
    Stack::SoftPaced,
    Stack::KernelTcp,
];
const RR: &str = "rr-200us-1%";

fn rounds(quick: bool) -> usize {
    if quick { 1 } else { 3 }
}

fn bulk_bytes(b: &Bulk, quick: bool) -> u64 {
    // About 2 s (quick: 0.6 s) at the bottleneck rate.
    (b.rate_bps / 8.0 * if quick { 0.6 } else { 2.0 }) as u64
}

fn rr_requests(quick: bool) -> u64 {
    if quick { 300 } else { 2000 }
}

fn rr_spec() -> PathSpec {
    let l = link(
        Duration::from_micros(100),
        None,
        QueueLimit::Packets(1000),
        0.01,
    );
    PathSpec {
        a_to_b: l,
        b_to_a: l,
    }
}

fn rr_args(quick: bool) -> Vec<String> {
    vec![
        "--download".into(),
        "10000".into(),
        "--upload".into(),
        "1000".into(),
        "--requests".into(),
        rr_requests(quick).to_string(),
    ]
}

/// Runs `quic` (bulk and request/response).
pub fn quic(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<QuicResult> {
    let quick = options.length.quick;
    let mode = if quick { "quick" } else { "full" }.to_string();
    if let Some(why) = cannot_run() {
        return Ok(QuicResult {
            mode,
            skipped: Some(why),
            rows: vec![],
            targets: vec![],
        });
    }
    let tmp = options.out.join("quic-tmp");
    std::fs::create_dir_all(&tmp)?;
    let bulks = bulks(quick);
    let rr_stacks = [Stack::QuinnTokio, Stack::Soft, Stack::SoftPaced];
    let total = (rounds(quick) * (bulks.len() * BULK_STACKS.len() + rr_stacks.len())) as f64;
    let mut done = 0.0;
    let mut rows = Vec::new();
    for round in 0..rounds(quick) {
        for b in &bulks {
            let bdp = b.rate_bps / 8.0 * b.rtt.as_secs_f64();
            let queue = QueueLimit::Bytes(((bdp * b.bdp_fraction) as u64).max(3000));
            let data = link(b.rtt / 2, Some(b.rate), queue, 0.0);
            let acks = link(b.rtt / 2, None, QueueLimit::Packets(10_000), 0.0);
            // Rotate the order each round: interleaved, not one stack always first.
            for i in 0..BULK_STACKS.len() {
                let stack = BULK_STACKS[(i + round) % BULK_STACKS.len()];
                progress(done / total, &format!("{} {}", b.name, stack.name()));
                let run = Run {
                    stack,
                    spec: PathSpec {
                        a_to_b: acks,
                        b_to_a: data,
                    },
                    server_args: vec![],
                    client_args: vec!["--download".into(), bulk_bytes(b, quick).to_string()],
                };
                let m = run_once(&run, &tmp)?;
                rows.push(row(stack, b.name, round, &m));
                done += 1.0;
            }
        }
        for i in 0..rr_stacks.len() {
            let stack = rr_stacks[(i + round) % rr_stacks.len()];
            progress(done / total, &format!("{RR} {}", stack.name()));
            let run = Run {
                stack,
                spec: rr_spec(),
                server_args: vec![],
                client_args: rr_args(quick),
            };
            let m = run_once(&run, &tmp)?;
            rows.push(row(stack, RR, round, &m));
            done += 1.0;
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let targets = quic_targets(&rows);
    Ok(QuicResult {
        mode,
        skipped: None,
        rows,
        targets,
    })
}

fn row(stack: Stack, scenario: &str, round: usize, m: &Measured) -> QuicRow {
    let data = &m.path.b_to_a;
    let cpu = f(&m.client, &["cpu_ns"]) + f(&m.server, &["cpu_ns"]);
    let bytes =
        f(&m.client, &["report", "download_bytes"]) + f(&m.client, &["report", "upload_bytes"]);
    QuicRow {
        stack: stack.name().into(),
        scenario: scenario.into(),
        round,
        goodput_bps: f(&m.client, &["report", "goodput_bps"]),
        bottleneck_drops: data.queue_drops,
        sender_lost_packets: f(&m.server, &["served", "lost_packets"]),
        interarrival_stddev_us: data.interarrival_stddev_us.unwrap_or(f64::NAN),
        sender_gap_stddev_us: data.sender_gap_stddev_us.unwrap_or(f64::NAN),
        queue_delay_p99_us: data.queue_delay_p99_us.unwrap_or(f64::NAN),
        cpu_ns_per_mb: if bytes > 0.0 {
            cpu / (bytes / 1e6)
        } else {
            f64::NAN
        },
        p50_us: f(&m.client, &["report", "p50_us"]),
        p99_us: f(&m.client, &["report", "p99_us"]),
        p999_us: f(&m.client, &["report", "p999_us"]),
        timeline: data.timeline.clone(),
    }
}

/// Per round, `stack`'s value of `field` over quinn-tokio's, in one scenario.
fn ratios(rows: &[QuicRow], scenario: &str, stack: &str, field: fn(&QuicRow) -> f64) -> Vec<f64> {
    let mut out = Vec::new();
    for r in rows
        .iter()
        .filter(|r| r.scenario == scenario && r.stack == stack)
    {
        if let Some(base) = rows
            .iter()
            .find(|b| b.scenario == scenario && b.stack == "quinn-tokio" && b.round == r.round)
        {
            out.push(field(r) / field(base));
        }
    }
    out
}

fn quic_targets(rows: &[QuicRow]) -> Vec<TargetCheck> {
    let s = "bulk-50M-20ms-0.25bdp";
    let mut t = Vec::new();
    let drops = ratios(rows, s, "soft-paced", |r| r.bottleneck_drops as f64);
    let m = median(drops);
    t.push(TargetCheck::new(
        "bulk 50 Mbit/s, RTT 20 ms, queue 0.25 BDP: bottleneck drops, soft-paced / quinn-tokio (median)",
        "≤ 0.1",
        m,
        m <= 0.1,
    ));
    let g = median(ratios(rows, s, "soft-paced", |r| r.goodput_bps));
    t.push(TargetCheck::new(
        "same: goodput, soft-paced / quinn-tokio",
        "≥ 1.0",
        g,
        g >= 1.0,
    ));
    let abs = median(
        rows.iter()
            .filter(|r| r.scenario == s && r.stack == "soft-paced")
            .map(|r| r.goodput_bps / 50e6)
            .collect(),
    );
    t.push(TargetCheck::new(
        "same: soft-paced goodput / bottleneck rate",
        "≥ 0.95",
        abs,
        abs >= 0.95,
    ));
    let sd = median(ratios(rows, s, "soft-paced", |r| r.interarrival_stddev_us));
    t.push(TargetCheck::new(
        "same: receiver inter-arrival stddev, soft-paced / quinn-tokio",
        "≤ 0.1",
        sd,
        sd <= 0.1,
    ));
    for stack in ["soft", "soft-paced"] {
        let c = median(ratios(rows, s, stack, |r| r.cpu_ns_per_mb));
        t.push(TargetCheck::new(
            format!("same: CPU per MB, {stack} / quinn-tokio"),
            "≤ 1.0",
            c,
            c <= 1.0,
        ));
    }
    let p = median(ratios(rows, RR, "soft", |r| r.p99_us));
    t.push(TargetCheck::new(
        "request/response p99, 1 % loss, RTT 200 µs: soft / quinn-tokio",
        "≤ 0.5",
        p,
        p <= 0.5,
    ));
    t
}

fn num(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        "-".into()
    }
}

impl Section for QuicResult {
    const FILE: &'static str = "quic.json";
    fn render(&self, dir: &Path) -> Result<Rendered> {
        let mut md = String::from("## QUIC on soft timers against stock quinn and kernel TCP\n\n");
        if let Some(why) = &self.skipped {
            let _ = writeln!(md, "Not run here: {why}.");
            return Ok(Rendered::text(md));
        }
        md += "Through the path emulator (`softtimers path`; data from `b` to `a`, the bottleneck and its drop-tail queue on the data direction). Medians over rounds, with [min, max].\n\n";
        md += "| scenario | stack | goodput (Mbit/s) | bottleneck drops | sender-declared losses | receiver inter-arrival stddev (µs) | sender gap stddev (µs) | queue delay p99 (µs) | CPU per MB (µs) | p50 (µs) | p99 (µs) |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        let mut keys: Vec<(String, String)> = Vec::new();
        for r in &self.rows {
            let k = (r.scenario.clone(), r.stack.clone());
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        for (scenario, stack) in &keys {
            let rs: Vec<&QuicRow> = self
                .rows
                .iter()
                .filter(|r| &r.scenario == scenario && &r.stack == stack)
                .collect();
            let col = |g: fn(&QuicRow) -> f64, scale: f64, d: usize| {
                let v: Vec<f64> = rs.iter().map(|r| g(r) / scale).collect();
                let (lo, hi) = crate::summary::range(&v);
                if rs.len() > 1 {
                    format!("{} [{}, {}]", num(median(v), d), num(lo, d), num(hi, d))
                } else {
                    num(median(v), d)
                }
            };
            let _ = writeln!(
                md,
                "| {scenario} | {stack} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                col(|r| r.goodput_bps, 1e6, 1),
                col(|r| r.bottleneck_drops as f64, 1.0, 0),
                col(|r| r.sender_lost_packets, 1.0, 0),
                col(|r| r.interarrival_stddev_us, 1.0, 1),
                col(|r| r.sender_gap_stddev_us, 1.0, 1),
                col(|r| r.queue_delay_p99_us, 1.0, 0),
                col(|r| r.cpu_ns_per_mb, 1e3, 0),
                col(|r| r.p50_us, 1.0, 0),
                col(|r| r.p99_us, 1.0, 0),
            );
        }
        let mut plots = Vec::new();
        for (file, title, y_label, pick) in [
            (
                "quic_queue_delay.png",
                "Queueing delay at the bottleneck (bulk, 50 Mbit/s, 0.25 BDP, round 0)",
                "largest queueing delay per 50 ms (ms)",
                1usize,
            ),
            (
                "quic_goodput.png",
                "Delivered rate over time (bulk, 50 Mbit/s, 0.25 BDP, round 0)",
                "Mbit/s per 50 ms",
                2usize,
            ),
        ] {
            let series: Vec<Series> = self
                .rows
                .iter()
                .filter(|r| r.scenario == "bulk-50M-20ms-0.25bdp" && r.round == 0)
                .map(|r| Series {
                    label: r.stack.clone(),
                    points: r
                        .timeline
                        .iter()
                        .map(|p| (p.0, if pick == 1 { p.1 } else { p.2 }))
                        .collect(),
                })
                .collect();
            let x_max = series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.0))
                .fold(0.1, f64::max);
            let y_max = series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.1))
                .fold(0.1, f64::max);
            line_chart(
                &dir.join(file),
                &LineChart {
                    title,
                    x_label: "time (s)",
                    y_label,
                    x_range: (0.0, x_max),
                    y_range: (0.0, y_max * 1.1),
                    series,
                },
            )?;
            let _ = writeln!(md, "\n![{title}]({file})");
            plots.push(file.to_string());
        }
        md += "\n";
        md += &targets_table(&self.targets);
        Ok(Rendered {
            markdown: md,
            plots,
        })
    }
}

// ---------------------------------------------------------------------------------------
// E14: response time after idle

/// A row of `e14.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E14Row {
    /// `slow-start` (soft-paced, slow-start restart), `rate-based` (soft-paced, rate-based
    /// clocking after idle) or `kernel-tcp` (Linux, `tcp_slow_start_after_idle`).
    pub arm: String,
    /// Transfer size, packets of 1200 bytes.
    pub packets: u64,
    /// Response time, ms.
    #[serde(deserialize_with = "crate::summary::num")]
    pub response_ms: f64,
}

/// `e14.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E14 {
    /// `quick` or `full`.
    pub mode: String,
    /// Why it did not run, if it did not.
    #[serde(default)]
    pub skipped: Option<String>,
    /// One row per arm and size.
    pub rows: Vec<E14Row>,
    /// The targets.
    pub targets: Vec<TargetCheck>,
}

fn e14_sizes(quick: bool) -> Vec<u64> {
    if quick {
        vec![5, 100]
    } else {
        vec![5, 10, 100, 1000, 10_000]
    }
}

/// Runs E14.
pub fn e14(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E14> {
    let quick = options.length.quick;
    let mode = if quick { "quick" } else { "full" }.to_string();
    if let Some(why) = cannot_run() {
        return Ok(E14 {
            mode,
            skipped: Some(why),
            rows: vec![],
            targets: vec![],
        });
    }
    let tmp = options.out.join("e14-tmp");
    std::fs::create_dir_all(&tmp)?;
    // 50 Mbit/s, 100 ms RTT, a queue of one BDP.
    let data = link(
        Duration::from_millis(50),
        Some("50M"),
        QueueLimit::Bytes(625_000),
        0.0,
    );
    let acks = link(
        Duration::from_millis(50),
        None,
        QueueLimit::Packets(10_000),
        0.0,
    );
    let arms: [(&str, Stack, &str); 3] = [
        ("slow-start", Stack::SoftPaced, "slow-start"),
        ("rate-based", Stack::SoftPaced, "rate-based"),
        ("kernel-tcp", Stack::KernelTcp, "keep"),
    ];
    let sizes = e14_sizes(quick);
    let total = (sizes.len() * arms.len()) as f64;
    let mut rows = Vec::new();
    for (i, &packets) in sizes.iter().enumerate() {
        for (j, (arm, stack, after_idle)) in arms.iter().enumerate() {
            progress(
                (i * arms.len() + j) as f64 / total,
                &format!("{packets} packets, {arm}"),
            );
            let run = Run {
                stack: *stack,
                spec: PathSpec {
                    a_to_b: acks,
                    b_to_a: data,
                },
                server_args: vec!["--after-idle", after_idle],
                client_args: vec![
                    "--download".into(),
                    (packets * 1200).to_string(),
                    "--warmup".into(),
                    "2M".into(),
                    "--idle".into(),
                    "1s".into(),
                ],
            };
            let m = run_once(&run, &tmp)?;
            rows.push(E14Row {
                arm: arm.to_string(),
                packets,
                response_ms: f(&m.client, &["report", "p50_us"]) / 1000.0,
            });
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let at = |arm: &str, n: u64| {
        rows.iter()
            .find(|r| r.arm == arm && r.packets == n)
            .map_or(f64::NAN, |r| r.response_ms)
    };
    let ratio = at("rate-based", 100) / at("slow-start", 100);
    let targets = vec![TargetCheck::new(
        "response time of a 100-packet transfer after idle, rate-based / slow start",
        "≤ 0.5",
        ratio,
        ratio <= 0.5,
    )];
    Ok(E14 {
        mode,
        skipped: None,
        rows,
        targets,
    })
}

impl Section for E14 {
    const FILE: &'static str = "e14.json";
    fn render(&self, dir: &Path) -> Result<Rendered> {
        let _ = dir;
        let mut md = String::from("## E14: response time after idle (TCP paper Tables X–XI)\n\n");
        if let Some(why) = &self.skipped {
            let _ = writeln!(md, "Not run here: {why}.");
            return Ok(Rendered::text(md));
        }
        md += "50 Mbit/s, RTT 100 ms, queue of one BDP; the connection downloads 2 MB, is idle for 1 s, then downloads the transfer. QUIC arms: quinn-proto on soft timers with per-packet pacing and a CUBIC that restarts slow start after idle, or resumes at the rate measured before idle (rate-based clocking). The kernel's TCP restarts slow start (`tcp_slow_start_after_idle`).\n\n| packets | slow-start (ms) | rate-based (ms) | kernel-tcp (ms) | rate-based / slow-start |\n| ---: | ---: | ---: | ---: | ---: |\n";
        let mut sizes: Vec<u64> = self.rows.iter().map(|r| r.packets).collect();
        sizes.dedup();
        for n in sizes {
            let at = |arm: &str| {
                self.rows
                    .iter()
                    .find(|r| r.arm == arm && r.packets == n)
                    .map_or(f64::NAN, |r| r.response_ms)
            };
            let _ = writeln!(
                md,
                "| {n} | {} | {} | {} | {} |",
                num(at("slow-start"), 1),
                num(at("rate-based"), 1),
                num(at("kernel-tcp"), 1),
                num(at("rate-based") / at("slow-start"), 2)
            );
        }
        md += "\nThe paper (Tables X–XI) reports rate-based clocking after idle up to 2–3 × faster than slow start for transfers of tens to hundreds of packets.\n\n";
        md += &targets_table(&self.targets);
        Ok(Rendered::text(md))
    }
}

// ---------------------------------------------------------------------------------------
// E16: recovery timers under loss

/// A row of `e16.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E16Row {
    /// `quinn-tokio`, `soft` or `soft-1ms`.
    pub stack: String,
    /// Round.
    pub round: usize,
    /// Latency percentiles, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p50_us: f64,
    /// p99.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p99_us: f64,
    /// p99.9.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p999_us: f64,
    /// quinn timeouts the server's driver handled (soft stacks).
    #[serde(deserialize_with = "crate::summary::num")]
    pub timeouts: f64,
    /// How late the server's driver handled them past quinn's time, µs: p50, p99.
    #[serde(deserialize_with = "crate::summary::num")]
    pub timer_late_p50_us: f64,
    /// p99.
    #[serde(deserialize_with = "crate::summary::num")]
    pub timer_late_p99_us: f64,
    /// Latencies, µs (for the CDF).
    pub latencies_us: Vec<f64>,
}

/// `e16.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E16 {
    /// `quick` or `full`.
    pub mode: String,
    /// Why it did not run, if it did not.
    #[serde(default)]
    pub skipped: Option<String>,
    /// One row per stack and round.
    pub rows: Vec<E16Row>,
    /// The targets.
    pub targets: Vec<TargetCheck>,
}

/// Runs E16.
pub fn e16(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E16> {
    let quick = options.length.quick;
    let mode = if quick { "quick" } else { "full" }.to_string();
    if let Some(why) = cannot_run() {
        return Ok(E16 {
            mode,
            skipped: Some(why),
            rows: vec![],
            targets: vec![],
        });
    }
    let tmp = options.out.join("e16-tmp");
    std::fs::create_dir_all(&tmp)?;
    let stacks = [Stack::QuinnTokio, Stack::Soft, Stack::Soft1ms];
    let total = (rounds(quick) * stacks.len()) as f64;
    let mut rows = Vec::new();
    for round in 0..rounds(quick) {
        for i in 0..stacks.len() {
            let stack = stacks[(i + round) % stacks.len()];
            progress(rows.len() as f64 / total, stack.name());
            let run = Run {
                stack,
                spec: rr_spec(),
                server_args: vec![],
                client_args: rr_args(quick),
            };
            let m = run_once(&run, &tmp)?;
            let lat: Vec<f64> = m.client["report"]["latencies_us"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
                .unwrap_or_default();
            rows.push(E16Row {
                stack: stack.name().into(),
                round,
                p50_us: f(&m.client, &["report", "p50_us"]),
                p99_us: f(&m.client, &["report", "p99_us"]),
                p999_us: f(&m.client, &["report", "p999_us"]),
                timeouts: f(&m.server, &["driver", "timeouts"]),
                timer_late_p50_us: f(&m.server, &["driver", "timer_late_p50_us"]),
                timer_late_p99_us: f(&m.server, &["driver", "timer_late_p99_us"]),
                latencies_us: lat,
            });
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let mut r = Vec::new();
    for row in rows.iter().filter(|x| x.stack == "soft") {
        if let Some(b) = rows
            .iter()
            .find(|b| b.stack == "quinn-tokio" && b.round == row.round)
        {
            r.push(row.p99_us / b.p99_us);
        }
    }
    let m = median(r);
    let targets = vec![TargetCheck::new(
        "request/response p99 at 1 % loss, RTT 200 µs: soft / quinn-tokio",
        "≤ 0.5",
        m,
        m <= 0.5,
    )];
    Ok(E16 {
        mode,
        skipped: None,
        rows,
        targets,
    })
}

impl Section for E16 {
    const FILE: &'static str = "e16.json";
    fn render(&self, dir: &Path) -> Result<Rendered> {
        let mut md = String::from(
            "## E16: recovery timers under loss (request/response, 1 % loss, RTT 200 µs)\n\n",
        );
        if let Some(why) = &self.skipped {
            let _ = writeln!(md, "Not run here: {why}.");
            return Ok(Rendered::text(md));
        }
        md += "1 KB requests, 10 KB responses, one connection, 1 % random loss each way, RTT 200 µs, no bottleneck. `soft-1ms` is the soft-timer loop with every quinn timer rounded up to 1 ms as tokio's wheel rounds. Timer lateness is the server driver's: when it handled a quinn timeout against the time quinn asked for.\n\n| stack | round | p50 (µs) | p99 (µs) | p99.9 (µs) | timeouts handled | timer late p50 (µs) | p99 (µs) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        for r in &self.rows {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                r.stack,
                r.round,
                num(r.p50_us, 0),
                num(r.p99_us, 0),
                num(r.p999_us, 0),
                num(r.timeouts, 0),
                num(r.timer_late_p50_us, 1),
                num(r.timer_late_p99_us, 1)
            );
        }
        let plot = "e16_latency_cdf.png";
        let series: Vec<Series> = self
            .rows
            .iter()
            .filter(|r| r.round == 0)
            .map(|r| {
                let mut v = r.latencies_us.clone();
                v.sort_by(f64::total_cmp);
                let n = v.len().max(1) as f64;
                Series {
                    label: r.stack.clone(),
                    points: v
                        .iter()
                        .enumerate()
                        .map(|(i, &x)| (x / 1000.0, (i + 1) as f64 / n))
                        .collect(),
                }
            })
            .collect();
        let x_max = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .fold(1.0, f64::max);
        line_chart(
            &dir.join(plot),
            &LineChart {
                title: "Request latency CDF (round 0)",
                x_label: "latency (ms)",
                y_label: "fraction of requests",
                x_range: (0.0, x_max.min(50.0)),
                y_range: (0.0, 1.0),
                series,
            },
        )?;
        let _ = writeln!(md, "\n![latency CDF]({plot})\n");
        md += &targets_table(&self.targets);
        Ok(Rendered {
            markdown: md,
            plots: vec![plot.into()],
        })
    }
}

/// Runs, for the progress estimate: (quic, e14, e16) seconds.
pub fn expected_seconds(step: &str, quick: bool) -> f64 {
    let per_run = 1.5;
    match step {
        "quic" => {
            let bulk: f64 = bulks(quick)
                .iter()
                .map(|b| if quick { 0.6 } else { 2.0 } + b.rtt.as_secs_f64() * 10.0 + per_run)
                .sum::<f64>()
                * BULK_STACKS.len() as f64;
            let rr = 3.0 * (per_run + rr_requests(quick) as f64 * 0.0008);
            (bulk + rr) * rounds(quick) as f64
        }
        "e14" => e14_sizes(quick).len() as f64 * 3.0 * 4.5,
        _ => 3.0 * rounds(quick) as f64 * (per_run + rr_requests(quick) as f64 * 0.0008),
    }
}
