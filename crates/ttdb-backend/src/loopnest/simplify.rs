//! Constant folding and affine canonicalization.
//!
//! Semantics-preserving under the IR's defined semantics (wrapping integer arithmetic at the
//! operand type, see `interp`): folding uses the same helpers as the interpreter. Affine
//! re-association is only applied to pure `I64` index expressions (vars, `I64` immediates,
//! `+ - *`), where it is exact modulo 2^64 too.

use super::affine::{is_index_expr, linearize};
use super::interp::{eval_bin_int, eval_cmp_float, eval_cmp_int, wrap_int};
use super::ir::*;

/// Simplify an expression.
pub fn simplify_expr(e: &Expr) -> Expr {
    let e = fold(e);
    if is_affine_tree(&e) {
        let l = linearize(&e);
        let r = l.to_expr();
        // Only canonicalize when it does not grow the tree.
        if node_count(&r) <= node_count(&e) {
            return r;
        }
    }
    e
}

fn is_affine_tree(e: &Expr) -> bool {
    match e {
        Expr::Int(_, DType::I64) | Expr::Var(_) => true,
        Expr::Bin(BinOp::Add | BinOp::Sub | BinOp::Mul, a, b) => {
            (is_affine_tree(a) || is_index_expr(a)) && (is_affine_tree(b) || is_index_expr(b))
        }
        _ => false,
    }
}

fn node_count(e: &Expr) -> usize {
    let mut n = 1;
    e.for_each_child(|c| n += node_count(c));
    n
}

fn int_of(e: &Expr) -> Option<(i64, DType)> {
    match e {
        Expr::Int(v, t) => Some((*v, *t)),
        _ => None,
    }
}

fn bool_of(e: &Expr) -> Option<bool> {
    match e {
        Expr::Int(v, DType::Bool) => Some(*v != 0),
        _ => None,
    }
}

fn fbool(b: bool) -> Expr {
    Expr::Int(b as i64, DType::Bool)
}

fn fold(e: &Expr) -> Expr {
    match e {
        Expr::Bin(op, a, b) => {
            let a = simplify_expr(a);
            let b = simplify_expr(b);
            fold_bin(*op, a, b)
        }
        Expr::Cmp(op, a, b) => {
            let a = simplify_expr(a);
            let b = simplify_expr(b);
            match (&a, &b) {
                (Expr::Int(x, _), Expr::Int(y, _)) => fbool(eval_cmp_int(*op, *x, *y)),
                (Expr::Float(x, _), Expr::Float(y, _)) => fbool(eval_cmp_float(*op, *x, *y)),
                _ => Expr::Cmp(*op, Box::new(a), Box::new(b)),
            }
        }
        Expr::And(a, b) => {
            let a = simplify_expr(a);
            let b = simplify_expr(b);
            match (bool_of(&a), bool_of(&b)) {
                (Some(false), _) | (_, Some(false)) => fbool(false),
                (Some(true), _) => b,
                (_, Some(true)) => a,
                _ => Expr::And(Box::new(a), Box::new(b)),
            }
        }
        Expr::Or(a, b) => {
            let a = simplify_expr(a);
            let b = simplify_expr(b);
            match (bool_of(&a), bool_of(&b)) {
                (Some(true), _) | (_, Some(true)) => fbool(true),
                (Some(false), _) => b,
                (_, Some(false)) => a,
                _ => Expr::Or(Box::new(a), Box::new(b)),
            }
        }
        Expr::Not(a) => {
            let a = simplify_expr(a);
            match bool_of(&a) {
                Some(v) => fbool(!v),
                None => Expr::Not(Box::new(a)),
            }
        }
        Expr::Select(c, t, f) => {
            let c = simplify_expr(c);
            let t = simplify_expr(t);
            let f = simplify_expr(f);
            match bool_of(&c) {
                Some(true) => t,
                Some(false) => f,
                None => Expr::Select(Box::new(c), Box::new(t), Box::new(f)),
            }
        }
        Expr::Cast(t, a) => {
            let a = simplify_expr(a);
            match (&a, *t) {
                (Expr::Int(v, _), t) if t.is_int() => Expr::Int(wrap_int(*v, t), t),
                (Expr::Int(v, s), t) if t.is_float() => {
                    let x = if *s == DType::U8 {
                        *v as u8 as f64
                    } else {
                        *v as f64
                    };
                    Expr::Float(if t == DType::F32 { x as f32 as f64 } else { x }, t)
                }
                (Expr::Float(v, _), DType::F32) => Expr::Float(*v as f32 as f64, DType::F32),
                (Expr::Float(v, _), DType::F64) => Expr::Float(*v, DType::F64),
                _ => Expr::Cast(*t, Box::new(a)),
            }
        }
        Expr::Load { buf, index } => Expr::Load {
            buf: buf.clone(),
            index: index.iter().map(simplify_expr).collect(),
        },
        Expr::Call(f, args) => Expr::Call(*f, args.iter().map(simplify_expr).collect()),
        Expr::Int(..) | Expr::Float(..) | Expr::Var(_) => e.clone(),
    }
}

