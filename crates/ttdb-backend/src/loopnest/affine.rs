//! Linear (affine) forms of integer index expressions.
//!
//! `linearize` rewrites an integer expression as `Σ cᵢ·atomᵢ + c₀` where atoms are variables or
//! opaque non-affine sub-expressions (floordiv, loads, products of non-constants, …). Used by the
//! simplifier, the bounds checker and the vectorizer (stride detection).

use super::ir::*;

#[derive(Clone, Debug, PartialEq)]
pub struct Linear {
    /// (atom, coefficient); atoms are pairwise structurally distinct, coefficients non-zero.
    pub terms: Vec<(Expr, i128)>,
    pub constant: i128,
}

impl Linear {
    pub fn constant(c: i128) -> Linear {
        Linear {
            terms: Vec::new(),
            constant: c,
        }
    }
    pub fn atom(e: Expr) -> Linear {
        Linear {
            terms: vec![(e, 1)],
            constant: 0,
        }
    }
    pub fn add_term(&mut self, atom: Expr, coef: i128) {
        if coef == 0 {
            return;
        }
        if let Some(pos) = self.terms.iter().position(|(a, _)| *a == atom) {
            self.terms[pos].1 = self.terms[pos].1.saturating_add(coef);
            if self.terms[pos].1 == 0 {
                self.terms.remove(pos);
            }
        } else {
            self.terms.push((atom, coef));
        }
    }
    pub fn add(&self, other: &Linear, scale: i128) -> Linear {
        let mut r = self.clone();
        for (a, c) in &other.terms {
            r.add_term(a.clone(), c.saturating_mul(scale));
        }
        r.constant = r
            .constant
            .saturating_add(other.constant.saturating_mul(scale));
        r
    }
    pub fn scale(&self, k: i128) -> Linear {
        if k == 0 {
            return Linear::constant(0);
        }
        Linear {
            terms: self
                .terms
                .iter()
                .map(|(a, c)| (a.clone(), c.saturating_mul(k)))
                .collect(),
            constant: self.constant.saturating_mul(k),
        }
    }
    pub fn as_constant(&self) -> Option<i128> {
        if self.terms.is_empty() {
            Some(self.constant)
        } else {
            None
        }
    }
    /// Coefficient of the variable `v` (0 if absent). `None` if `v` also occurs inside an atom.
    pub fn coeff_of_var(&self, v: &str) -> Option<i128> {
        let mut coef = 0;
        for (a, c) in &self.terms {
            match a {
                Expr::Var(n) if n == v => coef = *c,
                other if other.uses_var(v) => return None,
                _ => {}
            }
        }
        Some(coef)
    }
    /// Canonical `I64` expression: terms sorted by their printed form, constant last.
    pub fn to_expr(&self) -> Expr {
        let mut terms = self.terms.clone();
        terms.sort_by_cached_key(|(a, _)| super::printer::expr_to_string(a));
        let mut acc: Option<Expr> = None;
        for (a, c) in terms {
            let c64 = c.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
            let (term, negative) = match c64 {
                1 => (a, false),
                -1 => (a, true),
                _ if c64 < 0 && c64 != i64::MIN => (Expr::mul(a, Expr::int(-c64)), true),
                _ => (Expr::mul(a, Expr::int(c64)), false),
            };
            acc = Some(match (acc, negative) {
                (None, false) => term,
                (None, true) => Expr::sub(Expr::int(0), term),
                (Some(x), false) => Expr::add(x, term),
                (Some(x), true) => Expr::sub(x, term),
            });
        }
        let k = self.constant.clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        match acc {
            None => Expr::int(k),
            Some(x) if k == 0 => x,
            Some(x) if k < 0 && k != i64::MIN => Expr::sub(x, Expr::int(-k)),
            Some(x) => Expr::add(x, Expr::int(k)),
        }
    }
}

/// True if `e` is built only from `I64` immediates, variables and integer operators, i.e. it is
/// an index expression whose type is `I64` without needing buffer types.
pub fn is_index_expr(e: &Expr) -> bool {
    match e {
        Expr::Int(_, DType::I64) | Expr::Var(_) => true,
        Expr::Bin(_, a, b) => is_index_expr(a) && is_index_expr(b),
        Expr::Cast(DType::I64, _) => true,
        _ => false,
    }
}

/// Linearize an integer expression. The result is exact for `I64` arithmetic without overflow;
/// callers that care about wrapping must check ranges separately.
pub fn linearize(e: &Expr) -> Linear {
    match e {
        Expr::Int(v, _) => Linear::constant(*v as i128),
        Expr::Bin(BinOp::Add, a, b) => linearize(a).add(&linearize(b), 1),
        Expr::Bin(BinOp::Sub, a, b) => linearize(a).add(&linearize(b), -1),
        Expr::Bin(BinOp::Mul, a, b) => {
            let la = linearize(a);
            let lb = linearize(b);
            if let Some(k) = lb.as_constant() {
                la.scale(k)
            } else if let Some(k) = la.as_constant() {
                lb.scale(k)
            } else {
                Linear::atom(e.clone())
            }
        }
        // Widening integer casts of index expressions are value-preserving.
        Expr::Cast(DType::I64, a) if matches!(**a, Expr::Var(_)) => linearize(a),
        _ => Linear::atom(e.clone()),
    }
}

/// An integer index expression of one variable at `var = x`, with the machine's wrapping
/// i64 arithmetic (None for anything else: another variable, a load, a float).
pub fn eval_index_at(e: &Expr, var: &str, x: i64) -> Option<i64> {
    match e {
        Expr::Var(v) if v == var => Some(x),
        Expr::Int(c, _) => Some(*c),
        Expr::Cast(DType::I64, a) => eval_index_at(a, var, x),
        Expr::Bin(op, a, b) => super::interp::eval_bin_int(
            *op,
            eval_index_at(a, var, x)?,
            eval_index_at(b, var, x)?,
            DType::I64,
        ),
        _ => None,
    }
}
