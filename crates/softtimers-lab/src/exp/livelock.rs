//! Receive livelock (Mogul and Ramakrishnan, Sections 6–7): E10, forwarded rate against
//! offered rate for the 4.2BSD-structured router and the polling router, without and with a
//! screening stage (Figs. 6-1, 6-3, 6-4); E11, the polling router's packet quota (Figs. 6-5,
//! 6-6); E12, the CPU left to a compute-bound process on the router's core under flood, for
//! CPU budgets of 25–100 % (Fig. 7-1).
//!
//! Every run is on a [`ForwardPath`] the step makes and removes: a source namespace floods
//! minimum-size UDP datagrams (`softtimers flood`, pinned to CPU 0) at the router namespace
//! (`softtimers router`, pinned to the last CPU), which forwards them to a phantom next hop
//! on the sink's link. Forwarded packets are counted on the router's outgoing interface, as
//! the paper read its output interface's packet count.
//!
//! One core of this VM offers about 240,000 datagrams/s through the veth pair, and a router
//! that only receives and sends forwards about as many: the flood could not overload it. So
//! the router does [`WORK_NS`] of busy work per packet (a stated cost, as the paper's
//! `screend` added one), which puts its loss-free rate near a quarter of what the source
//! offers; the screening stage adds [`SCREEN_NS`] more.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::harness::{CLIENT_CPU, ExpOptions, read_json, server_cpu};
use crate::netns::{ForwardPath, Host};
use crate::plot::{Axis, LineChart, Series, largest, line_chart};
use crate::report::{Rendered, Section};
use crate::router::{ComputeReport, FloodReport, RouterReport};
use crate::targets::{TargetCheck, targets_table};

/// The router's per-packet forwarding work, ns of busy work.
pub const WORK_NS: u64 = 15_000;
/// The screening stage's per-packet work, ns.
pub const SCREEN_NS: u64 = 5_000;
/// The port the router listens on.
const PORT: u16 = 9000;

/// The paper's forwarding figures, beside which E10 and E11 put theirs.
pub const PAPER_FIGS_6: &str = "Mogul and Ramakrishnan (Figs. 6-1, 6-3 to 6-6, a DEC 3000/300 \
    router): the unmodified kernel peaks at 4,700 packets/s and falls toward livelock above \
    it; with screend it degrades above 2,000 packets/s and livelocks at about 6,000. The \
    polling kernel slightly raises the MLFRR and stays flat past it; without a quota it \
    livelocks too; with screend, queue feedback keeps it flat; quotas of 5 to 10 packets work \
    best.";

/// The paper's Fig. 7-1, beside which E12 puts its figures.
pub const PAPER_FIG_7_1: &str = "Mogul and Ramakrishnan (Fig. 7-1): with a cycle limit, the \
    compute-bound process keeps a stable share of the CPU as the input rate grows, somewhat \
    below what the threshold implies (about 94 % with no load; less under flood); without \
    the limit it made no measurable progress.";

/// The router's design in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Design {
    /// `polling` or `baseline`.
    pub router: crate::router::RouterDesign,
    /// With the screening stage.
    pub screen: bool,
}

impl Design {
    /// Every design E10 compares, in table order.
    pub const ALL: [Design; 4] = [
        Design {
            router: crate::router::RouterDesign::Baseline,
            screen: false,
        },
        Design {
            router: crate::router::RouterDesign::Polling,
            screen: false,
        },
        Design {
            router: crate::router::RouterDesign::Baseline,
            screen: true,
        },
        Design {
            router: crate::router::RouterDesign::Polling,
            screen: true,
        },
    ];

    /// `baseline`, `polling`, `baseline+screen`, `polling+screen`.
    pub fn name(self) -> &'static str {
        use crate::router::RouterDesign::{Baseline, Polling};
        match (self.router, self.screen) {
            (Baseline, false) => "baseline",
            (Polling, false) => "polling",
            (Baseline, true) => "baseline+screen",
            (Polling, true) => "polling+screen",
        }
    }
}

/// What a router run is told beyond its design.
#[derive(Clone, Debug)]
struct RouterArgs {
    design: Design,
    quota: String,
    cpu_budget: Option<u32>,
    realtime: bool,
}

