//! ttdb: a database of tuned tensor-kernel schedules, with transfer-tuning.
//!
//! The data flows one way; each module uses only the modules listed before it
//! (`tests/layering.rs` checks this on the source):
//!
//! 1. `ansor` (record format), `signature` (normalized workload identity), `atomic_file`
//!    (outputs written whole or not at all), then `host` (what a measurement ran on): leaves;
//! 2. `ir` (tensor expressions, compute DAGs, PrintDAG md5) and `ops` (TOPI-faithful op
//!    builders): the algorithm;
//! 3. `schedule` (state-level replay of the steps, re-targeting): the schedule;
//! 4. `recognize` (workload key -> DAG + signature), `store` (SQLite: import, queries,
//!    measurements; all SQL lives here);
//! 5. `loopnest` (loop-nest IR, bounds proof, checked interpreter, the one output check),
//!    `lower` (state -> loop nest), `codegen` (LLVM ORC JIT), `measure` (runner, peak,
//!    host detection), `evaluate` (build a schedule in parallel, run it one at a time:
//!    verify, time);
//! 6. `onnx` (models -> Relay-like kernels), `matcher` (exact / class / none);
//! 7. `search` (sketches, evolution, cost model, Droplet), `tune` (orchestration: apply,
//!    verify, refine, tune);
//! 8. `bundle` (sharing schedules: format, signatures, export, import, merge; uses only
//!    `store`, `ansor` and the leaves);
//! 9. `cli` (parses, calls one library function, renders).

pub mod ansor;
pub mod atomic_file;
pub mod bundle;
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
pub mod search;
pub mod signature;
pub mod store;
pub mod tune;

/// ttdb's own version, recorded in provenance and host fingerprints.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
