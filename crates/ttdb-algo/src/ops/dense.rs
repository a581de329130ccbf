//! Matrix products: relay `nn.dense` (`topi.nn.dense` -> `matmul(transpose_b=True)`) and
//! `nn.batch_matmul` (transpose_b=True), both marking the weight layout-free (spec §4.4-4.5).
//!
//! Names per era: dense `T_dense(i, j)` (v0.7), `T_matmul_NT(i, j)` (v0.8 .. v0.14),
//! `T_matmul_NT(i0, i1)` (v0.15+, `lambda *indices`); batch_matmul is an unnamed `compute`
//! in v0.7, `T_batch_matmul_NT(b, i, j)` after.
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

/// x [XB,M,K], y [YB,N,K] -> [max(XB,YB),M,N]; a batch dim of 1 broadcasts (index 0).
pub fn batch_matmul(
    b: &mut DagBuilder,
    era: Era,
    x: &Tensor,
    y: &Tensor,
) -> Result<Tensor, BuildError> {
    rank(&x.shape, 3, "batch_matmul x")?;
    rank(&y.shape, 3, "batch_matmul y")?;
    let (xb, m, k) = (x.shape[0], x.shape[1], x.shape[2]);
    let (yb, n, yk) = (y.shape[0], y.shape[1], y.shape[2]);
    check(k == yk, || {
        format!("batch_matmul: reduction dims differ ({k} vs {yk})")
    })?;
    check(xb == yb || xb == 1 || yb == 1, || {
        format!("batch_matmul: batch dims {xb} and {yb} do not broadcast")
    })?;
    let batch = xb.max(yb);
    let (name, attrs) = if era == Era::V07 {
        ("compute", ComputeAttrs::default())
    } else {
        (
            "T_batch_matmul_NT",
            ComputeAttrs {
                layout_free_placeholders: vec![y.id],
                ..Default::default()
            },
        )
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
            x.at(vec![bx, v[1].clone(), r[0].clone()]) * y.at(vec![by, v[2].clone(), r[0].clone()])
        },
    ))
}

/// Recognition: `dense(data [M, K], weight [N, K]) -> [M, N]`.
pub fn dense_candidates(a: &[i64], b: &[i64], out: &[i64]) -> Vec<Anchor> {
    let fits = (a.len(), b.len(), out.len()) == (2, 2, 2) && a[1] == b[1] && out == [a[0], b[0]];
    fits.then_some(Anchor::Dense).into_iter().collect()
}

/// Recognition: `batch_matmul(A [B, M, K], B [B, N, K]) -> [B, M, N]` (a batch of 1
/// broadcasts).
pub fn batch_matmul_candidates(a: &[i64], b: &[i64], out: &[i64]) -> Vec<Anchor> {
    let fits = (a.len(), b.len(), out.len()) == (3, 3, 3)
        && a[2] == b[2]
        && out[1] == a[1]
        && out[2] == b[1]
        && out[0] == a[0].max(b[0]);
    fits.then_some(Anchor::BatchMatmul).into_iter().collect()
}
