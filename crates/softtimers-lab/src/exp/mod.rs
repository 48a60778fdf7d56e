//! The lab's steps, one module per experiment family, and the registry `lab` and `report`
//! iterate.
//!
//! | module | steps | the papers' figures |
//! | --- | --- | --- |
//! | [`crate::info`], [`crate::bench_core`], [`crate::bench_timers`] | the clock, the facility's core operations, the cost per event on a synthetic workload | Table I |
//! | [`cost`] | E1, E2: cost per timer event on the saturated HTTP server | Tables I–III |
//! | [`intervals`] | E3, E4, E5: how often trigger states come, over time, by source | Table IV, V; Figs. 2–4 |
//! | [`pacing`] | E6, E7, E8: rate-based clocking on the busy server, its transmission process, the burstiness of a paced slow start | Tables VI–IX; Kobayashi's Table II |
//! | [`polling`] | E9: the HTTP server's sockets taken by soft-timer polling with an aggregation quota, against epoll readiness | Table XII |
//! | [`senders`] | `pace` and `iperf3 -u` at the same rate, on loopback and a veth link, measured by one capture | — |
//! | [`livelock`] | E10, E11, E12: a user-space router flooded across network namespaces; the 4.2BSD structure against polling with quotas, feedback and a CPU budget | livelock Figs. 6-1, 6-3 to 6-6, 7-1 |
//! | [`deadline`] | E13: the deadline backstop | Table XIII |
//! | [`quic`], [`bottleneck`] | quic, E14, E16: the path emulator's bottleneck beside `tbf`; quinn-proto on soft timers (quinn's pacer, per-packet pacing, timers rounded to 1 ms) against stock quinn on tokio and kernel TCP through the path emulator; response time after idle; recovery timers under loss | soft-timers paper, Tables X–XI |
//! | [`e15`] | E15: closed connections held as compact records against quinn-proto's whole `Connection` | TCP paper, Figs. 3, 7–10 |
//! | [`runtimes`] | async: the async runtime on soft timers (`softtimer-async`) against tokio and smol | — |
//! | [`nginx`] | the HTTP server against nginx | — |
//!
//! A new family (polling, livelock, transport) is a module here with a result type
//! per step that implements [`Section`] (its JSON file and how its report section is
//! rendered from it), and a variant of [`Step`].

pub mod bottleneck;
pub mod cost;
pub mod deadline;
pub mod e15;
pub mod intervals;
pub mod livelock;
pub mod nginx;
pub mod pacing;
pub mod polling;
pub mod quic;
pub mod runtimes;
pub mod senders;

use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::harness::{ExpOptions, RunLength, with_progress};
use crate::report::{Rendered, Section, render_file, save, targets_file};
use crate::targets::TargetCheck;
use crate::{bench_core, bench_timers, info};

/// One step of the lab, in the order a whole run makes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The measurement clock (`softtimers info`).
    Info,
    /// The facility's core operations (`softtimers bench core`).
    BenchCore,
    /// Cost per timer event on a synthetic workload (`softtimers bench timers`).
    BenchTimers,
    /// E1: cost per event, null handler (Table I).
    E1,
    /// E2: cost per event, synthetic handler (Tables II–III).
    E2,
    /// E3: trigger-state intervals by workload (Table IV, Fig. 2).
    E3,
    /// E4: interval medians over time (Fig. 3).
    E4,
    /// E5: trigger states by source (Table V, Fig. 4).
    E5,
    /// E6: overhead of rate-based clocking (Tables VI–VII).
    E6,
    /// E7: the transmission process under load (Tables VIII–IX).
    E7,
    /// E8: burstiness of a paced slow start (Kobayashi's Table II).
    E8,
    /// The paced sender against iperf3 -u.
    Senders,
    /// E9: soft-timer network polling on the HTTP server (Table XII).
    E9,
    /// E10: forwarding under overload (livelock Figs. 6-1, 6-3, 6-4).
    E10,
    /// E11: the polling quota (livelock Figs. 6-5, 6-6).
    E11,
    /// E12: CPU left to a compute-bound process (livelock Fig. 7-1).
    E12,
    /// E13: the deadline backstop (Table XIII).
    E13,
    /// QUIC on soft timers against stock quinn and kernel TCP.
    Quic,
    /// E14: response time after idle (soft-timers paper, Tables X–XI).
    E14,
    /// E15: compact closed-connection state (the TCP paper's TIME_WAIT).
    E15,
    /// E16: recovery timers under loss.
    E16,
    /// The async runtime on soft timers against tokio and smol.
    Async,
    /// The HTTP server against nginx.
    Nginx,
}

