//! `Transpose`: dims permuted by `perm` (reversed by default), small constant values
//! permuted along; Relay's injective `transpose` with its `perm`.
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{Node, TensorInfo};
use crate::onnx::relay::{Lowering, OpKind};
use crate::onnx::shape::{consteval, Ctx};

pub(super) struct Transpose;

impl OnnxOp for Transpose {
    fn names(&self) -> &'static [&'static str] {
        &["Transpose"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        infer(ctx)
    }

    /// Shape inference checked `perm` is a permutation of the input's axes.
    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let x = l.input(node, 0)?;
        let rank = l.og.values[x].shape.len();
        let perm = perm_of(node, rank).iter().map(|&p| p as usize).collect();
        l.emit_with_runtime_inputs(node, OpKind::Transpose { perm })
    }
}

/// The `perm` attribute, or the axes reversed.
fn perm_of(node: &Node, rank: usize) -> Vec<i64> {
    node.ints("perm")
        .map(<[i64]>::to_vec)
        .unwrap_or_else(|| (0..rank as i64).rev().collect())
}

fn infer(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    let r = x.shape.len();
    let perm = perm_of(ctx.node, r);
    let mut seen = vec![false; r];
    let mut shape = Vec::with_capacity(r);
    for &p in &perm {
        if p < 0 || p as usize >= r || seen[p as usize] {
            return ctx.err(format!("perm {perm:?} is not a permutation of rank {r}"));
        }
        seen[p as usize] = true;
        shape.push(x.shape[p as usize]);
    }
    if perm.len() != r {
        return ctx.err(format!("perm {perm:?} is not a permutation of rank {r}"));
    }
    let data = x.data.as_ref().and_then(|d| {
        let p: Vec<usize> = perm.iter().map(|&p| p as usize).collect();
        consteval::remap(d, &x.shape, &shape, |out| {
            p.iter().enumerate().fold(vec![0; r], |mut c, (i, &pi)| {
                c[pi] = out[i];
                c
            })
        })
    });
    Ok(vec![ctx.out(shape, x.dtype, data)?])
}
