//! Ops that mostly compute index tensors inside shape sub-graphs (`Range`, `CumSum`,
//! `GatherElements`, `Scatter*`, `Trilu`, `NonZero`): their shape rules live with the
//! constant folding that computes their values ([`consteval`]); when their inputs are
//! known at load time they fold away, else they stay opaque run-time ops (registry rows;
//! `CumSum` and `GatherElements` with their attributes, which ttdb run executes).
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{Node, TensorInfo};
use crate::onnx::relay::{Lowering, OpKind};
use crate::onnx::shape::{consteval, Ctx};

pub(super) struct CumSum;
pub(super) struct GatherElements;

impl OnnxOp for CumSum {
    fn names(&self) -> &'static [&'static str] {
        &["CumSum"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        cumsum(ctx)
    }

    /// With its axis known; a run-time axis leaves an opaque op ttdb cannot run.
    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let ins = l.input_types(node);
        let ctx = Ctx {
            node,
            ins: &ins,
            opset: l.g.opset,
        };
        let kind = match consteval::cumsum_axis(&ctx)? {
            Some(axis) => OpKind::CumSum {
                axis,
                exclusive: node.int("exclusive").unwrap_or(0) != 0,
                reverse: node.int("reverse").unwrap_or(0) != 0,
            },
            None => OpKind::Opaque("cumsum".into()),
        };
        l.emit_with_runtime_inputs(node, kind)
    }
}

impl OnnxOp for GatherElements {
    fn names(&self) -> &'static [&'static str] {
        &["GatherElements"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        gather_elements(ctx)
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        super::gather::lower_indexed(l, node, |axis| OpKind::GatherElements { axis })
    }
}

pub(super) fn range(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    Ok(vec![consteval::range(ctx)?])
}

pub(super) fn cumsum(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    Ok(vec![consteval::cumsum_shape(ctx)?])
}

pub(super) fn gather_elements(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    Ok(vec![consteval::gather_elements_shape(ctx)?])
}

pub(super) fn nonzero(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    Ok(vec![consteval::nonzero(ctx)?])
}
