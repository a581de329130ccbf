//! `topi.nn.conv2d_NCHWc`: what x86 relay runs for NCHW convolutions after AlterOpLayout
//! packs data to [N, C/ib, H, W, ib] and the kernel to [O/ob, C/ib/g, KH, KW, ib, ob]
//! (spec §4.2). The `data_pad` stage exists only when some padding is non-zero (DOPAD).
//! Names are the same in every era; grouped kernels (#13733, Jan 2023) are only built for
//! eras from v0.10 on.
use super::era::Era;
use super::pad::{pad, PadFlavor};
use super::registry::Anchor;
use super::util::{check, named_axes, rank, window_index, Window2d};
use super::windows::conv_windows;
use crate::ir::{BuildError, Combiner, ComputeAttrs, DagBuilder, Expr, IterVar, Tensor};

pub fn conv2d_nchwc(
    b: &mut DagBuilder,
    era: Era,
    data: &Tensor,
    kernel: &Tensor,
    w: &Window2d,
) -> Result<Tensor, BuildError> {
    rank(&data.shape, 5, "conv2d_NCHWc data")?;
    rank(&kernel.shape, 6, "conv2d_NCHWc kernel")?;
    let (n, ic_chunk, h, wd, ic_bn) = (
        data.shape[0],
        data.shape[1],
        data.shape[2],
        data.shape[3],
        data.shape[4],
    );
    let (oc_chunk, ic_chunk_group, kh, kw, k_ic_bn, oc_bn) = (
        kernel.shape[0],
        kernel.shape[1],
        kernel.shape[2],
        kernel.shape[3],
        kernel.shape[4],
        kernel.shape[5],
    );
    let in_channel = ic_chunk * ic_bn;
    check(k_ic_bn == ic_bn, || {
        format!("conv2d_NCHWc: kernel ic block {k_ic_bn} != data block {ic_bn}")
    })?;
    check(in_channel % (ic_chunk_group * k_ic_bn) == 0, || {
        "conv2d_NCHWc: channels do not divide into groups".into()
    })?;
    let groups = in_channel / (ic_chunk_group * k_ic_bn);
    check(groups == 1 || era >= Era::V010, || {
        format!("grouped conv2d_NCHWc does not exist in TVM {era}")
    })?;
    check(oc_chunk % groups == 0 && ic_chunk % groups == 0, || {
        "conv2d_NCHWc: groups must divide the channel chunks".into()
    })?;
    let [oh, ow] = w.out_hw([h, wd], [kh, kw]);
    check(oh > 0 && ow > 0, || "conv2d_NCHWc: empty output".into())?;
    let [pt, pl, pb, pr] = w.padding;
    let src = if pt + pb != 0 || pl + pr != 0 {
        pad(
            b,
            data,
            &[0, 0, pt, pl, 0],
            &[0, 0, pb, pr, 0],
            Expr::f32(0.0),
            "data_pad",
            PadFlavor::Python,
        )?
    } else {
        data.clone()
    };
    let ic_extent = in_channel / groups;
    Ok(b.reduce(
        "conv2d_NCHWc",
        "conv2d_NCHWc",
        named_axes(
            &[
                "n",
                if groups == 1 { "oc_chunk" } else { "occ" },
                "oh",
                "ow",
                "oc_block",
            ],
            &[n, oc_chunk, oh, ow, oc_bn],
        ),
        vec![
            IterVar::new("ic", ic_extent),
            IterVar::new("kh", kh),
            IterVar::new("kw", kw),
        ],
        Combiner::Sum,
        // TVM reads the kernel as AlterOpLayout left it; ttdb packs it for the schedule
        ComputeAttrs {
            packable_placeholders: vec![kernel.id],
            ..ComputeAttrs::default()
        },
        |v, r| {
            let (ic, rkh, rkw) = (r[0].clone(), r[1].clone(), r[2].clone());
            let chunk = Expr::floordiv(ic.clone(), ic_bn);
            let data_chunk = if groups == 1 {
                chunk.clone()
            } else {
                Expr::floordiv(v[1].clone(), oc_chunk / groups) * (ic_chunk / groups)
                    + chunk.clone()
            };
            src.at(vec![
                v[0].clone(),
                data_chunk,
                window_index(v[2].clone(), w.stride[0], rkh.clone(), w.dilation[0]),
                window_index(v[3].clone(), w.stride[1], rkw.clone(), w.dilation[1]),
                Expr::floormod(ic.clone(), ic_bn),
            ]) * kernel.at(vec![
                v[1].clone(),
                chunk,
                rkh,
                rkw,
                Expr::floormod(ic, ic_bn),
                v[4].clone(),
            ])
        },
    ))
}

/// Recognition: NCHWc data `[N, IC/ib, H, W, ib]`, kernel `[OC/ob, IC/ib/g, KH, KW, ib, ob]`.
pub fn candidates(a: &[i64], b: &[i64], out: &[i64]) -> Vec<Anchor> {
    if !is_nchwc(a, b, out) || b[4] != a[4] {
        return vec![];
    }
    conv_windows([a[2], a[3]], [b[2], b[3]], [out[2], out[3]])
        .into_iter()
        .map(Anchor::Conv2dNchwc)
        .collect()
}

/// 5-D data, 6-D kernel, 5-D output agreeing on the batch and the output blocking.
pub(super) fn is_nchwc(a: &[i64], b: &[i64], out: &[i64]) -> bool {
    (a.len(), b.len(), out.len()) == (5, 6, 5) && a[0] == out[0] && b[0] == out[1] && b[5] == out[4]
}
