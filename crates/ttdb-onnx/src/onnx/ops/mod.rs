//! One home per ONNX op: each op's descriptor ([`OnnxOp`]) holds its shape rule and its
//! lowering to the Relay-like op graph, in one file of this directory (or, for ops that are
//! a plain table row such as `Sigmoid -> sigmoid`, one line of [`registry`]); [`registry`]
//! lists every descriptor, one line each, and is the only place an ONNX op type is looked
//! up. Layout behaviour belongs to the Relay ops a lowering emits
//! ([`super::relay::OpKind::layout_rule`]), as TVM registers layout rules per Relay op.
//! `docs/adding-an-op.md` walks through adding one; `docs/design/onnx-ops.md` says why.
use super::error::Result;
use super::graph::{Node, TensorInfo};
use super::relay::{Lowering, OpKind, UnaryKind};
use super::shape::Ctx;
use std::collections::HashMap;
use std::sync::OnceLock;

mod activation;
mod batch_norm;
mod binary;
mod cast;
mod clip;
mod concat;
mod constant;
mod conv;
mod expand;
mod flatten;
mod gather;
mod gemm;
mod hard_sigmoid;
mod identity;
mod index_ops;
mod lrn;
mod matmul;
mod pad;
mod pool;
mod reduce;
mod registry;
mod reshape;
mod resize;
mod shape_of;
mod slice;
mod softmax;
mod split;
mod squeeze;
mod tile;
mod transpose;

/// An ONNX op as ttdb's frontend knows it.
pub(crate) trait OnnxOp: Sync {
    /// The ONNX op types this descriptor stands for (several when they share every rule,
    /// like `MaxPool` and `AveragePool`).
    fn names(&self) -> &'static [&'static str];

    /// The types (and, where known, small values) of the node's outputs. Values the rule
    /// leaves unknown are folded afterwards when every input is known
    /// (`shape::consteval::fold`).
    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>>;

    /// Adds the node's Relay-like ops to the graph (as TVM's `from_onnx` converts it) and
    /// maps its outputs; nodes whose outputs are all constants never get here (FoldConstant).
    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()>;
}

/// The descriptor of an ONNX op type.
pub(crate) fn lookup(op_type: &str) -> Option<&'static dyn OnnxOp> {
    static BY_NAME: OnceLock<HashMap<&'static str, &'static dyn OnnxOp>> = OnceLock::new();
    BY_NAME
        .get_or_init(|| {
            let mut m = HashMap::new();
            for &op in registry::OPS {
                for &name in op.names() {
                    let earlier = m.insert(name, op);
                    assert!(earlier.is_none(), "ONNX op `{name}` is registered twice");
                }
            }
            m
        })
        .get(op_type)
        .copied()
}

/// The shape rule of element-wise ops: the type of input 0.
fn same_shape(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    Ok(vec![ctx.same()?])
}

/// How an op that is a table row lowers: to one Relay op.
#[derive(Clone, Copy)]
enum Relay {
    /// Relay's `nn.relu` on input 0 alone.
    Relu,
    /// Relay's `tanh` on input 0 alone.
    Tanh,
    /// `OpKind::Unary(Other(name))`, an element-wise op, on input 0 plus the run-time inputs.
    Unary(&'static str),
    /// `OpKind::Injective(name)` (data movement) on input 0 plus the run-time inputs.
    Injective(&'static str),
    /// `OpKind::Opaque(name)` (no fusion) on input 0 plus the run-time inputs.
    Opaque(&'static str),
    /// `OpKind::Opaque(name)` on input 0 alone.
    OpaqueOnFirst(&'static str),
    /// `OpKind::Reduce(name)` on input 0 alone.
    ReduceOnFirst(&'static str),
}

impl Relay {
    fn lower(self, l: &mut Lowering, node: &Node) -> Result<()> {
        match self {
            Relay::Relu => l.emit_on_first(node, OpKind::Unary(UnaryKind::Relu)),
            Relay::Tanh => l.emit_on_first(node, OpKind::Unary(UnaryKind::Tanh)),
            Relay::Unary(name) => {
                l.emit_with_runtime_inputs(node, OpKind::Unary(UnaryKind::Other(name.into())))
            }
            Relay::Injective(name) => {
                l.emit_with_runtime_inputs(node, OpKind::Injective(name.into()))
            }
            Relay::Opaque(name) => l.emit_with_runtime_inputs(node, OpKind::Opaque(name.into())),
            Relay::OpaqueOnFirst(name) => l.emit_on_first(node, OpKind::Opaque(name.into())),
            Relay::ReduceOnFirst(name) => l.emit_on_first(node, OpKind::Reduce(name.into())),
        }
    }
}

/// A descriptor that is a shape rule plus a one-op lowering: the ops of [`registry`]'s
/// table rows, and the data-movement ops whose files hold only their shape rule.
pub(crate) struct Simple {
    names: &'static [&'static str],
    infer: fn(&Ctx) -> Result<Vec<TensorInfo>>,
    relay: Relay,
}

impl Simple {
    const fn new(
        names: &'static [&'static str],
        infer: fn(&Ctx) -> Result<Vec<TensorInfo>>,
        relay: Relay,
    ) -> Simple {
        Simple {
            names,
            infer,
            relay,
        }
    }
}

impl OnnxOp for Simple {
    fn names(&self) -> &'static [&'static str] {
        self.names
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        (self.infer)(ctx)
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        self.relay.lower(l, node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every registered name resolves to its descriptor (the lookup panics on a name
    /// registered twice), and op types are case-sensitive as in ONNX.
    #[test]
    fn every_registered_name_is_found_once() {
        for &op in registry::OPS {
            for &name in op.names() {
                let found = lookup(name).expect("registered");
                assert!(std::ptr::addr_eq(found, op), "{name}");
            }
        }
        assert!(lookup("relu").is_none());
        assert!(lookup("Loop").is_none());
    }
}
