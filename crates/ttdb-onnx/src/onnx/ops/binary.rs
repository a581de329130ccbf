//! The broadcasting element-wise ops with two (or, for `Sum`, more) inputs: numpy-style
//! broadcast shapes, `bool` for comparisons. Relay's broadcast binaries, with `Sum` of
//! several inputs as a chain of adds and of one input as that input. (`Mean`, `Xor`,
//! `BitShift`, `LessOrEqual` and `GreaterOrEqual` share the shape rule but stay opaque:
//! rows of the registry.)
use super::OnnxOp;
use crate::onnx::error::{OnnxError, Result};
use crate::onnx::graph::{dtype, Node, TensorInfo};
use crate::onnx::relay::{BinKind, Lowering, OpKind};
use crate::onnx::shape::{broadcast, Ctx};

pub(super) struct Broadcast;

/// Relay's op for each ONNX op of [`Broadcast`].
fn kind(op: &str) -> BinKind {
    match op {
        "Add" | "Sum" => BinKind::Add,
        "Sub" => BinKind::Subtract,
        "Mul" => BinKind::Multiply,
        "Div" => BinKind::Divide,
        "Pow" => BinKind::Power,
        other => BinKind::Other(other.to_lowercase()),
    }
}

impl OnnxOp for Broadcast {
    fn names(&self) -> &'static [&'static str] {
        &[
            "Add", "Sub", "Mul", "Div", "Sum", "PRelu", "Pow", "Max", "Min", "Equal", "Less",
            "Greater", "And", "Or", "Where", "Mod",
        ]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        infer(ctx)
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let op = node.op_type.as_str();
        let ins = l.present_inputs(node)?;
        match ins.len() {
            0 => {
                return Err(OnnxError::Shape {
                    node: node.name.clone(),
                    op: op.into(),
                    msg: "no inputs".into(),
                })
            }
            1 => l.alias(node, ins[0]),
            2 => {
                l.emit(node, OpKind::Binary(kind(op)), ins)?;
            }
            _ if op == "Sum" => {
                let (name, shape) = l.out(node, 0)?;
                let mut acc = ins[0];
                for (k, &v) in ins[1..].iter().enumerate() {
                    let last = k + 2 == ins.len();
                    let nm = if last {
                        name.clone()
                    } else {
                        format!("{name}::partial{k}")
                    };
                    acc = l.emit_named(
                        node,
                        OpKind::Binary(BinKind::Add),
                        vec![acc, v],
                        nm,
                        shape.clone(),
                    );
                }
                l.vals.insert(name, acc);
            }
            _ => {
                l.emit(node, OpKind::Binary(kind(op)), ins)?;
            }
        }
        Ok(())
    }
}

/// The broadcast shape of the present inputs; `bool` for comparisons, the second input's
/// type for `Where`.
pub(super) fn infer(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
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
    Ok(vec![ctx.out(shape, dt, None)?])
}
