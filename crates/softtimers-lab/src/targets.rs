//! The targets the lab checks its figures against, and how a check is reported.
//!
//! Each experiment states its own targets (e.g. "trigger-interval median, HTTP ≤ 5 µs" in
//! E3), each with its **anchor**: the seed paper's figure it came from, or the baseline it is
//! measured against (iperf3, stock quinn, nginx, a `BinaryHeap`), or "design target" where
//! it is the project's own. A figure is judged **as reported**, to three significant digits
//! ([`as_reported`]), and the JSON holds that figure: a ratio of 0.99999 is 1.00 and meets
//! "≥ 1.0", a burstiness index of 0 meets "≤ 1.5e-7", and a reader who checks `met` against
//! `measured` and `goal` finds them agreeing.
//!
//! This module holds the check's shape, the two checks every timer-cost measurement shares
//! (`bench timers` and E1), and the Markdown table.

use serde::{Deserialize, Serialize};

use crate::harness::TimerSource;
use crate::table::Table;

/// A target and whether a run met it. Written to JSON as `name`, `goal`, `measured`, `met`,
/// `anchor` (read back also from the older `figure` and `target`; files from before targets
/// had anchors read with an empty one).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TargetCheck {
    /// What is measured.
    #[serde(rename = "name", alias = "figure")]
    pub figure: String,
    /// The target, in words.
    #[serde(rename = "goal", alias = "target")]
    pub target: String,
    /// The measured value as judged (NaN or infinite values are written as `null`).
    #[serde(deserialize_with = "crate::summary::num")]
    pub measured: f64,
    /// Whether it was met.
    pub met: bool,
    /// Where the target comes from: the paper's figure or table, or the baseline.
    #[serde(default)]
    pub anchor: String,
}

/// `x` to three significant digits: a figure as the report shows it, and as a target judges
/// it. Non-finite values are left as they are.
pub fn as_reported(x: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    let digits = 2 - x.abs().log10().floor() as i32;
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

impl TargetCheck {
    /// A check whose goal is not one bound (every round above 1, or a figure only
    /// reported): `met` as the caller judged it.
    pub fn judged(
        figure: impl Into<String>,
        target: &str,
        measured: f64,
        met: bool,
        anchor: &str,
    ) -> Self {
        TargetCheck {
            figure: figure.into(),
            target: target.to_string(),
            measured,
            met,
            anchor: anchor.to_string(),
        }
    }

    /// `figure`, `measured` as reported, against `goal`.
    pub fn new(figure: impl Into<String>, goal: Goal<'_>, measured: f64, anchor: &str) -> Self {
        let m = as_reported(measured);
        let met = match goal.side {
            Side::AtMost => m <= goal.bound,
            Side::AtLeast => m >= goal.bound,
        };
        Self::judged(figure, goal.words, m, met, anchor)
    }
}

/// A bound a figure must keep, and how the report writes it: the words are the caller's
/// (">= 10", "≤ 0.2 (1/5)", "0 of 3"), as the report has always shown them, so they sit
/// beside the bound they state.
///
/// ```
/// use softtimers_lab::targets::{Goal, TargetCheck};
///
/// let t = TargetCheck::new("ratio", Goal::at_least(1.0, ">= 1.0"), 0.999_99, "design target");
/// assert!(t.met, "a ratio that reads 1.00 meets >= 1.0");
/// assert_eq!(t.target, ">= 1.0");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Goal<'a> {
    bound: f64,
    side: Side,
    words: &'a str,
}

#[derive(Clone, Copy, Debug)]
enum Side {
    AtMost,
    AtLeast,
}

impl<'a> Goal<'a> {
    /// At most `bound` (`words` say so, with the unit).
    pub const fn at_most(bound: f64, words: &'a str) -> Self {
        Goal {
            bound,
            side: Side::AtMost,
            words,
        }
    }

    /// At least `bound`. An infinite ratio (a denominator of zero) meets it; NaN never does.
    pub const fn at_least(bound: f64, words: &'a str) -> Self {
        Goal {
            bound,
            side: Side::AtLeast,
            words,
        }
    }
}

/// A row of a timer-cost measurement (`bench timers`, E1): its timer source and interval,
/// the workload's slowdown and the cost per event derived from it.
pub trait TimerCost {
    /// What fired the events.
    fn source(&self) -> TimerSource;
    /// The interval, µs (0: every trigger state).
    fn interval_us(&self) -> u64;
    /// The workload's slowdown against the run without events, %.
    fn slowdown_pct(&self) -> f64;
    /// The cost per event, µs.
    fn cost_per_event_us(&self) -> f64;
    /// Rounds in which the events left the workload no time at all (a timer signal that
    /// starves the server): the cost per event is then a lower bound.
    fn starved_rounds(&self) -> u32 {
        0
    }
}

