//! `softtimers lab`: runs every step and writes the report.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::{bench_core, bench_timers, info};

/// What the lab run does.
#[derive(Clone, Debug)]
pub struct LabOptions {
    /// Short run (for CI).
    pub quick: bool,
    /// Where results go.
    pub out: PathBuf,
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn progress_bar(label: &str) -> ProgressBar {
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

    eprintln!("[1/3] info: clock source and read cost");
    let info = info::run();
    write_json(&options.out.join("info.json"), &info)?;
    report += "## The measurement clock (`softtimers info`)\n\n";
    report += &info::to_markdown(&info);
    save(&report)?;

    eprintln!("[2/3] bench core: the facility against BinaryHeap, BTreeMap, DelayQueue");
    let bar = progress_bar("bench core");
    let core = bench_core::run(
        &bench_core::CoreBenchConfig::new(options.quick),
        |f, msg| {
            bar.set_position((f * 1000.0) as u64);
            bar.set_message(msg.to_string());
        },
    );
    bar.finish_and_clear();
    write_json(&options.out.join("bench_core.json"), &core)?;
    report += "\n## The facility's core operations (`softtimers bench core`)\n\n";
    report += "Median ns per operation (99th percentile of batch means in brackets). \
               `schedule`, `cancel` and `schedule_fire` run on a simulated clock so that the \
               data structures are compared; `trigger` runs on the real clock.\n\n";
    report += &bench_core::to_markdown(&core);
    save(&report)?;

    eprintln!("[3/3] bench timers: cost per event of soft timers, timerfd and timer signals");
    let bar = progress_bar("bench timers");
    let config = bench_timers::TimersConfig::new(options.quick, vec![10, 20, 50])?;
    let timers = bench_timers::run(&config, |f, msg| {
        bar.set_position((f * 1000.0) as u64);
        bar.set_message(msg.to_string());
    });
    bar.finish_and_clear();
    let timers = timers?;
    write_json(&options.out.join("bench_timers.json"), &timers)?;
    report += "\n## Cost per timer event (`softtimers bench timers`, the paper's Table I)\n\n";
    report += &bench_timers::to_markdown(&timers);
    save(&report)?;
    Ok(path)
}
