//! What a model needs at run time, kept free of LLVM and of the compiler's crates so that a
//! built model (`ttdb build`) can carry it (docs/design/run.md):
//!
//! - [`arena`]: the static memory plan, one arena for every intermediate tensor, buffers
//!   reused by liveness.
pub mod arena;
