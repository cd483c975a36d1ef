//! Percentiles, medians and the way figures are printed.

use std::time::Duration;

/// The `q` quantile of `sorted` (nearest rank); zero when empty.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// The median of `values` (the mean of the middle two for an even count).
pub fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.into_iter().collect();
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

/// Lowest and highest of `values`.
pub fn range(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    values
        .into_iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), value| {
            (low.min(value), high.max(value))
        })
}

pub fn micros(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `0.81x`, followed by the range over the runs when there are several.
pub fn ratio(ratios: &[f64]) -> String {
    let middle = median(ratios.iter().copied());
    if ratios.len() < 2 {
        return format!("{middle:.2}x");
    }
    let (low, high) = range(ratios.iter().copied());
    format!("{middle:.2}x ({low:.2}–{high:.2})")
}
