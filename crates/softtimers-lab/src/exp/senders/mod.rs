//! Paced UDP senders against `iperf3 -u`, as a cost frontier: one flow at 100 Mbit/s, sent
//! by every setting of `softtimers pace` (spin window none or calibrated, 1 to 8 datagrams
//! per wake-up as one GSO send or one `sendmmsg`, a named precision, a periodic timerfd) and
//! of `iperf3 -u -b` (its default 1 ms pacing timer, `--pacing-timer 100` and `10`), one at
//! a time, the same observer measuring every one. Each setting is a point (sender CPU,
//! inter-arrival stddev at the observer); [`crate::frontier`] says which are on the frontier
//! and which soft-timer `pace` setting beats each iperf3 one on both axes. [`settings`] lists
//! them (the `setting` module: each one's name and command line); the `verdict` module places
//! the rows, states the targets and renders the section with its frontier plot.
//!
//! Every program is a child process pinned with `taskset`: the sender on CPU 1, its receiver
//! and the observer on CPU 0. The receiver is the sender's own (iperf3's server for iperf3,
//! `softtimers sink --listen` for pace, both blocking in a receive call); the observer is
//! `softtimers sink --observe`, a capture of the port with the kernel's receive timestamps,
//! so that both tools' packets are timed by the same code and the same clock. The sender's
//! CPU time is `getrusage(RUSAGE_CHILDREN)` around waiting for it: its whole CPU time, all
//! threads and idle spinning included, measured alike for both tools.
//!
//! Two paths: loopback, and (as root) a veth pair between two network namespaces with a
//! 1 Gbit/s `tbf` on the sender's end ([`softtimers_tools::netns`]), made for this step and removed
//! after it. Without root the veth path is skipped and the section says so.
//!
//! A burst is a run of datagrams closer than a quarter of the target interval; B is
//! Kobayashi's burstiness index against a constant bottleneck 10 % faster than the target
//! rate ([`BOTTLENECK_HEADROOM`]), RTT 100 ms.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde::{Deserialize, Serialize};
use softtimer_net::Rate;

use crate::harness::{CLIENT_CPU, ExpOptions, interleaved, read_json, waited_children_cpu_ns};
use crate::report::StepResult;
use crate::summary::{median, range};
use softtimers_tools::netns::{End, VethLink};
use softtimers_tools::pace::{PaceReport, SinkReport};
use softtimers_tools::process as tools;

mod setting;
mod verdict;
pub use setting::{PaceSetting, Setting, Spin, Tool, settings};
use verdict::{checks, place_on_frontier};

/// The rate every sender is asked for (the figure the targets name).
pub const RATE: &str = "100M";
/// UDP payload bytes per datagram.
pub const SIZE: usize = 1472;
/// The burstiness index's virtual bottleneck runs this much faster than the target rate: at
/// exactly the rate its queue is critically loaded, grows with any drift of the mean rate,
/// and B would measure drift rather than bursts.
pub const BOTTLENECK_HEADROOM: f64 = 1.1;
/// The CPU every sender is pinned to (its receiver and the observer take the other).
const SENDER_CPU: usize = 1;

/// Where the packets go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetPath {
    /// Loopback in this namespace.
    Loopback,
    /// A veth pair between two namespaces, with a 1 Gbit/s tbf on the sender's end.
    Veth,
}

impl NetPath {
    /// The name in tables.
    pub fn name(self) -> &'static str {
        match self {
            NetPath::Loopback => "loopback",
            NetPath::Veth => "veth",
        }
    }
}

/// The programs this step runs, and where.
struct Network<'a> {
    exe: PathBuf,
    iperf3: Option<PathBuf>,
    veth: Option<&'a VethLink>,
}

impl Network<'_> {
    fn command(&self, path: NetPath, end: End, cpu: usize, program: &Path) -> Command {
        let mut command = match (path, self.veth) {
            (NetPath::Veth, Some(link)) => link.command(end, "taskset"),
            _ => Command::new("taskset"),
        };
        command
            .args(["-c", &cpu.to_string()])
            .arg(program)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command
    }

    fn destination(&self, path: NetPath) -> (IpAddr, String) {
        match (path, self.veth) {
            (NetPath::Veth, Some(link)) => (
                IpAddr::V4(link.receiver_addr),
                link.receiver_interface().to_string(),
            ),
            _ => (IpAddr::from([127, 0, 0, 1]), "lo".to_string()),
        }
    }
}

