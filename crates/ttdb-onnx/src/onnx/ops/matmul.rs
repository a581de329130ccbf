//! `MatMul` (numpy semantics): with a 2-D right operand Relay's `nn.dense` over the
//! flattened leading dims (`reshape` around it when A has more than 2 dims), else
//! `nn.batch_matmul` with `[B, M, K] x [B, N, K]` operands (`reshape` / `transpose` ops
//! where needed; a constant right operand is transposed at compile time), or with
//! `[B, K, N]` ones when `use_nt_batch_matmul` is off (`Options::nt_batch_matmul`). Both
//! anchors.
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{Node, TensorInfo};
use crate::onnx::relay::{ConstOp, Lowering, OpKind, ValId};
use crate::onnx::shape::{broadcast, Ctx};

pub(super) struct MatMul;

impl OnnxOp for MatMul {
    fn names(&self) -> &'static [&'static str] {
        &["MatMul"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        Ok(vec![infer_matmul(ctx)?])
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        lower_matmul(l, node)
    }
}

fn infer_matmul(ctx: &Ctx) -> Result<TensorInfo> {
    let (a, b) = (ctx.input(0)?, ctx.input(1)?);
    if a.shape.is_empty() || b.shape.is_empty() {
        return ctx.err("MatMul of a scalar");
    }
    let mut sa = a.shape.clone();
    let mut sb = b.shape.clone();
    let (pa, pb) = (sa.len() == 1, sb.len() == 1);
    if pa {
        sa.insert(0, 1);
    }
    if pb {
        sb.push(1);
    }
    let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let (k2, n) = (sb[sb.len() - 2], sb[sb.len() - 1]);
    if k != k2 {
        return ctx.err(format!("inner dims differ: {:?} x {:?}", a.shape, b.shape));
    }
    let batch = match broadcast(&sa[..sa.len() - 2], &sb[..sb.len() - 2]) {
        Some(s) => s,
        None => {
            return ctx.err(format!(
                "batch dims of {:?} and {:?} do not broadcast",
                a.shape, b.shape
            ))
        }
    };
    let mut shape = batch;
    if !pa {
        shape.push(m);
    }
    if !pb {
        shape.push(n);
    }
    ctx.out(shape, a.dtype, None)
}

/// The dense weight `[N, K]`: a constant is transposed at compile time; a run-time
/// `[K, N]` tensor gets a `transpose` op.
pub(super) fn dense_weight(
    l: &mut Lowering,
    node: &Node,
    b: ValId,
    trans_b: bool,
    name: &str,
) -> ValId {
    if trans_b {
        return b;
    }
    let s = l.og.values[b].shape.clone();
    let t = vec![s[1], s[0]];
    if l.og.values[b].constant {
        let name = format!("{}::T", l.og.values[b].name);
        return l.og.derive_const(b, ConstOp::TransposeLast2, name, t);
    }
    l.emit_named(
        node,
        OpKind::Transpose { perm: vec![1, 0] },
        vec![b],
        format!("{name}::b_t"),
        t,
    )
}

fn lower_matmul(l: &mut Lowering, node: &Node) -> Result<()> {
    let a = l.value(node.input(0).unwrap_or_default())?;
    let b = l.value(node.input(1).unwrap_or_default())?;
    let (name, shape) = l.out(node, 0)?;
    let sa = l.og.values[a].shape.clone();
    let sb = l.og.values[b].shape.clone();
    if sa.len() < 2 || sb.len() < 2 {
        l.emit(node, OpKind::Opaque("matmul".into()), vec![a, b])?;
        return Ok(());
    }
    let k = sa[sa.len() - 1];
    let m: i64 = sa[..sa.len() - 1].iter().product();
    if sb.len() == 2 {
        // dense over the flattened leading dims
        let a2 = if sa.len() > 2 {
            l.emit_named(
                node,
                OpKind::Injective("reshape".into()),
                vec![a],
                format!("{name}::a2d"),
                vec![m, k],
            )
        } else {
            a
        };
        let w = dense_weight(l, node, b, false, &name);
        let n = sb[1];
        if sa.len() > 2 {
            let d = l.emit_named(
                node,
                OpKind::Dense,
                vec![a2, w],
                format!("{name}::dense"),
                vec![m, n],
            );
            let v = l.og.add_op(
                OpKind::Injective("reshape".into()),
                vec![d],
                name.clone(),
                shape,
                node.covered(),
            );
            l.vals.insert(name, v);
        } else {
            let v = l.emit_named(node, OpKind::Dense, vec![a2, w], name.clone(), shape);
            l.vals.insert(name, v);
        }
        return Ok(());
    }
    let batch = |s: &[i64]| -> i64 { s[..s.len() - 2].iter().product() };
    let (ba, bb) = (batch(&sa), batch(&sb));
    let (mm, n) = (sa[sa.len() - 2], sb[sb.len() - 1]);
    let a3 = if sa.len() != 3 {
        l.emit_named(
            node,
            OpKind::Injective("reshape".into()),
            vec![a],
            format!("{name}::a3d"),
            vec![ba, mm, k],
        )
    } else {
        a
    };
    let (b3, kind) = if l.nt_batch_matmul {
        (
            nt_weight(l, node, b, vec![bb, n, k], &name),
            OpKind::BatchMatmul { transpose_b: true },
        )
    } else {
        (
            nn_weight(l, node, b, vec![bb, k, n], &name),
            OpKind::BatchMatmul { transpose_b: false },
        )
    };
    let out3 = vec![ba.max(bb), mm, n];
    if out3 == shape {
        let v = l.emit_named(node, kind, vec![a3, b3], name.clone(), shape);
        l.vals.insert(name, v);
    } else {
        let bm = l.emit_named(node, kind, vec![a3, b3], format!("{name}::bmm"), out3);
        let v = l.og.add_op(
            OpKind::Injective("reshape".into()),
            vec![bm],
            name.clone(),
            shape,
            node.covered(),
        );
        l.vals.insert(name, v);
    }
    Ok(())
}

/// The right operand `[..., K, N]` as a `[B, N, K]` weight: a constant is transposed at
/// compile time, a run-time tensor gets a `transpose` op.
fn nt_weight(l: &mut Lowering, node: &Node, b: ValId, shape: Vec<i64>, name: &str) -> ValId {
    if l.og.values[b].constant {
        let name = format!("{}::T", l.og.values[b].name);
        return l.og.derive_const(b, ConstOp::TransposeLast2, name, shape);
    }
    // [..., K, N] viewed as [B, K, N]
    l.emit_named(
        node,
        OpKind::Transpose {
            perm: vec![0, 2, 1],
        },
        vec![b],
        format!("{name}::b_t"),
        shape,
    )
}

/// The right operand `[..., K, N]` as a `[B, K, N]` weight (TVM's `flatten_to_nd`): as it is
/// when 3-D, else reshaped (at compile time for a constant).
fn nn_weight(l: &mut Lowering, node: &Node, b: ValId, shape: Vec<i64>, name: &str) -> ValId {
    if l.og.values[b].shape == shape {
        return b;
    }
    if l.og.values[b].constant {
        let name = format!("{}::3d", l.og.values[b].name);
        return l.og.derive_const(b, ConstOp::Reshape, name, shape);
    }
    l.emit_named(
        node,
        OpKind::Injective("reshape".into()),
        vec![b],
        format!("{name}::b3d"),
        shape,
    )
}
