//! The op registry: a [`WorkloadSpec`] names an anchor op (the reduction a relay task is
//! built around) with its attributes plus a chain of fused element-wise epilogue ops, and
//! builds the exact TOPI DAG for any TVM [`Era`].
//!
//! Inputs are given in *canonical order*: the anchor's own inputs (data, weight), then the
//! epilogue operands in the order the chain applies them. Relay names placeholders in that
//! order (`p0, p1, ...`), but the stage order (and so the key's argument order) puts the
//! operands of operand-first ops (`add(residual, x)`) before everything else:
//! [`WorkloadSpec::key_order`].
use super::conv2d::{conv2d_nchw, conv2d_nhwc, group_conv2d_nhwc};
use super::conv2d_nchwc::conv2d_nchwc;
use super::dense::{batch_matmul, dense};
use super::depthwise::{depthwise_conv2d_nchwc, depthwise_conv2d_nhwc};
pub use super::epilogue_op::{EpilogueOp, ScalarOp};
use super::era::Era;
use super::group_conv2d_nchw::{group_conv2d_nchw_spatial_pack, GroupBlocking};
use super::pool::{adaptive_pool2d, pool2d, PoolAttrs, PoolKind, PoolLayout};
use super::reduction::{mean, softmax, variance};
use super::util::{check, Window2d};
use super::winograd::conv2d_winograd_nhwc;
use crate::ir::{BuildError, DType, Dag, DagBuilder, Tensor};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The reduction at the heart of a task, with its attributes.
#[derive(Clone, Debug, PartialEq)]
pub enum Anchor {
    Conv2dNhwc(Window2d),
    /// `groups > 1` is `group_conv2d_nchw`.
    Conv2dNchw {
        window: Window2d,
        groups: i64,
    },
    Conv2dNchwc(Window2d),
    /// x86's grouped NCHW conv (`group_conv2d_nchw.x86`, groups > 1, kernel OIHW): data and
    /// kernel packed in blocks of `blocking`.
    GroupConv2dNchwSpatialPack {
        window: Window2d,
        groups: i64,
        blocking: GroupBlocking,
    },
    /// `group_conv2d_nhwc` (groups > 1, kernel HWIO `[KH, KW, CI/groups, CO]`).
    GroupConv2dNhwc {
        window: Window2d,
        groups: i64,
    },
    DepthwiseNhwc(Window2d),
    DepthwiseNchwc(Window2d),
    /// Pre-transformed kernel `[alpha, alpha, CO, CI]`; 3x3, stride 1.
    WinogradNhwc {
        padding: [i64; 4],
    },
    Dense,
    /// The weight is `[B, N, K]` with `transpose_b`, else `[B, K, N]`.
    BatchMatmul {
        transpose_b: bool,
    },
    Pool(PoolAttrs),
    AdaptivePool {
        kind: PoolKind,
        layout: PoolLayout,
        out_hw: [i64; 2],
    },
    Softmax {
        axis: usize,
    },
    Mean {
        axes: Vec<usize>,
        keepdims: bool,
    },
    Variance {
        axes: Vec<usize>,
        keepdims: bool,
        unbiased: bool,
    },
}

impl Anchor {
    pub fn num_inputs(&self) -> usize {
        match self {
            Anchor::Pool(_)
            | Anchor::AdaptivePool { .. }
            | Anchor::Softmax { .. }
            | Anchor::Mean { .. } => 1,
            _ => 2,
        }
    }

    /// Op class name used in signatures (era-independent).
    pub fn class_name(&self) -> String {
        match self {
            Anchor::Conv2dNhwc(_) => "conv2d_nhwc".into(),
            Anchor::Conv2dNchw { groups: 1, .. } => "conv2d_nchw".into(),
            Anchor::Conv2dNchw { .. } => "group_conv2d_nchw".into(),
            Anchor::Conv2dNchwc(_) => "conv2d_nchwc".into(),
            Anchor::GroupConv2dNchwSpatialPack { .. } => "group_conv2d_nchw_spatial_pack".into(),
            Anchor::GroupConv2dNhwc { .. } => "group_conv2d_nhwc".into(),
            Anchor::DepthwiseNhwc(_) => "depthwise_conv2d_nhwc".into(),
            Anchor::DepthwiseNchwc(_) => "depthwise_conv2d_nchwc".into(),
            Anchor::WinogradNhwc { .. } => "conv2d_winograd_nhwc".into(),
            Anchor::Dense => "dense".into(),
            Anchor::BatchMatmul { .. } => "batch_matmul".into(),
            Anchor::Pool(p) => match p.kind {
                PoolKind::Max => "pool_max".into(),
                PoolKind::Avg { .. } => "pool_avg".into(),
            },
            Anchor::AdaptivePool {
                kind: PoolKind::Max,
                ..
            } => "adaptive_pool_max".into(),
            Anchor::AdaptivePool { .. } => "adaptive_pool_avg".into(),
            Anchor::Softmax { .. } => "softmax".into(),
            Anchor::Mean { .. } => "mean".into(),
            Anchor::Variance { .. } => "variance".into(),
        }
    }