/// What a sender is asked to send.
#[derive(Clone, Copy, Debug)]
pub struct SendSpec {
    /// The rate.
    pub rate: Rate,
    /// UDP payload bytes per datagram.
    pub size: usize,
    /// How long, whole seconds (iperf3's `-t`).
    pub seconds: u64,
    /// The RTT the burstiness index is normalised by.
    pub rtt: Duration,
}

impl SendSpec {
    /// The figure the targets name: 100 Mbit/s of 1472 B datagrams, B over a 100 ms RTT.
    fn standard(seconds: u64) -> SendSpec {
        SendSpec {
            rate: RATE.parse().expect("a rate"),
            size: SIZE,
            seconds,
            rtt: Duration::from_millis(100),
        }
    }
}

/// What one sender run measured.
#[derive(Clone, Debug)]
struct SenderRun {
    sink: SinkReport,
    sent: u64,
    cpu_ns: u64,
    seconds: f64,
}

/// One sender, its receiver and the observer, on `path`.
fn run_sender(
    net: &Network<'_>,
    path: NetPath,
    setting: &Setting,
    spec: &SendSpec,
    port: u16,
    dir: &Path,
) -> Result<SenderRun> {
    // Children start at the stock timer slack (see `StockTimerSlack`).
    let _stock_slack = softtimers_tools::cpu::stock_timer_slack();
    let interval_ns = spec.rate.ticks_for_bytes(spec.size as u64, 1_000_000_000);
    let bottleneck = (spec.rate.bits_per_sec() as f64 * BOTTLENECK_HEADROOM) as u64;
    let (to, interface) = net.destination(path);
    let observed = dir.join(format!("observed-{port}.json"));
    let sent_json = dir.join(format!("sent-{port}.json"));
    let limit = format!("{}s", spec.seconds + 20);
    let mut observer = net
        .command(path, End::Receiver, CLIENT_CPU, &net.exe)
        .args(["sink", "--observe", &port.to_string(), "--interface"])
        .arg(&interface)
        .args(["--duration", &limit, "--idle", "250ms", "--rtt"])
        .arg(format!("{}us", spec.rtt.as_micros()))
        .args(["--bottleneck", &bottleneck.to_string(), "--burst-gap"])
        .arg(format!("{}ns", interval_ns / 4))
        // A GSO send is one packet to a capture on loopback (segmented only on the way to
        // the receiving socket): counted as the datagrams the socket gets.
        .args(["--gso-segment", &spec.size.to_string()])
        .arg("--json")
        .arg(&observed)
        .spawn()
        .context("starting the observer")?;
    let is_iperf3 = setting.tool() == Tool::Iperf3;
    let receiver = if is_iperf3 {
        match net.iperf3.as_deref() {
            Some(iperf3) => net
                .command(path, End::Receiver, CLIENT_CPU, iperf3)
                .args(["-s", "-1", "-p", &port.to_string()])
                .spawn(),
            None => Err(std::io::Error::other("iperf3 is not installed")),
        }
    } else {
        net.command(path, End::Receiver, CLIENT_CPU, &net.exe)
            .args(["sink", "--listen", &format!("0.0.0.0:{port}")])
            .args(["--duration", &limit, "--idle", "250ms"])
            .spawn()
    };
    let mut receiver = match receiver {
        Ok(r) => r,
        Err(e) => {
            softtimers_tools::process::kill(&mut observer);
            return Err(anyhow!(e).context("starting the receiver"));
        }
    };
    // Both bind or capture within a few milliseconds of starting.
    std::thread::sleep(Duration::from_millis(150));
    let program = if is_iperf3 {
        net.iperf3.clone().expect("checked above")
    } else {
        net.exe.clone()
    };
    let cpu_before = waited_children_cpu_ns();
    let started = std::time::Instant::now();
    let sent = net
        .command(path, End::Sender, SENDER_CPU, &program)
        .args(setting.args(to, port, spec, &sent_json))
        .spawn()
        .context("starting the sender")
        .and_then(|child| softtimers_tools::process::finish(child, &setting.label()));
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_ns = waited_children_cpu_ns().saturating_sub(cpu_before);
    if let Err(e) = sent {
        softtimers_tools::process::kill(&mut receiver);
        softtimers_tools::process::kill(&mut observer);
        return Err(e);
    }
    let received = softtimers_tools::process::finish(receiver, "the receiver");
    softtimers_tools::process::finish(observer, "the observer")?;
    received?;
    // A sink cut short by a receive error exits failing (after writing its report), which
    // `finish` above has reported.
    let sink: SinkReport = read_json(&observed)?;
    let sent = if is_iperf3 {
        let report: serde_json::Value = read_json(&sent_json)?;
        report["end"]["sum"]["packets"]
            .as_u64()
            .ok_or_else(|| anyhow!("iperf3's report has no end.sum.packets"))?
    } else {
        read_json::<PaceReport>(&sent_json)?.packets
    };
    let _ = std::fs::remove_file(&observed);
    let _ = std::fs::remove_file(&sent_json);
    Ok(SenderRun {
        sink,
        sent,
        cpu_ns,
        seconds: elapsed,
    })
}

