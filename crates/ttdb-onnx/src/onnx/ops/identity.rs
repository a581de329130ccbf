//! `Identity` and `Dropout` (inference: the identity, plus Dropout's all-true mask): no
//! Relay op, the output is the input's value. Both are removed before lowering
//! ([`crate::onnx::fold::remove_identities`]) unless they alias a graph output.
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{dtype, Node, TensorInfo};
use crate::onnx::relay::Lowering;
use crate::onnx::shape::Ctx;

pub(super) struct Identity;
pub(super) struct Dropout;

fn alias_input(l: &mut Lowering, node: &Node) -> Result<()> {
    let v = l.input(node, 0)?;
    l.alias(node, v);
    Ok(())
}

impl OnnxOp for Identity {
    fn names(&self) -> &'static [&'static str] {
        &["Identity"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        Ok(vec![ctx.input(0)?.clone()])
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        alias_input(l, node)
    }
}

impl OnnxOp for Dropout {
    fn names(&self) -> &'static [&'static str] {
        &["Dropout"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        let x = ctx.input(0)?.clone();
        let mask = TensorInfo::new(x.shape.clone(), dtype::BOOL);
        Ok(vec![x, mask])
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        alias_input(l, node)
    }
}
