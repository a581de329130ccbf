//! ttdb algorithm and schedule: tensor-expression DAGs, the op library, Ansor state replay, workload recognition.
//!
//! One stage of the layer order in `docs/architecture.md`.

pub mod ir;
pub mod ops;
pub mod recognize;
pub mod schedule;
