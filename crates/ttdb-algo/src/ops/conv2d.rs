//! Direct 2-D convolutions in plain layouts: `topi.nn.conv2d_nhwc` (kernel HWIO, the x86
//! NHWC tutorial path), `topi.nn.conv2d_nchw` (kernel OIHW, e.g. the `conv2d_layer`
//! tutorial), `topi.nn.group_conv2d_nchw` and `topi.nn.group_conv2d_nhwc` (kernel HWIO
//! `[KH, KW, CI/groups, CO]`, relay's x86 strategy for grouped NHWC convs). All keep the pad
//! stage.
//!
//! Names per era: NHWC `PaddedInput`/`Conv2dOutput` until v0.8, then the generic
//! `topi.nn.conv` (v0.9+) names `pad_temp`/`conv2d_nhwc`; NCHW ops are unnamed (`compute`)
//! until v0.8, `conv2d_nchw`/`group_conv2d_nchw` after.
use super::era::Era;
use super::pad::{pad, PadFlavor};
use super::registry::Anchor;
use super::util::{check, named_axes, rank, window_index, Window2d};
use super::windows::conv_windows;
use crate::ir::{BuildError, Combiner, ComputeAttrs, DagBuilder, Expr, IterVar, Tensor};

/// Conv2d NHWC: data [N,H,W,CI], kernel [KH,KW,CI,CO] -> [N,OH,OW,CO]; reduction (ry, rx, rc).
pub fn conv2d_nhwc(
    b: &mut DagBuilder,
    era: Era,
    data: &Tensor,
    kernel: &Tensor,
    w: &Window2d,
) -> Result<Tensor, BuildError> {
    nhwc_conv(b, era, data, kernel, w, 1)
}

/// Grouped conv2d NHWC (groups > 1): data [N,H,W,CI], kernel [KH,KW,CI/g,CO] ->
/// [N,OH,OW,CO]; input channel `ff / (CO/g) * (CI/g) + rc`. TVM has it from v0.9 on (the
/// generic `topi.nn.conv`); unlike `conv2d_nhwc`, relay does not let Ansor rewrite its
/// kernel layout (no `layout_free_placeholders`).
pub fn group_conv2d_nhwc(
    b: &mut DagBuilder,
    era: Era,
    data: &Tensor,
    kernel: &Tensor,
    w: &Window2d,
    groups: i64,
) -> Result<Tensor, BuildError> {
    check(groups > 1, || {
        format!("group_conv2d_nhwc: groups {groups} must be > 1")
    })?;
    check(era > Era::V08, || {
        "group_conv2d_nhwc: TVM before v0.9 has no generic grouped NHWC conv".into()
    })?;
    nhwc_conv(b, era, data, kernel, w, groups)
}

/// The NHWC conv of both: reduction (ry, rx, rc) as TVM's generic conv orders it for NHWC.
fn nhwc_conv(
    b: &mut DagBuilder,
    era: Era,
    data: &Tensor,
    kernel: &Tensor,
    w: &Window2d,
    groups: i64,
) -> Result<Tensor, BuildError> {
    let what = if groups == 1 {
        "conv2d_nhwc"
    } else {
        "group_conv2d_nhwc"
    };
    rank(&data.shape, 4, &format!("{what} data"))?;
    rank(&kernel.shape, 4, &format!("{what} kernel"))?;
    let (n, h, wd, ci) = (data.shape[0], data.shape[1], data.shape[2], data.shape[3]);
    let (kh, kw, kci, co) = (
        kernel.shape[0],
        kernel.shape[1],
        kernel.shape[2],
        kernel.shape[3],
    );
    check(ci % groups == 0 && co % groups == 0, || {
        format!("{what}: groups {groups} must divide {ci} and {co}")
    })?;
    check(kci * groups == ci, || {
        format!("{what}: kernel in-channels {kci} x groups {groups} != data channels {ci}")
    })?;
    let [oh, ow] = w.out_hw([h, wd], [kh, kw]);
    check(oh > 0 && ow > 0, || format!("{what}: empty output"))?;
    let (pad_name, conv_name) = match (era <= Era::V08, groups == 1) {
        (true, _) => ("PaddedInput", "Conv2dOutput"),
        (false, true) => ("pad_temp", "conv2d_nhwc"),
        (false, false) => ("pad_temp", "group_conv2d_nhwc"),
    };
    let [pt, pl, pb, pr] = w.padding;
    let padded = pad(
        b,
        data,
        &[0, pt, pl, 0],
        &[0, pb, pr, 0],
        Expr::f32(0.0),
        pad_name,
        PadFlavor::Python,
    )?;
    let attrs = if groups == 1 {
        ComputeAttrs {
            layout_free_placeholders: vec![kernel.id],
            ..Default::default()
        }
    } else {
        ComputeAttrs::default()
    };
    Ok(b.reduce(
        conv_name,
        what,
        named_axes(&["nn", "yy", "xx", "ff"], &[n, oh, ow, co]),
        vec![
            IterVar::new("ry", kh),
            IterVar::new("rx", kw),
            IterVar::new("rc", kci),
        ],
        Combiner::Sum,
        attrs,
        |v, r| {
            let (ry, rx, rc) = (r[0].clone(), r[1].clone(), r[2].clone());
            let channel = if groups == 1 {
                rc.clone()
            } else {
                Expr::floordiv(v[3].clone(), co / groups) * kci + rc.clone()
            };
            padded.at(vec![
                v[0].clone(),
                window_index(v[1].clone(), w.stride[0], ry.clone(), w.dilation[0]),
                window_index(v[2].clone(), w.stride[1], rx.clone(), w.dilation[1]),
                channel,
            ]) * kernel.at(vec![ry, rx, rc, v[3].clone()])
        },
    ))
}

