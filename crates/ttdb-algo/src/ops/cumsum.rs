//! `cumsum` along one axis (ONNX `CumSum`, stage `T_cumsum`): element `i` sums elements
//! `0..=i` (`0..i` when exclusive; from the end when reversed). A glue kernel of a run model,
//! written as a guarded reduction over the whole axis: quadratic in its length, which is
//! fine for the position ids it computes in transformers.
use super::util::{axes, check};
use crate::ir::BuildError;
use crate::ir::{Combiner, ComputeAttrs, DagBuilder, Expr, IterVar, Tensor};

pub fn cumsum(
    b: &mut DagBuilder,
    x: &Tensor,
    axis: usize,
    exclusive: bool,
    reverse: bool,
) -> Result<Tensor, BuildError> {
    check(axis < x.ndim(), || {
        format!("cumsum: axis {axis} out of range for {:?}", x.shape)
    })?;
    let n = x.shape[axis];
    let dtype = x.dtype;
    Ok(b.reduce(
        "T_cumsum",
        "",
        axes("ax", &x.shape),
        vec![IterVar::new("k", n)],
        Combiner::Sum,
        ComputeAttrs::default(),
        |v, r| {
            let (i, k) = (v[axis].clone(), r[0].clone());
            // which k count toward element i
            let counted = match (reverse, exclusive) {
                (false, false) => Expr::binary(crate::ir::BinOp::Le, k.clone(), i),
                (false, true) => Expr::lt(k.clone(), i),
                (true, false) => Expr::ge(k.clone(), i),
                (true, true) => Expr::binary(crate::ir::BinOp::Gt, k.clone(), i),
            };
            let mut index = v.to_vec();
            index[axis] = k;
            Expr::if_then_else(counted, x.at(index), Expr::constant(0.0, dtype))
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::eval::{evaluate, TensorData};
    use crate::ir::DType;

    #[test]
    fn sums_run_forwards_backwards_and_exclusive() {
        let x = TensorData::new(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let run = |axis, exclusive, reverse| {
            let mut b = DagBuilder::new();
            let p = b.placeholder("p0", &x.shape, DType::F32);
            let out = cumsum(&mut b, &p, axis, exclusive, reverse).unwrap();
            let dag = b.finish(&[&out]);
            evaluate(&dag, std::slice::from_ref(&x))
                .unwrap()
                .remove(0)
                .data
        };
        assert_eq!(run(1, false, false), [1., 3., 6., 4., 9., 15.]);
        assert_eq!(run(1, true, false), [0., 1., 3., 0., 4., 9.]);
        assert_eq!(run(1, false, true), [6., 5., 3., 15., 11., 6.]);
        assert_eq!(run(1, true, true), [5., 3., 0., 11., 6., 0.]);
        assert_eq!(run(0, false, false), [1., 2., 3., 5., 7., 9.]);
        let mut b = DagBuilder::new();
        let p = b.placeholder("p0", &x.shape, DType::F32);
        assert!(cumsum(&mut b, &p, 2, false, false).is_err());
    }
}
