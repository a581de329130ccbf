//! x86's grouped NCHW convolution (`topi.x86.group_conv2d_nchw`, relay implementation
//! `group_conv2d_nchw.x86`: the grouped spatial pack): data and kernel are repacked into
//! per-group blocks, the convolution runs on the blocks, and an unpack stage gives NCHW back.
//!
//! Stages: `data_pad` (only when padded), `data_vec (g, n, C, h, c, w)` of shape
//! `[G, N, CPG/ic_bn, PH, ic_bn, PW]`, `kernel_vec (g, out_channel, in_channel, h, w, ci, co)`
//! of shape `[G, KPG/oc_bn, CPG/ic_bn, KH, KW, ic_bn, oc_bn]`, `conv (g, n, oc_chunk, oh, ow,
//! oc_block ; ic, kh, kw)` and `output_unpack (n, c, h, w)`, with CPG the input and KPG the
//! output channels of a group. The blocking comes from AutoTVM's config; with none (how
//! Ansor builds it) the fallback rule: `oc_bn` the largest divisor of KPG up to the target's
//! fp32 lanes, `ic_bn` the largest divisor of CPG up to `oc_bn`. Same names in all eras.
use super::era::Era;
use super::pad::{pad, PadFlavor};
use super::registry::Anchor;
use super::util::{check, named_axes, rank, window_index, Window2d};
use super::windows::conv_windows;
use crate::ir::{BuildError, Combiner, ComputeAttrs, DagBuilder, Expr, IterVar, Tensor};

/// The conv's blocking: input and output channels per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupBlocking {
    pub ic_bn: i64,
    pub oc_bn: i64,
}

impl GroupBlocking {
    /// The fallback rule for a target of `lanes` fp32 lanes.
    pub fn fallback(lanes: i64, in_per_group: i64, out_per_group: i64) -> GroupBlocking {
        let largest_divisor = |n: i64, cap: i64| (1..=cap.min(n)).rev().find(|d| n % d == 0);
        let oc_bn = largest_divisor(out_per_group, lanes).unwrap_or(1);
        let ic_bn = largest_divisor(in_per_group, oc_bn).unwrap_or(1);
        GroupBlocking { ic_bn, oc_bn }
    }
}

/// data [N,C,H,W], kernel [O,C/g,KH,KW] -> [N,O,OH,OW].
pub fn group_conv2d_nchw_spatial_pack(
    b: &mut DagBuilder,
    _era: Era,
    data: &Tensor,
    kernel: &Tensor,
    w: &Window2d,
    groups: i64,
    blocking: GroupBlocking,
) -> Result<Tensor, BuildError> {
    const WHAT: &str = "group_conv2d_nchw_spatial_pack";
    rank(&data.shape, 4, &format!("{WHAT} data"))?;
    rank(&kernel.shape, 4, &format!("{WHAT} kernel"))?;
    let (n, c, h, wd) = (data.shape[0], data.shape[1], data.shape[2], data.shape[3]);
    let (o, cpg, kh, kw) = (
        kernel.shape[0],
        kernel.shape[1],
        kernel.shape[2],
        kernel.shape[3],
    );
    let GroupBlocking { ic_bn, oc_bn } = blocking;
    check(groups > 1 && o % groups == 0 && cpg * groups == c, || {
        format!("{WHAT}: groups {groups} do not split {c} input and {o} output channels")
    })?;
    let kpg = o / groups;
    check(
        ic_bn > 0 && oc_bn > 0 && cpg % ic_bn == 0 && kpg % oc_bn == 0,
        || format!("{WHAT}: blocking {ic_bn}/{oc_bn} does not divide {cpg}/{kpg}"),
    )?;
    let [oh, ow] = w.out_hw([h, wd], [kh, kw]);
    check(oh > 0 && ow > 0, || format!("{WHAT}: empty output"))?;
    let [pt, pl, pb, pr] = w.padding;
    let padded = if w.padding == [0; 4] {
        data.clone()
    } else {
        pad(
            b,
            data,
            &[0, 0, pt, pl],
            &[0, 0, pb, pr],
            Expr::f32(0.0),
            "data_pad",
            PadFlavor::Python,
        )?
    };
    let (ph, pw) = (padded.shape[2], padded.shape[3]);
    let data_vec = b.elementwise(
        "data_vec",
        "",
        named_axes(
            &["g", "n", "C", "h", "c", "w"],
            &[groups, n, cpg / ic_bn, ph, ic_bn, pw],
        ),
        |v| {
            let channel = v[2].clone() * ic_bn + v[4].clone() + Expr::from(cpg) * v[0].clone();
            padded.at(vec![v[1].clone(), channel, v[3].clone(), v[5].clone()])
        },
    );
    let kernel_vec = b.elementwise(
        "kernel_vec",
        "",
        named_axes(
            &["g", "out_channel", "in_channel", "h", "w", "ci", "co"],
            &[groups, kpg / oc_bn, cpg / ic_bn, kh, kw, ic_bn, oc_bn],
        ),
        |v| {
            let out = v[1].clone() * oc_bn + v[6].clone() + v[0].clone() * kpg;
            let inp = v[2].clone() * ic_bn + v[5].clone();
            kernel.at(vec![out, inp, v[3].clone(), v[4].clone()])
        },
    );
    let conv = b.reduce(
        "conv",
        "",
        named_axes(
            &["g", "n", "oc_chunk", "oh", "ow", "oc_block"],
            &[groups, n, kpg / oc_bn, oh, ow, oc_bn],
        ),
        vec![
            IterVar::new("ic", cpg),
            IterVar::new("kh", kh),
            IterVar::new("kw", kw),
        ],
        Combiner::Sum,
        ComputeAttrs::default(),
        |v, r| {
            let (ic, rh, rw) = (r[0].clone(), r[1].clone(), r[2].clone());
            let chunk = Expr::floordiv(ic.clone(), ic_bn);
            let block = Expr::floormod(ic, ic_bn);
            data_vec.at(vec![
                v[0].clone(),
                v[1].clone(),
                chunk.clone(),
                window_index(v[3].clone(), w.stride[0], rh.clone(), w.dilation[0]),
                block.clone(),
                window_index(v[4].clone(), w.stride[1], rw.clone(), w.dilation[1]),
            ]) * kernel_vec.at(vec![
                v[0].clone(),
                v[2].clone(),
                chunk,
                rh,
                rw,
                block,
                v[5].clone(),
            ])
        },
    );
    Ok(b.elementwise(
        "output_unpack",
        "group_conv2d_nchw",
        named_axes(&["n", "c", "h", "w"], &[n, o, oh, ow]),
        |v| {
            let ch = v[1].clone();
            conv.at(vec![
                Expr::floordiv(ch.clone(), kpg),
                v[0].clone(),
                Expr::floormod(Expr::floordiv(ch.clone(), oc_bn), kpg / oc_bn),
                v[2].clone(),
                v[3].clone(),
                Expr::floormod(Expr::floormod(ch, oc_bn), kpg),
            ])
        },
    ))
}