/// Conv2d NCHW (groups = 1) or grouped conv2d NCHW: data [N,C,H,W], kernel [O,C/g,KH,KW]
/// -> [N,O,OH,OW]; reduction (rc, ry, rx).
pub fn conv2d_nchw(
    b: &mut DagBuilder,
    era: Era,
    data: &Tensor,
    kernel: &Tensor,
    w: &Window2d,
    groups: i64,
) -> Result<Tensor, BuildError> {
    rank(&data.shape, 4, "conv2d_nchw data")?;
    rank(&kernel.shape, 4, "conv2d_nchw kernel")?;
    let (n, c, h, wd) = (data.shape[0], data.shape[1], data.shape[2], data.shape[3]);
    let (o, kc, kh, kw) = (
        kernel.shape[0],
        kernel.shape[1],
        kernel.shape[2],
        kernel.shape[3],
    );
    check(groups >= 1 && c % groups == 0 && o % groups == 0, || {
        format!("conv2d_nchw: groups {groups} must divide {c} and {o}")
    })?;
    check(kc * groups == c, || {
        format!("conv2d_nchw: kernel in-channels {kc} x groups {groups} != {c}")
    })?;
    let [oh, ow] = w.out_hw([h, wd], [kh, kw]);
    check(oh > 0 && ow > 0, || "conv2d_nchw: empty output".into())?;
    let [pt, pl, pb, pr] = w.padding;
    let padded = pad(
        b,
        data,
        &[0, 0, pt, pl],
        &[0, 0, pb, pr],
        Expr::f32(0.0),
        "pad_temp",
        PadFlavor::Python,
    )?;
    let name = match (era <= Era::V08, groups == 1) {
        (true, _) => "compute",
        (false, true) => "conv2d_nchw",
        (false, false) => "group_conv2d_nchw",
    };
    let tag = if groups == 1 {
        "conv2d_nchw"
    } else {
        "group_conv2d_nchw"
    };
    Ok(b.reduce(
        name,
        tag,
        named_axes(&["nn", "ff", "yy", "xx"], &[n, o, oh, ow]),
        vec![
            IterVar::new("rc", kc),
            IterVar::new("ry", kh),
            IterVar::new("rx", kw),
        ],
        Combiner::Sum,
        ComputeAttrs::default(),
        |v, r| {
            let (rc, ry, rx) = (r[0].clone(), r[1].clone(), r[2].clone());
            let channel = if groups == 1 {
                rc.clone()
            } else {
                Expr::floordiv(v[1].clone(), o / groups) * (c / groups) + rc.clone()
            };
            padded.at(vec![
                v[0].clone(),
                channel,
                window_index(v[2].clone(), w.stride[0], ry.clone(), w.dilation[0]),
                window_index(v[3].clone(), w.stride[1], rx.clone(), w.dilation[1]),
            ]) * kernel.at(vec![v[1].clone(), rc, ry, rx])
        },
    ))
}

/// Recognition: NHWC data `[N, H, W, CI]`, HWIO kernel `[KH, KW, CI, CO]`.
pub fn nhwc_candidates(a: &[i64], b: &[i64], out: &[i64]) -> Vec<Anchor> {
    if !is_nhwc(a, b, out) || b[2] != a[3] || b[3] != out[3] {
        return vec![];
    }
    conv_windows([a[1], a[2]], [b[0], b[1]], [out[1], out[2]])
        .into_iter()
        .map(Anchor::Conv2dNhwc)
        .collect()
}

/// Recognition: grouped NHWC, kernel `[KH, KW, CI / groups, CO]`.
pub fn group_nhwc_candidates(a: &[i64], b: &[i64], out: &[i64]) -> Vec<Anchor> {
    if !is_nhwc(a, b, out) || b[2] <= 0 || b[2] >= a[3] || a[3] % b[2] != 0 || b[3] != out[3] {
        return vec![];
    }
    let groups = a[3] / b[2];
    if out[3] % groups != 0 {
        return vec![];
    }
    conv_windows([a[1], a[2]], [b[0], b[1]], [out[1], out[2]])
        .into_iter()
        .map(|window| Anchor::GroupConv2dNhwc { window, groups })
        .collect()
}

/// Recognition: NCHW data `[N, C, H, W]`, OIHW kernel `[O, C / groups, KH, KW]`.
pub fn nchw_candidates(a: &[i64], b: &[i64], out: &[i64]) -> Vec<Anchor> {
    let ranks = (a.len(), b.len(), out.len()) == (4, 4, 4);
    if !ranks || a[0] != out[0] || b[0] != out[1] || b[1] <= 0 || a[1] % b[1] != 0 {
        return vec![];
    }
    let groups = a[1] / b[1];
    if b[0] % groups != 0 {
        return vec![];
    }
    conv_windows([a[2], a[3]], [b[2], b[3]], [out[2], out[3]])
        .into_iter()
        .map(|window| Anchor::Conv2dNchw { window, groups })
        .collect()
}

/// 4-D data, kernel and output, the data's batch the output's: the shapes every NHWC conv
/// family starts from.
pub(super) fn is_nhwc(a: &[i64], b: &[i64], out: &[i64]) -> bool {
    (a.len(), b.len(), out.len()) == (4, 4, 4) && a[0] == out[0]
}
