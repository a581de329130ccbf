//! `Flatten`: `[prod(dims before axis), prod(dims from axis)]`; Relay's `batch_flatten`
//! for axis 1, else a `reshape`.
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{numel, Node, TensorInfo};
use crate::onnx::relay::{Lowering, OpKind};
use crate::onnx::shape::{checked, Ctx};

pub(super) struct Flatten;

impl OnnxOp for Flatten {
    fn names(&self) -> &'static [&'static str] {
        &["Flatten"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let r = x.shape.len();
        let axis = ctx.node.int("axis").unwrap_or(1);
        let a = if axis == r as i64 {
            r
        } else {
            ctx.axis(axis, r)?
        };
        let outer = checked(ctx, numel(&x.shape[..a]))?;
        let inner = checked(ctx, numel(&x.shape[a..]))?;
        Ok(vec![ctx.out(
            vec![outer, inner],
            x.dtype,
            x.data.clone(),
        )?])
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let name = if node.int("axis").unwrap_or(1) == 1 {
            "batch_flatten"
        } else {
            "reshape"
        };
        l.emit_on_first(node, OpKind::Injective(name.into()))
    }
}
