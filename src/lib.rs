//! ttdb: a database of tuned tensor-kernel schedules, with transfer-tuning.
//!
//! The data flows one way through these modules (each depends only on the ones above it):
//! `ansor` (record format) -> `store` (SQLite) -> `signature` (normalized workload identity)
//! -> `ir`/`ops`/`recognize` (compute DAGs) -> `schedule` (step replay) -> `lower`
//! (loop nests, bounds) -> `loopnest` (IR + reference interpreter) -> `codegen` (LLVM)
//! -> `measure` -> `onnx`/`matcher` -> `cli`.

pub mod ansor;
pub mod cli;
pub mod codegen;
pub mod evaluate;
pub mod host;
pub mod ir;
pub mod loopnest;
pub mod lower;
pub mod matcher;
pub mod measure;
pub mod onnx;
pub mod ops;
pub mod recognize;
pub mod schedule;
pub mod signature;
pub mod store;
pub mod tune;

/// ttdb's own version, recorded in provenance and host fingerprints.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
