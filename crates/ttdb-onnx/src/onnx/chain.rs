//! One op of a fused group's epilogue chain as a registry [`EpilogueOp`], the way Relay's
//! ONNX frontend, SimplifyExpr and TE lowering leave it:
//!
//! * `Sigmoid`, `Exp`, `Erf`, `Sqrt`, `Tanh` are relay's unary ops (`Renamer` / `Erf` in
//!   `python/tvm/relay/frontend/onnx.py`), each an [`EpilogueOp::INTRINSIC_UNARY`] by its
//!   name; `Sub` / `Div` / `Pow` its broadcast `subtract`, `divide`, `power`, operands in the
//!   node's order;
//! * an operand that is a rank-0 constant is fused into the function (FuseOps marks scalar
//!   constants element-wise) and becomes a `compile_engine_const()` stage
//!   ([`EpilogueOp::Scalar`]), unless ops of other groups read it too; other constants
//!   stay parameters (placeholders);
//! * SimplifyExpr's `EliminateIdentityRewrite` drops `x + 0`, `0 + x`, `x - 0`, `x * 1`,
//!   `1 * x` and `x / 1` with a scalar constant (`src/relay/transforms/simplify_expr.cc`);
//! * its `SwitchAddMultiply` and `SimplifyAdjacentMultiplyOrAdd` fold runs of scalar adds
//!   and multiplies, `(x + a) * b` to `x * b + a*b`, `x * a * b` to `x * (a*b)`
//!   ([`simplify_scalars`]);
//! * a binary op whose two inputs are both fused values reads an earlier one again
//!   ([`rejoin_op`]: SiLU, hardswish);
//! * its `SimplifyRSqrt` turns `y / sqrt(x)` into `y * rsqrt(x)`: rsqrt is not in the
//!   registry, so such a chain is refused rather than built as TVM would not.
use super::relay::{BinKind, OpGraph, OpId, OpKind, UnaryKind, ValId};
use ttdb_algo::ops::{EpilogueOp, ScalarOp};

/// The epilogue op of fused op `op`, which reads the chain's value at input `pos`; a
/// tensor operand is pushed onto `operands` (the kernel's inputs after the anchor's).
/// `Ok(None)`: relay removes the op.
/// `prev` is the chain's previous op (for SimplifyRSqrt).
pub(super) fn chain_op(
    g: &OpGraph,
    group: &[OpId],
    op: OpId,
    pos: usize,
    prev: Option<EpilogueOp>,
    operands: &mut Vec<ValId>,
) -> Result<Option<EpilogueOp>, String> {
    let o = &g.ops[op];
    let unary = |e: EpilogueOp| Ok(Some(e));
    let bin = match &o.kind {
        OpKind::Unary(UnaryKind::Relu) => return unary(EpilogueOp::Relu),
        OpKind::Unary(UnaryKind::Tanh) => return unary(EpilogueOp::Tanh),
        OpKind::Unary(UnaryKind::Clip { lo, hi }) => {
            return unary(EpilogueOp::Clip { lo: *lo, hi: *hi })
        }
        OpKind::Unary(UnaryKind::Other(name)) => match EpilogueOp::intrinsic_unary_named(name) {
            Some(e) => return unary(e),
            None => return Err(not_in_registry(&o.kind)),
        },
        OpKind::Binary(b) => match b {
            BinKind::Add => ScalarOp::Add,
            BinKind::Subtract => ScalarOp::Subtract,
            BinKind::Multiply => ScalarOp::Multiply,
            BinKind::Divide => ScalarOp::Divide,
            BinKind::Power => ScalarOp::Power,
            BinKind::Other(_) => return Err(not_in_registry(&o.kind)),
        },
        other => return Err(not_in_registry(other)),
    };
    if o.inputs.len() != 2 || o.inputs[0] == o.inputs[1] {
        return Err(format!("{} of a value with itself", o.kind.name()));
    }
    let operand = o.inputs[1 - pos];
    let first = pos == 1;
    if bin == ScalarOp::Divide && first && prev == Some(EpilogueOp::Sqrt) {
        return Err(
            "relay's SimplifyExpr rewrites `y / sqrt(x)` to `y * rsqrt(x)`: rsqrt is not in ttdb's op registry"
                .into(),
        );
    }
    let in_group = g.values[operand]
        .producer
        .is_some_and(|p| group.contains(&p));
    if in_group {
        return Err(format!(
            "{} operand `{}` is computed inside the fused group",
            o.kind.name(),
            g.values[operand].name
        ));
    }
    let v = &g.values[operand];
    if v.constant && v.shape.is_empty() {
        let value = v
            .data
            .as_ref()
            .and_then(|d| d.as_floats().first().copied())
            .ok_or_else(|| {
                format!(
                    "the value of scalar constant `{}` ({} operand) is not known at load time",
                    v.name,
                    o.kind.name()
                )
            })?;
        let identity = match bin {
            ScalarOp::Add => value == 0.0,
            ScalarOp::Subtract => value == 0.0 && !first,
            ScalarOp::Multiply => value == 1.0,
            ScalarOp::Divide => value == 1.0 && !first,
            ScalarOp::Power => false,
        };
        if identity {
            return Ok(None);
        }
        // A constant also read outside the group has no post-dominator FuseOps can fuse it
        // into (an anchor lies on the way): it stays a node of its own, and the function
        // gets it as a rank-0 parameter, a placeholder like any tensor operand.
        let shared = g
            .ops
            .iter()
            .enumerate()
            .any(|(i, r)| !group.contains(&i) && r.inputs.contains(&operand));
        if !shared {
            return Ok(Some(EpilogueOp::Scalar {
                op: bin,
                value: value as f32 as f64,
                operand_first: first,
            }));
        }
    }
    operands.push(operand);
    let operand_first = first;
    Ok(Some(match bin {
        ScalarOp::Add => EpilogueOp::Add { operand_first },
        ScalarOp::Subtract => EpilogueOp::Subtract { operand_first },
        ScalarOp::Multiply => EpilogueOp::Multiply { operand_first },
        ScalarOp::Divide => EpilogueOp::Divide { operand_first },
        ScalarOp::Power => EpilogueOp::Power { operand_first },
    }))
}

