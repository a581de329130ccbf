//! ttdb's one output check: a kernel's outputs against expected values (the reference
//! evaluator's, or the checked interpreter's), everywhere or at sampled points, with one
//! tolerance. Lowering tests, evaluation and the codegen tests all decide "correct" here.
use super::data::BufferData;
use super::ir::{BufferRole, Kernel};

/// The tolerance: max |kernel - expected| <= RTOL * max |expected| over the checked points.
/// (Norm-wise, not element-wise: a sum of thousands of fp32 products legitimately differs
/// from its f64 reference by more than 1e-4 where it happens to cancel to near zero.)
pub const RTOL: f64 = 1e-4;

/// Expected values of one output buffer: at `points` (flat indices), or at every element.
#[derive(Clone, Copy, Debug)]
pub struct Expected<'a> {
    pub points: Option<&'a [usize]>,
    pub values: &'a [f64],
}

impl<'a> Expected<'a> {
    /// Every element, in order.
    pub fn all(values: &'a [f64]) -> Self {
        Expected {
            points: None,
            values,
        }
    }
}

/// How far outputs are from the expected values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutputError {
    /// Largest |got - expected|.
    pub max_abs: f64,
    /// `max_abs / max |expected|` (the denominator at least 1e-30).
    pub rel: f64,
}

impl OutputError {
    pub fn within_tolerance(&self) -> bool {
        self.rel <= RTOL
    }
}

/// Compares `outputs` with `expected` (one entry per output, in order). Errors: a count or
/// size mismatch, a checked point out of range, or a NaN where a number was expected.
pub fn output_error(outputs: &[&BufferData], expected: &[Expected]) -> Result<OutputError, String> {
    if outputs.len() != expected.len() {
        return Err(format!(
            "{} output buffers, {} expected outputs",
            outputs.len(),
            expected.len()
        ));
    }
    let (mut max_abs, mut max_ref) = (0.0f64, 0.0f64);
    for (got, want) in outputs.iter().zip(expected) {
        let mut check = |p: usize, w: f64| -> Result<(), String> {
            if p >= got.len() {
                return Err(format!(
                    "output has {} elements, checked point {p}",
                    got.len()
                ));
            }
            let d = (got.get_f64(p) - w).abs();
            if d.is_nan() {
                return Err(format!("NaN at output element {p}"));
            }
            max_abs = max_abs.max(d);
            max_ref = max_ref.max(w.abs());
            Ok(())
        };
        match want.points {
            Some(points) => {
                if points.len() != want.values.len() {
                    return Err("expected values and points differ in number".into());
                }
                for (&p, &w) in points.iter().zip(want.values) {
                    check(p, w)?;
                }
            }
            None => {
                if got.len() != want.values.len() {
                    return Err(format!(
                        "output has {} elements, expected {}",
                        got.len(),
                        want.values.len()
                    ));
                }
                for (p, &w) in want.values.iter().enumerate() {
                    check(p, w)?;
                }
            }
        }
    }
    Ok(OutputError {
        max_abs,
        rel: max_abs / max_ref.max(1e-30),
    })
}

/// [`output_error`] on the output parameters of `kernel` (`args` in ABI order).
pub fn kernel_output_error(
    kernel: &Kernel,
    args: &[BufferData],
    expected: &[Expected],
) -> Result<OutputError, String> {
    let outs: Vec<&BufferData> = kernel
        .params
        .iter()
        .zip(args)
        .filter(|(p, _)| p.role == BufferRole::Output)
        .map(|(_, b)| b)
        .collect();
    output_error(&outs, expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn norm_wise_relative_error() {
        let got = BufferData::F32(vec![1.0, 2.0, 1e-3]);
        let e = output_error(&[&got], &[Expected::all(&[1.0, 2.0, 0.0])]).unwrap();
        assert!((e.max_abs - 1e-3).abs() < 1e-9);
        assert!((e.rel - 0.5e-3).abs() < 1e-9);
        assert!(!e.within_tolerance());
        let e = output_error(&[&got], &[Expected::all(&[1.0, 2.0, 1e-3])]).unwrap();
        assert!(e.within_tolerance());
    }

    #[test]
    fn sampled_points_and_errors() {
        let got = BufferData::F32(vec![5.0, 0.0, 7.0]);
        let pts = [0usize, 2];
        let ok = Expected {
            points: Some(&pts),
            values: &[5.0, 7.0],
        };
        assert_eq!(output_error(&[&got], &[ok]).unwrap().max_abs, 0.0);
        let far = [9usize];
        let bad = Expected {
            points: Some(&far),
            values: &[1.0],
        };
        assert!(output_error(&[&got], &[bad])
            .unwrap_err()
            .contains("checked point 9"));
        let nan = BufferData::F32(vec![f32::NAN]);
        assert!(output_error(&[&nan], &[Expected::all(&[1.0])])
            .unwrap_err()
            .contains("NaN"));
        assert!(output_error(&[&got], &[])
            .unwrap_err()
            .contains("1 output buffers"));
    }
}
