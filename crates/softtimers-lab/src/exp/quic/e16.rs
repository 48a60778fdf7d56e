//! E16: recovery timers under loss: request/response at 1 % loss each way, with quinn's
//! defaults, a 1 ms ACK delay, and the soft-timer driver's tail-loss probe off.

use std::fmt::Write as _;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use softtimers_tools::quic::Stack;

use super::Latency;
use crate::harness::ExpOptions;
use crate::plot::Series;
use crate::report::{NoExtra, Page, Section, StepResult};
use crate::table::Table;
use crate::targets::{Goal, TargetCheck};

use super::{
    Run, begin, cdf_series, distinct, latency_cdf_chart, median, num, per_round_ratios, rotated,
    round_seed, rounds, rr_args, rr_spec, run_once, spread,
};

/// A row of `e16.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct E16Row {
    /// `quinn-tokio`, `quinn-async` (the same unchanged quinn on `softtimer-async`), `soft`
    /// or `soft-1ms`.
    pub stack: String,
    /// `default` (quinn's transport defaults: the peer may delay ACKs by 25 ms),
    /// `ack-delay-1ms` (each end asks its peer to ACK within 1 ms) or `no-tail-probe` (the
    /// defaults, with the soft-timer driver's tail-loss probe off; soft stacks only).
    #[serde(default)]
    pub config: String,
    /// Round.
    pub round: usize,
    /// Request latency.
    #[serde(flatten)]
    pub latency: Latency,
    /// quinn timeouts the server's driver handled (soft stacks).
    #[serde(deserialize_with = "crate::summary::num")]
    pub timeouts: f64,
    /// How late the server's driver handled them past quinn's time, µs: p50, p99.
    #[serde(deserialize_with = "crate::summary::num")]
    pub timer_late_p50_us: f64,
    /// p99.
    #[serde(deserialize_with = "crate::summary::num")]
    pub timer_late_p99_us: f64,
    /// Tail-loss probes the soft-timer driver sent, both sides (`null` for stock quinn).
    #[serde(default)]
    pub tail_probes: Option<u64>,
    /// Of those, the probes that found a loss (quinn declared one before sending data again).
    #[serde(default)]
    pub tail_probes_finding_loss: Option<u64>,
    /// Latencies, µs (for the CDF).
    pub latencies_us: Vec<f64>,
}

/// `e16.json`.
pub type E16 = StepResult<E16Row>;

/// E16's settings: (name, arguments for both ends, the stacks it runs on).
pub(super) const E16_CONFIGS: [(&str, &[&str], &[Stack]); 3] = [
    ("default", &[], &E16_STACKS),
    ("ack-delay-1ms", &["--max-ack-delay", "1ms"], &E16_STACKS),
    // What the driver's tail-loss probe contributes (stock quinn has none to turn off).
    (
        "no-tail-probe",
        &["--no-tail-probe"],
        &[Stack::Soft, Stack::Soft1ms],
    ),
];

pub(super) const E16_STACKS: [Stack; 4] = [
    Stack::QuinnTokio,
    Stack::Soft,
    Stack::Soft1ms,
    Stack::QuinnAsync,
];

pub(super) fn e16_runs() -> usize {
    E16_CONFIGS.iter().map(|(_, _, stacks)| stacks.len()).sum()
}

