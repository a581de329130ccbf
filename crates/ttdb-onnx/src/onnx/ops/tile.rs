//! `Tile`: each dim times its (constant) repeat; Relay's injective `tile`.
use super::{Relay, Simple};
use crate::onnx::error::Result;
use crate::onnx::graph::TensorInfo;
use crate::onnx::shape::{checked, Ctx};

pub(super) const TILE: Simple = Simple::new(&["Tile"], infer, Relay::Injective("tile"));

fn infer(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    let reps = ctx.ints(1, "the repeats")?;
    if reps.len() != x.shape.len() || reps.iter().any(|&r| r < 0) {
        return ctx.err(format!("repeats {reps:?} for shape {:?}", x.shape));
    }
    let shape = x
        .shape
        .iter()
        .zip(&reps)
        .map(|(&d, &r)| checked(ctx, d.checked_mul(r)))
        .collect::<Result<Vec<_>>>()?;
    Ok(vec![ctx.out(shape, x.dtype, None)?])
}
