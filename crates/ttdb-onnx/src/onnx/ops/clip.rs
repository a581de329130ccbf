//! `Clip`: element-wise; Relay's `clip` with bounds known at load time (attributes before
//! opset 11, constant inputs since), else an opaque `clip_dynamic` TVM cannot fuse either.
use super::{same_shape, OnnxOp};
use crate::onnx::error::Result;
use crate::onnx::graph::{Node, TensorInfo};
use crate::onnx::relay::{Lowering, OpKind, UnaryKind};
use crate::onnx::shape::Ctx;

pub(super) struct Clip;

impl OnnxOp for Clip {
    fn names(&self) -> &'static [&'static str] {
        &["Clip"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        same_shape(ctx)
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let x = l.input(node, 0)?;
        let bound = |l: &Lowering, i: usize, attr: &str, default: f64| -> Option<f64> {
            if l.g.opset < 11 {
                return Some(node.float(attr).map(|v| v as f64).unwrap_or(default));
            }
            match node.input(i) {
                None => Some(default),
                Some(n) => {
                    l.g.tensor(n)
                        .and_then(|t| t.data.as_ref())
                        .map(|d| d.as_floats())
                        .and_then(|v| v.first().copied())
                }
            }
        };
        let kind = match (
            bound(l, 1, "min", f32::MIN as f64),
            bound(l, 2, "max", f32::MAX as f64),
        ) {
            (Some(lo), Some(hi)) => UnaryKind::Clip { lo, hi },
            _ => UnaryKind::Other("clip_dynamic".into()),
        };
        l.emit(node, OpKind::Unary(kind), vec![x])?;
        Ok(())
    }
}
