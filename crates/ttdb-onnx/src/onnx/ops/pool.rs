//! Pooling: `MaxPool` / `AveragePool` become Relay's `nn.max_pool2d` / `nn.avg_pool2d` and
//! `GlobalAveragePool` / `GlobalMaxPool` its global pools (anchors: ttdb-algo's
//! `Anchor::Pool` and `Anchor::AdaptivePool`); other ranks stay opaque, and so do the Lp
//! pools (registry rows sharing these shape rules).
use super::OnnxOp;
use crate::onnx::error::Result;
use crate::onnx::graph::{dtype, Node, TensorInfo};
use crate::onnx::relay::{Lowering, OpKind, Pool2d};
use crate::onnx::shape::{pool_params, spatial_out, Ctx};
use ttdb_algo::ops::PoolKind;

pub(super) struct Pool;
pub(super) struct GlobalPool;

/// The windowed pools' rule: `[N, C]` then each spatial dim through the window (ceil mode
/// included); the optional second output (MaxPool's indices) is int64.
pub(super) fn infer_windowed(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    let p = pool_params(ctx.node, &x.shape)?;
    let mut shape = x.shape[..2].to_vec();
    shape.extend(spatial_out(
        ctx.node,
        &x.shape[2..],
        &p.window,
        p.ceil_mode,
    )?);
    let t = ctx.out(shape, x.dtype, None)?;
    let idx = TensorInfo::new(t.shape.clone(), dtype::INT64);
    Ok(vec![t, idx])
}

/// The global pools' rule: `[N, C, 1, ...]`.
pub(super) fn infer_global(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    let x = ctx.input(0)?;
    if x.shape.len() < 3 {
        return ctx.err(format!("input rank {} < 3", x.shape.len()));
    }
    let mut shape = x.shape[..2].to_vec();
    shape.extend(std::iter::repeat_n(1, x.shape.len() - 2));
    Ok(vec![ctx.out(shape, x.dtype, None)?])
}

impl OnnxOp for Pool {
    fn names(&self) -> &'static [&'static str] {
        &["MaxPool", "AveragePool"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        infer_windowed(ctx)
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let op = node.op_type.as_str();
        let x = l.input(node, 0)?;
        let xs = l.og.values[x].shape.clone();
        if xs.len() != 4 {
            let name = format!("{}{}d", op.to_lowercase(), xs.len().saturating_sub(2));
            l.emit(node, OpKind::Opaque(name), vec![x])?;
            return Ok(());
        }
        let p = pool_params(node, &xs)?;
        let w = &p.window;
        let kind = if op == "MaxPool" {
            PoolKind::Max
        } else {
            PoolKind::Avg {
                count_include_pad: p.count_include_pad,
            }
        };
        let pool = Pool2d {
            kind,
            kernel: [w.kernel[0], w.kernel[1]],
            stride: [w.strides[0], w.strides[1]],
            dilation: [w.dilations[0], w.dilations[1]],
            padding: [w.pads[0].0, w.pads[1].0, w.pads[0].1, w.pads[1].1],
            ceil_mode: p.ceil_mode,
        };
        l.emit(node, OpKind::Pool(pool), vec![x])?;
        Ok(())
    }
}

impl OnnxOp for GlobalPool {
    fn names(&self) -> &'static [&'static str] {
        &["GlobalAveragePool", "GlobalMaxPool"]
    }

    fn infer(&self, ctx: &Ctx) -> Result<Vec<TensorInfo>> {
        infer_global(ctx)
    }

    fn lower(&self, l: &mut Lowering, node: &Node) -> Result<()> {
        let op = node.op_type.as_str();
        let x = l.input(node, 0)?;
        let kind = if op == "GlobalMaxPool" {
            PoolKind::Max
        } else {
            PoolKind::Avg {
                count_include_pad: true,
            }
        };
        if l.og.values[x].shape.len() != 4 {
            l.emit(node, OpKind::Opaque(op.to_lowercase()), vec![x])?;
        } else {
            l.emit(node, OpKind::GlobalPool(kind), vec![x])?;
        }
        Ok(())
    }
}