impl RouterArgs {
    fn plain(design: Design) -> RouterArgs {
        RouterArgs {
            design,
            quota: "10".into(),
            cpu_budget: None,
            realtime: false,
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug)]
struct Point {
    flood: FloodReport,
    router: RouterReport,
    forwarded_pps: f64,
    compute: Option<ComputeReport>,
}

/// The step's processes and files.
struct Bench {
    path: ForwardPath,
    exe: PathBuf,
    dir: PathBuf,
    runs: u32,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn kill(children: impl IntoIterator<Item = Child>) {
    for mut c in children {
        crate::tools::kill(&mut c);
    }
}

impl Bench {
    fn new(tag: &str) -> Result<Bench> {
        let path = ForwardPath::create(tag)?;
        crate::tools::require("taskset", "util-linux")?;
        let dir = std::env::temp_dir().join(format!("softtimers-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Bench {
            path,
            exe: std::env::current_exe().context("finding the softtimers binary")?,
            dir,
            runs: 0,
        })
    }

    fn spawn(&self, host: Host, cpu: usize, args: &[String]) -> Result<Child> {
        self.path
            .command(host, "taskset")
            .args(["-c", &cpu.to_string()])
            .arg(&self.exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting a child process")
    }

    /// The router with `args`, a flood at `offered_pps` for `flood_s`, and (with `compute`) a
    /// compute-bound process on the router's core for as long.
    fn run(
        &mut self,
        args: &RouterArgs,
        offered_pps: u64,
        flood_s: f64,
        compute: bool,
    ) -> Result<Point> {
        self.runs += 1;
        let n = self.runs;
        let (router_json, flood_json, compute_json) = (
            self.dir.join(format!("router-{n}.json")),
            self.dir.join(format!("flood-{n}.json")),
            self.dir.join(format!("compute-{n}.json")),
        );
        let flood_ms = (flood_s * 1000.0).round() as u64;
        let mut router_args: Vec<String> = vec![
            "router".into(),
            "--listen".into(),
            format!("{}:{PORT}", self.path.router_in),
            "--forward-to".into(),
            format!("{}:{PORT}", self.path.next_hop),
            "--design".into(),
            match args.design.router {
                crate::router::RouterDesign::Polling => "polling".into(),
                crate::router::RouterDesign::Baseline => "baseline".into(),
            },
            "--quota".into(),
            args.quota.clone(),
            "--work-ns".into(),
            WORK_NS.to_string(),
            "--screen-ns".into(),
            SCREEN_NS.to_string(),
            "--duration".into(),
            format!("{}ms", flood_ms + 400),
            "--json".into(),
            router_json.display().to_string(),
        ];
        if args.design.screen {
            router_args.push("--screen".into());
        }
        if let Some(b) = args.cpu_budget {
            router_args.extend(["--cpu-budget".into(), b.to_string()]);
        }
        if args.realtime {
            router_args.push("--realtime".into());
        }
        let router = self.spawn(Host::Router, server_cpu(), &router_args)?;
        std::thread::sleep(Duration::from_millis(250));
        let tx_before = self.path.router_tx_packets()?;
        let computer = if compute {
            match self.spawn(
                Host::Router,
                server_cpu(),
                &[
                    "compute".into(),
                    "--duration".into(),
                    format!("{flood_ms}ms"),
                    "--json".into(),
                    compute_json.display().to_string(),
                ],
            ) {
                Ok(c) => Some(c),
                Err(e) => {
                    kill([router]);
                    return Err(e);
                }
            }
        } else {
            None
        };
        let flood = self.spawn(
            Host::Source,
            CLIENT_CPU,
            &[
                "flood".into(),
                "--to".into(),
                format!("{}:{PORT}", self.path.router_in),
                "--rate".into(),
                offered_pps.max(1).to_string(),
                "--duration".into(),
                format!("{flood_ms}ms"),
                "--json".into(),
                flood_json.display().to_string(),
            ],
        );
        let flood = match flood {
            Ok(f) => f,
            Err(e) => {
                kill(std::iter::once(router).chain(computer));
                return Err(e);
            }
        };
        let outcome = crate::tools::finish(flood, "the flood");
        // Forwarded while the flood lasted: what the socket buffer still holds afterwards
        // drains into the next second and is not counted.
        let tx_after = self.path.router_tx_packets();
        let computed = computer.map(|c| crate::tools::finish(c, "the compute process"));
        let routed = crate::tools::finish(router, "the router");
        outcome?;
        routed?;
        if let Some(c) = computed {
            c?;
        }
        let tx = tx_after?.saturating_sub(tx_before);
        let flood: FloodReport = read_json(&flood_json)?;
        let router: RouterReport = read_json(&router_json)?;
        let compute = compute
            .then(|| read_json::<ComputeReport>(&compute_json))
            .transpose()?;
        Ok(Point {
            forwarded_pps: tx as f64 / flood.duration_s.max(1e-3),
            flood,
            router,
            compute,
        })
    }

    /// The source's top rate through the path (the polling router receiving), datagrams/s.
    fn source_max(&mut self, flood_s: f64) -> Result<f64> {
        let p = self.run(
            &RouterArgs::plain(Design::ALL[1]),
            100_000_000,
            flood_s,
            false,
        )?;
        Ok(p.flood.achieved_pps)
    }
}

/// One E10 or E11 row: one router configuration at one offered rate.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ForwardRow {
    /// `baseline`, `polling`, `baseline+screen`, `polling+screen`.
    pub design: String,
    /// Packets per polling turn (`unlimited`; the baseline has none: `-`).
    pub quota: String,
    /// The rate the source offered, datagrams/s (what it reached).
    #[serde(deserialize_with = "crate::summary::num")]
    pub offered_pps: f64,
    /// The rate the router's outgoing interface sent, datagrams/s.
    #[serde(deserialize_with = "crate::summary::num")]
    pub forwarded_pps: f64,
    /// Datagrams the router took and then dropped at an intermediate queue (wasted work).
    pub dropped_in_queue: u64,
    /// Datagrams the kernel dropped at the router's socket (early, free).
    pub kernel_drops: u64,
    /// The router's CPU over its run, % of one core.
    #[serde(deserialize_with = "crate::summary::num")]
    pub router_cpu_pct: f64,
    /// Whether this is the run at three times the design's MLFRR.
    pub at_3x_mlfrr: bool,
}

fn forward_row(design: Design, quota: &str, p: &Point, at_3x: bool) -> ForwardRow {
    ForwardRow {
        design: design.name().to_string(),
        quota: if design.router == crate::router::RouterDesign::Baseline {
            "-".into()
        } else {
            quota.to_string()
        },
        offered_pps: p.flood.achieved_pps,
        forwarded_pps: p.forwarded_pps,
        dropped_in_queue: p.router.dropped_in_queue,
        kernel_drops: p.router.kernel_drops,
        router_cpu_pct: p.router.cpu_pct,
        at_3x_mlfrr: at_3x,
    }
}

/// A design's maximum loss-free forwarding rate: the highest forwarded rate of the runs that
/// lost at most 2 % of what was offered (the sweep, then bisections of the knee).
pub fn mlfrr(rows: &[&ForwardRow]) -> f64 {
    rows.iter()
        .filter(|r| r.forwarded_pps >= 0.98 * r.offered_pps)
        .map(|r| r.forwarded_pps)
        .fold(0.0, f64::max)
}

/// A design's MLFRR, per E10.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Mlfrr {
    /// The design.
    pub design: String,
    /// Its maximum loss-free forwarding rate, datagrams/s.
    #[serde(deserialize_with = "crate::summary::num")]
    pub mlfrr_pps: f64,
    /// What it forwarded when offered three times that (or the source's top rate, if lower).
    #[serde(deserialize_with = "crate::summary::num")]
    pub forwarded_at_3x_pps: f64,
    /// What was offered in that run, as a multiple of the MLFRR.
    #[serde(deserialize_with = "crate::summary::num")]
    pub offered_multiple: f64,
}

/// E10's result (`e10.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E10 {
    /// `quick` or `full`.
    pub mode: String,
    /// Why it did not run here (no root, no `ip`), if it did not.
    #[serde(default)]
    pub skipped: Option<String>,
    /// Seconds of flood per run.
    pub flood_s: f64,
    /// The source's top rate, datagrams/s.
    #[serde(deserialize_with = "crate::summary::num")]
    pub source_max_pps: f64,
    /// Per-packet work, ns: forwarding, screening.
    pub work_ns: (u64, u64),
    /// One row per design and offered rate.
    pub rows: Vec<ForwardRow>,
    /// Each design's MLFRR (also `mlfrr_pps` by design name, below).
    pub mlfrr: Vec<Mlfrr>,
    /// `mlfrr_pps` per design name.
    pub mlfrr_pps: std::collections::BTreeMap<String, f64>,
    /// The targets against this run.
    pub targets: Vec<TargetCheck>,
}

