//! Full tiles without split guards (the idea of TVM's `LoopPartition` for `likely`
//! conditions, in a simpler form).
//!
//! A split whose factor does not divide its loop leaves a guard `if likely(i.inner +
//! 8 * i.outer < 197)` around the innermost statements. Inside a register tile that branch,
//! taken element by element, keeps LLVM from holding the tile in registers: a dense with 197
//! rows ran 2x slower on 8-row tiles than on untiled rows. [`unswitch_split_guards`] gives a
//! loop whose body holds such guards two copies of it:
//!
//! ```text
//! if likely(7 + 8 * i.outer < 197) { body, guards removed } else { body }
//! ```
//!
//! The condition is each guard with the loops inside the body at their worst value, so it
//! holds only where every guard holds for the whole tile: full tiles run the first copy, the
//! partial tile the second. Only guards of the form `likely(a < b)` (`<=`, `>`, `>=`, `&&`)
//! whose loops inside the body appear linearly with constant bounds are lifted; each lifted
//! condition reads only variables bound outside the body (the bounds checker proves the
//! unguarded accesses from it as from the guard). The fast copy is searched again for
//! guards on the variables it binds; the slow copy keeps its guards as they are, so a
//! body is copied at most once per loop level on the way down.
use super::affine::linearize;
use super::ir::*;
use super::simplify::simplify_expr;

/// The kernel with every loop body that holds liftable split guards given a guard-free copy
/// for its full tiles (module docs). Loops of one vector body are never split.
pub fn unswitch_split_guards(k: &Kernel) -> Kernel {
    Kernel {
        name: k.name.clone(),
        params: k.params.clone(),
        body: unswitch(&k.body),
    }
}

fn unswitch(s: &Stmt) -> Stmt {
    let Stmt::For { kind, body, .. } = s else {
        return s.map_children(&mut unswitch);
    };
    if *kind == ForKind::Vectorized {
        return s.clone();
    }
    let mut conds = Vec::new();
    let fast = strip(body, &mut Vec::new(), &mut conds);
    let lifted = Expr::all_of(conds);
    s.map_children(&mut |body| match &lifted {
        Some(Expr::Int(1, _)) => unswitch(&fast),
        Some(full) => Stmt::if_(
            Expr::likely(full.clone()),
            unswitch(&fast),
            Some(body.clone()),
        ),
        None => unswitch(body),
    })
}

/// A loop bound inside the body being split: its constant range, or None.
type Inner = (String, Option<(i64, i64)>);

/// `s` without the guards whose full-tile condition exists (pushed to `conds`, once each);
/// `inner` holds the loops between the body being split and `s`.
fn strip(s: &Stmt, inner: &mut Vec<Inner>, conds: &mut Vec<Expr>) -> Stmt {
    match s {
        Stmt::For {
            var, min, extent, ..
        } => {
            let range = min
                .as_int()
                .zip(extent.as_int())
                .filter(|&(_, e)| e > 0)
                .map(|(m, e)| (m, m + e - 1));
            inner.push((var.clone(), range));
            let stripped = s.map_children(&mut |body| strip(body, inner, conds));
            inner.pop();
            stripped
        }
        Stmt::IfThenElse {
            cond: Expr::Call(Intrinsic::Likely, args),
            then_,
            else_: None,
        } if args.len() == 1 => match full_tile(&args[0], inner) {
            Some(full) => {
                if !conds.contains(&full) {
                    conds.push(full);
                }
                strip(then_, inner, conds)
            }
            None => s.map_children(&mut |then_| strip(then_, inner, conds)),
        },
        _ => s.map_children(&mut |child| strip(child, inner, conds)),
    }
}

/// A condition on the outer variables alone that implies `cond` for every value of the
/// `inner` loops: each inner variable at the end of its range that makes `cond` hardest.
/// None when `cond` is not a comparison (or `&&` of them) linear in the inner variables with
/// constant ranges, or reads memory.
fn full_tile(cond: &Expr, inner: &[Inner]) -> Option<Expr> {
    match cond {
        Expr::And(a, b) => Expr::all_of(vec![full_tile(a, inner)?, full_tile(b, inner)?]),
        Expr::Cmp(op @ (CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge), a, b) => {
            if cond.has_load() {
                return None;
            }
            // `a - b` must grow as small (for < and <=) or as large as it can
            let shrink = matches!(op, CmpOp::Lt | CmpOp::Le);
            let d = linearize(a).add(&linearize(b), -1);
            let mut at = Vec::new();
            for (atom, coef) in &d.terms {
                let used: Vec<&Inner> = inner.iter().filter(|(v, _)| atom.uses_var(v)).collect();
                match (atom, used.as_slice()) {
                    (_, []) => {}
                    (Expr::Var(v), [(_, Some((lo, hi)))]) => {
                        let worst = if (*coef > 0) == shrink { *hi } else { *lo };
                        at.push((v.clone(), worst));
                    }
                    _ => return None,
                }
            }
            if at.is_empty() {
                return None; // nothing varies inside: an ordinary branch
            }
            let fix = |e: &Expr| {
                at.iter()
                    .fold(e.clone(), |e, (v, x)| e.substitute(v, &Expr::int(*x)))
            };
            let full = Expr::Cmp(*op, Box::new(fix(a)), Box::new(fix(b)));
            // no outer variable left: always true (lift it, the check is free), or false
            // (some tile is partial in every iteration here: leave it to an inner loop)
            match simplify_expr(&full).as_int() {
                Some(0) => None,
                Some(_) => Some(Expr::Int(1, DType::Bool)),
                None => Some(full),
            }
        }
        _ => None,
    }
}

