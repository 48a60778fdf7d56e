//! `softtimers lab`: runs the steps of [`crate::exp`] in order and writes the report and
//! the summary of every target (`summary.md`); and `softtimers report DIR` ([`rewrite`]):
//! both again from the JSON files in `DIR`, and with `--results FILE` the summary block of
//! the project's results document ([`update_results`]).
//!
//! Each step writes its JSON; its report section is then rendered from that JSON (the same
//! path as `softtimers report`), and `report.md` is rewritten after every step, so an
//! interrupted run keeps what finished. A progress line for the whole run estimates the time
//! left from each step's expected duration, corrected by how long the finished steps took.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::exp::{Carry, Step, e15};
use crate::harness::{Client, ExpOptions, RunLength, check_client, human_duration, progress_bar};
use crate::report::{TITLE, assemble, write_report};
use crate::table::Table;
use crate::targets::{anchor_cell, measured_cell, met_cell};

/// Which steps a lab run makes: all of them, or one (`softtimers lab e13`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// Every step, in order.
    All,
    /// One step.
    One(Step),
}

/// Every value `softtimers lab` takes: `all`, then each step by its name.
static WHICH: [Which; Step::ALL.len() + 1] = {
    let mut all = [Which::All; Step::ALL.len() + 1];
    let mut i = 0;
    while i < Step::ALL.len() {
        all[i + 1] = Which::One(Step::ALL[i]);
        i += 1;
    }
    all
};

impl clap::ValueEnum for Which {
    fn value_variants<'a>() -> &'a [Self] {
        &WHICH
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(match self {
            Which::All => clap::builder::PossibleValue::new("all").help("Every step, in order"),
            Which::One(step) => clap::builder::PossibleValue::new(step.name()).help(step.title()),
        })
    }
}

impl Which {
    /// The steps, in order.
    pub fn steps(self) -> Vec<Step> {
        match self {
            Which::All => Step::ALL.to_vec(),
            Which::One(step) => vec![step],
        }
    }

    fn arg(self) -> Option<&'static str> {
        match self {
            Which::All => None,
            Which::One(step) => Some(step.name()),
        }
    }
}

/// `softtimers lab` on the command line.
#[derive(clap::Args, Debug, Clone)]
pub struct LabArgs {
    /// One experiment only (default: all).
    #[arg(value_enum, default_value = "all")]
    pub step: Which,
    /// A short run (a few seconds per step), as CI does.
    #[arg(long)]
    pub quick: bool,
    /// Where to write the report, JSON and plots.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// The HTTP load generator: the project's own, or wrk as a cross-check.
    #[arg(long, value_enum, default_value = "own")]
    pub client: Client,
    /// E15: closed connections the compact design holds (default 100000, quick 10000): a
    /// multiple of 250, from 2500 to 10000000. The full design holds as many where this
    /// machine's memory allows, fewer otherwise (the report says how many).
    #[arg(long, value_name = "N", value_parser = e15::parse_held)]
    pub e15_held: Option<usize>,
}

impl LabArgs {
    /// Runs the lab; returns the report's path.
    pub fn run(&self) -> Result<PathBuf> {
        run(&LabOptions {
            quick: self.quick,
            out: self.out.clone(),
            step: self.step,
            client: self.client,
            e15_held: self.e15_held,
        })
    }
}

/// `softtimers report` on the command line.
#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    /// The directory a lab run wrote (`results/` by default).
    pub dir: PathBuf,
    /// Also rewrite the summary block of this results document (docs/RESULTS.md) from the
    /// run's targets.
    #[arg(long, value_name = "FILE")]
    pub results: Option<PathBuf>,
}

impl ReportArgs {
    /// Renders the report and the summary again (and the results document's summary, if
    /// asked); returns the report's path.
    pub fn run(&self) -> Result<PathBuf> {
        let path = rewrite(&self.dir)?;
        if let Some(file) = &self.results {
            update_results(file, &self.dir)?;
        }
        Ok(path)
    }
}

/// What the lab run does.
#[derive(Clone, Debug)]
pub struct LabOptions {
    /// Short run (for CI).
    pub quick: bool,
    /// Where results go.
    pub out: PathBuf,
    /// Which step(s).
    pub step: Which,
    /// The HTTP load generator for the experiments.
    pub client: Client,
    /// E15's closed connections held, where not the default.
    pub e15_held: Option<usize>,
}

/// The whole run's progress: a bar over the expected durations of all steps, with the time
/// left, above each step's own bar.
struct Overall {
    multi: MultiProgress,
    bar: ProgressBar,
    expected: Vec<Duration>,
    /// Expected and actual durations of the finished steps.
    done_expected: Duration,
    done_actual: Duration,
}