fn fractions(quick: bool) -> Vec<f64> {
    if quick {
        vec![0.15, 1.0]
    } else {
        vec![
            0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.8, 1.0,
        ]
    }
}

/// Bisections of the knee per design.
fn refinements(quick: bool) -> usize {
    if quick { 1 } else { 3 }
}

fn flood_seconds(quick: bool) -> f64 {
    if quick { 0.4 } else { 1.0 }
}

/// How many router runs E10, E11 and E12 make (for the progress estimate).
pub fn runs(step: &str, quick: bool) -> usize {
    match step {
        "e10" => 1 + Design::ALL.len() * (fractions(quick).len() + refinements(quick) + 1),
        "e11" => 1 + quotas(quick).len() * 2 * e11_fractions(quick).len(),
        _ => 2 + budgets(quick).len() * e12_fractions(quick).len(),
    }
}

/// Seconds one run takes, all told.
pub fn run_seconds(quick: bool) -> f64 {
    flood_seconds(quick) + 0.8
}

/// E10: every design over the offered rates, then each at three times its MLFRR.
pub fn e10(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E10> {
    let quick = options.length.quick;
    let flood_s = flood_seconds(quick);
    if let Some(why) = unavailable() {
        return Ok(E10 {
            mode: options.length.mode().to_string(),
            skipped: Some(why),
            flood_s,
            source_max_pps: f64::NAN,
            work_ns: (WORK_NS, SCREEN_NS),
            rows: Vec::new(),
            mlfrr: Vec::new(),
            mlfrr_pps: Default::default(),
            targets: Vec::new(),
        });
    }
    let mut bench = Bench::new("eten")?;
    let total = runs("e10", quick) as f64;
    progress(0.0, "the source's top rate");
    let max = bench.source_max(flood_s)?;
    let mut rows = Vec::new();
    let mut done = 1.0;
    let loss_free = |r: &ForwardRow| r.forwarded_pps >= 0.98 * r.offered_pps;
    for design in Design::ALL {
        let (mut lo, mut hi) = (0.0, f64::NAN);
        let mut measure = |f: f64, done: &mut f64, rows: &mut Vec<ForwardRow>| -> Result<bool> {
            progress(
                *done / total,
                &format!("{}, {:.0} datagrams/s", design.name(), f * max),
            );
            let p = bench.run(&RouterArgs::plain(design), (f * max) as u64, flood_s, false)?;
            let row = forward_row(design, "10", &p, false);
            let ok = loss_free(&row);
            rows.push(row);
            *done += 1.0;
            Ok(ok)
        };
        for f in fractions(quick) {
            if measure(f, &mut done, &mut rows)? {
                lo = f;
            } else if hi.is_nan() {
                hi = f;
            }
        }
        // Bisect between the last loss-free rate and the first lossy one, for the knee.
        for _ in 0..refinements(quick) {
            if hi.is_nan() {
                break;
            }
            let mid = (lo + hi) / 2.0;
            if measure(mid, &mut done, &mut rows)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        // No loss-free rate yet (a slow or noisy host): halve until one is found, so that
        // every design has an MLFRR to compare.
        for _ in 0..4 {
            if lo > 0.0 || hi.is_nan() {
                break;
            }
            hi /= 2.0;
            if measure(hi, &mut done, &mut rows)? {
                lo = hi;
            }
        }
    }
    let mut table = Vec::new();
    let mut by_name = std::collections::BTreeMap::new();
    for design in Design::ALL {
        let of: Vec<&ForwardRow> = rows.iter().filter(|r| r.design == design.name()).collect();
        let m = mlfrr(&of);
        let offered = (3.0 * m).min(max);
        progress(done / total, &format!("{} at 3 × its MLFRR", design.name()));
        let p = bench.run(&RouterArgs::plain(design), offered as u64, flood_s, false)?;
        let row = forward_row(design, "10", &p, true);
        table.push(Mlfrr {
            design: design.name().into(),
            mlfrr_pps: m,
            forwarded_at_3x_pps: row.forwarded_pps,
            offered_multiple: if m > 0.0 {
                row.offered_pps / m
            } else {
                f64::NAN
            },
        });
        by_name.insert(design.name().to_string(), m);
        rows.push(row);
        done += 1.0;
    }
    progress(1.0, "done");
    let get = |name: &str| {
        table
            .iter()
            .find(|m| m.design == name)
            .expect("every design")
    };
    let mut targets = Vec::new();
    for (polling, baseline) in [
        ("polling", "baseline"),
        ("polling+screen", "baseline+screen"),
    ] {
        let (p, b) = (get(polling), get(baseline));
        let held = p.forwarded_at_3x_pps / p.mlfrr_pps;
        targets.push(TargetCheck::new(
            format!(
                "E10 {polling}: forwarded at {:.1} × its MLFRR / MLFRR",
                p.offered_multiple
            ),
            ">= 0.95 (no livelock)",
            held,
            held.is_finite() && held >= 0.95 && p.offered_multiple >= 2.95,
        ));
        targets.push(TargetCheck::new(
            format!(
                "E10 {baseline}: forwarded at {:.1} × its MLFRR / MLFRR",
                b.offered_multiple
            ),
            "report (the paper's kernel fell to near zero)",
            b.forwarded_at_3x_pps / b.mlfrr_pps,
            true,
        ));
        let ratio = p.mlfrr_pps / b.mlfrr_pps;
        targets.push(TargetCheck::new(
            format!("E10 MLFRR, {polling} / {baseline}"),
            ">= 1.0",
            ratio,
            // A router that forwarded nothing has no MLFRR to compare.
            ratio.is_finite() && p.mlfrr_pps > 0.0 && ratio >= 1.0,
        ));
    }
    Ok(E10 {
        mode: options.length.mode().to_string(),
        skipped: None,
        flood_s,
        source_max_pps: max,
        work_ns: (WORK_NS, SCREEN_NS),
        rows,
        mlfrr: table,
        mlfrr_pps: by_name,
        targets,
    })
}

fn forward_table(rows: &[ForwardRow]) -> String {
    let mut md = String::from(
        "| design | quota | offered (datagrams/s) | forwarded (datagrams/s) | dropped in a queue | dropped by the kernel | router CPU % |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        let _ = writeln!(
            md,
            "| {}{} | {} | {:.0} | {:.0} | {} | {} | {:.0} |",
            r.design,
            if r.at_3x_mlfrr { " (3 × MLFRR)" } else { "" },
            r.quota,
            r.offered_pps,
            r.forwarded_pps,
            r.dropped_in_queue,
            r.kernel_drops,
            r.router_cpu_pct
        );
    }
    md
}

fn forward_chart(dir: &Path, file: &str, title: &str, series: Vec<Series>) -> Result<()> {
    let x_max = largest(&series, Axis::X, 1.0);
    let y_max = largest(&series, Axis::Y, 1.0);
    line_chart(
        &dir.join(file),
        &LineChart {
            title,
            x_label: "offered (thousand datagrams/s)",
            y_label: "forwarded (thousand datagrams/s)",
            x_range: (0.0, x_max * 1.05),
            y_range: (0.0, y_max * 1.1),
            series,
        },
    )
}

/// Lines of forwarded against offered (thousands), one per label, from rows in order.
fn series_by<'a>(rows: impl Iterator<Item = (&'a ForwardRow, String)>) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for (r, label) in rows {
        if r.at_3x_mlfrr {
            continue;
        }
        let point = (r.offered_pps / 1000.0, r.forwarded_pps / 1000.0);
        match out.iter_mut().find(|s| s.label == label) {
            Some(s) => s.points.push(point),
            None => out.push(Series {
                label,
                points: vec![point],
            }),
        }
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

impl Section for E10 {
    const FILE: &'static str = "e10.json";
    fn render(&self, dir: &Path) -> Result<Rendered> {
        let mut md =
            String::from("## E10: forwarding under overload (livelock Figs. 6-1, 6-3, 6-4)\n\n");
        if let Some(why) = &self.skipped {
            let _ = writeln!(md, "Not run here: {why}.");
            return Ok(Rendered::text(md));
        }
        let _ = writeln!(
            md,
            "A UDP router between network namespaces (source → router → phantom sink), flooded \
             with minimum-size datagrams for {:.1} s per run from CPU {CLIENT_CPU}; the router on \
             the other CPU does {} µs of work per packet ({} µs more with the screening stage). \
             The source's top rate here: {:.0} datagrams/s. Forwarded = packets sent by the \
             router's outgoing interface. Polling quota 10.\n",
            self.flood_s,
            self.work_ns.0 / 1000,
            self.work_ns.1 / 1000,
            self.source_max_pps,
        );
        md += "| design | MLFRR (datagrams/s) | offered for the overload run (× MLFRR) | forwarded there (datagrams/s) |\n| --- | ---: | ---: | ---: |\n";
        for m in &self.mlfrr {
            let _ = writeln!(
                md,
                "| {} | {:.0} | {:.2} | {:.0} |",
                m.design, m.mlfrr_pps, m.offered_multiple, m.forwarded_at_3x_pps
            );
        }
        md += "\n";
        md += &forward_table(&self.rows);
        let plot = "e10_forwarding.png";
        forward_chart(
            dir,
            plot,
            "Forwarded against offered rate",
            series_by(self.rows.iter().map(|r| (r, r.design.clone()))),
        )?;
        let _ = writeln!(md, "\n{PAPER_FIGS_6}\n\n![forwarding]({plot})\n");
        md += &targets_table(&self.targets);
        Ok(Rendered {
            markdown: md,
            plots: vec![plot.into()],
        })
    }
}

// ---------------------------------------------------------------------------------------
// E11: the packet quota

fn quotas(quick: bool) -> Vec<&'static str> {
    if quick {
        vec!["1", "10", "unlimited"]
    } else {
        vec!["1", "5", "10", "20", "100", "unlimited"]
    }
}

