//! Deadlines: E13 (the paper's Table XIII). Soft events every 20 µs on the saturated HTTP
//! server, each with a deadline past its due time, enforced by each of the runtime's deadline
//! designs in turn, against plain soft timers in the same rounds.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use softtimer_rt::DeadlineDesign;

use crate::harness::{ExpOptions, RunInfo, Setup, TimerSource, Workload, interleaved, run};
use crate::paper::PAPER_TABLE_XIII;
use crate::report::{Rendered, Section};
use crate::summary::{median, median_ratio, paired_ratios, range};
use crate::targets::TargetCheck;

/// The soft events' interval, µs.
const INTERVAL_US: u64 = 20;
/// The deadlines measured, µs past each event's due time.
const DEADLINES_US: [u64; 5] = [10, 20, 50, 100, 1000];

/// One row of E13: one design at one deadline.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeadlineRow {
    /// What enforces the deadlines: `watcher`, `watcher-spin` or `lazy-timerfd`.
    pub design: DeadlineDesign,
    /// Deadline past each event's due time, µs.
    pub deadline_us: u64,
    /// The deadline service's extra cost on the loop's core: busy CPU time there per response
    /// (the loop thread and the helper threads that run there, less the loop's idle spinning,
    /// which is waiting for work), against plain soft timers, % (median of per-round ratios).
    /// With the load generator on another machine, as in the paper, this is the saturated
    /// server's throughput loss; here the generator shares the machine, so the throughput loss
    /// is reported apart.
    #[serde(deserialize_with = "crate::summary::num")]
    pub extra_cost_pct: f64,
    /// The smallest and largest per-round ratio behind `extra_cost_pct`, %.
    #[serde(default, deserialize_with = "crate::summary::num_pair")]
    pub extra_cost_range_pct: (f64, f64),
    /// Throughput loss against plain soft timers, % (median of per-round ratios). On this
    /// two-core machine it also carries what a watcher on the load generator's core takes
    /// from the load generator.
    #[serde(default, deserialize_with = "crate::summary::num")]
    pub throughput_loss_pct: f64,
    /// Share of events the deadline service had to fire, %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub fired_pct: f64,
    /// CPU time of the runtime's helper threads on the loop's core (the backstop thread,
    /// which also serves the lazy timerfd), % of the run's wall time (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub loop_cpu_pct: f64,
    /// CPU time of the deadline watcher on another core, % of one core (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub other_cpu_pct: f64,
    /// Events fired by the deadline service (summed over rounds).
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
    /// The runtime's default design (the one the targets are checked on).
    pub default_design: DeadlineDesign,
    /// Throughput with plain soft timers (no deadline), req/s (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub plain_rps: f64,
    /// One row per (design, deadline).
    pub rows: Vec<DeadlineRow>,
    /// The targets against this run.
    pub targets: Vec<TargetCheck>,
}

/// What one E13 run measured.
struct Measured {
    rate: f64,
    /// CPU ns on the loop's core per response.
    loop_core_ns_per_response: f64,
    fired_by_deadline: u64,
    fired: u64,
    loop_cpu_pct: f64,
    other_cpu_pct: f64,
}

/// E13's configurations per round: plain soft timers, then every design at every deadline.
pub fn configs() -> usize {
    1 + DeadlineDesign::ALL.len() * DEADLINES_US.len()
}

