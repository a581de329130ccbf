//! Well-formedness and type checking of kernels.
//!
//! Every consumer (interpreter, bounds checker, codegen) calls `validate` first, so they can
//! rely on: variables in scope and never rebound, buffers known, ranks match, types agree,
//! no nested parallel loops, temporaries have constant positive shapes.

use super::ir::*;
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError(pub String);

impl std::fmt::Display for ValidationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid loop nest: {}", self.0)
    }
}
impl std::error::Error for ValidationError {}

fn err<T>(msg: String) -> Result<T, ValidationError> {
    Err(ValidationError(msg))
}

/// Scope used while walking a kernel: buffers visible and loop variables bound.
#[derive(Default, Clone)]
pub struct Scope {
    pub buffers: HashMap<String, Buffer>,
    pub vars: Vec<String>,
}

impl Scope {
    pub fn for_kernel(k: &Kernel) -> Scope {
        let mut s = Scope::default();
        for b in &k.params {
            s.buffers.insert(b.name.clone(), b.clone());
        }
        s
    }
}

/// Infer the type of `e` under `scope`, checking it along the way.
pub fn type_of(e: &Expr, scope: &Scope) -> Result<DType, ValidationError> {
    match e {
        Expr::Int(_, t) => {
            if t.is_int() || *t == DType::Bool {
                Ok(*t)
            } else {
                err(format!("integer immediate with type {t}"))
            }
        }
        Expr::Float(_, t) => {
            if t.is_float() {
                Ok(*t)
            } else {
                err(format!("float immediate with type {t}"))
            }
        }
        Expr::Var(v) => {
            if scope.vars.iter().any(|x| x == v) {
                Ok(DType::I64)
            } else {
                err(format!("variable `{v}` used out of scope"))
            }
        }
        Expr::Load { buf, index } => {
            let b = scope
                .buffers
                .get(buf)
                .ok_or_else(|| ValidationError(format!("load from unknown buffer `{buf}`")))?;
            check_index(b, index, scope)?;
            Ok(b.dtype)
        }
        Expr::Bin(op, a, b) => {
            let ta = type_of(a, scope)?;
            let tb = type_of(b, scope)?;
            if ta != tb {
                return err(format!("{op:?} operands have types {ta} and {tb}"));
            }
            if ta == DType::Bool {
                return err(format!("{op:?} on bool"));
            }
            if matches!(op, BinOp::FloorDiv | BinOp::FloorMod | BinOp::Mod) && !ta.is_int() {
                return err(format!("{op:?} needs integer operands, got {ta}"));
            }
            Ok(ta)
        }
        Expr::Cmp(_, a, b) => {
            let ta = type_of(a, scope)?;
            let tb = type_of(b, scope)?;
            if ta != tb {
                return err(format!("comparison of {ta} with {tb}"));
            }
            Ok(DType::Bool)
        }
        Expr::And(a, b) | Expr::Or(a, b) => {
            expect_bool(a, scope)?;
            expect_bool(b, scope)?;
            Ok(DType::Bool)
        }
        Expr::Not(a) => {
            expect_bool(a, scope)?;
            Ok(DType::Bool)
        }
        Expr::Select(c, t, f) => {
            expect_bool(c, scope)?;
            let tt = type_of(t, scope)?;
            let tf = type_of(f, scope)?;
            if tt != tf {
                return err(format!("select branches have types {tt} and {tf}"));
            }
            Ok(tt)
        }
        Expr::Cast(t, a) => {
            let ta = type_of(a, scope)?;
            if *t == DType::Bool && ta != DType::Bool {
                return err("cast to bool (use a comparison)".into());
            }
            Ok(*t)
        }
        Expr::Call(f, args) => {
            if args.len() != f.arity() {
                return err(format!("{} takes {} argument(s)", f.name(), f.arity()));
            }
            if *f == Intrinsic::Likely {
                expect_bool(&args[0], scope)?;
                return Ok(DType::Bool);
            }
            let t = type_of(&args[0], scope)?;
            if !t.is_float() {
                return err(format!("{} needs a float argument, got {t}", f.name()));
            }
            for a in &args[1..] {
                if type_of(a, scope)? != t {
                    return err(format!("{} arguments differ in type", f.name()));
                }
            }
            Ok(t)
        }
    }
}

fn expect_bool(e: &Expr, scope: &Scope) -> Result<(), ValidationError> {
    let t = type_of(e, scope)?;
    if t != DType::Bool {
        return err(format!("expected a bool condition, got {t}"));
    }
    Ok(())
}