    /// Whether element-wise producers of its data fuse into it (relay `kCommReduce`).
    pub fn takes_prologue(&self) -> bool {
        matches!(self, Anchor::Mean { .. })
    }

    /// Whether TVM of that era has this op (grouped conv2d_NCHWc only from v0.10 on).
    pub fn exists_in(&self, era: Era, inputs: &[Vec<i64>]) -> bool {
        match self {
            Anchor::Conv2dNchwc(_) if era < Era::V010 => {
                let (d, k) = (&inputs[0], &inputs[1]);
                d.len() == 5 && k.len() == 6 && d[1] * d[4] == k[1] * k[4]
            }
            Anchor::Pool(p) if era == Era::V07 => p.dilation == [1, 1],
            // The generic `topi.nn.conv` behind it came with v0.9.
            Anchor::GroupConv2dNhwc { .. } => era > Era::V08,
            Anchor::BatchMatmul { transpose_b: false } => era > Era::V07,
            _ => true,
        }
    }

    /// Data layout in TVM notation, from the data shape.
    pub fn layout(&self, data: &[i64]) -> String {
        match self {
            Anchor::Conv2dNhwc(_)
            | Anchor::GroupConv2dNhwc { .. }
            | Anchor::DepthwiseNhwc(_)
            | Anchor::WinogradNhwc { .. } => "NHWC".into(),
            Anchor::Conv2dNchw { .. } | Anchor::GroupConv2dNchwSpatialPack { .. } => "NCHW".into(),
            Anchor::Conv2dNchwc(_) | Anchor::DepthwiseNchwc(_) => format!("NCHW{}c", data[4]),
            Anchor::Dense => "NC".into(),
            Anchor::BatchMatmul { transpose_b: true } => "BNK".into(),
            Anchor::BatchMatmul { transpose_b: false } => "BKN".into(),
            Anchor::Pool(PoolAttrs { layout, .. }) | Anchor::AdaptivePool { layout, .. } => {
                match layout {
                    PoolLayout::Nhwc => "NHWC".into(),
                    PoolLayout::Nchw => "NCHW".into(),
                    PoolLayout::Nchwc => format!("NCHW{}c", data[4]),
                }
            }
            Anchor::Softmax { .. } | Anchor::Mean { .. } | Anchor::Variance { .. } => String::new(),
        }
    }

