//! The deadline backstop: E13 (the paper's Table XIII). Soft events every 20 µs on the
//! saturated HTTP server, each with a deadline past its due time enforced by the lazily
//! armed one-shot timer, against plain soft timers in the same rounds.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::harness::{ExpOptions, RunInfo, Setup, TimerSource, Workload, interleaved, run};
use crate::report::{Rendered, Section};
use crate::summary::{median, median_ratio};
use crate::targets::{TargetCheck, targets_table};

/// The paper's Table XIII, beside which E13 puts its figures.
pub const PAPER_TABLE_XIII: &str = "The paper (Table XIII, PIII-500, Flash): 1000 µs: 1 % \
    overhead, 0 % fired; 100 µs: 1.1 %, 0.006 %; 50 µs: 1.3 %, 0.4 %; 20 µs: 2.1 %, 10 %; \
    10 µs: 4.6 %, 26.3 %.";

/// The soft events' interval, µs.
const INTERVAL_US: u64 = 20;
/// The deadlines measured, µs past each event's due time.
const DEADLINES_US: [u64; 5] = [10, 20, 50, 100, 1000];

/// One row of E13.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeadlineRow {
    /// Deadline past each event's due time, µs.
    pub deadline_us: u64,
    /// Throughput loss against plain soft timers, % (median of per-round ratios).
    #[serde(deserialize_with = "crate::summary::num")]
    pub extra_cost_pct: f64,
    /// Share of events the deadline timer had to fire, %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub fired_pct: f64,
    /// Events fired by the deadline timer (summed over rounds).
    pub fired_by_deadline: u64,
    /// Events fired in all (summed over rounds).
    pub fired: u64,
}

/// E13's result (`e13.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E13 {
    /// How the runs were made.
    pub run: RunInfo,
    /// Soft events' interval, µs.
    pub interval_us: u64,
    /// Throughput with plain soft timers (no deadline), req/s (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub plain_rps: f64,
    /// One row per deadline.
    pub rows: Vec<DeadlineRow>,
    /// The targets against this run.
    pub targets: Vec<TargetCheck>,
}

/// E13 (Table XIII): the deadline backstop's cost and firing rate.
pub fn e13(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E13> {
    let length = options.length;
    // `None`: plain soft timers, the reference.
    let mut configs = vec![None];
    configs.extend(DEADLINES_US.map(Some));
    let base = Setup::plain(
        Workload::HttpKeepAlive,
        length.throughput_run(),
        options.client,
    )
    .events(TimerSource::Soft, INTERVAL_US);
    let outcomes = interleaved(
        length.rounds(),
        &configs,
        progress,
        |d| d.map_or("no deadline".into(), |d| format!("deadline {d} µs")),
        |&deadline_us| {
            let o = run(&Setup {
                deadline_us,
                ..base.clone()
            })?;
            Ok((o.rate, o.fired_by_deadline, o.fired))
        },
    )?;
    let rates: Vec<Vec<f64>> = outcomes
        .iter()
        .map(|c| c.iter().map(|o| o.0).collect())
        .collect();
    let rows: Vec<DeadlineRow> = configs
        .iter()
        .zip(&outcomes)
        .zip(&rates)
        .filter_map(|((d, outcome), rate)| {
            let deadline_us = (*d)?;
            let by_deadline: u64 = outcome.iter().map(|o| o.1).sum();
            let fired: u64 = outcome.iter().map(|o| o.2).sum();
            Some(DeadlineRow {
                deadline_us,
                extra_cost_pct: (1.0 - median_ratio(rate, &rates[0])) * 100.0,
                fired_pct: by_deadline as f64 / fired.max(1) as f64 * 100.0,
                fired_by_deadline: by_deadline,
                fired,
            })
        })
        .collect();
    let targets = rows
        .iter()
        .filter(|r| r.deadline_us == 50)
        .map(|r| {
            TargetCheck::new(
                "deadline backstop at 50 µs, extra cost over plain soft timers",
                "<= 1.5 %",
                r.extra_cost_pct,
                r.extra_cost_pct <= 1.5,
            )
        })
        .collect();
    Ok(E13 {
        run: RunInfo::new(options, length.throughput_run(), length.rounds()),
        interval_us: INTERVAL_US,
        plain_rps: median(&rates[0]),
        rows,
        targets,
    })
}

impl Section for E13 {
    const FILE: &'static str = "e13.json";
    fn render(&self, _dir: &Path) -> Result<Rendered> {
        let mut md = String::from("## E13: the deadline backstop (Table XIII)\n\n");
        let _ = writeln!(
            md,
            "Soft events every {} µs on the saturated HTTP server (server on CPU {}, {} on CPU \
             {}), each with a deadline the given time past its due time, enforced by the \
             lazily armed one-shot timer; {} round(s) of {} s. Extra cost is the median \
             per-round throughput loss against plain soft timers (median throughput {:.0} \
             req/s).\n",
            self.interval_us,
            self.run.server_cpu,
            self.run.client_name(),
            self.run.client_cpu,
            self.run.rounds,
            self.run.run_s,
            self.plain_rps
        );
        md += "| deadline | extra cost (%) | fired by the deadline timer (%) | events fired by it / all |\n| ---: | ---: | ---: | ---: |\n";
        for r in &self.rows {
            let _ = writeln!(
                md,
                "| {} µs | {:.2} | {:.3} | {} / {} |",
                r.deadline_us, r.extra_cost_pct, r.fired_pct, r.fired_by_deadline, r.fired
            );
        }
        let _ = writeln!(md, "\n{PAPER_TABLE_XIII}\n");
        md += &targets_table(&self.targets);
        Ok(Rendered::text(md))
    }
}
