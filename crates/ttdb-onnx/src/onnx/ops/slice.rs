//! `Slice`: its shape rule is shared with the folding of its values
//! ([`consteval::slice_plan`]); Relay's injective `strided_slice` with the normalized first
//! index and step of every axis.
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{Node, TensorInfo};
use crate::onnx::relay::{Lowering, OpKind};
use crate::onnx::shape::{consteval, Ctx};

pub(super) struct Slice;

impl OnnxOp for Slice {
    fn names(&self) -> &'static [&'static str] {
        &["Slice"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        Ok(vec![consteval::slice(ctx)?])
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let ins = l.input_types(node);
        let ctx = Ctx {
            node,
            ins: &ins,
            opset: l.g.opset,
        };
        let plan = consteval::slice_plan(&ctx)?;
        l.emit_with_runtime_inputs(
            node,
            OpKind::StridedSlice {
                begin: plan.first,
                strides: plan.stride,
            },
        )
    }
}
