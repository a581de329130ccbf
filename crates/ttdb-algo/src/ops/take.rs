//! `take` (stage `T_take`, tag `injective`, axes `ax*`): slices of `data` along one axis
//! picked by an integer index tensor (ONNX `Gather`), and `gather_elements` (stage
//! `T_gather_elements`, ONNX `GatherElements`): each element picked along the axis by the
//! index at its own position. Glue kernels of a run model.
//!
//! A negative index counts from the end, as in ONNX; an index still outside the axis is
//! clipped to it (TOPI's `mode="clip"`), so a hostile index can never read outside `data`.
use super::util::{axes, check};
use crate::ir::{BuildError, DagBuilder, Expr, Tensor};

/// An index read from an index tensor, made an index into an axis of `n` (> 0) elements:
/// negative counts from the end, the rest clipped.
fn index_into_axis(i: Expr, n: i64) -> Expr {
    let counted = Expr::select(Expr::lt(i.clone(), Expr::int(0)), i.clone() + n, i);
    Expr::min(Expr::max(counted, Expr::int(0)), Expr::int(n - 1))
}

/// `out[a.., j.., b..] = data[a.., indices[j..], b..]` where `a` are the axes before `axis`.
pub fn take(
    b: &mut DagBuilder,
    data: &Tensor,
    indices: &Tensor,
    axis: usize,
) -> Result<Tensor, BuildError> {
    let rank = data.ndim();
    check(axis < rank, || {
        format!("take: axis {axis} out of range for {:?}", data.shape)
    })?;
    check(!indices.dtype.is_float(), || {
        format!("take: indices of type {} are not integers", indices.dtype)
    })?;
    let n = data.shape[axis];
    check(n > 0, || {
        format!("take from axis {axis} of {:?}, which is empty", data.shape)
    })?;
    let k = indices.ndim();
    let mut shape = data.shape[..axis].to_vec();
    shape.extend(&indices.shape);
    shape.extend(&data.shape[axis + 1..]);
    Ok(
        b.elementwise("T_take", "injective", axes("ax", &shape), |v| {
            let i = indices.at(v[axis..axis + k].to_vec());
            let counted = Expr::select(Expr::lt(i.clone(), Expr::int(0)), i.clone() + n, i);
            let clipped = Expr::min(Expr::max(counted, Expr::int(0)), Expr::int(n - 1));
            let mut index = v[..axis].to_vec();
            index.push(clipped);
            index.extend_from_slice(&v[axis + k..]);
            data.at(index)
        }),
    )
}

/// `out[p] = data[p with axis replaced by indices[p]]`; `indices` has the output's shape,
/// at most `data`'s along every other axis.
pub fn gather_elements(
    b: &mut DagBuilder,
    data: &Tensor,
    indices: &Tensor,
    axis: usize,
) -> Result<Tensor, BuildError> {
    let rank = data.ndim();
    check(axis < rank && indices.ndim() == rank, || {
        format!(
            "gather_elements: indices {:?} along axis {axis} of {:?}",
            indices.shape, data.shape
        )
    })?;
    check(!indices.dtype.is_float(), || {
        format!(
            "gather_elements: indices of type {} are not integers",
            indices.dtype
        )
    })?;
    let fits = (0..rank).all(|a| a == axis || indices.shape[a] <= data.shape[a]);
    check(fits && data.shape[axis] > 0, || {
        format!(
            "gather_elements: indices {:?} do not fit {:?} off axis {axis}",
            indices.shape, data.shape
        )
    })?;
    let n = data.shape[axis];
    Ok(b.elementwise(
        "T_gather_elements",
        "injective",
        axes("ax", &indices.shape),
        |v| {
            let mut index = v.to_vec();
            index[axis] = index_into_axis(indices.at(v.to_vec()), n);
            data.at(index)
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::eval::{evaluate, TensorData};
    use crate::ir::DType;

    fn run(data: &TensorData, idx: &TensorData, axis: usize) -> TensorData {
        let mut b = DagBuilder::new();
        let d = b.placeholder("p0", &data.shape, DType::F32);
        let i = b.placeholder("p1", &idx.shape, DType::I64);
        let out = take(&mut b, &d, &i, axis).unwrap();
        let dag = b.finish(&[&out]);
        let names: Vec<String> = dag
            .placeholders()
            .iter()
            .map(|&t| dag.stage(t).name.clone())
            .collect();
        let ins: Vec<TensorData> = names
            .iter()
            .map(|n| if n == "p0" { data.clone() } else { idx.clone() })
            .collect();
        evaluate(&dag, &ins).unwrap().remove(0)
    }

    #[test]
    fn picks_rows_and_columns_counting_negative_indices_from_the_end() {
        // data = [[0, 1, 2], [3, 4, 5]]
        let data = TensorData::new(&[2, 3], (0..6).map(f64::from).collect());
        let cols = TensorData::new(&[2, 2], vec![2.0, 0.0, -1.0, 1.0]);
        let y = run(&data, &cols, 1);
        assert_eq!(y.shape, vec![2, 2, 2]);
        assert_eq!(y.data, [2., 0., 2., 1., 5., 3., 5., 4.]);
        // a scalar index drops the axis
        let row = TensorData::new(&[], vec![1.0]);
        let y = run(&data, &row, 0);
        assert_eq!(y.shape, vec![3]);
        assert_eq!(y.data, [3., 4., 5.]);
        // out of range: clipped, never read outside
        let wild = TensorData::new(&[2], vec![7.0, -9.0]);
        assert_eq!(run(&data, &wild, 0).data, [3., 4., 5., 0., 1., 2.]);
    }

    #[test]
    fn gather_elements_picks_along_the_axis_at_each_position() {
        // data = [[0, 1, 2], [3, 4, 5]], indices [[2, -1], [0, 1]] along axis 1
        let mut b = DagBuilder::new();
        let d = b.placeholder("p0", &[2, 3], DType::F32);
        let i = b.placeholder("p1", &[2, 2], DType::I64);
        let out = gather_elements(&mut b, &d, &i, 1).unwrap();
        let dag = b.finish(&[&out]);
        let data = TensorData::new(&[2, 3], (0..6).map(f64::from).collect());
        let idx = TensorData::new(&[2, 2], vec![2.0, -1.0, 0.0, 1.0]);
        let ins: Vec<TensorData> = dag
            .placeholders()
            .iter()
            .map(|&t| match dag.stage(t).name.as_str() {
                "p0" => data.clone(),
                _ => idx.clone(),
            })
            .collect();
        let y = evaluate(&dag, &ins).unwrap().remove(0);
        assert_eq!(y.data, [2., 2., 3., 4.]);
        let mut b = DagBuilder::new();
        let d = b.placeholder("p0", &[2, 3], DType::F32);
        let wide = b.placeholder("p2", &[3, 2], DType::I64);
        assert!(gather_elements(&mut b, &d, &wide, 1).is_err());
    }

    #[test]
    fn float_indices_and_bad_axes_are_refused() {
        let mut b = DagBuilder::new();
        let d = b.placeholder("p0", &[2, 3], DType::F32);
        let f = b.placeholder("p1", &[2], DType::F32);
        let i = b.placeholder("p2", &[2], DType::I64);
        assert!(take(&mut b, &d, &f, 0).is_err());
        assert!(take(&mut b, &d, &i, 2).is_err());
        let empty = b.placeholder("p3", &[0, 3], DType::F32);
        assert!(take(&mut b, &empty, &i, 0).is_err());
    }
}
