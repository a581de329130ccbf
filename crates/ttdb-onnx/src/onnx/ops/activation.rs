//! The ONNX ops that are an activation of ttdb-algo's table (`ttdb_algo::ops::activation`):
//! element-wise (the input's shape), lowered as the Relay ops of the row's expansion, one
//! per epilogue op, so that fusion turns them back into that very chain
//! ([`crate::onnx::chain`]) and recognition, which tries the row's chains, finds the task.
use super::{same_shape, OnnxOp};
use crate::onnx::error::{OnnxError, Result};
use crate::onnx::graph::{Data, Node, TensorInfo};
use crate::onnx::relay::{BinKind, Lowering, OpKind, UnaryKind, ValId};
use crate::onnx::shape::Ctx;
use ttdb_algo::ops::activation::Activation;
use ttdb_algo::ops::{EpilogueOp, ScalarOp};

/// An ONNX op that is `activation`'s expansion.
pub(crate) struct ActivationOp {
    names: &'static [&'static str],
    activation: &'static Activation,
}

impl ActivationOp {
    pub(super) const fn new(
        names: &'static [&'static str],
        activation: &'static Activation,
    ) -> ActivationOp {
        ActivationOp { names, activation }
    }
}

impl OnnxOp for ActivationOp {
    fn names(&self) -> &'static [&'static str] {
        self.names
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        same_shape(ctx)
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let x = l.input(node, 0)?;
        let (out, shape) = l.out(node, 0)?;
        let chain = (self.activation.expansion)(0);
        // values[i]: the activation's input (0), then each op's output
        let mut values: Vec<ValId> = vec![x];
        for (i, &step) in chain.iter().enumerate() {
            let prev = values[i];
            let ordered = |other: ValId, other_first: bool| {
                if other_first {
                    vec![other, prev]
                } else {
                    vec![prev, other]
                }
            };
            let (kind, inputs) = match step {
                EpilogueOp::Scalar {
                    op,
                    value,
                    operand_first,
                } => {
                    let c = l.og.add_value(format!("{out}::c{i}"), vec![], true);
                    l.og.values[c].data = Some(Data::Floats(vec![value as f32 as f64]));
                    (OpKind::Binary(bin_kind(op)), ordered(c, operand_first))
                }
                EpilogueOp::Rejoin {
                    op,
                    with,
                    with_first,
                } => (
                    OpKind::Binary(bin_kind(op)),
                    ordered(values[usize::from(with)], with_first),
                ),
                EpilogueOp::Relu => (OpKind::Unary(UnaryKind::Relu), vec![prev]),
                EpilogueOp::Tanh => (OpKind::Unary(UnaryKind::Tanh), vec![prev]),
                EpilogueOp::Clip { lo, hi } => {
                    (OpKind::Unary(UnaryKind::Clip { lo, hi }), vec![prev])
                }
                other if EpilogueOp::INTRINSIC_UNARY.contains(&other) => (
                    OpKind::Unary(UnaryKind::Other(other.class_name().into())),
                    vec![prev],
                ),
                other => {
                    return Err(OnnxError::Unsupported {
                        node: node.name.clone(),
                        op: node.op_type.clone(),
                        reason: format!(
                            "the {} expansion reads a tensor operand ({})",
                            self.activation.name,
                            other.class_name()
                        ),
                    })
                }
            };
            let name = if i + 1 == chain.len() {
                out.clone()
            } else {
                format!("{out}::{}{i}", step.class_name())
            };
            let v =
                l.og.add_op(kind, inputs, name, shape.clone(), node.covered());
            values.push(v);
        }
        let result = *values.last().expect("the input at least");
        l.vals.insert(out, result);
        Ok(())
    }
}

fn bin_kind(op: ScalarOp) -> BinKind {
    match op {
        ScalarOp::Add => BinKind::Add,
        ScalarOp::Subtract => BinKind::Subtract,
        ScalarOp::Multiply => BinKind::Multiply,
        ScalarOp::Divide => BinKind::Divide,
        ScalarOp::Power => BinKind::Power,
    }
}