    /// Attributes for the signature (all era-independent).
    pub fn attrs(&self, inputs: &[Vec<i64>]) -> BTreeMap<String, Value> {
        let mut m = BTreeMap::new();
        let mut window = |w: &Window2d, kernel: [i64; 2]| {
            m.insert("stride".into(), json!(w.stride));
            m.insert("padding".into(), json!(w.padding));
            m.insert("dilation".into(), json!(w.dilation));
            m.insert("kernel".into(), json!(kernel));
        };
        match self {
            Anchor::Conv2dNhwc(w)
            | Anchor::DepthwiseNhwc(w)
            | Anchor::GroupConv2dNhwc { window: w, .. } => window(w, [inputs[1][0], inputs[1][1]]),
            Anchor::Conv2dNchw { window: w, .. } => window(w, [inputs[1][2], inputs[1][3]]),
            Anchor::GroupConv2dNchwSpatialPack {
                window: w,
                blocking,
                ..
            } => {
                window(w, [inputs[1][2], inputs[1][3]]);
                m.insert("ic_bn".into(), json!(blocking.ic_bn));
                m.insert("oc_bn".into(), json!(blocking.oc_bn));
            }
            Anchor::Conv2dNchwc(w) | Anchor::DepthwiseNchwc(w) => {
                window(w, [inputs[1][2], inputs[1][3]])
            }
            Anchor::WinogradNhwc { padding } => {
                window(&Window2d::new(1, *padding, 1), [3, 3]);
                m.insert("tile_size".into(), json!(inputs[1][0] - 2));
            }
            Anchor::Pool(p) => {
                m.insert("pool".into(), json!(p.kernel));
                m.insert("stride".into(), json!(p.stride));
                m.insert("padding".into(), json!(p.padding));
                m.insert("dilation".into(), json!(p.dilation));
                m.insert("ceil_mode".into(), json!(p.ceil_mode));
                if let PoolKind::Avg { count_include_pad } = p.kind {
                    m.insert("count_include_pad".into(), json!(count_include_pad));
                }
            }
            Anchor::AdaptivePool { out_hw, .. } => {
                m.insert("output_size".into(), json!(out_hw));
            }
            Anchor::Softmax { axis } => {
                m.insert("axis".into(), json!(axis));
            }
            Anchor::Mean { axes, keepdims } => {
                m.insert("axis".into(), json!(axes));
                m.insert("keepdims".into(), json!(keepdims));
            }
            Anchor::Variance {
                axes,
                keepdims,
                unbiased,
            } => {
                m.insert("axis".into(), json!(axes));
                m.insert("keepdims".into(), json!(keepdims));
                m.insert("unbiased".into(), json!(unbiased));
            }
            Anchor::Dense | Anchor::BatchMatmul { .. } => {}
        }
        if let Anchor::Conv2dNchw { groups, .. }
        | Anchor::GroupConv2dNhwc { groups, .. }
        | Anchor::GroupConv2dNchwSpatialPack { groups, .. } = self
        {
            m.insert("groups".into(), json!(groups));
        }
        if matches!(
            self,
            Anchor::Conv2dNhwc(_) | Anchor::Conv2dNchwc(_) | Anchor::WinogradNhwc { .. }
        ) {
            let groups = match self {
                Anchor::Conv2dNchwc(_) => {
                    inputs[0][1] * inputs[0][4] / (inputs[1][1] * inputs[1][4])
                }
                _ => 1,
            };
            m.insert("groups".into(), json!(groups));
        }
        m
    }

    fn build(&self, b: &mut DagBuilder, era: Era, ins: &[Tensor]) -> Result<Tensor, BuildError> {
        match self {
            Anchor::Conv2dNhwc(w) => conv2d_nhwc(b, era, &ins[0], &ins[1], w),
            Anchor::Conv2dNchw { window, groups } => {
                conv2d_nchw(b, era, &ins[0], &ins[1], window, *groups)
            }
            Anchor::Conv2dNchwc(w) => conv2d_nchwc(b, era, &ins[0], &ins[1], w),
            Anchor::GroupConv2dNchwSpatialPack {
                window,
                groups,
                blocking,
            } => {
                group_conv2d_nchw_spatial_pack(b, era, &ins[0], &ins[1], window, *groups, *blocking)
            }
            Anchor::GroupConv2dNhwc { window, groups } => {
                group_conv2d_nhwc(b, era, &ins[0], &ins[1], window, *groups)
            }
            Anchor::DepthwiseNhwc(w) => depthwise_conv2d_nhwc(b, era, &ins[0], &ins[1], w),
            Anchor::DepthwiseNchwc(w) => depthwise_conv2d_nchwc(b, era, &ins[0], &ins[1], w),
            Anchor::WinogradNhwc { padding } => {
                conv2d_winograd_nhwc(b, era, &ins[0], &ins[1], *padding)
            }
            Anchor::Dense => dense(b, era, &ins[0], &ins[1]),
            Anchor::BatchMatmul { transpose_b } => {
                batch_matmul(b, era, &ins[0], &ins[1], *transpose_b)
            }
            Anchor::Pool(p) => pool2d(b, era, &ins[0], p),
            Anchor::AdaptivePool {
                kind,
                layout,
                out_hw,
            } => adaptive_pool2d(b, era, &ins[0], *out_hw, *kind, *layout),
            Anchor::Softmax { axis } => softmax(b, era, &ins[0], *axis),
            Anchor::Mean { axes, keepdims } => mean(b, era, &ins[0], axes, *keepdims),
            Anchor::Variance {
                axes,
                keepdims,
                unbiased,
            } => variance(b, era, &ins[0], &ins[1], axes, *keepdims, *unbiased),
        }
    }
}

