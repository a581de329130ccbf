//! Reductions outside convolutions: `topi.nn.softmax` (any axis), relay `mean` and
//! `variance` (C++ `topi::sum` named `<input>_red`, axes `ax*`, reduce axes `k<dim>`, then
//! `T_divide` by the element count as a float constant). Same names in every era.
use super::era::Era;
use super::registry::Anchor;
use super::util::{axes, check};
use crate::ir::{BuildError, Combiner, ComputeAttrs, DagBuilder, Expr, IterVar, Tensor};

/// Softmax along `axis`: maxelem, exp(x - max), expsum, norm.
pub fn softmax(
    b: &mut DagBuilder,
    _era: Era,
    x: &Tensor,
    axis: usize,
) -> Result<Tensor, BuildError> {
    check(axis < x.ndim(), || {
        format!("softmax axis {axis} out of range for {:?}", x.shape)
    })?;
    let reduced: Vec<i64> = x
        .shape
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != axis)
        .map(|(_, &d)| d)
        .collect();
    let extent = x.shape[axis];
    // insert the reduce variable at `axis` into a reduced index list
    let with_k = |idx: &[Expr], k: &Expr| {
        let mut v = idx.to_vec();
        v.insert(axis, k.clone());
        v
    };
    let without_axis = |idx: &[Expr]| -> Vec<Expr> {
        idx.iter()
            .enumerate()
            .filter(|&(i, _)| i != axis)
            .map(|(_, e)| e.clone())
            .collect()
    };
    let maxelem = b.reduce(
        "T_softmax_maxelem",
        "",
        axes("i", &reduced),
        vec![IterVar::new("k", extent)],
        Combiner::Max,
        ComputeAttrs::default(),
        |v, r| x.at(with_k(v, &r[0])),
    );
    let exp = b.elementwise("T_softmax_exp", "", axes("i", &x.shape), |v| {
        Expr::call(
            crate::ir::Intrinsic::Exp,
            vec![x.at(v.to_vec()) - maxelem.at(without_axis(v))],
        )
    });
    let expsum = b.reduce(
        "T_softmax_expsum",
        "",
        axes("i", &reduced),
        vec![IterVar::new("k", extent)],
        Combiner::Sum,
        ComputeAttrs::default(),
        |v, r| exp.at(with_k(v, &r[0])),
    );
    Ok(
        b.elementwise("T_softmax_norm", "", axes("i", &x.shape), |v| {
            Expr::div(exp.at(v.to_vec()), expsum.at(without_axis(v)))
        }),
    )
}

/// `topi::sum` over `reduce_axes` (sorted, distinct).
fn comm_sum(
    b: &mut DagBuilder,
    x: &Tensor,
    reduce_axes: &[usize],
    keepdims: bool,
) -> Result<Tensor, BuildError> {
    check(
        !reduce_axes.is_empty() && reduce_axes.iter().all(|&a| a < x.ndim()),
        || format!("bad reduce axes {reduce_axes:?}"),
    )?;
    let out_shape: Vec<i64> = (0..x.ndim())
        .filter_map(|i| {
            if reduce_axes.contains(&i) {
                keepdims.then_some(1)
            } else {
                Some(x.shape[i])
            }
        })
        .collect();
    let r_axes: Vec<IterVar> = reduce_axes
        .iter()
        .map(|&i| IterVar::new(format!("k{i}"), x.shape[i]))
        .collect();
    let name = format!("{}_red", x.name);
    Ok(b.reduce(
        &name,
        "comm_reduce",
        axes("ax", &out_shape),
        r_axes,
        Combiner::Sum,
        ComputeAttrs::default(),
        |v, r| {
            let mut idx = Vec::new();
            let (mut arg, mut red) = (0, 0);
            for i in 0..x.ndim() {
                if reduce_axes.contains(&i) {
                    idx.push(r[red].clone());
                    red += 1;
                    if keepdims {
                        arg += 1;
                    }
                } else {
                    idx.push(v[arg].clone());
                    arg += 1;
                }
            }
            x.at(idx)
        },
    ))
}

fn divide_by(b: &mut DagBuilder, t: &Tensor, count: i64) -> Tensor {
    b.elementwise("T_divide", "elemwise", axes("ax", &t.shape), |v| {
        Expr::div(t.at(v.to_vec()), Expr::constant(count as f64, t.dtype))
    })
}

/// Relay `mean(x, axis, keepdims)`.
pub fn mean(
    b: &mut DagBuilder,
    _era: Era,
    x: &Tensor,
    reduce_axes: &[usize],
    keepdims: bool,
) -> Result<Tensor, BuildError> {
    let sum = comm_sum(b, x, reduce_axes, keepdims)?;
    let count: i64 = reduce_axes.iter().map(|&i| x.shape[i]).product();
    Ok(divide_by(b, &sum, count))
}

