//! `BatchNormalization` left after folding into a conv ([`crate::onnx::fold`]) is Relay's
//! SimplifyInference form: `x * scale + shift`, each a broadcast of a channel vector.
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{numel, Node, TensorInfo};
use crate::onnx::relay::{BinKind, Lowering, OpKind};
use crate::onnx::shape::Ctx;

pub(super) struct BatchNorm;

impl OnnxOp for BatchNorm {
    fn names(&self) -> &'static [&'static str] {
        &["BatchNormalization"]
    }

    /// Output 0 has the data's shape; the optional running mean / variance outputs are
    /// channel vectors.
    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?;
        if x.shape.len() < 2 {
            return ctx.err(format!("input rank {} < 2", x.shape.len()));
        }
        let c = vec![x.shape[1]];
        for i in 1..5 {
            if let Some(p) = ctx.opt(i) {
                if p.shape != c && numel(&p.shape) != Some(c[0]) {
                    return ctx.err(format!(
                        "parameter {i} has shape {:?}, expected [{}]",
                        p.shape, c[0]
                    ));
                }
            }
        }
        Ok(vec![
            ctx.same()?,
            TensorInfo::new(c.clone(), x.dtype),
            TensorInfo::new(c.clone(), x.dtype),
            TensorInfo::new(c.clone(), x.dtype),
            TensorInfo::new(c, x.dtype),
        ])
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let x = l.input(node, 0)?;
        let rank = l.og.values[x].shape.len();
        let (name, shape) = l.out(node, 0)?;
        let scale = l.channel_const(node.input(1).unwrap_or_default(), rank)?;
        let shift = l.channel_const(node.input(2).unwrap_or_default(), rank)?;
        let m = l.emit_named(
            node,
            OpKind::Binary(BinKind::Multiply),
            vec![x, scale],
            format!("{name}::scaled"),
            shape.clone(),
        );
        let v = l.og.add_op(
            OpKind::Binary(BinKind::Add),
            vec![m, shift],
            name.clone(),
            shape,
            node.covered(),
        );
        l.vals.insert(name, v);
        Ok(())
    }
}
