//! ttdb backend: loop nests, lowering, LLVM codegen, measuring and evaluating schedules.
//!
//! One stage of the layer order in `docs/architecture.md`.

pub mod codegen;
pub mod evaluate;
pub mod loopnest;
pub mod lower;
pub mod measure;
pub mod target;
