//! Orchestration over the database and the evaluator: what `ttdb apply`, `ttdb verify` and
//! `ttdb refine` do, as library functions that take options structs (the CLI only parses
//! and renders).
//!
//! * [`apply`]: transfer-tuning a model (measure the default and the matched candidates of
//!   every kernel, keep the fastest verified one);
//! * [`record`]: what the database keeps of an evaluation.
pub mod apply;
pub mod record;

pub use apply::{apply, ApplyOptions, ApplyReport};
