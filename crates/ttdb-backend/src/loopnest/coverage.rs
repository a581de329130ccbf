//! Does a temporary's first loop nest write every element before anything reads it?
//!
//! A temporary is zero each time its `Allocate` is entered (the scratch contract of
//! `codegen::translate`). Codegen zeroes it with a memset, which LLVM drops where it sees the
//! buffer overwritten first, but not across a parallel loop, whose body is another function:
//! a padded input written by a parallel stage (a depthwise conv's `PaddedInput`, 1.9 MB for
//! mobilenet_v2's 56x56x144 layer) was zeroed by the calling thread alone on every run, a
//! third of that kernel's time. When [`overwritten_first`] proves the zeroes unobservable,
//! codegen skips the memset; the interpreter still zeroes, and reads the same values.
//!
//! The proof is syntactic and sound, not complete: the statement that opens the `Allocate`'s
//! body is a perfect nest of constant-bound loops around one store to the buffer, whose value
//! does not read the buffer, and whose flat index maps the iterations one-to-one onto
//! `[0, elements)`: after `floordiv(x, c)·c·k + floormod(x, c)·k` pairs fold back into `x·k`
//! (loops fused before a split), the index is `Σ kᵢ·vᵢ` over the loop variables with the
//! strides of a mixed-radix number (the smallest stride 1, each next one the previous stride
//! times its loop's extent, the last times its extent the element count). Anything else keeps
//! the memset.

use super::affine::{linearize, Linear};
use super::ir::*;

/// True if the first statement of `body` stores every element of `buffer` exactly once before
/// any statement reads it.
pub fn overwritten_first(buffer: &Buffer, body: &Stmt) -> bool {
    let elements = buffer.shape.iter().try_fold(1i128, |n, &d| {
        (d > 0).then(|| n.checked_mul(d as i128)).flatten()
    });
    let Some(elements) = elements else {
        return false;
    };
    let mut loops = Vec::new();
    let Some((index, value)) = first_store(first_statement(body), &buffer.name, &mut loops) else {
        return false;
    };
    if reads(value, &buffer.name) || index.iter().any(Expr::has_load) {
        return false;
    }
    let Some(flat) = flat_index(&buffer.shape, index) else {
        return false;
    };
    covers_once(fold_fused(flat), &loops, elements)
}

fn first_statement(s: &Stmt) -> &Stmt {
    match s {
        Stmt::Seq(items) if !items.is_empty() => first_statement(&items[0]),
        other => other,
    }
}

/// The store at the bottom of a perfect nest of constant-bound loops (pragmas allowed), and
/// the loops (variable, min, extent) on the way.
fn first_store<'s>(
    s: &'s Stmt,
    name: &str,
    loops: &mut Vec<(&'s str, i64, i64)>,
) -> Option<(&'s [Expr], &'s Expr)> {
    match s {
        Stmt::Attr { body, .. } => first_store(body, name, loops),
        Stmt::For {
            var,
            min,
            extent,
            body,
            ..
        } => {
            let (min, extent) = (min.as_int()?, extent.as_int()?);
            if extent <= 0 {
                return None;
            }
            loops.push((var, min, extent));
            first_store(body, name, loops)
        }
        Stmt::Store { buf, index, value } if buf == name => Some((index, value)),
        _ => None,
    }
}

fn reads(e: &Expr, name: &str) -> bool {
    match e {
        Expr::Load { buf, .. } if buf == name => true,
        _ => {
            let mut found = false;
            e.for_each_child(|c| found = found || reads(c, name));
            found
        }
    }
}

/// Row-major flat index of a multi-dimensional one.
fn flat_index(shape: &[i64], index: &[Expr]) -> Option<Linear> {
    if shape.len() != index.len() {
        return None;
    }
    let mut flat = Linear::constant(0);
    let mut stride: i128 = 1;
    for (d, e) in shape.iter().zip(index).rev() {
        flat = flat.add(&linearize(e), stride);
        stride = stride.checked_mul(*d as i128)?;
    }
    Some(flat)
}

/// Folds `floordiv(x, c)·(b·c) + floormod(x, c)·b` into `x·b`, until no pair is left.
fn fold_fused(mut l: Linear) -> Linear {
    'again: loop {
        for (i, (div, a)) in l.terms.iter().enumerate() {
            let Expr::Bin(BinOp::FloorDiv, x, c) = div else {
                continue;
            };
            let Some(c) = c.as_int().filter(|&c| c > 0) else {
                continue;
            };
            let pair = l.terms.iter().position(|(m, b)| {
                matches!(m, Expr::Bin(BinOp::FloorMod, mx, mc)
                    if mx == x && mc.as_int() == Some(c) && b.checked_mul(c as i128) == Some(*a))
            });
            if let Some(j) = pair {
                let b = l.terms[j].1;
                let x = (**x).clone();
                let (hi, lo) = (i.max(j), i.min(j));
                l.terms.remove(hi);
                l.terms.remove(lo);
                l = l.add(&linearize(&x), b);
                continue 'again;
            }
        }
        return l;
    }
}

