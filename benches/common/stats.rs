//! Summary statistics the benches report.
#![allow(dead_code)]

/// Geometric mean (NaN for no values).
pub fn geomean(v: &[f64]) -> f64 {
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

/// Median as the runner computes it for a kernel's timings (mean of the middle two for an
/// even count, NaN for none).
pub fn median(v: &[f64]) -> f64 {
    ttdb::measure::runner::Measurement::from_samples(v.to_vec(), 1).median
}
