//! `Squeeze` and `Unsqueeze`: dims of 1 removed or inserted (axes an attribute before
//! opset 13, an input since), values kept; Relay's injective `squeeze` / `expand_dims`.
use super::{Relay, Simple};
use crate::onnx::error::Result;
use crate::onnx::graph::TensorInfo;
use crate::onnx::shape::Ctx;

pub(super) const SQUEEZE: Simple =
    Simple::new(&["Squeeze"], infer_squeeze, Relay::Injective("squeeze"));
pub(super) const UNSQUEEZE: Simple = Simple::new(
    &["Unsqueeze"],
    infer_unsqueeze,
    Relay::Injective("expand_dims"),
);

/// Without axes: every dim of 1.
fn infer_squeeze(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    let axes = if ctx.opset < 13 {
        ctx.node.ints("axes").map(<[i64]>::to_vec)
    } else if ctx.opt(1).is_some() {
        Some(ctx.ints(1, "the axes")?)
    } else {
        None
    };
    let r = x.shape.len();
    let drop: Vec<usize> = match axes {
        Some(a) => a
            .iter()
            .map(|&a| ctx.axis(a, r))
            .collect::<Result<Vec<_>>>()?,
        None => (0..r).filter(|&i| x.shape[i] == 1).collect(),
    };
    if let Some(&i) = drop.iter().find(|&&i| x.shape[i] != 1) {
        return ctx.err(format!("cannot squeeze axis {i} of {:?}", x.shape));
    }
    let shape = (0..r)
        .filter(|i| !drop.contains(i))
        .map(|i| x.shape[i])
        .collect();
    Ok(vec![ctx.out(shape, x.dtype, x.data.clone())?])
}

fn infer_unsqueeze(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    let axes = if ctx.opset < 13 {
        ctx.node
            .ints("axes")
            .map(<[i64]>::to_vec)
            .unwrap_or_default()
    } else {
        ctx.ints(1, "the axes")?
    };
    let r = x.shape.len() + axes.len();
    let mut norm = axes
        .iter()
        .map(|&a| ctx.axis(a, r))
        .collect::<Result<Vec<_>>>()?;
    norm.sort_unstable();
    norm.dedup();
    if norm.len() != axes.len() {
        return ctx.err(format!("repeated axes {axes:?}"));
    }
    let mut shape = x.shape.clone();
    for a in norm {
        shape.insert(a, 1);
    }
    Ok(vec![ctx.out(shape, x.dtype, x.data.clone())?])
}
