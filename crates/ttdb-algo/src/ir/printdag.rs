//! `ComputeDAG::PrintDAG(simple_mode=true)` text and its md5, the hash of relay workload
//! keys (spec §3.2; `src/auto_scheduler/compute_dag.cc`, expressions in TVM's legacy repr,
//! `src/script/printer/legacy_repr.cc`).
//!
//! One line per stage: `"<name> = PLACEHOLDER \n"` (trailing space) for placeholders;
//! `"<name>(<axes>)"` then ` += src` / ` max= src` / ` min= src` for reductions, else
//! ` = body`, except that a body whose top node is a call prints only the op
//! (`Op(tir.exp)`).
use super::dag::{Body, Combiner, Dag, Operation};
use super::dtype::DType;
use super::expr::{BinOp, Expr};
use md5::{Digest, Md5};
use std::fmt::Write;

/// The PrintDAG(simple_mode=true) text of a DAG.
pub fn print_dag(dag: &Dag) -> String {
    let mut s = String::new();
    for stage in &dag.stages {
        match &stage.op {
            Operation::Placeholder { .. } => {
                let _ = writeln!(s, "{} = PLACEHOLDER ", stage.name);
            }
            Operation::Compute(c) => {
                let axes: Vec<&str> = c.axes.iter().map(|a| a.name.as_str()).collect();
                let _ = write!(s, "{}({})", stage.name, axes.join(", "));
                match &c.body {
                    Body::Reduce {
                        combiner, source, ..
                    } => {
                        let op = match combiner {
                            Combiner::Sum => "+=",
                            Combiner::Max => "max=",
                            Combiner::Min => "min=",
                        };
                        let _ = writeln!(s, " {op} {}", legacy_repr(dag, source));
                    }
                    Body::Expr(Expr::Call { func, .. }) => {
                        let _ = writeln!(s, " = Op({})", func.op_name());
                    }
                    Body::Expr(e) => {
                        let _ = writeln!(s, " = {}", legacy_repr(dag, e));
                    }
                }
            }
        }
    }
    s
}

/// md5 hex of the PrintDAG text: what TVM puts first in a relay workload key.
pub fn dag_hash(dag: &Dag) -> String {
    md5_hex(&print_dag(dag))
}

pub fn md5_hex(text: &str) -> String {
    ttdb_format::signature::hex(&Md5::digest(text.as_bytes()))
}

/// TVM's legacy repr of an expression (`AsLegacyRepr`).
pub fn legacy_repr(dag: &Dag, e: &Expr) -> String {
    let mut s = String::new();
    write_expr(dag, e, &mut s);
    s
}

fn write_expr(dag: &Dag, e: &Expr, s: &mut String) {
    match e {
        Expr::IntImm { value, dtype } => {
            if *dtype == DType::I32 {
                let _ = write!(s, "{value}");
            } else {
                let _ = write!(s, "({dtype}){value}");
            }
        }
        Expr::FloatImm { value, dtype } => {
            s.push_str(&format_g(*value));
            match dtype.bits() {
                32 => s.push('f'),
                16 => s.push('h'),
                _ => {}
            }
        }
        Expr::Var(n) => s.push_str(n),
        Expr::Load {
            tensor, indices, ..
        } => {
            s.push_str(&dag.stage(*tensor).name);
            s.push('[');
            write_list(dag, indices, s);
            s.push(']');
        }
        Expr::Binary { op, a, b } => {
            let infix = match op {
                BinOp::Add => Some(" + "),
                BinOp::Sub => Some(" - "),
                BinOp::Mul => Some("*"),
                BinOp::Div => Some("/"),
                BinOp::Mod => Some(" % "),
                BinOp::Eq => Some(" == "),
                BinOp::Ne => Some(" != "),
                BinOp::Lt => Some(" < "),
                BinOp::Le => Some(" <= "),
                BinOp::Gt => Some(" > "),
                BinOp::Ge => Some(" >= "),
                BinOp::And => Some(" && "),
                BinOp::Or => Some(" || "),
                BinOp::FloorDiv | BinOp::FloorMod | BinOp::Min | BinOp::Max => None,
            };
            match infix {
                Some(op) => {
                    s.push('(');
                    write_expr(dag, a, s);
                    s.push_str(op);
                    write_expr(dag, b, s);
                    s.push(')');
                }
                None => {
                    s.push_str(match op {
                        BinOp::FloorDiv => "floordiv(",
                        BinOp::FloorMod => "floormod(",
                        BinOp::Min => "min(",
                        _ => "max(",
                    });
                    write_expr(dag, a, s);
                    s.push_str(", ");
                    write_expr(dag, b, s);
                    s.push(')');
                }
            }
        }
        Expr::Not(a) => {
            s.push('!');
            write_expr(dag, a, s);
        }
        Expr::Select {
            cond,
            then,
            otherwise,
        } => {
            s.push_str("select(");
            write_list(
                dag,
                &[(**cond).clone(), (**then).clone(), (**otherwise).clone()],
                s,
            );
            s.push(')');
        }
        Expr::Cast { dtype, value } => {
            let _ = write!(s, "{dtype}(");
            write_expr(dag, value, s);
            s.push(')');
        }
        Expr::Call { func, args, .. } => {
            s.push_str(func.op_name());
            s.push('(');
            write_list(dag, args, s);
            s.push(')');
        }
    }
}

