//! Reductions: `ReduceMean` is Relay's `mean` (an anchor: ttdb-algo's `Anchor::Mean`,
//! which takes an element-wise prologue); the other `Reduce*` ops and `ArgMax` / `ArgMin`
//! are reductions ttdb does not tune, registry rows sharing [`infer_reduce`] and
//! [`infer_arg`].
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{dtype, Node, TensorInfo};
use crate::onnx::relay::{Lowering, OpKind};
use crate::onnx::shape::Ctx;

pub(super) struct ReduceMean;

impl OnnxOp for ReduceMean {
    fn names(&self) -> &'static [&'static str] {
        &["ReduceMean"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        infer_reduce(ctx)
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let x = l.input(node, 0)?;
        let (_, out) = l.out(node, 0)?;
        let xs = l.og.values[x].shape.clone();
        let keepdims = node.int("keepdims").unwrap_or(1) != 0;
        let axes: Vec<usize> = match node.ints("axes") {
            Some(a) => a
                .iter()
                .map(|&a| {
                    if a < 0 {
                        (a + xs.len() as i64) as usize
                    } else {
                        a as usize
                    }
                })
                .collect(),
            None if keepdims => (0..xs.len())
                .filter(|&i| xs[i] != out.get(i).copied().unwrap_or(1))
                .collect(),
            None => (0..xs.len()).collect(),
        };
        l.emit(node, OpKind::Mean { axes, keepdims }, vec![x])?;
        Ok(())
    }
}

/// The reduced axes (an attribute, or an input from opset 18 and for `ReduceSum` from 13;
/// none: all, unless `noop_with_empty_axes`) kept as 1s or dropped.
pub(super) fn infer_reduce(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    let op = ctx.node.op_type.as_str();
    let axes_from_input = ctx.opset >= 18 || (op == "ReduceSum" && ctx.opset >= 13);
    let axes = if axes_from_input {
        if ctx.opt(1).is_some() {
            Some(ctx.ints(1, "the axes")?)
        } else {
            None
        }
    } else {
        ctx.node.ints("axes").map(<[i64]>::to_vec)
    };
    let keep = ctx.node.int("keepdims").unwrap_or(1) != 0;
    let r = x.shape.len();
    let axes: Vec<usize> = match axes {
        Some(a) if !a.is_empty() => a.iter().map(|&a| ctx.axis(a, r)).collect::<Result<_>>()?,
        _ if ctx.node.int("noop_with_empty_axes").unwrap_or(0) != 0 => vec![],
        _ => (0..r).collect(),
    };
    let mut shape = Vec::new();
    for (i, &d) in x.shape.iter().enumerate() {
        if axes.contains(&i) {
            if keep {
                shape.push(1);
            }
        } else {
            shape.push(d);
        }
    }
    Ok(vec![ctx.out(shape, x.dtype, None)?])
}

/// The index of the extreme along `axis`, int64.
pub(super) fn infer_arg(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    let a = ctx.axis(ctx.node.int("axis").unwrap_or(0), x.shape.len())?;
    let mut shape = x.shape.clone();
    if ctx.node.int("keepdims").unwrap_or(1) != 0 {
        shape[a] = 1;
    } else {
        shape.remove(a);
    }
    Ok(vec![ctx.out(shape, dtype::INT64, None)?])
}
