//! E6 (Tables VI–VII): the busy HTTP server's throughput while its loop paces a UDP flow,
//! by each kind of timer, against the server alone.

use std::fmt::Write as _;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::harness::{Clocking, ExpOptions, RunInfo, RunResult, per_config};
use crate::paper::PAPER_TABLES_VI_VII;
use crate::report::{Page, Section};
use crate::summary::{median, paired_ratios, range};
use crate::table::Table;
use crate::targets::{Goal, TargetCheck};

use super::{PACED_SIZE, PacedConfig, run_all, with_hardware};

/// One row of E6.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PacingOverheadRow {
    /// What clocks the flow: `soft`, `timerfd`, `signal`, or `none` (1 ms bursts).
    pub clocking: String,
    /// The target interval between datagrams, µs.
    pub target_interval_us: u64,
    /// Extra busy CPU time on the server's core per response against the same datagrams
    /// sent without pacing (1 ms bursts), %: the paper's overhead of rate-based clocking,
    /// which it measured as the saturated server's throughput loss (median of per-round
    /// ratios). Here the load generator shares the machine and may not saturate the server,
    /// so the CPU per response is what is compared.
    #[serde(deserialize_with = "crate::summary::num")]
    pub overhead_pct: f64,
    /// Its smallest and largest per-round value, %.
    #[serde(deserialize_with = "crate::summary::num_pair")]
    pub overhead_range_pct: (f64, f64),
    /// The same against the server with no flow at all, % (the sends' own cost included).
    #[serde(deserialize_with = "crate::summary::num")]
    pub cost_vs_no_flow_pct: f64,
    /// Throughput loss against the unpaced flow, % (median of per-round ratios).
    #[serde(deserialize_with = "crate::summary::num")]
    pub throughput_loss_pct: f64,
    /// HTTP throughput, req/s (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub rps: f64,
    /// The achieved mean interval between datagrams, µs (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub mean_interval_us: f64,
    /// The standard deviation of the intervals, µs (median of rounds): how evenly the
    /// datagrams left.
    #[serde(deserialize_with = "crate::summary::num")]
    pub stddev_interval_us: f64,
    /// Datagrams sent, summed over rounds.
    pub sent: u64,
    /// Datagrams the receiver got, summed over rounds.
    pub received: u64,
    /// Rounds in which the server answered no request at all: the timer signal left it no
    /// time. They count in `throughput_loss_pct` and are left out of the figures per
    /// response (`overhead_pct`, its range, `cost_vs_no_flow_pct`: null when every round
    /// starved).
    #[serde(default)]
    pub starved_rounds: usize,
}

/// E6's result (`e6.json`).
pub type E6 = RunResult<PacingOverheadRow, E6Extra>;

/// What E6 records beside its rows: the server's throughput without a flow.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E6Extra {
    /// Throughput with no flow, req/s (median of rounds).
    #[serde(deserialize_with = "crate::summary::num")]
    pub no_flow_rps: f64,
}

