//! `Cast`: the input's shape in type `to`; an element-wise Relay `cast`.
use super::{OnnxOp, Relay};
use crate::onnx::error::Result;
use crate::onnx::graph::{dtype, Node, TensorInfo};
use crate::onnx::relay::Lowering;
use crate::onnx::shape::Ctx;

pub(super) struct Cast;

impl OnnxOp for Cast {
    fn names(&self) -> &'static [&'static str] {
        &["Cast"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let to = ctx.node.int("to").unwrap_or(dtype::FLOAT as i64) as i32;
        Ok(vec![ctx.out(x.shape.clone(), to, None)?])
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        Relay::Unary("cast").lower(l, node)
    }
}
