//! `Expand`: the input broadcast to the (constant) target shape; Relay's injective
//! `broadcast_to`.
use super::{Relay, Simple};
use crate::onnx::error::Result;
use crate::onnx::graph::TensorInfo;
use crate::onnx::shape::{broadcast, Ctx};

pub(super) const EXPAND: Simple = Simple::new(&["Expand"], infer, Relay::Injective("broadcast_to"));

fn infer(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    let target = ctx.ints(1, "the shape")?;
    match broadcast(&x.shape, &target) {
        Some(s) => Ok(vec![ctx.out(s, x.dtype, None)?]),
        None => ctx.err(format!("{:?} does not expand to {target:?}", x.shape)),
    }
}
