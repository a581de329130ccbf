//! Tensor-IR expressions (`ir::Expr`, TE style: axis variables, `T[i, j]` loads of stages)
//! to loop-nest expressions (`loopnest::Expr`: loop variables, buffer loads).
//!
//! Types: every integer scalar becomes `I64` (loop variables are `I64` and TVM's `int32`
//! index arithmetic never overflows for tensors ttdb accepts), floats keep their width,
//! comparisons stay `Bool`. Loads of integer buffers are widened to `I64`; stores into them
//! narrow again ([`store_value`]). `tir.if_then_else` becomes a `Select`, which evaluates only
//! the chosen arm, like TVM's lazy intrinsic (padding reads rely on it).
use super::LowerError;
use crate::loopnest::{self as ln, BinOp, CmpOp};
use std::collections::HashMap;
use ttdb_algo::ir::{self, TensorId};

/// Element type of a buffer holding an `ir` tensor.
pub fn buffer_dtype(t: ir::DType) -> Result<ln::DType, LowerError> {
    Ok(match t {
        ir::DType::Float(32) => ln::DType::F32,
        ir::DType::Float(64) => ln::DType::F64,
        ir::DType::Int(8) => ln::DType::I8,
        ir::DType::UInt(8) => ln::DType::U8,
        ir::DType::Int(32) => ln::DType::I32,
        ir::DType::Int(64) => ln::DType::I64,
        other => {
            return Err(LowerError::Unsupported(format!(
                "tensors of type {other:?}"
            )))
        }
    })
}

/// Type of a scalar value of `ir` type `t` in the loop nest.
pub fn value_dtype(t: ir::DType) -> Result<ln::DType, LowerError> {
    Ok(match t {
        ir::DType::Bool => ln::DType::Bool,
        ir::DType::Int(_) | ir::DType::UInt(_) => ln::DType::I64,
        ir::DType::Float(32) => ln::DType::F32,
        ir::DType::Float(64) => ln::DType::F64,
        other => return Err(LowerError::Unsupported(format!("values of type {other:?}"))),
    })
}

/// A value about to be stored into a buffer of element type `buf`.
pub fn store_value(v: ln::Expr, buf: ln::DType) -> ln::Expr {
    if buf.is_int() && buf != ln::DType::I64 {
        ln::Expr::cast(buf, v)
    } else {
        v
    }
}

/// How loads of other stages are resolved: `(tensor, converted indices, ir dtype)` to a
/// loop-nest expression of the buffer's element type.
pub type LoadFn<'a> = dyn Fn(TensorId, Vec<ln::Expr>) -> Result<ln::Expr, LowerError> + 'a;

/// Converts expressions with axis variables bound to loop expressions.
pub struct Converter<'a> {
    pub vars: &'a HashMap<String, ln::Expr>,
    pub load: &'a LoadFn<'a>,
}

