//! Comparisons, logic and casts (ONNX `Equal`, `Less`, `Greater`, `LessOrEqual`,
//! `GreaterOrEqual`, `And`, `Or`, `Not`, `Cast`), broadcast like the arithmetic ops.
//! ttdb runs ONNX's bool tensors as int64 0 / 1 (a kernel's buffers are never `bool`), so
//! every op here that gives a truth value gives that, and reads any non-zero as true.
use super::broadcast::broadcast_map;
use super::util::axes;
use crate::ir::{BinOp, BuildError, DType, DagBuilder, Expr, Tensor};

/// A truth value as ttdb stores it.
pub const TRUTH: DType = DType::I64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logical {
    And,
    Or,
}

fn is_true(x: Expr) -> Expr {
    let zero = Expr::constant(0.0, x.dtype());
    Expr::binary(BinOp::Ne, x, zero)
}

/// `x op y` as 0 / 1.
pub fn compare(
    b: &mut DagBuilder,
    op: Comparison,
    x: &Tensor,
    y: &Tensor,
) -> Result<Tensor, BuildError> {
    let (name, bin) = match op {
        Comparison::Equal => ("T_equal", BinOp::Eq),
        Comparison::Less => ("T_less", BinOp::Lt),
        Comparison::LessOrEqual => ("T_less_equal", BinOp::Le),
        Comparison::Greater => ("T_greater", BinOp::Gt),
        Comparison::GreaterOrEqual => ("T_greater_equal", BinOp::Ge),
    };
    broadcast_map(b, name, &[x, y], |v| {
        let [l, r]: [Expr; 2] = v.try_into().expect("two operands");
        Expr::binary(bin, l, r).cast(TRUTH)
    })
}

/// `x and y` / `x or y` as 0 / 1.
pub fn logical(
    b: &mut DagBuilder,
    op: Logical,
    x: &Tensor,
    y: &Tensor,
) -> Result<Tensor, BuildError> {
    let (name, bin) = match op {
        Logical::And => ("T_logical_and", BinOp::And),
        Logical::Or => ("T_logical_or", BinOp::Or),
    };
    broadcast_map(b, name, &[x, y], |v| {
        let [l, r]: [Expr; 2] = v.try_into().expect("two operands");
        Expr::binary(bin, is_true(l), is_true(r)).cast(TRUTH)
    })
}

/// `not x` as 0 / 1.
pub fn logical_not(b: &mut DagBuilder, x: &Tensor) -> Tensor {
    b.elementwise("T_logical_not", "elemwise", axes("ax", &x.shape), |v| {
        let zero = Expr::constant(0.0, x.dtype);
        Expr::eq(x.at(v.to_vec()), zero).cast(TRUTH)
    })
}

/// What a cast converts to, in ttdb's run types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CastTo {
    Float32,
    /// Any integer type: int64, truncating floats toward zero.
    Int64,
    /// bool: 1 for any non-zero value, else 0.
    Bool,
}

pub fn cast(b: &mut DagBuilder, x: &Tensor, to: CastTo) -> Tensor {
    b.elementwise("T_cast", "elemwise", axes("ax", &x.shape), |v| {
        let value = x.at(v.to_vec());
        match to {
            CastTo::Float32 => value.cast(DType::F32),
            CastTo::Int64 => value.cast(DType::I64),
            CastTo::Bool => is_true(value).cast(TRUTH),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::eval::{evaluate, TensorData};

    fn run(build: impl FnOnce(&mut DagBuilder, &Tensor, &Tensor) -> Tensor) -> Vec<f64> {
        let mut b = DagBuilder::new();
        let x = b.placeholder("p0", &[4], DType::F32);
        let y = b.placeholder("p1", &[], DType::F32);
        let out = build(&mut b, &x, &y);
        let dag = b.finish(&[&out]);
        let names: Vec<String> = dag
            .placeholders()
            .iter()
            .map(|&t| dag.stage(t).name.clone())
            .collect();
        let ins: Vec<TensorData> = names
            .iter()
            .map(|n| match n.as_str() {
                "p0" => TensorData::new(&[4], vec![-1.5, 0.0, 2.0, 2.7]),
                _ => TensorData::new(&[], vec![2.0]),
            })
            .collect();
        let out = evaluate(&dag, &ins).unwrap().remove(0);
        out.data
    }

    #[test]
    fn truth_values_are_int64_zero_or_one() {
        let cmp = |op| run(|b, x, y| compare(b, op, x, y).unwrap());
        assert_eq!(cmp(Comparison::Equal), [0., 0., 1., 0.]);
        assert_eq!(cmp(Comparison::Less), [1., 1., 0., 0.]);
        assert_eq!(cmp(Comparison::LessOrEqual), [1., 1., 1., 0.]);
        assert_eq!(cmp(Comparison::Greater), [0., 0., 0., 1.]);
        assert_eq!(cmp(Comparison::GreaterOrEqual), [0., 0., 1., 1.]);
        let and = run(|b, x, y| logical(b, Logical::And, x, y).unwrap());
        assert_eq!(and, [1., 0., 1., 1.]);
        assert_eq!(run(|b, x, _| logical_not(b, x)), [0., 1., 0., 0.]);
        assert_eq!(run(|b, x, _| cast(b, x, CastTo::Int64)), [-1., 0., 2., 2.]);
        assert_eq!(run(|b, x, _| cast(b, x, CastTo::Bool)), [1., 0., 1., 1.]);
        let mut b = DagBuilder::new();
        let x = b.placeholder("p0", &[2], DType::F32);
        assert_eq!(
            compare(&mut b, Comparison::Equal, &x, &x).unwrap().dtype,
            TRUTH
        );
        assert_eq!(cast(&mut b, &x, CastTo::Bool).dtype, TRUTH);
    }
}
