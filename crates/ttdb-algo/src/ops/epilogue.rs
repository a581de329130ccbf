//! Element-wise ops that relay's FuseOps fuses after a reduction (the "epilogue" of a
//! task): C++ broadcast binaries `T_add`, `T_multiply`, `T_subtract`, `T_divide`, `T_power`
//! (`include/tvm/topi/broadcast.h`, tag `broadcast`, axes `ax*`; an operand dim of 1 facing
//! a larger output dim is indexed by 0), `T_expand_dims`, `T_relu` (`max(x, 0f)`), the
//! unary `T_<op>` of `include/tvm/topi/elemwise.h` (tag `elemwise`: `T_tanh`, `T_sigmoid`,
//! `T_exp`, `T_erf`, `T_sqrt`, `T_log`, each one `tir.<op>` call), the Python `topi.clip`
//! (`compute(i*) = max(min(x, hi), lo)`: relu6), and the rank-0 `compile_engine_const()`
//! stage relay's TE lowering makes of a scalar constant inside a fused function
//! (`src/relay/backend/te_compiler_cache.cc`). Same names in every era.
use super::util::{axes, check};
use crate::ir::{BinOp, BuildError, DType, DagBuilder, Expr, Intrinsic, Tensor};

/// Output shape of a numpy-style broadcast, None if the shapes do not broadcast.
pub fn broadcast_shape(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

/// Index of an operand of shape `shape` inside an output indexed by `vars`
/// (`InputIndexFromBroadcast`): right-aligned; a dim of 1 where the output is not 1 -> 0.
fn broadcast_index(shape: &[i64], out: &[i64], vars: &[Expr]) -> Vec<Expr> {
    let off = out.len() - shape.len();
    shape
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            if d == 1 && out[off + i] != 1 {
                Expr::int(0)
            } else {
                vars[off + i].clone()
            }
        })
        .collect()
}

/// `topi::<op>(a, b)` with broadcasting, named `name`.
pub fn broadcast_binary(
    b: &mut DagBuilder,
    op: BinOp,
    x: &Tensor,
    y: &Tensor,
    name: &str,
) -> Result<Tensor, BuildError> {
    broadcast_with(b, x, y, name, |l, r| Expr::binary(op, l, r))
}

/// `topi::power(a, b)`: `tvm::pow` is a `tir.pow` call (never folded).
pub fn broadcast_power(b: &mut DagBuilder, x: &Tensor, y: &Tensor) -> Result<Tensor, BuildError> {
    broadcast_with(b, x, y, "T_power", |l, r| {
        Expr::call(Intrinsic::Pow, vec![l, r])
    })
}

/// `detail::WithBroadcast`: `f(x[..], y[..])` over the broadcast shape.
fn broadcast_with(
    b: &mut DagBuilder,
    x: &Tensor,
    y: &Tensor,
    name: &str,
    f: impl FnOnce(Expr, Expr) -> Expr,
) -> Result<Tensor, BuildError> {
    let out = broadcast_shape(&x.shape, &y.shape).ok_or_else(|| {
        BuildError(format!(
            "{name}: shapes {:?} and {:?} do not broadcast",
            x.shape, y.shape
        ))
    })?;
    Ok(b.elementwise(name, "broadcast", axes("ax", &out), |v| {
        let l = x.at(broadcast_index(&x.shape, &out, v));
        let r = y.at(broadcast_index(&y.shape, &out, v));
        f(l, r)
    }))
}

/// A rank-0 relay constant inside a fused function: `te::compute({}, c)` named
/// `compile_engine_const`, tag `broadcast` (`LowerToTECompute::VisitExpr_(ConstantNode)`).
/// The value is the constant's float32, widened exactly as `make_const` does.
pub fn scalar_const(b: &mut DagBuilder, value: f64, dtype: DType) -> Tensor {
    let value = if dtype == DType::F32 {
        value as f32 as f64
    } else {
        value
    };
    b.elementwise("compile_engine_const", "broadcast", vec![], |_| {
        Expr::constant(value, dtype)
    })
}

/// `topi::expand_dims(x, axis, num_newaxis)`.
pub fn expand_dims(
    b: &mut DagBuilder,
    x: &Tensor,
    axis: usize,
    num_newaxis: usize,
) -> Result<Tensor, BuildError> {
    check(axis <= x.ndim(), || {
        format!("expand_dims axis {axis} out of range")
    })?;
    let mut shape = x.shape.clone();
    for _ in 0..num_newaxis {
        shape.insert(axis, 1);
    }
    Ok(
        b.elementwise("T_expand_dims", "broadcast", axes("ax", &shape), |v| {
            let idx: Vec<Expr> = v[..axis]
                .iter()
                .chain(&v[axis + num_newaxis..])
                .cloned()
                .collect();
            x.at(idx)
        }),
    )
}

pub fn relu(b: &mut DagBuilder, x: &Tensor) -> Tensor {
    b.elementwise("T_relu", "elemwise", axes("ax", &x.shape), |v| {
        Expr::max(x.at(v.to_vec()), Expr::constant(0.0, x.dtype))
    })
}

pub fn clip(b: &mut DagBuilder, x: &Tensor, lo: f64, hi: f64) -> Tensor {
    b.elementwise("compute", "elemwise", axes("i", &x.shape), |v| {
        Expr::max(
            Expr::min(x.at(v.to_vec()), Expr::constant(hi, x.dtype)),
            Expr::constant(lo, x.dtype),
        )
    })
}

/// `TOPI_DECLARE_UNARY_OP(op)`: `T_<op>(ax*) = tir.<op>(x[ax*])`.
pub fn unary(b: &mut DagBuilder, x: &Tensor, f: Intrinsic) -> Tensor {
    let name = format!("T_{}", f.op_name().trim_start_matches("tir."));
    b.elementwise(&name, "elemwise", axes("ax", &x.shape), |v| {
        Expr::call(f, vec![x.at(v.to_vec())])
    })
}

pub fn tanh(b: &mut DagBuilder, x: &Tensor) -> Tensor {
    unary(b, x, Intrinsic::Tanh)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_rules() {
        assert_eq!(
            broadcast_shape(&[1, 56, 56, 64], &[1, 1, 1, 64]),
            Some(vec![1, 56, 56, 64])
        );
        assert_eq!(broadcast_shape(&[1, 768], &[768]), Some(vec![1, 768]));
        assert_eq!(broadcast_shape(&[2, 3], &[4, 3]), None);
        let v: Vec<Expr> = (0..4).map(|i| Expr::var(format!("ax{i}"))).collect();
        let idx = broadcast_index(&[1, 1, 1, 64], &[1, 56, 56, 64], &v);
        assert_eq!(
            idx,
            vec![
                Expr::var("ax0"),
                Expr::int(0),
                Expr::int(0),
                Expr::var("ax3")
            ]
        );
    }
}
