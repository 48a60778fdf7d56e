//! Paced UDP senders against `iperf3 -u`, as a cost frontier: one flow at 100 Mbit/s, sent
//! by every setting of `softtimers pace` (spin window none or calibrated, 1 to 8 datagrams
//! per wake-up as one GSO send or one `sendmmsg`, a named precision, a periodic timerfd) and
//! of `iperf3 -u -b` (its default 1 ms pacing timer, `--pacing-timer 100` and `10`), one at
//! a time, the same observer measuring every one. Each setting is a point (sender CPU,
//! inter-arrival stddev at the observer); [`crate::frontier`] says which are on the frontier
//! and which `pace` setting beats each iperf3 one on both axes ([`setting`] lists them).
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

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde::{Deserialize, Serialize};
use softtimer_net::Rate;

use crate::frontier;
use crate::harness::{CLIENT_CPU, ExpOptions, interleaved, read_json, waited_children_cpu_ns};
use crate::plot::{Axis, LineChart, Series, largest, line_chart};
use crate::report::{Rendered, Section, StepResult};
use crate::summary::{median, paired_ratios, range};
use crate::targets::TargetCheck;
use softtimers_tools::netns::{End, VethLink};
use softtimers_tools::pace::{PaceReport, SinkReport};
use softtimers_tools::process as tools;

mod setting;
pub use setting::{PaceSetting, Setting, Spin, Tool, settings};

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
        .args(["--duration", &limit, "--idle", "500ms", "--rtt"])
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
            .args(["--duration", &limit, "--idle", "500ms"])
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
    std::thread::sleep(Duration::from_millis(400));
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
/// time and about a second and a half of starting and draining its receiver and observer.
pub fn expected(quick: bool) -> Duration {
    let each = Duration::from_secs(seconds(quick)) + Duration::from_millis(1_400);
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

/// Marks each row's place on its link's frontier (CPU %, inter-arrival stddev), names the
/// cheapest soft-timer `pace` setting beating each iperf3 row (`pace --timer timerfd` is the
/// baseline, not the claim), and returns the iperf3 settings none beats.
fn place_on_frontier(rows: &mut [SenderRow]) -> Vec<Unbeaten> {
    let mut unbeaten = Vec::new();
    for link in [NetPath::Loopback, NetPath::Veth] {
        let on_link: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].link == link).collect();
        let points: Vec<(f64, f64)> = on_link.iter().map(|&i| rows[i].point()).collect();
        for k in frontier::frontier(&points) {
            rows[on_link[k]].on_frontier = true;
        }
        for (k, &i) in on_link.iter().enumerate() {
            if rows[i].sender != Tool::Iperf3 {
                continue;
            }
            let beater =
                frontier::cheapest_beating(&points, k, |j| rows[on_link[j]].options.is_soft());
            rows[i].beaten_by = beater.map(|j| rows[on_link[j]].setting.clone());
            if rows[i].beaten_by.is_none() {
                unbeaten.push(Unbeaten {
                    link,
                    setting: rows[i].setting.clone(),
                });
            }
        }
    }
    unbeaten
}

/// The targets, per link: every iperf3 setting beaten on both axes by a `pace` setting (on
/// the medians); and `pace`'s default never dearer per packet than its timerfd sender, at
/// equal or better stddev (medians of per-round ratios).
fn checks(
    rows: &[SenderRow],
    configs: &[(NetPath, Setting)],
    runs: &[Vec<SenderRun>],
) -> Vec<TargetCheck> {
    let series = |path: NetPath, setting: Setting, f: &dyn Fn(&SenderRun) -> f64| {
        configs
            .iter()
            .position(|&c| c == (path, setting))
            .map(|i| runs[i].iter().map(f).collect::<Vec<f64>>())
    };
    let stddev = |r: &SenderRun| r.sink.interarrival_stddev_us;
    let cpu_per_packet = |r: &SenderRun| r.cpu_ns as f64 / r.sent.max(1) as f64;
    let mut out = Vec::new();
    for path in [NetPath::Loopback, NetPath::Veth] {
        let iperf3: Vec<&SenderRow> = rows
            .iter()
            .filter(|r| r.link == path && r.sender == Tool::Iperf3)
            .collect();
        if !iperf3.is_empty() {
            let unbeaten = iperf3.iter().filter(|r| r.beaten_by.is_none()).count();
            out.push(TargetCheck::at_most(
                format!(
                    "iperf3 -u settings not beaten on CPU and stddev by a soft pace setting, {}",
                    path.name()
                ),
                &format!("0 of {}", iperf3.len()),
                0.0,
                unbeaten as f64,
                crate::paper::ANCHOR_IPERF3,
            ));
        }
        let (soft, timerfd) = (Setting::PACE_DEFAULT, Setting::PACE_TIMERFD);
        if let (Some(s), Some(t), Some(s_sd), Some(t_sd)) = (
            series(path, soft, &cpu_per_packet),
            series(path, timerfd, &cpu_per_packet),
            series(path, soft, &stddev),
            series(path, timerfd, &stddev),
        ) {
            out.push(TargetCheck::at_least(
                format!("CPU per paced packet, timerfd / soft, {}", path.name()),
                ">= 1",
                1.0,
                median(&paired_ratios(&t, &s)),
                crate::paper::ANCHOR_TIMERFD,
            ));
            out.push(TargetCheck::at_most(
                format!("inter-arrival stddev, soft / timerfd, {}", path.name()),
                "<= 1",
                1.0,
                median(&paired_ratios(&s_sd, &t_sd)),
                crate::paper::ANCHOR_TIMERFD,
            ));
        }
    }
    out
}

