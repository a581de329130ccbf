//! Candidate workloads for a key's shapes: which anchor op (and attributes) and which
//! fused epilogue chain could have produced these input/output shapes. Candidates are
//! ordered most-likely first; recognition renders each one's PrintDAG and compares md5.
use super::windows::{conv_windows, fits_unpadded, pool_windows, solve_padding};
use crate::ops::epilogue::broadcast_shape;
use crate::ops::{Anchor, EpilogueOp, PoolAttrs, PoolKind, PoolLayout, ScalarOp, WorkloadSpec};

/// A workload spec plus its inputs in canonical order.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub spec: WorkloadSpec,
    pub canonical: Vec<Vec<i64>>,
}

/// Anchor ops whose own inputs have these shapes and whose output has shape `out`.
pub fn anchors(ins: &[Vec<i64>], out: &[i64]) -> Vec<Anchor> {
    match ins {
        [x] => one_input_anchors(x, out),
        [a, b] => two_input_anchors(a, b, out),
        _ => vec![],
    }
}

fn one_input_anchors(x: &[i64], out: &[i64]) -> Vec<Anchor> {
    let mut v = Vec::new();
    // pooling: NCHW[x]c (5-D), NHWC and NCHW (4-D)
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
            v.push(pool(PoolKind::Max, kernel, stride, padding, layout));
        }
        for (kernel, stride, padding) in pool_windows(in_hw, out_hw, true) {
            for count_include_pad in [true, false] {
                v.push(pool(
                    PoolKind::Avg { count_include_pad },
                    kernel,
                    stride,
                    padding,
                    layout,
                ));
            }
        }
    }
    if x == out {
        let r = x.len();
        v.extend((0..r).rev().map(|axis| Anchor::Softmax { axis }));
    }
    if let Some((axes, keepdims)) = reduced_axes(x, out) {
        v.push(Anchor::Mean { axes, keepdims });
    }
    v
}