/// One row: one setting of one sender on one link, medians over rounds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SenderRow {
    /// Where the packets went.
    pub link: NetPath,
    /// Who sent them.
    pub sender: Tool,
    /// The setting's name (unique within a sender).
    pub setting: String,
    /// The setting itself.
    pub options: Setting,
    /// Receive rate at the observer, bit/s.
    #[serde(deserialize_with = "crate::summary::num")]
    pub rate_bps: f64,
    /// Datagrams the sender sent (first round).
    pub packets: u64,
    /// Datagrams sent but not observed, summed over rounds.
    pub lost: u64,
    /// The sender's CPU time over its run, % of one core.
    #[serde(deserialize_with = "crate::summary::num")]
    pub cpu_pct: f64,
    /// The sender's CPU time per datagram, ns.
    #[serde(deserialize_with = "crate::summary::num")]
    pub cpu_ns_per_packet: f64,
    /// Mean inter-arrival time at the observer, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub interarrival_mean_us: f64,
    /// Its standard deviation, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub interarrival_stddev_us: f64,
    /// Its smallest and largest value over rounds.
    #[serde(deserialize_with = "crate::summary::num_pair")]
    pub interarrival_stddev_range: (f64, f64),
    /// 99th percentile inter-arrival time, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub interarrival_p99_us: f64,
    /// Gaps over 1 ms at the observer, summed over rounds (on a shared machine, mostly the
    /// sender's CPU taken away by the host).
    #[serde(default)]
    pub gaps_over_1ms: u64,
    /// The longest run of datagrams closer than a quarter of the target interval.
    #[serde(deserialize_with = "crate::summary::num")]
    pub longest_burst: f64,
    /// Kobayashi's B against a constant bottleneck 10 % above the target rate.
    #[serde(deserialize_with = "crate::summary::num")]
    pub burstiness_index: f64,
    /// Whether no other row on its link is as cheap and as precise with one of the two
    /// strictly better (CPU %, inter-arrival stddev).
    #[serde(default)]
    pub on_frontier: bool,
    /// For an iperf3 row: the cheapest soft-timer `pace` setting on its link that beats it on
    /// both axes.
    #[serde(default)]
    pub beaten_by: Option<String>,
}

impl SenderRow {
    /// The row as a point on the cost frontier: (CPU %, inter-arrival stddev µs).
    pub fn point(&self) -> (f64, f64) {
        (self.cpu_pct, self.interarrival_stddev_us)
    }
}

/// An iperf3 setting that no soft-timer `pace` setting beat on both axes on its link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Unbeaten {
    /// The link.
    pub link: NetPath,
    /// The iperf3 setting's name.
    pub setting: String,
}

/// The step's result (`senders.json`).
pub type Senders = StepResult<SenderRow, SendersExtra>;

/// What `senders` records beside its rows: how the senders ran, and the frontier's verdict.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SendersExtra {
    /// Interleaved rounds.
    pub rounds: usize,
    /// Seconds each sender sends.
    pub seconds: u64,
    /// The target rate, bit/s.
    pub rate_bps: u64,
    /// Datagram payload, bytes.
    pub size: usize,
    /// The veth link's qdisc, or why the veth path did not run.
    pub veth: String,
    /// Why iperf3's rows are missing, if they are.
    pub iperf3_missing: Option<String>,
    /// The iperf3 settings not beaten on both axes (CPU, inter-arrival stddev) by some
    /// soft-timer `pace` setting on the same link: empty when every one is.
    #[serde(default)]
    pub frontier_dominated: Vec<Unbeaten>,
}

