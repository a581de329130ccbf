//! `Conv`: 2-D convolutions become Relay's `nn.conv2d` (an anchor, laid out per conv by
//! [`crate::onnx::layout`]), the bias a broadcast `add` of a `[1, C, 1, 1]` channel vector
//! (bias_add canonicalized); other ranks stay opaque `conv<N>d`.
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{numel, Node, TensorInfo};
use crate::onnx::relay::{BinKind, Lowering, OpKind};
use crate::onnx::shape::{conv_params, spatial_out, Ctx};
use ttdb_algo::ops::Window2d;

pub(super) struct Conv;

impl OnnxOp for Conv {
    fn names(&self) -> &'static [&'static str] {
        &["Conv"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        let node = ctx.node;
        let x = ctx.input(0)?;
        let p = conv_params(node, &x.shape, &ctx.input(1)?.shape)?;
        let w = &ctx.input(1)?.shape;
        let mut shape = vec![x.shape[0], w[0]];
        shape.extend(spatial_out(node, &x.shape[2..], &p.window, false)?);
        if let Some(b) = ctx.opt(2) {
            if numel(&b.shape) != Some(w[0]) {
                return ctx.err(format!(
                    "bias shape {:?} does not match {} output channels",
                    b.shape, w[0]
                ));
            }
        }
        Ok(vec![ctx.out(shape, x.dtype, None)?])
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let x = l.input(node, 0)?;
        let w = l.input(node, 1)?;
        let xs = l.og.values[x].shape.clone();
        let ws = l.og.values[w].shape.clone();
        if xs.len() != 4 {
            let name = format!("conv{}d", xs.len().saturating_sub(2));
            l.emit(node, OpKind::Opaque(name), vec![x, w])?;
            return Ok(());
        }
        let p = conv_params(node, &xs, &ws)?;
        let window = Window2d {
            stride: [p.window.strides[0], p.window.strides[1]],
            padding: [
                p.window.pads[0].0,
                p.window.pads[1].0,
                p.window.pads[0].1,
                p.window.pads[1].1,
            ],
            dilation: [p.window.dilations[0], p.window.dilations[1]],
        };
        let kind = OpKind::Conv {
            window,
            groups: p.group,
        };
        match node.input(2) {
            None => {
                l.emit(node, kind, vec![x, w])?;
            }
            Some(b) => {
                let (name, shape) = l.out(node, 0)?;
                let conv = l.emit_named(
                    node,
                    kind,
                    vec![x, w],
                    format!("{name}::conv"),
                    shape.clone(),
                );
                let bias = l.channel_const(b, 4)?;
                let v = l.og.add_op(
                    OpKind::Binary(BinKind::Add),
                    vec![conv, bias],
                    name.clone(),
                    shape,
                    node.covered(),
                );
                l.vals.insert(name, v);
            }
        }
        Ok(())
    }
}