/// Expected time done after which the estimate scales what is left by how fast this machine
/// has been.
const SCALE_AFTER: Duration = Duration::from_secs(10);

impl Overall {
    fn new(expected: Vec<Duration>) -> Self {
        let multi = MultiProgress::new();
        let total: Duration = expected.iter().sum();
        let bar = multi.add(ProgressBar::new(total.as_millis().max(1) as u64));
        bar.set_style(
            ProgressStyle::with_template("{prefix:>12} [{bar:30}] {percent:>3}% {msg}")
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.set_prefix("lab");
        bar.enable_steady_tick(Duration::from_millis(200));
        Overall {
            multi,
            bar,
            expected,
            done_expected: Duration::ZERO,
            done_actual: Duration::ZERO,
        }
    }

    /// The time left while step `i` is `fraction` done after `elapsed`.
    fn remaining(&self, i: usize, fraction: f64, elapsed: Duration) -> Duration {
        // How much slower (or faster) than expected this machine has been so far, once
        // enough has been done to tell: a one-second step says little.
        let scale = if self.done_expected >= SCALE_AFTER {
            (self.done_actual.as_secs_f64() / self.done_expected.as_secs_f64()).clamp(0.5, 4.0)
        } else {
            1.0
        };
        let later: Duration = self.expected[i + 1..].iter().sum();
        let current = if fraction >= 0.2 {
            elapsed.mul_f64((1.0 - fraction) / fraction)
        } else {
            self.expected[i].mul_f64((1.0 - fraction) * scale)
        };
        current + later.mul_f64(scale)
    }

    fn show(&self, i: usize, fraction: f64, elapsed: Duration) {
        let fraction = fraction.clamp(0.0, 1.0);
        let position = self.done_expected + self.expected[i].mul_f64(fraction);
        self.bar.set_position(position.as_millis() as u64);
        self.bar.set_message(format!(
            "step {}/{}, about {} left",
            i + 1,
            self.expected.len(),
            human_duration(self.remaining(i, fraction, elapsed))
        ));
    }

    /// Runs step `i` with a bar of its own under the overall one.
    fn step<T>(
        &mut self,
        i: usize,
        label: &str,
        work: impl FnOnce(&mut dyn FnMut(f64, &str)) -> T,
    ) -> T {
        let bar = self.multi.add(progress_bar(label));
        let start = Instant::now();
        self.show(i, 0.0, Duration::ZERO);
        let result = {
            let this = &*self;
            work(&mut |fraction, message| {
                bar.set_position((fraction.clamp(0.0, 1.0) * 1000.0) as u64);
                bar.set_message(message.to_string());
                this.show(i, fraction, start.elapsed());
            })
        };
        bar.finish_and_clear();
        self.multi.remove(&bar);
        self.done_expected += self.expected[i];
        self.done_actual += start.elapsed();
        result
    }
}

impl Drop for Overall {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// Runs the lab and returns the path of the report.
pub fn run(options: &LabOptions) -> Result<PathBuf> {
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("cannot create {}", options.out.display()))?;
    check_client(options.client)?;
    let length = RunLength {
        e15_held: options.e15_held,
        ..RunLength::new(options.quick)
    };
    let exp = ExpOptions {
        length,
        out: options.out.clone(),
        client: options.client,
    };
    let all = options.step == Which::All;
    let steps = options.step.steps();
    let expected: Vec<Duration> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| s.expected(length, steps[..i].contains(&Step::E3)))
        .collect();

    let mut command = String::from("softtimers lab");
    if let Some(arg) = options.step.arg() {
        command += " ";
        command += arg;
    }
    if options.quick {
        command += " --quick";
    }
    if options.client == Client::Wrk {
        command += " --client wrk";
    }
    if let Some(held) = options.e15_held {
        command += &format!(" --e15-held {held}");
    }
    let header = format!(
        "{TITLE}Mode: {}. Command: `{command}`.\nEvery figure below was measured in this run, \
         on this machine; compare ratios, not absolute times.\n",
        length.mode()
    );
    let path = write_report(&options.out, &header)?;

