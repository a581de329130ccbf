//! Candidate workloads for a key's shapes: which anchor op (and attributes) and which
//! fused epilogue chain could have produced these input/output shapes. Candidates are
//! ordered most-likely first; recognition renders each one's PrintDAG and compares md5.
//! The anchors come from each op family's hook (in `ops/<family>.rs`), the multi-op
//! activations from `ops::activation`; this file orders them and enumerates the chains.
use crate::ops::epilogue::broadcast_shape;
use crate::ops::{
    activation, conv2d, conv2d_nchwc, dense, depthwise, group_conv2d_nchw, pool, reduction,
    winograd,
};
use crate::ops::{Anchor, EpilogueOp, ScalarOp, WorkloadSpec};

/// A workload spec plus its inputs in canonical order.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub spec: WorkloadSpec,
    pub canonical: Vec<Vec<i64>>,
}

/// Each family's anchors for a one-input key ([`one_input_anchors`]), in the order they are
/// tried: a family's hook is its line here.
/// A family's anchors for a key's shapes: (data, output) or (data, weight, output).
type OneInputFamily = fn(&[i64], &[i64]) -> Vec<Anchor>;
type TwoInputFamily = fn(&[i64], &[i64], &[i64]) -> Vec<Anchor>;

const ONE_INPUT_FAMILIES: &[OneInputFamily] = &[
    pool::anchor_candidates,
    reduction::softmax_candidates,
    reduction::mean_candidates,
];

/// Each family's anchors for a two-input key (data, weight / second operand), in the order
/// they are tried.
const TWO_INPUT_FAMILIES: &[TwoInputFamily] = &[
    winograd::candidates,
    conv2d::nhwc_candidates,
    conv2d::group_nhwc_candidates,
    depthwise::nhwc_candidates,
    conv2d::nchw_candidates,
    group_conv2d_nchw::candidates,
    depthwise::nchwc_candidates,
    conv2d_nchwc::candidates,
    dense::dense_candidates,
    dense::batch_matmul_candidates,
    reduction::variance_candidates,
];

/// Anchor ops whose own inputs have these shapes and whose output has shape `out`.
pub fn anchors(ins: &[Vec<i64>], out: &[i64]) -> Vec<Anchor> {
    match ins {
        [x] => one_input_anchors(x, out),
        [a, b] => TWO_INPUT_FAMILIES
            .iter()
            .flat_map(|family| family(a, b, out))
            .collect(),
        _ => vec![],
    }
}

fn one_input_anchors(x: &[i64], out: &[i64]) -> Vec<Anchor> {
    ONE_INPUT_FAMILIES
        .iter()
        .flat_map(|family| family(x, out))
        .collect()
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
        EpilogueOp::INTRINSIC_UNARY
            .into_iter()
            .filter(|op| !in_base(&[*op]))
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

/// The activations a frontend expands into several ops (`ops::activation`), each on the
/// value the tail starts from.
fn dag_tails(n: usize) -> Vec<Vec<EpilogueOp>> {
    let Ok(with) = u8::try_from(n) else {
        return vec![];
    };
    activation::ALL
        .iter()
        .flat_map(|a| (a.recognized)(with))
        .collect()
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
}
