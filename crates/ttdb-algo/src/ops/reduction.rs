//! Reductions outside convolutions: `topi.nn.softmax` (any axis), relay `mean` and
//! `variance` (C++ `topi::sum` named `<input>_red`, axes `ax*`, reduce axes `k<dim>`, then
//! `T_divide` by the element count as a float constant). Same names in every era.
use super::era::Era;
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
