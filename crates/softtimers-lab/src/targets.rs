//! The targets the lab checks its figures against, and how a check is reported.
//!
//! Each experiment states its own targets (e.g. "trigger-interval median, HTTP ≤ 5 µs" in
//! E3); this module holds the check's shape, the two checks every timer-cost measurement
//! shares (`bench timers` and E1), and the Markdown table.

use serde::{Deserialize, Serialize};

/// A target and whether a run met it. Written to JSON as `name`, `goal`, `measured`, `met`
/// (read back also from the older `figure` and `target`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TargetCheck {
    /// What is measured.
    #[serde(rename = "name", alias = "figure")]
    pub figure: String,
    /// The target, in words.
    #[serde(rename = "goal", alias = "target")]
    pub target: String,
    /// The measured value (NaN or infinite values are written as `null`).
    #[serde(deserialize_with = "crate::summary::num")]
    pub measured: f64,
    /// Whether it was met.
    pub met: bool,
}

impl TargetCheck {
    /// A check of `measured` against `target` (in words), met or not.
    pub fn new(figure: impl Into<String>, target: &str, measured: f64, met: bool) -> Self {
        TargetCheck {
            figure: figure.into(),
            target: target.to_string(),
            measured,
            met,
        }
    }
}

/// The two targets every timer-cost measurement shares: the loss with soft events at every
/// trigger state (≤ 1 %), and each hardware-timer configuration's cost per event against
/// soft's (≥ 10 ×). `hardware` yields (source, interval µs, cost per event µs). A soft cost
/// within noise of zero (or below it) makes every hardware cost "≥ 10 × dearer".
pub fn soft_vs_hardware_targets(
    loss_figure: &str,
    soft_loss_pct: f64,
    soft_cost_us: f64,
    hardware: impl IntoIterator<Item = (String, u64, f64)>,
) -> Vec<TargetCheck> {
    let mut checks = vec![TargetCheck::new(
        loss_figure,
        "<= 1 %",
        soft_loss_pct,
        soft_loss_pct <= 1.0,
    )];
    let soft_cost = soft_cost_us.max(0.0);
    for (source, interval_us, cost_us) in hardware {
        let ratio = if soft_cost > 0.0 {
            cost_us / soft_cost
        } else {
            f64::INFINITY
        };
        checks.push(TargetCheck::new(
            format!("{source} cost per event / soft cost per event, {interval_us} µs"),
            ">= 10",
            ratio,
            ratio >= 10.0,
        ));
    }
    checks
}

/// The checks as a Markdown table. A measured value that is not a finite number (a ratio to
/// a soft cost of zero, read back from JSON) shows as "unbounded" where the check was met and
/// "n/a" otherwise.
pub fn targets_table(targets: &[TargetCheck]) -> String {
    let mut out = String::from("| target | goal | measured | met |\n| --- | --- | ---: | --- |\n");
    for t in targets {
        let measured = match (t.measured.is_finite(), t.met) {
            // Small figures (a burstiness index) in scientific notation, not as 0.00.
            (true, _) if t.measured != 0.0 && t.measured.abs() < 0.01 => {
                format!("{:.2e}", t.measured)
            }
            (true, _) => format!("{:.2}", t.measured),
            (false, true) => "unbounded".to_string(),
            (false, false) => "n/a".to_string(),
        };
        out += &format!(
            "| {} | {} | {measured} | {} |\n",
            t.figure,
            t.target,
            if t.met { "yes" } else { "**no**" }
        );
    }
    out
}