impl Converter<'_> {
    pub fn expr(&self, e: &ir::Expr) -> Result<ln::Expr, LowerError> {
        use ir::Expr as E;
        Ok(match e {
            E::IntImm { value, dtype } => match dtype {
                ir::DType::Bool => ln::Expr::Int((*value != 0) as i64, ln::DType::Bool),
                _ => ln::Expr::int(*value),
            },
            E::FloatImm { value, dtype } => ln::Expr::Float(*value, value_dtype(*dtype)?),
            E::Var(n) => self.vars.get(n).cloned().ok_or_else(|| {
                LowerError::Internal(format!("unbound variable `{n}` in a stage body"))
            })?,
            E::Load {
                tensor,
                indices,
                dtype,
            } => {
                let idx = indices
                    .iter()
                    .map(|i| self.expr(i))
                    .collect::<Result<Vec<_>, _>>()?;
                let v = (self.load)(*tensor, idx)?;
                if dtype.is_float() {
                    v
                } else {
                    ln::Expr::cast(value_dtype(*dtype)?, v)
                }
            }
            E::Binary { op, a, b } => {
                let x = self.expr(a)?;
                let y = self.expr(b)?;
                let float = a.dtype().is_float();
                use ir::BinOp as B;
                match op {
                    B::Add => ln::Expr::bin(BinOp::Add, x, y),
                    B::Sub => ln::Expr::bin(BinOp::Sub, x, y),
                    B::Mul => ln::Expr::bin(BinOp::Mul, x, y),
                    B::Div => ln::Expr::bin(BinOp::Div, x, y),
                    B::Mod if !float => ln::Expr::bin(BinOp::Mod, x, y),
                    B::FloorDiv if !float => ln::Expr::bin(BinOp::FloorDiv, x, y),
                    B::FloorMod if !float => ln::Expr::bin(BinOp::FloorMod, x, y),
                    B::FloorDiv => {
                        ln::Expr::call(ln::Intrinsic::Floor, vec![ln::Expr::bin(BinOp::Div, x, y)])
                    }
                    B::Mod | B::FloorMod => {
                        return Err(LowerError::Unsupported(
                            "float modulo in a stage body".into(),
                        ));
                    }
                    B::Min => ln::Expr::bin(BinOp::Min, x, y),
                    B::Max => ln::Expr::bin(BinOp::Max, x, y),
                    B::Eq => ln::Expr::cmp(CmpOp::Eq, x, y),
                    B::Ne => ln::Expr::cmp(CmpOp::Ne, x, y),
                    B::Lt => ln::Expr::cmp(CmpOp::Lt, x, y),
                    B::Le => ln::Expr::cmp(CmpOp::Le, x, y),
                    B::Gt => ln::Expr::cmp(CmpOp::Gt, x, y),
                    B::Ge => ln::Expr::cmp(CmpOp::Ge, x, y),
                    B::And => ln::Expr::And(Box::new(truthy(x, a)?), Box::new(truthy(y, b)?)),
                    B::Or => ln::Expr::Or(Box::new(truthy(x, a)?), Box::new(truthy(y, b)?)),
                }
            }
            E::Not(a) => ln::Expr::Not(Box::new(truthy(self.expr(a)?, a)?)),
            E::Select {
                cond,
                then,
                otherwise,
            } => ln::Expr::select(
                truthy(self.expr(cond)?, cond)?,
                self.expr(then)?,
                self.expr(otherwise)?,
            ),
            E::Cast { dtype, value } => {
                let v = self.expr(value)?;
                let from = value_dtype(value.dtype())?;
                let to = value_dtype(*dtype)?;
                if from == to {
                    v
                } else if to == ln::DType::Bool {
                    truthy(v, value)?
                } else {
                    ln::Expr::cast(to, v)
                }
            }
            E::Call { func, args, .. } => {
                let mut a = args
                    .iter()
                    .map(|x| self.expr(x))
                    .collect::<Result<Vec<_>, _>>()?;
                use ir::Intrinsic as I;
                let f = match func {
                    I::IfThenElse => {
                        if a.len() != 3 {
                            return Err(LowerError::Internal(
                                "if_then_else needs 3 arguments".into(),
                            ));
                        }
                        let o = a.pop().unwrap();
                        let t = a.pop().unwrap();
                        let c = truthy(a.pop().unwrap(), &args[0])?;
                        return Ok(ln::Expr::select(c, t, o));
                    }
                    I::Exp => ln::Intrinsic::Exp,
                    I::Tanh => ln::Intrinsic::Tanh,
                    I::Sqrt => ln::Intrinsic::Sqrt,
                    I::Log => ln::Intrinsic::Log,
                    I::Fabs => ln::Intrinsic::Fabs,
                    I::Sigmoid => ln::Intrinsic::Sigmoid,
                    I::Erf => ln::Intrinsic::Erf,
                    I::Pow => ln::Intrinsic::Pow,
                };
                ln::Expr::call(f, a)
            }
        })
    }
}

/// A condition as a `Bool` expression (TVM allows integer conditions).
fn truthy(v: ln::Expr, of: &ir::Expr) -> Result<ln::Expr, LowerError> {
    Ok(match value_dtype(of.dtype())? {
        ln::DType::Bool => v,
        ln::DType::F32 => ln::Expr::cmp(CmpOp::Ne, v, ln::Expr::f32(0.0)),
        ln::DType::F64 => ln::Expr::cmp(CmpOp::Ne, v, ln::Expr::Float(0.0, ln::DType::F64)),
        _ => ln::Expr::cmp(CmpOp::Ne, v, ln::Expr::int(0)),
    })
}