/// E6 (Tables VI–VII): the HTTP server's throughput while it paces a UDP flow.
pub fn e6(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E6> {
    let mut configs = vec![PacedConfig::plain()];
    for interval in [20u64, 10] {
        let adaptive = Clocking::Adaptive {
            min_interval_us: interval / 2,
        };
        configs.extend(with_hardware(&[Clocking::Bursts, adaptive], interval, true));
    }
    let outcomes = run_all(&configs, options.length.rounds(), options, progress)?;
    let rates = per_config(&outcomes, |r| r.rate);
    let cpu = per_config(&outcomes, |r| r.loop_core_ns_per_response);
    let mut rows = Vec::new();
    for (i, c) in configs.iter().enumerate().skip(1) {
        let interval = c.interval_us();
        let bursts = configs
            .iter()
            .position(|b| {
                b.interval_us() == interval && b.load.map(|l| l.clocking) == Some(Clocking::Bursts)
            })
            .expect("a burst reference per interval");
        // Rounds a signal starved have no cost per response (NaN): left out.
        let extra = |reference: usize| {
            paired_ratios(&cpu[i], &cpu[reference])
                .iter()
                .map(|r| (r - 1.0) * 100.0)
                .filter(|x| x.is_finite())
                .collect::<Vec<_>>()
        };
        let overhead = extra(bursts);
        let loss: Vec<f64> = paired_ratios(&rates[i], &rates[bursts])
            .iter()
            .map(|r| (1.0 - r) * 100.0)
            .collect();
        rows.push(PacingOverheadRow {
            clocking: match c.load.map(|l| l.clocking) {
                Some(Clocking::Bursts) => "none".into(),
                _ => c.source.name().into(),
            },
            target_interval_us: interval,
            overhead_pct: median(&overhead),
            overhead_range_pct: range(&overhead),
            cost_vs_no_flow_pct: median(&extra(0)),
            throughput_loss_pct: median(&loss),
            rps: median(&rates[i]),
            mean_interval_us: median(
                &outcomes[i]
                    .iter()
                    .map(|r| r.pace.mean_interval_us)
                    .collect::<Vec<_>>(),
            ),
            stddev_interval_us: median(
                &outcomes[i]
                    .iter()
                    .map(|r| r.pace.stddev_interval_us)
                    .collect::<Vec<_>>(),
            ),
            sent: outcomes[i].iter().map(|r| r.pace.sent).sum(),
            received: outcomes[i].iter().map(|r| r.pace.received).sum(),
            starved_rounds: rates[i].iter().filter(|&&r| r == 0.0).count(),
        });
    }
    let overhead_of = |clocking: &str, interval: u64| {
        rows.iter()
            .find(|r| r.clocking == clocking && r.target_interval_us == interval)
            .map_or(f64::NAN, |r| r.overhead_pct)
    };
    let soft = overhead_of("soft", 20);
    let timerfd = overhead_of("timerfd", 20);
    let ratio = overhead_ratio(timerfd, soft);
    let targets = vec![
        TargetCheck::new(
            "E6 overhead of soft-timer pacing at 20 µs, %",
            Goal::at_most(2.0, "<= 2 (paper: 2-6)"),
            soft,
            crate::paper::ANCHOR_TABLES_VI_VII,
        ),
        TargetCheck::new(
            "E6 timerfd overhead / soft overhead at 20 µs",
            Goal::at_least(5.0, ">= 5"),
            ratio,
            crate::paper::ANCHOR_TABLES_VI_VII,
        ),
    ];
    Ok(E6 {
        run: RunInfo::throughput(options),
        extra: E6Extra {
            no_flow_rps: median(&rates[0]),
        },
        rows,
        targets,
    })
}

/// `timerfd`'s overhead over `soft`'s. A soft overhead at or below zero (within noise of
/// none) makes any positive timerfd overhead unboundedly larger; with both at or below zero
/// the ratio means nothing (NaN, shown as "n/a").
pub(super) fn overhead_ratio(timerfd: f64, soft: f64) -> f64 {
    if soft.is_nan() || timerfd.is_nan() {
        f64::NAN
    } else if soft > 0.0 {
        timerfd / soft
    } else if timerfd > 0.0 {
        f64::INFINITY
    } else {
        f64::NAN
    }
}

impl Section for E6 {
    const FILE: &'static str = "e6.json";
    const TITLE: &'static str = "E6: overhead of rate-based clocking (Tables VI–VII)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        let _ = writeln!(
            page,
            "The HTTP server (CPU {}, {} on CPU {}) sends a UDP flow of {PACED_SIZE}-byte \
             datagrams from its event loop while it serves: paced by soft timers (the adaptive \
             pacer, burst interval half the target), by a periodic timerfd or a timer signal at \
             the target interval (one datagram per expiry), or not paced (the datagrams due \
             sent back to back every 1 ms, as a window without rate-based clocking). Overhead \
             is the extra busy CPU time on the server's core per response against the unpaced \
             flow at the same interval, as the paper's base system sent the same packets in \
             bursts (median of per-round ratios [range]; the paper measured the saturated \
             server's throughput loss, reported here beside it); {} round(s) of {} s, interleaved. With no flow: {:.0} req/s.\n",
            self.run.server_cpu,
            self.run.client_name(),
            self.run.client_cpu,
            self.run.rounds,
            self.run.run_s,
            self.extra.no_flow_rps,
        );
        let mut table = Table::new(
            "clocking | target interval: | overhead (%) [range]: | cost vs no flow (%): | throughput loss (%): | req/s: | achieved mean interval (µs): | interval stddev (µs): | sent / received:",
        );
        // A figure per response of rounds that all starved: none.
        let fig = |x: f64, digits: usize| {
            if x.is_finite() {
                format!("{x:.digits$}")
            } else {
                "n/a".to_string()
            }
        };
        for r in &self.rows {
            table.row(&[
                &r.clocking,
                &format!("{} µs", r.target_interval_us),
                &format!(
                    "{} [{}, {}]",
                    fig(r.overhead_pct, 2),
                    fig(r.overhead_range_pct.0, 1),
                    fig(r.overhead_range_pct.1, 1)
                ),
                &fig(r.cost_vs_no_flow_pct, 1),
                &format!("{:.1}", r.throughput_loss_pct),
                &format!("{:.0}", r.rps),
                &format!("{:.2}", r.mean_interval_us),
                &format!("{:.1}", r.stddev_interval_us),
                &format!("{} / {}", r.sent, r.received),
            ]);
        }
        page.table(table);
        for r in self.rows.iter().filter(|r| r.starved_rounds > 0) {
            let _ = writeln!(
                page,
                "\n{} at {} µs: in {} of {} round(s) the timer left the server no time to \
                 answer a single request (0 req/s, counted in its throughput loss; its figures \
                 per response leave those rounds out, n/a when all).",
                r.clocking, r.target_interval_us, r.starved_rounds, self.run.rounds,
            );
        }
        page.paper(PAPER_TABLES_VI_VII);
        page.targets(&self.targets);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::overhead_ratio;

    #[test]
    fn the_overhead_ratio_is_unbounded_or_undefined_where_soft_costs_nothing() {
        assert_eq!(overhead_ratio(10.0, 2.0), 5.0);
        assert_eq!(overhead_ratio(10.0, 0.0), f64::INFINITY);
        assert_eq!(overhead_ratio(10.0, -3.0), f64::INFINITY);
        // Both within noise of none: no ratio, not −10⁹.
        assert!(overhead_ratio(-10.5, -9.8).is_nan());
        assert!(overhead_ratio(0.0, 0.0).is_nan());
        // A row that is missing is no ratio either.
        assert!(overhead_ratio(10.0, f64::NAN).is_nan());
        assert!(overhead_ratio(f64::NAN, 2.0).is_nan());
        // The target (≥ 5) is met only by a ratio that reaches it: NaN never does.
        let met = |r: f64| r >= 5.0;
        assert!(met(overhead_ratio(10.0, 0.0)));
        assert!(!met(overhead_ratio(-10.5, -9.8)));
        assert!(!met(overhead_ratio(0.0, 0.0)));
    }
}
