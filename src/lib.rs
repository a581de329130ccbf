//! ttdb: a database of tuned tensor-kernel schedules, with transfer-tuning.
//!
//! The layers are crates under `crates/`, in the order `docs/architecture.md` gives (each
//! depends only on earlier ones, which Cargo enforces). This package is the `ttdb` binary and
//! its command line (`cli`: parses, calls one library function, renders); it re-exports the
//! layers' modules under their old paths (`ttdb::store`, `ttdb::search`, ...) for the tests,
//! benches and fuzz targets.

pub use ttdb_algo::{ir, ops, recognize, schedule};
pub use ttdb_backend::{codegen, evaluate, loopnest, lower, measure, target};
pub use ttdb_format::{ansor, atomic_file, host, npy, signature, version};
pub use ttdb_onnx::onnx;
pub use ttdb_store::{bundle, store};
pub use ttdb_tuning::{matcher, run, search, tune};

pub mod cli;