/// E13 (Table XIII): the cost and firing rate of each deadline design.
pub fn e13(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E13> {
    let length = options.length;
    // `None`: plain soft timers, the reference; then every (design, deadline), interleaved.
    let mut configs: Vec<Option<(DeadlineDesign, u64)>> = vec![None];
    for design in DeadlineDesign::ALL {
        configs.extend(DEADLINES_US.map(|d| Some((design, d))));
    }
    debug_assert_eq!(configs.len(), self::configs());
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
        |c| match c {
            None => "no deadlines".into(),
            Some((design, d)) => format!("{} {d} µs", design.name()),
        },
        |&config| {
            let o = run(&Setup {
                deadline_us: config.map(|(_, d)| d),
                deadline_design: config.map_or(DeadlineDesign::default(), |(design, _)| design),
                ..base.clone()
            })?;
            let wall = o.elapsed.as_nanos().max(1) as f64;
            let responses = (o.rate * o.elapsed.as_secs_f64()).max(1.0);
            Ok(Measured {
                rate: o.rate,
                loop_core_ns_per_response: (o.loop_thread_ns + o.helpers.backstop_ns)
                    .saturating_sub(o.loop_idle_spin_ns)
                    as f64
                    / responses,
                fired_by_deadline: o.fired_by_deadline,
                fired: o.fired,
                loop_cpu_pct: o.helpers.backstop_ns as f64 / wall * 100.0,
                other_cpu_pct: o.helpers.watcher_ns as f64 / wall * 100.0,
            })
        },
    )?;
    let rates: Vec<Vec<f64>> = outcomes
        .iter()
        .map(|c| c.iter().map(|o| o.rate).collect())
        .collect();
    let loop_core: Vec<Vec<f64>> = outcomes
        .iter()
        .map(|c| c.iter().map(|o| o.loop_core_ns_per_response).collect())
        .collect();
    let rows: Vec<DeadlineRow> = configs
        .iter()
        .zip(&outcomes)
        .zip(&rates)
        .zip(&loop_core)
        .filter_map(|(((c, outcome), rate), core)| {
            let (design, deadline_us) = (*c)?;
            let by_deadline: u64 = outcome.iter().map(|o| o.fired_by_deadline).sum();
            let fired: u64 = outcome.iter().map(|o| o.fired).sum();
            let med = |f: fn(&Measured) -> f64| median(&outcome.iter().map(f).collect::<Vec<_>>());
            Some(DeadlineRow {
                design,
                deadline_us,
                extra_cost_pct: (median_ratio(core, &loop_core[0]) - 1.0) * 100.0,
                throughput_loss_pct: (1.0 - median_ratio(rate, &rates[0])) * 100.0,
                extra_cost_range_pct: {
                    let (lo, hi) = range(&paired_ratios(core, &loop_core[0]));
                    ((lo - 1.0) * 100.0, (hi - 1.0) * 100.0)
                },
                fired_pct: by_deadline as f64 / fired.max(1) as f64 * 100.0,
                loop_cpu_pct: med(|o| o.loop_cpu_pct),
                other_cpu_pct: med(|o| o.other_cpu_pct),
                fired_by_deadline: by_deadline,
                fired,
            })
        })
        .collect();
    let default_design = DeadlineDesign::default();
    // The target is the cost on the loop's core; the throughput loss is checked against the
    // same goal too, and on this two-core machine it carries the load generator's loss of CPU
    // to a watcher on its core.
    let mut targets = Vec::new();
    for r in rows.iter().filter(|r| r.design == default_design) {
        let goal = match r.deadline_us {
            50 => 1.5,
            10 | 20 => 5.0,
            _ => continue,
        };
        let name = |what: &str| {
            format!(
                "deadlines at {} µs ({}), {what} over plain soft timers, %",
                r.deadline_us,
                r.design.name()
            )
        };
        for (what, measured) in [
            (
                "extra busy CPU per response on the loop's core",
                r.extra_cost_pct,
            ),
            (
                "throughput loss (load generator on the watcher's core)",
                r.throughput_loss_pct,
            ),
        ] {
            targets.push(TargetCheck::at_most(
                name(what),
                &format!("<= {goal}"),
                goal,
                measured,
                crate::paper::ANCHOR_TABLE_XIII,
            ));
        }
    }
    Ok(E13 {
        run: RunInfo::throughput(options),
        interval_us: INTERVAL_US,
        default_design,
        plain_rps: median(&rates[0]),
        rows,
        targets,
    })
}

impl Section for E13 {
    const FILE: &'static str = "e13.json";
    fn render(&self, _dir: &Path) -> Result<Rendered> {
        let mut md = String::from("## E13: deadlines (Table XIII)\n\n");
        let _ = writeln!(
            md,
            "Soft events every {} µs on the saturated HTTP server (server on CPU {}, {} on CPU \
             {}), each with a deadline the given time past its due time; {} round(s) of {} s, \
             every design interleaved in each round. Extra cost is the busy CPU time on the \
             loop's core (loop and backstop threads, less the loop's idle spinning) per \
             response, against plain soft timers (median of per-round ratios, range in \
             brackets): what the paper's throughput loss measured, with its clients on other \
             machines. Throughput loss (plain soft timers: {:.0} req/s) also carries what a \
             watcher on the load generator's core takes from the load generator, on this \
             two-core machine. The designs: `watcher` sleeps on another CPU until \
             the earliest published deadline; `watcher-spin` spins there instead; \
             `lazy-timerfd` is a one-shot kernel timer on the loop's CPU, re-armed lazily. The \
             default is `{}`.\n",
            self.interval_us,
            self.run.server_cpu,
            self.run.client_name(),
            self.run.client_cpu,
            self.run.rounds,
            self.run.run_s,
            self.plain_rps,
            self.default_design.name(),
        );
        md += "| design | deadline | extra cost on the loop's core (%) [range] | throughput loss (%) | fired by the deadline service (%) | helper CPU on the loop's core (%) | watcher CPU on another core (%) | events fired by it / all |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
        for r in &self.rows {
            let _ = writeln!(
                md,
                "| {} | {} µs | {:.2} [{:.1}, {:.1}] | {:.2} | {:.3} | {:.2} | {:.1} | {} / {} |",
                r.design.name(),
                r.deadline_us,
                r.extra_cost_pct,
                r.extra_cost_range_pct.0,
                r.extra_cost_range_pct.1,
                r.throughput_loss_pct,
                r.fired_pct,
                r.loop_cpu_pct,
                r.other_cpu_pct,
                r.fired_by_deadline,
                r.fired
            );
        }
        let _ = writeln!(md, "\n{PAPER_TABLE_XIII}\n");
        Ok(Rendered::section(md, &self.targets, Vec::new()))
    }

    fn targets(&self) -> &[TargetCheck] {
        &self.targets
    }
}
