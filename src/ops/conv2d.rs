//! Direct 2-D convolutions in plain layouts: `topi.nn.conv2d_nhwc` (kernel HWIO, the x86
//! NHWC tutorial path), `topi.nn.conv2d_nchw` (kernel OIHW, e.g. the `conv2d_layer`
//! tutorial) and `topi.nn.group_conv2d_nchw`. All three always keep the pad stage.
//!
//! Names per era: NHWC `PaddedInput`/`Conv2dOutput` until v0.8, then the generic
//! `topi.nn.conv` (v0.9+) names `pad_temp`/`conv2d_nhwc`; NCHW ops are unnamed (`compute`)
//! until v0.8, `conv2d_nchw`/`group_conv2d_nchw` after.
use super::era::Era;
use super::pad::{pad, PadFlavor};
use super::util::{check, named_axes, rank, window_index, Window2d};
use crate::ir::{BuildError, Combiner, ComputeAttrs, DagBuilder, Expr, IterVar, Tensor};

/// Conv2d NHWC: data [N,H,W,CI], kernel [KH,KW,CI,CO] -> [N,OH,OW,CO]; reduction (ry, rx, rc).
pub fn conv2d_nhwc(
    b: &mut DagBuilder,
    era: Era,
    data: &Tensor,
    kernel: &Tensor,
    w: &Window2d,
) -> Result<Tensor, BuildError> {
    rank(&data.shape, 4, "conv2d_nhwc data")?;
    rank(&kernel.shape, 4, "conv2d_nhwc kernel")?;
    let (n, h, wd, ci) = (data.shape[0], data.shape[1], data.shape[2], data.shape[3]);
    let (kh, kw, kci, co) = (
        kernel.shape[0],
        kernel.shape[1],
        kernel.shape[2],
        kernel.shape[3],
    );
    check(kci == ci, || {
        format!("conv2d_nhwc: kernel in-channels {kci} != data channels {ci}")
    })?;
    let [oh, ow] = w.out_hw([h, wd], [kh, kw]);
    check(oh > 0 && ow > 0, || "conv2d_nhwc: empty output".into())?;
    let (pad_name, conv_name) = if era <= Era::V08 {
        ("PaddedInput", "Conv2dOutput")
    } else {
        ("pad_temp", "conv2d_nhwc")
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
    let attrs = ComputeAttrs {
        layout_free_placeholders: vec![kernel.id],
        ..Default::default()
    };
    Ok(b.reduce(
        conv_name,
        "conv2d_nhwc",
        named_axes(&["nn", "yy", "xx", "ff"], &[n, oh, ow, co]),
        vec![
            IterVar::new("ry", kh),
            IterVar::new("rx", kw),
            IterVar::new("rc", ci),
        ],
        Combiner::Sum,
        attrs,
        |v, r| {
            let (ry, rx, rc) = (r[0].clone(), r[1].clone(), r[2].clone());
            padded.at(vec![
                v[0].clone(),
                window_index(v[1].clone(), w.stride[0], ry.clone(), w.dilation[0]),
                window_index(v[2].clone(), w.stride[1], rx.clone(), w.dilation[1]),
                rc.clone(),
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
