//! Small helpers shared by the op builders: axis lists, output-size arithmetic, the
//! conv/pool attribute struct.
use crate::ir::{BuildError, Expr, IterVar};

/// Spatial axes `<prefix>0, <prefix>1, ...` over a shape (C++ `te::compute` names them
/// `ax*`, Python `lambda *indices` names them `i*`).
pub fn axes(prefix: &str, shape: &[i64]) -> Vec<IterVar> {
    shape
        .iter()
        .enumerate()
        .map(|(i, &e)| IterVar::new(format!("{prefix}{i}"), e))
        .collect()
}

/// Named axes.
pub fn named_axes(names: &[&str], shape: &[i64]) -> Vec<IterVar> {
    assert_eq!(names.len(), shape.len());
    names
        .iter()
        .zip(shape)
        .map(|(n, &e)| IterVar::new(*n, e))
        .collect()
}

/// The variables of a list of axes.
pub fn vars(axes: &[IterVar]) -> Vec<Expr> {
    axes.iter().map(IterVar::var).collect()
}

/// Output length of a sliding window: `(in + pad_before + pad_after - dilated_k) / stride + 1`.
pub fn window_out(
    input: i64,
    kernel: i64,
    stride: i64,
    dilation: i64,
    pad_before: i64,
    pad_after: i64,
) -> i64 {
    let dk = (kernel - 1) * dilation + 1;
    (input + pad_before + pad_after - dk).div_euclid(stride) + 1
}

/// `out * stride + r * dilation`, folded like TOPI's `yy * stride_h + ry * dilation_h`.
pub fn window_index(out: Expr, stride: i64, r: Expr, dilation: i64) -> Expr {
    out * stride + r * dilation
}

/// Window attributes of convolutions and pools: 2-D, padding as (top, left, bottom, right).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Window2d {
    pub stride: [i64; 2],
    pub padding: [i64; 4],
    pub dilation: [i64; 2],
}

impl Window2d {
    pub fn new(stride: i64, padding: [i64; 4], dilation: i64) -> Window2d {
        Window2d {
            stride: [stride, stride],
            padding,
            dilation: [dilation, dilation],
        }
    }

    pub fn simple(stride: i64, pad: i64) -> Window2d {
        Window2d::new(stride, [pad; 4], 1)
    }

    pub fn is_padded(&self) -> bool {
        self.padding.iter().any(|&p| p != 0)
    }

    /// Output (height, width) for an input size and kernel size.
    pub fn out_hw(&self, in_hw: [i64; 2], k_hw: [i64; 2]) -> [i64; 2] {
        [
            window_out(
                in_hw[0],
                k_hw[0],
                self.stride[0],
                self.dilation[0],
                self.padding[0],
                self.padding[2],
            ),
            window_out(
                in_hw[1],
                k_hw[1],
                self.stride[1],
                self.dilation[1],
                self.padding[1],
                self.padding[3],
            ),
        ]
    }
}

pub fn check(cond: bool, msg: impl FnOnce() -> String) -> Result<(), BuildError> {
    if cond {
        Ok(())
    } else {
        Err(BuildError(msg()))
    }
}

pub fn rank(shape: &[i64], want: usize, what: &str) -> Result<(), BuildError> {
    check(shape.len() == want, || {
        format!("{what} must be {want}-D, got {shape:?}")
    })
}