fn write_list(dag: &Dag, items: &[Expr], s: &mut String) {
    for (i, e) in items.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        write_expr(dag, e, s);
    }
}

/// C++ `std::ostream << double` with the default precision 6 (printf `%g`): 6 significant
/// digits, trailing zeros removed, scientific form when the exponent is < -4 or >= 6.
pub fn format_g(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    const P: i32 = 6;
    // Round to P significant digits first; the exponent of the rounded value decides the form.
    let sci = format!("{:.*e}", (P - 1) as usize, v);
    let (mantissa, exp) = sci.split_once('e').expect("rust {:e} has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    if !(-4..P).contains(&exp) {
        let m = strip_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    } else {
        let decimals = (P - 1 - exp).max(0) as usize;
        strip_zeros(&format!("{:.*}", decimals, v))
    }
}

fn strip_zeros(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::dag::{ComputeAttrs, DagBuilder, IterVar};

    #[test]
    fn format_g_matches_printf() {
        let cases = [
            (0.0, "0"),
            (768.0, "768"),
            (6.0, "6"),
            (0.5, "0.5"),
            (-1.5, "-1.5"),
            (0.125, "0.125"),
            (1.0 / 3.0, "0.333333"),
            (100000.0, "100000"),
            (1000000.0, "1e+06"),
            (f32::MIN as f64, "-3.40282e+38"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (123456789.0, "1.23457e+08"),
            (2.5, "2.5"),
            (9.9999996, "10"),
        ];
        for (v, want) in cases {
            assert_eq!(format_g(v), want, "{v}");
        }
    }

    /// The BERT dense text of spec §3.2, whose md5 is a real key hash.
    #[test]
    fn dense_text_hashes_to_the_real_key() {
        let mut b = DagBuilder::new();
        let x = b.placeholder("placeholder", &[14, 3072], DType::F32);
        let w = b.placeholder("placeholder", &[768, 3072], DType::F32);
        let out = b.reduce(
            "T_matmul_NT",
            "dense",
            vec![IterVar::new("i", 14), IterVar::new("j", 768)],
            vec![IterVar::new("k", 3072)],
            Combiner::Sum,
            ComputeAttrs::default(),
            |v, r| x.at(vec![v[0].clone(), r[0].clone()]) * w.at(vec![v[1].clone(), r[0].clone()]),
        );
        let dag = b.finish(&[&out]);
        let text = print_dag(&dag);
        assert_eq!(
            text,
            "placeholder = PLACEHOLDER \nplaceholder = PLACEHOLDER \nT_matmul_NT(i, j) += (placeholder[i, k]*placeholder[j, k])\n"
        );
        assert_eq!(dag_hash(&dag), "218090bc617f9a36fbabdf253ec28064");
    }

    #[test]
    fn immediates_print_with_type_markers() {
        let dag = Dag {
            stages: vec![],
            outputs: vec![],
        };
        assert_eq!(legacy_repr(&dag, &Expr::bool(true)), "(bool)1");
        assert_eq!(legacy_repr(&dag, &Expr::f32(0.0)), "0f");
        assert_eq!(
            legacy_repr(
                &dag,
                &Expr::IntImm {
                    value: 5,
                    dtype: DType::I64
                }
            ),
            "(int64)5"
        );
        assert_eq!(
            legacy_repr(
                &dag,
                &Expr::FloatImm {
                    value: 2.0,
                    dtype: DType::F64
                }
            ),
            "2"
        );
        let e = Expr::max(Expr::min(Expr::var("x"), 6), 0);
        assert_eq!(legacy_repr(&dag, &e), "max(min(x, 6), 0)");
        // an int meeting a float is cast, as BinaryOpMatchTypes does
        let e = Expr::max(Expr::var("x"), Expr::f32(0.0));
        assert_eq!(legacy_repr(&dag, &e), "max(float32(x), 0f)");
        let e = Expr::select(
            Expr::eq(Expr::floormod(Expr::var("i"), 6), 5),
            Expr::f32(1.0),
            Expr::f32(0.0),
        );
        assert_eq!(
            legacy_repr(&dag, &e),
            "select((floormod(i, 6) == 5), 1f, 0f)"
        );
        assert_eq!(
            legacy_repr(&dag, &Expr::var("x").cast(DType::F32)),
            "float32(x)"
        );
    }
}
