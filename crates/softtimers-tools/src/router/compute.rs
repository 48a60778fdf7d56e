//! `softtimers compute`: a compute-bound process, to share the router's core with.

use std::time::{Duration, Instant as StdInstant};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::cpu::process_cpu_ns;
use crate::output::Report;

/// What `compute` got (`compute --json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ComputeReport {
    /// CPU time over wall time, % of one core.
    pub cpu_share_pct: f64,
    /// The run's length, s.
    pub duration_s: f64,
}

/// Spins for `duration` (a compute-bound process) and reports the share of a core it got.
pub fn compute(duration: Duration) -> Result<ComputeReport> {
    crate::parse::check_run_duration(duration)?;
    let started = StdInstant::now();
    let cpu_before = process_cpu_ns();
    let mut x = 0u64;
    while started.elapsed() < duration {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    let wall = started.elapsed();
    Ok(ComputeReport {
        cpu_share_pct: process_cpu_ns().saturating_sub(cpu_before) as f64 / wall.as_nanos() as f64
            * 100.0,
        duration_s: wall.as_secs_f64(),
    })
}

impl Report for ComputeReport {
    fn text(&self) -> String {
        format!(
            "{:.1} % of a core over {:.2} s\n",
            self.cpu_share_pct, self.duration_s
        )
    }
}
