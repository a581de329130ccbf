//! The op library: one builder per TOPI op family, producing the exact stage list (names,
//! axes, reduce axes and their order, bodies) TVM generates in each [`Era`], plus the
//! registry ([`registry::WorkloadSpec`]: anchor op + fused epilogue) used by recognition,
//! the tutorial workloads registered by name, and hand-written reference loops.
//!
//! Each family file also owns its recognition candidates: the anchors (with the attributes
//! [`windows`] solves) whose inputs and output have a key's shapes, which
//! `recognize::candidates` lists in the order it tries them. Multi-op activations are rows
//! of [`activation`].
pub mod activation;
pub mod broadcast;
pub mod concat;
pub mod conv2d;
pub mod conv2d_nchwc;
pub mod cumsum;
pub mod dense;
pub mod depthwise;
pub mod epilogue;
pub mod epilogue_op;
pub mod era;
pub mod group_conv2d_nchw;
pub mod layout_transform;
pub mod logic;
pub mod lrn;
pub mod pad;
pub mod pool;
pub mod reduction;
#[cfg(test)]
mod reference;
pub mod registered;
pub mod registry;
pub mod reshape;
pub mod slice;
pub mod take;
pub mod transpose;
pub mod util;
pub mod windows;
pub mod winograd;

pub use era::Era;
pub use pool::{PoolAttrs, PoolKind, PoolLayout};
pub use registry::{Anchor, EpilogueOp, ScalarOp, WorkloadSpec};
pub use util::Window2d;