/// TVM's canonical `floordiv`/`floormod` rules for a positive constant divisor `c`: terms of
/// the dividend whose coefficient is a multiple of `c` move out of a `floordiv`
/// (`floordiv(x + 4*k*y, 4) = floordiv(x, 4) + k*y`) and vanish from a `floormod`. Exact for
/// floor division; applied bottom-up, then affine terms are re-canonicalized.
pub fn simplify_index(e: &ln::Expr) -> ln::Expr {
    use crate::loopnest::affine::{linearize, Linear};
    let e = e.map(&mut |x| match x {
        ln::Expr::Bin(op @ (BinOp::FloorDiv | BinOp::FloorMod), a, b) => {
            let c = b.as_int().filter(|&c| c > 0)? as i128;
            let a = simplify_index(a);
            // floordiv(floordiv(x, d), c) = floordiv(x, d * c)
            if let (BinOp::FloorDiv, ln::Expr::Bin(BinOp::FloorDiv, x, d)) = (op, &a) {
                if let Some(d) = d
                    .as_int()
                    .filter(|&d| d > 0)
                    .and_then(|d| d.checked_mul(c as i64))
                {
                    return Some(simplify_index(&ln::Expr::floordiv(
                        (**x).clone(),
                        ln::Expr::int(d),
                    )));
                }
            }
            let lin = linearize(&a);
            let (mut keep, mut out) = (
                Linear::constant(lin.constant.rem_euclid(c)),
                Linear::constant(lin.constant.div_euclid(c)),
            );
            let mut moved = lin.constant.div_euclid(c) != 0;
            for (atom, k) in &lin.terms {
                if k % c == 0 {
                    out.add_term(atom.clone(), k / c);
                    moved = true;
                } else {
                    keep.add_term(atom.clone(), *k);
                }
            }
            if !moved {
                return Some(ln::Expr::bin(*op, a, (**b).clone()));
            }
            let rest = ln::Expr::bin(*op, keep.to_expr(), (**b).clone());
            Some(match op {
                BinOp::FloorDiv => ln::Expr::add(rest, out.to_expr()),
                _ => rest,
            })
        }
        _ => None,
    });
    crate::loopnest::simplify_expr(&e)
}

/// [`simplify_index`] applied to every index and every integer comparison of `e`, so that a
/// guard (a padding `select`, a bound check) and the access it protects have the same
/// canonical form (the bounds checker matches them term by term).
pub fn canon(e: &ln::Expr) -> ln::Expr {
    use crate::loopnest::affine::is_index_expr;
    e.map(&mut |x| match x {
        ln::Expr::Load { buf, index } => Some(ln::Expr::Load {
            buf: buf.clone(),
            index: index.iter().map(|i| simplify_index(&canon(i))).collect(),
        }),
        ln::Expr::Cmp(op, a, b) if is_index_expr(a) && is_index_expr(b) => Some(ln::Expr::cmp(
            *op,
            simplify_index(&canon(a)),
            simplify_index(&canon(b)),
        )),
        _ => None,
    })
}

/// Does `e` mention any variable for which `pred` holds?
pub fn uses_var_where(e: &ln::Expr, pred: &dyn Fn(&str) -> bool) -> bool {
    match e {
        ln::Expr::Var(v) => pred(v),
        _ => {
            let mut found = false;
            e.for_each_child(|c| found = found || uses_var_where(c, pred));
            found
        }
    }
}

