//! `Reshape`: the target shape (an attribute before opset 5, a constant input since) with
//! `0` copying the input's dim (unless `allowzero`) and one `-1` inferred; Relay's
//! injective `reshape`.
use super::{Relay, Simple};
use crate::onnx::error::Result;
use crate::onnx::graph::{numel, TensorInfo};
use crate::onnx::shape::{checked, Ctx};

pub(super) const RESHAPE: Simple = Simple::new(&["Reshape"], infer, Relay::Injective("reshape"));

fn infer(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    let target = if ctx.opset < 5 {
        ctx.node
            .ints("shape")
            .map(<[i64]>::to_vec)
            .unwrap_or_default()
    } else {
        ctx.ints(1, "the target shape")?
    };
    let allowzero = ctx.node.int("allowzero").unwrap_or(0) != 0;
    let shape = reshape(ctx, &x.shape, &target, allowzero)?;
    Ok(vec![ctx.out(shape, x.dtype, x.data.clone())?])
}

fn reshape(ctx: &Ctx, input: &[i64], target: &[i64], allowzero: bool) -> Result<Vec<i64>> {
    let mut shape = Vec::with_capacity(target.len());
    let mut infer = None;
    for (i, &d) in target.iter().enumerate() {
        match d {
            -1 if infer.is_none() => {
                infer = Some(i);
                shape.push(1);
            }
            0 if !allowzero => match input.get(i) {
                Some(&v) => shape.push(v),
                None => {
                    return ctx.err(format!(
                        "target {target:?}: dim {i} copies a dim the input {input:?} lacks"
                    ))
                }
            },
            d if d >= 0 => shape.push(d),
            _ => return ctx.err(format!("invalid target shape {target:?}")),
        }
    }
    let total = checked(ctx, numel(input))?;
    let known = checked(ctx, numel(&shape))?;
    if let Some(i) = infer {
        if known == 0 || total % known != 0 {
            return ctx.err(format!("cannot reshape {input:?} to {target:?}"));
        }
        shape[i] = total / known;
    } else if known != total {
        return ctx.err(format!(
            "cannot reshape {input:?} ({total} elements) to {target:?}"
        ));
    }
    Ok(shape)
}