fn pool(
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

/// Axes reduced from `x` to `out`: keepdims (same rank, 1s where reduced) or dropped dims.
fn reduced_axes(x: &[i64], out: &[i64]) -> Option<(Vec<usize>, bool)> {
    if x.len() == out.len() {
        let axes: Vec<usize> = (0..x.len()).filter(|&i| x[i] != out[i]).collect();
        let ok = !axes.is_empty()
            && axes.iter().all(|&i| out[i] == 1)
            && (0..x.len()).all(|i| axes.contains(&i) || x[i] == out[i]);
        return ok.then_some((axes, true));
    }
    if out.len() < x.len() && !out.is_empty() {
        // dropped dims: the subset of axes whose removal leaves `out`, trailing axes first
        let n = x.len();
        let drop = n - out.len();
        let mut masks: Vec<u32> = (0u32..(1 << n))
            .filter(|m| m.count_ones() as usize == drop)
            .collect();
        masks.sort_by_key(|m| std::cmp::Reverse(*m));
        for m in masks {
            let kept: Vec<i64> = (0..n).filter(|i| m & (1 << i) == 0).map(|i| x[i]).collect();
            if kept == out {
                return Some(((0..n).filter(|i| m & (1 << i) != 0).collect(), false));
            }
        }
    }
    None
}

fn two_input_anchors(a: &[i64], b: &[i64], out: &[i64]) -> Vec<Anchor> {
    let mut v = Vec::new();
    match (a.len(), b.len(), out.len()) {
        (4, 4, 4) => {
            // NHWC data [N,H,W,C]
            if a[0] == out[0] {
                let in_hw = [a[1], a[2]];
                let out_hw = [out[1], out[2]];
                // winograd: pre-transformed kernel [alpha, alpha, CO, CI], 3x3 stride 1
                if b[0] == b[1] && (4..=8).contains(&b[0]) && b[3] == a[3] && b[2] == out[3] {
                    let pads: Vec<Option<(i64, i64)>> = (0..2)
                        .map(|i| {
                            solve_padding(in_hw[i], 3, 1, 1, out_hw[i])
                                .or(fits_unpadded(in_hw[i], 3, 1, 1, out_hw[i]).then_some((0, 0)))
                        })
                        .collect();
                    if let (Some(h), Some(w)) = (pads[0], pads[1]) {
                        v.push(Anchor::WinogradNhwc {
                            padding: [h.0, w.0, h.1, w.1],
                        });
                    }
                }
                // conv2d NHWC, kernel HWIO [KH,KW,CI,CO]
                if b[2] == a[3] && b[3] == out[3] {
                    v.extend(
                        conv_windows(in_hw, [b[0], b[1]], out_hw)
                            .into_iter()
                            .map(Anchor::Conv2dNhwc),
                    );
                }
                // grouped conv2d NHWC, kernel HWIO [KH,KW,CI/g,CO]
                if b[2] > 0 && b[2] < a[3] && a[3] % b[2] == 0 && b[3] == out[3] {
                    let groups = a[3] / b[2];
                    if out[3] % groups == 0 {
                        v.extend(
                            conv_windows(in_hw, [b[0], b[1]], out_hw)
                                .into_iter()
                                .map(|window| Anchor::GroupConv2dNhwc { window, groups }),
                        );
                    }
                }
                // depthwise NHWC, kernel [KH,KW,C,M]
                if b[2] == a[3] && a[3] * b[3] == out[3] {
                    v.extend(
                        conv_windows(in_hw, [b[0], b[1]], out_hw)
                            .into_iter()
                            .map(Anchor::DepthwiseNhwc),
                    );
                }
            }
            // NCHW data [N,C,H,W], kernel OIHW [O, C/g, KH, KW]
            if a[0] == out[0] && b[0] == out[1] && b[1] > 0 && a[1] % b[1] == 0 {
                let groups = a[1] / b[1];
                if b[0] % groups == 0 {
                    for w in conv_windows([a[2], a[3]], [b[2], b[3]], [out[2], out[3]]) {
                        v.push(Anchor::Conv2dNchw { window: w, groups });
                    }
                }
            }
        }
        // NCHWc data [N,ICc,H,W,ib], kernel [OCc, ICc/g, KH, KW, ib, ob]
        (5, 6, 5) if a[0] == out[0] && b[0] == out[1] && b[5] == out[4] => {
            let windows = conv_windows([a[2], a[3]], [b[2], b[3]], [out[2], out[3]]);
            if b[1] == 1 && b[4] == 1 && b[0] * b[5] == a[1] * a[4] {
                v.extend(windows.iter().copied().map(Anchor::DepthwiseNchwc));
            }
            if b[4] == a[4] {
                v.extend(windows.into_iter().map(Anchor::Conv2dNchwc));
            }
        }
        (2, 2, 2) if a[1] == b[1] && out == [a[0], b[0]] => v.push(Anchor::Dense),
        (3, 3, 3)
            if a[2] == b[2] && out[1] == a[1] && out[2] == b[1] && out[0] == a[0].max(b[0]) =>
        {
            v.push(Anchor::BatchMatmul)
        }
        _ => {}
    }
    // variance(x, mean): mean keeps reduced dims as 1
    if a.len() == b.len() {
        if let Some((axes, true)) = reduced_axes(a, b) {
            if let Some((_, keepdims)) =
                reduced_axes(a, out).or_else(|| (out == b).then(|| (axes.clone(), true)))
            {
                for unbiased in [false, true] {
                    v.push(Anchor::Variance {
                        axes: axes.clone(),
                        keepdims,
                        unbiased,
                    });
                }
            }
        }
    }
    v
}

/// Which chains a pass over the candidates enumerates. The base pass has the chains of
/// every corpus key (bias / residual adds, BN multiplies, relu, relu6, tanh) and runs
/// first, so recognizing those keys costs what it always did; the extended pass adds the
/// other element-wise ops ttdb can build and is only reached by keys the base pass misses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    Base,
    Extended,
}