impl Expr {
    /// `a && b && ...`, None for no condition.
    /// Always-true terms (`Int(1)`) are left out; all of them give `Int(1)`.
    fn all_of(conds: Vec<Expr>) -> Option<Expr> {
        let any = !conds.is_empty();
        let all = conds
            .into_iter()
            .filter(|c| c.as_int() != Some(1))
            .reduce(|a, b| Expr::And(Box::new(a), Box::new(b)));
        match all {
            None if any => Some(Expr::Int(1, DType::Bool)),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loopnest::interp;
    use crate::loopnest::{check_bounds, kernel_to_string, BufferData};

    /// `out[i] = in[i] * 2` over 13 elements in tiles of 4: the last tile is partial.
    fn tiled() -> Kernel {
        let i = Expr::add(Expr::var("ii"), Expr::mul(Expr::var("io"), Expr::int(4)));
        let guarded = Stmt::if_(
            Expr::likely(Expr::lt(i.clone(), Expr::int(13))),
            Stmt::store(
                "out",
                vec![i.clone()],
                Expr::mul(Expr::load("in", vec![i]), Expr::f32(2.0)),
            ),
            None,
        );
        Kernel::new(
            "tiled",
            vec![
                Buffer::new("in", DType::F32, &[13], BufferRole::Input),
                Buffer::new("out", DType::F32, &[13], BufferRole::Output),
            ],
            Stmt::loop_(
                "io",
                4,
                ForKind::Parallel,
                Stmt::loop_("ii", 4, ForKind::Serial, guarded),
            ),
        )
    }

    #[test]
    fn full_tiles_run_a_copy_without_the_guard() {
        let k = tiled();
        // one lifted condition (ii at 3), one guard left in the partial tile's copy
        lifts_once(&k, "likely(((3 + (io * 4)) < 13))", 13);
    }

    /// `k` unswitched lifts exactly `lifted` (one guard stays in the slow copy), its accesses
    /// are proven in bounds, and it computes what `k` does on `len` elements.
    fn lifts_once(k: &Kernel, lifted: &str, len: usize) {
        let u = unswitch_split_guards(k);
        let text = kernel_to_string(&u);
        assert!(text.contains(lifted), "{text}");
        assert_eq!(text.matches("likely(").count(), 2, "{text}");
        assert!(check_bounds(&u).unwrap().is_empty(), "{text}");
        let input = BufferData::F32((0..len).map(|x| x as f32).collect());
        let run = |k: &Kernel| {
            let mut bufs = vec![input.clone(), BufferData::F32(vec![-1.0; len])];
            interp::run(k, &mut bufs, Default::default()).unwrap();
            bufs.pop().unwrap()
        };
        assert_eq!(run(&u), run(k));
    }

    /// A guard on a reduction-like split inside the parallel loop: every row has a partial
    /// tile, so the condition is lifted to the split's outer loop, not above it.
    #[test]
    fn a_guard_partial_in_every_iteration_is_lifted_where_it_varies() {
        let k = Expr::add(Expr::var("ki"), Expr::mul(Expr::var("ko"), Expr::int(4)));
        let at = vec![Expr::var("row"), k.clone()];
        let kernel = Kernel::new(
            "rows",
            vec![
                Buffer::new("in", DType::F32, &[2, 13], BufferRole::Input),
                Buffer::new("out", DType::F32, &[2, 13], BufferRole::Output),
            ],
            Stmt::loop_(
                "row",
                2,
                ForKind::Parallel,
                Stmt::loop_(
                    "ko",
                    4,
                    ForKind::Serial,
                    Stmt::loop_(
                        "ki",
                        4,
                        ForKind::Serial,
                        Stmt::if_(
                            Expr::likely(Expr::lt(k, Expr::int(13))),
                            Stmt::store("out", at.clone(), Expr::load("in", at)),
                            None,
                        ),
                    ),
                ),
            ),
        );
        lifts_once(&kernel, "likely(((3 + (ko * 4)) < 13))", 26);
    }

    #[test]
    fn guards_that_vary_non_linearly_or_read_memory_stay() {
        // a guard on floormod(ii, 3) cannot be bounded by the ends of ii's range
        let mut k = tiled();
        k.body = k.body.map_exprs(&mut |e| {
            e.map(&mut |x| match x {
                Expr::Cmp(CmpOp::Lt, a, b) => Some(Expr::Cmp(
                    CmpOp::Lt,
                    Box::new(Expr::floormod((**a).clone(), Expr::int(3))),
                    b.clone(),
                )),
                _ => None,
            })
        });
        assert_eq!(unswitch_split_guards(&k), k);
        let reads = Expr::lt(Expr::load("in", vec![Expr::var("ii")]), Expr::f32(1.0));
        assert_eq!(full_tile(&reads, &[("ii".into(), Some((0, 3)))]), None);
    }
}
