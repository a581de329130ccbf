//! `Softmax`: Relay's `nn.softmax`, an anchor (ttdb-algo's `Anchor::Softmax`). Since opset
//! 13 it normalizes along `axis` (default -1); before, over the dims from `axis` (default
//! 1) on, flattened: `reshape -> softmax(axis 1) -> reshape` unless that is the last axis.
use super::{same_shape, OnnxOp};
use crate::onnx::error::Result;
use crate::onnx::graph::{Node, TensorInfo};
use crate::onnx::relay::{Lowering, OpKind};
use crate::onnx::shape::Ctx;

pub(super) struct Softmax;

impl OnnxOp for Softmax {
    fn names(&self) -> &'static [&'static str] {
        &["Softmax"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        same_shape(ctx)
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let x = l.input(node, 0)?;
        let r = l.og.values[x].shape.len();
        let axis = node
            .int("axis")
            .unwrap_or(if l.g.opset >= 13 { -1 } else { 1 });
        let axis = if axis < 0 { axis + r as i64 } else { axis } as usize;
        if l.g.opset >= 13 || axis + 1 == r {
            let axis = axis.min(r.saturating_sub(1));
            l.emit(node, OpKind::Softmax { axis }, vec![x])?;
            return Ok(());
        }
        let s = l.og.values[x].shape.clone();
        let (name, shape) = l.out(node, 0)?;
        let flat = vec![s[..axis].iter().product(), s[axis..].iter().product()];
        let f = l.emit_named(
            node,
            OpKind::Injective("reshape".into()),
            vec![x],
            format!("{name}::flat"),
            flat.clone(),
        );
        let sm = l.emit_named(
            node,
            OpKind::Softmax { axis: 1 },
            vec![f],
            format!("{name}::softmax"),
            flat,
        );
        let v = l.og.add_op(
            OpKind::Injective("reshape".into()),
            vec![sm],
            name.clone(),
            shape,
            node.covered(),
        );
        l.vals.insert(name, v);
        Ok(())
    }
}
