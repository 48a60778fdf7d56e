//! E9 (Table XII of the soft-timers paper): 6 KB HTTP throughput of the event-driven server
//! when its sockets are taken by soft-timer polling with an aggregation quota, against the
//! same server driven by epoll readiness.
//!
//! The "interrupt" is an epoll readiness event. The epoll-driven reference registers every
//! socket with the loop and runs no timer machinery at all. The polling server keeps the
//! listener and the connections in a [`softtimer_rt::PollSet`]: its readiness only starts
//! polling; while polling, the set is disarmed and polled at soft-timer events whose interval
//! the controller sets so that a poll finds the quota on average; the loop's idle spin fires a
//! poll that is due within the spin window, and readiness is armed again before the loop
//! blocks (the paper: polling is turned off whenever the CPU enters the idle loop).

use std::fmt::Write as _;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::harness::{
    ExpOptions, Outcome, RunResult, Setup, TimerSource, Workload, interleaved, run,
};
use crate::plot::{LineChart, Series, line_chart};
use crate::report::{Page, Section};
use crate::summary::{median, median_ratio, paired_ratios, range};
use crate::table::Table;
use crate::targets::{TargetCheck, as_reported};

/// The aggregation quotas of Table XII.
pub const QUOTAS: [u32; 5] = [1, 2, 5, 10, 15];

/// One design and workload, over the rounds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PollingRow {
    /// `http` (a connection per request) or `p-http` (keep-alive).
    pub workload: String,
    /// `epoll` (readiness per socket, no timer machinery), `epoll+soft-timers` (the same
    /// with the soft-timer machinery running and nothing scheduled: what the machinery
    /// costs by itself) or `soft-poll`.
    pub design: String,
    /// The aggregation quota (soft polling only).
    pub quota: Option<u32>,
    /// Responses per second (median of rounds).
    pub rps: f64,
    /// Lowest and highest round.
    pub rps_range: (f64, f64),
    /// Against the epoll-driven server of the same workload, median of per-round ratios.
    pub ratio: f64,
    /// The lowest and highest per-round ratio.
    pub ratio_range: (f64, f64),
    /// Polls per second (soft polling only).
    pub polls_per_s: Option<f64>,
    /// Ready sockets and accepted connections per poll, on average (soft polling only).
    pub found_per_poll: Option<f64>,
    /// Readiness events that started polling, per second (soft polling only).
    pub interrupts_per_s: Option<f64>,
    /// Server loop thread CPU per response, µs (median of rounds).
    pub cpu_us_per_response: f64,
}

/// E9's result (`e9.json`): one row per (workload, design, quota).
pub type E9 = RunResult<PollingRow>;

#[derive(Clone, Copy)]
struct Config {
    workload: Workload,
    quota: Option<u32>,
    machinery: bool,
}

impl Config {
    fn label(&self) -> String {
        let w = workload_name(self.workload);
        match self.quota {
            Some(q) => format!("{w} soft-poll quota {q}"),
            None => format!("{w} {}", self.design()),
        }
    }

    fn design(&self) -> &'static str {
        match (self.quota, self.machinery) {
            (Some(_), _) => "soft-poll",
            (None, true) => "epoll+soft-timers",
            (None, false) => "epoll",
        }
    }
}

fn workload_name(w: Workload) -> &'static str {
    if w == Workload::HttpClose {
        "http"
    } else {
        "p-http"
    }
}

/// How many server runs E9 makes.
pub fn runs(quick: bool) -> usize {
    let rounds = crate::harness::RunLength::new(quick).rounds();
    rounds * 2 * (QUOTAS.len() + 2)
}