fn e11_fractions(quick: bool) -> Vec<f64> {
    if quick {
        vec![1.0]
    } else {
        vec![0.2, 0.4, 0.7, 1.0]
    }
}

/// E11's result (`e11.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E11 {
    /// `quick` or `full`.
    pub mode: String,
    /// Why it did not run here (no root, no `ip`), if it did not.
    #[serde(default)]
    pub skipped: Option<String>,
    /// Seconds of flood per run.
    pub flood_s: f64,
    /// The source's top rate, datagrams/s.
    #[serde(deserialize_with = "crate::summary::num")]
    pub source_max_pps: f64,
    /// One row per screening, quota and offered rate.
    pub rows: Vec<ForwardRow>,
    /// The targets against this run (none are set for E11: it is reported).
    pub targets: Vec<TargetCheck>,
}

/// E11: the polling router with each quota, without and with screening.
pub fn e11(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E11> {
    let quick = options.length.quick;
    let flood_s = flood_seconds(quick);
    if let Some(why) = unavailable() {
        return Ok(E11 {
            mode: options.length.mode().to_string(),
            skipped: Some(why),
            flood_s,
            source_max_pps: f64::NAN,
            rows: Vec::new(),
            targets: Vec::new(),
        });
    }
    let mut bench = Bench::new("eleven")?;
    let total = runs("e11", quick) as f64;
    progress(0.0, "the source's top rate");
    let max = bench.source_max(flood_s)?;
    let mut rows = Vec::new();
    let mut done = 1.0;
    for screen in [false, true] {
        let design = Design {
            router: crate::router::RouterDesign::Polling,
            screen,
        };
        for quota in quotas(quick) {
            for f in e11_fractions(quick) {
                progress(
                    done / total,
                    &format!("{}, quota {quota}, {:.0}/s", design.name(), f * max),
                );
                let args = RouterArgs {
                    quota: quota.to_string(),
                    ..RouterArgs::plain(design)
                };
                let p = bench.run(&args, (f * max) as u64, flood_s, false)?;
                rows.push(forward_row(design, quota, &p, false));
                done += 1.0;
            }
        }
    }
    progress(1.0, "done");
    Ok(E11 {
        mode: options.length.mode().to_string(),
        skipped: None,
        flood_s,
        source_max_pps: max,
        rows,
        targets: Vec::new(),
    })
}

impl Section for E11 {
    const FILE: &'static str = "e11.json";
    fn render(&self, dir: &Path) -> Result<Rendered> {
        let mut md = String::from("## E11: the polling quota (livelock Figs. 6-5, 6-6)\n\n");
        if let Some(why) = &self.skipped {
            let _ = writeln!(md, "Not run here: {why}.");
            return Ok(Rendered::text(md));
        }
        let _ = writeln!(
            md,
            "The polling router with each packet quota per turn, without and with the screening \
             stage (32-packet queue, feedback at 75 % / 25 %, 1 ms timeout); {:.1} s of flood \
             per run; source top rate {:.0} datagrams/s.\n",
            self.flood_s, self.source_max_pps
        );
        md += &forward_table(&self.rows);
        let mut plots = Vec::new();
        for (screen, file, title) in [
            (false, "e11_quota.png", "Polling quota, no screening"),
            (
                true,
                "e11_quota_screen.png",
                "Polling quota, with screening",
            ),
        ] {
            let series = series_by(
                self.rows
                    .iter()
                    .filter(|r| r.design.ends_with("+screen") == screen)
                    .map(|r| (r, format!("quota {}", r.quota))),
            );
            if series.iter().any(|s| s.points.len() > 1) {
                forward_chart(dir, file, title, series)?;
                let _ = writeln!(md, "\n![{title}]({file})");
                plots.push(file.to_string());
            }
        }
        let _ = writeln!(md, "\n{PAPER_FIGS_6}\n");
        Ok(Rendered {
            markdown: md,
            plots,
        })
    }
}

// ---------------------------------------------------------------------------------------
// E12: the CPU budget

fn budgets(quick: bool) -> Vec<u32> {
    if quick {
        vec![50, 100]
    } else {
        vec![25, 50, 75, 100]
    }
}

fn e12_fractions(quick: bool) -> Vec<f64> {
    if quick { vec![1.0] } else { vec![0.3, 1.0] }
}

/// One E12 row.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BudgetRow {
    /// The router's CPU budget, % of each 10 ms period (`null`: no router running).
    pub budget_pct: Option<u32>,
    /// The rate offered, datagrams/s (0: no flood).
    #[serde(deserialize_with = "crate::summary::num")]
    pub offered_pps: f64,
    /// The rate forwarded, datagrams/s.
    #[serde(deserialize_with = "crate::summary::num")]
    pub forwarded_pps: f64,
    /// The share of the core the compute-bound process got, %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub compute_pct: f64,
    /// 10 ms periods in which the router's budget ran out.
    pub budget_stops: u64,
}

