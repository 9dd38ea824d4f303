//! The method every measuring program shares: each variant of a comparison runs R
//! repetitions, interleaved with the other variants in an order that reverses every
//! repetition, so that drift (clocks, caches, a busy neighbour) falls on all of them alike;
//! each variant is then reported as the median and the min-max of its repetitions.

/// Median and min-max over the repetitions of one variant.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    /// The median (of the middle two for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
}

impl Stats {
    /// The statistics of `values`, in any order; NaN for none.
    pub fn of(values: &[f64]) -> Stats {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let mid = sorted.len() / 2;
        let median = if sorted.is_empty() {
            f64::NAN
        } else if sorted.len() % 2 == 1 {
            sorted[mid]
        } else {
            (sorted[mid - 1] + sorted[mid]) / 2.0
        };
        Stats {
            median,
            min: sorted.first().copied().unwrap_or(f64::NAN),
            max: sorted.last().copied().unwrap_or(f64::NAN),
        }
    }
}

/// The median of `values`, in any order; NaN for none.
pub fn median(values: &[f64]) -> f64 {
    Stats::of(values).median
}

/// Calls `run` on every variant, `reps` times, in an order that reverses every
/// repetition.
pub fn interleave_with<V: Copy>(
    reps: usize,
    variants: &[V],
    mut run: impl FnMut(V) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut order = variants.to_vec();
    for _ in 0..reps {
        for &variant in &order {
            run(variant)?;
        }
        order.reverse();
    }
    Ok(())
}

/// One variant of a comparison: a repetition, returning its sample.
pub type Variant<'a> = Box<dyn FnMut() -> anyhow::Result<f64> + 'a>;

/// Runs every variant `reps` times, interleaved as [`interleave_with`] does; returns the
/// samples of each variant.
pub fn interleave(reps: usize, variants: &mut [Variant<'_>]) -> anyhow::Result<Vec<Vec<f64>>> {
    let mut samples = vec![Vec::with_capacity(reps); variants.len()];
    let indices: Vec<usize> = (0..variants.len()).collect();
    interleave_with(reps, &indices, |v| {
        samples[v].push(variants[v]()?);
        Ok(())
    })?;
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_no_values() {
        let odd = Stats::of(&[3.0, 1.0, 2.0]);
        assert_eq!((odd.median, odd.min, odd.max), (2.0, 1.0, 3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn the_order_reverses_every_repetition() {
        let mut order = Vec::new();
        interleave_with(3, &['a', 'b', 'c'], |v| {
            order.push(v);
            Ok(())
        })
        .unwrap();
        assert_eq!(order.iter().collect::<String>(), "abccbaabc");

        let mut calls = 0;
        let mut variants: Vec<Variant<'_>> = vec![
            Box::new(|| Ok(1.0)),
            Box::new(|| {
                calls += 1;
                Ok(f64::from(calls))
            }),
        ];
        let samples = interleave(2, &mut variants).unwrap();
        assert_eq!(samples, [vec![1.0, 1.0], vec![1.0, 2.0]]);
    }
}
