//! QUIC on soft timers against stock quinn on tokio and the kernel's TCP, through the path
//! emulator: bulk transfers behind a bottleneck (`quic`), response time after idle with
//! slow-start restart against rate-based clocking (E14, the soft-timers paper's Tables X–XI), and
//! request/response under random loss with the recovery timers each runtime took (E16).
//!
//! Every run makes a fresh path (namespaces `a` and `b`, the emulator pinned to CPU 0), runs
//! `softtimers quic server` in `b` (pinned to CPU 1) and `softtimers quic client` in `a`
//! (CPU 0), each writing its JSON, and reads back the emulator's own record.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use softtimer_net::path::{LinkConfig, QueueLimit};
use softtimer_rt::SpinWindow;

use crate::exp::bottleneck::{self, BottleneckRow};
use crate::harness::{ExpOptions, pin_process, read_json};
use crate::path::{ADDR_B, COMMAND_SPIN, EmulatorOptions, PathReport, PathSpec, RunningPath, Side};
use crate::plot::{Axis, LineChart, Series, largest, line_chart};
use crate::quic::Stack;
use crate::report::{Rendered, Section};
use crate::targets::{TargetCheck, targets_table};
use crate::tools;
use softtimer_quic::TransmitCauses;

const EMULATOR_CPU: usize = 0;
const SERVER_CPU: usize = 1;
const CLIENT_CPU: usize = 0;
const SERVER_PORT: u16 = 4433;
/// How long a server may take to listen (it makes its certificate first).
const WAIT_LISTEN: Duration = Duration::from_secs(10);

/// One transfer through the emulated path.
#[derive(Clone, Debug)]
struct Run<'a> {
    stack: Stack,
    /// The emulator's loss seed: one per round, the same for every arm of a round.
    seed: u64,
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
    let path = RunningPath::start_with(
        "q",
        run.spec,
        EmulatorOptions {
            cpu: Some(EMULATOR_CPU),
            seed: run.seed,
            spin: SpinWindow::Calibrated,
        },
    )?;
    let server_json = tmp.join("server.json");
    let client_json = tmp.join("client.json");
    let _ = std::fs::remove_file(&server_json);
    let _ = std::fs::remove_file(&client_json);
    let listen = format!("{ADDR_B}:{SERVER_PORT}");
    let stack = run.stack.name();
    // The client exits once it has sent its close; if the path loses that one packet, the
    // server learns of the end only from its idle timeout: 3 s rather than 30 (longer than
    // any idle period a run has).
    let idle_timeout: &[&str] = if run.stack == Stack::KernelTcp {
        &[]
    } else {
        &["--idle-timeout", "3s"]
    };
    let mut server = path
        .command(Side::B, &exe)
        .args(["quic", "server", "--listen", &listen, "--stack", stack])
        .args(["--connections", "1", "--json"])
        .arg(&server_json)
        .args(idle_timeout)
        .args(&run.server_args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the quic server")?;
    pin_process(server.id(), SERVER_CPU);
    let client = match path.wait_until_bound(Side::B, &mut server, SERVER_PORT, WAIT_LISTEN) {
        Ok(true) => path
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
            .context("starting the quic client"),
        Ok(false) => {
            tools::finish(server, "the quic server")?;
            bail!("the quic server exited before it listened");
        }
        Err(e) => Err(e),
    };
    let client = client.inspect_err(|_| tools::kill(&mut server))?;
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

/// How a step begins: its mode (`quick` or `full`), and its scratch directory (made) or why
/// the step cannot run here.
fn begin(options: &ExpOptions, step: &str) -> Result<(String, Result<PathBuf, String>)> {
    let mode = if options.length.quick {
        "quick"
    } else {
        "full"
    }
    .to_string();
    if let Some(why) = cannot_run() {
        return Ok((mode, Err(why)));
    }
    let tmp = options.out.join(format!("{step}-tmp"));
    std::fs::create_dir_all(&tmp)?;
    Ok((mode, Ok(tmp)))
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
    /// `quinn-tokio`, `soft`, `soft-paced`, `kernel-tcp` or `soft-1ms`.
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
    /// Of those, the drops from the start of the 50 ms in which the data direction's
    /// delivered bytes passed half their total: a bulk transfer's drops once its slow
    /// start's overshoot is behind it (`null` in results from before it was counted).
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub bottleneck_drops_second_half: f64,
    /// Packets the sender declared lost: QUIC's lost packets, the kernel TCP's retransmitted
    /// segments (`TCP_INFO`; `null` in results from before it was read).
    #[serde(deserialize_with = "crate::summary::num")]
    pub sender_lost_packets: f64,
    /// The downloaded application bytes over the IP bytes the data direction delivered:
    /// what headers and retransmissions leave of the bottleneck's rate for goodput.
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub data_share: f64,
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
    /// Of that, the server's (the data's sender; `null` in results from before it was
    /// kept apart).
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub server_cpu_ns_per_mb: f64,
    /// And the client's.
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub client_cpu_ns_per_mb: f64,
    /// Request latency p50, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p50_us: f64,
    /// p99.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p99_us: f64,
    /// p99.9.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p999_us: f64,
    /// Kobayashi's burstiness index of the sender's packets against the bottleneck
    /// (`null` without one).
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub burstiness_index: f64,
    /// quinn timer expiries the server's runtime handled (`null` for TCP).
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub server_timeouts: f64,
    /// How late the server's runtime handled them past quinn's deadline, µs, p50.
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub server_timer_late_p50_us: f64,
    /// p99.
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub server_timer_late_p99_us: f64,
    /// The server's timer lateness histogram: (upper bound µs, count), by decade.
    #[serde(default)]
    pub server_timer_late_hist: Vec<(f64, u64)>,
    /// What made the server's datagrams leave (soft-timer stacks only; `null` otherwise).
    #[serde(default)]
    pub server_causes: Option<TransmitCauses>,
    /// Time both sides' soft-timer loops spent spinning before due events, per megabyte
    /// moved, ns, by the loops' clock (CPU time unless the host took the CPU away meanwhile;
    /// within `cpu_ns_per_mb`; `null` for stock quinn and TCP).
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub idle_spin_ns_per_mb: f64,
    /// The server loop's idle spin window, µs (`null` for stock quinn and TCP).
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub spin_window_us: f64,
    /// `sendmsg` calls of the server (`null` for TCP).
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub server_send_calls: f64,
    /// A pacing variant's name (rows of `pacing_variants` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Over time (bulk): (s, queue delay ms, Mbit/s).
    pub timeline: Vec<(f64, f64, f64)>,
    /// Every request's latency, µs, in order (request/response rows only, for the CDF).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latencies_us: Vec<f64>,
}

/// `quic.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct QuicResult {
    /// `quick` or `full`.
    pub mode: String,
    /// Why it did not run here, if it did not.
    #[serde(default)]
    pub skipped: Option<String>,
    /// One row per stack, scenario and round.
    pub rows: Vec<QuicRow>,
    /// The path emulator's bottleneck beside `tbf`, and its delay error by rate.
    #[serde(default)]
    pub bottleneck: Vec<BottleneckRow>,
    /// Per-packet pacing's CPU against its spacing: `soft-paced` without the idle spin and
    /// with two datagrams per departure, in the first bulk scenario, run after that
    /// scenario's `soft-paced` row of each round (their order rotating per round).
    #[serde(default)]
    pub pacing_variants: Vec<QuicRow>,
    /// The targets.
    pub targets: Vec<TargetCheck>,
}

