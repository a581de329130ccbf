//! `Gather`: `x.shape[..axis] ++ indices.shape ++ x.shape[axis + 1..]`, constant indices
//! checked; Relay's injective `take` along `axis`, reading the indices as its second input
//! even when they are constant (they are data to `take`, not an attribute).
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{Data, Node, TensorInfo};
use crate::onnx::relay::{Lowering, OpKind};
use crate::onnx::shape::Ctx;

pub(super) struct Gather;

impl OnnxOp for Gather {
    fn names(&self) -> &'static [&'static str] {
        &["Gather"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        infer(ctx)
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        lower_indexed(l, node, |axis| OpKind::Take { axis })
    }
}

/// Lowers an op of inputs (data, indices) along its `axis` attribute (negative counts from
/// the end) to `kind(axis)`, the indices an input even when constant: they are data to the
/// op (`Gather`, `GatherElements`). Shape inference checked the axis.
pub(super) fn lower_indexed(
    l: &mut Lowering,
    node: &Node,
    kind: impl FnOnce(usize) -> OpKind,
) -> Result<()> {
    let x = l.input(node, 0)?;
    let indices = l.input(node, 1)?;
    let rank = l.og.values[x].shape.len() as i64;
    let a = node.int("axis").unwrap_or(0);
    let axis = if a < 0 { a + rank } else { a } as usize;
    l.emit(node, kind(axis), vec![x, indices])?;
    Ok(())
}

fn infer(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let (x, idx) = (ctx.input(0)?, ctx.input(1)?);
    let r = x.shape.len();
    if r == 0 {
        return ctx.err("Gather on a scalar");
    }
    let axis = ctx.axis(ctx.node.int("axis").unwrap_or(0), r)?;
    let mut shape = x.shape[..axis].to_vec();
    shape.extend(&idx.shape);
    shape.extend(&x.shape[axis + 1..]);
    let n = x.shape[axis];
    if let Some(ix) = idx.data.as_ref().and_then(Data::as_ints) {
        if let Some(bad) = ix.iter().find(|&&i| !(-n..n).contains(&i)) {
            return ctx.err(format!("index {bad} out of range for a dim of {n}"));
        }
    }
    Ok(vec![ctx.out(shape, x.dtype, None)?])
}