    let mut overall = Overall::new(expected);
    let mut carry = Carry::default();
    let mut sections = Vec::new();
    for (i, &step) in steps.iter().enumerate() {
        let left = overall.remaining(i, 0.0, Duration::ZERO);
        overall.multi.suspend(|| {
            eprintln!(
                "[{}/{}] {} (about {} left in all)",
                i + 1,
                steps.len(),
                step.title(),
                human_duration(left)
            )
        });
        let result = overall.step(i, step.label(), |p| step.run(&exp, &mut carry, p));
        match result {
            Ok(()) => {}
            // Part of the whole lab, an optional step's failure is reported in its section,
            // not fatal. Run alone, it is an error.
            Err(e) if all && step.optional() => {
                overall
                    .multi
                    .suspend(|| eprintln!("{} failed: {e:#}", step.label()));
                step.save_failure(&options.out, &e)?;
            }
            Err(e) => return Err(e.context(format!("experiment {}", step.label()))),
        }
        let section = step
            .render(&options.out)
            .with_context(|| format!("{} wrote no {}", step.label(), step.file()))?
            .with_context(|| format!("experiment {}: rendering its section", step.label()))?;
        sections.push(section);
        write_report(&options.out, &assemble(&header, &sections))?;
    }
    write_summary(&options.out)?;
    Ok(path)
}

/// `softtimers report DIR`: rewrites `DIR/report.md` and the plots from the JSON files
/// present, running nothing. Sections whose JSON is missing are listed as skipped; a JSON
/// file that cannot be rendered is reported in the same place. Returns the report's path.
pub fn rewrite(dir: &Path) -> Result<PathBuf> {
    if !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    let mut sections = Vec::new();
    let mut missing = Vec::new();
    let mut broken = Vec::new();
    for step in Step::ALL {
        match step.render(dir) {
            None => missing.push(format!("`{}`", step.file())),
            Some(Ok(r)) => sections.push(r),
            Some(Err(e)) => broken.push(format!("`{}` ({e:#})", step.file())),
        }
    }
    if sections.is_empty() && broken.is_empty() {
        bail!(
            "{} holds no lab results (none of {})",
            dir.display(),
            missing.join(", ")
        );
    }
    let mut header = format!(
        "{TITLE}Rendered by `softtimers report` from the JSON files in this directory; each \
         section states how its runs were made. Every figure was measured on the machine \
         that wrote the JSON; compare ratios, not absolute times.\n"
    );
    if !missing.is_empty() {
        header += &format!(
            "\nSkipped, no JSON in this directory: {}.\n",
            missing.join(", ")
        );
    }
    if !broken.is_empty() {
        header += &format!("\nSkipped, cannot be rendered: {}.\n", broken.join("; "));
    }
    write_summary(dir)?;
    write_report(dir, &assemble(&header, &sections))
}

/// Where, in a results document, the summary [`update_results`] rewrites begins.
pub const SUMMARY_BEGIN: &str =
    "<!-- summary: `softtimers report DIR --results FILE` rewrites the table below -->";
/// Where it ends.
pub const SUMMARY_END: &str = "<!-- end of summary -->";

/// Every target of the steps whose JSON is in `dir`, one row each: the step, the target and
/// its goal, its anchor, the figure now, and whether it is met; with a count at the top.
///
/// A file that cannot be read (a hand-edited or truncated one) is named under the count, and
/// its targets are not in it; the rest are.
pub fn summary(dir: &Path) -> Result<String> {
    let mut table = Table::new("step | target | goal | anchor | now: | met");
    let (mut all, mut met) = (0, 0);
    let mut unreadable = Vec::new();
    for step in Step::ALL {
        let Some(targets) = step.targets(dir) else {
            continue;
        };
        let targets = match targets {
            Ok(targets) => targets,
            Err(e) => {
                unreadable.push(format!("`{}` ({e:#})", step.file()));
                continue;
            }
        };
        for t in targets {
            all += 1;
            met += usize::from(t.met);
            table.row(&[
                &step.label(),
                &t.figure,
                &t.target,
                &anchor_cell(&t),
                &measured_cell(&t),
                &met_cell(&t),
            ]);
        }
    }
    let not_counted = if unreadable.is_empty() {
        String::new()
    } else {
        format!(
            "Not counted, cannot be read: {}.\n\n",
            unreadable.join("; ")
        )
    };
    Ok(format!(
        "{met} of {all} targets met.\n\n{not_counted}{table}"
    ))
}

