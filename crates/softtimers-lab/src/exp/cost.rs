//! The cost of a timer event on a saturated HTTP server: E1 (the paper's Table I, null
//! handler) and E2 (Tables II–III, a handler that touches 50 cache lines).
//!
//! Every configuration runs interleaved with a run without events, round by round; the loss
//! is the median of per-round throughput ratios, and the cost per event is the loss divided
//! by the event rate. `bench timers` measures the same cost on a synthetic workload and
//! shows the same paper figures ([`PAPER_TABLE_I`]).

use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::harness::{
    ExpOptions, HandlerKind, RunInfo, RunResult, Setup, TimerSource, Workload, interleaved,
    interval_label, per_config, run,
};
use crate::paper::{PAPER_TABLE_I, PAPER_TABLES_II_III};
use crate::report::{Page, Section};
use crate::summary::{median, median_ratio};
use crate::table::Table;
use crate::targets::{Goal, TargetCheck, soft_vs_hardware_targets};

/// One timer configuration against the run without events (E1, E2).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CostRow {
    /// The timer source.
    pub source: TimerSource,
    /// Event interval, µs (0: every trigger state).
    pub interval_us: u64,
    /// The handler.
    pub handler: HandlerKind,
    /// Server throughput, responses/s (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub throughput_rps: f64,
    /// Throughput loss against no events, % (median of per-round ratios).
    #[serde(deserialize_with = "crate::summary::num")]
    pub slowdown_pct: f64,
    /// Events fired per second (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub events_per_s: f64,
    /// Cost per event, µs: the loss divided by the event rate.
    #[serde(deserialize_with = "crate::summary::num")]
    pub cost_per_event_us: f64,
    /// Timer signals that found the facility busy and were dropped (summed over rounds;
    /// signal source only, 0 for the others).
    #[serde(default)]
    pub signal_busy: u64,
    /// Rounds in which a timer signal left the server no time to answer at all: a
    /// throughput of 0 in the medians, and a cost per event that is a lower bound.
    #[serde(default)]
    pub starved_rounds: u32,
}

crate::timer_cost_row!(CostRow, starved: starved_rounds);

/// E1's result (`e1.json`).
pub type E1 = RunResult<CostRow, E1Extra>;

/// E2's result (`e2.json`).
pub type E2 = RunResult<CostRow, E2Extra>;

/// What E1 records beside its rows: the run without events.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E1Extra {
    /// Throughput without events, req/s (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub baseline_rps: f64,
}

/// What E2 records beside its rows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E2Extra {
    /// Throughput without events, req/s (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub baseline_rps: f64,
    /// Whether the kernel exposes hardware cache-miss counters on this machine.
    pub hardware_counters: bool,
}

/// Whether the kernel exposes a hardware cache-miss event (absent on VMs without a PMU).
fn hardware_counters() -> bool {
    ["cpu", "cpu_core", "cpu_atom"].iter().any(|pmu| {
        Path::new(&format!(
            "/sys/bus/event_source/devices/{pmu}/events/cache-misses"
        ))
        .exists()
    })
}

/// Runs `configs` (source, interval) interleaved with a run without events on the saturated
/// keep-alive HTTP server; returns how, the baseline's throughput and a row per config.
fn cost_table(
    options: &ExpOptions,
    handler: HandlerKind,
    configs: &[(TimerSource, u64)],
    progress: &mut dyn FnMut(f64, &str),
) -> Result<(RunInfo, f64, Vec<CostRow>)> {
    let length = options.length;
    let mut all = vec![(TimerSource::None, 0)];
    all.extend_from_slice(configs);
    // A timer signal every 10 µs can take the whole server core on a loaded machine: no
    // throughput is then the signal's measured cost (loss 100 %), as in E6.
    let base = Setup {
        handler,
        starving_measured: true,
        ..Setup::plain(
            Workload::HttpKeepAlive,
            length.throughput_run(),
            options.client,
        )
    };
    let outcomes = interleaved(
        length.rounds(),
        &all,
        progress,
        |&(s, us)| format!("{} {}", s.name(), interval_label(s, us)),
        |&(source, us)| {
            let o = run(&base.clone().events(source, us))?;
            Ok((o.rate, o.events_per_s, o.signal_busy))
        },
    )?;
    let rates = per_config(&outcomes, |o| o.0);
    let rows = all
        .iter()
        .zip(&outcomes)
        .zip(&rates)
        .skip(1)
        .map(|((&(source, interval_us), outcome), rate)| {
            let loss = 1.0 - median_ratio(rate, &rates[0]);
            let events = median(&outcome.iter().map(|o| o.1).collect::<Vec<_>>());
            CostRow {
                source,
                interval_us,
                handler,
                throughput_rps: median(rate),
                slowdown_pct: loss * 100.0,
                events_per_s: events,
                cost_per_event_us: if events > 0.0 {
                    loss / events * 1e6
                } else {
                    0.0
                },
                signal_busy: outcome.iter().map(|o| o.2).sum(),
                starved_rounds: rate.iter().filter(|&&r| r == 0.0).count() as u32,
            }
        })
        .collect();
    let info = RunInfo::throughput(options);
    Ok((info, median(&rates[0]), rows))
}