/// A relay task: anchor + fused epilogue, for one dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadSpec {
    pub anchor: Anchor,
    /// Element-wise ops applied to a reduction's data before it reduces (FuseOps fuses
    /// element-wise producers into a `kCommReduce` consumer: `mean(power(x, 2f))` of
    /// LayerNorm's variance). Operand-free ops only (unary, scalar constants), so the
    /// task's inputs are the anchor's; empty for every other anchor.
    pub prologue: Vec<EpilogueOp>,
    pub epilogue: Vec<EpilogueOp>,
    pub dtype: DType,
}

impl WorkloadSpec {
    pub fn new(anchor: Anchor, epilogue: Vec<EpilogueOp>) -> WorkloadSpec {
        WorkloadSpec {
            anchor,
            prologue: Vec::new(),
            epilogue,
            dtype: DType::F32,
        }
    }

    /// The same task with `prologue` applied to the reduction's data.
    pub fn with_prologue(mut self, prologue: Vec<EpilogueOp>) -> WorkloadSpec {
        self.prologue = prologue;
        self
    }

    pub fn num_inputs(&self) -> usize {
        self.anchor.num_inputs() + self.epilogue.iter().filter(|e| e.takes_operand()).count()
    }

    /// `+`-joined class in data-flow order: `conv2d_nchwc+add+relu`, `power_scalar+mean`.
    pub fn op_class(&self) -> String {
        self.prologue
            .iter()
            .map(|e| e.class_name().to_string())
            .chain(std::iter::once(self.anchor.class_name()))
            .chain(self.epilogue.iter().map(|e| e.class_label()))
            .collect::<Vec<_>>()
            .join("+")
    }

    /// Canonical input indices in key (stage) order: operands of operand-first ops, latest
    /// op first, then the anchor inputs, then the other operands in chain order. This is
    /// where a post-order DFS from the output meets the placeholders.
    pub fn key_order(&self) -> Vec<usize> {
        let k = self.anchor.num_inputs();
        let mut first = Vec::new();
        let mut after = Vec::new();
        let mut idx = k;
        for op in &self.epilogue {
            if op.takes_operand() {
                if op.operand_first() {
                    first.push(idx);
                } else {
                    after.push(idx);
                }
                idx += 1;
            }
        }
        first.reverse();
        first.into_iter().chain(0..k).chain(after).collect()
    }

    /// Builds the DAG with canonical-order input shapes.
    pub fn build(&self, era: Era, inputs: &[Vec<i64>]) -> Result<Dag, BuildError> {
        check(inputs.len() == self.num_inputs(), || {
            format!(
                "{} needs {} inputs, got {}",
                self.op_class(),
                self.num_inputs(),
                inputs.len()
            )
        })?;
        check(self.anchor.exists_in(era, inputs), || {
            format!("{} does not exist in TVM {era}", self.anchor.class_name())
        })?;
        check(
            self.prologue.is_empty() || self.anchor.takes_prologue(),
            || format!("{} takes no fused prologue", self.anchor.class_name()),
        )?;
        check(self.prologue.iter().all(|op| !op.takes_operand()), || {
            "a prologue op with a tensor operand is not in ttdb's op registry".into()
        })?;
        let mut b = DagBuilder::new();
        let k = self.anchor.num_inputs();
        let mut anchor_ins: Vec<Tensor> = (0..k)
            .map(|i| b.placeholder(era.placeholder_name(i), &inputs[i], self.dtype))
            .collect();
        for op in &self.prologue {
            anchor_ins[0] = op.build(&mut b, &anchor_ins[0], None, self.dtype)?;
        }
        let mut prev = self.anchor.build(&mut b, era, &anchor_ins)?;
        // values[i]: the anchor's output (0), then each epilogue op's (for rejoins)
        let mut values = vec![prev.clone()];
        let mut next = k;
        for op in &self.epilogue {
            let operand = if op.takes_operand() {
                let t = b.placeholder(era.placeholder_name(next), &inputs[next], self.dtype);
                next += 1;
                Some(t)
            } else if let EpilogueOp::Rejoin { with, .. } = op {
                let v = values.get(usize::from(*with)).ok_or_else(|| {
                    BuildError(format!(
                        "{}: epilogue value {with} does not exist yet",
                        self.op_class()
                    ))
                })?;
                Some(v.clone())
            } else {
                None
            };
            prev = op.build(&mut b, &prev, operand.as_ref(), self.dtype)?;
            values.push(prev.clone());
        }
        Ok(b.finish(&[&prev]))
    }

