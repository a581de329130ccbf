//! `concatenate` (stage `T_concat`, tag `injective`, axes `ax*`): tensors joined along one
//! axis. A glue kernel of a run model, never a tuned one.
//!
//! Each output element reads exactly one input, chosen by a chain of lazy `if_then_else`
//! on the axis position, so every load is guarded by the range it is valid in (the
//! codegen's bounds checker proves each one from those conditions).
use super::util::{axes, check};
use crate::ir::{BuildError, DagBuilder, Expr, Tensor};

/// `inputs` joined along `axis`; they must agree in rank, type and every other dim.
pub fn concatenate(
    b: &mut DagBuilder,
    inputs: &[Tensor],
    axis: usize,
) -> Result<Tensor, BuildError> {
    let first = inputs
        .first()
        .ok_or_else(|| BuildError("concatenate of no tensors".into()))?;
    let rank = first.ndim();
    check(axis < rank, || {
        format!("concatenate axis {axis} out of range for rank {rank}")
    })?;
    let mut out_shape = first.shape.clone();
    out_shape[axis] = 0;
    for t in inputs {
        let agrees = t.ndim() == rank
            && t.dtype == first.dtype
            && (0..rank).all(|i| i == axis || t.shape[i] == first.shape[i]);
        check(agrees, || {
            format!(
                "concatenate along axis {axis}: {:?} ({}) does not match {:?} ({})",
                t.shape, t.dtype, first.shape, first.dtype
            )
        })?;
        out_shape[axis] = out_shape[axis]
            .checked_add(t.shape[axis])
            .ok_or_else(|| BuildError("concatenate: the joined axis overflows".into()))?;
    }
    // inputs empty along the axis contribute nothing (and would need a load never executed)
    let parts: Vec<(i64, &Tensor)> = inputs
        .iter()
        .scan(0i64, |offset, t| {
            let start = *offset;
            *offset += t.shape[axis];
            Some((start, t))
        })
        .filter(|(_, t)| t.shape[axis] > 0)
        .collect();
    check(!parts.is_empty(), || {
        format!("concatenate along axis {axis} of tensors all empty along it")
    })?;
    Ok(
        b.elementwise("T_concat", "injective", axes("ax", &out_shape), |v| {
            let load = |(start, t): &(i64, &Tensor)| {
                let mut index = v.to_vec();
                index[axis] = v[axis].clone() - *start;
                t.at(index)
            };
            // from the last part backwards: part k is taken when ax < the start of part k + 1
            let (last, rest) = parts.split_last().expect("non-empty");
            let mut body = load(last);
            for (k, part) in rest.iter().enumerate().rev() {
                let next_start = parts[k + 1].0;
                body = Expr::if_then_else(Expr::lt(v[axis].clone(), next_start), load(part), body);
            }
            body
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::eval::{evaluate, TensorData};
    use crate::ir::DType;

    fn run(shapes: &[&[i64]], axis: usize) -> Result<TensorData, BuildError> {
        let mut b = DagBuilder::new();
        let mut ins = Vec::new();
        let mut datas = Vec::new();
        let mut next = 0.0;
        for (i, s) in shapes.iter().enumerate() {
            ins.push(b.placeholder(format!("p{i}"), s, DType::F32));
            let n: i64 = s.iter().product();
            datas.push(TensorData::new(
                s,
                (0..n)
                    .map(|_| {
                        next += 1.0;
                        next
                    })
                    .collect(),
            ));
        }
        let out = concatenate(&mut b, &ins, axis)?;
        let dag = b.finish(&[&out]);
        // an input empty along the axis is never read, so it is no placeholder of the DAG
        datas.retain(|d| !d.is_empty());
        Ok(evaluate(&dag, &datas).unwrap().remove(0))
    }

    #[test]
    fn joins_along_any_axis() {
        // a = [[1, 2, 3], [4, 5, 6]], b = [[7, 8, 9]], c = [[10, 11, 12], [13, 14, 15]]
        let rows = run(&[&[2, 3], &[1, 3], &[2, 3]], 0).unwrap();
        assert_eq!(rows.shape, vec![5, 3]);
        assert_eq!(rows.data, (1..=15).map(f64::from).collect::<Vec<_>>());
        // a = [[1, 2], [3, 4]], b = [[5], [6]], an empty c, d = [[7, 8, 9], [10, 11, 12]]
        let cols = run(&[&[2, 2], &[2, 1], &[2, 0], &[2, 3]], 1).unwrap();
        assert_eq!(cols.shape, vec![2, 6]);
        let want = [1, 2, 5, 7, 8, 9, 3, 4, 6, 10, 11, 12];
        assert_eq!(cols.data, want.map(f64::from).to_vec());
    }

    #[test]
    fn mismatched_inputs_are_refused() {
        assert!(run(&[&[2, 3], &[2, 4]], 0)
            .unwrap_err()
            .0
            .contains("does not match"));
        assert!(run(&[&[2, 3], &[2, 3, 1]], 1).is_err());
        assert!(run(&[&[2, 3]], 2).unwrap_err().0.contains("out of range"));
        assert!(run(&[&[0, 3], &[0, 3]], 0).unwrap_err().0.contains("empty"));
    }
}