fn cost_markdown(baseline_rps: f64, rows: &[CostRow]) -> String {
    let mut table = Table::new(
        "source | interval: | throughput (req/s): | loss %: | events/s: | µs per event: | signals dropped (facility busy):",
    );
    table.row(&[
        &"none",
        &"—",
        &format!("{baseline_rps:.0}"),
        &"—",
        &0,
        &"—",
        &"—",
    ]);
    for r in rows {
        let per_event = if r.events_per_s > 0.0 {
            format!("{:.3}", r.cost_per_event_us)
        } else {
            "—".to_string()
        };
        let busy = match (r.source, r.starved_rounds) {
            (TimerSource::Signal, 0) => r.signal_busy.to_string(),
            (TimerSource::Signal, n) => {
                format!("{} (no response at all in {n} round(s))", r.signal_busy)
            }
            _ => "—".to_string(),
        };
        table.row(&[
            &r.source.name(),
            &interval_label(r.source, r.interval_us),
            &format!("{:.0}", r.throughput_rps),
            &format!("{:.2}", r.slowdown_pct),
            &format!("{:.0}", r.events_per_s),
            &per_event,
            &busy,
        ]);
    }
    table.finish()
}

fn setup_sentence(run: &RunInfo) -> String {
    format!(
        "Saturated HTTP server (keep-alive, 6 KB file, 32 connections from {} on CPU {}; \
         server on CPU {}), {} s per run, {} interleaved round(s); loss is the median of \
         per-round throughput ratios against the run without events, whose loop runs no timer \
         machinery at all (`soft-no-events`, where measured, is the soft-timer machinery with \
         nothing scheduled: its trigger checks and backstop).",
        run.client_name(),
        run.client_cpu,
        run.server_cpu,
        run.run_s,
        run.rounds
    )
}

/// E1's timerfd and timer-signal intervals, µs.
const E1_INTERVALS_US: [u64; 3] = [10, 20, 50];
/// E1's configurations besides the run without events.
pub const E1_CONFIGS: usize = 2 + 2 * E1_INTERVALS_US.len();

/// E2's intervals, µs, and the sources at each.
const E2_INTERVALS_US: [u64; 2] = [10, 20];
const E2_SOURCES: [TimerSource; 3] = [TimerSource::Soft, TimerSource::Timerfd, TimerSource::Signal];
/// E2's configurations besides the run without events.
pub const E2_CONFIGS: usize = E2_INTERVALS_US.len() * E2_SOURCES.len();

