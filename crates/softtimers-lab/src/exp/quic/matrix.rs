//! `quic`: every stack through every scenario, round by round; a row per run from the three
//! JSON files (client, server, emulator), and the targets read from the rows.

use anyhow::Result;
use serde::{Deserialize, Serialize};
use softtimer_net::path::QueueLimit;
use softtimer_quic::TransmitCauses;
use softtimers_tools::path::{COMMAND_SPIN, PathSpec};
use softtimers_tools::quic::Stack;

use super::Latency;
use crate::exp::bottleneck::{self, BottleneckRow};
use crate::harness::ExpOptions;
use crate::report::StepResult;
use crate::targets::{Goal, TargetCheck};

use super::loopback::{LOOPBACK_RR, LOOPBACK_STACKS, loopback_run, loopback_targets};
use super::{
    AFTER_IDLE, AFTER_IDLE_WARMUP, BULK_50M_SMALL_QUEUE, DriverSide, Measured, PACING_VARIANTS, RR,
    RR_STACKS, Run, TIMER_STACKS, begin, bulk_bytes, bulk_stacks, bulks, downloads, link, median,
    nan, per_round_ratios, rotated, round_seed, rounds, rr_args, rr_spec, run_once, timer_runs,
    timer_spec,
};

/// A row of `quic.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QuicRow {
    /// `quinn-tokio`, `soft`, `soft-paced`, `kernel-tcp` or `soft-1ms`.
    pub stack: String,
    /// The scenario, e.g. `bulk-50M-20ms-0.25bdp` or `rr-200us-1%`.
    pub scenario: String,
    /// `loopback-rr-stock-client` for the loopback median's rows (each stack's server, the
    /// stock-quinn client), absent for the rows through the path emulator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// Round (rounds interleave the stacks).
    pub round: usize,
    /// Download goodput, bit/s.
    #[serde(deserialize_with = "crate::summary::num")]
    pub goodput_bps: f64,
    /// Packets dropped at the bottleneck queue (the emulator's count, data direction).
    pub bottleneck_drops: u64,
    /// Of those, the drops from the start of the 50 ms in which the data direction's
    /// delivered bytes passed half their total: a bulk transfer's drops once its slow
    /// start's overshoot is behind it (`null` in results from before it was counted).
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub bottleneck_drops_second_half: f64,
    /// Packets the sender declared lost: QUIC's lost packets, the kernel TCP's retransmitted
    /// segments (`TCP_INFO`; `null` in results from before it was read).
    #[serde(deserialize_with = "crate::summary::num")]
    pub sender_lost_packets: f64,
    /// The downloaded application bytes over the IP bytes the data direction delivered:
    /// what headers and retransmissions leave of the bottleneck's rate for goodput.
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub data_share: f64,
    /// Inter-arrival stddev at the receiver, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub interarrival_stddev_us: f64,
    /// The sender's departure-gap stddev (before the bottleneck), µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub sender_gap_stddev_us: f64,
    /// Queueing delay at the bottleneck, p99, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub queue_delay_p99_us: f64,
    /// CPU time of both sides per megabyte moved, ns.
    #[serde(deserialize_with = "crate::summary::num")]
    pub cpu_ns_per_mb: f64,
    /// Of that, the server's (the data's sender; `null` in results from before it was
    /// kept apart).
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub server_cpu_ns_per_mb: f64,
    /// And the client's.
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub client_cpu_ns_per_mb: f64,
    /// Request latency.
    #[serde(flatten)]
    pub latency: Latency,
    /// Kobayashi's burstiness index of the sender's packets against the bottleneck
    /// (`null` without one).
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub burstiness_index: f64,
    /// quinn timer expiries the server's runtime handled (`null` for TCP).
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub server_timeouts: f64,
    /// How late the server's runtime handled them past quinn's deadline, µs, p50.
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub server_timer_late_p50_us: f64,
    /// p99.
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub server_timer_late_p99_us: f64,
    /// The server's timer lateness histogram: (upper bound µs, count), by decade.
    #[serde(default)]
    pub server_timer_late_hist: Vec<(f64, u64)>,
    /// What made the server's datagrams leave (soft-timer stacks only; `null` otherwise).
    #[serde(default)]
    pub server_causes: Option<TransmitCauses>,
    /// Time both sides' soft-timer loops spent spinning before due events, per megabyte
    /// moved, ns, by the loops' clock (CPU time unless the host took the CPU away meanwhile;
    /// within `cpu_ns_per_mb`; `null` for stock quinn and TCP).
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub idle_spin_ns_per_mb: f64,
    /// The server loop's idle spin window, µs (`null` for stock quinn and TCP).
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub spin_window_us: f64,
    /// `sendmsg` calls of the server (`null` for TCP).
    #[serde(default = "nan", deserialize_with = "crate::summary::num")]
    pub server_send_calls: f64,
    /// A pacing variant's name (rows of `pacing_variants` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Over time (bulk): (s, queue delay ms, Mbit/s).
    pub timeline: Vec<(f64, f64, f64)>,
    /// Every request's latency, µs, in order (request/response rows only, for the CDF).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latencies_us: Vec<f64>,
}

