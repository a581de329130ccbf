//! `Shape` and `Size`: constants computed from the input's static shape (their consumers
//! are shape arithmetic, folded at load time); no Relay op.
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{dtype, Data, Node, TensorInfo};
use crate::onnx::relay::Lowering;
use crate::onnx::shape::{checked, Ctx};

pub(super) struct ShapeOf;
pub(super) struct Size;

impl OnnxOp for ShapeOf {
    fn names(&self) -> &'static [&'static str] {
        &["Shape"]
    }

    /// The dims `start..end` (clamped, negative from the end) as an int64 vector.
    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        let r = x.shape.len() as i64;
        let clamp = |v: i64| if v < 0 { (v + r).max(0) } else { v.min(r) };
        let start = clamp(ctx.node.int("start").unwrap_or(0)) as usize;
        let end = clamp(ctx.node.int("end").unwrap_or(r)) as usize;
        let dims = if start < end {
            x.shape[start..end].to_vec()
        } else {
            vec![]
        };
        Ok(vec![TensorInfo::constant(
            vec![dims.len() as i64],
            dtype::INT64,
            Some(Data::Ints(dims)),
        )])
    }

    fn lower(&self, _: &mut Lowering, _: &Node) -> Result<()> {
        Ok(())
    }
}

impl OnnxOp for Size {
    fn names(&self) -> &'static [&'static str] {
        &["Size"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        let n = checked(ctx, ctx.input(0)?.numel())?;
        Ok(vec![TensorInfo::constant(
            vec![],
            dtype::INT64,
            Some(Data::Ints(vec![n])),
        )])
    }

    fn lower(&self, _: &mut Lowering, _: &Node) -> Result<()> {
        Ok(())
    }
}