/// Writes `dir/summary.md`: the [`summary`] of the results in `dir`.
pub fn write_summary(dir: &Path) -> Result<PathBuf> {
    let path = dir.join("summary.md");
    let text = format!("# softtimers lab: the targets\n\n{}", summary(dir)?);
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Rewrites the block between [`SUMMARY_BEGIN`] and [`SUMMARY_END`] in `file` (the project's
/// results document) with the [`summary`] of the results in `dir`; everything else in the
/// file is left as it is.
pub fn update_results(file: &Path, dir: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let (Some(begin), Some(end)) = (text.find(SUMMARY_BEGIN), text.find(SUMMARY_END)) else {
        bail!(
            "{} has no summary block (a line {SUMMARY_BEGIN} and, below it, {SUMMARY_END})",
            file.display()
        );
    };
    if end < begin {
        bail!(
            "{}: the summary block ends before it begins",
            file.display()
        );
    }
    let updated = format!(
        "{}{SUMMARY_BEGIN}\n\n{}\n{}",
        &text[..begin],
        summary(dir)?,
        &text[end..]
    );
    std::fs::write(file, updated).with_context(|| format!("cannot write {}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A corrupt JSON file beside the others is named, and the rest still render: it failed
    /// the whole report and summary.
    #[test]
    fn a_corrupt_result_file_is_named_and_the_rest_still_render() {
        let dir = std::env::temp_dir().join(format!("softtimers-corrupt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("async.json"), "{").unwrap();
        let summary = summary(&dir).unwrap();
        assert!(summary.starts_with("0 of 0 targets met."), "{summary}");
        assert!(
            summary.contains("cannot be read: `async.json`"),
            "{summary}"
        );
        let report = std::fs::read_to_string(rewrite(&dir).unwrap()).unwrap();
        assert!(
            report.contains("cannot be rendered: `async.json`"),
            "{report}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_estimate_counts_down_and_learns_from_finished_steps() {
        let mut o = Overall::new(vec![Duration::from_secs(10), Duration::from_secs(20)]);
        o.bar
            .set_draw_target(indicatif::ProgressDrawTarget::hidden());
        assert_eq!(o.remaining(0, 0.0, Duration::ZERO), Duration::from_secs(30));
        // Half of the first step done in 10 s: 10 s more for it, 20 s for the next.
        assert_eq!(
            o.remaining(0, 0.5, Duration::from_secs(10)),
            Duration::from_secs(30)
        );
        // The first step took twice as long as expected: the next one is expected to, too.
        o.done_expected = Duration::from_secs(20);
        o.done_actual = Duration::from_secs(40);
        assert_eq!(o.remaining(1, 0.0, Duration::ZERO), Duration::from_secs(40));
    }

    #[test]
    fn a_short_step_that_ran_fast_does_not_halve_the_estimate() {
        let mut o = Overall::new(vec![Duration::from_secs(1), Duration::from_secs(100)]);
        o.bar
            .set_draw_target(indicatif::ProgressDrawTarget::hidden());
        o.done_expected = Duration::from_secs(1);
        o.done_actual = Duration::from_millis(300);
        assert_eq!(
            o.remaining(1, 0.0, Duration::ZERO),
            Duration::from_secs(100)
        );
    }

    #[test]
    fn an_empty_directory_is_an_error() {
        let dir = std::env::temp_dir().join(format!("softtimers-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = rewrite(&dir).unwrap_err();
        assert!(format!("{err}").contains("holds no lab results"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_summary_block_is_rewritten_and_nothing_else() {
        use crate::exp::quic::E14;
        use crate::report::{NoExtra, save};
        use crate::targets::{Goal, TargetCheck};
        let dir = std::env::temp_dir().join(format!("softtimers-summary-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = TargetCheck::new(
            "response time ratio",
            Goal::at_most(0.5, "≤ 0.5"),
            0.25,
            "paper",
        );
        save(
            &dir,
            &E14::ran("full", NoExtra {}, Vec::new(), vec![target]),
        )
        .unwrap();
        let file = dir.join("RESULTS.md");
        let before = format!("# Results\n\n{SUMMARY_BEGIN}\n\nold table\n{SUMMARY_END}\n\n## E1\n");
        std::fs::write(&file, &before).unwrap();
        update_results(&file, &dir).unwrap();
        let after = std::fs::read_to_string(&file).unwrap();
        assert!(after.starts_with(&format!(
            "# Results\n\n{SUMMARY_BEGIN}\n\n1 of 1 targets met."
        )));
        assert!(after.contains("| E14 | response time ratio | ≤ 0.5 | paper | 0.25 | yes |"));
        assert!(!after.contains("old table"));
        assert!(after.ends_with(&format!("{SUMMARY_END}\n\n## E1\n")));
        // Twice is the same as once.
        update_results(&file, &dir).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), after);
        assert!(write_summary(&dir).is_ok_and(|p| p.exists()));
        std::fs::write(&file, "no markers").unwrap();
        assert!(update_results(&file, &dir).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