/// `quic.json`.
pub type QuicResult = StepResult<QuicRow, QuicExtra>;

/// What `quic` records beside its rows: the emulator's bottleneck and per-packet pacing's variants.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct QuicExtra {
    /// The path emulator's bottleneck beside `tbf`, and its delay error by rate.
    #[serde(default)]
    pub bottleneck: Vec<BottleneckRow>,
    /// Per-packet pacing's CPU against its spacing: `soft-paced` without the idle spin and
    /// with two datagrams per departure, in the first bulk scenario, run after that
    /// scenario's `soft-paced` row of each round (their order rotating per round).
    #[serde(default)]
    pub pacing_variants: Vec<QuicRow>,
}

/// Runs `quic` (bulk and request/response).
pub fn quic(options: &ExpOptions, progress: &mut dyn FnMut(f64, &str)) -> Result<QuicResult> {
    let quick = options.length.quick;
    let (mode, tmp) = match begin(options, "quic")? {
        Ok(begun) => begun,
        Err(skipped) => return Ok(skipped),
    };
    let scenarios = scenarios(quick);
    let bottleneck_runs =
        (bottleneck::rates(quick).len() * (bottleneck::EMULATOR_ARMS.len() + 1)) as f64;
    let total = (rounds(quick)
        * (scenarios.iter().map(|s| s.stacks.len()).sum::<usize>()
            + PACING_VARIANTS.len()
            + LOOPBACK_STACKS.len())) as f64
        + bottleneck_runs * rounds(quick) as f64;
    let mut done = 0.0;
    // Says what runs next, the runs before it done.
    let mut next = |what: &str| {
        progress(done / total, what);
        done += 1.0;
    };
    let mut rows = Vec::new();
    let mut pacing_variants = Vec::new();
    for round in 0..rounds(quick) {
        for scenario in &scenarios {
            let name = &scenario.name;
            for stack in rotated(&scenario.stacks, round) {
                next(&format!("{name} {}", stack.name()));
                let run = Run {
                    stack,
                    seed: round_seed(round),
                    spec: scenario.spec,
                    server_args: scenario.server_args.clone(),
                    client_args: scenario.client_args.clone(),
                };
                rows.push(row(stack, name, round, &run_once(&run, &tmp)?));
                // The variants run right after soft-paced, in the same conditions.
                if name == BULK_50M_SMALL_QUEUE && stack == Stack::SoftPaced {
                    for (variant, args) in rotated(&PACING_VARIANTS, round) {
                        next(&format!("{name} soft-paced {variant}"));
                        let mut run = run.clone();
                        run.server_args.extend_from_slice(args);
                        run.client_args.extend(args.iter().map(|a| a.to_string()));
                        let mut r = row(stack, name, round, &run_once(&run, &tmp)?);
                        r.variant = Some(variant.to_string());
                        pacing_variants.push(r);
                    }
                }
            }
        }
        // quinn-plain's run in the same round as the ones read against it.
        for stack in rotated(&LOOPBACK_STACKS, round) {
            next(&format!("{LOOPBACK_RR} {}", stack.name()));
            rows.push(loopback_run(stack, round, &tmp)?);
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let bottleneck = bottleneck::measure(quick, rounds(quick), &mut next)?;
    let mut targets = quic_targets(&rows, &pacing_variants);
    targets.insert(0, emulator_target(&bottleneck));
    Ok(QuicResult::ran(
        &mode,
        QuicExtra {
            bottleneck,
            pacing_variants,
        },
        rows,
        targets,
    ))
}

/// A scenario through the emulated path: its name, the stacks it compares, the path, and
/// both sides' arguments.
struct Scenario {
    name: String,
    stacks: Vec<Stack>,
    spec: PathSpec,
    server_args: Vec<&'static str>,
    client_args: Vec<String>,
}

/// Every scenario of a round, in order: the bulk downloads, request/response under loss,
/// and the timer-driven runs.
fn scenarios(quick: bool) -> Vec<Scenario> {
    let mut all: Vec<Scenario> = bulks(quick)
        .iter()
        .map(|b| {
            let bdp = b.rate_bps() / 8.0 * b.rtt().as_secs_f64();
            let queue = QueueLimit::Bytes(((bdp * b.bdp_fraction) as u64).max(3000));
            let rate = b.rate();
            let data = link(b.rtt() / 2, Some(&rate), queue, 0.0);
            let acks = link(b.rtt() / 2, None, QueueLimit::Packets(10_000), 0.0);
            Scenario {
                name: b.name(),
                stacks: bulk_stacks(b),
                spec: downloads(data, acks),
                server_args: vec![],
                client_args: vec!["--download".into(), bulk_bytes(b, quick).to_string()],
            }
        })
        .collect();
    all.push(Scenario {
        name: RR.into(),
        stacks: RR_STACKS.to_vec(),
        spec: rr_spec(),
        server_args: vec![],
        client_args: rr_args(quick),
    });
    all.extend(
        timer_runs(quick)
            .into_iter()
            .map(|(name, server_args, client_args)| Scenario {
                name: name.into(),
                stacks: TIMER_STACKS.to_vec(),
                spec: timer_spec(),
                server_args,
                client_args,
            }),
    );
    all
}

pub(super) fn row(stack: Stack, scenario: &str, round: usize, m: &Measured) -> QuicRow {
    let data = &m.path.b_to_a;
    let (client, server) = (&m.client.report, &m.server.served);
    let server_cpu = m.server.cpu_ns as f64;
    let client_cpu = m.client.cpu_ns as f64;
    let idle_spin_ms =
        |d: &Option<DriverSide>| d.as_ref().and_then(|d| d.idle_spin_ms).unwrap_or(f64::NAN);
    let spin_ms = idle_spin_ms(&m.client.driver) + idle_spin_ms(&m.server.driver);
    // After idle, the CPU and the delivered bytes cover the warm-up too, which the client's
    // count of the (one) response leaves out.
    let warmup = if scenario == AFTER_IDLE {
        AFTER_IDLE_WARMUP as f64
    } else {
        0.0
    };
    let downloaded = client.download_bytes as f64 + warmup;
    let bytes = downloaded + client.upload_bytes as f64;
    let per_mb = |ns: f64| {
        if bytes > 0.0 {
            ns / (bytes / 1e6)
        } else {
            f64::NAN
        }
    };
    QuicRow {
        stack: stack.name().into(),
        scenario: scenario.into(),
        workload: None,
        round,
        goodput_bps: client.goodput_bps,
        bottleneck_drops: data.queue_drops,
        bottleneck_drops_second_half: data.queue_drops_second_half as f64,
        sender_lost_packets: server.lost_packets.map_or(f64::NAN, |n| n as f64),
        data_share: downloaded / data.delivered_bytes as f64,
        interarrival_stddev_us: data.interarrival_stddev_us.unwrap_or(f64::NAN),
        sender_gap_stddev_us: data.sender_gap_stddev_us.unwrap_or(f64::NAN),
        queue_delay_p99_us: data.queue_delay.p99_us.unwrap_or(f64::NAN),
        cpu_ns_per_mb: per_mb(server_cpu + client_cpu),
        server_cpu_ns_per_mb: per_mb(server_cpu),
        client_cpu_ns_per_mb: per_mb(client_cpu),
        latency: Latency::of(client),
        burstiness_index: data.burstiness_index.unwrap_or(f64::NAN),
        server_timeouts: m.server_driver(|d| Some(d.timeouts as f64)),
        server_timer_late_p50_us: m.server_driver(|d| Some(d.timer_late_p50_us)),
        server_timer_late_p99_us: m.server_driver(|d| Some(d.timer_late_p99_us)),
        server_timer_late_hist: m
            .server
            .driver
            .as_ref()
            .map(|d| d.timer_late_hist.clone())
            .unwrap_or_default(),
        server_causes: m.server.driver.as_ref().and_then(|d| d.causes),
        idle_spin_ns_per_mb: per_mb(spin_ms * 1e6),
        spin_window_us: m.server_driver(|d| d.spin_window_us),
        server_send_calls: m.server_driver(|d| d.send_calls.map(|n| n as f64)),
        variant: None,
        timeline: data.timeline.clone(),
        latencies_us: if scenario == RR {
            client.latencies_us.clone()
        } else {
            Vec::new()
        },
    }
}

/// Per round, `stack`'s value of `field` over quinn-tokio's, in one scenario.
pub(super) fn ratios(
    rows: &[QuicRow],
    scenario: &str,
    stack: &str,
    field: fn(&QuicRow) -> f64,
) -> Vec<f64> {
    per_round_ratios(
        rows,
        |r| r.round,
        |r| r.scenario == scenario && r.stack == stack,
        |r| r.scenario == scenario && r.stack == "quinn-tokio",
        field,
    )
}

/// The emulator's delay error: the worst rate's median over rounds.
pub(super) fn emulator_target(rows: &[BottleneckRow]) -> TargetCheck {
    let mut rates: Vec<f64> = rows.iter().map(|r| r.rate_bps).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    let worst = rates
        .iter()
        .map(|&rate| {
            median(
                rows.iter()
                    .filter(|r| {
                        r.bottleneck == bottleneck::EMULATOR_ARMS[0].0 && r.rate_bps == rate
                    })
                    .map(|r| r.delay_error_p99_us)
                    .collect(),
            )
        })
        .fold(f64::NAN, f64::max);
    let span = match (rates.first(), rates.last()) {
        (Some(lo), Some(hi)) => format!("{}–{} Mbit/s", lo / 1e6, hi / 1e6),
        _ => "no rate".into(),
    };
    TargetCheck::new(
        format!(
            "path emulator (spinning up to {:?}): delay error per packet, p99 (µs), worst rate of {span}",
            COMMAND_SPIN
        ),
        Goal::at_most(20.0, "≤ 20"),
        worst,
        crate::paper::ANCHOR_DESIGN,
    )
}

pub(super) fn quic_targets(rows: &[QuicRow], variants: &[QuicRow]) -> Vec<TargetCheck> {
    let s = BULK_50M_SMALL_QUEUE;
    let stock = crate::paper::ANCHOR_STOCK_QUINN;
    // `stack`'s `field` over quinn-tokio's in the first bulk scenario: the median of the
    // per-round ratios.
    let vs_quinn = |stack, field| median(ratios(rows, s, stack, field));
    let soft_paced_goodput: Vec<f64> = rows
        .iter()
        .filter(|r| r.scenario == s && r.stack == "soft-paced")
        .map(|r| r.goodput_bps / 50e6)
        .collect();
    let mut t = vec![
        TargetCheck::new(
            "bulk 50 Mbit/s, RTT 20 ms, queue 0.25 BDP: bottleneck drops, soft-paced / quinn-tokio (median)",
            Goal::at_most(0.1, "≤ 0.1"),
            vs_quinn("soft-paced", |r| r.bottleneck_drops as f64),
            stock,
        ),
        TargetCheck::new(
            "same: goodput, soft-paced / quinn-tokio",
            Goal::at_least(1.0, "≥ 1.0"),
            vs_quinn("soft-paced", |r| r.goodput_bps),
            stock,
        ),
        TargetCheck::new(
            "same: soft-paced goodput / bottleneck rate",
            Goal::at_least(0.95, "≥ 0.95"),
            median(soft_paced_goodput),
            crate::paper::ANCHOR_PATH,
        ),
        TargetCheck::new(
            "same: receiver inter-arrival stddev, soft-paced / quinn-tokio",
            Goal::at_most(0.1, "≤ 0.1"),
            vs_quinn("soft-paced", |r| r.interarrival_stddev_us),
            stock,
        ),
    ];
    for stack in ["soft", "soft-paced"] {
        t.push(TargetCheck::new(
            format!("same: CPU per MB, {stack} / quinn-tokio"),
            Goal::at_most(1.0, "≤ 1.0"),
            vs_quinn(stack, |r| r.cpu_ns_per_mb),
            stock,
        ));
    }
    // Unchanged quinn on the async runtime against the same quinn on tokio, through the
    // emulated path (the async runtime's bulk target, read here as well as in `lab async`).
    t.push(TargetCheck::new(
        "same: CPU per MB, quinn-async (unchanged quinn on softtimer-async) / quinn-tokio",
        Goal::at_most(1.05, "≤ 1.05"),
        vs_quinn("quinn-async", |r| r.cpu_ns_per_mb),
        stock,
    ));
    if !variants.is_empty() {
        t.push(pairs_cpu_target(rows, variants));
    }
    t.push(TargetCheck::new(
        "request/response p99, 1 % loss, RTT 200 µs: soft / quinn-tokio",
        Goal::at_most(0.5, "≤ 0.5"),
        median(ratios(rows, RR, "soft", |r| r.latency.p99_us)),
        stock,
    ));
    t.extend(loopback_targets(rows));
    t
}

/// The first bulk scenario's quinn-tokio and soft-paced rows and the pacing variants, each
/// variant as stack `soft-paced/<variant>`, so that per-round ratios can pair them.
pub(super) fn variant_arms(rows: &[QuicRow], variants: &[QuicRow]) -> Vec<QuicRow> {
    rows.iter()
        .filter(|r| {
            r.scenario == BULK_50M_SMALL_QUEUE
                && (r.stack == "quinn-tokio" || r.stack == "soft-paced")
        })
        .cloned()
        .chain(variants.iter().map(|r| {
            let mut r = r.clone();
            if let Some(v) = &r.variant {
                r.stack = format!("{}/{v}", r.stack);
            }
            r
        }))
        .collect()
}

/// CPU per MB of `soft-paced` with two datagrams per departure against stock quinn, per
/// round: pacing that costs no CPU, at the price of pairs leaving back to back.
pub(super) fn pairs_cpu_target(rows: &[QuicRow], variants: &[QuicRow]) -> TargetCheck {
    let arms = variant_arms(rows, variants);
    let c = median(ratios(
        &arms,
        BULK_50M_SMALL_QUEUE,
        "soft-paced/2-per-departure",
        |r| r.cpu_ns_per_mb,
    ));
    TargetCheck::new(
        "same: CPU per MB, soft-paced with 2 datagrams per departure / quinn-tokio",
        Goal::at_most(1.0, "≤ 1.0"),
        c,
        crate::paper::ANCHOR_STOCK_QUINN,
    )
}
