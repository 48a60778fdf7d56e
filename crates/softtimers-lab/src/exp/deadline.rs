//! Deadlines: E13 (the paper's Table XIII). Soft events every 20 µs on the saturated HTTP
//! server, each with a deadline past its due time, enforced by each of the runtime's deadline
//! designs in turn, against plain soft timers in the same rounds. Beside the cost on the
//! loop's core, every core's busy time is read from `/proc/stat` around each run: each
//! design's CPU on every core, the load generator's included.

use std::fmt::Write as _;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use softtimer_rt::DeadlineDesign;

use crate::harness::{
    ExpOptions, RunInfo, RunResult, Setup, TimerSource, Workload, interleaved, per_config, run,
};
use crate::paper::PAPER_TABLE_XIII;
use crate::report::{Page, Section};
use crate::summary::{median, median_ratio, paired_ratios, range};
use crate::table::Table;
use crate::targets::{Goal, TargetCheck};

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

/// One core's busy time during one configuration's runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CoreRow {
    /// The design (`None`: plain soft timers, no deadlines).
    pub design: Option<DeadlineDesign>,
    /// The deadline, µs past the due time (`None` with plain soft timers).
    pub deadline_us: Option<u64>,
    /// The CPU.
    pub core: usize,
    /// Its busy time (user, system, interrupts: everything on it, this run's programs and
    /// any other), % of the run's wall time (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub busy_pct: f64,
    /// Its busy time over plain soft timers' on the same core, points (median of per-round
    /// differences; 0 for plain soft timers).
    #[serde(deserialize_with = "crate::summary::num")]
    pub extra_points: f64,
}

/// E13's result (`e13.json`).
pub type E13 = RunResult<DeadlineRow, E13Extra>;

/// What E13 records beside its rows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E13Extra {
    /// Soft events' interval, µs.
    pub interval_us: u64,
    /// The runtime's default design (the one the targets are checked on).
    pub default_design: DeadlineDesign,
    /// Throughput with plain soft timers (no deadline), req/s (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub plain_rps: f64,
    /// Every configuration's busy time on every core, a row per core (absent in older
    /// reports).
    #[serde(default)]
    pub cores: Vec<CoreRow>,
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
    /// Each core's busy time, % of the wall time around the run.
    core_busy_pct: Vec<f64>,
}

/// `/proc/stat`'s unit: USER_HZ, 100 per second on every architecture (the kernel scales its
/// own tick to it for this interface).
const USER_HZ: f64 = 100.0;

/// Each CPU's busy time so far (user, nice, system, irq, softirq), s; empty where
/// `/proc/stat` cannot be read.
fn core_busy_s() -> Vec<f64> {
    std::fs::read_to_string("/proc/stat")
        .map(|text| parse_core_busy_s(&text))
        .unwrap_or_default()
}

fn parse_core_busy_s(stat: &str) -> Vec<f64> {
    stat.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            // user nice system idle iowait irq softirq ...
            let busy = [0, 1, 2, 5, 6]
                .iter()
                .map(|&i| f.get(i).copied().unwrap_or(0));
            busy.sum::<u64>() as f64 / USER_HZ
        })
        .collect()
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
    // At 10 µs on a slow host a design can leave no response in a whole run (the lazy
    // `timerfd` starving the server's core, a watcher the load generator's): a measured
    // loss of all throughput, not a failure that ends the lab.
    let base = Setup {
        starving_measured: true,
        ..base
    };
    let outcomes = interleaved(
        length.rounds(),
        &configs,
        progress,
        |c| match c {
            None => "no deadlines".into(),
            Some((design, d)) => format!("{} {d} µs", design.name()),
        },
        |&config| {
            let (busy0, wall0) = (core_busy_s(), std::time::Instant::now());
            let o = run(&Setup {
                deadline_us: config.map(|(_, d)| d),
                deadline_design: config.map_or(DeadlineDesign::default(), |(design, _)| design),
                ..base.clone()
            })?;
            let around = wall0.elapsed().as_secs_f64().max(1e-9);
            let core_busy_pct = core_busy_s()
                .iter()
                .zip(&busy0)
                .map(|(after, before)| (after - before) / around * 100.0)
                .collect();
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
                core_busy_pct,
            })
        },
    )?;
    let rates = per_config(&outcomes, |o| o.rate);
    let loop_core = per_config(&outcomes, |o| o.loop_core_ns_per_response);
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
    let cores = core_rows(&configs, &outcomes);
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
            targets.push(TargetCheck::new(
                name(what),
                Goal::at_most(goal, &format!("<= {goal}")),
                measured,
                crate::paper::ANCHOR_TABLE_XIII,
            ));
        }
    }
    Ok(E13 {
        run: RunInfo::throughput(options),
        extra: E13Extra {
            interval_us: INTERVAL_US,
            default_design,
            plain_rps: median(&rates[0]),
            cores,
        },
        rows,
        targets,
    })
}

