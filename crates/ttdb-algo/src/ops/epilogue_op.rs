//! One fused element-wise op of an epilogue chain ([`EpilogueOp`]) and how it is built on
//! the value before it, as Relay's TE lowering of a fused function does: a tensor operand
//! is a placeholder of the task, a rank-0 constant operand a `compile_engine_const()` stage
//! ([`EpilogueOp::Scalar`]; FuseOps fuses scalar constants, it leaves tensor constants
//! outside as parameters: `src/relay/transforms/fuse_ops.cc`, `VisitExpr_(ConstantNode)`).
use super::epilogue::{
    broadcast_binary, broadcast_power, clip, expand_dims, relu, scalar_const, unary,
};
use super::util::check;
use crate::ir::{BinOp, BuildError, DType, DagBuilder, Intrinsic, Tensor};

/// The broadcast binary op of an [`EpilogueOp::Scalar`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarOp {
    Add,
    Subtract,
    Multiply,
    Divide,
    Power,
}

impl ScalarOp {
    pub const ALL: [ScalarOp; 5] = [
        ScalarOp::Add,
        ScalarOp::Subtract,
        ScalarOp::Multiply,
        ScalarOp::Divide,
        ScalarOp::Power,
    ];

    /// The relay op name (also the TOPI compute name after `T_`).
    pub fn name(self) -> &'static str {
        match self {
            ScalarOp::Add => "add",
            ScalarOp::Subtract => "subtract",
            ScalarOp::Multiply => "multiply",
            ScalarOp::Divide => "divide",
            ScalarOp::Power => "power",
        }
    }

    pub fn commutative(self) -> bool {
        matches!(self, ScalarOp::Add | ScalarOp::Multiply)
    }
}

/// One fused element-wise op after the anchor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EpilogueOp {
    /// `add(prev, operand)`, or `add(operand, prev)` when `operand_first` (residual-first
    /// keys); bias adds are broadcast adds of a `[1,1,1,C]`-like operand.
    Add {
        operand_first: bool,
    },
    Multiply {
        operand_first: bool,
    },
    /// `add(prev, expand_dims(operand, 0, rank difference))` (relay bias_add on a 1-D bias).
    ExpandAdd,
    Relu,
    /// `clip(prev, lo, hi)` (relu6 = clip 0..6).
    Clip {
        lo: f64,
        hi: f64,
    },
    Tanh,
    Sigmoid,
    Exp,
    Erf,
    Sqrt,
    /// The natural logarithm (`tir.log`; Relay's ONNX frontend writes `Softplus` with it).
    Log,
    /// `subtract(prev, operand)`, or `subtract(operand, prev)` when `operand_first`.
    Subtract {
        operand_first: bool,
    },
    Divide {
        operand_first: bool,
    },
    /// `power(prev, operand)` with a tensor exponent (a `[1]` constant is a parameter).
    Power {
        operand_first: bool,
    },
    /// `op(prev, c)`, or `op(c, prev)` when `operand_first`, with a rank-0 constant `c`
    /// (its float32 value): no task input, a `compile_engine_const()` stage.
    Scalar {
        op: ScalarOp,
        value: f64,
        operand_first: bool,
    },
    /// `op(prev, v)`, or `op(v, prev)` when `with_first`, where `v` is an earlier value of
    /// the epilogue: 0 the anchor's output, `i` the output of epilogue op `i - 1`. This is
    /// how a DAG epilogue is written (SiLU `x * sigmoid(x)`, hardswish `x * clip(..)`):
    /// every op reads the value before it, a rejoin also one computed earlier. No operand.
    Rejoin {
        op: ScalarOp,
        with: u8,
        with_first: bool,
    },
}

impl EpilogueOp {
    /// The unary ops that are one TIR intrinsic call each (`T_<op>` stages), in the order
    /// recognition tries them. Relay names them as their [`Self::class_name`].
    pub const INTRINSIC_UNARY: [EpilogueOp; 6] = [
        EpilogueOp::Tanh,
        EpilogueOp::Sigmoid,
        EpilogueOp::Exp,
        EpilogueOp::Erf,
        EpilogueOp::Sqrt,
        EpilogueOp::Log,
    ];

    /// The intrinsic unary op Relay calls `name` (`sigmoid`, `exp`, ...).
    pub fn intrinsic_unary_named(name: &str) -> Option<EpilogueOp> {
        Self::INTRINSIC_UNARY
            .into_iter()
            .find(|op| op.class_name() == name)
    }

    /// Whether the op reads a tensor operand (a placeholder of the task).
    pub fn takes_operand(self) -> bool {
        matches!(
            self,
            EpilogueOp::Add { .. }
                | EpilogueOp::Multiply { .. }
                | EpilogueOp::ExpandAdd
                | EpilogueOp::Subtract { .. }
                | EpilogueOp::Divide { .. }
                | EpilogueOp::Power { .. }
        )
    }