/// Relay `variance(x, mean, axis, keepdims, unbiased)`: `sum((x - mean)^2) / count`.
pub fn variance(
    b: &mut DagBuilder,
    _era: Era,
    x: &Tensor,
    mean: &Tensor,
    reduce_axes: &[usize],
    keepdims: bool,
    unbiased: bool,
) -> Result<Tensor, BuildError> {
    let diff = super::epilogue::broadcast_binary(b, crate::ir::BinOp::Sub, x, mean, "T_subtract")?;
    let sq =
        super::epilogue::broadcast_binary(b, crate::ir::BinOp::Mul, &diff, &diff, "T_multiply")?;
    let sum = comm_sum(b, &sq, reduce_axes, keepdims)?;
    let count: i64 = reduce_axes.iter().map(|&i| x.shape[i]).product::<i64>() - unbiased as i64;
    Ok(divide_by(b, &sum, count))
}

/// Recognition: softmax over each axis (last first) when the shape stays.
pub fn softmax_candidates(x: &[i64], out: &[i64]) -> Vec<Anchor> {
    if x != out {
        return vec![];
    }
    (0..x.len())
        .rev()
        .map(|axis| Anchor::Softmax { axis })
        .collect()
}

/// Recognition: the mean over the axes reduced from `x` to `out`.
pub fn mean_candidates(x: &[i64], out: &[i64]) -> Vec<Anchor> {
    reduced_axes(x, out)
        .map(|(axes, keepdims)| Anchor::Mean { axes, keepdims })
        .into_iter()
        .collect()
}

/// Recognition: `variance(x, mean)`, whose mean input keeps the reduced dims as 1.
pub fn variance_candidates(a: &[i64], b: &[i64], out: &[i64]) -> Vec<Anchor> {
    let mut v = Vec::new();
    if a.len() != b.len() {
        return v;
    }
    if let Some((axes, true)) = reduced_axes(a, b) {
        if let Some((_, keepdims)) =
            reduced_axes(a, out).or_else(|| (out == b).then(|| (axes.clone(), true)))
        {
            for unbiased in [false, true] {
                v.push(Anchor::Variance {
                    axes: axes.clone(),
                    keepdims,
                    unbiased,
                });
            }
        }
    }
    v
}

/// The highest rank whose dropped reduction axes are recognized (real models stay under 7).
const MAX_REDUCED_RANK: usize = 12;

/// Axes reduced from `x` to `out`: keepdims (same rank, 1s where reduced) or dropped dims.
fn reduced_axes(x: &[i64], out: &[i64]) -> Option<(Vec<usize>, bool)> {
    if x.len() == out.len() {
        let axes: Vec<usize> = (0..x.len()).filter(|&i| x[i] != out[i]).collect();
        let ok = !axes.is_empty()
            && axes.iter().all(|&i| out[i] == 1)
            && (0..x.len()).all(|i| axes.contains(&i) || x[i] == out[i]);
        return ok.then_some((axes, true));
    }
    // Dropped dims: the subset of axes whose removal leaves `out`, trailing axes first. The
    // subsets are enumerated, so the rank is bounded: a hostile key of rank 32 or more
    // overflowed the mask (a fuzzed bundle found it), and one of rank 30 would take minutes.
    if out.len() < x.len() && !out.is_empty() && x.len() <= MAX_REDUCED_RANK {
        let n = x.len();
        let drop = n - out.len();
        let mut masks: Vec<u32> = (0u32..(1 << n))
            .filter(|m| m.count_ones() as usize == drop)
            .collect();
        masks.sort_by_key(|m| std::cmp::Reverse(*m));
        for m in masks {
            let kept: Vec<i64> = (0..n).filter(|i| m & (1 << i) == 0).map(|i| x[i]).collect();
            if kept == out {
                return Some(((0..n).filter(|i| m & (1 << i) != 0).collect(), false));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduced_axes_keepdims_and_dropped() {
        assert_eq!(
            reduced_axes(&[1, 14, 768], &[1, 14, 1]),
            Some((vec![2], true))
        );
        assert_eq!(reduced_axes(&[2, 3, 4], &[2, 3]), Some((vec![2], false)));
        assert_eq!(reduced_axes(&[2, 3], &[2, 3]), None);
    }

    /// A hostile key's rank: no overflow, no exponential search, just no match.
    #[test]
    fn reduced_axes_of_a_huge_rank_is_none() {
        assert_eq!(reduced_axes(&[2; 40], &[2; 20]), None);
        assert_eq!(reduced_axes(&[1; 31], &[1; 30]), None);
        let mut x = vec![1; MAX_REDUCED_RANK];
        x[0] = 5;
        // the largest rank recognized: only dropping axis 0 leaves the 1s
        assert_eq!(reduced_axes(&x, &x[1..]), Some((vec![0], false)));
    }
}
