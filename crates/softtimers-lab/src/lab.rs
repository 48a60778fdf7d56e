//! `softtimers lab`: runs every step and writes the report.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::experiments::{self, ExpOptions, ExpResult};
use crate::{bench_core, bench_timers, info};

/// Which experiments a lab run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Step {
    /// Everything: info, bench core, bench timers, E1–E5, E13, nginx.
    All,
    /// E1 (Table I): cost per event, null handler, on the HTTP server.
    E1,
    /// E2 (Tables II–III): cost per event, synthetic handler.
    E2,
    /// E3 (Table IV, Fig. 2): trigger-state intervals by workload.
    E3,
    /// E4 (Fig. 3): interval medians over 1 ms and 10 ms windows.
    E4,
    /// E5 (Table V, Fig. 4): trigger states by source.
    E5,
    /// E13 (Table XIII): the deadline backstop.
    E13,
    /// The HTTP server against nginx with one worker (skipped where nginx is not installed).
    Nginx,
}

/// What the lab run does.
#[derive(Clone, Debug)]
pub struct LabOptions {
    /// Short run (for CI).
    pub quick: bool,
    /// Where results go.
    pub out: PathBuf,
    /// Which step(s).
    pub step: Step,
    /// The HTTP load generator for the experiments.
    pub client: crate::experiments::Client,
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// Runs `work` with a progress bar labelled `label` on stderr (hidden when stderr is not a
/// terminal): `work` reports the fraction done and what it is doing; the bar is cleared after.
pub fn with_progress<T>(label: &str, work: impl FnOnce(&mut dyn FnMut(f64, &str)) -> T) -> T {
    let bar = progress_bar(label);
    let result = work(&mut |fraction, message| {
        bar.set_position((fraction * 1000.0) as u64);
        bar.set_message(message.to_string());
    });
    bar.finish_and_clear();
    result
}

fn progress_bar(label: &str) -> ProgressBar {
    let bar = ProgressBar::new(1000);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {percent:>3}% {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Runs the lab and returns the path of the report.
pub fn run(options: &LabOptions) -> Result<PathBuf> {
    fs::create_dir_all(&options.out)
        .with_context(|| format!("cannot create {}", options.out.display()))?;
    let mode = if options.quick { "quick" } else { "full" };
    let mut report = format!(
        "# softtimers lab report\n\nMode: {mode}. Command: `softtimers lab{}`.\n\
         Every figure below was measured in this run, on this machine; compare ratios, not \
         absolute times.\n\n",
        if options.quick { " --quick" } else { "" }
    );

    let path = options.out.join("report.md");
    // The report is rewritten after every step, so an interrupted run keeps what finished.
    let save = |report: &str| {
        fs::write(&path, report).with_context(|| format!("cannot write {}", path.display()))
    };

    let all = options.step == Step::All;
    let steps = if all { 10 } else { 1 };
    let mut n = 0;
    let mut announce = |what: &str| {
        n += 1;
        eprintln!("[{n}/{steps}] {what}");
    };
    if all {
        announce("info: clock source and read cost");
        let info = info::run();
        write_json(&options.out.join("info.json"), &info)?;
        report += "## The measurement clock (`softtimers info`)\n\n";
        report += &info::to_markdown(&info);
        save(&report)?;

        announce("bench core: the facility against BinaryHeap, BTreeMap, DelayQueue");
        let core = with_progress("bench core", |p| {
            bench_core::run(&bench_core::CoreBenchConfig::new(options.quick), p)
        });
        write_json(&options.out.join("bench_core.json"), &core)?;
        report += "\n## The facility's core operations (`softtimers bench core`)\n\n";
        report += "Median ns per operation (99th percentile of batch means in brackets). \
                   `schedule`, `cancel` and `schedule_fire` run on a simulated clock so that the \
                   data structures are compared; `trigger` runs on the real clock.\n\n";
        report += &bench_core::to_markdown(&core);
        save(&report)?;

        announce("bench timers: cost per event of soft timers, timerfd and timer signals");
        let config = bench_timers::TimersConfig::new(options.quick, vec![10, 20, 50])?;
        let timers = with_progress("bench timers", |p| bench_timers::run(&config, p))?;
        write_json(&options.out.join("bench_timers.json"), &timers)?;
        report += "\n## Cost per timer event, synthetic workload (`softtimers bench timers`)\n\n";
        report += &bench_timers::to_markdown(&timers);
        save(&report)?;
    }

    let exp = ExpOptions {
        quick: options.quick,
        out: options.out.clone(),
        client: options.client,
    };
    if options.client == crate::experiments::Client::Wrk
        && crate::experiments::wrk_binary().is_none()
    {
        anyhow::bail!("--client wrk: wrk is not installed (apt-get install wrk)");
    }
    let section = |report: &mut String, name: &str, result: Result<ExpResult>| -> Result<()> {
        let result = result.with_context(|| format!("experiment {name}"))?;
        for plot in &result.plots {
            if !experiments::nonempty(&options.out.join(plot)) {
                anyhow::bail!("experiment {name} did not write its plot {plot}");
            }
        }
        *report += "\n";
        *report += &result.markdown;
        save(report)
    };
    if all || options.step == Step::E1 {
        announce("E1: cost per event on the HTTP server, null handler (Table I)");
        let r = with_progress("E1", |p| experiments::e1(&exp, p));
        section(&mut report, "e1", r)?;
    }
    if all || options.step == Step::E2 {
        announce("E2: cost per event, synthetic handler (Tables II-III)");
        let r = with_progress("E2", |p| experiments::e2(&exp, p));
        section(&mut report, "e2", r)?;
    }
    let mut trace = None;
    if all || options.step == Step::E3 {
        announce("E3: trigger-state intervals by workload (Table IV, Fig. 2)");
        let r = with_progress("E3", |p| experiments::e3(&exp, p));
        let r = r.map(|(result, t)| {
            trace = Some(t);
            result
        });
        section(&mut report, "e3", r)?;
    }
    if all || options.step == Step::E4 {
        announce("E4: interval medians over time (Fig. 3)");
        let r = with_progress("E4", |p| experiments::e4(&exp, p));
        section(&mut report, "e4", r)?;
    }
    if all || options.step == Step::E5 {
        announce("E5: trigger states by source (Table V, Fig. 4)");
        let r = match &trace {
            Some(t) => experiments::e5(&exp, &t.points, t.hz),
            None => with_progress("E5", |p| experiments::e5_standalone(&exp, p)),
        };
        section(&mut report, "e5", r)?;
    }
    if all || options.step == Step::E13 {
        announce("E13: the deadline backstop (Table XIII)");
        let r = with_progress("E13", |p| experiments::e13(&exp, p));
        section(&mut report, "e13", r)?;
    }
    if all || options.step == Step::Nginx {
        announce("the HTTP server against nginx with one worker");
        let result = match crate::nginx::compare(&exp) {
            // Part of the whole lab, the comparison is optional: a failure is reported, not
            // fatal. Run alone (`lab nginx`), it is an error.
            Err(e) if all => {
                eprintln!("the nginx comparison failed: {e:#}");
                Ok(ExpResult {
                    markdown: format!(
                        "## The HTTP server against nginx (one worker)\n\nNot measured: {e:#}\n"
                    ),
                    plots: vec![],
                })
            }
            other => other,
        };
        section(&mut report, "nginx", result)?;
    }
    Ok(path)
}
