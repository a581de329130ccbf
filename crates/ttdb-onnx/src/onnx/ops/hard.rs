//! `HardSigmoid` and `HardSwish` as Relay's ONNX frontend expands them
//! (`python/tvm/relay/frontend/onnx.py`, classes `HardSigmoid` and `HardSwish`):
//! `clip(x * alpha + beta, 0, 1)` (alpha 0.2, beta 0.5 unless given), and for hardswish
//! `x * clip(x * alpha + beta, 0, 1)` with alpha 1/6, beta 0.5, `x` the left operand. The
//! constants are float32 scalars (`relay.const` of a Python float), so FuseOps fuses them
//! and TE lowering makes each a `compile_engine_const` stage; the expansion forms the
//! diamond `x -> ... -> multiply(x, ..)` that ttdb's epilogue writes as a rejoin.
use super::{same_shape, OnnxOp};
use crate::onnx::error::{OnnxError, Result};
use crate::onnx::graph::{Data, Node, TensorInfo};
use crate::onnx::relay::{BinKind, Lowering, OpKind, UnaryKind, ValId};
use crate::onnx::shape::Ctx;

pub(super) struct Hard;

impl OnnxOp for Hard {
    fn names(&self) -> &'static [&'static str] {
        &["HardSigmoid", "HardSwish"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        same_shape(ctx)
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        lower(l, node)
    }
}

fn lower(l: &mut Lowering, node: &Node) -> Result<()> {
    let swish = node.op_type == "HardSwish";
    let x_name = node.input(0).ok_or_else(|| OnnxError::Shape {
        node: node.name.clone(),
        op: node.op_type.clone(),
        msg: "input 0 missing".into(),
    })?;
    let x = l.value(x_name)?;
    let (out, shape) = l.out(node, 0)?;
    let (alpha, beta) = if swish {
        (1.0 / 6.0, 0.5)
    } else {
        (
            node.float("alpha").map_or(0.2, f64::from),
            node.float("beta").map_or(0.5, f64::from),
        )
    };
    let scalar = |l: &mut Lowering, what: &str, v: f64| -> ValId {
        let c = l.og.add_value(format!("{out}::{what}"), vec![], true);
        l.og.values[c].data = Some(Data::Floats(vec![v as f32 as f64]));
        c
    };
    let a = scalar(l, "alpha", alpha);
    let b = scalar(l, "beta", beta);
    let covered = node.covered();
    let step = |l: &mut Lowering, kind: OpKind, ins: Vec<ValId>, name: String| -> ValId {
        l.og.add_op(kind, ins, name, shape.clone(), covered.clone())
    };
    let scaled = step(
        l,
        OpKind::Binary(BinKind::Multiply),
        vec![x, a],
        format!("{out}::scaled"),
    );
    let shifted = step(
        l,
        OpKind::Binary(BinKind::Add),
        vec![scaled, b],
        format!("{out}::shifted"),
    );
    let clip = OpKind::Unary(UnaryKind::Clip { lo: 0.0, hi: 1.0 });
    let result = if swish {
        let gate = step(l, clip, vec![shifted], format!("{out}::gate"));
        step(
            l,
            OpKind::Binary(BinKind::Multiply),
            vec![x, gate],
            out.clone(),
        )
    } else {
        step(l, clip, vec![shifted], out.clone())
    };
    l.vals.insert(out, result);
    Ok(())
}