/// The loads of tensor `t` in `e` (their index expressions), in visiting order.
pub fn loads_of(e: &ir::Expr, t: TensorId, out: &mut Vec<Vec<ir::Expr>>) {
    e.visit_pre_order(&mut |x| {
        if let ir::Expr::Load {
            tensor, indices, ..
        } = x
        {
            if *tensor == t {
                out.push(indices.clone());
            }
        }
        true
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttdb_algo::ir::Expr as E;

    #[test]
    fn divmod_rules() {
        let (x, y) = (ln::Expr::var("x"), ln::Expr::var("y"));
        let e = ln::Expr::floordiv(
            ln::Expr::add(x.clone(), ln::Expr::mul(y.clone(), ln::Expr::int(8))),
            ln::Expr::int(4),
        );
        let s = crate::loopnest::printer::expr_to_string(&simplify_index(&ln::Expr::sub(
            e,
            ln::Expr::mul(y.clone(), ln::Expr::int(2)),
        )));
        assert_eq!(s, "floordiv(x, 4)");
        let m = ln::Expr::floormod(
            ln::Expr::add(
                ln::Expr::add(x.clone(), ln::Expr::mul(y, ln::Expr::int(12))),
                ln::Expr::int(5),
            ),
            ln::Expr::int(4),
        );
        assert_eq!(
            crate::loopnest::printer::expr_to_string(&simplify_index(&m)),
            "floormod((x + 1), 4)"
        );
        let nested = ln::Expr::floordiv(
            ln::Expr::floordiv(x.clone(), ln::Expr::int(4)),
            ln::Expr::int(3),
        );
        assert_eq!(
            crate::loopnest::printer::expr_to_string(&simplify_index(&nested)),
            "floordiv(x, 12)"
        );
        // exact on every value, negatives included
        for xv in -9..9 {
            for yv in -3..3 {
                for c in 1..6 {
                    let f = |e: &ln::Expr| {
                        let e = e
                            .substitute("x", &ln::Expr::int(xv))
                            .substitute("y", &ln::Expr::int(yv));
                        crate::loopnest::simplify_expr(&e).as_int().unwrap()
                    };
                    let d = ln::Expr::floordiv(
                        ln::Expr::add(
                            ln::Expr::var("x"),
                            ln::Expr::mul(ln::Expr::var("y"), ln::Expr::int(2 * c)),
                        ),
                        ln::Expr::int(c),
                    );
                    assert_eq!(f(&d), f(&simplify_index(&d)));
                    let m = ln::Expr::floormod(
                        ln::Expr::add(ln::Expr::var("x"), ln::Expr::int(3 * c + 1)),
                        ln::Expr::int(c),
                    );
                    assert_eq!(f(&m), f(&simplify_index(&m)));
                    let n = ln::Expr::floordiv(
                        ln::Expr::floordiv(ln::Expr::var("x"), ln::Expr::int(c)),
                        ln::Expr::int(3),
                    );
                    assert_eq!(f(&n), f(&simplify_index(&n)));
                }
            }
        }
    }

    #[test]
    fn converts_padding_select_and_types() {
        // if_then_else(i >= 1, x[i - 1], 0f) with i := v*2
        let e = E::if_then_else(
            E::ge(E::var("i"), 1),
            E::Load {
                tensor: TensorId(0),
                indices: vec![E::var("i") - 1],
                dtype: ir::DType::F32,
            },
            E::f32(0.0),
        );
        let mut vars = HashMap::new();
        vars.insert(
            "i".to_string(),
            ln::Expr::mul(ln::Expr::var("v"), ln::Expr::int(2)),
        );
        let load = |t: TensorId, idx: Vec<ln::Expr>| Ok(ln::Expr::load(&format!("b{}", t.0), idx));
        let c = Converter {
            vars: &vars,
            load: &load,
        };
        let got = c.expr(&e).unwrap();
        let s = crate::loopnest::printer::expr_to_string(&got);
        assert!(s.contains("b0["), "{s}");
        assert!(matches!(got, ln::Expr::Select(..)));
        // an int32 load is widened
        let l = E::Load {
            tensor: TensorId(1),
            indices: vec![E::int(0)],
            dtype: ir::DType::Int(32),
        };
        assert!(matches!(
            c.expr(&l).unwrap(),
            ln::Expr::Cast(ln::DType::I64, _)
        ));
        assert!(c.expr(&E::var("nope")).is_err());
    }
}