impl SendersExtra {
    fn new(rounds: usize, seconds: u64, veth: String, iperf3_missing: Option<String>) -> Self {
        SendersExtra {
            rounds,
            seconds,
            rate_bps: RATE.parse::<Rate>().expect("a rate").bits_per_sec(),
            size: SIZE,
            veth,
            iperf3_missing,
            frontier_dominated: Vec::new(),
        }
    }
}

/// Seconds each sender sends.
pub fn seconds(quick: bool) -> u64 {
    if quick { 1 } else { 2 }
}

/// Rounds.
pub fn rounds(quick: bool) -> usize {
    if quick { 1 } else { 2 }
}

/// How long the step runs: every setting on both links, `rounds` times, each its sending
/// time and about 0.65 s of starting and draining its receiver and observer.
pub fn expected(quick: bool) -> Duration {
    let each = Duration::from_secs(seconds(quick)) + Duration::from_millis(650);
    each * (2 * settings(quick).len() * rounds(quick)) as u32
}

/// Why the observer cannot capture here, if it cannot: an `AF_PACKET` capture needs
/// `CAP_NET_RAW`, which root has.
pub fn capture_unavailable() -> Option<String> {
    (!rustix::process::geteuid().is_root()).then(|| {
        "the observer (`sink --observe`, a packet capture) needs root (CAP_NET_RAW)".to_string()
    })
}

