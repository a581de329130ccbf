//! `Resize` and `Upsample`: output sizes from the `sizes` input, else the input's dims times
//! the scales (an attribute, or a constant input); Relay's injective `resize2d`.
use super::{Relay, Simple};
use crate::onnx::error::Result;
use crate::onnx::graph::{Attr, TensorInfo};
use crate::onnx::shape::Ctx;

pub(super) const RESIZE: Simple =
    Simple::new(&["Resize", "Upsample"], infer, Relay::Injective("resize2d"));

fn infer(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    Ok(vec![infer_resize(ctx)?])
}

fn infer_resize(ctx: &Ctx) -> Result<TensorInfo> {
    let x = ctx.input(0)?;
    let r = x.shape.len();
    // Upsample: scales attr (opset 7-8) or input 1; Resize: roi, scales, sizes (opset >= 11)
    let (scales_idx, sizes_idx) = if ctx.node.op_type == "Upsample" {
        (1, usize::MAX)
    } else if ctx.opset >= 11 {
        (2, 3)
    } else {
        (1, usize::MAX)
    };
    if ctx.opt(sizes_idx).is_some_and(|t| t.shape != [0]) {
        let sizes = ctx.ints(sizes_idx, "the sizes")?;
        if sizes.len() != r {
            return ctx.err(format!("sizes {sizes:?} for rank {r}"));
        }
        return ctx.out(sizes, x.dtype, None);
    }
    let scales: Vec<f64> = match ctx.node.attrs.get("scales") {
        Some(Attr::Floats(v)) => v.iter().map(|&f| f as f64).collect(),
        _ => match ctx.opt(scales_idx).and_then(|t| t.data.clone()) {
            Some(d) => d.as_floats(),
            None => return ctx.unsupported("scales must be a constant known at load time"),
        },
    };
    if scales.len() != r
        || scales
            .iter()
            .any(|s| !s.is_finite() || *s <= 0.0 || *s > 1.0e6)
    {
        return ctx.err(format!("scales {scales:?} for rank {r}"));
    }
    let shape = x
        .shape
        .iter()
        .zip(&scales)
        .map(|(&d, &s)| (d as f64 * s).floor() as i64)
        .collect();
    ctx.out(shape, x.dtype, None)
}
