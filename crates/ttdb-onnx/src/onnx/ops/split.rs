//! `Split`: sizes from an attribute (before opset 13) or an input, else equal chunks (the
//! last one smaller); one Relay `split` op per used output.
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{Node, TensorInfo};
use crate::onnx::relay::{Lowering, OpKind};
use crate::onnx::shape::Ctx;

pub(super) struct Split;

impl OnnxOp for Split {
    fn names(&self) -> &'static [&'static str] {
        &["Split"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        infer(ctx)
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let x = l.input(node, 0)?;
        let ins = l.input_types(node);
        let ctx = Ctx {
            node,
            ins: &ins,
            opset: l.g.opset,
        };
        let (axis, parts) = split_parts(&ctx)?;
        let mut begin = 0;
        for (i, part) in parts.iter().enumerate() {
            let start = begin;
            begin += part;
            let Some(name) = node.outputs.get(i).filter(|n| !n.is_empty()).cloned() else {
                continue;
            };
            let shape = l.out(node, i)?.1;
            let v = l.og.add_op(
                OpKind::Split { axis, begin: start },
                vec![x],
                name.clone(),
                shape,
                node.covered(),
            );
            l.vals.insert(name, v);
        }
        Ok(())
    }
}

fn infer(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    let (axis, parts) = split_parts(ctx)?;
    parts
        .iter()
        .map(|&p| {
            let mut s = x.shape.clone();
            s[axis] = p;
            ctx.out(s, x.dtype, None)
        })
        .collect()
}

/// The split axis and the length of each part along it.
fn split_parts(ctx: &Ctx) -> Result<(usize, Vec<i64>)> {
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
    Ok((axis, parts))
}
