//! Matrix products: relay `nn.dense` (`topi.nn.dense` -> `matmul(transpose_b=True)`) and
//! `nn.batch_matmul`, both marking the weight layout-free (spec §4.4-4.5). batch_matmul's
//! weight is `[B, N, K]` (transpose_b, the default) or, from v0.8 on, `[B, K, N]`
//! (transpose_b=False: what TVM's TensorFlow frontend and its ONNX frontend without
//! `use_nt_batch_matmul` emit).
//!
//! Names per era: dense `T_dense(i, j)` (v0.7), `T_matmul_NT(i, j)` (v0.8 .. v0.14),
//! `T_matmul_NT(i0, i1)` (v0.15+, `lambda *indices`); batch_matmul is an unnamed `compute`
//! in v0.7, `T_batch_matmul_NT(b, i, j)` / `T_batch_matmul_NN(b, i, j)` after.
use super::era::Era;
use super::registry::Anchor;
use super::util::{check, named_axes, rank};
use crate::ir::{BuildError, Combiner, ComputeAttrs, DagBuilder, Expr, IterVar, Tensor};

/// data [M,K], weight [N,K] -> [M,N].
pub fn dense(
    b: &mut DagBuilder,
    era: Era,
    data: &Tensor,
    weight: &Tensor,
) -> Result<Tensor, BuildError> {
    rank(&data.shape, 2, "dense data")?;
    rank(&weight.shape, 2, "dense weight")?;
    let (m, k) = (data.shape[0], data.shape[1]);
    let (n, wk) = (weight.shape[0], weight.shape[1]);
    check(k == wk, || {
        format!("dense: reduction dims differ ({k} vs {wk})")
    })?;
    let (name, axis_names) = match era {
        Era::V07 => ("T_dense", ["i", "j"]),
        Era::V015 => ("T_matmul_NT", ["i0", "i1"]),
        _ => ("T_matmul_NT", ["i", "j"]),
    };
    let attrs = ComputeAttrs {
        layout_free_placeholders: vec![weight.id],
        ..Default::default()
    };
    Ok(b.reduce(
        name,
        "dense",
        named_axes(&axis_names, &[m, n]),
        vec![IterVar::new("k", k)],
        Combiner::Sum,
        attrs,
        |v, r| {
            data.at(vec![v[0].clone(), r[0].clone()]) * weight.at(vec![v[1].clone(), r[0].clone()])
        },
    ))
}

/// x [XB,M,K], y [YB,N,K] (`transpose_b`) or [YB,K,N] -> [max(XB,YB),M,N]; a batch dim of 1
/// broadcasts (index 0).
pub fn batch_matmul(
    b: &mut DagBuilder,
    era: Era,
    x: &Tensor,
    y: &Tensor,
    transpose_b: bool,
) -> Result<Tensor, BuildError> {
    rank(&x.shape, 3, "batch_matmul x")?;
    rank(&y.shape, 3, "batch_matmul y")?;
    let (xb, m, k) = (x.shape[0], x.shape[1], x.shape[2]);
    let (yb, n, yk) = if transpose_b {
        (y.shape[0], y.shape[1], y.shape[2])
    } else {
        (y.shape[0], y.shape[2], y.shape[1])
    };
    check(k == yk, || {
        format!("batch_matmul: reduction dims differ ({k} vs {yk})")
    })?;
    check(xb == yb || xb == 1 || yb == 1, || {
        format!("batch_matmul: batch dims {xb} and {yb} do not broadcast")
    })?;
    check(transpose_b || era > Era::V07, || {
        "batch_matmul: TVM before v0.8 has no transpose_b=False".into()
    })?;
    let batch = xb.max(yb);
    let (name, attrs) = match (era, transpose_b) {
        (Era::V07, _) => ("compute", ComputeAttrs::default()),
        (_, nt) => (
            if nt {
                "T_batch_matmul_NT"
            } else {
                "T_batch_matmul_NN"
            },
            ComputeAttrs {
                layout_free_placeholders: vec![y.id],
                ..Default::default()
            },
        ),
    };
    Ok(b.reduce(
        name,
        "batch_matmul",
        named_axes(&["b", "i", "j"], &[batch, m, n]),
        vec![IterVar::new("k", k)],
        Combiner::Sum,
        attrs,
        |v, r| {
            let bx = if xb != 1 { v[0].clone() } else { Expr::int(0) };
            let by = if yb != 1 { v[0].clone() } else { Expr::int(0) };
            let (j, k) = (v[2].clone(), r[0].clone());
            let y_at = if transpose_b {
                vec![by, j, k.clone()]
            } else {
                vec![by, k.clone(), j]
            };
            x.at(vec![bx, v[1].clone(), k]) * y.at(y_at)
        },
    ))
}

/// Recognition: `dense(data [M, K], weight [N, K]) -> [M, N]`.
pub fn dense_candidates(a: &[i64], b: &[i64], out: &[i64]) -> Vec<Anchor> {
    let fits = (a.len(), b.len(), out.len()) == (2, 2, 2) && a[1] == b[1] && out == [a[0], b[0]];
    fits.then_some(Anchor::Dense).into_iter().collect()
}

/// Recognition: `batch_matmul(A [B, M, K], B [B, N, K] or [B, K, N]) -> [B, M, N]` (a
/// batch of 1 broadcasts); both layouts when the weight is square.
pub fn batch_matmul_candidates(a: &[i64], b: &[i64], out: &[i64]) -> Vec<Anchor> {
    if (a.len(), b.len(), out.len()) != (3, 3, 3) || out[1] != a[1] || out[0] != a[0].max(b[0]) {
        return vec![];
    }
    [(true, 2, 1), (false, 1, 2)]
        .into_iter()
        .filter(|&(_, k, n)| a[2] == b[k] && out[2] == b[n])
        .map(|(transpose_b, _, _)| Anchor::BatchMatmul { transpose_b })
        .collect()
}
