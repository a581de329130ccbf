//! Orchestration over the database and the evaluator: what `ttdb apply`, `ttdb verify` and
//! `ttdb refine` do, as library functions that take options structs (the CLI only parses
//! and renders).
//!
//! * [`apply`]: transfer-tuning a model (measure the default and the matched candidates of
//!   every kernel, keep the fastest verified one);
//! * [`refine`]: Droplet search on this machine for stored workloads (and, through
//!   [`refine::refine_schedules`], for the schedules `apply --droplet` chose);
//! * [`model`]: `ttdb tune MODEL.onnx`, the task scheduler over a model's kernels;
//! * [`search`]: `ttdb tune`, Ansor-style search seeded with the stored records, then
//!   optionally Droplet;
//! * [`export`]: the chosen schedule of each kernel of a model, as a log TVM reads;
//! * [`verify`]: re-measuring the best imported records on this machine;
//! * [`record`]: what the database keeps of an evaluation;
//! * [`trials`]: where a search's trials go as they are measured (Droplet's and the search's
//!   alike);
//! * [`progress`]: what the four long runs (apply, refine, tune, tune MODEL) tell their
//!   caller as they go.
pub mod apply;
pub mod export;
pub mod model;
pub mod progress;
pub mod record;
pub mod refine;
pub mod search;
pub mod trials;
pub mod verify;

pub use apply::{apply, ApplyOptions, ApplyReport};
