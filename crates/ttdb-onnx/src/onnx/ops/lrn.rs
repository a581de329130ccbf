//! `LRN`: local response normalization across channels, the input's shape; Relay's
//! `nn.lrn` (no fusion) with ONNX's `size`, `alpha`, `beta` and `bias`.
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{Node, TensorInfo};
use crate::onnx::relay::{Lowering, OpKind};
use crate::onnx::shape::Ctx;
use ttdb_algo::ops::lrn::LrnAttrs;

pub(super) struct Lrn;

impl OnnxOp for Lrn {
    fn names(&self) -> &'static [&'static str] {
        &["LRN"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        Ok(vec![ctx.same()?])
    }

    /// `size` is required; without one the builder refuses the window of 0 channels.
    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let attrs = LrnAttrs {
            size: node.int("size").unwrap_or(0),
            alpha: node.float("alpha").map_or(1e-4, f64::from),
            beta: node.float("beta").map_or(0.75, f64::from),
            bias: node.float("bias").map_or(1.0, f64::from),
        };
        l.emit_on_first(node, OpKind::Lrn(attrs))
    }
}
