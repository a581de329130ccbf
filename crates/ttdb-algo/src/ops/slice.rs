//! `strided_slice` (stage `T_strided_slice`, tag `injective`, axes `ax*`): along each axis,
//! the elements `begin, begin + stride, ...` (a negative stride walks backwards). `split`
//! is one such slice per part (stage `T_split`). A glue kernel of a run model.
use super::util::{axes, check};
use crate::ir::{BuildError, DagBuilder, Tensor};

/// Along axis `i`, `shape[i]` elements of `x` from `begin[i]` in steps of `strides[i]`;
/// every index read must lie inside `x` (checked here, so the kernel needs no guard).
pub fn strided_slice(
    b: &mut DagBuilder,
    x: &Tensor,
    begin: &[i64],
    strides: &[i64],
    shape: &[i64],
    name: &str,
) -> Result<Tensor, BuildError> {
    let rank = x.ndim();
    check(
        begin.len() == rank && strides.len() == rank && shape.len() == rank,
        || {
            format!(
                "{name}: begin {begin:?}, strides {strides:?} and shape {shape:?} for a tensor of rank {rank}"
            )
        },
    )?;
    for i in 0..rank {
        let (d, n, s, first) = (x.shape[i], shape[i], strides[i], begin[i]);
        let last = (n - 1)
            .checked_mul(s)
            .and_then(|span| first.checked_add(span));
        let inside = |k: i64| (0..d).contains(&k);
        let ok = n == 0 || (n > 0 && s != 0 && inside(first) && last.is_some_and(inside));
        check(ok, || {
            format!(
                "{name}: {n} elements from {first} in steps of {s} leave axis {i} of {:?}",
                x.shape
            )
        })?;
    }
    Ok(b.elementwise(name, "injective", axes("ax", shape), |v| {
        let index = (0..rank)
            .map(|i| v[i].clone() * strides[i] + begin[i])
            .collect();
        x.at(index)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::eval::{evaluate, TensorData};
    use crate::ir::DType;

    fn run(
        x: &TensorData,
        begin: &[i64],
        strides: &[i64],
        shape: &[i64],
    ) -> Result<TensorData, BuildError> {
        let mut b = DagBuilder::new();
        let p = b.placeholder("p0", &x.shape, DType::F32);
        let out = strided_slice(&mut b, &p, begin, strides, shape, "T_strided_slice")?;
        let dag = b.finish(&[&out]);
        Ok(evaluate(&dag, std::slice::from_ref(x)).unwrap().remove(0))
    }

    #[test]
    fn slices_forwards_backwards_and_by_steps() {
        // x = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
        let x = TensorData::new(&[2, 5], (0..10).map(f64::from).collect());
        let y = run(&x, &[1, 1], &[1, 2], &[1, 2]).unwrap();
        assert_eq!(y.data, [6., 8.]);
        let y = run(&x, &[1, 4], &[-1, -3], &[2, 2]).unwrap();
        assert_eq!(y.data, [9., 6., 4., 1.]);
        // the second half of the columns: one part of a split
        let y = run(&x, &[0, 3], &[1, 1], &[2, 2]).unwrap();
        assert_eq!(y.data, [3., 4., 8., 9.]);
    }

    #[test]
    fn a_slice_reading_outside_the_tensor_is_refused() {
        let x = TensorData::new(&[2, 5], vec![0.0; 10]);
        assert!(run(&x, &[0, 3], &[1, 1], &[2, 3]).is_err());
        assert!(run(&x, &[0, -1], &[1, 1], &[2, 1]).is_err());
        assert!(run(&x, &[0, 0], &[1, 0], &[2, 2]).is_err());
        assert!(run(&x, &[0, 0], &[1, i64::MAX], &[2, 2]).is_err());
        assert!(run(&x, &[0], &[1], &[2]).is_err());
        // nothing read: any begin will do
        assert_eq!(run(&x, &[0, 9], &[1, 1], &[2, 0]).unwrap().data.len(), 0);
    }
}
