//! Pure statistics over raw samples: nearest-rank percentiles, per-window percentiles and
//! per-second counts. Samples are few enough (at most tens of thousands) to keep and sort, so no
//! histogram approximation is needed and the figures are exact.

use serde::Serialize;

/// Latency percentiles in milliseconds (nearest rank), with the sample count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// The nearest-rank `q`-quantile (0 < q <= 1) of `sorted` (ascending), or `None` when empty.
pub fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    Some(sorted[index])
}

/// Percentiles of `samples` (any order; NaNs are ignored), or `None` when there are none.
pub fn percentiles(samples: &[f64]) -> Option<Percentiles> {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| !v.is_nan()).collect();
    sorted.sort_by(f64::total_cmp);
    Some(Percentiles {
        count: sorted.len(),
        p50_ms: nearest_rank(&sorted, 0.50)?,
        p90_ms: nearest_rank(&sorted, 0.90)?,
        p99_ms: nearest_rank(&sorted, 0.99)?,
        max_ms: *sorted.last()?,
    })
}

/// One time window of latency samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WindowPercentiles {
    /// Start of the window, seconds since the scenario's load started.
    pub start_s: f64,
    pub percentiles: Percentiles,
}

/// Groups `(time_s, latency_ms)` samples into windows of `width_s` seconds by `time_s` and
/// computes each non-empty window's percentiles, in time order.
pub fn windowed(samples: &[(f64, f64)], width_s: f64) -> Vec<WindowPercentiles> {
    if width_s <= 0.0 {
        return Vec::new();
    }
    let mut buckets: std::collections::BTreeMap<i64, Vec<f64>> = Default::default();
    for &(t, latency) in samples {
        buckets
            .entry((t / width_s).floor() as i64)
            .or_default()
            .push(latency);
    }
    buckets
        .into_iter()
        .filter_map(|(index, values)| {
            percentiles(&values).map(|percentiles| WindowPercentiles {
                start_s: index as f64 * width_s,
                percentiles,
            })
        })
        .collect()
}

/// Events per whole second: element `i` counts the `times_s` in `[i, i+1)`. Negative times are
/// dropped.
pub fn per_second(times_s: &[f64]) -> Vec<u64> {
    let mut counts: Vec<u64> = Vec::new();
    for &t in times_s {
        if t.is_nan() || t < 0.0 {
            continue;
        }
        let index = t.floor() as usize;
        if counts.len() <= index {
            counts.resize(index + 1, 0);
        }
        counts[index] += 1;
    }
    counts
}

/// The cumulative distribution of `samples` as `(latency_ms, fraction <= latency)` points.
pub fn cdf(samples: &[f64]) -> Vec<(f64, f64)> {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| !v.is_nan()).collect();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len() as f64;
    sorted
        .into_iter()
        .enumerate()
        .map(|(i, v)| (v, (i + 1) as f64 / n))
        .collect()
}

/// Rounds to `digits` decimals, so reports do not carry float noise.
pub fn round(value: f64, digits: i32) -> f64 {
    let factor = 10f64.powi(digits);
    (value * factor).round() / factor
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_matches_the_textbook_definition() {
        let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&sorted, 0.5), Some(50.0));
        assert_eq!(nearest_rank(&sorted, 0.9), Some(90.0));
        assert_eq!(nearest_rank(&sorted, 0.99), Some(99.0));
        assert_eq!(nearest_rank(&sorted, 1.0), Some(100.0));
        assert_eq!(nearest_rank(&[7.0], 0.99), Some(7.0));
        assert_eq!(nearest_rank(&[], 0.5), None);
    }

    #[test]
    fn percentiles_sort_their_input_and_skip_nan() {
        let p = percentiles(&[30.0, f64::NAN, 10.0, 20.0]).unwrap();
        assert_eq!(p.count, 3);
        assert_eq!(p.p50_ms, 20.0);
        assert_eq!(p.max_ms, 30.0);
        assert!(percentiles(&[]).is_none());
    }

    #[test]
    fn windows_group_by_time_and_per_second_counts() {
        let w = windowed(&[(0.1, 5.0), (0.9, 7.0), (2.5, 100.0)], 1.0);
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].start_s, 0.0);
        assert_eq!(w[0].percentiles.max_ms, 7.0);
        assert_eq!(w[1].start_s, 2.0);
        assert_eq!(per_second(&[0.2, 0.7, 2.1, -1.0]), vec![2, 0, 1]);
    }

    #[test]
    fn cdf_ends_at_one() {
        let points = cdf(&[3.0, 1.0, 2.0, 4.0]);
        assert_eq!(points.first(), Some(&(1.0, 0.25)));
        assert_eq!(points.last(), Some(&(4.0, 1.0)));
    }
}
