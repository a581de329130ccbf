//! `Concat`: Relay's `concatenate` (injective; layout selection keeps a layout its inputs
//! share), one input is that input.
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{Node, TensorInfo};
use crate::onnx::relay::{Lowering, OpKind};
use crate::onnx::shape::{checked, Ctx};

pub(super) struct Concat;

impl OnnxOp for Concat {
    fn names(&self) -> &'static [&'static str] {
        &["Concat"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        Ok(vec![infer_concat(ctx)?])
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let ins = l.present_inputs(node)?;
        let r = l.og.values[ins[0]].shape.len() as i64;
        let a = node.int("axis").unwrap_or(0);
        let axis = if a < 0 { a + r } else { a } as usize;
        if ins.len() == 1 {
            l.alias(node, ins[0]);
        } else {
            l.emit(node, OpKind::Concat { axis }, ins)?;
        }
        Ok(())
    }
}

fn infer_concat(ctx: &Ctx) -> Result<TensorInfo> {
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
