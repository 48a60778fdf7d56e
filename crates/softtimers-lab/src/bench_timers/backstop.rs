//! How late the backstop fires an event while the loop computes without system calls.

use std::os::fd::OwnedFd;
use std::time::Duration;

use anyhow::Result;
use rustix::event::{EventfdFlags, eventfd};
use serde::{Deserialize, Serialize};
use softtimer::{Fired, Span};
use softtimer_rt::{EventLoop, Interest, LoopConfig};

use crate::summary::{median, percentile};

/// Lateness of events fired by the backstop thread while the loop thread computes without
/// system calls: the measured `ε` in `T < actual < T + X + 1 + ε`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BackstopLateness {
    /// Events measured.
    pub events: usize,
    /// Backstop period X, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub x_us: f64,
    /// Median lateness past the due time, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub median_us: f64,
    /// 99th percentile, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub p99_us: f64,
    /// Largest, µs.
    #[serde(deserialize_with = "crate::summary::num")]
    pub max_us: f64,
    /// Share of events later than X past due (the paper's bound), %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub pct_over_x: f64,
    /// Share of events later than X + X/4 past due, %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub pct_over_x_plus_quarter: f64,
    /// Share fired by the backstop thread (the rest by a trigger state at the end), %.
    #[serde(deserialize_with = "crate::summary::num")]
    pub pct_fired_by_backstop: f64,
}

/// Schedules events 97 µs apart while the loop thread computes for `compute` without a system
/// call, and measures how late the backstop thread fires them.
pub fn measure_backstop(compute: Duration) -> Result<BackstopLateness> {
    use softtimer::{Clock, TriggerSource};
    use std::sync::{Arc, Mutex};
    let clock = softtimer::SystemClock::new();
    let late: Arc<Mutex<Vec<(u64, TriggerSource)>>> = Arc::default();
    let sink = Arc::clone(&late);
    let mut ev: EventLoop<()> = EventLoop::new(
        LoopConfig {
            capacity: 1 << 16,
            ..LoopConfig::default()
        },
        move |_, fired: Fired<()>| {
            let now = clock.now();
            if let Ok(mut v) = sink.lock() {
                v.push((now.saturating_since(fired.due).ticks(), fired.source));
            }
        },
    )?;
    let x = Span::from_ticks(clock.resolution_hz() / 1000);
    let kick: OwnedFd = eventfd(1, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
    ev.cx().register(&kick, Interest::READABLE, 1)?;
    let compute_ticks = clock.span(compute);
    let step = Span::from_micros(97, clock.resolution_hz());
    let mut scheduled = 0usize;
    ev.run(|cx, _| {
        let start = clock.now();
        let mut at = start + step;
        while at + x < start + compute_ticks {
            let _ = cx.schedule_at(at, ());
            at += step;
            scheduled += 1;
        }
        let mut acc = 0u64;
        while clock.now() < start + compute_ticks {
            for k in 0..1000u64 {
                acc = acc.wrapping_mul(6364136223846793005).wrapping_add(k);
            }
        }
        std::hint::black_box(acc);
        cx.stop();
    })?;
    let fired = late.lock().map(|v| v.clone()).unwrap_or_default();
    let to_us =
        |ticks: u64| Span::from_ticks(ticks).as_nanos(clock.resolution_hz()) as f64 / 1000.0;
    let lateness: Vec<f64> = fired.iter().map(|&(t, _)| to_us(t)).collect();
    let x_us = to_us(x.ticks());
    let share = |limit: f64| {
        lateness.iter().filter(|&&l| l > limit).count() as f64 / lateness.len().max(1) as f64
            * 100.0
    };
    let by_backstop = fired
        .iter()
        .filter(|(_, s)| *s == TriggerSource::Backstop)
        .count();
    Ok(BackstopLateness {
        events: scheduled,
        x_us,
        median_us: median(&lateness),
        p99_us: percentile(&lateness, 99.0),
        max_us: lateness.iter().copied().fold(0.0, f64::max),
        pct_over_x: share(x_us),
        pct_over_x_plus_quarter: share(x_us * 1.25),
        pct_fired_by_backstop: by_backstop as f64 / fired.len().max(1) as f64 * 100.0,
    })
}
