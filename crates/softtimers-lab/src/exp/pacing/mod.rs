//! Rate-based clocking: E6 (Tables VI–VII), the busy HTTP server's throughput while it
//! paces a UDP flow; E7 (Tables VIII–IX), the transmission process the adaptive pacer
//! achieves under that load; E8 (Kobayashi's Table II), a slow-start ramp released by the
//! departure-time scheduler under each kind of timer, measured at the receiver with the
//! burstiness index. The server runs of E6 and E7 are made here (`PacedConfig`).

mod e6;
mod e7;
mod e8;

pub use e6::{E6, PacingOverheadRow, e6};
pub use e7::{E7, TransmitProcessRow, e7};
pub use e8::{BurstinessRow, E8, Ramp, Release, e8};

use anyhow::{Context, Result};

use crate::harness::{
    Clocking, ExpOptions, PaceLoad, PaceOutcome, Setup, TimerSource, Workload, interleaved,
};

/// E6's and E7's datagram payload, bytes (a full-size Ethernet frame, as the paper's TCP
/// segments).
const PACED_SIZE: usize = 1472;

/// One E6 or E7 configuration: what clocks the flow (`None`: the server alone).
#[derive(Clone, Copy, Debug, PartialEq)]
struct PacedConfig {
    source: TimerSource,
    load: Option<PaceLoad>,
}

impl PacedConfig {
    fn plain() -> Self {
        PacedConfig {
            source: TimerSource::None,
            load: None,
        }
    }
    fn new(source: TimerSource, clocking: Clocking, target_interval_us: u64) -> Self {
        PacedConfig {
            source,
            load: Some(PaceLoad {
                clocking,
                target_interval_us,
                size: PACED_SIZE,
            }),
        }
    }
    fn interval_us(&self) -> u64 {
        self.load.map_or(0, |l| l.target_interval_us)
    }
    fn name(&self) -> String {
        match (self.source, self.load.map(|l| l.clocking)) {
            (_, None) => "no flow".into(),
            (_, Some(Clocking::Bursts)) => "no pacing (1 ms bursts)".into(),
            (s, Some(Clocking::Adaptive { min_interval_us })) => {
                format!("{} (min {min_interval_us} µs)", s.name())
            }
            (s, Some(Clocking::PerExpiry)) => s.name().to_string(),
        }
    }
    fn setup(&self, options: &ExpOptions) -> Setup {
        let base = Setup::plain(
            Workload::HttpKeepAlive,
            options.length.throughput_run(),
            options.client,
        );
        Setup {
            pace: self.load,
            starving_measured: true,
            ..base.events(self.source, self.interval_us())
        }
    }
}

/// The figures of one run with a paced flow.
struct PacedRun {
    rate: f64,
    /// Busy CPU time on the loop's core per response, ns (loop and backstop threads, less
    /// the loop's idle spinning), as E13 measures it.
    loop_core_ns_per_response: f64,
    pace: PaceOutcome,
}

/// Every configuration's server runs, interleaved over `rounds` rounds.
fn run_all(
    configs: &[PacedConfig],
    rounds: usize,
    options: &ExpOptions,
    progress: &mut dyn FnMut(f64, &str),
) -> Result<Vec<Vec<PacedRun>>> {
    interleaved(
        rounds,
        configs,
        progress,
        |c| format!("{} {} µs", c.name(), c.interval_us()),
        |c| run_paced(c, options),
    )
}

/// One configuration paced at its `interval`: soft timers with `clocking`, and each hardware
/// timer (`timerfd`, then the signal where `signal`) once per expiry.
fn with_hardware(soft: &[Clocking], interval: u64, signal: bool) -> Vec<PacedConfig> {
    let mut configs: Vec<PacedConfig> = soft
        .iter()
        .map(|&c| PacedConfig::new(TimerSource::Soft, c, interval))
        .collect();
    configs.push(PacedConfig::new(
        TimerSource::Timerfd,
        Clocking::PerExpiry,
        interval,
    ));
    if signal {
        configs.push(PacedConfig::new(
            TimerSource::Signal,
            Clocking::PerExpiry,
            interval,
        ));
    }
    configs
}

/// One server run of `config`.
fn run_paced(config: &PacedConfig, options: &ExpOptions) -> Result<PacedRun> {
    let o = crate::harness::run(&config.setup(options)).with_context(|| {
        format!(
            "the server run with {} at {} µs",
            config.name(),
            config.interval_us()
        )
    })?;
    let responses = o.rate * o.elapsed.as_secs_f64();
    Ok(PacedRun {
        rate: o.rate,
        // No response (a signal starved the server): no cost per response (NaN, "n/a").
        loop_core_ns_per_response: if responses < 1.0 {
            f64::NAN
        } else {
            (o.loop_thread_ns + o.helpers.backstop_ns).saturating_sub(o.loop_idle_spin_ns) as f64
                / responses
        },
        pace: o.pace.unwrap_or_default(),
    })
}
