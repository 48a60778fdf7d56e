//! How often trigger states come: E3 (the paper's Table IV and Fig. 2, intervals by
//! workload), E4 (Fig. 3, medians over 1 ms and 10 ms windows) and E5 (Table V and Fig. 4,
//! trigger states by source).
//!
//! Every run keeps a soft event pending at every trigger state, as the paper's facility had,
//! so that a waiting server runs the idle loop instead of sleeping.

use std::fmt::Write as _;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use softtimer::{Span, TriggerSource, TriggerStats};

use crate::harness::{
    ExpOptions, RunInfo, RunResult, Setup, TimerSource, Workload, run, trigger_source_name,
};
use crate::paper::{PAPER_FIG_3, PAPER_TABLE_IV, PAPER_TABLE_V};
use crate::plot::{LineChart, Series, line_chart};
use crate::report::{Page, Section};
use crate::summary::{median, percentile};
use crate::table::Table;
use crate::targets::{Goal, TargetCheck};

/// Points per CDF line.
const CDF_POINTS: u32 = 400;
/// E3's plot: the CDF by workload.
const E3_CDF: CdfPlot = CdfPlot {
    file: "e3_cdf.png",
    alt: "trigger interval CDF",
    title: "Trigger-state intervals (CDF), by workload",
    x_max_us: 200.0,
};
/// E5's plot: the CDF with one source left out.
const E5_CDF: CdfPlot = CdfPlot {
    file: "e5_sources.png",
    alt: "sources",
    title: "Trigger-state intervals with one source left out (http-keepalive)",
    x_max_us: 40.0,
};

/// A setup with a soft event at every trigger state.
fn every_trigger_state(workload: Workload, options: &ExpOptions) -> Setup {
    Setup::plain(workload, options.length.trace_run(), options.client).events(TimerSource::Soft, 0)
}

/// A trigger trace and the clock frequency its times are in.
pub struct Trace {
    /// (clock time, source) of each trigger state.
    pub points: Vec<(u64, TriggerSource)>,
    /// Ticks per second.
    pub hz: u64,
    /// How long the run lasted, s.
    pub run_s: f64,
}

/// One row of E3.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IntervalRow {
    /// The workload.
    pub workload: Workload,
    /// Intervals measured.
    pub samples: u64,
    /// Largest, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub max_us: f64,
    /// Mean, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub mean_us: f64,
    /// Median, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub median_us: f64,
    /// Standard deviation, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub stddev_us: f64,
    /// Share above 100 µs, %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub pct_over_100us: f64,
    /// Share above 150 µs, %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub pct_over_150us: f64,
}

/// E3's result (`e3.json`).
pub type E3 = RunResult<IntervalRow, E3Extra>;

/// What E3 records beside its rows: the interval CDF of each workload (the plot).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E3Extra {
    /// The CDF of each workload's intervals.
    pub cdf: Vec<Series>,
}

fn interval_row(workload: Workload, stats: &TriggerStats) -> IntervalRow {
    let h = stats.trigger_intervals_ns();
    let n = h.len().max(1) as f64;
    let above = |us: u64| h.count_between(us * 1000 + 1, u64::MAX) as f64 / n * 100.0;
    IntervalRow {
        workload,
        samples: h.len(),
        max_us: h.max() as f64 / 1000.0,
        mean_us: h.mean() / 1000.0,
        median_us: h.value_at_quantile(0.5) as f64 / 1000.0,
        stddev_us: h.stdev() / 1000.0,
        pct_over_100us: above(100),
        pct_over_150us: above(150),
    }
}

fn cdf_points(stats: &TriggerStats, max_us: f64) -> Vec<(f64, f64)> {
    let h = stats.trigger_intervals_ns();
    (0..=CDF_POINTS)
        .map(|i| {
            let us = max_us * f64::from(i) / f64::from(CDF_POINTS);
            let below = h.count_between(0, (us * 1000.0) as u64) as f64 / h.len().max(1) as f64;
            (us, below)
        })
        .collect()
}

fn cdf_from_sorted(sorted: &[f64], max_us: f64) -> Vec<(f64, f64)> {
    (0..=CDF_POINTS)
        .map(|i| {
            let us = max_us * f64::from(i) / f64::from(CDF_POINTS);
            let below = sorted.partition_point(|&v| v <= us) as f64 / sorted.len().max(1) as f64;
            (us, below)
        })
        .collect()
}

