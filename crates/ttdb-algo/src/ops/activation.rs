//! Activations that a frontend writes as several element-wise Relay ops, each one row:
//! its expansion as an epilogue chain ([`EpilogueOp`]s on the activation's input, which a
//! rejoin reads again) and the chains recognition tries for it. Recognition
//! (`recognize::candidates`, extended pass) tries every row's chains after an anchor; the
//! ONNX frontend lowers an op registered with a row from its expansion, so the two cannot
//! disagree. A new row needs nothing else here: fusion, DAG building, signatures and
//! codegen already know every [`EpilogueOp`].
//!
//! Constants are float32 (`relay.const` of a Python float), so each scalar is written as its
//! float32 value.
use super::epilogue_op::{EpilogueOp, ScalarOp};

/// One activation.
pub struct Activation {
    /// Lower-case name, for documentation and errors.
    pub name: &'static str,
    /// The frontend's expansion on value `x` (0: the anchor's output, `i`: the output of
    /// epilogue op `i - 1`).
    pub expansion: fn(x: u8) -> Vec<EpilogueOp>,
    /// Every chain recognition tries on value `x`, most likely first.
    pub recognized: fn(x: u8) -> Vec<Vec<EpilogueOp>>,
}

/// Every activation, in the order recognition tries them.
pub const ALL: &[&Activation] = &[&SILU, &HARDSWISH, &HARDSIGMOID, &MISH];

/// SiLU `x * sigmoid(x)` (PyTorch exports `Sigmoid` then `Mul`; either operand order).
pub const SILU: Activation = Activation {
    name: "silu",
    expansion: |x| vec![EpilogueOp::Sigmoid, times(x, true)],
    recognized: |x| {
        vec![
            vec![EpilogueOp::Sigmoid, times(x, true)],
            vec![EpilogueOp::Sigmoid, times(x, false)],
        ]
    },
};

/// Hardswish `x * clip(x * 1/6 + 0.5, 0, 1)`, `x` the left operand (Relay's ONNX frontend,
/// class `HardSwish`). Relay's PyTorch frontend writes `x * (relu6(x + 3) / 6)` instead
/// (the NHWC mobilenet_v3 records of thaisacs/TVM-Ansor-Bench).
pub const HARDSWISH: Activation = Activation {
    name: "hardswish",
    expansion: hardswish,
    recognized: |x| {
        vec![
            hardswish(x),
            [relu6_over_6(true), vec![times(x, true)]].concat(),
        ]
    },
};

fn hardswish(x: u8) -> Vec<EpilogueOp> {
    vec![
        scalar(ScalarOp::Multiply, 1.0 / 6.0),
        scalar(ScalarOp::Add, 0.5),
        unit_clip(),
        times(x, true),
    ]
}

/// Hardsigmoid `clip(x * alpha + beta, 0, 1)`: ONNX's default alpha 0.2, PyTorch's 1/6, or
/// no multiply at all when FoldScaleAxis moved it into the anchor's weights; beta 0.5. (The
/// ONNX frontend lowers it itself: alpha and beta are attributes.) Relay's PyTorch frontend
/// writes `relu6(x + 3) / 6`.
pub const HARDSIGMOID: Activation = Activation {
    name: "hardsigmoid",
    expansion: |_| {
        vec![
            scalar(ScalarOp::Multiply, 0.2),
            scalar(ScalarOp::Add, 0.5),
            unit_clip(),
        ]
    },
    recognized: |_| {
        let half = scalar(ScalarOp::Add, 0.5);
        vec![
            vec![half, unit_clip()],
            vec![scalar(ScalarOp::Multiply, 1.0 / 6.0), half, unit_clip()],
            vec![scalar(ScalarOp::Multiply, 0.2), half, unit_clip()],
            relu6_over_6(false),
            relu6_over_6(true),
        ]
    },
};

/// Relay's PyTorch frontend's hardsigmoid `relu6(x + 3) / 6`; without the `+ 3` when
/// FoldConstant merged it into the anchor's bias add (`add(add(conv, b), 3)`).
fn relu6_over_6(plus_three: bool) -> Vec<EpilogueOp> {
    let tail = [
        EpilogueOp::Clip { lo: 0.0, hi: 6.0 },
        scalar(ScalarOp::Divide, 6.0),
    ];
    match plus_three {
        true => [&[scalar(ScalarOp::Add, 3.0)][..], &tail].concat(),
        false => tail.to_vec(),
    }
}

/// Mish `x * tanh(softplus(x))`, `softplus(x) = ln(1 + exp(x))` (ONNX opset 18), as TVM's
/// ONNX frontend for Relax writes it (class `Mish`): `x * tanh(log(1 + exp(x)))`, the
/// constant the add's left operand, `x` the multiply's.
pub const MISH: Activation = Activation {
    name: "mish",
    expansion: mish,
    recognized: |x| vec![mish(x)],
};

fn mish(x: u8) -> Vec<EpilogueOp> {
    vec![
        EpilogueOp::Exp,
        EpilogueOp::Scalar {
            op: ScalarOp::Add,
            value: 1.0,
            operand_first: true,
        },
        EpilogueOp::Log,
        EpilogueOp::Tanh,
        times(x, true),
    ]
}

/// `op(prev, value)` with `value` a float32 scalar constant.
fn scalar(op: ScalarOp, value: f64) -> EpilogueOp {
    EpilogueOp::Scalar {
        op,
        value: value as f32 as f64,
        operand_first: false,
    }
}

/// `x * prev` (`x_first`) or `prev * x`, `x` the activation's input.
fn times(x: u8, x_first: bool) -> EpilogueOp {
    EpilogueOp::Rejoin {
        op: ScalarOp::Multiply,
        with: x,
        with_first: x_first,
    }
}

fn unit_clip() -> EpilogueOp {
    EpilogueOp::Clip { lo: 0.0, hi: 1.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each activation's expansion is among the chains recognition tries (so a kernel the
    /// frontend lowers from it is recognized by md5), and every chain reads only values
    /// that exist.
    #[test]
    fn expansions_are_recognized_and_well_formed() {
        for a in ALL {
            for x in [0u8, 2] {
                let recognized = (a.recognized)(x);
                assert!(recognized.contains(&(a.expansion)(x)), "{}", a.name);
                for chain in recognized {
                    for (i, op) in chain.iter().enumerate() {
                        if let EpilogueOp::Rejoin { with, .. } = op {
                            assert!(usize::from(*with) <= usize::from(x) + i, "{}", a.name);
                        }
                        assert!(!op.takes_operand(), "{}", a.name);
                    }
                }
            }
        }
    }
}
