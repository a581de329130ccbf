//! FLOP count of a DAG, counted the way `ComputeDAG.flop_ct` does (`FlopEstimator`,
//! `src/auto_scheduler/compute_dag.cc`), so GFLOP/s figures compare with TVM's:
//! * per compute stage: (product of spatial extents) x (ops per element), or the stage's
//!   `FLOP` attribute when present;
//! * a reduction counts (product of reduce extents) x (combiner ops + source ops), so a
//!   multiply-accumulate is 2;
//! * every arithmetic / comparison / logical node counts 1 unless *both* operands have a
//!   type code different from the stage's output type (index arithmetic is free); loads,
//!   immediates and variables are free, a cast counts its operand, a select counts its
//!   condition plus the larger branch, a call the sum of its arguments (the call itself is
//!   free: `exp` counts 0);
//! * a non-constant extent makes the whole estimate fail (TVM returns -1).
use super::dag::{Body, Dag, Operation};
use super::dtype::DType;
use super::expr::Expr;

impl Dag {
    /// TVM's `flop_ct`; None where TVM reports -1 (a non-constant spatial or reduce extent,
    /// e.g. adaptive pooling).
    pub fn flop_count(&self) -> Option<f64> {
        let mut total = 0.0;
        for stage in &self.stages {
            let Operation::Compute(c) = &stage.op else {
                continue;
            };
            if let Some(f) = c.attrs.flop {
                total += f as f64;
                continue;
            }
            let mut elements = 1.0;
            for a in &c.axes {
                elements *= a.const_extent()? as f64;
            }
            let code = stage.dtype.code();
            let per_element = match &c.body {
                Body::Expr(e) => expr_flops(e, code),
                Body::Reduce { source, .. } => {
                    let mut iters = 1.0;
                    for r in &c.reduce_axes {
                        iters *= r.const_extent()? as f64;
                    }
                    // The combiner (`x + y`, `max(x, y)`) is one op on two values of the
                    // output type.
                    iters * (1.0 + expr_flops(source, code))
                }
            };
            total += elements * per_element;
        }
        Some(total)
    }

    /// `flop_ct` exactly as TVM stores it (-1 on failure).
    pub fn flop_ct(&self) -> f64 {
        self.flop_count().unwrap_or(-1.0)
    }
}

fn expr_flops(e: &Expr, code: u8) -> f64 {
    match e {
        Expr::IntImm { .. } | Expr::FloatImm { .. } | Expr::Var(_) | Expr::Load { .. } => 0.0,
        Expr::Cast { value, .. } => expr_flops(value, code),
        Expr::Select {
            cond,
            then,
            otherwise,
        } => expr_flops(cond, code) + expr_flops(then, code).max(expr_flops(otherwise, code)),
        Expr::Binary { a, b, .. } => {
            let base = if a.dtype().code() != code && b.dtype().code() != code {
                0.0
            } else {
                1.0
            };
            base + expr_flops(a, code) + expr_flops(b, code)
        }
        Expr::Not(a) => {
            let base = if DType::Bool.code() == code { 1.0 } else { 0.0 };
            base + expr_flops(a, code)
        }
        Expr::Call { args, .. } => args.iter().map(|a| expr_flops(a, code)).sum(),
    }
}

#[cfg(test)]
mod tests {
    use crate::ir::dag::{Combiner, ComputeAttrs, DagBuilder, IterVar};
    use crate::ir::dtype::DType;
    use crate::ir::expr::Expr;

    #[test]
    fn matmul_counts_two_per_multiply_add_and_index_math_is_free() {
        let mut b = DagBuilder::new();
        let x = b.placeholder("x", &[4, 8], DType::F32);
        let w = b.placeholder("w", &[3, 8], DType::F32);
        let mm = b.reduce(
            "mm",
            "",
            vec![IterVar::new("i", 4), IterVar::new("j", 3)],
            vec![IterVar::new("k", 8)],
            Combiner::Sum,
            ComputeAttrs::default(),
            // the index expression (k*1 + 0) would be free anyway
            |v, r| {
                x.at(vec![v[0].clone(), r[0].clone() + 0]) * w.at(vec![v[1].clone(), r[0].clone()])
            },
        );
        let relu = b.elementwise(
            "relu",
            "",
            vec![IterVar::new("i", 4), IterVar::new("j", 3)],
            |v| Expr::max(mm.at(vec![v[0].clone(), v[1].clone()]), Expr::f32(0.0)),
        );
        let dag = b.finish(&[&relu]);
        assert_eq!(dag.flop_count(), Some(4.0 * 3.0 * 8.0 * 2.0 + 12.0));
    }

    #[test]
    fn non_constant_reduce_extent_fails_like_tvm() {
        let mut b = DagBuilder::new();
        let x = b.placeholder("x", &[4], DType::F32);
        let s = b.reduce(
            "s",
            "",
            vec![IterVar::new("i", 2)],
            vec![IterVar::with_extent("r", Expr::var("i") + 1)],
            Combiner::Sum,
            ComputeAttrs::default(),
            |_, r| x.at(vec![r[0].clone()]),
        );
        let dag = b.finish(&[&s]);
        assert_eq!(dag.flop_count(), None);
        assert_eq!(dag.flop_ct(), -1.0);
    }
}