/// The frontier plot's lines: per link, `pace`'s frontier and iperf3's three settings, each
/// in order of CPU.
fn frontier_series(rows: &[SenderRow]) -> Vec<Series> {
    let mut out = Vec::new();
    for link in [NetPath::Loopback, NetPath::Veth] {
        for tool in [Tool::Pace, Tool::Iperf3] {
            let of: Vec<&SenderRow> = rows
                .iter()
                .filter(|r| r.link == link && r.sender == tool)
                .collect();
            let points: Vec<(f64, f64)> = of.iter().map(|r| r.point()).collect();
            let line: Vec<(f64, f64)> = match tool {
                Tool::Pace => frontier::frontier(&points)
                    .into_iter()
                    .map(|i| points[i])
                    .collect(),
                Tool::Iperf3 => {
                    let mut p: Vec<(f64, f64)> = points
                        .into_iter()
                        .filter(|p| p.0.is_finite() && p.1.is_finite())
                        .collect();
                    p.sort_by(|a, b| a.0.total_cmp(&b.0));
                    p
                }
            };
            if !line.is_empty() {
                let what = match tool {
                    Tool::Pace => "pace, its frontier",
                    Tool::Iperf3 => "iperf3 -u",
                };
                out.push(Series {
                    label: format!("{what}, {}", link.name()),
                    points: line,
                });
            }
        }
    }
    out
}

