//! Depthwise convolutions: `topi.nn.depthwise_conv2d_nhwc` (kernel [KH,KW,C,M], "HWOI";
//! `PaddedInput` always present) and x86 `depthwise_conv2d_NCHWc` (channel multiplier 1,
//! kernel [O/ob,1,KH,KW,1,ob]; `PaddedInput` only when padded). Same names in all eras.
use super::era::Era;
use super::pad::{pad, PadFlavor};
use super::registry::Anchor;
use super::util::{check, named_axes, rank, window_index, Window2d};
use super::windows::conv_windows;
use crate::ir::{BuildError, Combiner, ComputeAttrs, DagBuilder, Expr, IterVar, Tensor};

pub fn depthwise_conv2d_nhwc(
    b: &mut DagBuilder,
    _era: Era,
    data: &Tensor,
    kernel: &Tensor,
    w: &Window2d,
) -> Result<Tensor, BuildError> {
    rank(&data.shape, 4, "depthwise_conv2d_nhwc data")?;
    rank(&kernel.shape, 4, "depthwise_conv2d_nhwc kernel")?;
    let (n, h, wd, c) = (data.shape[0], data.shape[1], data.shape[2], data.shape[3]);
    let (kh, kw, kc, m) = (
        kernel.shape[0],
        kernel.shape[1],
        kernel.shape[2],
        kernel.shape[3],
    );
    check(kc == c, || {
        format!("depthwise_conv2d_nhwc: kernel channels {kc} != {c}")
    })?;
    let [oh, ow] = w.out_hw([h, wd], [kh, kw]);
    check(oh > 0 && ow > 0, || {
        "depthwise_conv2d_nhwc: empty output".into()
    })?;
    let [pt, pl, pb, pr] = w.padding;
    let padded = pad(
        b,
        data,
        &[0, pt, pl, 0],
        &[0, pb, pr, 0],
        Expr::f32(0.0),
        "PaddedInput",
        PadFlavor::Python,
    )?;
    Ok(b.reduce(
        "DepthwiseConv2d",
        "depthwise_conv2d_nhwc",
        named_axes(&["b", "i", "j", "c"], &[n, oh, ow, c * m]),
        vec![IterVar::new("di", kh), IterVar::new("dj", kw)],
        Combiner::Sum,
        ComputeAttrs::default(),
        |v, r| {
            let (di, dj) = (r[0].clone(), r[1].clone());
            let ch = Expr::floordiv(v[3].clone(), m);
            padded.at(vec![
                v[0].clone(),
                window_index(v[1].clone(), w.stride[0], di.clone(), w.dilation[0]),
                window_index(v[2].clone(), w.stride[1], dj.clone(), w.dilation[1]),
                ch.clone(),
            ]) * kernel.at(vec![di, dj, ch, Expr::floormod(v[3].clone(), m)])
        },
    ))
}

pub fn depthwise_conv2d_nchwc(
    b: &mut DagBuilder,
    _era: Era,
    data: &Tensor,
    kernel: &Tensor,
    w: &Window2d,
) -> Result<Tensor, BuildError> {
    rank(&data.shape, 5, "depthwise_conv2d_NCHWc data")?;
    rank(&kernel.shape, 6, "depthwise_conv2d_NCHWc kernel")?;
    let (n, ic_chunk, h, wd, ic_bn) = (
        data.shape[0],
        data.shape[1],
        data.shape[2],
        data.shape[3],
        data.shape[4],
    );
    let (oc_chunk, cm_chunk, kh, kw, cm_block, oc_bn) = (
        kernel.shape[0],
        kernel.shape[1],
        kernel.shape[2],
        kernel.shape[3],
        kernel.shape[4],
        kernel.shape[5],
    );
    let multiplier = cm_chunk * cm_block;
    check(multiplier == 1, || {
        "depthwise_conv2d_NCHWc: only channel multiplier 1 exists in TOPI".into()
    })?;
    check(oc_chunk * oc_bn == ic_chunk * ic_bn, || {
        "depthwise_conv2d_NCHWc: in/out channels differ".into()
    })?;
    let [oh, ow] = w.out_hw([h, wd], [kh, kw]);
    check(oh > 0 && ow > 0, || {
        "depthwise_conv2d_NCHWc: empty output".into()
    })?;
    let [pt, pl, pb, pr] = w.padding;
    let src = if w.is_padded() {
        pad(
            b,
            data,
            &[0, 0, pt, pl, 0],
            &[0, 0, pb, pr, 0],
            Expr::f32(0.0),
            "PaddedInput",
            PadFlavor::Python,
        )?
    } else {
        data.clone()
    };
    Ok(b.reduce(
        "DepthwiseConv2d",
        "depthwise_conv2d_NCHWc",
        named_axes(
            &["b", "oco", "oh", "ow", "oci"],
            &[n, oc_chunk, oh, ow, oc_bn],
        ),
        vec![IterVar::new("kh", kh), IterVar::new("kw", kw)],
        Combiner::Sum,
        ComputeAttrs::default(),
        |v, r| {
            let (rkh, rkw) = (r[0].clone(), r[1].clone());
            let channel = Expr::floordiv(v[1].clone() * oc_bn + v[4].clone(), multiplier);
            src.at(vec![
                v[0].clone(),
                Expr::floordiv(channel.clone(), ic_bn),
                window_index(v[2].clone(), w.stride[0], rkh.clone(), w.dilation[0]),
                window_index(v[3].clone(), w.stride[1], rkw.clone(), w.dilation[1]),
                Expr::floormod(channel, ic_bn),
            ]) * kernel.at(vec![
                v[1].clone(),
                Expr::int(0),
                rkh,
                rkw,
                Expr::int(0),
                v[4].clone(),
            ])
        },
    ))
}

/// Recognition: NHWC data, kernel `[KH, KW, C, M]` (channel multiplier M).
pub fn nhwc_candidates(a: &[i64], b: &[i64], out: &[i64]) -> Vec<Anchor> {
    if !super::conv2d::is_nhwc(a, b, out) || b[2] != a[3] || a[3] * b[3] != out[3] {
        return vec![];
    }
    conv_windows([a[1], a[2]], [b[0], b[1]], [out[1], out[2]])
        .into_iter()
        .map(Anchor::DepthwiseNhwc)
        .collect()
}

/// Recognition: NCHWc data `[N, C/c, H, W, c]`, kernel `[OC/oc, 1, KH, KW, 1, oc]`.
pub fn nchwc_candidates(a: &[i64], b: &[i64], out: &[i64]) -> Vec<Anchor> {
    if !super::conv2d_nchwc::is_nchwc(a, b, out)
        || b[1] != 1
        || b[4] != 1
        || b[0] * b[5] != a[1] * a[4]
    {
        return vec![];
    }
    conv_windows([a[2], a[3]], [b[2], b[3]], [out[2], out[3]])
        .into_iter()
        .map(Anchor::DepthwiseNchwc)
        .collect()
}
