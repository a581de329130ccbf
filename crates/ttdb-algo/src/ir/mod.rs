//! ttdb's tensor IR: placeholders and compute stages (TVM TE's model), a compute DAG in
//! TVM's schedule order, PrintDAG text + md5 per TVM era, FLOP count, interval bounds and a
//! naive reference evaluator.
//!
//! * [`expr`]: scalar expressions with TVM's constant folding; [`visit`]: walkers/mappers.
//! * [`dag`]: stages, axes, bodies, [`dag::DagBuilder`] (post-order DFS stage order),
//!   [`dag::Dag::initial_stages`] (the initial Ansor state).
//! * [`printdag`]: `ComputeDAG::PrintDAG(simple_mode=true)` and its md5.
//! * [`flops`]: `ComputeDAG.flop_ct`; [`bounds`]: interval arithmetic; [`eval`]: reference.
pub mod bounds;
pub mod dag;
pub mod dtype;
pub mod eval;
pub mod expr;
pub mod flops;
pub mod printdag;
pub mod visit;

pub use dag::{
    clean_name, Body, BuildError, Combiner, ComputeAttrs, ComputeOp, Dag, DagBuilder, InitialIter,
    InitialStage, IterKind, IterVar, Operation, Stage, Tensor,
};
pub use dtype::DType;
pub use expr::{BinOp, Expr, Intrinsic};
pub use printdag::{dag_hash, print_dag};

/// Index of a stage in a [`Dag`] (its position in TVM's stage list, which is what Ansor
/// records address). Inside a [`DagBuilder`] it is provisional until `finish`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct TensorId(pub usize);

/// A float as JSON carries it: a number when finite, else `"NaN"`, `"inf"` or `"-inf"` (JSON
/// has no such numbers; a DAG crosses to a measuring worker as JSON).
pub mod serde_float {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
        match *x {
            x if x.is_finite() => s.serialize_f64(x),
            x if x.is_nan() => s.serialize_str("NaN"),
            x if x > 0.0 => s.serialize_str("inf"),
            _ => s.serialize_str("-inf"),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Number(f64),
            Word(String),
        }
        match Repr::deserialize(d)? {
            Repr::Number(x) => Ok(x),
            Repr::Word(w) => match w.as_str() {
                "NaN" => Ok(f64::NAN),
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                other => Err(serde::de::Error::custom(format!("not a float: {other}"))),
            },
        }
    }
}
