//! The lab's report, rendered from JSON.
//!
//! Every lab step writes `DIR/<name>.json` holding everything its report section needs: the
//! rows, the targets, how the runs were made, and the data of its plots. The Markdown section
//! and the PNG plots are rendered from that file alone ([`Section::render`], which frames the
//! body each step writes), so
//! `softtimers report DIR` ([`crate::lab::rewrite`]) rebuilds `DIR/report.md` and the plots
//! without running anything, and `softtimers lab` renders through the same path after every
//! step. This module knows no step: the registry ([`crate::exp::Step`]) calls it.

use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use softtimers_tools::json::{read_json, write_json};

use crate::table::Table;
use crate::targets::TargetCheck;

/// A rendered report section: its Markdown (starting with a `## ` heading) and the plot files
/// it wrote and links (relative to the output directory).
#[derive(Clone, Debug)]
pub struct Rendered {
    /// The section.
    pub markdown: String,
    /// Plot files written.
    pub plots: Vec<String>,
}

impl Rendered {
    /// A section without plots.
    pub fn text(markdown: String) -> Self {
        Rendered {
            markdown,
            plots: Vec::new(),
        }
    }
}

/// A step's result: the run's mode, why it did not run (if it did not), its rows and its
/// targets, and whatever else the step records (`Extra`, written into the same JSON
/// object). One shape for every step that can be skipped, so that each says the same about
/// itself and renders "not run" the same way.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepResult<Row, Extra = NoExtra> {
    /// `quick` or `full`.
    pub mode: String,
    /// Why the step did not run here (not root, a tool missing), if it did not.
    #[serde(default)]
    pub skipped: Option<String>,
    /// What else the step records.
    #[serde(flatten)]
    pub extra: Extra,
    /// One row per measured configuration.
    pub rows: Vec<Row>,
    /// The targets.
    pub targets: Vec<TargetCheck>,
}

/// A step that records nothing beyond its rows and targets.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct NoExtra {}

impl<Row, Extra> StepResult<Row, Extra> {
    /// A step that ran.
    pub fn ran(mode: &str, extra: Extra, rows: Vec<Row>, targets: Vec<TargetCheck>) -> Self {
        StepResult {
            mode: mode.to_string(),
            skipped: None,
            extra,
            rows,
            targets,
        }
    }

    /// A step that did not run here, and why.
    pub fn skipped(mode: &str, why: String, extra: Extra) -> Self {
        StepResult {
            mode: mode.to_string(),
            skipped: Some(why),
            extra,
            rows: Vec::new(),
            targets: Vec::new(),
        }
    }
}

/// A step's result as written to JSON, and how its section is rendered from it.
///
/// A section is its heading (`## TITLE`), then either why the step did not run (a result
/// that says it was skipped ([`Skippable`])) or the body the step writes into a [`Page`]:
/// [`Section::render`] is that frame, written once here, and each step writes only its body.
///
/// ```
/// use std::fmt::Write as _;
///
/// use serde::{Deserialize, Serialize};
/// use softtimers_lab::report::{Page, Section, Skippable};
///
/// #[derive(Serialize, Deserialize)]
/// struct Ping {
///     rtt_us: f64,
///     skipped: Option<String>,
/// }
///
/// impl Skippable for Ping {
///     fn not_run_because(&self) -> Option<&str> {
///         self.skipped.as_deref()
///     }
/// }
///
/// impl Section for Ping {
///     const FILE: &'static str = "ping.json";
///     const TITLE: &'static str = "Ping";
///     fn body(&self, page: &mut Page<'_>) -> anyhow::Result<()> {
///         let _ = writeln!(page, "RTT {:.1} µs.", self.rtt_us);
///         Ok(())
///     }
/// }
///
/// let dir = std::path::Path::new(".");
/// let ran = Ping { rtt_us: 12.34, skipped: None };
/// assert_eq!(ran.render(dir).unwrap().markdown, "## Ping\n\nRTT 12.3 µs.\n");
/// let not_run = Ping { rtt_us: 0.0, skipped: Some("no root".into()) };
/// assert_eq!(not_run.render(dir).unwrap().markdown, "## Ping\n\nNot run here: no root.\n");
/// ```
pub trait Section: Skippable + Serialize + DeserializeOwned {
    /// The file in the output directory (`e1.json`, ...).
    const FILE: &'static str;
    /// The section's heading, without its `## `.
    const TITLE: &'static str;

    /// Writes everything below the heading into `page`, the plots into its directory.
    fn body(&self, page: &mut Page<'_>) -> Result<()>;

    /// The Markdown section, with the plots drawn into `dir`.
    fn render(&self, dir: &Path) -> Result<Rendered> {
        let heading = format!("## {}\n\n", Self::TITLE);
        if let Some(why) = self.not_run_because() {
            return Ok(Rendered::text(format!("{heading}Not run here: {why}.\n")));
        }
        let mut page = Page {
            md: heading,
            dir,
            plots: Vec::new(),
        };
        self.body(&mut page)?;
        Ok(Rendered {
            markdown: page.md,
            plots: page.plots,
        })
    }
}

/// Whether a result holds a run. A step that can be skipped here (not root, a tool missing)
/// says why, and its section says only that; a step that always runs keeps the default.
pub trait Skippable {
    /// Why the step did not run here, if it did not.
    fn not_run_because(&self) -> Option<&str> {
        None
    }
}

impl<Row, Extra> Skippable for StepResult<Row, Extra> {
    fn not_run_because(&self) -> Option<&str> {
        self.skipped.as_deref()
    }
}

/// A section being written: its Markdown so far and the plots it drew. Drawing a plot through
/// [`Page::plot`] is what lists it in the [`Rendered`] section, whose plots are checked to
/// exist once the section is rendered.
pub struct Page<'a> {
    md: String,
    dir: &'a Path,
    plots: Vec<String>,
}

