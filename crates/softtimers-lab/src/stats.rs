//! Small summary statistics over samples, and the issue-target checks the reports share.

use serde::Serialize;

/// A target from an issue and whether a run met it.
#[derive(Clone, Debug, Serialize)]
pub struct TargetCheck {
    /// What is measured.
    pub figure: String,
    /// The target, in words.
    pub target: String,
    /// The measured value.
    pub measured: f64,
    /// Whether it was met.
    pub met: bool,
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
    let mut checks = vec![TargetCheck {
        figure: loss_figure.to_string(),
        target: "<= 1 %".into(),
        measured: soft_loss_pct,
        met: soft_loss_pct <= 1.0,
    }];
    let soft_cost = soft_cost_us.max(0.0);
    for (source, interval_us, cost_us) in hardware {
        let ratio = if soft_cost > 0.0 {
            cost_us / soft_cost
        } else {
            f64::INFINITY
        };
        checks.push(TargetCheck {
            figure: format!("{source} cost per event / soft cost per event, {interval_us} µs"),
            target: ">= 10".into(),
            measured: ratio,
            met: ratio >= 10.0,
        });
    }
    checks
}

/// The checks as a Markdown table.
pub fn targets_table(targets: &[TargetCheck]) -> String {
    let mut out = String::from("| target | goal | measured | met |\n| --- | --- | ---: | --- |\n");
    for t in targets {
        out += &format!(
            "| {} | {} | {:.2} | {} |\n",
            t.figure,
            t.target,
            t.measured,
            if t.met { "yes" } else { "**no**" }
        );
    }
    out
}

/// The median (the mean of the middle two for an even count); NaN for no samples.
pub fn median(samples: &[f64]) -> f64 {
    percentile(samples, 50.0)
}

/// The `p`-th percentile (0 ..= 100) by linear interpolation between closest ranks; NaN for
/// no samples.
pub fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (p.clamp(0.0, 100.0) / 100.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_percentiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0, 5.0], 100.0), 5.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.0), 1.0);
        assert!(median(&[]).is_nan());
    }
}
