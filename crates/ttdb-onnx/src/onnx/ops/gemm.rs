//! `Gemm`: `alpha * A' * B' + C` as Relay's `nn.dense` (an anchor) with an `[N, K]` weight:
//! `transA` a `transpose` op, `alpha != 1` a scalar `multiply` of A, `C` a broadcast `add`,
//! `beta != 1` a scalar `multiply` of C (folded into a constant C, as TVM's FoldConstant).
use super::matmul::dense_weight;
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{Data, Node, TensorInfo};
use crate::onnx::relay::{BinKind, ConstOp, Lowering, OpKind};
use crate::onnx::shape::{broadcast, Ctx};

pub(super) struct Gemm;

impl OnnxOp for Gemm {
    fn names(&self) -> &'static [&'static str] {
        &["Gemm"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        let node = ctx.node;
        let (a, b) = (ctx.input(0)?, ctx.input(1)?);
        if a.shape.len() != 2 || b.shape.len() != 2 {
            return ctx.err(format!(
                "Gemm needs 2-D inputs, got {:?} and {:?}",
                a.shape, b.shape
            ));
        }
        let ta = node.int("transA").unwrap_or(0) != 0;
        let tb = node.int("transB").unwrap_or(0) != 0;
        let (m, k) = if ta {
            (a.shape[1], a.shape[0])
        } else {
            (a.shape[0], a.shape[1])
        };
        let (k2, n) = if tb {
            (b.shape[1], b.shape[0])
        } else {
            (b.shape[0], b.shape[1])
        };
        if k != k2 {
            return ctx.err(format!(
                "inner dims differ: A {:?} (transA={ta}), B {:?} (transB={tb})",
                a.shape, b.shape
            ));
        }
        if let Some(c) = ctx.opt(2) {
            if broadcast(&c.shape, &[m, n]).as_deref() != Some(&[m, n][..]) {
                return ctx.err(format!("C {:?} does not broadcast to [{m}, {n}]", c.shape));
            }
        }
        Ok(vec![ctx.out(vec![m, n], a.dtype, None)?])
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let mut a = l.input(node, 0)?;
        let b = l.input(node, 1)?;
        let (name, shape) = l.out(node, 0)?;
        if node.int("transA").unwrap_or(0) != 0 {
            let s = l.og.values[a].shape.clone();
            a = l.emit_named(
                node,
                OpKind::Transpose { perm: vec![1, 0] },
                vec![a],
                format!("{name}::a_t"),
                vec![s[1], s[0]],
            );
        }
        let alpha = node.float("alpha").unwrap_or(1.0);
        if alpha != 1.0 {
            let s = l.og.values[a].shape.clone();
            let c = l.og.add_value(format!("{name}::alpha"), vec![], true);
            l.og.values[c].data = Some(Data::Floats(vec![alpha as f64]));
            a = l.emit_named(
                node,
                OpKind::Binary(BinKind::Multiply),
                vec![a, c],
                format!("{name}::a_scaled"),
                s,
            );
        }
        let w = dense_weight(l, node, b, node.int("transB").unwrap_or(0) != 0, &name);
        match node.input(2) {
            None => {
                let v = l.emit_named(node, OpKind::Dense, vec![a, w], name.clone(), shape);
                l.vals.insert(name, v);
            }
            Some(cn) => {
                let d = l.emit_named(
                    node,
                    OpKind::Dense,
                    vec![a, w],
                    format!("{name}::dense"),
                    shape.clone(),
                );
                let mut c = l.value(cn)?;
                let beta = node.float("beta").unwrap_or(1.0);
                if beta != 1.0 {
                    let b = l.og.add_value(format!("{name}::beta"), vec![], true);
                    l.og.values[b].data = Some(Data::Floats(vec![beta as f64]));
                    let cs = l.og.values[c].shape.clone();
                    c = if l.og.values[c].constant {
                        let n = format!("{}::beta", l.og.values[c].name);
                        l.og.derive_const(c, ConstOp::Scale(b), n, cs)
                    } else {
                        l.emit_named(
                            node,
                            OpKind::Binary(BinKind::Multiply),
                            vec![c, b],
                            format!("{name}::c_scaled"),
                            cs,
                        )
                    };
                }
                let v = l.og.add_op(
                    OpKind::Binary(BinKind::Add),
                    vec![d, c],
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