impl Page<'_> {
    /// Appends `text`.
    pub fn text(&mut self, text: &str) {
        self.md += text;
    }

    /// Appends a table.
    pub fn table(&mut self, table: Table) {
        self.md += &table.finish();
    }

    /// Appends the seed paper's figures that the table above is read against, as a paragraph
    /// of its own.
    pub fn paper(&mut self, text: &str) {
        let _ = writeln!(self.md, "\n{text}\n");
    }

    /// Appends the table of `targets`.
    pub fn targets(&mut self, targets: &[TargetCheck]) {
        self.md += &crate::targets::targets_table(targets);
    }

    /// Draws the plot `file` into the output directory (`draw` is given its path) and
    /// returns its Markdown image, `![alt](file)`, for the section to place.
    pub fn plot(
        &mut self,
        file: &str,
        alt: &str,
        draw: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<String> {
        draw(&self.dir.join(file))?;
        self.plots.push(file.to_string());
        Ok(format!("![{alt}]({file})"))
    }
}

impl fmt::Write for Page<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.md.push_str(s);
        Ok(())
    }
}

/// What every step's JSON holds at its top level, whatever its type: the targets it checked,
/// `targets` (none for a step that only reports).
#[derive(Deserialize)]
struct TargetsOf {
    #[serde(default)]
    targets: Vec<TargetCheck>,
}

/// Writes `result` to `dir/<its file>`.
pub fn save<T: Section>(dir: &Path, result: &T) -> Result<()> {
    write_json(&dir.join(T::FILE), result)
}

/// Renders `T`'s section from `dir/<its file>`; `None` where the file is missing. Every plot
/// the section links must have been written and be non-empty.
pub fn render_file<T: Section>(dir: &Path) -> Option<Result<Rendered>> {
    let path = dir.join(T::FILE);
    if !path.exists() {
        return None;
    }
    Some((|| {
        let result: T = read_json(&path)?;
        let rendered = result.render(dir)?;
        for plot in &rendered.plots {
            if !nonempty(&dir.join(plot)) {
                bail!("{} did not give its plot {plot}", T::FILE);
            }
        }
        Ok(rendered)
    })())
}

/// `T`'s targets from `dir/<its file>`; `None` where the file is missing.
pub fn targets_file<T: Section>(dir: &Path) -> Option<Result<Vec<TargetCheck>>> {
    let path = dir.join(T::FILE);
    path.exists().then(|| {
        // The whole result must parse as its type, so that a malformed file is named here.
        read_json::<T>(&path)?;
        Ok(read_json::<TargetsOf>(&path)?.targets)
    })
}

/// Checks that a path is a non-empty file.
pub fn nonempty(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.len() > 0)
}

/// The report: `header`, then each section.
pub fn assemble(header: &str, sections: &[Rendered]) -> String {
    let mut report = header.to_string();
    for s in sections {
        report += "\n";
        report += &s.markdown;
    }
    report
}

/// Writes `dir/report.md`.
pub fn write_report(dir: &Path, text: &str) -> Result<PathBuf> {
    let path = dir.join("report.md");
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The opening of every report.
pub const TITLE: &str = "# softtimers lab report\n\n";

/// The sections of a report, split at their `## ` headings (the header before the first is
/// left out): for comparing two renderings of the same results.
pub fn sections(report: &str) -> Vec<&str> {
    let mut starts: Vec<usize> = report.match_indices("\n## ").map(|(i, _)| i + 1).collect();
    starts.push(report.len());
    starts
        .windows(2)
        .map(|w| report[w[0]..w[1]].trim_end())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_split_at_second_level_headings() {
        let r = "# t\n\nintro\n\n## A\n\ntext\n### sub\n\n## B\nmore\n";
        assert_eq!(sections(r), vec!["## A\n\ntext\n### sub", "## B\nmore"]);
    }

    #[test]
    fn a_step_result_is_one_json_object_and_a_missing_field_is_named() {
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        struct Extra {
            flood_s: f64,
        }
        let r: StepResult<u32, Extra> =
            StepResult::ran("quick", Extra { flood_s: 2.0 }, vec![1, 2], Vec::new());
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["flood_s"], 2.0);
        assert_eq!(json["skipped"], serde_json::Value::Null);
        let back: StepResult<u32, Extra> = serde_json::from_value(json).unwrap();
        assert_eq!(
            (back.rows, back.extra),
            (vec![1, 2], Extra { flood_s: 2.0 })
        );
        let err = serde_json::from_str::<StepResult<u32, Extra>>(
            r#"{"mode": "quick", "rows": [], "targets": []}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("flood_s"), "{err}");
        let plain: StepResult<u32> = serde_json::from_str(
            r#"{"mode": "full", "skipped": "no root", "rows": [], "targets": []}"#,
        )
        .unwrap();
        assert_eq!(plain.not_run_because(), Some("no root"));
    }
}
