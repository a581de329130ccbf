//! The shape rules of the ops whose rule is more than a line of [`super::infer_rule`]:
//! broadcasting binaries, MatMul, Reshape, Concat, Gather, Split and Resize.
use super::*;

pub(super) fn binary(ctx: &Ctx) -> Result<TensorInfo> {
    let op = ctx.node.op_type.as_str();
    let present: Vec<&TensorInfo> = ctx.ins.iter().flatten().collect();
    if present.is_empty() {
        return ctx.err("no inputs");
    }
    let mut shape = present[0].shape.clone();
    for t in &present[1..] {
        shape = match broadcast(&shape, &t.shape) {
            Some(s) => s,
            None => {
                return ctx.err(format!(
                    "shapes {:?} do not broadcast ({:?})",
                    t.shape,
                    present.iter().map(|t| &t.shape).collect::<Vec<_>>()
                ))
            }
        };
    }
    let compare = matches!(
        op,
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "And" | "Or" | "Xor"
    );
    let dt = if compare {
        dtype::BOOL
    } else if op == "Where" {
        present.get(1).map(|t| t.dtype).unwrap_or(dtype::FLOAT)
    } else {
        present[0].dtype
    };
    ctx.out(shape, dt, None)
}

pub(super) fn matmul(ctx: &Ctx) -> Result<TensorInfo> {
    let (a, b) = (ctx.input(0)?, ctx.input(1)?);
    if a.shape.is_empty() || b.shape.is_empty() {
        return ctx.err("MatMul of a scalar");
    }
    let mut sa = a.shape.clone();
    let mut sb = b.shape.clone();
    let (pa, pb) = (sa.len() == 1, sb.len() == 1);
    if pa {
        sa.insert(0, 1);
    }
    if pb {
        sb.push(1);
    }
    let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let (k2, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
    if k != k2 {
        return ctx.err(format!("inner dims differ: {:?} x {:?}", a.shape, b.shape));
    }
    let batch = match broadcast(&sa[..sa.len() - 2], &sb[..sb.len() - 2]) {
        Some(s) => s,
        None => {
            return ctx.err(format!(
                "batch dims of {:?} and {:?} do not broadcast",
                a.shape, b.shape
            ))
        }
    };
    let mut shape = batch;
    if !pa {
        shape.push(m);
    }
    if !pb {
        shape.push(n);
    }
    ctx.out(shape, a.dtype, None)
}

pub(super) fn reshape(
    ctx: &Ctx,
    input: &[i64],
    target: &[i64],
    allowzero: bool,
) -> Result<Vec<i64>> {
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

pub(super) fn concat(ctx: &Ctx) -> Result<TensorInfo> {
    let ins: Vec<&TensorInfo> = ctx.ins.iter().flatten().collect();
    let first = match ins.first() {
        Some(t) => *t,
        None => return ctx.err("no inputs"),
    };
    let r = first.shape.len();
    let axis = ctx.axis(ctx.node.int("axis").unwrap_or(0), r)?;
    let mut shape = first.shape.clone();
    shape[axis] = 0;
    for t in &ins {
        if t.shape.len() != r || (0..r).any(|i| i != axis && t.shape[i] != first.shape[i]) {
            return ctx.err(format!(
                "inputs {:?} differ off the concat axis {axis}",
                ins.iter().map(|t| &t.shape).collect::<Vec<_>>()
            ));
        }
        shape[axis] = checked(ctx, shape[axis].checked_add(t.shape[axis]))?;
    }
    ctx.out(shape, first.dtype, None)
}

pub(super) fn gather(ctx: &Ctx) -> Result<TensorInfo> {
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
    ctx.out(shape, x.dtype, None)
}

pub(super) fn split(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    let r = x.shape.len();
    let axis = ctx.axis(ctx.node.int("axis").unwrap_or(0), r)?;
    let n_out = ctx.node.outputs.len().max(1) as i64;
    let parts: Vec<i64> = if ctx.opset < 13 {
        ctx.node
            .ints("split")
            .map(<[i64]>::to_vec)
            .unwrap_or_default()
    } else if ctx.opt(1).is_some() {
        ctx.ints(1, "the split sizes")?
    } else {
        vec![]
    };
    let d = x.shape[axis];
    let parts = if parts.is_empty() {
        let n = ctx.node.int("num_outputs").unwrap_or(n_out).max(1);
        let chunk = (d + n - 1) / n;
        (0..n).map(|i| (d - i * chunk).clamp(0, chunk)).collect()
    } else {
        parts
    };
    if parts.iter().any(|&p| p < 0)
        || parts.iter().try_fold(0i64, |a, &p| a.checked_add(p)) != Some(d)
    {
        return ctx.err(format!("split sizes {parts:?} do not add up to {d}"));
    }
    parts
        .iter()
        .map(|&p| {
            let mut s = x.shape.clone();
            s[axis] = p;
            ctx.out(s, x.dtype, None)
        })
        .collect()
}

pub(super) fn resize(ctx: &Ctx) -> Result<TensorInfo> {
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