/// E1 (Table I): cost per event with a null handler, from the saturated HTTP server's loss:
/// soft timers at every trigger state, a timerfd and a timer signal every 10, 20 and 50 µs.
pub fn e1(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E1> {
    let mut configs = vec![(TimerSource::BackstopOnly, 0), (TimerSource::Soft, 0)];
    for us in E1_INTERVALS_US {
        configs.push((TimerSource::Timerfd, us));
        configs.push((TimerSource::Signal, us));
    }
    debug_assert_eq!(configs.len(), E1_CONFIGS);
    let (run, baseline_rps, rows) = cost_table(options, HandlerKind::Null, &configs, progress)?;
    let mut targets =
        soft_vs_hardware_targets("throughput loss, soft timers at every trigger state", &rows);
    if let Some(soft) = rows
        .iter()
        .find(|r| r.source == TimerSource::Soft && r.interval_us == 0)
    {
        targets.push(TargetCheck::new(
            "throughput loss, an event at every trigger state, against the loop with no timer \
             machinery, %",
            Goal::at_most(2.0, "<= 2"),
            soft.slowdown_pct,
            crate::paper::ANCHOR_TABLE_I,
        ));
    }
    Ok(E1 {
        run,
        extra: E1Extra { baseline_rps },
        rows,
        targets,
    })
}

impl Section for E1 {
    const FILE: &'static str = "e1.json";
    const TITLE: &'static str = "E1: cost per timer event, null handler (Table I)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        page.text(&setup_sentence(&self.run));
        page.text("\n\n");
        page.text(&cost_markdown(self.extra.baseline_rps, &self.rows));
        page.text(
            "\nA timerfd is read only when the loop returns to `epoll_wait`, which on a \
             saturated server is once per batch of requests, so at short intervals it \
             delivers far fewer events than asked for; only the signal interrupts the \
             server.\n",
        );
        page.paper(PAPER_TABLE_I);
        page.targets(&self.targets);
        Ok(())
    }
}

/// E2 (Tables II–III): the synthetic handler every 10 and 20 µs from each source.
pub fn e2(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E2> {
    let mut configs = Vec::new();
    for us in E2_INTERVALS_US {
        for source in E2_SOURCES {
            configs.push((source, us));
        }
    }
    let (run, baseline_rps, rows) =
        cost_table(options, HandlerKind::Synthetic, &configs, progress)?;
    Ok(E2 {
        run,
        extra: E2Extra {
            baseline_rps,
            hardware_counters: hardware_counters(),
        },
        rows,
        targets: Vec::new(),
    })
}

impl Section for E2 {
    const FILE: &'static str = "e2.json";
    const TITLE: &'static str = "E2: cost per event, synthetic handler (Tables II–III)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        page.text(
            "The handler writes 50 cache lines, a different set each call, cycling over 4 \
             pages (Section 5.1), then re-arms. ",
        );
        page.text(&setup_sentence(&self.run));
        page.text("\n\n");
        page.text(&cost_markdown(self.extra.baseline_rps, &self.rows));
        page.text(if self.extra.hardware_counters {
            "\nCache-miss counts: not collected (the lab does not read the hardware \
             performance counters this machine has).\n\n"
        } else {
            "\nCache-miss counts: unavailable on this machine (no hardware performance \
             counters).\n\n"
        });
        page.text(PAPER_TABLES_II_III);
        page.text("\n");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::targets::soft_vs_hardware_targets;

    fn row(source: TimerSource, interval_us: u64, cost: f64, starved_rounds: u32) -> CostRow {
        CostRow {
            source,
            interval_us,
            handler: HandlerKind::Null,
            throughput_rps: 1.0,
            slowdown_pct: 1.0,
            events_per_s: 1.0,
            cost_per_event_us: cost,
            signal_busy: 0,
            starved_rounds,
        }
    }

    #[test]
    fn a_starved_signal_row_is_named_a_lower_bound_and_old_files_read_without_the_count() {
        let rows = [
            row(TimerSource::Soft, 0, 0.1, 0),
            row(TimerSource::Signal, 10, 5.0, 2),
            row(TimerSource::Timerfd, 10, 5.0, 0),
        ];
        let targets = soft_vs_hardware_targets("loss", &rows);
        assert!(
            targets[1]
                .figure
                .contains("a lower bound: no response at all in 2 round(s)")
        );
        assert!(!targets[2].figure.contains("lower bound"));
        assert!(cost_markdown(1.0, &rows).contains("0 (no response at all in 2 round(s))"));
        let old: CostRow = serde_json::from_str(
            r#"{"source": "signal", "interval_us": 10, "handler": "null", "throughput_rps": 1,
                "slowdown_pct": 1, "events_per_s": 1, "cost_per_event_us": 1}"#,
        )
        .unwrap();
        assert_eq!(old.starved_rounds, 0);
    }
}