/// The [`EpilogueOp::Rejoin`] of a binary op `op` on two fused values: the value before it
/// and the earlier value number `with`, at input `with_pos` (relay keeps the node's order).
pub(super) fn rejoin_op(
    g: &OpGraph,
    op: OpId,
    with_pos: usize,
    with: usize,
) -> Result<EpilogueOp, String> {
    let o = &g.ops[op];
    let op_kind = match &o.kind {
        OpKind::Binary(BinKind::Add) => ScalarOp::Add,
        OpKind::Binary(BinKind::Subtract) => ScalarOp::Subtract,
        OpKind::Binary(BinKind::Multiply) => ScalarOp::Multiply,
        OpKind::Binary(BinKind::Divide) => ScalarOp::Divide,
        OpKind::Binary(BinKind::Power) => ScalarOp::Power,
        other => return Err(not_in_registry(other)),
    };
    let with = u8::try_from(with).map_err(|_| "an epilogue of more than 255 ops".to_string())?;
    Ok(EpilogueOp::Rejoin {
        op: op_kind,
        with,
        with_first: with_pos == 0,
    })
}

/// SimplifyExpr on adjacent scalar adds and multiplies, to its fixed point: `(x + a) * b`
/// becomes `x * b + (a*b)`, `x * a * b` becomes `x * (a*b)`, `x + a + b` becomes
/// `x + (a+b)`, each folded constant a float32 (FoldConstant) and the rewritten call
/// `op(x, c)`; a fold that leaves `x * 1` or `x + 0` vanishes (EliminateIdentityRewrite).
pub(super) fn simplify_scalars(chain: &mut Vec<EpilogueOp>) {
    let scalar = |op, value: f32| EpilogueOp::Scalar {
        op,
        value: value as f64,
        operand_first: false,
    };
    loop {
        let mut changed = false;
        for i in 0..chain.len().saturating_sub(1) {
            let (
                EpilogueOp::Scalar {
                    op: a, value: va, ..
                },
                EpilogueOp::Scalar {
                    op: b, value: vb, ..
                },
            ) = (chain[i], chain[i + 1])
            else {
                continue;
            };
            // value i + 1 (between the two) read again by a rejoin: relay would still fold
            // (its pattern rewrites ignore other readers), leaving two branches from `x`
            // that a rejoin cannot write; ttdb keeps the run (a known deviation, in no
            // corpus model)
            if chain.iter().any(
                |e| matches!(e, EpilogueOp::Rejoin { with, .. } if usize::from(*with) == i + 1),
            ) {
                continue;
            }
            let (va, vb) = (va as f32, vb as f32);
            let new: Vec<EpilogueOp> = match (a, b) {
                (ScalarOp::Add, ScalarOp::Multiply) => {
                    vec![
                        scalar(ScalarOp::Multiply, vb),
                        scalar(ScalarOp::Add, va * vb),
                    ]
                }
                (ScalarOp::Multiply, ScalarOp::Multiply) => {
                    vec![scalar(ScalarOp::Multiply, va * vb)]
                }
                (ScalarOp::Add, ScalarOp::Add) => vec![scalar(ScalarOp::Add, va + vb)],
                _ => continue,
            };
            let new: Vec<EpilogueOp> = new
                .into_iter()
                .filter(|e| {
                    !matches!(
                        e,
                        EpilogueOp::Scalar { op: ScalarOp::Multiply, value, .. } if *value == 1.0
                    ) && !matches!(
                        e,
                        EpilogueOp::Scalar { op: ScalarOp::Add, value, .. } if *value == 0.0
                    )
                })
                .collect();
            // rejoins after the run read values renumbered by the splice
            let n = new.len();
            for e in chain.iter_mut().skip(i + 2) {
                if let EpilogueOp::Rejoin { with, .. } = e {
                    if usize::from(*with) >= i + 2 {
                        *with = (usize::from(*with) + n - 2) as u8;
                    }
                }
            }
            chain.splice(i..i + 2, new);
            changed = true;
            break;
        }
        if !changed {
            return;
        }
    }
}

