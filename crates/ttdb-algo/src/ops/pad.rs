//! `topi.nn.pad` (Python, axes `i0..`) and `topi::pad` (C++, axes `ax0..`): a padded copy;
//! an identity copy when no dimension is padded (TOPI keeps the stage, e.g. conv2d NHWC's
//! `PaddedInput` of a 1x1 convolution). The padded body is an `if_then_else` call, which
//! PrintDAG shows only as `Op(tir.if_then_else)`, so its conditions never reach the hash.
use super::util::{axes, check, vars};
use crate::ir::{BuildError, DagBuilder, Expr, Tensor};

/// Which TOPI implementation (only the axis names differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadFlavor {
    /// python `topi.nn.pad`: axes `i0, i1, ...`
    Python,
    /// C++ `topi::pad` (used by pooling): axes `ax0, ax1, ...`
    Cpp,
}

pub fn pad(
    b: &mut DagBuilder,
    data: &Tensor,
    before: &[i64],
    after: &[i64],
    value: Expr,
    name: &str,
    flavor: PadFlavor,
) -> Result<Tensor, BuildError> {
    let n = data.ndim();
    check(before.len() == n && after.len() == n, || {
        format!("pad widths must have rank {n}")
    })?;
    let out_shape: Vec<i64> = (0..n)
        .map(|i| data.shape[i] + before[i] + after[i])
        .collect();
    let prefix = match flavor {
        PadFlavor::Python => "i",
        PadFlavor::Cpp => "ax",
    };
    let ax = axes(prefix, &out_shape);
    let v = vars(&ax);
    let mut conds = Vec::new();
    let mut index = Vec::with_capacity(n);
    for i in 0..n {
        if before[i] == 0 && after[i] == 0 {
            index.push(v[i].clone());
        } else {
            index.push(v[i].clone() - before[i]);
            conds.push(Expr::ge(v[i].clone(), before[i]));
            conds.push(Expr::lt(v[i].clone(), data.shape[i] + before[i]));
        }
    }
    let load = data.at(index);
    let body = match Expr::all(conds) {
        Some(cond) => Expr::if_then_else(cond, load, value.cast(data.dtype)),
        None => load,
    };
    Ok(b.elementwise(name, "injective,pad", ax, |_| body))
}