    /// A tensor operand on the left: the post-order DFS meets it before the anchor.
    pub fn operand_first(self) -> bool {
        match self {
            EpilogueOp::Add { operand_first }
            | EpilogueOp::Multiply { operand_first }
            | EpilogueOp::Subtract { operand_first }
            | EpilogueOp::Divide { operand_first }
            | EpilogueOp::Power { operand_first } => operand_first,
            _ => false,
        }
    }

    /// Name in a signature's op class. Operand order is not part of the identity of the
    /// commutative add and multiply; a reversed subtract / divide / power computes another
    /// function and is `r<op>` (numpy's `__rsub__`). A scalar op is `<op>_scalar`: its
    /// DAG has a `compile_engine_const` stage instead of a placeholder.
    pub fn class_name(self) -> &'static str {
        match self {
            EpilogueOp::Add { .. } | EpilogueOp::ExpandAdd => "add",
            EpilogueOp::Multiply { .. } => "multiply",
            EpilogueOp::Relu => "relu",
            EpilogueOp::Clip { .. } => "clip",
            EpilogueOp::Tanh => "tanh",
            EpilogueOp::Sigmoid => "sigmoid",
            EpilogueOp::Exp => "exp",
            EpilogueOp::Erf => "erf",
            EpilogueOp::Sqrt => "sqrt",
            EpilogueOp::Log => "log",
            EpilogueOp::Subtract { operand_first } => pick(operand_first, "rsubtract", "subtract"),
            EpilogueOp::Divide { operand_first } => pick(operand_first, "rdivide", "divide"),
            EpilogueOp::Power { operand_first } => pick(operand_first, "rpower", "power"),
            EpilogueOp::Scalar {
                op, operand_first, ..
            } => match (op, operand_first && !op.commutative()) {
                (ScalarOp::Add, _) => "add_scalar",
                (ScalarOp::Multiply, _) => "multiply_scalar",
                (ScalarOp::Subtract, r) => pick(r, "rsubtract_scalar", "subtract_scalar"),
                (ScalarOp::Divide, r) => pick(r, "rdivide_scalar", "divide_scalar"),
                (ScalarOp::Power, r) => pick(r, "rpower_scalar", "power_scalar"),
            },
            EpilogueOp::Rejoin { op, .. } => op.name(),
        }
    }

    /// Name in a signature's op class: [`Self::class_name`], and for a rejoin also the
    /// value it reads (`multiply@1`: times the value after the first epilogue op), since
    /// `x * sigmoid(x)` and `sigmoid(x) * sigmoid(x)` are different kernels.
    pub fn class_label(self) -> String {
        match self {
            EpilogueOp::Rejoin {
                op,
                with,
                with_first,
            } => {
                let r = if with_first && !op.commutative() {
                    "r"
                } else {
                    ""
                };
                format!("{r}{}@{with}", op.name())
            }
            other => other.class_name().to_string(),
        }
    }

    /// The element-wise intrinsic of a unary op.
    fn intrinsic(self) -> Option<Intrinsic> {
        Some(match self {
            EpilogueOp::Tanh => Intrinsic::Tanh,
            EpilogueOp::Sigmoid => Intrinsic::Sigmoid,
            EpilogueOp::Exp => Intrinsic::Exp,
            EpilogueOp::Erf => Intrinsic::Erf,
            EpilogueOp::Sqrt => Intrinsic::Sqrt,
            EpilogueOp::Log => Intrinsic::Log,
            _ => return None,
        })
    }

    /// Builds the op on `prev`; `operand` is the placeholder iff [`Self::takes_operand`],
    /// or for a [`EpilogueOp::Rejoin`] the earlier value it reads.
    pub fn build(
        self,
        b: &mut DagBuilder,
        prev: &Tensor,
        operand: Option<&Tensor>,
        dtype: DType,
    ) -> Result<Tensor, BuildError> {
        if let Some(f) = self.intrinsic() {
            return Ok(unary(b, prev, f));
        }
        // (left, right) of a binary op on `prev` and its operand
        let sides = |p: &Tensor, first: bool| {
            if first {
                (p.clone(), prev.clone())
            } else {
                (prev.clone(), p.clone())
            }
        };
        let binary = |b: &mut DagBuilder, op: ScalarOp, l: &Tensor, r: &Tensor| match op {
            ScalarOp::Add => broadcast_binary(b, BinOp::Add, l, r, "T_add"),
            ScalarOp::Subtract => broadcast_binary(b, BinOp::Sub, l, r, "T_subtract"),
            ScalarOp::Multiply => broadcast_binary(b, BinOp::Mul, l, r, "T_multiply"),
            ScalarOp::Divide => broadcast_binary(b, BinOp::Div, l, r, "T_divide"),
            ScalarOp::Power => broadcast_power(b, l, r),
        };
        let tensor_op = match self {
            EpilogueOp::Add { .. } => Some(ScalarOp::Add),
            EpilogueOp::Subtract { .. } => Some(ScalarOp::Subtract),
            EpilogueOp::Multiply { .. } => Some(ScalarOp::Multiply),
            EpilogueOp::Divide { .. } => Some(ScalarOp::Divide),
            EpilogueOp::Power { .. } => Some(ScalarOp::Power),
            _ => None,
        };
        match (self, operand) {
            (_, Some(p)) if tensor_op.is_some() => {
                let (l, r) = sides(p, self.operand_first());
                binary(b, tensor_op.expect("checked"), &l, &r)
            }
            (EpilogueOp::ExpandAdd, Some(p)) => {
                check(p.ndim() < prev.ndim(), || {
                    "expand_dims bias must have a lower rank".into()
                })?;
                let e = expand_dims(b, p, 0, prev.ndim() - p.ndim())?;
                broadcast_binary(b, BinOp::Add, prev, &e, "T_add")
            }
            (EpilogueOp::Rejoin { op, with_first, .. }, Some(v)) => {
                let (l, r) = sides(v, with_first);
                binary(b, op, &l, &r)
            }
            (EpilogueOp::Relu, None) => Ok(relu(b, prev)),
            (EpilogueOp::Clip { lo, hi }, None) => Ok(clip(b, prev, lo, hi)),
            (
                EpilogueOp::Scalar {
                    op,
                    value,
                    operand_first,
                },
                None,
            ) => {
                let c = scalar_const(b, value, dtype);
                let (l, r) = sides(&c, operand_first);
                binary(b, op, &l, &r)
            }
            // a rejoin outside an epilogue (a prologue) has no earlier value to read
            (op, _) => Err(BuildError(format!(
                "{}: its operand is missing (or given to an op that takes none)",
                op.class_label()
            ))),
        }
    }
}

