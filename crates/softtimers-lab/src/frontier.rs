//! Cost against precision: which settings are on the frontier, and which beats which.
//!
//! A measured setting is a point `(cost, error)`: CPU it takes and how far from its schedule
//! it is (an inter-arrival stddev, a p99 lateness); lower is better on both. One setting
//! *beats* another when it is strictly better on both axes (cheaper and more precise). The
//! *frontier* is the settings nothing matches or betters on both axes with one strictly
//! better: the choices worth having. `lab senders` and `bench timers`' idle policy read their
//! rows through these, so that "dominated" means the same in both. A point with a NaN
//! coordinate (not measured) neither beats nor is beaten, and is never on the frontier.

/// Whether `a` beats `b`: strictly cheaper and strictly more precise.
///
/// ```
/// use softtimers_lab::frontier::beats;
/// assert!(beats((1.0, 1.0), (2.0, 2.0)));
/// assert!(!beats((1.0, 2.0), (2.0, 2.0)), "a tie on one axis is not a win on both");
/// assert!(!beats((f64::NAN, 1.0), (2.0, 2.0)));
/// ```
pub fn beats(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 < b.0 && a.1 < b.1
}

/// Whether `a` is at least as good as `b` on both axes and better on one.
fn covers(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 <= b.0 && a.1 <= b.1 && (a.0 < b.0 || a.1 < b.1)
}

fn measured(p: (f64, f64)) -> bool {
    !p.0.is_nan() && !p.1.is_nan()
}

/// The indices of the points on the frontier, cheapest first: measured, and covered by no
/// other point (equal points are all on it).
///
/// ```
/// use softtimers_lab::frontier::frontier;
/// // (cost, error): the second is beaten by the first; the last is the most precise.
/// let points = [(1.0, 9.0), (2.0, 9.5), (4.0, 2.0), (3.0, f64::NAN)];
/// assert_eq!(frontier(&points), vec![0, 2]);
/// ```
pub fn frontier(points: &[(f64, f64)]) -> Vec<usize> {
    let mut on: Vec<usize> = (0..points.len())
        .filter(|&i| measured(points[i]))
        .filter(|&i| {
            !points
                .iter()
                .enumerate()
                .any(|(j, &p)| j != i && measured(p) && covers(p, points[i]))
        })
        .collect();
    on.sort_by(|&a, &b| {
        points[a]
            .0
            .total_cmp(&points[b].0)
            .then(points[a].1.total_cmp(&points[b].1))
    });
    on
}

/// The cheapest of the `candidates` that beats `points[i]` on both axes; `None` when none
/// does.
///
/// ```
/// use softtimers_lab::frontier::cheapest_beating;
/// let points = [(5.0, 5.0), (4.0, 4.0), (3.0, 4.5), (1.0, 9.0)];
/// assert_eq!(cheapest_beating(&points, 0, |j| j != 0), Some(2));
/// assert_eq!(cheapest_beating(&points, 0, |j| j == 3), None);
/// ```
pub fn cheapest_beating(
    points: &[(f64, f64)],
    i: usize,
    candidates: impl Fn(usize) -> bool,
) -> Option<usize> {
    (0..points.len())
        .filter(|&j| j != i && candidates(j) && beats(points[j], points[i]))
        .min_by(|&a, &b| points[a].0.total_cmp(&points[b].0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frontier_keeps_what_nothing_covers() {
        let points = [
            (10.0, 1.0), // the most precise
            (1.0, 50.0), // the cheapest
            (5.0, 5.0),  // between: on it
            (6.0, 5.0),  // as precise as the one before, dearer: off
            (5.0, 6.0),  // as cheap as (5, 5), less precise: off
            (20.0, 20.0),
            (f64::NAN, 0.1),
        ];
        assert_eq!(frontier(&points), vec![1, 2, 0]);
        // Equal points are both on it; an empty set has an empty frontier.
        assert_eq!(frontier(&[(1.0, 1.0), (1.0, 1.0)]), vec![0, 1]);
        assert!(frontier(&[]).is_empty());
    }

    #[test]
    fn beating_is_strict_on_both_axes_and_picks_the_cheapest() {
        let points = [(5.0, 5.0), (5.0, 1.0), (4.0, 5.0), (4.9, 4.9), (2.0, 4.0)];
        assert_eq!(cheapest_beating(&points, 0, |_| true), Some(4));
        assert_eq!(cheapest_beating(&points, 0, |j| j < 4), Some(3));
        // Ties on one axis never beat.
        assert_eq!(cheapest_beating(&points, 0, |j| j < 3), None);
        // A point is never its own beater, and NaN beats nothing.
        assert_eq!(
            cheapest_beating(&[(f64::NAN, 0.0), (1.0, 1.0)], 1, |_| true),
            None
        );
    }
}