/// A row per (configuration, core): the core's busy time, and its difference from plain soft
/// timers' (the first configuration) in the same round.
fn core_rows(
    configs: &[Option<(DeadlineDesign, u64)>],
    outcomes: &[Vec<Measured>],
) -> Vec<CoreRow> {
    let busy = |runs: &[Measured], core: usize| -> Vec<f64> {
        runs.iter()
            .map(|m| m.core_busy_pct.get(core).copied().unwrap_or(f64::NAN))
            .collect()
    };
    let cores = outcomes
        .iter()
        .flatten()
        .map(|m| m.core_busy_pct.len())
        .max()
        .unwrap_or(0);
    let row = |config: &Option<(DeadlineDesign, u64)>, runs: &[Measured], core: usize| {
        let (this, plain) = (busy(runs, core), busy(&outcomes[0], core));
        let differences: Vec<f64> = this.iter().zip(&plain).map(|(a, b)| a - b).collect();
        CoreRow {
            design: config.map(|(d, _)| d),
            deadline_us: config.map(|(_, us)| us),
            core,
            busy_pct: median(&this),
            extra_points: median(&differences),
        }
    };
    let row = &row;
    configs
        .iter()
        .zip(outcomes)
        .flat_map(|(config, runs)| (0..cores).map(move |core| row(config, runs, core)))
        .collect()
}

impl Section for E13 {
    const FILE: &'static str = "e13.json";
    const TITLE: &'static str = "E13: deadlines (Table XIII)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        let _ = writeln!(
            page,
            "Soft events every {} µs on the saturated HTTP server (server on CPU {}, {} on CPU \
             {}), each with a deadline the given time past its due time; {} round(s) of {} s, \
             every design interleaved in each round. Extra cost is the busy CPU time on the \
             loop's core (loop and backstop threads, less the loop's idle spinning) per \
             response, against plain soft timers (median of per-round ratios, range in \
             brackets): what the paper's throughput loss measured, with its clients on other \
             machines. Throughput loss (plain soft timers: {:.0} req/s) also carries what a \
             watcher on the load generator's core takes from the load generator, on this \
             two-core machine (a run in which it got no response counts as none). The designs: `watcher` sleeps on another CPU until \
             the earliest published deadline; `watcher-spin` spins there instead; \
             `lazy-timerfd` is a one-shot kernel timer on the loop's CPU, re-armed lazily. The \
             default is `{}`.\n",
            self.extra.interval_us,
            self.run.server_cpu,
            self.run.client_name(),
            self.run.client_cpu,
            self.run.rounds,
            self.run.run_s,
            self.extra.plain_rps,
            self.extra.default_design.name(),
        );
        page.table(
            Table::of(&self.rows)
                .text("design", |r| r.design.name())
                .text("deadline:", |r| format!("{} µs", r.deadline_us))
                .text("extra cost on the loop's core (%) [range]:", |r| {
                    format!(
                        "{:.2} [{:.1}, {:.1}]",
                        r.extra_cost_pct, r.extra_cost_range_pct.0, r.extra_cost_range_pct.1
                    )
                })
                .fixed("throughput loss (%):", 2, |r| r.throughput_loss_pct)
                .fixed("fired by the deadline service (%):", 3, |r| r.fired_pct)
                .fixed("helper CPU on the loop's core (%):", 2, |r| r.loop_cpu_pct)
                .fixed("watcher CPU on another core (%):", 1, |r| r.other_cpu_pct)
                .text("events fired by it / all:", |r| {
                    format!("{} / {}", r.fired_by_deadline, r.fired)
                })
                .table(),
        );
        if !self.extra.cores.is_empty() {
            page.text(
                "\nEvery core's busy time (`/proc/stat`: everything on it, the load generator's \
                   and the helpers' included), % of the run's wall time, and its difference \
                   from plain soft timers' in points (median of per-round differences):\n\n",
            );
            page.table(
                Table::of(&self.extra.cores)
                    .text("design", |c| {
                        c.design.map_or("plain soft timers", |d| d.name())
                    })
                    .text("deadline:", |c| {
                        c.deadline_us.map_or("—".into(), |us| format!("{us} µs"))
                    })
                    .text("core:", |c| c.core)
                    .fixed("busy (%):", 1, |c| c.busy_pct)
                    .text("over plain soft timers (points):", |c| {
                        format!("{:+.2}", c.extra_points)
                    })
                    .table(),
            );
        }
        page.paper(PAPER_TABLE_XIII);
        page.targets(&self.targets);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_gives_each_cpus_busy_time_and_core_rows_compare_with_plain() {
        let stat = "cpu  500 0 500 9000 0 0 0 0 0 0\n\
                    cpu0 100 10 200 4000 7 3 4 50 0 0\n\
                    cpu1 300 0 100 5000 0 0 0 0 0 0\n\
                    intr 1 2 3\n";
        // USER_HZ ticks: user + nice + system + irq + softirq, not idle, iowait or steal.
        assert_eq!(parse_core_busy_s(stat), vec![3.17, 4.0]);
        assert!(!core_busy_s().is_empty(), "this machine has /proc/stat");
        let measured = |core_busy_pct: Vec<f64>| Measured {
            rate: 1.0,
            loop_core_ns_per_response: 1.0,
            fired_by_deadline: 0,
            fired: 1,
            loop_cpu_pct: 0.0,
            other_cpu_pct: 0.0,
            core_busy_pct,
        };
        let configs = [None, Some((DeadlineDesign::default(), 50))];
        let outcomes = vec![
            vec![measured(vec![90.0, 50.0]), measured(vec![92.0, 52.0])],
            vec![measured(vec![91.0, 60.0]), measured(vec![93.0, 55.0])],
        ];
        let rows = core_rows(&configs, &outcomes);
        assert_eq!(rows.len(), 4);
        assert_eq!(
            (rows[0].design, rows[0].core, rows[0].extra_points),
            (None, 0, 0.0)
        );
        assert_eq!(rows[3].deadline_us, Some(50));
        assert_eq!(rows[3].busy_pct, 57.5);
        assert_eq!(rows[3].extra_points, 6.5, "median of 10 and 3");
        assert_eq!(rows[2].extra_points, 1.0);
    }
}