/// The bulk scenario the targets read.
const BULK_50M_SMALL_QUEUE: &str = "bulk-50M-20ms-0.25bdp";

/// A bulk scenario: a bottleneck of `mbit` Mbit/s, an RTT, a queue of a fraction of the BDP.
struct Bulk {
    mbit: u32,
    rtt_ms: u64,
    bdp_fraction: f64,
    /// The download of a full run: about 2 s at what the QUIC stacks reach in the first
    /// scenarios, about 1 s in the matrix's other corners (on the VM of docs/RESULTS.md they
    /// move 190–340 Mbit/s at 500 Mbit/s), except where bursts overrun a two-packet queue.
    download_bytes: u64,
    /// A run's typical transfer time, s, over the stacks (for the time estimate).
    expected_s: f64,
}

impl Bulk {
    const fn new(
        mbit: u32,
        rtt_ms: u64,
        bdp_fraction: f64,
        download_bytes: u64,
        expected_s: f64,
    ) -> Self {
        Bulk {
            mbit,
            rtt_ms,
            bdp_fraction,
            download_bytes,
            expected_s,
        }
    }
    /// The scenario's name in the rows, e.g. `bulk-50M-20ms-0.25bdp`.
    fn name(&self) -> String {
        format!(
            "bulk-{}M-{}ms-{}bdp",
            self.mbit, self.rtt_ms, self.bdp_fraction
        )
    }
    /// The rate as the path takes it.
    fn rate(&self) -> String {
        format!("{}M", self.mbit)
    }
    fn rate_bps(&self) -> f64 {
        f64::from(self.mbit) * 1e6
    }
    fn rtt(&self) -> Duration {
        Duration::from_millis(self.rtt_ms)
    }
}

fn bulks(quick: bool) -> Vec<Bulk> {
    // The target's scenario (BULK_50M_SMALL_QUEUE) first: the quick lab runs only it.
    let mut v = vec![Bulk::new(50, 20, 0.25, 12_500_000, 2.3)];
    if !quick {
        v.extend([
            Bulk::new(50, 20, 1.0, 12_500_000, 2.2),
            // The other corners of the matrix (50 Mbit/s at 1 ms, 500 Mbit/s at 20 ms), with
            // transfers of about 1 s plus slow start where the stacks reach the rate, to keep
            // the full lab under 30 minutes. At 50 Mbit/s, RTT 1 ms and 0.25 BDP (two packets
            // of queue) every stack but per-packet pacing reaches 5–9 Mbit/s: 6–9 s for
            // 6.25 MB.
            Bulk::new(50, 1, 0.25, 6_250_000, 6.5),
            Bulk::new(50, 1, 1.0, 6_250_000, 1.2),
            Bulk::new(500, 1, 1.0, 50_000_000, 1.8),
            // A 15.6 KB queue, 12 of QUIC's 1228-byte IP packets: what a burst of GSO
            // segments overruns. In `quic11` (docs/RESULTS.md) stock quinn and the kernel's
            // TCP reached about 80 Mbit/s here (2.5 s for 25 MB), per-packet pacing about 190
            // (1 s).
            Bulk::new(500, 1, 0.25, 25_000_000, 2.1),
            Bulk::new(500, 20, 0.25, 25_000_000, 1.6),
            Bulk::new(500, 20, 1.0, 25_000_000, 1.6),
        ]);
    }
    v
}

const BULK_STACKS: [Stack; 4] = [
    Stack::QuinnTokio,
    Stack::Soft,
    Stack::SoftPaced,
    Stack::KernelTcp,
];

/// The stacks of a bulk scenario: the target's scenario also runs `soft-1ms` (quinn's pacer
/// on the soft-timer loop with every timer rounded up to 1 ms), which separates what the
/// timers' precision does to quinn's own pacer from everything else the runtimes differ in.
fn bulk_stacks(b: &Bulk) -> Vec<Stack> {
    let mut stacks = BULK_STACKS.to_vec();
    if b.name() == BULK_50M_SMALL_QUEUE {
        stacks.push(Stack::Soft1ms);
    }
    stacks
}
const RR: &str = "rr-200us-1%";
/// Request/response runs on these; E16 adds `soft-1ms` and the tail probe's effect.
const RR_STACKS: [Stack; 3] = [Stack::QuinnTokio, Stack::Soft, Stack::SoftPaced];

/// `soft-paced` variants run beside the first bulk scenario: (name, arguments of both
/// sides). A system call and a wake-up per datagram are what per-packet pacing costs in user
/// space, besides the idle spin before quinn's own timers (the driver does not spin before a
/// departure); these take one or both away.
const PACING_VARIANTS: [(&str, &[&str]); 3] = [
    ("spin-0", &["--spin", "0"]),
    ("2-per-departure", &["--per-departure", "2"]),
    (
        "2-per-departure-spin-0",
        &["--per-departure", "2", "--spin", "0"],
    ),
];

/// The emulator's loss seed for a round.
fn round_seed(round: usize) -> u64 {
    0x5eed_0000 + round as u64
}

/// Workloads where only a timer wakes the sender: application-limited bursts, thinned ACKs
/// and a transfer after idle, each through 50 Mbit/s, RTT 20 ms, a queue of one BDP.
const TIMER_STACKS: [Stack; 4] = [
    Stack::QuinnTokio,
    Stack::Soft,
    Stack::SoftPaced,
    Stack::Soft1ms,
];
const APP_LIMITED: &str = "app-256k-50ms";
const THIN_ACKS: &str = "thin-acks-50M-20ms";
/// A 100-packet transfer after 1 s of idle, on a connection that moved 2 MB before: the
/// window quinn's CUBIC kept goes out behind its pacer (or ours), which only timers clock.
const AFTER_IDLE: &str = "after-idle-100pkt";
/// The bytes the connection moves before its idle period, in `after-idle-100pkt`.
const AFTER_IDLE_WARMUP: u64 = 2_000_000;

/// The timer-driven scenarios, whose rows the report tables apart from the bulk ones.
fn timer_driven(scenario: &str) -> bool {
    [APP_LIMITED, THIN_ACKS, AFTER_IDLE].contains(&scenario)
}

fn timer_spec() -> PathSpec {
    let rtt = Duration::from_millis(20);
    let bdp = (50e6 / 8.0 * rtt.as_secs_f64()) as u64;
    PathSpec {
        a_to_b: link(rtt / 2, None, QueueLimit::Packets(10_000), 0.0),
        b_to_a: link(rtt / 2, Some("50M"), QueueLimit::Bytes(bdp), 0.0),
    }
}

/// (scenario, server arguments, client arguments).
fn timer_runs(quick: bool) -> Vec<(&'static str, Vec<&'static str>, Vec<String>)> {
    let bursts = if quick { 10 } else { 40 };
    // ACK every 10th packet, and within 10 ms, asked of the peer by both ends.
    let thin = ["--ack-every", "10", "--max-ack-delay", "10ms"];
    let app_limited: Vec<String> = [
        "--download",
        "262144",
        "--requests",
        &bursts.to_string(),
        "--interval",
        "50ms",
    ]
    .map(String::from)
    .to_vec();
    let mut thin_client: Vec<String> = thin.map(String::from).to_vec();
    thin_client.push("--download".into());
    thin_client.push(((50e6 / 8.0 * if quick { 0.6 } else { 2.0 }) as u64).to_string());
    let after_idle: Vec<String> = [
        "--warmup".into(),
        AFTER_IDLE_WARMUP.to_string(),
        "--idle".into(),
        "1s".into(),
        "--download".into(),
        "120000".into(),
    ]
    .to_vec();
    vec![
        (APP_LIMITED, vec![], app_limited),
        (THIN_ACKS, thin.to_vec(), thin_client),
        (AFTER_IDLE, vec![], after_idle),
    ]
}

