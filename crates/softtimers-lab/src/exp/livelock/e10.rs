//! E10: forwarded rate against offered rate, the 4.2BSD-structured router against the
//! polling router, without and with a screening stage (Figs. 6-1, 6-3, 6-4).

use std::fmt::Write as _;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::harness::{CLIENT_CPU, ExpOptions};
use crate::paper::PAPER_FIGS_6;
use crate::plot::{LineChart, Series, line_chart};
use crate::report::{Page, Section, StepResult};
use crate::table::Table;
use crate::targets::{Goal, TargetCheck, as_reported};

use super::{Bench, Design, Flood, Point, RouterArgs, SCREEN_NS, WORK_NS, flood_seconds, runs};

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

pub(super) fn forward_row(design: Design, quota: &str, p: &Point, at_3x: bool) -> ForwardRow {
    ForwardRow {
        design: design.name().to_string(),
        quota: if design.router == softtimers_tools::router::RouterDesign::Baseline {
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
pub type E10 = StepResult<ForwardRow, E10Extra>;

/// What E10 records beside its rows.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct E10Extra {
    /// The floods' length and the source's top rate.
    #[serde(flatten)]
    pub flood: Flood,
    /// Per-packet work, ns: forwarding, screening.
    pub work_ns: (u64, u64),
    /// Each design's MLFRR (also `mlfrr_pps` by design name, below).
    pub mlfrr: Vec<Mlfrr>,
    /// `mlfrr_pps` per design name.
    pub mlfrr_pps: std::collections::BTreeMap<String, f64>,
}

pub(super) fn fractions(quick: bool) -> Vec<f64> {
    if quick {
        vec![0.15, 1.0]
    } else {
        vec![
            0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.8, 1.0,
        ]
    }
}

/// Bisections of the knee per design.
pub(super) fn refinements(quick: bool) -> usize {
    if quick { 1 } else { 3 }
}

/// E10: every design over the offered rates, then each at three times its MLFRR.
pub fn e10(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E10> {
    let quick = options.length.quick;
    let flood_s = flood_seconds(quick);
    let skipped = E10Extra {
        flood: Flood::unmeasured(flood_s),
        work_ns: (WORK_NS, SCREEN_NS),
        ..Default::default()
    };
    let (mut bench, max) = match Bench::begin(options, "eten", skipped, progress)? {
        Ok(begun) => begun,
        Err(skipped) => return Ok(skipped),
    };
    let total = runs("e10", quick) as f64;
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
        let name = format!(
            "E10 {polling}: forwarded at {:.1} × its MLFRR / MLFRR",
            p.offered_multiple
        );
        targets.push(if p.offered_multiple >= 2.95 {
            TargetCheck::new(
                name,
                Goal::at_least(0.95, ">= 0.95 (no livelock)"),
                held,
                crate::paper::ANCHOR_FIGS_6_3_6_4,
            )
        } else {
            // The source could not offer three times this MLFRR: the overload was not made.
            TargetCheck::judged(
                name,
                "not tested: the flood did not reach 3 × the MLFRR",
                as_reported(held),
                false,
                crate::paper::ANCHOR_FIGS_6_3_6_4,
            )
        });
        targets.push(TargetCheck::judged(
            format!(
                "E10 {baseline}: forwarded at {:.1} × its MLFRR / MLFRR",
                b.offered_multiple
            ),
            "report (the paper's kernel fell to near zero)",
            as_reported(b.forwarded_at_3x_pps / b.mlfrr_pps),
            true,
            crate::paper::ANCHOR_FIG_6_1,
        ));
        // A router that forwarded nothing has no MLFRR to compare: NaN or infinity, not met.
        let ratio = p.mlfrr_pps / b.mlfrr_pps;
        targets.push(TargetCheck::new(
            format!("E10 MLFRR, {polling} / {baseline}"),
            Goal::at_least(1.0, ">= 1.0"),
            if ratio.is_finite() { ratio } else { f64::NAN },
            crate::paper::ANCHOR_FIGS_6_3_6_4,
        ));
    }
    Ok(E10::ran(
        options.length.mode(),
        E10Extra {
            flood: Flood {
                flood_s,
                source_max_pps: max,
            },
            work_ns: (WORK_NS, SCREEN_NS),
            mlfrr: table,
            mlfrr_pps: by_name,
        },
        rows,
        targets,
    ))
}

pub(super) fn forward_table(rows: &[ForwardRow]) -> String {
    let mut table = Table::new(
        "design | quota | offered (datagrams/s): | forwarded (datagrams/s): | dropped in a queue: | dropped by the kernel: | router CPU %:",
    );
    for r in rows {
        let overload = if r.at_3x_mlfrr { " (3 × MLFRR)" } else { "" };
        table.row(&[
            &format!("{}{overload}", r.design),
            &r.quota,
            &format!("{:.0}", r.offered_pps),
            &format!("{:.0}", r.forwarded_pps),
            &r.dropped_in_queue,
            &r.kernel_drops,
            &format!("{:.0}", r.router_cpu_pct),
        ]);
    }
    table.finish()
}

/// Draws forwarded against offered rate as the plot `file` of `page` (its image `alt`);
/// returns the image.
pub(super) fn forward_chart(
    page: &mut Page<'_>,
    (file, alt): (&str, &str),
    title: &str,
    series: Vec<Series>,
) -> Result<String> {
    let axes = (
        "offered (thousand datagrams/s)",
        "forwarded (thousand datagrams/s)",
    );
    let chart = LineChart::from_origin(title, axes, series, 1.0, (1.05, 1.1));
    page.plot(file, alt, |path| line_chart(path, &chart))
}

/// Lines of forwarded against offered (thousands), one per label, from rows in order.
pub(super) fn series_by<'a>(rows: impl Iterator<Item = (&'a ForwardRow, String)>) -> Vec<Series> {
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
    const TITLE: &'static str = "E10: forwarding under overload (livelock Figs. 6-1, 6-3, 6-4)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        let _ = writeln!(
            page,
            "A UDP router between network namespaces (source → router → phantom sink), flooded \
             with minimum-size datagrams for {:.1} s per run from CPU {CLIENT_CPU}; the router on \
             the other CPU does {} µs of work per packet ({} µs more with the screening stage). \
             The source's top rate here: {:.0} datagrams/s. Forwarded = packets sent by the \
             router's outgoing interface. Polling quota 10.\n",
            self.extra.flood.flood_s,
            self.extra.work_ns.0 / 1000,
            self.extra.work_ns.1 / 1000,
            self.extra.flood.source_max_pps,
        );
        page.table(
            Table::of(&self.extra.mlfrr)
                .text("design", |m| &m.design)
                .fixed("MLFRR (datagrams/s):", 0, |m| m.mlfrr_pps)
                .fixed("offered for the overload run (× MLFRR):", 2, |m| {
                    m.offered_multiple
                })
                .fixed("forwarded there (datagrams/s):", 0, |m| {
                    m.forwarded_at_3x_pps
                })
                .table(),
        );
        page.text("\n");
        page.text(&forward_table(&self.rows));
        let forwarding = forward_chart(
            page,
            ("e10_forwarding.png", "forwarding"),
            "Forwarded against offered rate",
            series_by(self.rows.iter().map(|r| (r, r.design.clone()))),
        )?;
        page.paper(PAPER_FIGS_6);
        let _ = writeln!(page, "{forwarding}\n");
        page.targets(&self.targets);
        Ok(())
    }
}