fn pick(cond: bool, yes: &'static str, no: &'static str) -> &'static str {
    if cond {
        yes
    } else {
        no
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{Anchor, Era, WorkloadSpec};

    fn rejoin(with: u8) -> EpilogueOp {
        EpilogueOp::Rejoin {
            op: ScalarOp::Multiply,
            with,
            with_first: true,
        }
    }

    /// A rejoin that reads a value not computed yet, or sits in a prologue, is a build
    /// error naming the op, never a panic.
    #[test]
    fn misplaced_rejoins_are_errors() {
        let ins = [vec![3, 5], vec![4, 5]];
        let spec = WorkloadSpec::new(Anchor::Dense, vec![EpilogueOp::Sigmoid, rejoin(2)]);
        let err = spec.build(Era::V015, &ins).unwrap_err();
        assert!(err.0.contains("value 2"), "{}", err.0);
        let spec = WorkloadSpec::new(
            Anchor::Mean {
                axes: vec![1],
                keepdims: true,
            },
            vec![],
        )
        .with_prologue(vec![rejoin(0)]);
        let err = spec.build(Era::V015, &[vec![3, 5]]).unwrap_err();
        assert!(err.0.contains("multiply@0"), "{}", err.0);
        // in range: x * sigmoid(x) builds
        let spec = WorkloadSpec::new(Anchor::Dense, vec![EpilogueOp::Sigmoid, rejoin(0)]);
        assert_eq!(spec.op_class(), "dense+sigmoid+multiply@0");
        assert!(spec.build(Era::V015, &ins).is_ok());
    }

    /// `log` is `T_log(ax*) = tir.log(x[ax*])` and computes the natural logarithm; Relay's
    /// `log` finds it by name.
    #[test]
    fn log_is_one_intrinsic_stage() {
        use crate::ir::eval::{evaluate, random_inputs};
        let ins = [vec![3, 5], vec![4, 5]];
        let spec = WorkloadSpec::new(Anchor::Dense, vec![EpilogueOp::Sigmoid, EpilogueOp::Log]);
        assert_eq!(spec.op_class(), "dense+sigmoid+log");
        assert_eq!(
            EpilogueOp::intrinsic_unary_named("log"),
            Some(EpilogueOp::Log)
        );
        let dag = spec.build(Era::V015, &ins).unwrap();
        let out = dag.stage(dag.output());
        assert_eq!(out.name, "T_log");
        assert_eq!(out.compute().unwrap().tag, "elemwise");
        let inputs = random_inputs(&dag, 5);
        let got = evaluate(&dag, &inputs).unwrap().remove(0);
        let plain = WorkloadSpec::new(Anchor::Dense, vec![])
            .build(Era::V015, &ins)
            .unwrap();
        let dense = evaluate(&plain, &inputs).unwrap().remove(0);
        for (g, d) in got.data.iter().zip(&dense.data) {
            let want = (1.0 / (1.0 + (-d).exp())).ln();
            assert!((g - want).abs() < 1e-12, "{g} vs {want}");
        }
    }
}
