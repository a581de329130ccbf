//! `HardSigmoid` as Relay's ONNX frontend expands it (`python/tvm/relay/frontend/onnx.py`,
//! class `HardSigmoid`): `clip(x * alpha + beta, 0, 1)`, alpha 0.2 and beta 0.5 unless the
//! attributes say otherwise. The constants are float32 scalars (`relay.const` of a Python
//! float), so FuseOps fuses them and TE lowering makes each a `compile_engine_const` stage.
//! Recognition tries the forms models use (`ttdb_algo::ops::activation::HARDSIGMOID`);
//! `HardSwish`, which has no attributes, is that table's row itself (see the registry).
use super::{same_shape, OnnxOp};
use crate::onnx::error::Result;
use crate::onnx::graph::{Data, Node, TensorInfo};
use crate::onnx::relay::{BinKind, Lowering, OpKind, UnaryKind, ValId};
use crate::onnx::shape::Ctx;

pub(super) struct HardSigmoid;

impl OnnxOp for HardSigmoid {
    fn names(&self) -> &'static [&'static str] {
        &["HardSigmoid"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        same_shape(ctx)
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let x = l.input(node, 0)?;
        let (out, shape) = l.out(node, 0)?;
        let alpha = node.float("alpha").map_or(0.2, f64::from);
        let beta = node.float("beta").map_or(0.5, f64::from);
        let scalar = |l: &mut Lowering, what: &str, v: f64| -> ValId {
            let c = l.og.add_value(format!("{out}::{what}"), vec![], true);
            l.og.values[c].data = Some(Data::Floats(vec![v as f32 as f64]));
            c
        };
        let a = scalar(l, "alpha", alpha);
        let b = scalar(l, "beta", beta);
        let covered = node.covered();
        let mut step = |kind: OpKind, ins: Vec<ValId>, name: String| -> ValId {
            l.og.add_op(kind, ins, name, shape.clone(), covered.clone())
        };
        let scaled = step(
            OpKind::Binary(BinKind::Multiply),
            vec![x, a],
            format!("{out}::scaled"),
        );
        let shifted = step(
            OpKind::Binary(BinKind::Add),
            vec![scaled, b],
            format!("{out}::shifted"),
        );
        let clip = OpKind::Unary(UnaryKind::Clip { lo: 0.0, hi: 1.0 });
        let result = step(clip, vec![shifted], out.clone());
        l.vals.insert(out, result);
        Ok(())
    }
}