fn not_in_registry(kind: &OpKind) -> String {
    format!(
        "fused epilogue op `{}` is not in ttdb's op registry",
        kind.name()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::graph::Data;

    /// `y = op(x, c)` (or `op(c, x)`) on a `[1, 4]` value `x` produced by an earlier op;
    /// `c` a scalar constant of value `value` (None: unknown) or a tensor of `shape`.
    fn chain(kind: BinKind, first: bool, value: Option<f64>, shape: &[i64]) -> (OpGraph, OpId) {
        let mut g = OpGraph::default();
        let a = g.add_value("a".into(), vec![1, 4], false);
        let x = g.add_op(
            OpKind::Unary(UnaryKind::Relu),
            vec![a],
            "x".into(),
            vec![1, 4],
            vec![],
        );
        let c = g.add_value("c".into(), shape.to_vec(), true);
        g.values[c].data = value.map(|v| Data::Floats(vec![v]));
        let ins = if first { vec![c, x] } else { vec![x, c] };
        g.add_op(OpKind::Binary(kind), ins, "y".into(), vec![1, 4], vec![]);
        (g, 1)
    }

    fn op_of(
        kind: BinKind,
        first: bool,
        value: Option<f64>,
        shape: &[i64],
    ) -> Result<Option<EpilogueOp>, String> {
        let (g, op) = chain(kind, first, value, shape);
        let mut canonical = Vec::new();
        chain_op(&g, &[0, 1], op, usize::from(first), None, &mut canonical)
    }

    #[test]
    fn scalar_constants_become_scalar_ops_and_identities_vanish() {
        assert_eq!(
            op_of(BinKind::Divide, false, Some(6.0), &[]),
            Ok(Some(EpilogueOp::Scalar {
                op: ScalarOp::Divide,
                value: 6.0,
                operand_first: false
            }))
        );
        // the float32 of the constant
        assert_eq!(
            op_of(BinKind::Power, false, Some(0.1), &[]),
            Ok(Some(EpilogueOp::Scalar {
                op: ScalarOp::Power,
                value: 0.1f32 as f64,
                operand_first: false
            }))
        );
        for (kind, first, v) in [
            (BinKind::Add, false, 0.0),
            (BinKind::Add, true, 0.0),
            (BinKind::Multiply, true, 1.0),
            (BinKind::Subtract, false, 0.0),
            (BinKind::Divide, false, 1.0),
        ] {
            assert_eq!(
                op_of(kind.clone(), first, Some(v), &[]),
                Ok(None),
                "{kind:?}"
            );
        }
        // 0 - x and 1 / x are not identities
        assert!(matches!(
            op_of(BinKind::Subtract, true, Some(0.0), &[]),
            Ok(Some(EpilogueOp::Scalar {
                operand_first: true,
                ..
            }))
        ));
        assert!(op_of(BinKind::Divide, true, Some(1.0), &[])
            .unwrap()
            .is_some());
        let err = op_of(BinKind::Add, false, None, &[]).unwrap_err();
        assert!(err.contains("not known"), "{err}");
    }

    #[test]
    fn a_scalar_read_by_another_group_is_a_parameter() {
        let (mut g, op) = chain(BinKind::Multiply, false, Some(3.0), &[]);
        let c = g.ops[op].inputs[1];
        g.add_op(
            OpKind::Binary(BinKind::Add),
            vec![c, 0],
            "z".into(),
            vec![1, 4],
            vec![],
        );
        let mut canonical = Vec::new();
        let e = chain_op(&g, &[0, 1], op, 0, None, &mut canonical).unwrap();
        assert_eq!(
            e,
            Some(EpilogueOp::Multiply {
                operand_first: false
            })
        );
        let shapes: Vec<&[i64]> = canonical
            .iter()
            .map(|&v| g.values[v].phys.as_slice())
            .collect();
        assert_eq!(shapes, [&[] as &[i64]]);
        // read twice inside the group: still fused
        let e = chain_op(&g, &[0, 1, 2], op, 0, None, &mut Vec::new()).unwrap();
        assert!(matches!(e, Some(EpilogueOp::Scalar { .. })));
    }

    #[test]
    fn runs_of_scalar_adds_and_multiplies_fold_like_simplify_expr() {
        let s = |op, value: f64, operand_first| EpilogueOp::Scalar {
            op,
            value,
            operand_first,
        };
        // (x + 1) * 2 * 3 -> x * 6 + 6
        let mut chain = vec![
            EpilogueOp::Relu,
            s(ScalarOp::Add, 1.0, true),
            s(ScalarOp::Multiply, 2.0, false),
            s(ScalarOp::Multiply, 3.0, true),
            EpilogueOp::Sigmoid,
        ];
        simplify_scalars(&mut chain);
        assert_eq!(
            chain,
            vec![
                EpilogueOp::Relu,
                s(ScalarOp::Multiply, 6.0, false),
                s(ScalarOp::Add, 6.0, false),
                EpilogueOp::Sigmoid
            ]
        );
        // x * 2 * 0.5 -> x; a subtract in between stops the fold
        let mut chain = vec![
            s(ScalarOp::Multiply, 2.0, false),
            s(ScalarOp::Multiply, 0.5, false),
        ];
        simplify_scalars(&mut chain);
        assert!(chain.is_empty());
        let mut chain = vec![
            s(ScalarOp::Add, 2.0, false),
            s(ScalarOp::Subtract, 0.5, false),
            s(ScalarOp::Add, 1.0, false),
        ];
        let before = chain.clone();
        simplify_scalars(&mut chain);
        assert_eq!(chain, before);
    }

    /// Rejoins keep reading the same value across SimplifyExpr's folds: a value after a
    /// folded run is renumbered, one inside the run stops the fold.
    #[test]
    fn scalar_folds_renumber_rejoins() {
        let s = |op, value: f64| EpilogueOp::Scalar {
            op,
            value,
            operand_first: false,
        };
        let rejoin = |with| EpilogueOp::Rejoin {
            op: ScalarOp::Multiply,
            with,
            with_first: true,
        };
        // relu, x*2*3 (value 3), sigmoid, value 3 * sigmoid -> the product is value 2
        let mut chain = vec![
            EpilogueOp::Relu,
            s(ScalarOp::Multiply, 2.0),
            s(ScalarOp::Multiply, 3.0),
            EpilogueOp::Sigmoid,
            rejoin(3),
        ];
        simplify_scalars(&mut chain);
        assert_eq!(
            chain,
            vec![
                EpilogueOp::Relu,
                s(ScalarOp::Multiply, 6.0),
                EpilogueOp::Sigmoid,
                rejoin(2)
            ]
        );
        // a rejoin of the relu (value 1, before the run) is untouched
        let mut chain = vec![
            EpilogueOp::Relu,
            s(ScalarOp::Multiply, 2.0),
            s(ScalarOp::Multiply, 3.0),
            rejoin(1),
        ];
        simplify_scalars(&mut chain);
        assert_eq!(
            chain,
            vec![EpilogueOp::Relu, s(ScalarOp::Multiply, 6.0), rejoin(1)]
        );
        // x*2 read again (value 2, inside the run): no fold
        let mut chain = vec![
            EpilogueOp::Relu,
            s(ScalarOp::Multiply, 2.0),
            s(ScalarOp::Multiply, 3.0),
            rejoin(2),
        ];
        let before = chain.clone();
        simplify_scalars(&mut chain);
        assert_eq!(chain, before);
    }

    #[test]
    fn tensor_constants_are_operands() {
        let (g, op) = chain(BinKind::Subtract, true, None, &[1]);
        let mut canonical = Vec::new();
        let e = chain_op(&g, &[0, 1], op, 1, None, &mut canonical).unwrap();
        assert_eq!(
            e,
            Some(EpilogueOp::Subtract {
                operand_first: true
            })
        );
        let shapes: Vec<&[i64]> = canonical
            .iter()
            .map(|&v| g.values[v].phys.as_slice())
            .collect();
        assert_eq!(shapes, [&[1i64] as &[i64]]);
    }

    #[test]
    fn divide_by_sqrt_is_refused() {
        let (g, op) = chain(BinKind::Divide, true, None, &[1, 4]);
        let mut canonical = Vec::new();
        let err = chain_op(&g, &[0, 1], op, 1, Some(EpilogueOp::Sqrt), &mut canonical).unwrap_err();
        assert!(err.contains("rsqrt"), "{err}");
    }
}
