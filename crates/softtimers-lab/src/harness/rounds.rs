//! Configurations run round by round, so that slow drift on a shared machine falls on all
//! of them alike; compare them with [`median_ratio`](crate::summary::median_ratio).

use anyhow::Result;

/// Runs `measure` on every configuration once per round, in order, for `rounds` rounds;
/// returns the measurements per configuration, round by round. `label` names a
/// configuration in the progress line.
pub fn interleaved<C, M>(
    rounds: usize,
    configs: &[C],
    progress: &mut dyn FnMut(f64, &str),
    label: impl Fn(&C) -> String,
    mut measure: impl FnMut(&C) -> Result<M>,
) -> Result<Vec<Vec<M>>> {
    let mut out: Vec<Vec<M>> = configs.iter().map(|_| Vec::with_capacity(rounds)).collect();
    let total = (rounds * configs.len()).max(1) as f64;
    for round in 0..rounds {
        for (i, c) in configs.iter().enumerate() {
            progress(
                (round * configs.len() + i) as f64 / total,
                &format!("round {}/{rounds}: {}", round + 1, label(c)),
            );
            out[i].push(measure(c)?);
        }
    }
    progress(1.0, "done");
    Ok(out)
}

/// One figure of every measurement [`interleaved`] returned: per configuration, round by
/// round.
pub fn per_config<M>(measured: &[Vec<M>], figure: impl Fn(&M) -> f64) -> Vec<Vec<f64>> {
    measured
        .iter()
        .map(|rounds| rounds.iter().map(&figure).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaving_runs_every_configuration_each_round() {
        let mut order = Vec::new();
        let out = interleaved(
            2,
            &['a', 'b', 'c'],
            &mut |_, _| {},
            |c| c.to_string(),
            |c| {
                order.push(*c);
                Ok(order.len())
            },
        )
        .unwrap();
        assert_eq!(order, ['a', 'b', 'c', 'a', 'b', 'c']);
        assert_eq!(out, vec![vec![1, 4], vec![2, 5], vec![3, 6]]);
        let halves = per_config(&out, |&n| n as f64 / 2.0);
        assert_eq!(halves, vec![vec![0.5, 2.0], vec![1.0, 2.5], vec![1.5, 3.0]]);
    }
}