/// Runs E16.
pub fn e16(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<E16> {
    let quick = options.length.quick;
    let (mode, tmp) = match begin(options, "e16")? {
        Ok(begun) => begun,
        Err(skipped) => return Ok(skipped),
    };
    let total = (rounds(quick) * e16_runs()) as f64;
    let mut rows = Vec::new();
    for (round, &(config, args, stacks)) in
        (0..rounds(quick)).flat_map(|r| E16_CONFIGS.iter().map(move |c| (r, c)))
    {
        for stack in rotated(stacks, round) {
            progress(
                rows.len() as f64 / total,
                &format!("{config} {}", stack.name()),
            );
            let mut client_args = rr_args(quick);
            client_args.extend(args.iter().map(|a| a.to_string()));
            let run = Run {
                stack,
                seed: round_seed(round),
                spec: rr_spec(),
                server_args: args.to_vec(),
                client_args,
            };
            let m = run_once(&run, &tmp)?;
            rows.push(E16Row {
                stack: stack.name().into(),
                config: config.into(),
                round,
                latency: Latency::of(&m.client.report),
                timeouts: m.server_driver(|d| Some(d.timeouts as f64)),
                timer_late_p50_us: m.server_driver(|d| Some(d.timer_late_p50_us)),
                timer_late_p99_us: m.server_driver(|d| Some(d.timer_late_p99_us)),
                tail_probes: m.both_drivers(|d| d.tail_probes),
                tail_probes_finding_loss: m.both_drivers(|d| d.tail_probes_finding_loss),
                latencies_us: m.client.report.latencies_us.clone(),
            });
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let mut targets = Vec::new();
    for (config, _, stacks) in E16_CONFIGS {
        if !stacks.contains(&Stack::QuinnTokio) {
            continue;
        }
        let r = per_round_ratios(
            &rows,
            |r| r.round,
            |r| r.stack == "soft" && r.config == config,
            |r| r.stack == "quinn-tokio" && r.config == config,
            |r| r.latency.p99_us,
        );
        let m = median(r);
        targets.push(TargetCheck::new(
            format!("request/response p99 at 1 % loss, RTT 200 µs, {config}: soft / quinn-tokio"),
            Goal::at_most(0.5, "≤ 0.5"),
            m,
            crate::paper::ANCHOR_STOCK_QUINN,
        ));
    }
    // Unchanged quinn on the async runtime, through the same emulated path: the async
    // runtime's quinn target, read here on a real path as well as in `lab async`.
    let r = per_round_ratios(
        &rows,
        |r| r.round,
        |r| r.stack == "quinn-async" && r.config == "ack-delay-1ms",
        |r| r.stack == "quinn-tokio" && r.config == "ack-delay-1ms",
        |r| r.latency.p99_us,
    );
    targets.push(TargetCheck::new(
        "unchanged quinn, request/response p99 at 1 % loss, RTT 200 µs, ack-delay-1ms, \
         through `softtimers path`: quinn-async / quinn-tokio",
        Goal::at_most(0.8, "≤ 0.8"),
        median(r),
        crate::paper::ANCHOR_STOCK_QUINN,
    ));
    Ok(E16::ran(&mode, NoExtra {}, rows, targets))
}

impl Section for E16 {
    const FILE: &'static str = "e16.json";
    const TITLE: &'static str =
        "E16: recovery timers under loss (request/response, 1 % loss, RTT 200 µs)";
    fn body(&self, page: &mut Page<'_>) -> Result<()> {
        page.text("1 KB requests, 10 KB responses, one connection, 1 % random loss each way, RTT 200 µs, no bottleneck. `default`: quinn's transport defaults (a peer may delay an ACK by up to 25 ms, which enters every probe timeout); `ack-delay-1ms`: each end asks its peer to ACK within 1 ms (quinn-proto's ACK-frequency extension), a promise only a runtime with fine timers keeps; `no-tail-probe`: the defaults with the soft-timer driver's tail-loss probe off (a PING two smoothed RTTs after the last data or ACK while data is unacknowledged, which the peer acknowledges at once when it arrives after a gap, so that quinn's loss detection finds a lost last packet in about an RTT instead of after its probe timeout). `soft-1ms` is the soft-timer loop with every quinn timer rounded up to 1 ms as tokio's wheel rounds. `quinn-async` is stock quinn, unchanged, on `softtimer-async`'s runtime instead of tokio (quinn's timers as soft events; quinn's own recovery, no tail probe). Timer lateness is the server runtime's: when it handled a quinn timer against the deadline quinn set (stock quinn's measured through a wrapper around its tokio timers). Tail probes are both sides', with those that found a loss (quinn declared a packet lost before it next sent data) in brackets; the others met a peer that was only delaying its ACK. Medians over rounds with [min, max].\n\n");
        let mut table = Table::new(
            "config | stack | p50 (µs): | p99 (µs): | p99.9 (µs): | timers handled: | timer late p50 (µs): | p99 (µs): | tail probes (finding a loss):",
        );
        let keys = distinct(&self.rows, |r| (r.config.clone(), r.stack.clone()));
        for (config, stack) in &keys {
            let col = |g: fn(&E16Row) -> f64, digits: usize| {
                spread(
                    self.rows
                        .iter()
                        .filter(|r| &r.config == config && &r.stack == stack)
                        .map(g)
                        .collect(),
                    digits,
                )
            };
            let probes = if stack.starts_with("quinn-") {
                "-".to_string()
            } else {
                let median_of = |g: fn(&E16Row) -> Option<u64>| {
                    median(
                        self.rows
                            .iter()
                            .filter(|r| &r.config == config && &r.stack == stack)
                            .map(|r| g(r).map_or(f64::NAN, |n| n as f64))
                            .collect(),
                    )
                };
                format!(
                    "{} ({})",
                    num(median_of(|r| r.tail_probes), 0),
                    num(median_of(|r| r.tail_probes_finding_loss), 0)
                )
            };
            table.row(&[
                config,
                stack,
                &col(|r| r.latency.p50_us, 0),
                &col(|r| r.latency.p99_us, 0),
                &col(|r| r.latency.p999_us, 0),
                &col(|r| r.timeouts, 0),
                &col(|r| r.timer_late_p50_us, 1),
                &col(|r| r.timer_late_p99_us, 1),
                &probes,
            ]);
        }
        page.table(table);
        let series: Vec<Series> = self
            .rows
            .iter()
            .filter(|r| r.round == 0)
            .map(|r| cdf_series(format!("{}, {}", r.stack, r.config), &r.latencies_us))
            .collect();
        let image = page.plot("e16_latency_cdf.png", "latency CDF", |path| {
            latency_cdf_chart(path, "Request latency CDF (round 0)", series)
        })?;
        let _ = writeln!(page, "\n{image}\n");
        page.targets(&self.targets);
        Ok(())
    }
}
