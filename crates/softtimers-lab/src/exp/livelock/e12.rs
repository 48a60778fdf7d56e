//! E12: the CPU left to a compute-bound process on the router's core under flood, for CPU
//! budgets of 25–100 % (Fig. 7-1).

use std::fmt::Write as _;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::harness::ExpOptions;
use crate::paper::PAPER_FIG_7_1;
use crate::plot::{LineChart, Series, line_chart};
use crate::report::{Page, Section, StepResult};
use crate::table::Table;
use crate::targets::{Goal, TargetCheck};

use super::{Bench, Design, Flood, RouterArgs, runs};

pub(super) fn budgets(quick: bool) -> Vec<u32> {
    if quick {
        vec![50, 100]
    } else {
        vec![25, 50, 75, 100]
    }
}

pub(super) fn e12_fractions(quick: bool) -> Vec<f64> {
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
pub type E12 = StepResult<BudgetRow, Flood>;

/// E12: the polling router at real-time priority, with each CPU budget, under flood, beside
/// a compute-bound process on its core.
pub fn e12(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E12> {
    let quick = options.length.quick;
    let flood_s = if quick { 0.5 } else { 1.0 };
    let (mut bench, max) =
        match Bench::begin(options, "twelve", Flood::unmeasured(flood_s), progress)? {
            Ok(begun) => begun,
            Err(skipped) => return Ok(skipped),
        };
    let total = runs("e12", quick) as f64;
    let design = Design {
        router: softtimers_tools::router::RouterDesign::Polling,
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
        Goal::at_least(40.0, ">= 40"),
        at_50,
        crate::paper::ANCHOR_FIG_7_1,
    )];
    Ok(E12::ran(
        options.length.mode(),
        Flood {
            flood_s,
            source_max_pps: max,
        },
        rows,
        targets,
    ))
}

impl Section for E12 {
    const FILE: &'static str = "e12.json";
    const TITLE: &'static str =
        "E12: CPU left to a compute-bound process under flood (livelock Fig. 7-1)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        let _ = writeln!(
            page,
            "The polling router at real-time priority (above normal processes, as in-kernel \
             packet processing is) with a CPU budget per 10 ms period, and a compute-bound \
             process on the same core, for {:.1} s of flood per run; source top rate {:.0} \
             datagrams/s.\n",
            self.extra.flood_s, self.extra.source_max_pps
        );
        page.table(
            Table::of(&self.rows)
                .text("budget", |r| {
                    r.budget_pct
                        .map_or_else(|| "no flood".to_string(), |b| format!("{b} %"))
                })
                .fixed("offered (datagrams/s):", 0, |r| r.offered_pps)
                .fixed("forwarded (datagrams/s):", 0, |r| r.forwarded_pps)
                .fixed("compute process's share (%):", 1, |r| r.compute_pct)
                .text("periods the budget ran out:", |r| r.budget_stops)
                .table(),
        );
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
        let x_max = self.extra.source_max_pps / 1000.0;
        let budget = page.plot("e12_budget.png", "budget", |path| {
            line_chart(
                path,
                &LineChart {
                    title: "CPU left to a compute-bound process",
                    x_label: "offered (thousand datagrams/s)",
                    y_label: "compute process's share of the core (%)",
                    x_range: (0.0, x_max.max(1.0) * 1.05),
                    y_range: (0.0, 100.0),
                    series,
                },
            )
        })?;
        page.paper(PAPER_FIG_7_1);
        let _ = writeln!(page, "{budget}\n");
        page.targets(&self.targets);
        Ok(())
    }
}
