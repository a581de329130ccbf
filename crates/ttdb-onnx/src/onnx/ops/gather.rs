//! `Gather`: `x.shape[..axis] ++ indices.shape ++ x.shape[axis + 1..]`, constant indices
//! checked; Relay's injective `take`.
use super::{Relay, Simple};
use crate::onnx::error::Result;
use crate::onnx::graph::{Data, TensorInfo};
use crate::onnx::shape::Ctx;

pub(super) const GATHER: Simple = Simple::new(&["Gather"], infer, Relay::Injective("take"));

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
