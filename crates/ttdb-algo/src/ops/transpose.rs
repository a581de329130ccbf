//! `transpose` (stage `T_transpose`, tag `injective`, axes `ax*`): the axes of a tensor
//! permuted. A glue kernel of a run model.
use super::util::{axes, check};
use crate::ir::{BuildError, DagBuilder, Expr, Tensor};

/// Output axis `i` is axis `perm[i]` of `x`.
pub fn transpose(b: &mut DagBuilder, x: &Tensor, perm: &[usize]) -> Result<Tensor, BuildError> {
    let rank = x.ndim();
    let mut seen = vec![false; rank];
    let is_permutation = perm.len() == rank
        && perm
            .iter()
            .all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
    check(is_permutation, || {
        format!(
            "transpose: {perm:?} is not a permutation of the axes of {:?}",
            x.shape
        )
    })?;
    let shape: Vec<i64> = perm.iter().map(|&p| x.shape[p]).collect();
    Ok(
        b.elementwise("T_transpose", "injective", axes("ax", &shape), |v| {
            let mut index = vec![Expr::int(0); rank];
            for (i, &p) in perm.iter().enumerate() {
                index[p] = v[i].clone();
            }
            x.at(index)
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::eval::{evaluate, TensorData};
    use crate::ir::DType;

    fn run(x: &TensorData, perm: &[usize]) -> Result<TensorData, BuildError> {
        let mut b = DagBuilder::new();
        let p = b.placeholder("p0", &x.shape, DType::F32);
        let out = transpose(&mut b, &p, perm)?;
        let dag = b.finish(&[&out]);
        Ok(evaluate(&dag, std::slice::from_ref(x)).unwrap().remove(0))
    }

    #[test]
    fn axes_move_where_the_permutation_says() {
        // x[i, j, k] = 100 i + 10 j + k, shape [2, 3, 4]
        let mut data = Vec::new();
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    data.push(f64::from(100 * i + 10 * j + k));
                }
            }
        }
        let x = TensorData::new(&[2, 3, 4], data);
        let y = run(&x, &[2, 0, 1]).unwrap();
        assert_eq!(y.shape, vec![4, 2, 3]);
        // y[k, i, j] = x[i, j, k]: y[3, 1, 2] is at (3 * 2 + 1) * 3 + 2
        assert_eq!(y.data[(3 * 2 + 1) * 3 + 2], 123.0);
        assert_eq!(run(&x, &[0, 1, 2]).unwrap(), x);
        let m = TensorData::new(&[2, 3], (0..6).map(f64::from).collect());
        assert_eq!(run(&m, &[1, 0]).unwrap().data, [0., 3., 1., 4., 2., 5.]);
    }

    #[test]
    fn a_perm_that_is_no_permutation_is_refused() {
        let x = TensorData::new(&[2, 3], vec![0.0; 6]);
        for perm in [&[0, 0][..], &[0], &[0, 2], &[1, 0, 2]] {
            assert!(run(&x, perm).is_err(), "{perm:?}");
        }
    }
}
