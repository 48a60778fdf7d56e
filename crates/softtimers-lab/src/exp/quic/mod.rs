//! QUIC on soft timers against stock quinn on tokio and the kernel's TCP, through the path
//! emulator: bulk transfers behind a bottleneck (`quic`), response time after idle with
//! slow-start restart against rate-based clocking (E14, the soft-timers paper's Tables X–XI), and
//! request/response under random loss with the recovery timers each runtime took (E16).
//!
//! Every run makes a fresh path (namespaces `a` and `b`, the emulator pinned to CPU 0), runs
//! `softtimers quic server` in `b` (pinned to CPU 1) and `softtimers quic client` in `a`
//! (CPU 0), each writing its JSON, and reads back the emulator's own record.

mod e14;
mod e16;
mod loopback;
mod matrix;
mod matrix_report;
mod scenarios;

pub use e14::{E14, E14Row, e14};
pub use e16::{E16, E16Row, e16};
pub use loopback::LOOPBACK_RR;
pub use matrix::{QuicResult, QuicRow, quic};

use serde::{Deserialize, Serialize};
use softtimer_quic::perf::ClientReport;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use softtimer_net::path::{LinkConfig, QueueLimit};
use softtimer_rt::SpinWindow;
use softtimers_tools::path::{ADDR_B, EmulatorOptions, PathReport, PathSpec, RunningPath, Side};
use softtimers_tools::process as tools;
use softtimers_tools::quic::{ClientRun, DriverSide, ServerRun, Stack};

use crate::exp::bottleneck;
use crate::harness::{ExpOptions, pin_process, read_json};
use crate::plot::{Axis, LineChart, Series, largest, line_chart};
use crate::report::StepResult;

use e14::*;
use e16::*;
use matrix::*;
use scenarios::*;

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

/// What one run measured: the client's and the server's reports, read back from the JSON
/// files `softtimers quic` wrote into the very types it wrote, and the emulator's own.
struct Measured {
    client: ClientRun,
    server: ServerRun,
    path: PathReport,
}

impl Measured {
    /// The server runtime's figure `g`; NaN where the stack has no QUIC runtime to say it
    /// (kernel TCP) or the runtime does not count it (stock quinn's sends and spin).
    fn server_driver(&self, g: impl Fn(&DriverSide) -> Option<f64>) -> f64 {
        self.server.driver.as_ref().and_then(g).unwrap_or(f64::NAN)
    }

    /// Both sides' figure `g` added up; `None` where either side does not count it.
    fn both_drivers(&self, g: impl Fn(&DriverSide) -> Option<u64>) -> Option<u64> {
        [&self.client.driver, &self.server.driver]
            .into_iter()
            .map(|side| side.as_ref().and_then(&g))
            .sum()
    }
}

fn run_once(run: &Run<'_>, tmp: &Path) -> Result<Measured> {
    // Children start at the stock timer slack (see `StockTimerSlack`).
    let _stock_slack = softtimers_tools::cpu::stock_timer_slack();
    let exe = std::env::current_exe().context("finding the softtimers binary")?;
    let path = RunningPath::start_with(
        "q",
        run.spec,
        EmulatorOptions {
            cpu: Some(EMULATOR_CPU),
            seed: run.seed,
            spin: SpinWindow::Calibrated,
            ..EmulatorOptions::default()
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
    let (client_result, server_result) = finish_client_and_server(client, server, CLIENT_CPU)?;
    let report = path.finish()?;
    client_result?;
    server_result?;
    Ok(Measured {
        client: read_json(&client_json)?,
        server: read_json(&server_json)?,
        path: report,
    })
}

/// Waits for a quic client (started, or not, by the caller; pinned here to `cpu`) and then
/// for its server, which is killed once the client has failed: both results, the client's
/// first. Where the client did not start, the server is killed and that error returned.
fn finish_client_and_server(
    client: Result<Child>,
    mut server: Child,
    cpu: usize,
) -> Result<(Result<()>, Result<()>)> {
    let client = client.inspect_err(|_| tools::kill(&mut server))?;
    pin_process(client.id(), cpu);
    let client_result = tools::finish(client, "the quic client");
    if client_result.is_err() {
        let _ = server.kill();
    }
    Ok((client_result, tools::finish(server, "the quic server")))
}

/// A path whose data flows from `b` to `a` (the server's downloads) through `data`, the
/// acknowledgements back through `acks`.
fn downloads(data: LinkConfig, acks: LinkConfig) -> PathSpec {
    PathSpec {
        a_to_b: acks,
        b_to_a: data,
    }
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
    softtimers_tools::netns::check_available()
        .err()
        .map(|e| e.to_string())
}

/// How a step begins: its mode (`quick` or `full`) and its scratch directory (made), or
/// the step's result saying why it cannot run here.
fn begin<R, E: Default>(
    options: &ExpOptions,
    step: &str,
) -> Result<std::result::Result<(String, PathBuf), StepResult<R, E>>> {
    let mode = options.length.mode();
    if let Some(why) = cannot_run() {
        return Ok(Err(StepResult::skipped(mode, why, E::default())));
    }
    let tmp = options.out.join(format!("{step}-tmp"));
    std::fs::create_dir_all(&tmp)?;
    Ok(Ok((mode.to_string(), tmp)))
}

/// `items` rotated left by `round`: rounds interleave the arms, rather than run one always
/// first.
fn rotated<T: Copy>(items: &[T], round: usize) -> impl Iterator<Item = T> + '_ {
    (0..items.len()).map(move |i| items[(i + round) % items.len()])
}

/// The median of the finite values (NaN for none).
fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    crate::summary::median(&v)
}

/// The emulator's loss seed for a round.
fn round_seed(round: usize) -> u64 {
    0x5eed_0000 + round as u64
}

fn rounds(quick: bool) -> usize {
    if quick { 1 } else { 3 }
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

/// A request's latency, µs, as the perf client measured it (each `null` in JSON where it
/// measured nothing).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p50_us: f64,
    /// 99th percentile.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p99_us: f64,
    /// 99.9th percentile.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p999_us: f64,
}

impl Latency {
    /// The client's latency percentiles.
    pub fn of(client: &ClientReport) -> Latency {
        Latency {
            p50_us: client.p50_us,
            p99_us: client.p99_us,
            p999_us: client.p999_us,
        }
    }
}

/// Runs, for the progress estimate: (quic, e14, e16) seconds.
pub fn expected_seconds(step: &str, quick: bool) -> f64 {
    // Making the path, starting the server, the handshake, stopping: about 0.2 s
    // (measured, as the other figures here, on the 2-core machine the lab was built on).
    let per_run = 0.2;
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
                        2.7 + 2.2 + 1.5
                    });
            let loopback =
                loopback::LOOPBACK_STACKS.len() as f64 * (per_run + loopback::LOOPBACK_RUN_S);
            (bulk + variants + rr + timer + loopback) * rounds(quick) as f64
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
    use super::rotated;

    #[test]
    fn each_round_starts_with_the_next_arm() {
        let arms = ['a', 'b', 'c'];
        assert_eq!(rotated(&arms, 0).collect::<String>(), "abc");
        assert_eq!(rotated(&arms, 1).collect::<String>(), "bca");
        assert_eq!(rotated(&arms, 4).collect::<String>(), "bca");
    }
}
