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
//! The proof is syntactic and sound, not complete. In the statement that opens the
//! `Allocate`'s body, the buffer is stored once and never read, and the path from that
//! statement down to the store passes only through constant-bound loops, pragmas, other
//! temporaries and sequences (no guard), so the store runs once for every value of the
//! loops on its path. Its flat index is `Σ kᵢ·termᵢ`, each term a function of one of those
//! loops (the loop variable itself, or `floordiv`/`floormod` of it by constants: loops fused
//! before a split). Evaluated over its loop's range, each term must take the values
//! `c, c + s, c + 2s, ...`, every combination of a loop's terms' values must occur exactly
//! once (so they are independent digits), the constants must add up to 0, and the strides
//! `s` of all digits must be those of a mixed-radix number: the smallest 1, each next one
//! the previous times its digit's count, the last times its count the element count. Then
//! every element is stored exactly once. Anything else keeps the memset.

use super::affine::{eval_index_at as eval_at, linearize};
use super::ir::*;

/// Loops longer than this are not evaluated term by term (the proof gives up).
const MAX_EVALUATED_EXTENT: i64 = 1 << 16;

/// True if the first statement of `body` stores every element of `buffer` exactly once and
/// reads none.
pub fn overwritten_first(buffer: &Buffer, body: &Stmt) -> bool {
    let elements = buffer.shape.iter().try_fold(1i128, |n, &d| {
        (d > 0).then(|| n.checked_mul(d as i128)).flatten()
    });
    let Some(elements) = elements else {
        return false;
    };
    let first = first_statement(body);
    let name = buffer.name.as_str();
    if stores_to(first, name) != 1 || reads_in(first, name) {
        return false;
    }
    let mut loops = Vec::new();
    let Some(index) = store_path(first, name, &mut loops) else {
        return false;
    };
    if index.iter().any(Expr::has_load) {
        return false;
    }
    covers_once(&buffer.shape, index, &loops, elements).unwrap_or(false)
}

fn first_statement(s: &Stmt) -> &Stmt {
    match s {
        Stmt::Seq(items) if !items.is_empty() => first_statement(&items[0]),
        other => other,
    }
}

/// The index of the store to `name`, if every loop on the way to it has constant bounds and
/// nothing on the way makes it conditional; `loops` gets the loops (variable, min, extent).
fn store_path<'s>(
    s: &'s Stmt,
    name: &str,
    loops: &mut Vec<(&'s str, i64, i64)>,
) -> Option<&'s [Expr]> {
    match s {
        Stmt::Attr { body, .. } => store_path(body, name, loops),
        Stmt::Allocate { buffer, body } if buffer.name != name => store_path(body, name, loops),
        Stmt::Seq(items) => {
            let item = items.iter().find(|i| stores_to(i, name) > 0)?;
            store_path(item, name, loops)
        }
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
            store_path(body, name, loops)
        }
        Stmt::Store { buf, index, .. } if buf == name => Some(index),
        _ => None,
    }
}

/// How many store statements to `name` the tree holds.
fn stores_to(s: &Stmt, name: &str) -> usize {
    match s {
        Stmt::Store { buf, .. } => usize::from(buf == name),
        Stmt::For { body, .. } | Stmt::Attr { body, .. } | Stmt::Allocate { body, .. } => {
            stores_to(body, name)
        }
        Stmt::Seq(items) => items.iter().map(|i| stores_to(i, name)).sum(),
        Stmt::IfThenElse { then_, else_, .. } => {
            stores_to(then_, name) + else_.as_ref().map_or(0, |e| stores_to(e, name))
        }
        Stmt::Evaluate(_) => 0,
    }
}

/// True if any expression of the tree loads from `name`.
fn reads_in(s: &Stmt, name: &str) -> bool {
    let mut found = false;
    s.for_each_expr(&mut |e| e.for_each_load(&mut |buf, _| found |= buf == name));
    found
}