/// True if `flat` over the loops' iteration space is a bijection onto `[0, elements)`.
fn covers_once(flat: Linear, loops: &[(&str, i64, i64)], elements: i128) -> bool {
    let mut constant = flat.constant;
    let mut strides: Vec<(i128, i64)> = Vec::new();
    for (atom, k) in &flat.terms {
        let Expr::Var(v) = atom else {
            return false;
        };
        let Some(&(_, min, extent)) = loops.iter().find(|(name, ..)| name == v) else {
            return false;
        };
        let Some(c) = k
            .checked_mul(min as i128)
            .and_then(|s| constant.checked_add(s))
        else {
            return false;
        };
        constant = c;
        if extent > 1 {
            strides.push((*k, extent));
        }
    }
    // A loop the index ignores writes its elements again: no one-to-one map, unless trivial.
    let used = |v: &str| {
        flat.terms
            .iter()
            .any(|(a, _)| matches!(a, Expr::Var(n) if n == v))
    };
    if constant != 0 || loops.iter().any(|&(v, _, e)| e > 1 && !used(v)) {
        return false;
    }
    strides.sort();
    let mut next: i128 = 1;
    for (k, extent) in strides {
        if k != next {
            return false;
        }
        let Some(n) = next.checked_mul(extent as i128) else {
            return false;
        };
        next = n;
    }
    next == elements
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(shape: &[i64]) -> Buffer {
        Buffer::new("T", DType::F32, shape, BufferRole::Temporary)
    }

    fn nest(loops: &[(&str, i64, i64)], store: Stmt) -> Stmt {
        loops.iter().rev().fold(store, |body, &(v, min, ext)| {
            Stmt::for_(v, Expr::int(min), Expr::int(ext), ForKind::Serial, body)
        })
    }

    fn v(n: &str) -> Expr {
        Expr::var(n)
    }

    /// A padded input's stage: the outer three axes fused (f = n·C·H), then w, then c.
    fn padded(fused_by: i64, w_ext: i64) -> Stmt {
        let f = v("f");
        nest(
            &[("f", 0, 6 * fused_by), ("w", 0, w_ext), ("c", 0, 24)],
            Stmt::store(
                "T",
                vec![
                    Expr::int(0),
                    Expr::floordiv(f.clone(), Expr::int(fused_by)),
                    Expr::floormod(f, Expr::int(fused_by)),
                    v("w"),
                    v("c"),
                ],
                Expr::load("P", vec![v("c")]),
            ),
        )
    }

    #[test]
    fn a_fused_parallel_nest_over_the_whole_buffer_is_proven() {
        let b = buf(&[1, 6, 58, 58, 24]);
        assert!(overwritten_first(&b, &padded(58, 58)));
        // The same nest first in a sequence, then its reader.
        let reader = Stmt::store("O", vec![v("i")], Expr::load("T", vec![v("i")]));
        assert!(overwritten_first(
            &b,
            &Stmt::seq(vec![padded(58, 58), reader])
        ));
    }

    #[test]
    fn a_nest_that_misses_or_repeats_elements_is_not() {
        let b = buf(&[1, 6, 58, 58, 24]);
        // w stops at 57: the last column is never written.
        assert!(!overwritten_first(&b, &padded(58, 57)));
        // Fused by the wrong extent: rows overlap and the last ones are missed.
        assert!(!overwritten_first(&b, &padded(57, 58)));
        // A loop the index ignores (k) writes each element twice and half of them never.
        let twice = nest(
            &[("i", 0, 8), ("k", 0, 2)],
            Stmt::store("T", vec![v("i")], Expr::f32(0.0)),
        );
        assert!(!overwritten_first(&buf(&[16]), &twice));
        // Offset by the loop's min: element 0 is never written.
        let shifted = nest(
            &[("i", 1, 16)],
            Stmt::store("T", vec![v("i")], Expr::f32(0.0)),
        );
        assert!(!overwritten_first(&buf(&[16]), &shifted));
        // ... unless the index subtracts it again.
        let back = nest(
            &[("i", 1, 16)],
            Stmt::store("T", vec![Expr::sub(v("i"), Expr::int(1))], Expr::f32(0.0)),
        );
        assert!(overwritten_first(&buf(&[16]), &back));
    }

    #[test]
    fn a_store_that_reads_its_buffer_or_sits_under_a_guard_is_not() {
        let acc = nest(
            &[("i", 0, 16)],
            Stmt::store(
                "T",
                vec![v("i")],
                Expr::add(Expr::load("T", vec![v("i")]), Expr::f32(1.0)),
            ),
        );
        assert!(!overwritten_first(&buf(&[16]), &acc));
        let guarded = nest(
            &[("i", 0, 16)],
            Stmt::IfThenElse {
                cond: Expr::lt(v("i"), Expr::int(8)),
                then_: Box::new(Stmt::store("T", vec![v("i")], Expr::f32(0.0))),
                else_: None,
            },
        );
        assert!(!overwritten_first(&buf(&[16]), &guarded));
        // A store to another buffer first.
        let other = nest(
            &[("i", 0, 16)],
            Stmt::store("U", vec![v("i")], Expr::f32(0.0)),
        );
        assert!(!overwritten_first(&buf(&[16]), &other));
    }
}
