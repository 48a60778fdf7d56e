//! `softtimers info`: which clock the facility uses and why, its resolution, the backstop's,
//! what a clock read costs on this machine, measured on the spot against the other
//! candidates (`quanta`, `std::time::Instant`, `CLOCK_MONOTONIC`), and what a wake-up costs
//! ([`softtimer_rt::wakeup_probe`]: a `clock_nanosleep` probe at normal and `SCHED_FIFO`
//! priority): the floor every idle figure is read against.

use std::hint::black_box;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use softtimer::{Clock, Config, SystemClock, monotonic_nanos};
use softtimer_rt::WakeupProbe;
use softtimers_tools::output::{Program, Report};

use crate::bench_core::per_call_ns;
use crate::table::Table;

/// `softtimers info` on the command line.
#[derive(clap::Args, Debug, Clone)]
pub struct InfoArgs {}

impl Program for InfoArgs {
    type Output = Info;

    fn run(&self) -> anyhow::Result<Info> {
        Ok(run())
    }
}

impl Report for Info {
    fn text(&self) -> String {
        to_markdown(self)
    }
}

/// The cost of one read of a candidate clock.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClockCost {
    /// What was read.
    pub clock: String,
    /// Median ns per read.
    #[serde(deserialize_with = "crate::summary::num")]
    pub read_ns: f64,
    /// Whether a read is ordered after earlier loads (needed for monotonicity across threads).
    pub ordered: bool,
}

/// What `info` reports.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Info {
    /// `tsc` or `monotonic`.
    pub clock_source: String,
    /// Why.
    pub reason: String,
    /// `measure_resolution()`, Hz.
    pub measure_resolution_hz: u64,
    /// `interrupt_clock_resolution()` of a default facility, Hz.
    pub interrupt_clock_resolution_hz: u64,
    /// X = measure / interrupt resolution: ticks between backstop ticks.
    pub backstop_interval_ticks: u64,
    /// Median cost of one ordered read of the facility's clock (`measure_time()`), ns.
    #[serde(deserialize_with = "crate::summary::num")]
    pub clock_read_ns: f64,
    /// Median cost of the read the trigger check makes (`now_unordered`), ns.
    #[serde(deserialize_with = "crate::summary::num")]
    pub trigger_read_ns: f64,
    /// The candidates, measured in the same run.
    pub candidates: Vec<ClockCost>,
    /// The kernel's timer frequency (CONFIG_HZ), if it could be found.
    pub kernel_hz: Option<u64>,
    /// CPUs available to this process.
    pub cpus: usize,
    /// This machine's wake-up lateness and CPU per wake-up, at normal priority (`normal`)
    /// and under `SCHED_FIFO` (`fifo`, null with `fifo_refused` saying why), each with
    /// `wakeup_late_p50_us`, `wakeup_late_p99_us` and `wakeup_cpu_us` (absent in older
    /// reports).
    #[serde(flatten)]
    pub wakeup: Option<WakeupProbe>,
}

/// The kernel's CONFIG_HZ from its config file, where the distribution ships one.
fn kernel_hz() -> Option<u64> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let config = std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok()?;
    config
        .lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ="))
        .and_then(|v| v.trim().parse().ok())
}

