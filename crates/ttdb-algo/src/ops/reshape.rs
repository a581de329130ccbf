//! `reshape` (TOPI `reshape`, stage `T_reshape`; `batch_flatten` is the 2-D case): the same
//! elements in row-major order under a new shape. A glue kernel of a run model.
use super::util::{axes, check, vars};
use crate::ir::{BuildError, DagBuilder, Expr, Tensor};

pub fn reshape(b: &mut DagBuilder, data: &Tensor, shape: &[i64]) -> Result<Tensor, BuildError> {
    let n_in: i64 = data.shape.iter().product();
    let n_out: i64 = shape.iter().product();
    check(n_in == n_out, || {
        format!(
            "cannot reshape {:?} ({n_in} elements) to {shape:?}",
            data.shape
        )
    })?;
    let ax = axes("ax", shape);
    let v = vars(&ax);
    // the flat row-major position of the output element, then its input coordinates
    let mut flat = Expr::int(0);
    for (var, &d) in v.iter().zip(shape) {
        flat = flat * d + var.clone();
    }
    let mut index = Vec::with_capacity(data.shape.len());
    let mut stride = n_in;
    for &d in &data.shape {
        stride /= d.max(1);
        index.push(Expr::floormod(Expr::floordiv(flat.clone(), stride), d));
    }
    Ok(b.elementwise("T_reshape", "injective", ax, |_| data.at(index)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::eval::{evaluate, TensorData};
    use crate::ir::DType;

    #[test]
    fn elements_keep_their_row_major_order() {
        let x = TensorData::new(&[2, 3, 2], (0..12).map(f64::from).collect());
        for shape in [vec![12], vec![3, 4], vec![1, 2, 6, 1]] {
            let mut b = DagBuilder::new();
            let p = b.placeholder("p0", &x.shape, DType::Float(32));
            let out = reshape(&mut b, &p, &shape).unwrap();
            let dag = b.finish(&[&out]);
            let y = evaluate(&dag, std::slice::from_ref(&x)).unwrap().remove(0);
            assert_eq!(y.shape, shape);
            assert_eq!(y.data, x.data);
        }
        let mut b = DagBuilder::new();
        let p = b.placeholder("p0", &[2, 3], DType::Float(32));
        assert!(reshape(&mut b, &p, &[5]).is_err());
    }
}