/// Epilogue op kinds that fit an operand of shape `operand` against output `out`, for an
/// operand-after (`first == false`) or operand-first position.
fn operand_ops(operand: &[i64], out: &[i64], first: bool, pass: Pass) -> Vec<EpilogueOp> {
    let Some(shape) = broadcast_shape(operand, out) else {
        return vec![];
    };
    if shape != out {
        return vec![];
    }
    let f = first;
    let mut v = Vec::new();
    if !first && operand.len() < out.len() {
        v.push(EpilogueOp::ExpandAdd);
    }
    v.push(EpilogueOp::Add { operand_first: f });
    v.push(EpilogueOp::Multiply { operand_first: f });
    if pass == Pass::Extended {
        v.push(EpilogueOp::Subtract { operand_first: f });
        v.push(EpilogueOp::Divide { operand_first: f });
        v.push(EpilogueOp::Power { operand_first: f });
    }
    v
}

/// Ops tried at the end of a chain: at most one, or in the extended pass one of the
/// activations relay expands into several ops; `n` is the number of the value the tail
/// starts from (0: the anchor's output), which a DAG tail reads again.
fn tails(pass: Pass, n: usize) -> Vec<Vec<EpilogueOp>> {
    let mut v: Vec<Vec<EpilogueOp>> = vec![
        vec![],
        vec![EpilogueOp::Relu],
        vec![EpilogueOp::Clip { lo: 0.0, hi: 6.0 }],
        vec![EpilogueOp::Tanh],
    ];
    if pass == Pass::Base {
        return v;
    }
    v.extend(
        [
            EpilogueOp::Sigmoid,
            EpilogueOp::Exp,
            EpilogueOp::Erf,
            EpilogueOp::Sqrt,
        ]
        .map(|op| vec![op]),
    );
    // A rank-0 constant prints its value into the PrintDAG text, so only values tried here
    // can match: small ones models use (squares, halves, relu6's 6).
    let scalar = |op, value: f64| EpilogueOp::Scalar {
        op,
        value,
        operand_first: false,
    };
    for op in ScalarOp::ALL {
        for value in [0.5, 2.0, 3.0, 6.0] {
            v.push(vec![scalar(op, value)]);
        }
    }
    for op in [ScalarOp::Subtract, ScalarOp::Divide] {
        v.push(vec![EpilogueOp::Scalar {
            op,
            value: 1.0,
            operand_first: true,
        }]);
    }
    v.extend(dag_tails(n));
    v
}

/// The activations relay's ONNX frontend expands into several ops: SiLU `x * sigmoid(x)`
/// (either operand order), hardswish `x * clip(x * 1/6 + 0.5, 0, 1)` and hardsigmoid
/// `clip(x * alpha + beta, 0, 1)` (alpha 1/6 as PyTorch exports it, or ONNX's default
/// 0.2; without the multiply when FoldScaleAxis moved it into the weights), constants as
/// float32.
fn dag_tails(n: usize) -> Vec<Vec<EpilogueOp>> {
    let Ok(with) = u8::try_from(n) else {
        return vec![];
    };
    let scalar = |op, value: f64| EpilogueOp::Scalar {
        op,
        value: value as f32 as f64,
        operand_first: false,
    };
    let times_x = |with_first| EpilogueOp::Rejoin {
        op: ScalarOp::Multiply,
        with,
        with_first,
    };
    let clip = EpilogueOp::Clip { lo: 0.0, hi: 1.0 };
    let sixth = scalar(ScalarOp::Multiply, 1.0 / 6.0);
    let half = scalar(ScalarOp::Add, 0.5);
    vec![
        vec![EpilogueOp::Sigmoid, times_x(true)],
        vec![EpilogueOp::Sigmoid, times_x(false)],
        vec![sixth, half, clip, times_x(true)],
        vec![half, clip],
        vec![sixth, half, clip],
        vec![scalar(ScalarOp::Multiply, 0.2), half, clip],
    ]
}

/// Whether the base pass already enumerates this chain.
fn in_base(chain: &[EpilogueOp]) -> bool {
    chain.iter().all(|op| {
        matches!(
            op,
            EpilogueOp::Add { .. }
                | EpilogueOp::Multiply { .. }
                | EpilogueOp::ExpandAdd
                | EpilogueOp::Relu
                | EpilogueOp::Clip { .. }
                | EpilogueOp::Tanh
        )
    })
}

