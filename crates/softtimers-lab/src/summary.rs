//! Summary statistics over samples (median, percentiles, per-round ratios), and the JSON
//! helper that reads back the non-finite numbers JSON cannot hold.

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

/// `values[i] / baseline[i]` for each round `i` (rounds past the shorter list are dropped).
pub fn paired_ratios(values: &[f64], baseline: &[f64]) -> Vec<f64> {
    values.iter().zip(baseline).map(|(v, b)| v / b).collect()
}

/// The median over rounds of `values[i] / baseline[i]`: slow drift of a shared machine falls
/// on both runs of a round alike and cancels.
pub fn median_ratio(values: &[f64], baseline: &[f64]) -> f64 {
    median(&paired_ratios(values, baseline))
}

/// The smallest and largest sample ((inf, -inf) for none).
pub fn range(samples: &[f64]) -> (f64, f64) {
    (
        samples.iter().copied().fold(f64::INFINITY, f64::min),
        samples.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    )
}

/// The JSON helpers for numbers written as `null` (NaN), where the tools define them.
pub use softtimers_tools::json::{num, num_pair, nums};

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

    #[test]
    fn ratios_are_paired_by_round() {
        assert_eq!(paired_ratios(&[2.0, 3.0, 9.0], &[1.0, 3.0]), vec![2.0, 1.0]);
        assert_eq!(median_ratio(&[2.0, 3.0, 8.0], &[2.0, 1.0, 2.0]), 3.0);
        assert_eq!(range(&[2.0, -1.0, 5.0]), (-1.0, 5.0));
    }
}