/// Something done with a step's result type (its file, its section, its targets).
trait ResultType {
    /// What it gives.
    type Out;
    /// Does it with `T`.
    fn of<T: Section>(self) -> Self::Out;
}

/// What one step hands to a later one in the same run: E3's keep-alive trace, which E5
/// reads instead of making its own.
#[derive(Default)]
pub struct Carry {
    /// E3's trace.
    pub trace: Option<intervals::Trace>,
}

/// Time a server run takes beyond its load (start, connect, stop, join).
const RUN_OVERHEAD: Duration = Duration::from_millis(150);

/// About how long one `bench timers` run (100,000 chunks, a fresh loop) takes without timer
/// system calls (0.61–0.64 s measured), with room for a slower host.
const TIMERS_RUN: Duration = Duration::from_millis(700);
/// About how long one of its `timerfd` and signal runs takes (1.2–3.5 s measured with runs
/// cut at 4 s, a signal every 10 or 20 µs); about the run's limit where that is shorter.
const TIMERS_DEAR_RUN: Duration = Duration::from_millis(2_700);
/// `bench timers`' intervals in the lab, µs.
const TIMERS_INTERVALS_US: [u64; 3] = [10, 20, 50];

fn runs(n: usize, each: Duration) -> Duration {
    (each + RUN_OVERHEAD) * n as u32
}

impl Step {
    /// Every step, in order.
    pub const ALL: [Step; 23] = [
        Step::Info,
        Step::BenchCore,
        Step::BenchTimers,
        Step::E1,
        Step::E2,
        Step::E3,
        Step::E4,
        Step::E5,
        Step::E6,
        Step::E7,
        Step::E8,
        Step::Senders,
        Step::E9,
        Step::E10,
        Step::E11,
        Step::E12,
        Step::E13,
        Step::Quic,
        Step::E14,
        Step::E15,
        Step::E16,
        Step::Async,
        Step::Nginx,
    ];