fn sorted_intervals_us(
    trace: &[(u64, TriggerSource)],
    hz: u64,
    skip: Option<TriggerSource>,
) -> Vec<f64> {
    let mut out: Vec<f64> = trace
        .iter()
        .filter(|(_, s)| Some(*s) != skip)
        .map(|(t, _)| *t)
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| Span::from_ticks(w[1].saturating_sub(w[0])).as_nanos(hz) as f64 / 1000.0)
        .collect();
    out.sort_by(f64::total_cmp);
    out
}

/// A plot of the CDF of trigger-state intervals from 0 to `x_max_us`: the points are cut at
/// that axis when recorded, the plot drawn from them.
struct CdfPlot {
    file: &'static str,
    alt: &'static str,
    title: &'static str,
    x_max_us: f64,
}

impl CdfPlot {
    /// Draws `series` into `page`'s directory; returns its image.
    fn draw(&self, page: &mut Page<'_>, series: &[Series]) -> Result<String> {
        page.plot(self.file, self.alt, |path| {
            line_chart(
                path,
                &LineChart {
                    title: self.title,
                    x_label: "interval between trigger states (µs)",
                    y_label: "fraction of intervals ≤ x",
                    x_range: (0.0, self.x_max_us),
                    y_range: (0.0, 1.0),
                    series: series.to_vec(),
                },
            )
        })
    }
}

/// E3: each workload with statistics on; the keep-alive HTTP run also records a trace,
/// returned for E5.
pub fn e3(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<(E3, Trace)> {
    let workloads = [
        Workload::HttpKeepAlive,
        Workload::HttpClose,
        Workload::HttpCompute,
        Workload::Rpc,
    ];
    let mut rows = Vec::new();
    let mut cdf = Vec::new();
    let mut trace = None;
    for (i, &w) in workloads.iter().enumerate() {
        progress(i as f64 / workloads.len() as f64, w.name());
        let keep_trace = w == Workload::HttpKeepAlive;
        let setup = Setup {
            stats: true,
            trace: if keep_trace {
                options.length.trace_capacity()
            } else {
                0
            },
            ..every_trigger_state(w, options)
        };
        let o = run(&setup)?;
        let stats = o.stats.context("statistics were on")?;
        rows.push(interval_row(w, &stats));
        cdf.push(Series {
            label: w.name().into(),
            points: cdf_points(&stats, E3_CDF.x_max_us),
        });
        if keep_trace {
            trace = Some(Trace {
                points: o.trace,
                hz: o.hz,
                run_s: setup.duration.as_secs_f64(),
            });
        }
    }
    let http = rows
        .iter()
        .find(|r| r.workload == Workload::HttpKeepAlive)
        .context("the HTTP row")?;
    let targets = vec![
        TargetCheck::new(
            "trigger-interval median, HTTP (keep-alive)",
            Goal::at_most(5.0, "<= 5 µs"),
            http.median_us,
            crate::paper::ANCHOR_TABLE_IV,
        ),
        TargetCheck::new(
            "share of intervals > 100 µs, HTTP (keep-alive)",
            Goal::at_most(1.0, "<= 1 %"),
            http.pct_over_100us,
            crate::paper::ANCHOR_TABLE_IV,
        ),
    ];
    let result = E3 {
        run: RunInfo::new(options, options.length.trace_run(), 1),
        extra: E3Extra { cdf },
        rows,
        targets,
    };
    Ok((result, trace.context("the keep-alive run's trace")?))
}

impl Section for E3 {
    const FILE: &'static str = "e3.json";
    const TITLE: &'static str = "E3: trigger-state intervals by workload (Table IV, Fig. 2)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        let _ = writeln!(
            page,
            "Each workload runs {} s on the server's loop (CPU {}), load from CPU {} ({}), \
             with a soft event pending at every trigger state (as in E1, so that the idle \
             loop runs when the server waits, as the paper's did). `http-compute` adds a \
             compute-bound thread on the server's CPU; `udp-rpc` answers small UDP RPCs in \
             batches of up to 32 (`recvmmsg`/`sendmmsg`), so it makes few system calls per \
             request.\n",
            self.run.run_s,
            self.run.server_cpu,
            self.run.client_cpu,
            self.run.client_name()
        );
        page.table(
            Table::of(&self.rows)
                .text("workload", |r| r.workload.name())
                .text("samples:", |r| r.samples)
                .fixed("max (µs):", 0, |r| r.max_us)
                .fixed("mean (µs):", 2, |r| r.mean_us)
                .fixed("median (µs):", 2, |r| r.median_us)
                .fixed("stddev (µs):", 2, |r| r.stddev_us)
                .fixed("> 100 µs (%):", 3, |r| r.pct_over_100us)
                .fixed("> 150 µs (%):", 3, |r| r.pct_over_150us)
                .table(),
        );
        let cdf = E3_CDF.draw(page, &self.extra.cdf)?;
        page.paper(PAPER_TABLE_IV);
        let _ = writeln!(page, "{cdf}\n");
        page.targets(&self.targets);
        Ok(())
    }
}