/// E12's result (`e12.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E12 {
    /// `quick` or `full`.
    pub mode: String,
    /// Why it did not run here (no root, no `ip`), if it did not.
    #[serde(default)]
    pub skipped: Option<String>,
    /// Seconds of flood per run.
    pub flood_s: f64,
    /// The source's top rate, datagrams/s.
    #[serde(deserialize_with = "crate::summary::num")]
    pub source_max_pps: f64,
    /// One row per budget and offered rate, and the compute process alone.
    pub rows: Vec<BudgetRow>,
    /// The targets against this run.
    pub targets: Vec<TargetCheck>,
}

/// E12: the polling router at real-time priority, with each CPU budget, under flood, beside
/// a compute-bound process on its core.
pub fn e12(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E12> {
    let quick = options.length.quick;
    let flood_s = if quick { 0.5 } else { 1.0 };
    if let Some(why) = unavailable() {
        return Ok(E12 {
            mode: options.length.mode().to_string(),
            skipped: Some(why),
            flood_s,
            source_max_pps: f64::NAN,
            rows: Vec::new(),
            targets: Vec::new(),
        });
    }
    let mut bench = Bench::new("twelve")?;
    let total = runs("e12", quick) as f64;
    progress(0.0, "the source's top rate");
    let max = bench.source_max(flood_seconds(quick))?;
    let design = Design {
        router: crate::router::RouterDesign::Polling,
        screen: false,
    };
    let mut rows = Vec::new();
    // The compute process with the router idle (no flood): its share with no load.
    progress(1.0 / total, "the compute process, no flood");
    let idle = bench.run(
        &RouterArgs {
            realtime: true,
            ..RouterArgs::plain(design)
        },
        1,
        flood_s,
        true,
    )?;
    rows.push(BudgetRow {
        budget_pct: None,
        offered_pps: 0.0,
        forwarded_pps: 0.0,
        compute_pct: idle.compute.as_ref().map_or(f64::NAN, |c| c.cpu_share_pct),
        budget_stops: 0,
    });
    let mut done = 2.0;
    for budget in budgets(quick) {
        for f in e12_fractions(quick) {
            progress(
                done / total,
                &format!("budget {budget} %, {:.0}/s", f * max),
            );
            let args = RouterArgs {
                cpu_budget: Some(budget),
                realtime: true,
                ..RouterArgs::plain(design)
            };
            let p = bench.run(&args, (f * max) as u64, flood_s, true)?;
            rows.push(BudgetRow {
                budget_pct: Some(budget),
                offered_pps: p.flood.achieved_pps,
                forwarded_pps: p.forwarded_pps,
                compute_pct: p.compute.as_ref().map_or(f64::NAN, |c| c.cpu_share_pct),
                budget_stops: p.router.budget_stops,
            });
            done += 1.0;
        }
    }
    progress(1.0, "done");
    let at_50 = rows
        .iter()
        .filter(|r| r.budget_pct == Some(50))
        .map(|r| r.compute_pct)
        .fold(f64::INFINITY, f64::min);
    let targets = vec![TargetCheck::new(
        "E12 CPU left to the compute process, 50 % budget, under flood (%, worst rate)",
        ">= 40",
        at_50,
        at_50 >= 40.0,
    )];
    Ok(E12 {
        mode: options.length.mode().to_string(),
        skipped: None,
        flood_s,
        source_max_pps: max,
        rows,
        targets,
    })
}

impl Section for E12 {
    const FILE: &'static str = "e12.json";
    fn render(&self, dir: &Path) -> Result<Rendered> {
        let mut md = String::from(
            "## E12: CPU left to a compute-bound process under flood (livelock Fig. 7-1)\n\n",
        );
        if let Some(why) = &self.skipped {
            let _ = writeln!(md, "Not run here: {why}.");
            return Ok(Rendered::text(md));
        }
        let _ = writeln!(
            md,
            "The polling router at real-time priority (above normal processes, as in-kernel \
             packet processing is) with a CPU budget per 10 ms period, and a compute-bound \
             process on the same core, for {:.1} s of flood per run; source top rate {:.0} \
             datagrams/s.\n",
            self.flood_s, self.source_max_pps
        );
        md += "| budget | offered (datagrams/s) | forwarded (datagrams/s) | compute process's share (%) | periods the budget ran out |\n| --- | ---: | ---: | ---: | ---: |\n";
        for r in &self.rows {
            let _ = writeln!(
                md,
                "| {} | {:.0} | {:.0} | {:.1} | {} |",
                r.budget_pct
                    .map_or_else(|| "no flood".to_string(), |b| format!("{b} %")),
                r.offered_pps,
                r.forwarded_pps,
                r.compute_pct,
                r.budget_stops
            );
        }
        let mut series: Vec<Series> = Vec::new();
        for r in self.rows.iter().filter(|r| r.budget_pct.is_some()) {
            let label = format!("budget {} %", r.budget_pct.unwrap_or(0));
            let point = (r.offered_pps / 1000.0, r.compute_pct);
            match series.iter_mut().find(|s| s.label == label) {
                Some(s) => s.points.push(point),
                None => series.push(Series {
                    label,
                    points: vec![(0.0, self.rows[0].compute_pct), point],
                }),
            }
        }
        let plot = "e12_budget.png";
        let x_max = self.source_max_pps / 1000.0;
        line_chart(
            &dir.join(plot),
            &LineChart {
                title: "CPU left to a compute-bound process",
                x_label: "offered (thousand datagrams/s)",
                y_label: "compute process's share of the core (%)",
                x_range: (0.0, x_max.max(1.0) * 1.05),
                y_range: (0.0, 100.0),
                series,
            },
        )?;
        let _ = writeln!(md, "\n{PAPER_FIG_7_1}\n\n![budget]({plot})\n");
        md += &targets_table(&self.targets);
        Ok(Rendered {
            markdown: md,
            plots: vec![plot.into()],
        })
    }
}

/// Why a forwarding step cannot run here, if it cannot (for the lab to say so plainly).
pub fn unavailable() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("the forwarding experiments make network namespaces and need root".into());
    }
    crate::tools::find("ip")
        .is_none()
        .then(|| "iproute2's `ip` is not installed".to_string())
}