fn rounds(quick: bool) -> usize {
    if quick { 1 } else { 3 }
}

fn bulk_bytes(b: &Bulk, quick: bool) -> u64 {
    if quick {
        // 0.6 s at the bottleneck rate.
        (b.rate_bps() / 8.0 * 0.6) as u64
    } else {
        b.download_bytes
    }
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
    let (mode, tmp) = begin(options, "quic")?;
    let tmp = match tmp {
        Ok(tmp) => tmp,
        Err(why) => {
            let skipped = Some(why);
            return Ok(QuicResult {
                mode,
                skipped,
                ..Default::default()
            });
        }
    };
    let bulks = bulks(quick);
    let timer_runs = timer_runs(quick);
    let bottleneck_runs =
        (bottleneck::rates(quick).len() * (bottleneck::EMULATOR_ARMS.len() + 1)) as f64;
    let total = (rounds(quick)
        * (bulks.iter().map(|b| bulk_stacks(b).len()).sum::<usize>()
            + PACING_VARIANTS.len()
            + RR_STACKS.len()
            + timer_runs.len() * TIMER_STACKS.len())) as f64
        + bottleneck_runs * rounds(quick) as f64;
    let mut done = 0.0;
    let mut rows = Vec::new();
    let mut pacing_variants = Vec::new();
    for round in 0..rounds(quick) {
        for b in &bulks {
            let name = b.name();
            let bdp = b.rate_bps() / 8.0 * b.rtt().as_secs_f64();
            let queue = QueueLimit::Bytes(((bdp * b.bdp_fraction) as u64).max(3000));
            let rate = b.rate();
            let data = link(b.rtt() / 2, Some(&rate), queue, 0.0);
            let acks = link(b.rtt() / 2, None, QueueLimit::Packets(10_000), 0.0);
            // Rotate the order each round: interleaved, not one stack always first.
            let stacks = bulk_stacks(b);
            for i in 0..stacks.len() {
                let stack = stacks[(i + round) % stacks.len()];
                progress(done / total, &format!("{name} {}", stack.name()));
                let run = Run {
                    stack,
                    seed: round_seed(round),
                    spec: PathSpec {
                        a_to_b: acks,
                        b_to_a: data,
                    },
                    server_args: vec![],
                    client_args: vec!["--download".into(), bulk_bytes(b, quick).to_string()],
                };
                let m = run_once(&run, &tmp)?;
                rows.push(row(stack, &name, round, &m));
                done += 1.0;
                // The variants run right after soft-paced, in the same conditions.
                if name == BULK_50M_SMALL_QUEUE && stack == Stack::SoftPaced {
                    for k in 0..PACING_VARIANTS.len() {
                        let (variant, args) = PACING_VARIANTS[(k + round) % PACING_VARIANTS.len()];
                        progress(done / total, &format!("{name} soft-paced {variant}"));
                        let mut run = run.clone();
                        run.server_args.extend_from_slice(args);
                        run.client_args.extend(args.iter().map(|a| a.to_string()));
                        let m = run_once(&run, &tmp)?;
                        let mut r = row(stack, &name, round, &m);
                        r.variant = Some(variant.to_string());
                        pacing_variants.push(r);
                        done += 1.0;
                    }
                }
            }
        }
        for i in 0..RR_STACKS.len() {
            let stack = RR_STACKS[(i + round) % RR_STACKS.len()];
            progress(done / total, &format!("{RR} {}", stack.name()));
            let run = Run {
                stack,
                seed: round_seed(round),
                spec: rr_spec(),
                server_args: vec![],
                client_args: rr_args(quick),
            };
            let m = run_once(&run, &tmp)?;
            rows.push(row(stack, RR, round, &m));
            done += 1.0;
        }
        for (scenario, server_args, client_args) in &timer_runs {
            for i in 0..TIMER_STACKS.len() {
                let stack = TIMER_STACKS[(i + round) % TIMER_STACKS.len()];
                progress(done / total, &format!("{scenario} {}", stack.name()));
                let run = Run {
                    stack,
                    seed: round_seed(round),
                    spec: timer_spec(),
                    server_args: server_args.clone(),
                    client_args: client_args.clone(),
                };
                let m = run_once(&run, &tmp)?;
                rows.push(row(stack, scenario, round, &m));
                done += 1.0;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let bottleneck = bottleneck::measure(quick, rounds(quick), &mut |what| {
        progress(done / total, what);
        done += 1.0;
    })?;
    let mut targets = quic_targets(&rows, &pacing_variants);
    targets.insert(0, emulator_target(&bottleneck));
    Ok(QuicResult {
        mode,
        skipped: None,
        rows,
        bottleneck,
        pacing_variants,
        targets,
    })
}

fn row(stack: Stack, scenario: &str, round: usize, m: &Measured) -> QuicRow {
    let data = &m.path.b_to_a;
    let server_cpu = f(&m.server, &["cpu_ns"]);
    let client_cpu = f(&m.client, &["cpu_ns"]);
    let spin_ms =
        f(&m.client, &["driver", "idle_spin_ms"]) + f(&m.server, &["driver", "idle_spin_ms"]);
    // After idle, the CPU and the delivered bytes cover the warm-up too, which the client's
    // count of the (one) response leaves out.
    let warmup = if scenario == AFTER_IDLE {
        AFTER_IDLE_WARMUP as f64
    } else {
        0.0
    };
    let downloaded = f(&m.client, &["report", "download_bytes"]) + warmup;
    let bytes = downloaded + f(&m.client, &["report", "upload_bytes"]);
    let per_mb = |ns: f64| {
        if bytes > 0.0 {
            ns / (bytes / 1e6)
        } else {
            f64::NAN
        }
    };
    QuicRow {
        stack: stack.name().into(),
        scenario: scenario.into(),
        round,
        goodput_bps: f(&m.client, &["report", "goodput_bps"]),
        bottleneck_drops: data.queue_drops,
        bottleneck_drops_second_half: data.queue_drops_second_half as f64,
        sender_lost_packets: f(&m.server, &["served", "lost_packets"]),
        data_share: downloaded / data.delivered_bytes as f64,
        interarrival_stddev_us: data.interarrival_stddev_us.unwrap_or(f64::NAN),
        sender_gap_stddev_us: data.sender_gap_stddev_us.unwrap_or(f64::NAN),
        queue_delay_p99_us: data.queue_delay_p99_us.unwrap_or(f64::NAN),
        cpu_ns_per_mb: per_mb(server_cpu + client_cpu),
        server_cpu_ns_per_mb: per_mb(server_cpu),
        client_cpu_ns_per_mb: per_mb(client_cpu),
        p50_us: f(&m.client, &["report", "p50_us"]),
        p99_us: f(&m.client, &["report", "p99_us"]),
        p999_us: f(&m.client, &["report", "p999_us"]),
        burstiness_index: data.burstiness_index.unwrap_or(f64::NAN),
        server_timeouts: f(&m.server, &["driver", "timeouts"]),
        server_timer_late_p50_us: f(&m.server, &["driver", "timer_late_p50_us"]),
        server_timer_late_p99_us: f(&m.server, &["driver", "timer_late_p99_us"]),
        server_timer_late_hist: serde_json::from_value(
            m.server["driver"]["timer_late_hist"].clone(),
        )
        .unwrap_or_default(),
        server_causes: serde_json::from_value(m.server["driver"]["causes"].clone()).ok(),
        idle_spin_ns_per_mb: per_mb(spin_ms * 1e6),
        spin_window_us: f(&m.server, &["driver", "spin_window_us"]),
        server_send_calls: f(&m.server, &["driver", "send_calls"]),
        variant: None,
        timeline: data.timeline.clone(),
        latencies_us: if scenario == RR {
            latencies(&m.client)
        } else {
            Vec::new()
        },
    }
}

/// The client's request latencies, µs, from its JSON.
fn latencies(client: &serde_json::Value) -> Vec<f64> {
    client["report"]["latencies_us"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
        .unwrap_or_default()
}

/// Per round, `stack`'s value of `field` over quinn-tokio's, in one scenario.
fn ratios(rows: &[QuicRow], scenario: &str, stack: &str, field: fn(&QuicRow) -> f64) -> Vec<f64> {
    per_round_ratios(
        rows,
        |r| r.round,
        |r| r.scenario == scenario && r.stack == stack,
        |r| r.scenario == scenario && r.stack == "quinn-tokio",
        field,
    )
}

/// For each row `is_arm` picks, its `value` over that of the row `is_base` picks in the same
/// round (rounds without both are left out).
fn per_round_ratios<R>(
    rows: &[R],
    round: impl Fn(&R) -> usize,
    is_arm: impl Fn(&R) -> bool,
    is_base: impl Fn(&R) -> bool,
    value: impl Fn(&R) -> f64,
) -> Vec<f64> {
    rows.iter()
        .filter(|r| is_arm(r))
        .filter_map(|r| {
            let base = rows.iter().find(|b| is_base(b) && round(b) == round(r))?;
            Some(value(r) / value(base))
        })
        .collect()
}

/// The distinct keys of `rows`, in first-seen order (a table's rows).
fn distinct<R, K: PartialEq>(rows: &[R], key: impl Fn(&R) -> K) -> Vec<K> {
    let mut keys = Vec::new();
    for r in rows {
        let k = key(r);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

/// The emulator's delay error: the worst rate's median over rounds.
fn emulator_target(rows: &[BottleneckRow]) -> TargetCheck {
    let mut rates: Vec<f64> = rows.iter().map(|r| r.rate_bps).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    let worst = rates
        .iter()
        .map(|&rate| {
            median(
                rows.iter()
                    .filter(|r| {
                        r.bottleneck == bottleneck::EMULATOR_ARMS[0].0 && r.rate_bps == rate
                    })
                    .map(|r| r.delay_error_p99_us)
                    .collect(),
            )
        })
        .fold(f64::NAN, f64::max);
    let span = match (rates.first(), rates.last()) {
        (Some(lo), Some(hi)) => format!("{}–{} Mbit/s", lo / 1e6, hi / 1e6),
        _ => "no rate".into(),
    };
    TargetCheck::new(
        format!(
            "path emulator (spinning up to {:?}): delay error per packet, p99 (µs), worst rate of {span}",
            COMMAND_SPIN
        ),
        "≤ 20",
        worst,
        worst <= 20.0,
    )
}

fn quic_targets(rows: &[QuicRow], variants: &[QuicRow]) -> Vec<TargetCheck> {
    let s = BULK_50M_SMALL_QUEUE;
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
    if !variants.is_empty() {
        t.push(pairs_cpu_target(rows, variants));
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

/// The first bulk scenario's quinn-tokio and soft-paced rows and the pacing variants, each
/// variant as stack `soft-paced/<variant>`, so that per-round ratios can pair them.
fn variant_arms(rows: &[QuicRow], variants: &[QuicRow]) -> Vec<QuicRow> {
    rows.iter()
        .filter(|r| {
            r.scenario == BULK_50M_SMALL_QUEUE
                && (r.stack == "quinn-tokio" || r.stack == "soft-paced")
        })
        .cloned()
        .chain(variants.iter().map(|r| {
            let mut r = r.clone();
            if let Some(v) = &r.variant {
                r.stack = format!("{}/{v}", r.stack);
            }
            r
        }))
        .collect()
}

/// CPU per MB of `soft-paced` with two datagrams per departure against stock quinn, per
/// round: pacing that costs no CPU, at the price of pairs leaving back to back.
fn pairs_cpu_target(rows: &[QuicRow], variants: &[QuicRow]) -> TargetCheck {
    let arms = variant_arms(rows, variants);
    let c = median(ratios(
        &arms,
        BULK_50M_SMALL_QUEUE,
        "soft-paced/2-per-departure",
        |r| r.cpu_ns_per_mb,
    ));
    TargetCheck::new(
        "same: CPU per MB, soft-paced with 2 datagrams per departure / quinn-tokio",
        "≤ 1.0",
        c,
        c <= 1.0,
    )
}

/// The median of `v` with its [min, max] when there is more than one value.
fn spread(mut v: Vec<f64>, digits: usize) -> String {
    v.retain(|x| x.is_finite());
    let (lo, hi) = crate::summary::range(&v);
    if v.len() > 1 {
        format!(
            "{} [{}, {}]",
            num(median(v), digits),
            num(lo, digits),
            num(hi, digits)
        )
    } else {
        num(median(v), digits)
    }
}

/// Per round, rate-based over slow-start response time for `packets`.
fn e14_ratios(rows: &[E14Row], packets: u64) -> Vec<f64> {
    per_round_ratios(
        rows,
        |r| r.round,
        |r| r.arm == "rate-based" && r.packets == packets,
        |r| r.arm == "slow-start" && r.packets == packets,
        |r| r.response_ms,
    )
}

/// What a row written before a field existed reads as.
fn nan() -> f64 {
    f64::NAN
}

fn num(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        "-".into()
    }
}

impl QuicResult {
    /// What per-packet pacing costs: CPU against spacing, by variant.
    fn pacing_variants_table(&self) -> String {
        let arms = variant_arms(&self.rows, &self.pacing_variants);
        let mut md = format!(
            "\n### What per-packet pacing costs\n\n{BULK_50M_SMALL_QUEUE}, both sides with the same settings: one `sendmsg` and one wake-up per datagram are what pacing every datagram costs in user space (the driver blocks until a departure rather than spinning before it, and spins only before quinn's own timers); `spin-0` never spins, not even before those, `2-per-departure` sends two datagrams (one GSO send) per departure time at twice the interval, as Linux's TCP sends at least two segments per paced burst. The variants run right after `soft-paced` in each round, their order rotating. Medians over rounds with [min, max]; the CPU ratio is per round; idle spin is the loops' clock time spent spinning.\n\n| arm | spin window (µs) | server sendmsg calls | CPU per MB, both sides (ms) | of which idle spin (ms) | CPU / quinn-tokio | sender gap stddev (µs) | receiver inter-arrival stddev (µs) | burstiness index | bottleneck drops | goodput (Mbit/s) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        );
        for stack in distinct(&arms, |r| r.stack.clone()) {
            let col = |g: fn(&QuicRow) -> f64, scale: f64, digits: usize| {
                spread(
                    arms.iter()
                        .filter(|r| r.stack == stack)
                        .map(|r| g(r) / scale)
                        .collect(),
                    digits,
                )
            };
            let ratio = if stack == "quinn-tokio" {
                "1".to_string()
            } else {
                spread(
                    ratios(&arms, BULK_50M_SMALL_QUEUE, &stack, |r| r.cpu_ns_per_mb),
                    2,
                )
            };
            let _ = writeln!(
                md,
                "| {stack} | {} | {} | {} | {} | {ratio} | {} | {} | {} | {} | {} |",
                col(|r| r.spin_window_us, 1.0, 1),
                col(|r| r.server_send_calls, 1.0, 0),
                col(|r| r.cpu_ns_per_mb, 1e6, 1),
                col(|r| r.idle_spin_ns_per_mb, 1e6, 1),
                col(|r| r.sender_gap_stddev_us, 1.0, 0),
                col(|r| r.interarrival_stddev_us, 1.0, 0),
                col(|r| r.burstiness_index, 1.0, 3),
                col(|r| r.bottleneck_drops as f64, 1.0, 0),
                col(|r| r.goodput_bps, 1e6, 1),
            );
        }
        md
    }

    /// A cell for one (scenario, stack): the median over rounds of `g(row) / scale`, with
    /// its range when there are several rounds.
    fn column<'a>(
        &'a self,
        scenario: &'a str,
        stack: &'a str,
    ) -> impl Fn(fn(&QuicRow) -> f64, f64, usize) -> String + 'a {
        move |g, scale, digits| {
            spread(
                self.rows
                    .iter()
                    .filter(|r| r.scenario == scenario && r.stack == stack)
                    .map(|r| g(r) / scale)
                    .collect(),
                digits,
            )
        }
    }
}

fn bottleneck_table(rows: &[BottleneckRow]) -> String {
    let mut md = format!(
        "\n### The emulator's bottleneck beside the kernel's tbf\n\nA UDP sender offers 1.2 × the rate in 1500-byte packets; both bottlenecks hold a {} KB drop-tail queue. The emulator also delays every packet by 1 ms (tbf cannot delay); `emulator` spins up to {:?} before a packet is due (the `path` command's default), `emulator-calibrated` only the event loop's calibrated window (as in the QUIC runs above, where the emulator shares its CPU with the client). Delay error: when the emulator released each packet to the receiving side against when it was due. Received rate and inter-arrival spread at the receiving socket, after the first 100 ms; the ideal spread is 0. tbf counts the 14-byte Ethernet header in its rate and the receiver counts IP bytes, so tbf's −0.92 % is that header. Medians over rounds with [min, max].\n\n| rate (Mbit/s) | bottleneck | delivered (Mbit/s) | rate error (%) | inter-arrival stddev (µs) | inter-arrival p99 (µs) | drops | delay error p99 (µs) |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        bottleneck::QUEUE_BYTES / 1000,
        COMMAND_SPIN
    );
    let mut keys = distinct(rows, |r| (r.rate_bps, r.bottleneck.clone()));
    keys.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    for (rate, which) in keys {
        let col = |g: fn(&BottleneckRow) -> f64, digits: usize| {
            spread(
                rows.iter()
                    .filter(|r| r.rate_bps == rate && r.bottleneck == which)
                    .map(g)
                    .collect(),
                digits,
            )
        };
        let _ = writeln!(
            md,
            "| {} | {which} | {} | {} | {} | {} | {} | {} |",
            rate / 1e6,
            col(|r| r.delivered_bps / 1e6, 2),
            col(|r| r.rate_error_pct, 2),
            col(|r| r.interarrival_stddev_us, 1),
            col(|r| r.interarrival_p99_us, 1),
            col(|r| r.drops, 0),
            col(|r| r.delay_error_p99_us, 1),
        );
    }
    md
}

/// `packet / trigger state / backstop / app` as percentages of the datagrams sent.
fn causes_cell(causes: Option<&TransmitCauses>) -> String {
    let Some(c) = causes else {
        return "unavailable".into();
    };
    let all = (c.packet + c.trigger_state + c.backstop + c.app).max(1) as f64;
    let pct = |n: u64| format!("{:.0}", n as f64 * 100.0 / all);
    format!(
        "{} / {} / {} / {}",
        pct(c.packet),
        pct(c.trigger_state),
        pct(c.backstop),
        pct(c.app)
    )
}

/// A lateness histogram folded into four buckets, as percentages.
fn lateness_cell(hist: &[(f64, u64)]) -> String {
    let all: u64 = hist.iter().map(|b| b.1).sum();
    if all == 0 {
        return "-".into();
    }
    let mut sums = [0u64; 4];
    for &(upper_us, n) in hist {
        let i = match upper_us {
            u if u <= 10.0 => 0,
            u if u <= 100.0 => 1,
            u if u <= 1000.0 => 2,
            _ => 3,
        };
        sums[i] += n;
    }
    sums.map(|n| format!("{:.0}", n as f64 * 100.0 / all as f64))
        .join(" / ")
}

impl Section for QuicResult {
    const FILE: &'static str = "quic.json";
    fn render(&self, dir: &Path) -> Result<Rendered> {
        let mut md = String::from("## QUIC on soft timers against stock quinn and kernel TCP\n\n");
        if let Some(why) = &self.skipped {
            let _ = writeln!(md, "Not run here: {why}.");
            return Ok(Rendered::text(md));
        }
        md += "Through the path emulator (`softtimers path`; data from `b` to `a`, the bottleneck and its drop-tail queue on the data direction). Medians over rounds, with [min, max]. \"Of which in the second half\": the bottleneck drops from the start of the 50 ms interval in which the data direction's delivered bytes passed half their total (drops at the end of slow start fall in the first half).\n\n";
        md += "| scenario | stack | goodput (Mbit/s) | data share of delivered bytes | bottleneck drops | of which in the second half | sender-declared losses (TCP: segments resent) | receiver inter-arrival stddev (µs) | sender gap stddev (µs) | burstiness index | queue delay p99 (µs) | CPU per MB, both sides (ms) | of which the server's (ms) | p50 (µs) | p99 (µs) |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        let keys = distinct(&self.rows, |r| (r.scenario.clone(), r.stack.clone()));
        for (scenario, stack) in keys.iter().filter(|k| !timer_driven(&k.0)) {
            let col = self.column(scenario, stack);
            let _ = writeln!(
                md,
                "| {scenario} | {stack} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                col(|r| r.goodput_bps, 1e6, 1),
                col(|r| r.data_share, 1.0, 3),
                col(|r| r.bottleneck_drops as f64, 1.0, 0),
                col(|r| r.bottleneck_drops_second_half, 1.0, 0),
                col(|r| r.sender_lost_packets, 1.0, 0),
                col(|r| r.interarrival_stddev_us, 1.0, 1),
                col(|r| r.sender_gap_stddev_us, 1.0, 1),
                col(|r| r.burstiness_index, 1.0, 3),
                col(|r| r.queue_delay_p99_us, 1.0, 0),
                col(|r| r.cpu_ns_per_mb, 1e6, 1),
                col(|r| r.server_cpu_ns_per_mb, 1e6, 1),
                col(|r| r.p50_us, 1.0, 0),
                col(|r| r.p99_us, 1.0, 0),
            );
        }
        if !self.pacing_variants.is_empty() {
            md += &self.pacing_variants_table();
        }
        if keys.iter().any(|k| timer_driven(&k.0)) {
            md += "\n### Where only a timer wakes the sender\n\n`app-256k-50ms`: the client asks for 256 KB every 50 ms (an application-limited sender); `thin-acks-50M-20ms`: a bulk download with each end asking its peer to ACK only every 10th packet, within 10 ms (quinn-proto's ACK-frequency extension); `after-idle-100pkt`: the client downloads 2 MB, is idle for 1 s, then asks for 100 packets (120 KB), which leave behind the pacer with quinn's CUBIC as it is (p50 and p99 are that one response; the other columns cover the whole connection, the warm-up included). All through 50 Mbit/s, RTT 20 ms, a queue of one BDP. What made the server's datagrams leave (soft-timer stacks: a received packet, a soft event at a trigger state, one fired by the backstop, the application) and how late the server's runtime handled quinn's timers (every QUIC stack; stock quinn's through a wrapper around its tokio timers).\n\n| scenario | stack | goodput (Mbit/s) | p50 (µs) | p99 (µs) | sender gap stddev (µs) | burstiness index | queue delay p99 (µs) | sent on packet / trigger state / backstop / app (%) | timer late p50 (µs) | p99 (µs) | ≤ 10 µs / ≤ 100 µs / ≤ 1 ms / > 1 ms (%) |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |\n";
            for (scenario, stack) in keys.iter().filter(|k| timer_driven(&k.0)) {
                let col = self.column(scenario, stack);
                let first = self
                    .rows
                    .iter()
                    .find(|r| &r.scenario == scenario && &r.stack == stack)
                    .expect("a key comes from a row");
                let _ = writeln!(
                    md,
                    "| {scenario} | {stack} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    col(|r| r.goodput_bps, 1e6, 1),
                    col(|r| r.p50_us, 1.0, 0),
                    col(|r| r.p99_us, 1.0, 0),
                    col(|r| r.sender_gap_stddev_us, 1.0, 1),
                    col(|r| r.burstiness_index, 1.0, 3),
                    col(|r| r.queue_delay_p99_us, 1.0, 0),
                    causes_cell(first.server_causes.as_ref()),
                    col(|r| r.server_timer_late_p50_us, 1.0, 1),
                    col(|r| r.server_timer_late_p99_us, 1.0, 1),
                    lateness_cell(&first.server_timer_late_hist),
                );
            }
            md += "\nCauses and the lateness buckets are round 0's; the other columns medians over rounds.\n";
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
                .filter(|r| r.scenario == BULK_50M_SMALL_QUEUE && r.round == 0)
                .map(|r| Series {
                    label: r.stack.clone(),
                    points: r
                        .timeline
                        .iter()
                        .map(|p| (p.0, if pick == 1 { p.1 } else { p.2 }))
                        .collect(),
                })
                .collect();
            let x_max = largest(&series, Axis::X, 0.1);
            let y_max = largest(&series, Axis::Y, 0.1);
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
        let rr: Vec<Series> = self
            .rows
            .iter()
            .filter(|r| r.scenario == RR && r.round == 0 && !r.latencies_us.is_empty())
            .map(|r| cdf_series(r.stack.clone(), &r.latencies_us))
            .collect();
        if !rr.is_empty() {
            let file = "quic_rr_latency_cdf.png";
            let title = "Request/response latency CDF (1 % loss, RTT 200 µs, round 0)";
            latency_cdf_chart(&dir.join(file), title, rr)?;
            let _ = writeln!(md, "\n![{title}]({file})");
            plots.push(file.to_string());
        }
        if !self.bottleneck.is_empty() {
            md += &bottleneck_table(&self.bottleneck);
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
    /// Round (rounds interleave the arms).
    #[serde(default)]
    pub round: usize,
    /// Response time, ms.
    #[serde(deserialize_with = "crate::summary::num")]
    pub response_ms: f64,
}

/// `e14.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
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
        vec![5, 10, 100, 1000, 10_000, E14_LARGEST]
    }
}

/// The paper's largest transfer: 120 MB, about 20 s at 50 Mbit/s, so it runs in the first
/// round only (a transfer that long averages over its own length) to keep the full lab
/// within its time.
const E14_LARGEST: u64 = 100_000;

/// A row of the paper's Table X: packets, regular TCP's and rate-based clocking's ms.
type PaperRow = (u64, f64, f64);

/// The soft-timers paper's Table X (50 Mbit/s, RTT 100 ms): transfer size in packets,
/// response time with regular TCP and with rate-based clocking, ms.
const PAPER_TABLE_X: [PaperRow; 5] = [
    (5, 496.0, 101.2),
    (100, 1145.0, 123.7),
    (1000, 1714.0, 340.0),
    (10_000, 3867.0, 2500.0),
    (100_000, 25432.0, 24863.0),
];

/// The transfer sizes of E14's round `round`.
fn e14_round_sizes(quick: bool, round: usize) -> Vec<u64> {
    e14_sizes(quick)
        .into_iter()
        .filter(|&n| round == 0 || n != E14_LARGEST)
        .collect()
}

/// Seconds one E14 run takes, about: set-up, the 2 MB warm-up, 1 s idle, the transfer.
fn e14_run_seconds(packets: u64) -> f64 {
    2.5 + (packets * 1200) as f64 * 8.0 / 45e6
}

/// Runs E14.
pub fn e14(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E14> {
    let quick = options.length.quick;
    let (mode, tmp) = begin(options, "e14")?;
    let tmp = match tmp {
        Ok(tmp) => tmp,
        Err(why) => {
            let skipped = Some(why);
            return Ok(E14 {
                mode,
                skipped,
                ..Default::default()
            });
        }
    };
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
    let total = (0..rounds(quick))
        .map(|r| e14_round_sizes(quick, r).len() * arms.len())
        .sum::<usize>() as f64;
    let mut rows = Vec::new();
    for (round, packets) in
        (0..rounds(quick)).flat_map(|r| e14_round_sizes(quick, r).into_iter().map(move |n| (r, n)))
    {
        for j in 0..arms.len() {
            let (arm, stack, after_idle) = arms[(j + round) % arms.len()];
            progress(
                rows.len() as f64 / total,
                &format!("{packets} packets, {arm}"),
            );
            let run = Run {
                stack,
                seed: round_seed(round),
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
                round,
                response_ms: f(&m.client, &["report", "p50_us"]) / 1000.0,
            });
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let ratio = median(e14_ratios(&rows, 100));
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
        let mut md =
            String::from("## E14: response time after idle (soft-timers paper, Tables X–XI)\n\n");
        if let Some(why) = &self.skipped {
            let _ = writeln!(md, "Not run here: {why}.");
            return Ok(Rendered::text(md));
        }
        md += "50 Mbit/s, RTT 100 ms, queue of one BDP; the connection downloads 2 MB, is idle for 1 s, then downloads the transfer. QUIC arms: quinn-proto on soft timers with per-packet pacing and a CUBIC that restarts slow start after idle, or resumes at the rate measured before idle (rate-based clocking). The kernel's TCP restarts slow start (`tcp_slow_start_after_idle`). A packet is 1200 bytes of data; the 100,000-packet transfer (120 MB) runs in the first round only. The paper's columns are its Table X (the same path; FreeBSD 2.2.6, 1448-byte packets, regular TCP against rate-based clocking at the bottleneck rate).\n\n| packets | slow-start (ms) | rate-based (ms) | kernel-tcp (ms) | rate-based / slow-start | paper: regular TCP (ms) | paper: rate-based (ms) | paper: ratio |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        let mut sizes: Vec<u64> = self.rows.iter().map(|r| r.packets).collect();
        sizes.sort_unstable();
        sizes.dedup();
        for n in sizes {
            let at = |arm: &str| {
                spread(
                    self.rows
                        .iter()
                        .filter(|r| r.arm == arm && r.packets == n)
                        .map(|r| r.response_ms)
                        .collect(),
                    1,
                )
            };
            let paper = PAPER_TABLE_X.iter().find(|p| p.0 == n).map_or_else(
                || "- | - | -".to_string(),
                |&(_, regular, rate_based)| {
                    format!("{regular} | {rate_based} | {:.2}", rate_based / regular)
                },
            );
            let _ = writeln!(
                md,
                "| {n} | {} | {} | {} | {} | {paper} |",
                at("slow-start"),
                at("rate-based"),
                at("kernel-tcp"),
                spread(e14_ratios(&self.rows, n), 2)
            );
        }
        md += "\nThe paper's regular TCP starts its slow start from a small window (typically two packets, its appendix says), and its 5 packets took 496 ms, about five RTTs; this slow-start arm restarts from quinn-proto's initial window of 10 packets, so its small transfers leave in one paced window. Table XI (100 Mbit/s, same RTT) shows the same shape: response time cut by 71–89 % up to 1000 packets, 11 % at 100,000.\n\n";
        let plot = "e14_response_time.png";
        line_chart(&dir.join(plot), &self.chart())?;
        let _ = writeln!(md, "![E14 response time after idle]({plot})\n");
        md += &targets_table(&self.targets);
        Ok(Rendered {
            markdown: md,
            plots: vec![plot.into()],
        })
    }
}

impl E14 {
    /// Response time against transfer size, both on log10 scales: each arm's median over
    /// rounds, and the paper's Table X.
    fn chart(&self) -> LineChart<'static> {
        let mut sizes: Vec<u64> = self.rows.iter().map(|r| r.packets).collect();
        sizes.sort_unstable();
        sizes.dedup();
        let log = |packets: u64, ms: f64| ((packets as f64).log10(), ms.log10());
        let mut series: Vec<Series> = ["slow-start", "rate-based", "kernel-tcp"]
            .iter()
            .map(|arm| Series {
                label: (*arm).to_string(),
                points: sizes
                    .iter()
                    .map(|&n| {
                        let at: Vec<f64> = self
                            .rows
                            .iter()
                            .filter(|r| r.arm == *arm && r.packets == n)
                            .map(|r| r.response_ms)
                            .collect();
                        log(n, median(at))
                    })
                    .filter(|p| p.1.is_finite())
                    .collect(),
            })
            .collect();
        let paper = |label: &str, ms: fn(&PaperRow) -> f64| Series {
            label: label.into(),
            points: PAPER_TABLE_X.iter().map(|p| log(p.0, ms(p))).collect(),
        };
        series.push(paper("paper: regular TCP", |p| p.1));
        series.push(paper("paper: rate-based", |p| p.2));
        let y_max = largest(&series, Axis::Y, 1.0);
        LineChart {
            title: "E14: response time after idle (50 Mbit/s, RTT 100 ms)",
            x_label: "transfer, log10(packets)",
            y_label: "response time, log10(ms)",
            x_range: (0.5, 5.2),
            y_range: (1.0, y_max + 0.2),
            series,
        }
    }
}

// ---------------------------------------------------------------------------------------
// E16: recovery timers under loss

/// A row of `e16.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E16Row {
    /// `quinn-tokio`, `soft` or `soft-1ms`.
    pub stack: String,
    /// `default` (quinn's transport defaults: the peer may delay ACKs by 25 ms),
    /// `ack-delay-1ms` (each end asks its peer to ACK within 1 ms) or `no-tail-probe` (the
    /// defaults, with the soft-timer driver's tail-loss probe off; soft stacks only).
    #[serde(default)]
    pub config: String,
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
    /// Tail-loss probes the soft-timer driver sent, both sides (`null` for stock quinn).
    #[serde(default)]
    pub tail_probes: Option<u64>,
    /// Of those, the probes that found a loss (quinn declared one before sending data again).
    #[serde(default)]
    pub tail_probes_finding_loss: Option<u64>,
    /// Latencies, µs (for the CDF).
    pub latencies_us: Vec<f64>,
}

/// `e16.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
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

/// E16's settings: (name, arguments for both ends, the stacks it runs on).
const E16_CONFIGS: [(&str, &[&str], &[Stack]); 3] = [
    ("default", &[], &E16_STACKS),
    ("ack-delay-1ms", &["--max-ack-delay", "1ms"], &E16_STACKS),
    // What the driver's tail-loss probe contributes (stock quinn has none to turn off).
    (
        "no-tail-probe",
        &["--no-tail-probe"],
        &[Stack::Soft, Stack::Soft1ms],
    ),
];
const E16_STACKS: [Stack; 3] = [Stack::QuinnTokio, Stack::Soft, Stack::Soft1ms];

fn e16_runs() -> usize {
    E16_CONFIGS.iter().map(|(_, _, stacks)| stacks.len()).sum()
}

/// Runs E16.
pub fn e16(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E16> {
    let quick = options.length.quick;
    let (mode, tmp) = begin(options, "e16")?;
    let tmp = match tmp {
        Ok(tmp) => tmp,
        Err(why) => {
            let skipped = Some(why);
            return Ok(E16 {
                mode,
                skipped,
                ..Default::default()
            });
        }
    };
    let total = (rounds(quick) * e16_runs()) as f64;
    let mut rows = Vec::new();
    for (round, &(config, args, stacks)) in
        (0..rounds(quick)).flat_map(|r| E16_CONFIGS.iter().map(move |c| (r, c)))
    {
        for i in 0..stacks.len() {
            let stack = stacks[(i + round) % stacks.len()];
            progress(
                rows.len() as f64 / total,
                &format!("{config} {}", stack.name()),
            );
            let mut client_args = rr_args(quick);
            client_args.extend(args.iter().map(|a| a.to_string()));
            let run = Run {
                stack,
                seed: round_seed(round),
                spec: rr_spec(),
                server_args: args.to_vec(),
                client_args,
            };
            let m = run_once(&run, &tmp)?;
            rows.push(E16Row {
                stack: stack.name().into(),
                config: config.into(),
                round,
                p50_us: f(&m.client, &["report", "p50_us"]),
                p99_us: f(&m.client, &["report", "p99_us"]),
                p999_us: f(&m.client, &["report", "p999_us"]),
                timeouts: f(&m.server, &["driver", "timeouts"]),
                timer_late_p50_us: f(&m.server, &["driver", "timer_late_p50_us"]),
                timer_late_p99_us: f(&m.server, &["driver", "timer_late_p99_us"]),
                tail_probes: [&m.client, &m.server]
                    .iter()
                    .map(|side| side["driver"]["tail_probes"].as_u64())
                    .sum(),
                tail_probes_finding_loss: [&m.client, &m.server]
                    .iter()
                    .map(|side| side["driver"]["tail_probes_finding_loss"].as_u64())
                    .sum(),
                latencies_us: latencies(&m.client),
            });
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let mut targets = Vec::new();
    for (config, _, stacks) in E16_CONFIGS {
        if !stacks.contains(&Stack::QuinnTokio) {
            continue;
        }
        let r = per_round_ratios(
            &rows,
            |r| r.round,
            |r| r.stack == "soft" && r.config == config,
            |r| r.stack == "quinn-tokio" && r.config == config,
            |r| r.p99_us,
        );
        let m = median(r);
        targets.push(TargetCheck::new(
            format!("request/response p99 at 1 % loss, RTT 200 µs, {config}: soft / quinn-tokio"),
            "≤ 0.5",
            m,
            m <= 0.5,
        ));
    }
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
        md += "1 KB requests, 10 KB responses, one connection, 1 % random loss each way, RTT 200 µs, no bottleneck. `default`: quinn's transport defaults (a peer may delay an ACK by up to 25 ms, which enters every probe timeout); `ack-delay-1ms`: each end asks its peer to ACK within 1 ms (quinn-proto's ACK-frequency extension), a promise only a runtime with fine timers keeps; `no-tail-probe`: the defaults with the soft-timer driver's tail-loss probe off (a PING two smoothed RTTs after the last data or ACK while data is unacknowledged, which the peer acknowledges at once when it arrives after a gap, so that quinn's loss detection finds a lost last packet in about an RTT instead of after its probe timeout). `soft-1ms` is the soft-timer loop with every quinn timer rounded up to 1 ms as tokio's wheel rounds. Timer lateness is the server runtime's: when it handled a quinn timer against the deadline quinn set (stock quinn's measured through a wrapper around its tokio timers). Tail probes are both sides', with those that found a loss (quinn declared a packet lost before it next sent data) in brackets; the others met a peer that was only delaying its ACK. Medians over rounds with [min, max].\n\n| config | stack | p50 (µs) | p99 (µs) | p99.9 (µs) | timers handled | timer late p50 (µs) | p99 (µs) | tail probes (finding a loss) |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        let keys = distinct(&self.rows, |r| (r.config.clone(), r.stack.clone()));
        for (config, stack) in &keys {
            let col = |g: fn(&E16Row) -> f64, digits: usize| {
                spread(
                    self.rows
                        .iter()
                        .filter(|r| &r.config == config && &r.stack == stack)
                        .map(g)
                        .collect(),
                    digits,
                )
            };
            let _ = writeln!(
                md,
                "| {config} | {stack} | {} | {} | {} | {} | {} | {} | {} |",
                col(|r| r.p50_us, 0),
                col(|r| r.p99_us, 0),
                col(|r| r.p999_us, 0),
                col(|r| r.timeouts, 0),
                col(|r| r.timer_late_p50_us, 1),
                col(|r| r.timer_late_p99_us, 1),
                if stack == "quinn-tokio" {
                    "-".to_string()
                } else {
                    let median_of = |g: fn(&E16Row) -> Option<u64>| {
                        median(
                            self.rows
                                .iter()
                                .filter(|r| &r.config == config && &r.stack == stack)
                                .map(|r| g(r).map_or(f64::NAN, |n| n as f64))
                                .collect(),
                        )
                    };
                    format!(
                        "{} ({})",
                        num(median_of(|r| r.tail_probes), 0),
                        num(median_of(|r| r.tail_probes_finding_loss), 0)
                    )
                }
            );
        }
        let plot = "e16_latency_cdf.png";
        let series: Vec<Series> = self
            .rows
            .iter()
            .filter(|r| r.round == 0)
            .map(|r| cdf_series(format!("{}, {}", r.stack, r.config), &r.latencies_us))
            .collect();
        latency_cdf_chart(&dir.join(plot), "Request latency CDF (round 0)", series)?;
        let _ = writeln!(md, "\n![latency CDF]({plot})\n");
        md += &targets_table(&self.targets);
        Ok(Rendered {
            markdown: md,
            plots: vec![plot.into()],
        })
    }
}

/// A latency CDF's line: latencies in ms against the fraction of requests at or below.
fn cdf_series(label: String, latencies_us: &[f64]) -> Series {
    let mut v = latencies_us.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len().max(1) as f64;
    Series {
        label,
        points: v
            .iter()
            .enumerate()
            .map(|(i, &x)| (x / 1000.0, (i + 1) as f64 / n))
            .collect(),
    }
}

/// Draws latency CDFs, the x axis cut at 50 ms (a timeout's tail would squeeze the rest).
fn latency_cdf_chart(path: &Path, title: &str, series: Vec<Series>) -> Result<()> {
    let x_max = largest(&series, Axis::X, 1.0);
    line_chart(
        path,
        &LineChart {
            title,
            x_label: "latency (ms)",
            y_label: "fraction of requests",
            x_range: (0.0, x_max.min(50.0)),
            y_range: (0.0, 1.0),
            series,
        },
    )
}

/// Runs, for the progress estimate: (quic, e14, e16) seconds.
pub fn expected_seconds(step: &str, quick: bool) -> f64 {
    // Making the path, starting the server, the handshake, stopping.
    let per_run = 1.2;
    match step {
        "quic" => {
            // One bulk run: its transfer, a few RTTs of start and end, the fixed cost.
            let bulk_run = |b: &Bulk| {
                let transfer = if quick { 0.6 } else { b.expected_s };
                transfer + b.rtt().as_secs_f64() * 10.0 + per_run
            };
            let scenarios = bulks(quick);
            let bulk = scenarios
                .iter()
                .map(|b| bulk_run(b) * bulk_stacks(b).len() as f64)
                .sum::<f64>();
            // The variants run in the first scenario only.
            let variants = PACING_VARIANTS.len() as f64 * bulk_run(&scenarios[0]);
            let rr = RR_STACKS.len() as f64 * (per_run + rr_requests(quick) as f64 * 0.0008);
            // The bursts, the thinned-ACK download, and the warm-up, idle second and
            // transfer after idle.
            let timer = TIMER_STACKS.len() as f64
                * (timer_runs(quick).len() as f64 * per_run
                    + if quick {
                        0.6 + 0.5 + 1.6
                    } else {
                        2.0 + 2.0 + 1.6
                    });
            (bulk + variants + rr + timer) * rounds(quick) as f64
                + bottleneck::expected_seconds(quick, rounds(quick))
        }
        "e14" => (0..rounds(quick))
            .flat_map(|r| e14_round_sizes(quick, r))
            .map(|n| 3.0 * e14_run_seconds(n))
            .sum(),
        _ => (e16_runs() * rounds(quick)) as f64 * (per_run + rr_requests(quick) as f64 * 0.0008),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_scenarios_cover_the_matrix_under_their_row_names() {
        let names: Vec<String> = bulks(false).iter().map(Bulk::name).collect();
        assert_eq!(
            names,
            [
                "bulk-50M-20ms-0.25bdp",
                "bulk-50M-20ms-1bdp",
                "bulk-50M-1ms-0.25bdp",
                "bulk-50M-1ms-1bdp",
                "bulk-500M-1ms-1bdp",
                "bulk-500M-1ms-0.25bdp",
                "bulk-500M-20ms-0.25bdp",
                "bulk-500M-20ms-1bdp",
            ]
        );
        assert_eq!(bulks(true)[0].name(), BULK_50M_SMALL_QUEUE);
        let b = &bulks(false)[4];
        assert_eq!(
            (b.rate(), b.rate_bps(), b.rtt()),
            ("500M".to_string(), 500e6, Duration::from_millis(1))
        );
    }
}