    /// Builds from input shapes in key order.
    pub fn build_from_key_order(
        &self,
        era: Era,
        key_inputs: &[Vec<i64>],
    ) -> Result<Dag, BuildError> {
        self.build(era, &self.canonical_inputs(key_inputs)?)
    }

    /// Key-order input shapes -> canonical order.
    pub fn canonical_inputs(&self, key_inputs: &[Vec<i64>]) -> Result<Vec<Vec<i64>>, BuildError> {
        let order = self.key_order();
        check(key_inputs.len() == order.len(), || {
            format!(
                "{} needs {} inputs, key has {}",
                self.op_class(),
                order.len(),
                key_inputs.len()
            )
        })?;
        let mut canonical = vec![Vec::new(); order.len()];
        for (pos, &c) in order.iter().enumerate() {
            canonical[c] = key_inputs[pos].clone();
        }
        Ok(canonical)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::dag_hash;

    fn nhwc_conv(stride: i64, pad: i64) -> Anchor {
        Anchor::Conv2dNhwc(Window2d::simple(stride, pad))
    }

    /// Real key hashes (tvm_gallery resnet-50, ~Dec 2020 and Aug 2023 logs).
    #[test]
    fn conv_bias_relu_hashes_match_real_keys() {
        let spec = WorkloadSpec::new(
            nhwc_conv(2, 0),
            vec![
                EpilogueOp::Add {
                    operand_first: false,
                },
                EpilogueOp::Relu,
            ],
        );
        let ins = vec![
            vec![1, 14, 14, 1024],
            vec![1, 1, 1024, 512],
            vec![1, 1, 1, 512],
        ];
        let dag = spec.build(Era::V07, &ins).unwrap();
        assert_eq!(dag_hash(&dag), "de7d1695278cf52778b038e6573d7626");
        assert_eq!(dag.io_shapes().last().unwrap(), &vec![1, 7, 7, 512]);
        let spec = WorkloadSpec::new(
            nhwc_conv(2, 1),
            vec![
                EpilogueOp::Add {
                    operand_first: false,
                },
                EpilogueOp::Relu,
            ],
        );
        let dag = spec
            .build(
                Era::V010,
                &[vec![1, 56, 56, 64], vec![3, 3, 64, 128], vec![1, 1, 1, 128]],
            )
            .unwrap();
        assert_eq!(dag_hash(&dag), "07f9fcad27bdd3233f86fe35a5185d33");
    }

    #[test]
    fn residual_first_operand_leads_the_key_order() {
        let spec = WorkloadSpec::new(
            nhwc_conv(1, 0),
            vec![
                EpilogueOp::Add {
                    operand_first: false,
                },
                EpilogueOp::Add {
                    operand_first: true,
                },
            ],
        );
        assert_eq!(spec.key_order(), vec![3, 0, 1, 2]);
        let canonical = vec![
            vec![1, 14, 14, 384],
            vec![1, 1, 384, 64],
            vec![1, 1, 1, 64],
            vec![1, 14, 14, 64],
        ];
        let dag = spec.build(Era::V010, &canonical).unwrap();
        assert_eq!(dag.stages[0].name, "p3");
        assert_eq!(dag_hash(&dag), "b04f9e9adb8b039f3e5b3b278b8cb818");
        let key_order: Vec<Vec<i64>> = spec
            .key_order()
            .iter()
            .map(|&c| canonical[c].clone())
            .collect();
        assert_eq!(dag.placeholder_shapes(), key_order);
        assert_eq!(spec.canonical_inputs(&key_order).unwrap(), canonical);
    }

    #[test]
    fn winograd_hash_matches_real_key() {
        let spec = WorkloadSpec::new(
            Anchor::WinogradNhwc { padding: [1; 4] },
            vec![
                EpilogueOp::Add {
                    operand_first: false,
                },
                EpilogueOp::Relu,
            ],
        );
        let dag = spec
            .build(
                Era::V010,
                &[
                    vec![1, 14, 14, 256],
                    vec![6, 6, 256, 256],
                    vec![1, 1, 1, 256],
                ],
            )
            .unwrap();
        assert_eq!(dag_hash(&dag), "38552500208b25b4035682b0e93cbce3");
    }
}