impl Section for Senders {
    const FILE: &'static str = "senders.json";
    fn render(&self, dir: &Path) -> Result<Rendered> {
        let mut md = match self.heading("Paced senders against iperf3 -u: the cost frontier") {
            Ok(md) => md,
            Err(not_run) => return Ok(not_run),
        };
        let _ = writeln!(
            md,
            "Each setting sends {:.0} Mbit/s of {} B datagrams for {} s, pinned to CPU {SENDER_CPU}; \
             its own receiver and a capture of the port (`softtimers sink --observe`, kernel \
             timestamps) on CPU {CLIENT_CPU}. CPU is the sender's whole CPU time \
             (`getrusage`). Bursts: datagrams closer than a quarter of the target interval. \
             B: against a constant bottleneck 10 % faster than the target rate. \
             Median of {} round(s); stddev [range]. On the frontier: no other setting on the \
             link is as cheap and as precise (CPU %, inter-arrival stddev).\n",
            self.extra.rate_bps as f64 / 1e6,
            self.extra.size,
            self.extra.seconds,
            self.extra.rounds,
        );
        let _ = writeln!(md, "veth link: {}.\n", self.extra.veth);
        if let Some(why) = &self.extra.iperf3_missing {
            let _ = writeln!(md, "iperf3 rows missing: {why}.\n");
        }
        md += "| link | sender | setting | Mbit/s | lost | CPU % | CPU per packet (µs) | inter-arrival mean (µs) | stddev (µs) [range] | p99 (µs) | gaps > 1 ms | longest burst | B | frontier |\n\
               | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
        for r in &self.rows {
            let place = match (&r.beaten_by, r.on_frontier) {
                (Some(by), _) => format!("beaten by {by}"),
                (None, true) => "on it".into(),
                (None, false) => String::new(),
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.2} | {} | {:.1} | {:.1} | {:.2} | {:.1} [{:.1}, {:.1}] | {:.1} | {} | {:.0} | {:.2e} | {place} |",
                r.link.name(),
                r.sender.name(),
                r.setting,
                r.rate_bps / 1e6,
                r.lost,
                r.cpu_pct,
                r.cpu_ns_per_packet / 1000.0,
                r.interarrival_mean_us,
                r.interarrival_stddev_us,
                r.interarrival_stddev_range.0,
                r.interarrival_stddev_range.1,
                r.interarrival_p99_us,
                r.gaps_over_1ms,
                r.longest_burst,
                r.burstiness_index,
            );
        }
        md += "\n";
        if self.extra.frontier_dominated.is_empty() {
            md += "Every iperf3 setting is beaten on both axes by a soft-timer `pace` setting.\n\n";
        } else {
            let names: Vec<String> = self
                .extra
                .frontier_dominated
                .iter()
                .map(|u| format!("{} ({})", u.setting, u.link.name()))
                .collect();
            let _ = writeln!(
                md,
                "iperf3 settings no soft-timer `pace` setting beats on both axes: {}.\n",
                names.join(", ")
            );
        }
        let series = frontier_series(&self.rows);
        let mut plots = Vec::new();
        if !series.is_empty() {
            let plot = "senders_frontier.png";
            line_chart(
                &dir.join(plot),
                &LineChart {
                    title: "Sender CPU against inter-arrival stddev, 100 Mbit/s",
                    x_label: "sender CPU (% of a core)",
                    y_label: "inter-arrival stddev (µs)",
                    x_range: (0.0, largest(&series, Axis::X, 1.0) * 1.05),
                    y_range: (0.0, largest(&series, Axis::Y, 1.0) * 1.05),
                    series,
                },
            )?;
            let _ = writeln!(md, "![frontier]({plot})\n");
            plots.push(plot.to_string());
        }
        Ok(Rendered::section(md, &self.targets, plots))
    }

    fn targets(&self) -> &[TargetCheck] {
        &self.targets
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

    fn made_up_row(link: NetPath, setting: Setting, cpu_pct: f64, stddev: f64) -> SenderRow {
        SenderRow {
            link,
            sender: setting.tool(),
            setting: setting.label(),
            options: setting,
            rate_bps: 1e8,
            packets: 100,
            lost: 0,
            cpu_pct,
            cpu_ns_per_packet: 1.0,
            interarrival_mean_us: 117.0,
            interarrival_stddev_us: stddev,
            interarrival_stddev_range: (stddev, stddev),
            interarrival_p99_us: 200.0,
            gaps_over_1ms: 0,
            longest_burst: 1.0,
            burstiness_index: 0.0,
            on_frontier: false,
            beaten_by: None,
        }
    }

    #[test]
    fn the_frontier_names_each_iperf3_setting_no_pace_setting_beats() {
        let burst = Setting::Pace(PaceSetting {
            per_wakeup: 8,
            ..PaceSetting::DEFAULT
        });
        let fine = Setting::Iperf3 {
            pacing_timer_us: Some(10),
        };
        let (lo, veth) = (NetPath::Loopback, NetPath::Veth);
        let mut rows = vec![
            made_up_row(lo, Setting::PACE_DEFAULT, 20.0, 15.0),
            made_up_row(lo, burst, 4.0, 100.0),
            made_up_row(lo, Setting::IPERF3_DEFAULT, 6.0, 300.0),
            made_up_row(lo, fine, 30.0, 30.0),
            // On veth the fine iperf3 setting is cheaper than any pace setting as precise:
            // and a pace setting on the other link does not count.
            made_up_row(veth, Setting::PACE_DEFAULT, 20.0, 15.0),
            made_up_row(veth, Setting::PACE_TIMERFD, 5.0, 10.0),
            made_up_row(veth, Setting::IPERF3_DEFAULT, 6.0, 300.0),
            made_up_row(veth, fine, 10.0, 30.0),
        ];
        let unbeaten = place_on_frontier(&mut rows);
        assert_eq!(
            unbeaten,
            vec![
                Unbeaten {
                    link: veth,
                    setting: Setting::IPERF3_DEFAULT.label(),
                },
                Unbeaten {
                    link: veth,
                    setting: fine.label(),
                },
            ]
        );
        assert_eq!(rows[2].beaten_by.as_deref(), Some(burst.label().as_str()));
        assert_eq!(
            rows[3].beaten_by.as_deref(),
            Some(Setting::PACE_DEFAULT.label().as_str())
        );
        assert!(rows[0].on_frontier && rows[1].on_frontier);
        assert!(!rows[2].on_frontier && !rows[3].on_frontier);
        // The timerfd sender beats both on veth, but it is the baseline, not the claim.
        assert!(rows[5].on_frontier && !rows[6].on_frontier && !rows[7].on_frontier);
        let checks = checks(&rows, &[], &[]);
        assert_eq!(checks.len(), 2);
        assert!(checks[0].met, "{checks:?}");
        assert!(!checks[1].met && checks[1].measured == 2.0, "{checks:?}");
        // The plot: pace's frontier and iperf3's settings, per link, in order of CPU.
        let series = frontier_series(&rows);
        assert_eq!(series.len(), 4);
        assert_eq!(series[0].points, vec![(4.0, 100.0), (20.0, 15.0)]);
        assert_eq!(series[1].points, vec![(6.0, 300.0), (30.0, 30.0)]);
        // The rows read back as written.
        let json = serde_json::to_string(&rows[3]).unwrap();
        let back: SenderRow = serde_json::from_str(&json).unwrap();
        assert_eq!(back.options, fine);
        assert_eq!(back.beaten_by, rows[3].beaten_by);
    }
}
