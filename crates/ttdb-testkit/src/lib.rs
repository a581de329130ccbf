//! Test support, kept out of the product's public API: the root package takes this crate as a
//! dev-dependency only, so `cargo build` of the `ttdb` binary never compiles it.
//!
//! - [`onnx_model`]: writes small ONNX models (the fixtures in `fixtures/models/`, and the
//!   models tests build on the fly);
//! - [`stage_inits_from_dump`]: reads the dump of an initial loop state back, for tests that
//!   start replay from the text the reference simulator prints.
pub mod onnx_model;

pub use ttdb_algo::schedule::stage_inits_from_dump;