/// All candidates of one pass for key-order input shapes `ins` and output `out`, most
/// likely first: two-input anchors before one-input ones, operand-after before
/// operand-first, and for each chain every anchor. The extended pass leaves out the
/// chains of the base pass.
pub fn candidates(ins: &[Vec<i64>], out: &[i64], pass: Pass) -> Vec<Candidate> {
    let mut result = Vec::new();
    for k in [2usize, 1] {
        if ins.len() < k {
            continue;
        }
        let m = ins.len() - k;
        // operand-first flags, all-after first
        for mask in 0u32..(1 << m) {
            let firsts: Vec<bool> = (0..m).map(|j| mask & (1 << j) != 0).collect();
            // key order of canonical indices for these flags (see WorkloadSpec::key_order)
            let skeleton = WorkloadSpec::new(
                if k == 2 {
                    Anchor::Dense
                } else {
                    Anchor::Softmax { axis: 0 }
                },
                firsts
                    .iter()
                    .map(|&f| EpilogueOp::Add { operand_first: f })
                    .collect(),
            );
            let Ok(canonical) = skeleton.canonical_inputs(ins) else {
                continue;
            };
            let anchor_list = anchors(&canonical[..k], out);
            if anchor_list.is_empty() {
                continue;
            }
            let per_operand: Vec<Vec<EpilogueOp>> = (0..m)
                .map(|j| operand_ops(&canonical[k + j], out, firsts[j], pass))
                .collect();
            if per_operand.iter().any(Vec::is_empty) {
                continue;
            }
            for ops in cartesian(&per_operand) {
                for tail in tails(pass, ops.len()) {
                    let mut epilogue = ops.clone();
                    epilogue.extend(tail);
                    if pass == Pass::Extended && in_base(&epilogue) {
                        continue;
                    }
                    for anchor in &anchor_list {
                        result.push(Candidate {
                            spec: WorkloadSpec::new(anchor.clone(), epilogue.clone()),
                            canonical: canonical.clone(),
                        });
                    }
                }
            }
        }
    }
    if pass == Pass::Extended {
        result.extend(prologue_candidates(ins, out));
    }
    result
}

/// Prologues tried before a one-input reduction (extended pass): LayerNorm's `x^2`.
fn prologue_candidates(ins: &[Vec<i64>], out: &[i64]) -> Vec<Candidate> {
    let [x] = ins else {
        return vec![];
    };
    let square = EpilogueOp::Scalar {
        op: ScalarOp::Power,
        value: 2.0,
        operand_first: false,
    };
    one_input_anchors(x, out)
        .into_iter()
        .filter(Anchor::takes_prologue)
        .map(|a| Candidate {
            spec: WorkloadSpec::new(a, vec![]).with_prologue(vec![square]),
            canonical: ins.to_vec(),
        })
        .collect()
}

fn cartesian(choices: &[Vec<EpilogueOp>]) -> Vec<Vec<EpilogueOp>> {
    choices.iter().fold(vec![vec![]], |acc, opts| {
        acc.iter()
            .flat_map(|prefix| {
                opts.iter().map(move |o| {
                    let mut v = prefix.clone();
                    v.push(*o);
                    v
                })
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Window2d;

    #[test]
    fn conv_bias_relu_is_among_the_candidates() {
        let ins = vec![vec![1, 56, 56, 64], vec![3, 3, 64, 64], vec![1, 1, 1, 64]];
        let c = candidates(&ins, &[1, 56, 56, 64], Pass::Base);
        let want = WorkloadSpec::new(
            Anchor::Conv2dNhwc(Window2d::simple(1, 1)),
            vec![
                EpilogueOp::Add {
                    operand_first: false,
                },
                EpilogueOp::Relu,
            ],
        );
        assert!(c.iter().any(|x| x.spec == want), "{} candidates", c.len());
    }

    #[test]
    fn reduced_axes_keepdims_and_dropped() {
        assert_eq!(
            reduced_axes(&[1, 14, 768], &[1, 14, 1]),
            Some((vec![2], true))
        );
        assert_eq!(reduced_axes(&[2, 3, 4], &[2, 3]), Some((vec![2], false)));
        assert_eq!(reduced_axes(&[2, 3], &[2, 3]), None);
    }
}