/// One row of E4.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WindowRow {
    /// Window length, ms.
    pub window_ms: u64,
    /// Windows measured.
    pub windows: usize,
    /// Median of the per-window medians, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub median_of_medians_us: f64,
    /// 99th percentile of the per-window medians, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p99_median_us: f64,
    /// Largest per-window median, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub max_median_us: f64,
}

/// E4's result (`e4.json`).
pub type E4 = RunResult<WindowRow, E4Extra>;

/// What E4 records beside its rows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E4Extra {
    /// Trigger states recorded.
    pub trigger_states: usize,
    /// (time s, median µs) of every window, one line per window length (the plot).
    pub medians: Vec<Series>,
}

/// E4 (Fig. 3): medians of the trigger intervals over 1 ms and 10 ms windows across the
/// compute workload's run.
pub fn e4(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E4> {
    let duration = options.length.timeline();
    progress(0.0, "http-compute with a trace");
    let setup = Setup {
        duration,
        trace: duration.as_secs() as usize * 600_000,
        ..every_trigger_state(Workload::HttpCompute, options)
    };
    let o = run(&setup)?;
    let trace = &o.trace;
    let first = trace.first().map_or(0, |t| t.0);
    let mut rows = Vec::new();
    let mut medians = Vec::new();
    for window_ms in [1u64, 10] {
        let window = o.hz / 1000 * window_ms;
        let mut points: Vec<(f64, f64)> = Vec::new();
        let mut current: Vec<f64> = Vec::new();
        let mut window_start = first;
        for w in trace.windows(2) {
            if w[1].0 >= window_start + window {
                if !current.is_empty() {
                    let t = (window_start - first) as f64 / o.hz as f64;
                    points.push((t, median(&current)));
                }
                current.clear();
                while w[1].0 >= window_start + window {
                    window_start += window;
                }
            }
            current.push(
                Span::from_ticks(w[1].0.saturating_sub(w[0].0)).as_nanos(o.hz) as f64 / 1000.0,
            );
        }
        let values: Vec<f64> = points.iter().map(|m| m.1).collect();
        rows.push(WindowRow {
            window_ms,
            windows: values.len(),
            median_of_medians_us: median(&values),
            p99_median_us: percentile(&values, 99.0),
            max_median_us: values.iter().copied().fold(0.0, f64::max),
        });
        medians.push(Series {
            label: format!("{window_ms} ms windows"),
            points,
        });
    }
    Ok(E4 {
        run: RunInfo::new(options, duration, 1),
        extra: E4Extra {
            trigger_states: trace.len(),
            medians,
        },
        rows,
        targets: Vec::new(),
    })
}

impl Section for E4 {
    const FILE: &'static str = "e4.json";
    const TITLE: &'static str = "E4: trigger-interval medians over time (Fig. 3)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        // The axis covers the bulk (3 × the largest p99 of the medians); rare windows above
        // it are drawn at the top edge, and the title gives the largest.
        let y_max = self
            .rows
            .iter()
            .map(|r| r.p99_median_us)
            .filter(|v| v.is_finite())
            .fold(1.0, f64::max)
            * 3.0;
        let max_median = self
            .rows
            .iter()
            .map(|r| r.max_median_us)
            .fold(0.0, f64::max);
        let series = self
            .extra
            .medians
            .iter()
            .map(|s| Series {
                label: s.label.clone(),
                points: s.points.iter().map(|&(t, m)| (t, m.min(y_max))).collect(),
            })
            .collect();
        let title = format!(
            "Median trigger interval per window, http-compute (axis to {y_max:.1} µs; largest {max_median:.0} µs)"
        );
        let medians = page.plot("e4_medians.png", "medians", |path| {
            line_chart(
                path,
                &LineChart {
                    title: &title,
                    x_label: "time (s)",
                    y_label: "median interval in the window (µs)",
                    x_range: (0.0, self.run.run_s),
                    y_range: (0.0, y_max),
                    series,
                },
            )
        })?;
        let _ = writeln!(
            page,
            "The `http-compute` workload for {} s ({} trigger states recorded).\n",
            self.run.run_s, self.extra.trigger_states
        );
        page.table(
            Table::of(&self.rows)
                .text("window:", |r| format!("{} ms", r.window_ms))
                .text("windows:", |r| r.windows)
                .fixed("median of medians (µs):", 2, |r| r.median_of_medians_us)
                .fixed("p99 of medians (µs):", 2, |r| r.p99_median_us)
                .fixed("max median (µs):", 2, |r| r.max_median_us)
                .table(),
        );
        page.paper(PAPER_FIG_3);
        let _ = writeln!(page, "{medians}");
        Ok(())
    }
}