/// Runs `configs` `rounds` times, interleaved; the runs per configuration.
fn run_interleaved(
    net: &Network<'_>,
    configs: &[(NetPath, Setting)],
    spec: &SendSpec,
    rounds: usize,
    progress: &mut dyn FnMut(f64, &str),
) -> Result<Vec<Vec<SenderRun>>> {
    let dir = std::env::temp_dir().join(format!("softtimers-senders-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut port = FIRST_PORT;
    let runs = interleaved(
        rounds,
        configs,
        progress,
        |(path, setting)| {
            let tool = setting.tool().name();
            format!("{tool} {}, {}", setting.label(), path.name())
        },
        |(path, setting)| {
            port = next_free_port(port);
            run_sender(net, *path, setting, spec, port, &dir)
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
    runs
}

/// The receivers' ports: below the kernel's ephemeral range (32768 and up by default), so that
/// no client socket of another step holds one.
const FIRST_PORT: u16 = 27_000;
const LAST_PORT: u16 = 27_900;

/// The port after `port` (wrapping within the range) that TCP and UDP can both bind now:
/// iperf3 listens on both.
fn next_free_port(port: u16) -> u16 {
    let free = |p: u16| {
        std::net::TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, p)).is_ok()
            && std::net::UdpSocket::bind((std::net::Ipv4Addr::UNSPECIFIED, p)).is_ok()
    };
    let mut p = port;
    for _ in FIRST_PORT..=LAST_PORT {
        p = if p >= LAST_PORT { FIRST_PORT } else { p + 1 };
        if free(p) {
            return p;
        }
    }
    p
}

/// The soft pacer (its spin window calibrated) and (where installed) `iperf3 -u` at a
/// constant `spec.rate` on loopback, one row each, medians of `rounds`: E8's constant-rate
/// comparison. Without iperf3, its row is missing and the reason is returned.
pub fn constant_rate_rows(
    spec: &SendSpec,
    rounds: usize,
    progress: &mut dyn FnMut(f64, &str),
) -> Result<(Vec<SenderRow>, Option<String>)> {
    if let Some(why) = capture_unavailable() {
        return Ok((Vec::new(), Some(why)));
    }
    let iperf3 = tools::require("iperf3", "iperf3");
    let missing = iperf3.as_ref().err().map(|e| format!("{e:#}"));
    tools::require("taskset", "util-linux")?;
    let net = Network {
        exe: std::env::current_exe().context("finding the softtimers binary")?,
        iperf3: iperf3.ok(),
        veth: None,
    };
    let soft = Setting::Pace(PaceSetting {
        spin: Spin::Calibrated,
        ..PaceSetting::DEFAULT
    });
    let mut configs = vec![(NetPath::Loopback, soft)];
    if net.iperf3.is_some() {
        configs.push((NetPath::Loopback, Setting::IPERF3_DEFAULT));
    }
    let runs = run_interleaved(&net, &configs, spec, rounds, progress)?;
    let rows = configs
        .iter()
        .zip(&runs)
        .map(|(&(path, setting), runs)| row(path, setting, runs))
        .collect();
    Ok((rows, missing))
}

/// Runs every setting of every sender on loopback and (as root) over veth, interleaved,
/// `rounds` times, and places them on the cost frontier.
pub fn senders(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<Senders> {
    let quick = options.length.quick;
    let (seconds, rounds) = (seconds(quick), rounds(quick));
    if let Some(why) = capture_unavailable() {
        return Ok(Senders::skipped(
            options.length.mode(),
            why,
            SendersExtra::new(rounds, seconds, String::new(), None),
        ));
    }
    let exe = std::env::current_exe().context("finding the softtimers binary")?;
    let iperf3 = tools::require("iperf3", "iperf3");
    let iperf3_missing = iperf3.as_ref().err().map(|e| format!("{e:#}"));
    tools::require("taskset", "util-linux")?;
    let link = VethLink::create("snd");
    let veth = match &link {
        Ok(l) => l.qdisc.clone(),
        Err(e) => format!("skipped: {e:#}"),
    };
    if let Err(e) = &link {
        progress(0.0, &format!("the veth link cannot run here: {e:#}"));
    }
    let net = Network {
        exe,
        iperf3: iperf3.ok(),
        veth: link.as_ref().ok(),
    };
    let spec = SendSpec::standard(seconds);
    let mut configs = Vec::new();
    for path in [NetPath::Loopback, NetPath::Veth] {
        if path == NetPath::Veth && net.veth.is_none() {
            continue;
        }
        for setting in settings(quick) {
            if setting.tool() == Tool::Iperf3 && net.iperf3.is_none() {
                continue;
            }
            configs.push((path, setting));
        }
    }
    let runs = run_interleaved(&net, &configs, &spec, rounds, progress)?;
    let mut rows: Vec<SenderRow> = configs
        .iter()
        .zip(&runs)
        .map(|(&(path, setting), runs)| row(path, setting, runs))
        .collect();
    let mut extra = SendersExtra::new(rounds, seconds, veth, iperf3_missing);
    extra.frontier_dominated = place_on_frontier(&mut rows);
    let targets = checks(&rows, &configs, &runs);
    Ok(Senders::ran(options.length.mode(), extra, rows, targets))
}

fn row(path: NetPath, setting: Setting, runs: &[SenderRun]) -> SenderRow {
    let med = |f: &dyn Fn(&SenderRun) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    let stddevs: Vec<f64> = runs.iter().map(|r| r.sink.interarrival_stddev_us).collect();
    SenderRow {
        link: path,
        sender: setting.tool(),
        setting: setting.label(),
        options: setting,
        rate_bps: med(&|r| r.sink.rate_bps),
        packets: runs.first().map_or(0, |r| r.sent),
        lost: runs
            .iter()
            .map(|r| r.sent.saturating_sub(r.sink.packets))
            .sum(),
        cpu_pct: med(&|r| r.cpu_ns as f64 / (r.seconds * 1e9) * 100.0),
        cpu_ns_per_packet: med(&|r| r.cpu_ns as f64 / r.sent.max(1) as f64),
        interarrival_mean_us: med(&|r| r.sink.interarrival_mean_us),
        interarrival_stddev_us: median(&stddevs),
        interarrival_stddev_range: range(&stddevs),
        interarrival_p99_us: med(&|r| r.sink.interarrival_p99_us),
        gaps_over_1ms: runs.iter().map(|r| r.sink.gaps_over_1ms).sum(),
        longest_burst: med(&|r| r.sink.longest_burst as f64),
        burstiness_index: med(&|r| r.sink.burstiness_index.unwrap_or(f64::NAN)),
        on_frontier: false,
        beaten_by: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_in_use_is_skipped_and_the_range_wraps() {
        // Held here (or by someone else, if this bind fails): either way it is in use.
        let _held = std::net::UdpSocket::bind((std::net::Ipv4Addr::UNSPECIFIED, 27_500));
        let p = next_free_port(27_499);
        assert_ne!(p, 27_500);
        assert!((FIRST_PORT..=LAST_PORT).contains(&p), "{p}");
        let wrapped = next_free_port(LAST_PORT);
        assert!((FIRST_PORT..LAST_PORT).contains(&wrapped), "{wrapped}");
    }
}
