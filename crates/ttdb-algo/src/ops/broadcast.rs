//! Numpy broadcasting of any number of operands (right-aligned; a dim of 1 facing a larger
//! one is read at 0), and the two ops that are nothing else: `broadcast_to` (stage
//! `T_broadcast_to`, ONNX `Expand` at run time) and `where` (stage `T_where`, three
//! operands). Glue kernels of a run model. Conditions are integer tensors, any non-zero
//! value true (ttdb runs ONNX's bool tensors as int64 0 / 1).
use super::epilogue::broadcast_shape;
use super::util::{axes, check};
use crate::ir::{BinOp, BuildError, DagBuilder, Expr, Tensor};

/// The shape all `shapes` broadcast to, None if they do not.
pub fn broadcast_all(shapes: &[&[i64]]) -> Option<Vec<i64>> {
    shapes
        .iter()
        .try_fold(Vec::new(), |acc, s| broadcast_shape(&acc, s))
}

/// Where an operand of `shape` is read for the output element at `vars` (of shape `out`).
fn operand_index(shape: &[i64], out: &[i64], vars: &[Expr]) -> Vec<Expr> {
    let offset = out.len() - shape.len();
    shape
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            if d == 1 && out[offset + i] != 1 {
                Expr::int(0)
            } else {
                vars[offset + i].clone()
            }
        })
        .collect()
}

/// A stage over the broadcast shape of `operands` whose element is `f` of theirs.
pub fn broadcast_map(
    b: &mut DagBuilder,
    name: &str,
    operands: &[&Tensor],
    f: impl FnOnce(Vec<Expr>) -> Expr,
) -> Result<Tensor, BuildError> {
    let shapes: Vec<&[i64]> = operands.iter().map(|t| t.shape.as_slice()).collect();
    let out = broadcast_all(&shapes)
        .ok_or_else(|| BuildError(format!("{name}: shapes {shapes:?} do not broadcast")))?;
    Ok(b.elementwise(name, "broadcast", axes("ax", &out), |v| {
        let loads = operands
            .iter()
            .map(|t| t.at(operand_index(&t.shape, &out, v)))
            .collect();
        f(loads)
    }))
}

/// `x` broadcast to `shape`, which must be what `x` and `shape` broadcast to.
pub fn broadcast_to(b: &mut DagBuilder, x: &Tensor, shape: &[i64]) -> Result<Tensor, BuildError> {
    check(
        broadcast_shape(&x.shape, shape).as_deref() == Some(shape),
        || {
            format!(
                "broadcast_to: {:?} does not broadcast to {shape:?}",
                x.shape
            )
        },
    )?;
    Ok(
        b.elementwise("T_broadcast_to", "broadcast", axes("ax", shape), |v| {
            x.at(operand_index(&x.shape, shape, v))
        }),
    )
}

/// `x` where `cond` is non-zero, else `y`, all three broadcast.
pub fn where_select(
    b: &mut DagBuilder,
    cond: &Tensor,
    x: &Tensor,
    y: &Tensor,
) -> Result<Tensor, BuildError> {
    check(x.dtype == y.dtype, || {
        format!("where: branches of types {} and {}", x.dtype, y.dtype)
    })?;
    broadcast_map(b, "T_where", &[cond, x, y], |v| {
        let [c, t, f]: [Expr; 3] = v.try_into().expect("three operands");
        let truth = Expr::binary(BinOp::Ne, c.clone(), Expr::constant(0.0, c.dtype()));
        Expr::select(truth, t, f)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::eval::{evaluate, TensorData};
    use crate::ir::DType;

    #[test]
    fn where_and_broadcast_to_follow_numpy() {
        let mut b = DagBuilder::new();
        let c = b.placeholder("p0", &[2, 1], DType::I64);
        let x = b.placeholder("p1", &[3], DType::F32);
        let y = b.placeholder("p2", &[], DType::F32);
        let w = where_select(&mut b, &c, &x, &y).unwrap();
        let dag = b.finish(&[&w]);
        let ins = [
            TensorData::new(&[2, 1], vec![0.0, 5.0]),
            TensorData::new(&[3], vec![1.0, 2.0, 3.0]),
            TensorData::new(&[], vec![-1.0]),
        ];
        let out = evaluate(&dag, &ins).unwrap().remove(0);
        assert_eq!(out.shape, vec![2, 3]);
        assert_eq!(out.data, [-1., -1., -1., 1., 2., 3.]);

        let mut b = DagBuilder::new();
        let x = b.placeholder("p0", &[3, 1], DType::F32);
        let e = broadcast_to(&mut b, &x, &[2, 3, 2]).unwrap();
        let dag = b.finish(&[&e]);
        let ins = [TensorData::new(&[3, 1], vec![1.0, 2.0, 3.0])];
        let out = evaluate(&dag, &ins).unwrap().remove(0);
        let once = [1., 1., 2., 2., 3., 3.];
        assert_eq!(out.data, [once, once].concat());
        let mut b = DagBuilder::new();
        let x = b.placeholder("p0", &[3, 1], DType::F32);
        assert!(broadcast_to(&mut b, &x, &[3, 2, 2]).is_err());
        assert!(broadcast_to(&mut b, &x, &[1]).is_err());
        assert_eq!(broadcast_all(&[&[2, 1], &[3], &[]]), Some(vec![2, 3]));
        assert_eq!(broadcast_all(&[&[2], &[3]]), None);
    }
}
