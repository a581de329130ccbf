//! 2-D pooling (`topi::nn::pool2d`) and adaptive / global pooling
//! (`topi::nn::adaptive_pool`), for NHWC, NCHW and NCHW[x]c data (spec §4.6).
//!
//! Per era: v0.7 used the 2-D `pool_impl` (ops `tensor`, reduce axes `dh, dw`, average
//! divisor `kh*kw` or a clamped window size); v0.8 `pool_impl_nd` (axes `rv0, rv1`, still
//! `tensor`); v0.9 adds the boundary-aware count_include_pad divisor (#9835); since #13401
//! (our v0.10 era) the ops are `pool_max`, `pool_sum` + `pool_avg`, `adaptive_pool_*`.
use super::era::Era;
use super::pad::{pad, PadFlavor};
use super::registry::Anchor;
use super::util::{axes, check, vars};
use super::windows::pool_windows;
use crate::ir::{BuildError, Combiner, ComputeAttrs, DagBuilder, Expr, IterVar, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolLayout {
    Nhwc,
    Nchw,
    /// NCHW[x]c, 5-D packed data.
    Nchwc,
}

impl PoolLayout {
    /// (height axis, width axis).
    pub fn hw_axes(self) -> (usize, usize) {
        match self {
            PoolLayout::Nhwc => (1, 2),
            PoolLayout::Nchw | PoolLayout::Nchwc => (2, 3),
        }
    }

    pub fn rank(self) -> usize {
        match self {
            PoolLayout::Nchwc => 5,
            _ => 4,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    Max,
    Avg { count_include_pad: bool },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolAttrs {
    pub kind: PoolKind,
    pub kernel: [i64; 2],
    pub stride: [i64; 2],
    pub dilation: [i64; 2],
    /// (top, left, bottom, right), before the ceil-mode extension.
    pub padding: [i64; 4],
    pub ceil_mode: bool,
    pub layout: PoolLayout,
}

impl PoolAttrs {
    /// Padding actually applied: ceil mode extends the bottom/right by `stride - 1`.
    pub fn effective_padding(&self) -> [i64; 4] {
        let [t, l, b, r] = self.padding;
        if self.ceil_mode {
            [t, l, b + self.stride[0] - 1, r + self.stride[1] - 1]
        } else {
            [t, l, b, r]
        }
    }

    pub fn out_hw(&self, in_hw: [i64; 2]) -> [i64; 2] {
        let [t, l, b, r] = self.effective_padding();
        let dk = |i: usize| (self.kernel[i] - 1) * self.dilation[i] + 1;
        [
            (in_hw[0] + t + b - dk(0)).div_euclid(self.stride[0]) + 1,
            (in_hw[1] + l + r - dk(1)).div_euclid(self.stride[1]) + 1,
        ]
    }
}

struct PoolNames {
    max: &'static str,
    sum: &'static str,
    avg: &'static str,
    rv: [&'static str; 2],
}

fn names(era: Era) -> PoolNames {
    match era {
        Era::V07 => PoolNames {
            max: "tensor",
            sum: "tensor",
            avg: "tensor",
            rv: ["dh", "dw"],
        },
        Era::V08 | Era::V09 | Era::V010Early => PoolNames {
            max: "tensor",
            sum: "tensor",
            avg: "tensor",
            rv: ["rv0", "rv1"],
        },
        Era::V010 | Era::V015 => PoolNames {
            max: "pool_max",
            sum: "pool_sum",
            avg: "pool_avg",
            rv: ["rv0", "rv1"],
        },
    }
}

pub fn pool2d(
    b: &mut DagBuilder,
    era: Era,
    data: &Tensor,
    a: &PoolAttrs,
) -> Result<Tensor, BuildError> {
    check(data.ndim() == a.layout.rank(), || {
        format!(
            "pool: {:?} data must be {}-D, got {:?}",
            a.layout,
            a.layout.rank(),
            data.shape
        )
    })?;
    check(era != Era::V07 || a.dilation == [1, 1], || {
        "pool dilation did not exist in TVM v0.7".into()
    })?;
    let (hx, wx) = a.layout.hw_axes();
    let [out_h, out_w] = a.out_hw([data.shape[hx], data.shape[wx]]);
    check(out_h > 0 && out_w > 0, || "pool: empty output".into())?;
    let pads = a.effective_padding();
    let do_pad = pads.iter().any(|&p| p != 0);
    let mut out_shape = data.shape.clone();
    out_shape[hx] = out_h;
    out_shape[wx] = out_w;
    let nm = names(era);
    let pad_value = match a.kind {
        PoolKind::Max => Expr::min_value(data.dtype),
        PoolKind::Avg { .. } => Expr::f32(0.0),
    };
    let src = if do_pad {
        let mut before = vec![0; data.ndim()];
        let mut after = vec![0; data.ndim()];
        before[hx] = pads[0];
        before[wx] = pads[1];
        after[hx] = pads[2];
        after[wx] = pads[3];
        pad(
            b,
            data,
            &before,
            &after,
            pad_value,
            "pad_temp",
            PadFlavor::Cpp,
        )?
    } else {
        data.clone()
    };
    let reduce_axes = vec![
        IterVar::new(nm.rv[0], a.kernel[0]),
        IterVar::new(nm.rv[1], a.kernel[1]),
    ];
    let window = |v: &[Expr], r: &[Expr]| {
        let mut idx = v.to_vec();
        idx[hx] = v[hx].clone() * a.stride[0] + r[0].clone() * a.dilation[0];
        idx[wx] = v[wx].clone() * a.stride[1] + r[1].clone() * a.dilation[1];
        src.at(idx)
    };
    let count_include_pad = match a.kind {
        PoolKind::Max => {
            return Ok(b.reduce(
                nm.max,
                "pool_max",
                axes("ax", &out_shape),
                reduce_axes,
                Combiner::Max,
                ComputeAttrs::default(),
                window,
            ));
        }
        PoolKind::Avg { count_include_pad } => count_include_pad,
    };
    let sum = b.reduce(
        nm.sum,
        "pool_sum",
        axes("ax", &out_shape),
        reduce_axes,
        Combiner::Sum,
        ComputeAttrs::default(),
        window,
    );
    let hw = [data.shape[hx], data.shape[wx]];
    let ax = axes("ax", &out_shape);
    let v = vars(&ax);
    let out_vars = [v[hx].clone(), v[wx].clone()];
    let divisor = match (era, count_include_pad) {
        (Era::V07, true) | (Era::V08, true) => Expr::int(a.kernel[0] * a.kernel[1]),
        (Era::V07, false) => {
            // pool_impl: clamp the window to the data, at least 1 element
            let mut ext = Vec::new();
            for i in 0..2 {
                let start = out_vars[i].clone() * a.stride[i] - a.padding[i];
                let end = Expr::min(start.clone() + a.kernel[i], hw[i]);
                ext.push(end - Expr::max(start, 0));
            }
            Expr::max(ext[0].clone() * ext[1].clone(), 1)
        }
        (_, true) => {
            let offset = |i: usize| if a.ceil_mode { a.stride[i] - 1 } else { 0 };
            let mut num = Expr::int(1);
            for i in 0..2 {
                let start = out_vars[i].clone() * a.stride[i] - a.padding[i];
                let end = start.clone() + (a.kernel[i] - 1) * a.dilation[i];
                let end = Expr::min(end, hw[i] + pads[i + 2] - 1 - offset(i));
                num = num * (Expr::div(end - start, a.dilation[i]) + 1);
            }
            num
        }
        (_, false) => {
            let mut num = Expr::int(1);
            for i in 0..2 {
                let start = out_vars[i].clone() * a.stride[i] - a.padding[i];
                let end = start.clone() + (a.kernel[i] - 1) * a.dilation[i];
                let jumps = Expr::max(
                    Expr::div(Expr::int(a.dilation[i] - 1) - start.clone(), a.dilation[i]),
                    0,
                );
                let end = Expr::min(end, hw[i] - 1);
                num = num * (Expr::div(end - (start + jumps * a.dilation[i]), a.dilation[i]) + 1);
            }
            Expr::max(num, 1)
        }
    };
    Ok(b.elementwise(nm.avg, "elemwise", ax, |v| {
        Expr::div(sum.at(v.to_vec()), divisor)
    }))
}

/// Adaptive pooling to `out_hw` (global pooling is `out_hw = [1, 1]`). Window bounds depend
/// on the output index, so the reduce extents are expressions, not constants.
pub fn adaptive_pool2d(
    b: &mut DagBuilder,
    era: Era,
    data: &Tensor,
    out_hw: [i64; 2],
    kind: PoolKind,
    layout: PoolLayout,
) -> Result<Tensor, BuildError> {
    check(data.ndim() == layout.rank(), || {
        format!("adaptive pool: {layout:?} data must be {}-D", layout.rank())
    })?;
    let (hx, wx) = layout.hw_axes();
    let in_hw = [data.shape[hx], data.shape[wx]];
    check(out_hw[0] > 0 && out_hw[1] > 0, || {
        "adaptive pool: empty output".into()
    })?;
    let mut out_shape = data.shape.clone();
    out_shape[hx] = out_hw[0];
    out_shape[wx] = out_hw[1];
    let modern = era >= Era::V010;
    let start = |o: &Expr, i: usize| Expr::floordiv(o.clone() * in_hw[i], out_hw[i]);
    let end = |o: &Expr, i: usize| {
        let tmp = Expr::floordiv((o.clone() + 1) * in_hw[i], out_hw[i]);
        let exact = Expr::eq(Expr::floormod((o.clone() + 1) * in_hw[i], out_hw[i]), 0);
        Expr::select(exact, tmp.clone(), tmp + 1)
    };
    let window = |v: &[Expr]| -> Vec<IterVar> {
        [hx, wx]
            .iter()
            .enumerate()
            .map(|(i, &x)| IterVar::with_extent(format!("rv{i}"), end(&v[x], i) - start(&v[x], i)))
            .collect()
    };
    let ax = axes("ax", &out_shape);
    let v = vars(&ax);
    let reduce_axes = window(&v);
    let load = |v: &[Expr], r: &[Expr]| {
        let mut idx = v.to_vec();
        idx[hx] = start(&v[hx], 0) + r[0].clone();
        idx[wx] = start(&v[wx], 1) + r[1].clone();
        data.at(idx)
    };
    match kind {
        PoolKind::Max => {
            let name = if modern {
                "adaptive_pool_max"
            } else {
                "tensor"
            };
            Ok(b.reduce(
                name,
                "adaptive_pool_max",
                ax,
                reduce_axes,
                Combiner::Max,
                ComputeAttrs::default(),
                load,
            ))
        }
        PoolKind::Avg { .. } => {
            let (sum_name, avg_name) = if modern {
                ("adaptive_pool_sum", "adaptive_pool_avg")
            } else {
                ("tensor", "tensor")
            };
            let sum = b.reduce(
                sum_name,
                "adaptive_pool_sum",
                ax.clone(),
                reduce_axes,
                Combiner::Sum,
                ComputeAttrs::default(),
                load,
            );
            Ok(b.elementwise(avg_name, "elemwise", ax, |v| {
                let mut factor = Expr::f32(1.0);
                for r in window(v) {
                    factor = factor * r.extent.cast(data.dtype);
                }
                Expr::div(sum.at(v.to_vec()), factor)
            }))
        }
    }
}

/// Recognition: the pools mapping data `x` to `out` in each layout its rank allows
/// (NCHW[x]c for 5-D, NHWC then NCHW for 4-D): adaptive pools, then max pools, then
/// average pools, each with the windows [`pool_windows`] solves.
pub fn anchor_candidates(x: &[i64], out: &[i64]) -> Vec<Anchor> {
    let mut v = Vec::new();
    let layouts: &[PoolLayout] = match x.len() {
        5 => &[PoolLayout::Nchwc],
        4 => &[PoolLayout::Nhwc, PoolLayout::Nchw],
        _ => &[],
    };
    for &layout in layouts {
        let (hx, wx) = layout.hw_axes();
        let same_other =
            out.len() == x.len() && (0..x.len()).all(|i| i == hx || i == wx || x[i] == out[i]);
        if !same_other {
            continue;
        }
        let (in_hw, out_hw) = ([x[hx], x[wx]], [out[hx], out[wx]]);
        if out_hw[0] <= in_hw[0] && out_hw[1] <= in_hw[1] {
            for kind in [
                PoolKind::Avg {
                    count_include_pad: true,
                },
                PoolKind::Max,
            ] {
                v.push(Anchor::AdaptivePool {
                    kind,
                    layout,
                    out_hw,
                });
            }
        }
        for (kernel, stride, padding) in pool_windows(in_hw, out_hw, false) {
            v.push(pool_anchor(PoolKind::Max, kernel, stride, padding, layout));
        }
        for (kernel, stride, padding) in pool_windows(in_hw, out_hw, true) {
            for count_include_pad in [true, false] {
                v.push(pool_anchor(
                    PoolKind::Avg { count_include_pad },
                    kernel,
                    stride,
                    padding,
                    layout,
                ));
            }
        }
    }
    v
}

fn pool_anchor(
    kind: PoolKind,
    kernel: [i64; 2],
    stride: i64,
    padding: [i64; 4],
    layout: PoolLayout,
) -> Anchor {
    Anchor::Pool(PoolAttrs {
        kind,
        kernel,
        stride: [stride, stride],
        dilation: [1, 1],
        padding,
        ceil_mode: false,
        layout,
    })
}
