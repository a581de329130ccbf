//! Loop-nest IR: the target of schedule lowering and the input of codegen.
//!
//! * [`ir`]: data types (`Buffer`, `Expr`, `Stmt`, `Kernel`) and builders;
//! * [`validate`]: scoping and type checking;
//! * [`printer`]: stable TIR-like text form;
//! * [`simplify`], [`affine`]: constant folding and linear forms;
//! * [`bounds`]: static proof that every access is in bounds;
//! * [`interp`]: checked reference interpreter;
//! * [`unroll`]: TIR `UnrollLoop` semantics; [`unswitch`]: full tiles without split guards; [`coverage`]: is a temporary overwritten before it is read;
//! * [`cost`]: static trip-count / memory guard; [`textbook`]: the plain GEMM loop nest;
//! * [`data`]: host buffers; [`verify`]: the one output check (and tolerance) of ttdb.
//!
//! # What lowering must produce
//! A [`Kernel`]: `params` in ABI order (inputs and outputs, roles set), `body` a [`Stmt`] tree:
//! * loops: `Stmt::For { var, min, extent, kind }`; loop variables are `I64` and unique while in
//!   scope; Ansor annotations map to `ForKind` (unroll → `Unrolled`, vectorize → `Vectorized`,
//!   parallel → `Parallel`, at most one parallel level);
//! * `PR auto_unroll_max_step$N` → `Stmt::Attr { attr: Attr::AutoUnroll { max_step: N,
//!   explicit: true }, body }` placed as the *body* of the pragma'd loop (as TE does);
//! * compute_at'ed / cache stages → `Stmt::Allocate` of a `Temporary` buffer with a constant
//!   shape around the consumer loop that reads it;
//! * non-divisible splits → `Stmt::IfThenElse` guards (optionally `Expr::likely(cond)`), or
//!   `Expr::Select` for padding-style reads; `&&` ordering never guards an access;
//! * indices stay multi-dimensional (one `I64` expression per buffer dimension).
//!
//! Then `codegen::compile` runs `unroll_loops`, `simplify_kernel`, `check_bounds` (refusing any
//! unproven access) and the cost guard before generating code; `interp::run` executes the same
//! kernel with run-time checks.

pub mod affine;
pub mod bounds;
pub mod cost;
pub mod coverage;
pub mod data;
pub mod interp;
pub mod ir;
pub mod printer;
pub mod simplify;
pub mod textbook;
pub mod unroll;
pub mod unswitch;
pub mod validate;
pub mod verify;

pub use bounds::{check_bounds, UnprovenAccess};
pub use data::BufferData;
pub use ir::*;
pub use printer::kernel_to_string;
pub use simplify::{simplify_expr, simplify_kernel, simplify_stmt};
pub use unroll::unroll_loops;
pub use validate::validate;

#[cfg(test)]
mod tests;
