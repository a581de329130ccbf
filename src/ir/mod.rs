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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub usize);