/// E9: the epoll-driven server against soft-timer polling at each quota, for HTTP and P-HTTP.
pub fn e9(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E9> {
    let length = options.length;
    let mut configs = Vec::new();
    for workload in [Workload::HttpClose, Workload::HttpKeepAlive] {
        for machinery in [false, true] {
            configs.push(Config {
                workload,
                quota: None,
                machinery,
            });
        }
        for q in QUOTAS {
            configs.push(Config {
                workload,
                quota: Some(q),
                machinery: true,
            });
        }
    }
    let outcomes: Vec<Vec<Outcome>> =
        interleaved(length.rounds(), &configs, progress, Config::label, |c| {
            let base = Setup::plain(c.workload, length.throughput_run(), options.client);
            let setup = match c.quota {
                None if c.machinery => base.events(TimerSource::BackstopOnly, 0),
                None => base,
                Some(q) => Setup {
                    poll_quota: Some(q),
                    ..base.events(TimerSource::Soft, 0)
                },
            };
            run(&setup)
        })?;
    let mut rows = Vec::new();
    for (c, runs) in configs.iter().zip(&outcomes) {
        let rates: Vec<f64> = runs.iter().map(|o| o.rate).collect();
        let reference = configs
            .iter()
            .position(|r| r.workload == c.workload && r.quota.is_none() && !r.machinery)
            .expect("every workload has its epoll row");
        let reference: Vec<f64> = outcomes[reference].iter().map(|o| o.rate).collect();
        let per_s = |f: &dyn Fn(&Outcome) -> Option<f64>| {
            let v: Vec<f64> = runs.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| median(&v))
        };
        rows.push(PollingRow {
            workload: workload_name(c.workload).into(),
            design: c.design().into(),
            quota: c.quota,
            rps: median(&rates),
            rps_range: range(&rates),
            ratio: median_ratio(&rates, &reference),
            ratio_range: range(&paired_ratios(&rates, &reference)),
            polls_per_s: per_s(&|o| o.polling.map(|p| p.polls as f64 / o.elapsed.as_secs_f64())),
            found_per_poll: per_s(&|o| {
                o.polling
                    .filter(|p| p.polls > 0)
                    .map(|p| p.found as f64 / p.polls as f64)
            }),
            interrupts_per_s: per_s(&|o| {
                o.polling
                    .map(|p| p.interrupts as f64 / o.elapsed.as_secs_f64())
            }),
            cpu_us_per_response: median(
                &runs
                    .iter()
                    .map(|o| {
                        let responses = (o.rate * o.elapsed.as_secs_f64()).max(1.0);
                        o.loop_thread_ns as f64 / 1e3 / responses
                    })
                    .collect::<Vec<_>>(),
            ),
        });
    }
    let mut targets = Vec::new();
    for workload in ["http", "p-http"] {
        if let Some(best) = rows
            .iter()
            .filter(|r| r.workload == workload && r.quota.is_some())
            .max_by(|a, b| a.ratio.total_cmp(&b.ratio))
        {
            // Ahead means ahead in every round: the best of five noisy medians is above 1
            // by chance more often than not.
            targets.push(TargetCheck::judged(
                format!(
                    "E9 {workload}: soft polling (best quota, {}) against epoll-driven, \
                     throughput ratio (per-round range {:.2}-{:.2})",
                    best.quota.unwrap_or(0),
                    best.ratio_range.0,
                    best.ratio_range.1
                ),
                "> 1 in every round (the paper: 1.03-1.25)",
                as_reported(best.ratio),
                best.ratio_range.0 > 1.0,
                crate::paper::ANCHOR_TABLE_XII,
            ));
        }
    }
    Ok(E9::throughput(options, rows, targets))
}

const PAPER_TABLE_XII: &str = "The paper (Table XII, 333 MHz PII, FreeBSD, 6 KB file, req/s and \
    ratio to interrupts): Flash HTTP 1376 with interrupts; soft polling 1568 (1.14), 1620 (1.17), \
    1690 (1.23), 1702 (1.24), 1719 (1.25) at quotas 1, 2, 5, 10, 15. Flash P-HTTP 4439; 4816 \
    (1.08) to 5498 (1.24). Apache 1.03-1.11.";

impl Section for E9 {
    const FILE: &'static str = "e9.json";
    const TITLE: &'static str = "E9: soft-timer network polling, 6 KB HTTP throughput (Table XII)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        let _ = writeln!(
            page,
            "The same server, its sockets taken by epoll readiness (every socket registered, no \
             timer machinery) or by soft-timer polling at an aggregation quota (readiness of \
             the polled set only starts polling; readiness is armed again before the loop \
             blocks). {} rounds of {} s, interleaved; server on one CPU, the load generator \
             ({}) on the other.\n",
            self.run.rounds,
            self.run.run_s,
            self.run.client_name()
        );
        let mut table = Table::new(
            "workload | design | quota: | req/s: | [range] | against epoll [per-round range]: | polls/s: | found per poll: | interrupts/s: | server CPU per response (µs):",
        );
        let opt = |v: Option<f64>, digits: usize| {
            v.map_or("—".to_string(), |x| format!("{x:.digits$}"))
        };
        for r in &self.rows {
            table.row(&[
                &r.workload,
                &r.design,
                &r.quota.map_or("—".into(), |q| q.to_string()),
                &format!("{:.0}", r.rps),
                &format!("[{:.0}, {:.0}]", r.rps_range.0, r.rps_range.1),
                &format!(
                    "{:.3} [{:.2}, {:.2}]",
                    r.ratio, r.ratio_range.0, r.ratio_range.1
                ),
                &opt(r.polls_per_s, 0),
                &opt(r.found_per_poll, 2),
                &opt(r.interrupts_per_s, 0),
                &format!("{:.2}", r.cpu_us_per_response),
            ]);
        }
        page.table(table);
        page.text("\n");
        page.targets(&self.targets);
        page.paper(PAPER_TABLE_XII);
        let series: Vec<Series> = ["http", "p-http"]
            .iter()
            .map(|w| Series {
                label: format!("{w}: soft polling / epoll"),
                points: self
                    .rows
                    .iter()
                    .filter(|r| r.workload == *w)
                    .filter_map(|r| r.quota.map(|q| (f64::from(q), r.ratio)))
                    .collect(),
            })
            .collect();
        let y_max = self.rows.iter().map(|r| r.ratio).fold(1.3f64, f64::max) * 1.05;
        let y_min = self.rows.iter().map(|r| r.ratio).fold(0.7f64, f64::min) * 0.95;
        let quota = page.plot("e9_quota.png", "quota", |path| {
            line_chart(
                path,
                &LineChart {
                    title: "E9: throughput against the epoll-driven server",
                    x_label: "aggregation quota (packets per poll)",
                    y_label: "throughput ratio",
                    x_range: (0.0, 16.0),
                    y_range: (y_min, y_max),
                    series,
                },
            )
        })?;
        let _ = writeln!(page, "{quota}\n");
        Ok(())
    }
}
