//! Stable, TIR-like pretty-printer (used for snapshots and debugging).

use super::ir::*;
use std::fmt::{self, Write};

fn role_name(r: BufferRole) -> &'static str {
    match r {
        BufferRole::Input => "input",
        BufferRole::Output => "output",
        BufferRole::Temporary => "temp",
    }
}

fn shape_str(shape: &[i64]) -> String {
    shape
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn bin_symbol(op: BinOp) -> Option<&'static str> {
    match op {
        BinOp::Add => Some("+"),
        BinOp::Sub => Some("-"),
        BinOp::Mul => Some("*"),
        BinOp::Div => Some("/"),
        BinOp::Mod => Some("%"),
        _ => None,
    }
}

fn bin_name(op: BinOp) -> &'static str {
    match op {
        BinOp::FloorDiv => "floordiv",
        BinOp::FloorMod => "floormod",
        BinOp::Min => "min",
        BinOp::Max => "max",
        BinOp::Add => "add",
        BinOp::Sub => "sub",
        BinOp::Mul => "mul",
        BinOp::Div => "div",
        BinOp::Mod => "mod",
    }
}

fn cmp_symbol(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "==",
        CmpOp::Ne => "!=",
        CmpOp::Lt => "<",
        CmpOp::Le => "<=",
        CmpOp::Gt => ">",
        CmpOp::Ge => ">=",
    }
}

fn write_expr(out: &mut String, e: &Expr) {
    match e {
        Expr::Int(v, DType::I64) => write!(out, "{v}").unwrap(),
        Expr::Int(v, t) => write!(out, "{t}({v})").unwrap(),
        Expr::Float(v, DType::F32) => write!(out, "{v:?}f").unwrap(),
        Expr::Float(v, t) => write!(out, "{t}({v:?})").unwrap(),
        Expr::Var(v) => out.push_str(v),
        Expr::Load { buf, index } => {
            out.push_str(buf);
            out.push('[');
            write_list(out, index);
            out.push(']');
        }
        Expr::Bin(op, a, b) => match bin_symbol(*op) {
            Some(sym) => {
                out.push('(');
                write_expr(out, a);
                write!(out, " {sym} ").unwrap();
                write_expr(out, b);
                out.push(')');
            }
            None => {
                write!(out, "{}(", bin_name(*op)).unwrap();
                write_expr(out, a);
                out.push_str(", ");
                write_expr(out, b);
                out.push(')');
            }
        },
        Expr::Cmp(op, a, b) => {
            out.push('(');
            write_expr(out, a);
            write!(out, " {} ", cmp_symbol(*op)).unwrap();
            write_expr(out, b);
            out.push(')');
        }
        Expr::And(a, b) | Expr::Or(a, b) => {
            let sym = if matches!(e, Expr::And(..)) {
                "&&"
            } else {
                "||"
            };
            out.push('(');
            write_expr(out, a);
            write!(out, " {sym} ").unwrap();
            write_expr(out, b);
            out.push(')');
        }
        Expr::Not(a) => {
            out.push('!');
            write_expr(out, a);
        }
        Expr::Select(c, t, f) => {
            out.push_str("select(");
            write_list(out, &[(**c).clone(), (**t).clone(), (**f).clone()]);
            out.push(')');
        }
        Expr::Cast(t, a) => {
            write!(out, "{t}(").unwrap();
            write_expr(out, a);
            out.push(')');
        }
        Expr::Call(f, args) => {
            write!(out, "{}(", f.name()).unwrap();
            write_list(out, args);
            out.push(')');
        }
    }
}

fn write_list(out: &mut String, es: &[Expr]) {
    for (i, e) in es.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_expr(out, e);
    }
}

/// Render one expression.
pub fn expr_to_string(e: &Expr) -> String {
    let mut s = String::new();
    write_expr(&mut s, e);
    s
}

fn indent(out: &mut String, depth: usize) {
    for _ in 0..depth {
        out.push_str("  ");
    }
}

fn write_stmt(out: &mut String, s: &Stmt, depth: usize) {
    match s {
        Stmt::For {
            var,
            min,
            extent,
            kind,
            body,
        } => {
            indent(out, depth);
            let k = match kind {
                ForKind::Serial => "for",
                ForKind::Parallel => "parallel",
                ForKind::Vectorized => "vectorized",
                ForKind::Unrolled => "unrolled",
            };
            writeln!(
                out,
                "{k} ({var}, {}, {}) {{",
                expr_to_string(min),
                expr_to_string(extent)
            )
            .unwrap();
            write_stmt(out, body, depth + 1);
            indent(out, depth);
            out.push_str("}\n");
        }
        Stmt::Attr { attr, body } => {
            indent(out, depth);
            match attr {
                Attr::AutoUnroll { max_step, explicit } => writeln!(
                    out,
                    "// attr pragma_auto_unroll_max_step = {max_step}, unroll_explicit = {explicit}"
                )
                .unwrap(),
                Attr::Pragma(p) => writeln!(out, "// attr pragma {p}").unwrap(),
            }
            write_stmt(out, body, depth);
        }
        Stmt::Seq(v) => {
            for s in v {
                write_stmt(out, s, depth);
            }
        }
        Stmt::Store { buf, index, value } => {
            indent(out, depth);
            out.push_str(buf);
            out.push('[');
            write_list(out, index);
            out.push_str("] = ");
            write_expr(out, value);
            out.push('\n');
        }
        Stmt::IfThenElse { cond, then_, else_ } => {
            indent(out, depth);
            writeln!(out, "if {} {{", expr_to_string(cond)).unwrap();
            write_stmt(out, then_, depth + 1);
            if let Some(e) = else_ {
                indent(out, depth);
                out.push_str("} else {\n");
                write_stmt(out, e, depth + 1);
            }
            indent(out, depth);
            out.push_str("}\n");
        }
        Stmt::Allocate { buffer, body } => {
            indent(out, depth);
            writeln!(
                out,
                "allocate {}: {}[{}]",
                buffer.name,
                buffer.dtype,
                shape_str(&buffer.shape)
            )
            .unwrap();
            write_stmt(out, body, depth);
        }
        Stmt::Evaluate(e) => {
            indent(out, depth);
            writeln!(out, "evaluate({})", expr_to_string(e)).unwrap();
        }
    }
}

/// Render a statement (multi-line).
pub fn stmt_to_string(s: &Stmt) -> String {
    let mut out = String::new();
    write_stmt(&mut out, s, 0);
    out
}

/// Render a kernel: signature line, then the body indented once.
pub fn kernel_to_string(k: &Kernel) -> String {
    let mut out = String::new();
    write!(out, "kernel {}(", k.name).unwrap();
    for (i, b) in k.params.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write!(
            out,
            "{}: {}[{}] {}",
            b.name,
            b.dtype,
            shape_str(&b.shape),
            role_name(b.role)
        )
        .unwrap();
    }
    out.push_str(") {\n");
    write_stmt(&mut out, &k.body, 1);
    out.push_str("}\n");
    out
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&expr_to_string(self))
    }
}
impl fmt::Display for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&stmt_to_string(self))
    }
}
impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&kernel_to_string(self))
    }
}