    /// Its name on the command line (`softtimers lab NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Step::Info => "info",
            Step::BenchCore => "bench-core",
            Step::BenchTimers => "bench-timers",
            Step::E1 => "e1",
            Step::E2 => "e2",
            Step::E3 => "e3",
            Step::E4 => "e4",
            Step::E5 => "e5",
            Step::E6 => "e6",
            Step::E7 => "e7",
            Step::E8 => "e8",
            Step::Senders => "senders",
            Step::E9 => "e9",
            Step::E10 => "e10",
            Step::E11 => "e11",
            Step::E12 => "e12",
            Step::E13 => "e13",
            Step::Quic => "quic",
            Step::E14 => "e14",
            Step::E15 => "e15",
            Step::E16 => "e16",
            Step::Async => "async",
            Step::Nginx => "nginx",
        }
    }

    /// The short name on its progress bar.
    pub fn label(self) -> &'static str {
        match self {
            Step::Info => "info",
            Step::BenchCore => "bench core",
            Step::BenchTimers => "bench timers",
            Step::E1 => "E1",
            Step::E2 => "E2",
            Step::E3 => "E3",
            Step::E4 => "E4",
            Step::E5 => "E5",
            Step::E6 => "E6",
            Step::E7 => "E7",
            Step::E8 => "E8",
            Step::Senders => "senders",
            Step::E9 => "E9",
            Step::E10 => "E10",
            Step::E11 => "E11",
            Step::E12 => "E12",
            Step::E13 => "E13",
            Step::Quic => "quic",
            Step::E14 => "E14",
            Step::E15 => "E15",
            Step::E16 => "E16",
            Step::Async => "async",
            Step::Nginx => "nginx",
        }
    }

    /// What it does, in a line.
    pub fn title(self) -> &'static str {
        match self {
            Step::Info => "info: clock source and read cost",
            Step::BenchCore => "bench core: the facility against BinaryHeap, BTreeMap, DelayQueue",
            Step::BenchTimers => {
                "bench timers: cost per event of soft timers, timerfd and timer signals"
            }
            Step::E1 => "E1: cost per event on the HTTP server, null handler (Table I)",
            Step::E2 => "E2: cost per event, synthetic handler (Tables II-III)",
            Step::E3 => "E3: trigger-state intervals by workload (Table IV, Fig. 2)",
            Step::E4 => "E4: interval medians over time (Fig. 3)",
            Step::E5 => "E5: trigger states by source (Table V, Fig. 4)",
            Step::E6 => "E6: overhead of rate-based clocking on the HTTP server (Tables VI-VII)",
            Step::E7 => "E7: the transmission process under load (Tables VIII-IX)",
            Step::E8 => "E8: burstiness of a paced slow start (Kobayashi, Table II)",
            Step::Senders => "senders: pace against iperf3 -u, on loopback and a veth link",
            Step::E9 => "E9: soft-timer network polling, 6 KB HTTP throughput (Table XII)",
            Step::E10 => {
                "E10: forwarding under overload, baseline and polling router (livelock Figs. 6-1, 6-3, 6-4)"
            }
            Step::E11 => "E11: the polling quota (livelock Figs. 6-5, 6-6)",
            Step::E12 => "E12: CPU left to a compute-bound process under flood (livelock Fig. 7-1)",
            Step::E13 => "E13: the deadline backstop (Table XIII)",
            Step::Quic => "quic: QUIC on soft timers against stock quinn and kernel TCP",
            Step::E14 => "E14: response time after idle (soft-timers paper, Tables X-XI)",
            Step::E15 => "E15: compact closed-connection state (the TCP paper's TIME_WAIT)",
            Step::E16 => "E16: recovery timers under loss",
            Step::Async => "async: the async runtime on soft timers against tokio and smol",
            Step::Nginx => "the HTTP server against nginx with one worker",
        }
    }

    /// Its JSON file in the output directory.
    pub fn file(self) -> &'static str {
        struct File;
        impl ResultType for File {
            type Out = &'static str;
            fn of<T: Section>(self) -> &'static str {
                T::FILE
            }
        }
        self.result_type(File)
    }

    /// How long it is expected to take (`after_e3`: E3 ran before it in the same run, so E5
    /// has its trace). An estimate for the progress line, not a limit.
    pub fn expected(self, length: RunLength, after_e3: bool) -> Duration {
        let throughput = length.throughput_run();
        let rounds = length.rounds();
        match self {
            Step::Info => Duration::from_secs(1),
            Step::BenchCore => Duration::from_secs(if length.quick { 2 } else { 4 }),
            Step::BenchTimers => {
                bench_timers::rounds_time(
                    length.timers_rounds(),
                    TIMERS_INTERVALS_US.len(),
                    TIMERS_RUN,
                    TIMERS_DEAR_RUN.min(length.timers_max_run()),
                ) + length.backstop_compute()
                    + length.state_time().mul_f64(bench_timers::state_runs())
            }
            // The configurations and the run without events.
            Step::E1 => runs(rounds * (cost::E1_CONFIGS + 1), throughput),
            Step::E2 => runs(rounds * (cost::E2_CONFIGS + 1), throughput),
            Step::E3 => runs(4, length.trace_run()),
            Step::E4 => runs(1, length.timeline()) + Duration::from_millis(500),
            Step::E5 if after_e3 => Duration::from_millis(500),
            Step::E5 => runs(1, length.trace_run()),
            Step::E6 => runs(rounds * 9, throughput),
            Step::E7 => runs(length.process_rounds() * 14, throughput),
            Step::E8 => {
                let ramps =
                    Duration::from_millis(if length.quick { 4 * 1_700 } else { 12 * 1_900 });
                let constant = Duration::from_secs(pacing::Ramp::constant_seconds(length.quick))
                    + Duration::from_millis(1_300);
                ramps + constant * (2 * if length.quick { 1 } else { 3 })
            }
            Step::Senders => senders::expected(length.quick),
            Step::E9 => runs(polling::runs(length.quick), throughput),
            Step::E10 | Step::E11 | Step::E12 => {
                let name = self.name();
                Duration::from_secs_f64(
                    livelock::runs(name, length.quick) as f64 * livelock::run_seconds(length.quick),
                )
            }
            Step::E13 => runs(rounds * deadline::configs(), throughput),
            Step::Quic | Step::E14 | Step::E16 => {
                Duration::from_secs_f64(quic::expected_seconds(self.name(), length.quick))
            }
            Step::E15 => Duration::from_secs_f64(e15::expected_seconds(length)),
            Step::Async => Duration::from_secs_f64(runtimes::expected_seconds(length.quick)),
            Step::Nginx => runs(rounds * 2, throughput) + Duration::from_millis(500),
        }
    }

    /// Whether a failure of this step in a whole lab run is reported in its section rather
    /// than ending the run (the nginx comparison: nginx is not the lab's dependency).
    pub fn optional(self) -> bool {
        self == Step::Nginx
    }

    /// Records `error` as this step's result, for an [`optional`](Self::optional) step.
    pub fn save_failure(self, dir: &Path, error: &anyhow::Error) -> Result<()> {
        match self {
            Step::Nginx => save(dir, &nginx::Nginx::failed(error)),
            _ => Err(anyhow::anyhow!("{}: {error:#}", self.label())),
        }
    }

    /// Runs the step and writes its JSON into `options.out`. `progress` is told the fraction
    /// done and what it is doing.
    pub fn run(
        self,
        options: &ExpOptions,
        carry: &mut Carry,
        progress: &mut dyn FnMut(f64, &str),
    ) -> Result<()> {
        let out = &options.out;
        let length = options.length;
        match self {
            Step::Info => {
                progress(0.0, "clock reads");
                save(out, &info::run())
            }
            Step::BenchCore => {
                let config = bench_core::CoreBenchConfig::new(length.quick);
                save(out, &bench_core::run(&config, progress))
            }
            Step::BenchTimers => {
                let config =
                    bench_timers::TimersConfig::new(length.quick, TIMERS_INTERVALS_US.to_vec())?;
                save(out, &bench_timers::run(&config, progress)?)
            }
            Step::E1 => save(out, &cost::e1(options, progress)?),
            Step::E2 => save(out, &cost::e2(options, progress)?),
            Step::E3 => {
                let (result, trace) = intervals::e3(options, progress)?;
                carry.trace = Some(trace);
                save(out, &result)
            }
            Step::E4 => save(out, &intervals::e4(options, progress)?),
            Step::E5 => {
                let result = match &carry.trace {
                    Some(trace) => intervals::e5_from_trace(options, trace, true),
                    None => intervals::e5(options, progress)?,
                };
                save(out, &result)
            }
            Step::E6 => save(out, &pacing::e6(options, progress)?),
            Step::E7 => save(out, &pacing::e7(options, progress)?),
            Step::E8 => save(out, &pacing::e8(options, progress)?),
            Step::Senders => save(out, &senders::senders(options, progress)?),
            Step::E9 => save(out, &polling::e9(options, progress)?),
            Step::E10 => save(out, &livelock::e10(options, progress)?),
            Step::E11 => save(out, &livelock::e11(options, progress)?),
            Step::E12 => save(out, &livelock::e12(options, progress)?),
            Step::E13 => save(out, &deadline::e13(options, progress)?),
            Step::Quic => save(out, &quic::quic(options, progress)?),
            Step::E14 => save(out, &quic::e14(options, progress)?),
            Step::E15 => save(out, &e15::e15(options, progress)?),
            Step::E16 => save(out, &quic::e16(options, progress)?),
            Step::Async => save(out, &runtimes::run(options, progress)?),
            Step::Nginx => save(out, &nginx::compare(options, progress)?),
        }
    }

    /// Runs the step with a progress bar of its own.
    pub fn run_with_progress(self, options: &ExpOptions, carry: &mut Carry) -> Result<()> {
        with_progress(self.label(), |p| self.run(options, carry, p))
    }

    /// Renders its report section from its JSON in `dir`; `None` where the JSON is missing.
    pub fn render(self, dir: &Path) -> Option<Result<Rendered>> {
        struct Render<'a>(&'a Path);
        impl ResultType for Render<'_> {
            type Out = Option<Result<Rendered>>;
            fn of<T: Section>(self) -> Self::Out {
                render_file::<T>(self.0)
            }
        }
        self.result_type(Render(dir))
    }

    /// Its targets, from its JSON in `dir`; `None` where the JSON is missing.
    pub fn targets(self, dir: &Path) -> Option<Result<Vec<TargetCheck>>> {
        struct Targets<'a>(&'a Path);
        impl ResultType for Targets<'_> {
            type Out = Option<Result<Vec<TargetCheck>>>;
            fn of<T: Section>(self) -> Self::Out {
                targets_file::<T>(self.0)
            }
        }
        self.result_type(Targets(dir))
    }

    /// `what`, done with the step's result type: the one place a step names its type.
    fn result_type<W: ResultType>(self, what: W) -> W::Out {
        match self {
            Step::Info => what.of::<info::Info>(),
            Step::BenchCore => what.of::<bench_core::CoreReport>(),
            Step::BenchTimers => what.of::<bench_timers::TimersReport>(),
            Step::E1 => what.of::<cost::E1>(),
            Step::E2 => what.of::<cost::E2>(),
            Step::E3 => what.of::<intervals::E3>(),
            Step::E4 => what.of::<intervals::E4>(),
            Step::E5 => what.of::<intervals::E5>(),
            Step::E6 => what.of::<pacing::E6>(),
            Step::E7 => what.of::<pacing::E7>(),
            Step::E8 => what.of::<pacing::E8>(),
            Step::Senders => what.of::<senders::Senders>(),
            Step::E9 => what.of::<polling::E9>(),
            Step::E10 => what.of::<livelock::E10>(),
            Step::E11 => what.of::<livelock::E11>(),
            Step::E12 => what.of::<livelock::E12>(),
            Step::E13 => what.of::<deadline::E13>(),
            Step::Quic => what.of::<quic::QuicResult>(),
            Step::E14 => what.of::<quic::E14>(),
            Step::E15 => what.of::<e15::E15>(),
            Step::E16 => what.of::<quic::E16>(),
            Step::Async => what.of::<runtimes::AsyncResult>(),
            Step::Nginx => what.of::<nginx::Nginx>(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_has_its_own_file_and_an_estimate() {
        let mut files: Vec<&str> = Step::ALL.iter().map(|s| s.file()).collect();
        files.sort_unstable();
        files.dedup();
        assert_eq!(files.len(), Step::ALL.len());
        for quick in [true, false] {
            for s in Step::ALL {
                assert!(s.expected(RunLength::new(quick), false) > Duration::ZERO);
            }
        }
        let quick: Duration = Step::ALL
            .iter()
            .map(|s| s.expected(RunLength::new(true), true))
            .sum();
        let full: Duration = Step::ALL
            .iter()
            .map(|s| s.expected(RunLength::new(false), true))
            .sum();
        assert!(quick < full / 5, "quick {quick:?}, full {full:?}");
        // The lab's budget: the full run in under 30 minutes, `--quick` under 5. The
        // estimates follow the full runs' measured step times, so a plan that outgrows the
        // budget shows here before a run does.
        assert!(full < Duration::from_secs(30 * 60), "full {full:?}");
        assert!(quick < Duration::from_secs(5 * 60), "quick {quick:?}");
    }
}