/// True if the row-major flat index of `index` over the loops' iteration space is a
/// bijection onto `[0, elements)`; None when an intermediate value overflows.
fn covers_once(
    shape: &[i64],
    index: &[Expr],
    loops: &[(&str, i64, i64)],
    elements: i128,
) -> Option<bool> {
    if shape.len() != index.len() {
        return Some(false);
    }
    let mut terms: Vec<(Expr, i128)> = Vec::new();
    let mut constant: i128 = 0;
    let mut stride: i128 = 1;
    for (d, e) in shape.iter().zip(index).rev() {
        let l = linearize(e);
        constant = constant.checked_add(l.constant.checked_mul(stride)?)?;
        for (atom, k) in l.terms {
            terms.push((atom, k.checked_mul(stride)?));
        }
        stride = stride.checked_mul(*d as i128)?;
    }
    // every term a function of exactly one loop of the path
    let of_loop = |atom: &Expr| {
        let mut using = loops.iter().filter(|(v, ..)| atom.uses_var(v));
        let first = using.next();
        first.filter(|_| using.next().is_none())
    };
    if terms.iter().any(|(atom, _)| of_loop(atom).is_none()) {
        return Some(false);
    }
    let mut digits: Vec<(i128, i64)> = Vec::new();
    for &(var, min, extent) in loops {
        let mine: Vec<&(Expr, i128)> = terms
            .iter()
            .filter(|(atom, _)| of_loop(atom).is_some_and(|l| l.0 == var))
            .collect();
        if mine.is_empty() {
            // a loop the index ignores stores its elements again
            if extent > 1 {
                return Some(false);
            }
            continue;
        }
        if extent > MAX_EVALUATED_EXTENT {
            return Some(false);
        }
        // each term's values over the loop, and the tuple of them at each iteration
        let mut tuples: Vec<Vec<i128>> = Vec::with_capacity(extent as usize);
        for x in min..min.checked_add(extent)? {
            let tuple: Option<Vec<i128>> = mine
                .iter()
                .map(|(atom, k)| k.checked_mul(eval_at(atom, var, x)? as i128))
                .collect();
            tuples.push(tuple?);
        }
        let mut product: i128 = 1;
        for t in 0..mine.len() {
            let mut values: Vec<i128> = tuples.iter().map(|tuple| tuple[t]).collect();
            values.sort_unstable();
            values.dedup();
            let lo = values[0];
            constant = constant.checked_add(lo)?;
            let step = values.get(1).map_or(1, |s| s - lo);
            if values
                .iter()
                .enumerate()
                .any(|(j, &s)| s - lo != step * j as i128)
            {
                return Some(false);
            }
            if values.len() > 1 {
                digits.push((step, values.len() as i64));
            }
            product = product.checked_mul(values.len() as i128)?;
        }
        // the terms are independent digits only if every combination of their values occurs
        // exactly once (`floordiv(b, 3)` and `floormod(b, 3)` of a fused `b` in [0, 9))
        tuples.sort_unstable();
        tuples.dedup();
        if product != extent as i128 || tuples.len() != extent as usize {
            return Some(false);
        }
    }
    if constant != 0 {
        return Some(false);
    }
    digits.sort_unstable();
    let mut next: i128 = 1;
    for (step, extent) in digits {
        if step != next {
            return Some(false);
        }
        next = next.checked_mul(extent as i128)?;
    }
    Some(next == elements)
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

    /// A conv's output written from inside a tiled nest: the parallel loop `b` fuses the
    /// outer h and w tiles (3 x 3), each tile computes into a local buffer and copies it out.
    fn tiled(h_tile: i64) -> Stmt {
        let (b, oc) = (v("b"), v("oc"));
        let h = Expr::add(
            Expr::add(v("hi"), Expr::mul(v("ho"), Expr::int(h_tile))),
            Expr::mul(Expr::floordiv(b.clone(), Expr::int(3)), Expr::int(20)),
        );
        let w = Expr::add(
            v("wi"),
            Expr::mul(Expr::floormod(b, Expr::int(3)), Expr::int(20)),
        );
        let copy_out = nest(
            &[("hi", 0, h_tile), ("wi", 0, 20), ("c", 0, 16)],
            Stmt::store(
                "T",
                vec![Expr::int(0), oc, h, w, v("c")],
                Expr::load("L", vec![v("c")]),
            ),
        );
        let local = Buffer::new("L", DType::F32, &[16], BufferRole::Temporary);
        let compute = Stmt::store("L", vec![v("c")], Expr::f32(1.0));
        let tile = Stmt::allocate(local, Stmt::seq(vec![compute, copy_out]));
        let inner = nest(&[("oc", 0, 9), ("ho", 0, 20 / h_tile)], tile);
        nest(&[("b", 0, 9)], Stmt::seq(vec![Stmt::seq(vec![]), inner]))
    }

    #[test]
    fn a_store_deep_in_a_tiled_nest_is_proven_when_its_tiles_cover_the_buffer() {
        let b = buf(&[1, 9, 60, 60, 16]);
        assert!(overwritten_first(&b, &tiled(10)));
        assert!(overwritten_first(&b, &tiled(5)));
        // 3 tiles of 3 rows per 20-row block: rows 9..20 of each block are never written.
        assert!(!overwritten_first(&b, &tiled(3)));
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