/// Recognition: NCHW data `[N, C, H, W]`, OIHW kernel `[O, C / groups, KH, KW]` with
/// groups > 1, blocked by the fallback rule of each x86 lane count (4, 8, 16).
pub fn candidates(a: &[i64], b: &[i64], out: &[i64]) -> Vec<Anchor> {
    let ranks = (a.len(), b.len(), out.len()) == (4, 4, 4);
    if !ranks || a[0] != out[0] || b[0] != out[1] || b[1] <= 0 || a[1] % b[1] != 0 {
        return vec![];
    }
    let groups = a[1] / b[1];
    if groups < 2 || b[0] % groups != 0 {
        return vec![];
    }
    let mut blockings: Vec<GroupBlocking> = Vec::new();
    for lanes in [4, 8, 16] {
        let bl = GroupBlocking::fallback(lanes, b[1], b[0] / groups);
        if !blockings.contains(&bl) {
            blockings.push(bl);
        }
    }
    conv_windows([a[2], a[3]], [b[2], b[3]], [out[2], out[3]])
        .into_iter()
        .flat_map(|window| {
            blockings
                .iter()
                .map(move |&blocking| Anchor::GroupConv2dNchwSpatialPack {
                    window,
                    groups,
                    blocking,
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::dag_hash;
    use crate::ops::{EpilogueOp, WorkloadSpec};

    #[test]
    fn fallback_blocking_follows_the_lanes() {
        let bl = |ic_bn, oc_bn| GroupBlocking { ic_bn, oc_bn };
        assert_eq!(GroupBlocking::fallback(4, 4, 4), bl(4, 4));
        assert_eq!(GroupBlocking::fallback(8, 3, 12), bl(3, 6));
        assert_eq!(GroupBlocking::fallback(16, 8, 24), bl(8, 12));
    }

    /// resnext_50's grouped conv + bias + relu (thaisacs/TVM-Ansor-Bench, TVM >= 0.10).
    #[test]
    fn hash_matches_real_key() {
        let spec = WorkloadSpec::new(
            Anchor::GroupConv2dNchwSpatialPack {
                window: Window2d::simple(1, 1),
                groups: 32,
                blocking: GroupBlocking { ic_bn: 4, oc_bn: 4 },
            },
            vec![
                EpilogueOp::Add {
                    operand_first: false,
                },
                EpilogueOp::Relu,
            ],
        );
        let ins = [vec![1, 128, 56, 56], vec![128, 4, 3, 3], vec![1, 128, 1, 1]];
        let dag = spec.build(Era::V010, &ins).unwrap();
        assert_eq!(dag_hash(&dag), "a7d8a7b2510d87524cfd3170a3ce0327");
    }
}
