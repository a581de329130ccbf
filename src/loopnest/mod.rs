//! Loop-nest IR: the target of schedule lowering and the input of codegen.
//!
//! * [`ir`]: data types (`Buffer`, `Expr`, `Stmt`, `Kernel`) and builders;
//! * [`validate`]: scoping and type checking;
//! * [`printer`]: stable TIR-like text form;
//! * [`simplify`], [`affine`]: constant folding and linear forms;
//! * [`bounds`]: static proof that every access is in bounds;
//! * [`interp`]: checked reference interpreter;
//! * [`unroll`]: TIR `UnrollLoop` semantics;
//! * [`cost`]: static trip-count / memory guard;
//! * [`data`]: host buffers.

pub mod affine;
pub mod bounds;
pub mod cost;
pub mod data;
pub mod interp;
pub mod ir;
pub mod printer;
pub mod simplify;
pub mod unroll;
pub mod validate;

pub use bounds::{check_bounds, UnprovenAccess};
pub use data::BufferData;
pub use ir::*;
pub use printer::kernel_to_string;
pub use simplify::{simplify_expr, simplify_kernel, simplify_stmt};
pub use unroll::unroll_loops;
pub use validate::validate;

#[cfg(test)]
mod tests;