/// The two targets every timer-cost measurement shares, from the paper's Table I: the loss
/// with soft events at every trigger state (≤ 1 %), and each hardware-timer configuration's
/// cost per event against soft's (≥ 10 ×). A soft cost within noise of zero (or below it)
/// makes every hardware cost "≥ 10 × dearer". No targets without the soft row.
pub fn soft_vs_hardware_targets<R: TimerCost>(loss_figure: &str, rows: &[R]) -> Vec<TargetCheck> {
    let Some(soft) = rows
        .iter()
        .find(|r| r.source() == TimerSource::Soft && r.interval_us() == 0)
    else {
        return Vec::new();
    };
    let mut checks = vec![TargetCheck::new(
        loss_figure,
        Goal::at_most(1.0, "<= 1 %"),
        soft.slowdown_pct(),
        crate::paper::ANCHOR_TABLE_I,
    )];
    let soft_cost = soft.cost_per_event_us().max(0.0);
    for r in rows.iter().filter(|r| r.source().is_hardware()) {
        let ratio = if soft_cost > 0.0 {
            r.cost_per_event_us() / soft_cost
        } else {
            f64::INFINITY
        };
        let starved = match r.starved_rounds() {
            0 => String::new(),
            n => format!(" (a lower bound: no response at all in {n} round(s))"),
        };
        checks.push(TargetCheck::new(
            format!(
                "{} cost per event / soft cost per event, {} µs{starved}",
                r.source().name(),
                r.interval_us()
            ),
            Goal::at_least(10.0, ">= 10"),
            ratio,
            crate::paper::ANCHOR_TABLE_I,
        ));
    }
    checks
}

/// [`TimerCost`] for a row type with fields of those names (and, where named, the field
/// that counts its starved rounds).
#[macro_export]
macro_rules! timer_cost_row {
    ($row:ty $(, starved: $starved:ident)?) => {
        impl $crate::targets::TimerCost for $row {
            fn source(&self) -> $crate::harness::TimerSource {
                self.source
            }
            fn interval_us(&self) -> u64 {
                self.interval_us
            }
            fn slowdown_pct(&self) -> f64 {
                self.slowdown_pct
            }
            fn cost_per_event_us(&self) -> f64 {
                self.cost_per_event_us
            }
            $(
                fn starved_rounds(&self) -> u32 {
                    self.$starved
                }
            )?
        }
    };
}

/// The checks as a Markdown table. A measured value that is not a finite number (a ratio to
/// a soft cost of zero, read back from JSON) shows as "unbounded" where the check was met and
/// "n/a" otherwise.
pub fn targets_table(targets: &[TargetCheck]) -> String {
    let mut table = Table::new("target | goal | measured: | met | anchor");
    for t in targets {
        table.row(&[
            &t.figure,
            &t.target,
            &measured_cell(t),
            &met_cell(t),
            &anchor_cell(t),
        ]);
    }
    table.finish()
}

/// Whether a target is met, as a table shows it: a miss stands out in bold.
pub fn met_cell(t: &TargetCheck) -> &'static str {
    if t.met { "yes" } else { "**no**" }
}

/// A target's anchor as a table shows it: a dash where it has none.
pub fn anchor_cell(t: &TargetCheck) -> &str {
    if t.anchor.is_empty() {
        "—"
    } else {
        &t.anchor
    }
}

/// A target's measured value as a table shows it.
pub fn measured_cell(t: &TargetCheck) -> String {
    match (t.measured.is_finite(), t.met) {
        // Small figures (a burstiness index) in scientific notation, not as 0.00.
        (true, _) if t.measured != 0.0 && t.measured.abs() < 0.01 => {
            format!("{:.2e}", t.measured)
        }
        (true, _) => format!("{:.2}", t.measured),
        (false, true) => "unbounded".to_string(),
        (false, false) => "n/a".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_is_judged_as_reported() {
        assert_eq!(as_reported(0.999_993_45), 1.0);
        assert_eq!(as_reported(1256.78), 1260.0);
        assert_eq!(as_reported(1.573e-6), 1.57e-6);
        assert_eq!(as_reported(0.0), 0.0);
        assert!(as_reported(f64::NAN).is_nan());
        let r = TargetCheck::new("ratio", Goal::at_least(1.0, ">= 1.0"), 0.999_993_45, "x");
        assert!(r.met, "a ratio that reads 1.00 meets >= 1.0");
        assert_eq!(r.measured, 1.0);
        assert!(!TargetCheck::new("ratio", Goal::at_least(1.0, ">= 1.0"), 0.994, "x").met);
        assert!(TargetCheck::new("B", Goal::at_most(1.5e-7, "<= 1.5e-7"), 0.0, "x").met);
        assert!(!TargetCheck::new("B", Goal::at_most(1.5e-7, "<= 1.5e-7"), 1.6e-7, "x").met);
        assert!(TargetCheck::new("r", Goal::at_least(10.0, ">= 10"), f64::INFINITY, "x").met);
        assert!(!TargetCheck::new("r", Goal::at_least(10.0, ">= 10"), f64::NAN, "x").met);
        assert!(!TargetCheck::new("r", Goal::at_most(1.0, "<= 1"), f64::NAN, "x").met);
    }

    #[test]
    fn older_files_without_anchors_still_read() {
        let t: TargetCheck = serde_json::from_str(
            r#"{"figure": "f", "target": "<= 1", "measured": null, "met": false}"#,
        )
        .unwrap();
        assert!(t.measured.is_nan());
        assert_eq!(t.anchor, "");
        assert!(targets_table(&[t]).contains("| n/a | **no** | — |"));
    }
}