fn fold_bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    if let (Some((x, t)), Some((y, _))) = (int_of(&a), int_of(&b)) {
        if t != DType::Bool {
            if let Some(v) = eval_bin_int(op, x, y, t) {
                return Expr::Int(v, t);
            }
        }
    }
    if let (Expr::Float(x, t), Expr::Float(y, _)) = (&a, &b) {
        let v = match op {
            BinOp::Add => Some(x + y),
            BinOp::Sub => Some(x - y),
            BinOp::Mul => Some(x * y),
            BinOp::Div => Some(x / y),
            BinOp::Min => Some(if x < y { *x } else { *y }),
            BinOp::Max => Some(if x > y { *x } else { *y }),
            _ => None,
        };
        if let Some(v) = v {
            let v = if *t == DType::F32 { v as f32 as f64 } else { v };
            return Expr::Float(v, *t);
        }
    }
    let ai = int_of(&a).map(|p| p.0);
    let bi = int_of(&b).map(|p| p.0);
    match (op, ai, bi) {
        (BinOp::Add, Some(0), _) => return b,
        (BinOp::Add | BinOp::Sub, _, Some(0)) => return a,
        (BinOp::Mul, Some(1), _) => return b,
        (BinOp::Mul | BinOp::Div | BinOp::FloorDiv, _, Some(1)) => return a,
        (BinOp::Mul, Some(0), _) | (BinOp::Mul, _, Some(0)) => {
            let t = int_of(&a).or(int_of(&b)).unwrap().1;
            return Expr::Int(0, t);
        }
        (BinOp::FloorMod | BinOp::Mod, _, Some(1)) => {
            return Expr::Int(0, int_of(&b).unwrap().1);
        }
        _ => {}
    }
    if matches!(op, BinOp::Min | BinOp::Max) && a == b {
        return a;
    }
    Expr::Bin(op, Box::new(a), Box::new(b))
}

/// Simplify every expression of a statement, drop empty loops/branches and flatten sequences.
pub fn simplify_stmt(s: &Stmt) -> Stmt {
    match s {
        Stmt::For {
            var,
            min,
            extent,
            kind,
            body,
        } => {
            let extent = simplify_expr(extent);
            if matches!(extent.as_int(), Some(x) if x <= 0) {
                return Stmt::nop();
            }
            Stmt::For {
                var: var.clone(),
                min: simplify_expr(min),
                extent,
                kind: *kind,
                body: Box::new(simplify_stmt(body)),
            }
        }
        Stmt::Attr { attr, body } => Stmt::Attr {
            attr: attr.clone(),
            body: Box::new(simplify_stmt(body)),
        },
        Stmt::Seq(v) => Stmt::seq(v.iter().map(simplify_stmt).collect()),
        Stmt::Store { buf, index, value } => Stmt::Store {
            buf: buf.clone(),
            index: index.iter().map(simplify_expr).collect(),
            value: simplify_expr(value),
        },
        Stmt::IfThenElse { cond, then_, else_ } => {
            let c = simplify_expr(cond);
            // `likely` is a branch hint: a guard that unrolling made constant decides as is
            // (an overrunning split's tail iterations vanish)
            let decided = match &c {
                Expr::Call(Intrinsic::Likely, a) if a.len() == 1 => bool_of(&a[0]),
                _ => bool_of(&c),
            };
            match decided {
                Some(true) => simplify_stmt(then_),
                Some(false) => else_.as_ref().map_or(Stmt::nop(), |e| simplify_stmt(e)),
                None => Stmt::IfThenElse {
                    cond: c,
                    then_: Box::new(simplify_stmt(then_)),
                    else_: else_.as_ref().map(|e| Box::new(simplify_stmt(e))),
                },
            }
        }
        Stmt::Allocate { buffer, body } => Stmt::Allocate {
            buffer: buffer.clone(),
            body: Box::new(simplify_stmt(body)),
        },
        Stmt::Evaluate(e) => Stmt::Evaluate(simplify_expr(e)),
    }
}

/// Simplify a whole kernel.
pub fn simplify_kernel(k: &Kernel) -> Kernel {
    Kernel {
        name: k.name.clone(),
        params: k.params.clone(),
        body: simplify_stmt(&k.body),
    }
}
