//! `Pad`: each padded axis grows by its two pads (attributes before opset 11, inputs
//! since, `axes` from opset 18); Relay's injective `pad`.
use super::{Relay, Simple};
use crate::onnx::error::Result;
use crate::onnx::graph::TensorInfo;
use crate::onnx::shape::{checked, Ctx};

pub(super) const PAD: Simple = Simple::new(&["Pad"], infer, Relay::Injective("pad"));

fn infer(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    let pads = if ctx.opset < 11 {
        ctx.node
            .ints("pads")
            .or_else(|| ctx.node.ints("paddings"))
            .map(<[i64]>::to_vec)
            .unwrap_or_default()
    } else {
        ctx.ints(1, "the pads")?
    };
    let r = x.shape.len();
    let axes: Vec<usize> = if ctx.opset >= 18 && ctx.opt(3).is_some() {
        ctx.ints(3, "the axes")?
            .iter()
            .map(|&a| ctx.axis(a, r))
            .collect::<Result<_>>()?
    } else {
        (0..r).collect()
    };
    if pads.len() != 2 * axes.len() {
        return ctx.err(format!("{} pads for {} axes", pads.len(), axes.len()));
    }
    let mut shape = x.shape.clone();
    for (j, &a) in axes.iter().enumerate() {
        let v = checked(
            ctx,
            shape[a]
                .checked_add(pads[j])
                .and_then(|v| v.checked_add(pads[j + axes.len()])),
        )?;
        if v < 0 {
            return ctx.err(format!("negative padded dim on axis {a}"));
        }
        shape[a] = v;
    }
    Ok(vec![ctx.out(shape, x.dtype, None)?])
}