/// Measures and reports.
pub fn run() -> Info {
    let clock = SystemClock::new();
    let detected = SystemClock::info();
    let timers: softtimer::SoftTimers<(), _> =
        softtimer::SoftTimers::with_config(clock, Config::default())
            .expect("the default configuration is valid");
    let (reps, batch) = (31, 20_000);
    let quanta_clock = quanta::Clock::new();
    let candidates = vec![
        ClockCost {
            clock: format!(
                "softtimer {} now() (tsc: lfence; rdtsc)",
                detected.source.name()
            ),
            read_ns: per_call_ns(reps, batch, || clock.now().ticks()),
            ordered: true,
        },
        ClockCost {
            clock: format!(
                "softtimer {} now_unordered() (tsc: rdtsc), the trigger check's read",
                detected.source.name()
            ),
            read_ns: per_call_ns(reps, batch, || clock.now_unordered().ticks()),
            ordered: false,
        },
        ClockCost {
            clock: "quanta raw (rdtsc)".into(),
            read_ns: per_call_ns(reps, batch, || quanta_clock.raw()),
            ordered: false,
        },
        ClockCost {
            clock: "quanta now (rdtsc + scaling)".into(),
            read_ns: per_call_ns(reps, batch, || {
                black_box(quanta_clock.now());
                0
            }),
            ordered: false,
        },
        ClockCost {
            clock: "clock_gettime(CLOCK_MONOTONIC)".into(),
            read_ns: per_call_ns(reps, batch, monotonic_nanos),
            ordered: true,
        },
        ClockCost {
            clock: "std::time::Instant::now".into(),
            read_ns: per_call_ns(reps, batch, || {
                let i = Instant::now();
                black_box(i);
                0
            }),
            ordered: true,
        },
    ];
    Info {
        clock_source: detected.source.name().into(),
        reason: detected.reason.clone(),
        measure_resolution_hz: timers.measure_resolution(),
        interrupt_clock_resolution_hz: timers.interrupt_clock_resolution(),
        backstop_interval_ticks: timers.backstop_interval().ticks(),
        clock_read_ns: per_call_ns(reps, batch, || clock.now().ticks()),
        trigger_read_ns: per_call_ns(reps, batch, || clock.now_unordered().ticks()),
        candidates,
        kernel_hz: kernel_hz(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        wakeup: Some(softtimer_rt::wakeup_probe()),
    }
}

impl crate::report::Skippable for Info {}

impl crate::report::Section for Info {
    const FILE: &'static str = "info.json";
    const TITLE: &'static str = "The measurement clock (`softtimers info`)";
    fn body(&self, page: &mut crate::report::Page<'_>) -> anyhow::Result<()> {
        page.text(&to_markdown(self));
        Ok(())
    }
}

/// The report as Markdown.
pub fn to_markdown(info: &Info) -> String {
    let kernel_hz = info
        .kernel_hz
        .map_or("unknown (no /boot/config)".into(), |hz| format!("{hz} Hz"));
    let mut table = Table::new("property | value");
    for (property, value) in [
        ("clock source", info.clock_source.clone()),
        ("why", info.reason.clone()),
        (
            "measure_resolution()",
            format!("{} Hz", info.measure_resolution_hz),
        ),
        (
            "interrupt_clock_resolution()",
            format!("{} Hz", info.interrupt_clock_resolution_hz),
        ),
        (
            "X (ticks between backstop ticks)",
            info.backstop_interval_ticks.to_string(),
        ),
        (
            "measure_time() read (ordered, median)",
            format!("{:.1} ns", info.clock_read_ns),
        ),
        (
            "trigger-check read (unordered, median)",
            format!("{:.1} ns", info.trigger_read_ns),
        ),
        ("kernel timer frequency", kernel_hz),
        ("CPUs", info.cpus.to_string()),
    ] {
        table.row(&[&property, &value]);
    }
    let mut out = table.finish();
    out += "\n";
    let mut table = Table::new("clock read | ns (median): | ordered");
    for c in &info.candidates {
        table.row(&[
            &c.clock,
            &format!("{:.1}", c.read_ns),
            &if c.ordered { "yes" } else { "no" },
        ]);
    }
    out += &table.finish();
    if let Some(w) = &info.wakeup {
        out += &wakeup_markdown(w);
    }
    out
}

/// The wake-up probe's table: lateness and CPU per wake-up at each priority.
fn wakeup_markdown(w: &WakeupProbe) -> String {
    let mut out = format!(
        "
A wake-up on this machine (`clock_nanosleep` of {:.0} µs, {} sleeps each, timer \
         slack 1 ns): the floor every idle figure is read against.\n\n",
        w.wait_us, w.samples
    );
    let mut table = Table::new(
        "priority | late p50 (µs): | p90 (µs): | p99 (µs): | max (µs): | CPU per wake-up (µs):",
    );
    let mut row = |name: &str, c: &softtimer_rt::WakeupCost| {
        table.row(&[
            &name,
            &format!("{:.1}", c.wakeup_late_p50_us),
            &format!("{:.1}", c.wakeup_late_p90_us),
            &format!("{:.1}", c.wakeup_late_p99_us),
            &format!("{:.1}", c.wakeup_late_max_us),
            &format!("{:.2}", c.wakeup_cpu_us),
        ]);
    };
    row("normal", &w.normal);
    if let Some(long) = &w.normal_long {
        row(
            &format!(
                "normal, {} sleeps of {} µs",
                softtimer_rt::LONG_WAIT_SAMPLES,
                softtimer_rt::LONG_WAIT.as_micros()
            ),
            long,
        );
    }
    let fifo_refused = match (&w.fifo, &w.fifo_refused) {
        (Some(fifo), _) => {
            row("SCHED_FIFO", fifo);
            None
        }
        (None, why) => Some(why.as_deref().unwrap_or("refused")),
    };
    out += &table.finish();
    if let Some(why) = fifo_refused {
        // A row that says why across the figures' blank cells, written as it always was.
        out += &format!("| SCHED_FIFO | not measured: {why} | | | | |\n");
    }
    if w.normal_long.is_some() {
        out += "\nA longer sleep wakes later (an idle CPU sinks deeper; a virtual one stops \
                halt-polling): the calibrated idle policy widens its spin window with the wait, \
                from the first row's p90 to the second's.\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wake_up_floor_is_in_the_json_and_older_reports_still_read() {
        let info = run();
        let json = serde_json::to_value(&info).unwrap();
        for field in ["wakeup_late_p50_us", "wakeup_late_p99_us", "wakeup_cpu_us"] {
            let normal = json["normal"][field].as_f64().unwrap();
            assert!(normal >= 0.0, "{field}: {json}");
            assert!(
                json["fifo"].is_null() == json["fifo_refused"].is_string(),
                "{json}"
            );
            if !json["fifo"].is_null() {
                assert!(json["fifo"][field].as_f64().unwrap() >= 0.0, "{json}");
            }
        }
        assert!(to_markdown(&info).contains("| normal |"));
        let back: Info = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back.wakeup, info.wakeup);
        // A report from before the probe: no wake-up fields, read as none.
        let mut older = json;
        for key in ["wait_us", "samples", "normal", "fifo", "fifo_refused"] {
            older.as_object_mut().unwrap().remove(key);
        }
        let back: Info = serde_json::from_value(older).unwrap();
        assert!(back.wakeup.is_none());
        assert!(!to_markdown(&back).contains("| normal |"));
    }
}