/// One row of E5.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SourceRow {
    /// Where the trigger states came from (`syscall`, `send`, `recv`, ...).
    #[serde(with = "trigger_source_name")]
    pub source: TriggerSource,
    /// Trigger states from it.
    pub count: usize,
    /// Their share, %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub pct: f64,
}

/// E5's result (`e5.json`).
pub type E5 = RunResult<SourceRow, E5Extra>;

/// What E5 records beside its rows.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E5Extra {
    /// Whether the trace is E3's keep-alive run (else E5 made its own).
    pub from_e3: bool,
    /// Trigger states in the trace.
    pub samples: usize,
    /// The interval CDF with all sources and with each left out (the plot).
    pub cdf: Vec<Series>,
}

/// E5 (Table V, Fig. 4): trigger states by source, and the interval CDF with each source
/// left out, from the keep-alive HTTP run's trace (E3's, when `from_e3`).
pub fn e5_from_trace(options: &ExpOptions, trace: &Trace, from_e3: bool) -> E5 {
    let points = &trace.points;
    let total = points.len().max(1) as f64;
    let mut rows = Vec::new();
    let mut cdf = vec![Series {
        label: "all".into(),
        points: cdf_from_sorted(
            &sorted_intervals_us(points, trace.hz, None),
            E5_CDF.x_max_us,
        ),
    }];
    for source in TriggerSource::ALL {
        let count = points.iter().filter(|t| t.1 == source).count();
        if count == 0 {
            continue;
        }
        rows.push(SourceRow {
            source,
            count,
            pct: count as f64 / total * 100.0,
        });
        cdf.push(Series {
            label: format!("no {}", source.name()),
            points: cdf_from_sorted(
                &sorted_intervals_us(points, trace.hz, Some(source)),
                E5_CDF.x_max_us,
            ),
        });
    }
    E5 {
        run: RunInfo {
            run_s: trace.run_s,
            ..RunInfo::new(options, options.length.trace_run(), 1)
        },
        extra: E5Extra {
            from_e3,
            samples: points.len(),
            cdf,
        },
        rows,
        targets: Vec::new(),
    }
}

/// E5 on its own: takes the keep-alive HTTP trace itself.
pub fn e5(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E5> {
    progress(0.0, "http-keepalive with a trace");
    let setup = Setup {
        trace: options.length.trace_capacity(),
        ..every_trigger_state(Workload::HttpKeepAlive, options)
    };
    let o = run(&setup)?;
    let trace = Trace {
        points: o.trace,
        hz: o.hz,
        run_s: setup.duration.as_secs_f64(),
    };
    Ok(e5_from_trace(options, &trace, false))
}

impl Section for E5 {
    const FILE: &'static str = "e5.json";
    const TITLE: &'static str = "E5: trigger states by source (Table V, Fig. 4)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        let _ = writeln!(
            page,
            "From {} `http-keepalive` run of {} s ({} trigger states).\n",
            if self.extra.from_e3 { "E3's" } else { "a" },
            self.run.run_s,
            self.extra.samples
        );
        let mut table = Table::new("source | trigger states: | share (%):");
        for r in &self.rows {
            table.row(&[&r.source.name(), &r.count, &format!("{:.1}", r.pct)]);
        }
        page.table(table);
        let sources = E5_CDF.draw(page, &self.extra.cdf)?;
        page.paper(PAPER_TABLE_V);
        let _ = writeln!(page, "{sources}");
        Ok(())
    }
}
