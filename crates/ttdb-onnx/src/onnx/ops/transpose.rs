//! `Transpose`: dims permuted by `perm` (reversed by default), small constant values
//! permuted along; Relay's injective `transpose`.
use super::{Relay, Simple};
use crate::onnx::error::Result;
use crate::onnx::graph::TensorInfo;
use crate::onnx::shape::{consteval, Ctx};

pub(super) const TRANSPOSE: Simple =
    Simple::new(&["Transpose"], infer, Relay::Injective("transpose"));

fn infer(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    let r = x.shape.len();
    let perm: Vec<i64> = ctx
        .node
        .ints("perm")
        .map(<[i64]>::to_vec)
        .unwrap_or_else(|| (0..r as i64).rev().collect());
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