fn expect_int(e: &Expr, scope: &Scope, what: &str) -> Result<(), ValidationError> {
    let t = type_of(e, scope)?;
    if !t.is_int() {
        return err(format!("{what} must be an integer, got {t}"));
    }
    Ok(())
}

fn check_index(b: &Buffer, index: &[Expr], scope: &Scope) -> Result<(), ValidationError> {
    if index.len() != b.shape.len() {
        return err(format!(
            "buffer `{}` has rank {} but is indexed with {} indices",
            b.name,
            b.shape.len(),
            index.len()
        ));
    }
    for i in index {
        expect_int(i, scope, "an index")?;
    }
    Ok(())
}

fn check_buffer_decl(b: &Buffer) -> Result<(), ValidationError> {
    if b.shape.is_empty() {
        return err(format!("buffer `{}` has rank 0 (use shape [1])", b.name));
    }
    if b.dtype == DType::Bool {
        return err(format!("buffer `{}` has element type bool", b.name));
    }
    if b.shape.iter().any(|&d| d < 0) {
        return err(format!("buffer `{}` has a negative extent", b.name));
    }
    let elems = b.shape.iter().try_fold(1i64, |a, &d| a.checked_mul(d));
    match elems.and_then(|n| n.checked_mul(b.dtype.bytes() as i64)) {
        Some(n) if n < (1i64 << 48) => Ok(()),
        _ => err(format!("buffer `{}` is too large", b.name)),
    }
}

/// Validate a whole kernel.
pub fn validate(k: &Kernel) -> Result<(), ValidationError> {
    let mut scope = Scope::default();
    for b in &k.params {
        check_buffer_decl(b)?;
        if b.role == BufferRole::Temporary {
            return err(format!("parameter `{}` has role Temporary", b.name));
        }
        if scope.buffers.insert(b.name.clone(), b.clone()).is_some() {
            return err(format!("duplicate parameter `{}`", b.name));
        }
    }
    check_stmt(&k.body, &mut scope, false)
}

fn check_stmt(s: &Stmt, scope: &mut Scope, in_parallel: bool) -> Result<(), ValidationError> {
    match s {
        Stmt::For {
            var,
            min,
            extent,
            kind,
            body,
        } => {
            expect_int(min, scope, "a loop min")?;
            expect_int(extent, scope, "a loop extent")?;
            if scope.vars.iter().any(|v| v == var) {
                return err(format!("loop variable `{var}` rebound while in scope"));
            }
            if *kind == ForKind::Parallel && in_parallel {
                return err(format!(
                    "nested parallel loop `{var}` (only one parallel level)"
                ));
            }
            scope.vars.push(var.clone());
            let r = check_stmt(body, scope, in_parallel || *kind == ForKind::Parallel);
            scope.vars.pop();
            r
        }
        Stmt::Attr { attr, body } => {
            if let Attr::AutoUnroll { max_step, .. } = attr {
                if *max_step < 0 {
                    return err("negative auto_unroll_max_step".into());
                }
            }
            check_stmt(body, scope, in_parallel)
        }
        Stmt::Seq(v) => v.iter().try_for_each(|s| check_stmt(s, scope, in_parallel)),
        Stmt::Store { buf, index, value } => {
            let b = scope
                .buffers
                .get(buf)
                .ok_or_else(|| ValidationError(format!("store to unknown buffer `{buf}`")))?
                .clone();
            // Inputs are read-only: a model runner shares one weight buffer between kernels
            // and hands kernels the caller's own input buffers.
            if b.role == BufferRole::Input {
                return err(format!("store into input buffer `{buf}`"));
            }
            check_index(&b, index, scope)?;
            let t = type_of(value, scope)?;
            if t != b.dtype {
                return err(format!("store of {t} into `{buf}` of type {}", b.dtype));
            }
            Ok(())
        }
        Stmt::IfThenElse { cond, then_, else_ } => {
            expect_bool(cond, scope)?;
            check_stmt(then_, scope, in_parallel)?;
            if let Some(e) = else_ {
                check_stmt(e, scope, in_parallel)?;
            }
            Ok(())
        }
        Stmt::Allocate { buffer, body } => {
            check_buffer_decl(buffer)?;
            if buffer.role != BufferRole::Temporary {
                return err(format!(
                    "allocated buffer `{}` must be Temporary",
                    buffer.name
                ));
            }
            if scope.buffers.contains_key(&buffer.name) {
                return err(format!("buffer `{}` declared twice", buffer.name));
            }
            scope.buffers.insert(buffer.name.clone(), buffer.clone());
            let r = check_stmt(body, scope, in_parallel);
            scope.buffers.remove(&buffer.name);
            r
        }
        Stmt::Evaluate(e) => type_of(e, scope).map(|_| ()),
    }
}
