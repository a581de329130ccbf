//! Unit tests for the loop-nest IR, interpreter, bounds checker and unroll pass.

use super::bounds::check_bounds;
use super::data::BufferData;
use super::interp::{run, InterpError, InterpOptions};
use super::unroll::unroll_loops;
use super::*;

fn f32buf(name: &str, shape: &[i64], role: BufferRole) -> Buffer {
    Buffer::new(name, DType::F32, shape, role)
}
fn v(n: &str) -> Expr {
    Expr::var(n)
}
fn i(x: i64) -> Expr {
    Expr::int(x)
}

/// C[i, j] = sum_k A[i, k] * B[k, j], with an explicit init.
fn matmul(n: i64) -> Kernel {
    crate::loopnest::textbook::textbook_gemm_kernel("matmul", n, n, n, ForKind::Serial)
}

#[test]
fn interp_matmul_matches_naive() {
    let n = 5;
    let k = matmul(n);
    let a = BufferData::random(DType::F32, 25, 1);
    let b = BufferData::random(DType::F32, 25, 2);
    let mut bufs = vec![a.clone(), b.clone(), BufferData::zeros(DType::F32, 25)];
    run(&k, &mut bufs, InterpOptions::default()).unwrap();
    let (a, b) = (a.as_f32().unwrap(), b.as_f32().unwrap());
    let c = bufs[2].as_f32().unwrap();
    for r in 0..5 {
        for col in 0..5 {
            let mut s = 0f32;
            for kk in 0..5 {
                s += a[r * 5 + kk] * b[kk * 5 + col];
            }
            assert!((s - c[r * 5 + col]).abs() < 1e-6);
        }
    }
    assert!(check_bounds(&k).unwrap().is_empty());
}

#[test]
fn interp_out_of_bounds_is_error() {
    let k = Kernel::new(
        "oob",
        vec![f32buf("A", &[4], BufferRole::Output)],
        Stmt::loop_(
            "i",
            5,
            ForKind::Serial,
            Stmt::store("A", vec![v("i")], Expr::f32(1.0)),
        ),
    );
    let mut bufs = vec![BufferData::zeros(DType::F32, 4)];
    let e = run(&k, &mut bufs, InterpOptions::default()).unwrap_err();
    assert!(matches!(e, InterpError::OutOfBounds { ref index, .. } if index == &vec![4]));
    // The first four stores happened and the buffer was handed back.
    assert_eq!(bufs[0].as_f32().unwrap(), &[1.0; 4]);
}

#[test]
fn interp_step_budget_stops_hostile_loop() {
    let k = Kernel::new(
        "spin",
        vec![f32buf("A", &[1], BufferRole::Output)],
        Stmt::loop_(
            "i",
            1 << 40,
            ForKind::Serial,
            Stmt::store("A", vec![i(0)], Expr::f32(1.0)),
        ),
    );
    let mut bufs = vec![BufferData::zeros(DType::F32, 1)];
    let e = run(
        &k,
        &mut bufs,
        InterpOptions {
            step_budget: Some(1000),
        },
    )
    .unwrap_err();
    assert_eq!(e, InterpError::StepBudgetExceeded(1000));
    // A huge temporary is an error, not an allocation failure.
    let k = Kernel::new(
        "huge",
        vec![f32buf("A", &[1], BufferRole::Output)],
        Stmt::allocate(f32buf("T", &[1 << 40], BufferRole::Temporary), Stmt::nop()),
    );
    let e = run(&k, &mut bufs, InterpOptions::default()).unwrap_err();
    assert!(matches!(e, InterpError::TemporaryTooLarge { .. }));
}

#[test]
fn interp_integer_semantics() {
    // out[0..6] = floordiv, floormod, div, mod of (-7, 2), min, max
    let a = || Expr::Int(-7, DType::I32);
    let b = || Expr::Int(2, DType::I32);
    let vals = [
        Expr::floordiv(a(), b()),
        Expr::floormod(a(), b()),
        Expr::bin(BinOp::Div, a(), b()),
        Expr::bin(BinOp::Mod, a(), b()),
        Expr::min(a(), b()),
        Expr::bin(
            BinOp::Add,
            Expr::Int(i32::MAX as i64, DType::I32),
            Expr::Int(1, DType::I32),
        ),
    ];
    let body = Stmt::seq(
        vals.iter()
            .enumerate()
            .map(|(n, e)| Stmt::store("O", vec![i(n as i64)], e.clone()))
            .collect(),
    );
    let k = Kernel::new(
        "ints",
        vec![Buffer::new("O", DType::I32, &[6], BufferRole::Output)],
        body,
    );
    let mut bufs = vec![BufferData::zeros(DType::I32, 6)];
    run(&k, &mut bufs, InterpOptions::default()).unwrap();
    assert_eq!(bufs[0], BufferData::I32(vec![-4, 1, -3, -1, -7, i32::MIN]));
    // The simplifier folds to the same values.
    for (n, e) in vals.iter().enumerate() {
        let BufferData::I32(o) = &bufs[0] else {
            unreachable!()
        };
        assert_eq!(simplify_expr(e), Expr::Int(o[n] as i64, DType::I32));
    }
}

#[test]
fn validate_rejects_bad_kernels() {
    let out = || vec![f32buf("A", &[4], BufferRole::Output)];
    let unbound = Kernel::new("k", out(), Stmt::store("A", vec![v("x")], Expr::f32(0.0)));
    assert!(validate(&unbound).is_err());
    let wrong_rank = Kernel::new(
        "k",
        out(),
        Stmt::store("A", vec![i(0), i(0)], Expr::f32(0.0)),
    );
    assert!(validate(&wrong_rank).is_err());
    let wrong_type = Kernel::new("k", out(), Stmt::store("A", vec![i(0)], Expr::i32(0)));
    assert!(validate(&wrong_type).is_err());
    let nested_par = Kernel::new(
        "k",
        out(),
        Stmt::loop_(
            "a",
            2,
            ForKind::Parallel,
            Stmt::loop_(
                "b",
                2,
                ForKind::Parallel,
                Stmt::store("A", vec![v("b")], Expr::f32(0.0)),
            ),
        ),
    );
    assert!(validate(&nested_par)
        .unwrap_err()
        .0
        .contains("nested parallel"));
    let rebind = Kernel::new(
        "k",
        out(),
        Stmt::loop_(
            "a",
            2,
            ForKind::Serial,
            Stmt::loop_("a", 2, ForKind::Serial, Stmt::nop()),
        ),
    );
    assert!(validate(&rebind).is_err());
}

fn store_at(idx: Expr, ext: i64) -> Kernel {
    Kernel::new(
        "k",
        vec![f32buf("A", &[16], BufferRole::Output)],
        Stmt::loop_(
            "i",
            ext,
            ForKind::Serial,
            Stmt::store("A", vec![idx], Expr::f32(0.0)),
        ),
    )
}

#[test]
fn bounds_hostile_cases() {
    // in bounds
    assert!(check_bounds(&store_at(v("i"), 16)).unwrap().is_empty());
    // negative index
    let r = check_bounds(&store_at(Expr::sub(v("i"), i(1)), 16)).unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].range.lo, Some(-1));
    // past the extent
    assert_eq!(check_bounds(&store_at(v("i"), 17)).unwrap().len(), 1);
    // unguarded non-divisible tile: 3 tiles of 6 cover 18 > 16
    let tile = |guard: bool| {
        let idx = Expr::add(Expr::mul(v("o"), i(6)), v("x"));
        let st = Stmt::store("A", vec![idx.clone()], Expr::f32(0.0));
        let st = if guard {
            Stmt::if_(Expr::likely(Expr::lt(idx, i(16))), st, None)
        } else {
            st
        };
        Kernel::new(
            "k",
            vec![f32buf("A", &[16], BufferRole::Output)],
            Stmt::loop_(
                "o",
                3,
                ForKind::Serial,
                Stmt::loop_("x", 6, ForKind::Serial, st),
            ),
        )
    };
    assert_eq!(check_bounds(&tile(false)).unwrap().len(), 1);
    assert!(check_bounds(&tile(true)).unwrap().is_empty());
    // guard via select on a load
    let sel = Kernel::new(
        "k",
        vec![
            f32buf("A", &[16], BufferRole::Input),
            f32buf("B", &[20], BufferRole::Output),
        ],
        Stmt::loop_(
            "i",
            20,
            ForKind::Serial,
            Stmt::store(
                "B",
                vec![v("i")],
                Expr::select(
                    Expr::lt(v("i"), i(16)),
                    Expr::load("A", vec![v("i")]),
                    Expr::f32(0.0),
                ),
            ),
        ),
    );
    assert!(check_bounds(&sel).unwrap().is_empty());
    // `&&` does not guard (no short-circuit): select with reversed roles is unproven
    let sel_bad = Kernel::new(
        "k",
        sel.params.clone(),
        Stmt::loop_(
            "i",
            20,
            ForKind::Serial,
            Stmt::store(
                "B",
                vec![v("i")],
                Expr::select(
                    Expr::lt(v("i"), i(16)),
                    Expr::f32(0.0),
                    Expr::load("A", vec![v("i")]),
                ),
            ),
        ),
    );
    assert_eq!(check_bounds(&sel_bad).unwrap().len(), 1);
    // padding-style guard with two-sided condition on a shifted index
    let pad = Kernel::new(
        "k",
        sel.params.clone(),
        Stmt::loop_(
            "i",
            20,
            ForKind::Serial,
            Stmt::store(
                "B",
                vec![v("i")],
                Expr::select(
                    Expr::And(
                        Box::new(Expr::cmp(CmpOp::Ge, v("i"), i(2))),
                        Box::new(Expr::lt(v("i"), i(18))),
                    ),
                    Expr::load("A", vec![Expr::sub(v("i"), i(2))]),
                    Expr::f32(0.0),
                ),
            ),
        ),
    );
    assert!(check_bounds(&pad).unwrap().is_empty());
    // floordiv / floormod indices
    let fd = store_at(
        Expr::add(
            Expr::mul(Expr::floordiv(v("i"), i(4)), i(4)),
            Expr::floormod(v("i"), i(4)),
        ),
        16,
    );
    assert!(check_bounds(&fd).unwrap().is_empty());
    // wrapping i32 arithmetic is not trusted
    let wrap = store_at(
        Expr::cast(
            DType::I64,
            Expr::bin(
                BinOp::Add,
                Expr::cast(DType::I32, v("i")),
                Expr::i32(i32::MAX as i64),
            ),
        ),
        16,
    );
    assert_eq!(check_bounds(&wrap).unwrap().len(), 1);
    // data-dependent index is unproven unless clamped
    let gather = |clamp: bool| {
        let idx = Expr::cast(DType::I64, Expr::load("I", vec![v("i")]));
        let idx = if clamp {
            Expr::max(Expr::min(idx, i(15)), i(0))
        } else {
            idx
        };
        Kernel::new(
            "k",
            vec![
                Buffer::new("I", DType::I32, &[16], BufferRole::Input),
                f32buf("A", &[16], BufferRole::Output),
            ],
            Stmt::loop_(
                "i",
                16,
                ForKind::Serial,
                Stmt::store("A", vec![idx], Expr::f32(0.0)),
            ),
        )
    };
    assert_eq!(check_bounds(&gather(false)).unwrap().len(), 1);
    assert!(check_bounds(&gather(true)).unwrap().is_empty());
}

#[test]
fn bounds_non_constant_loop_range() {
    // for o in 0..4: for x in o*4 .. o*4 + min(4, 14 - o*4): A[x]  with A of 14
    let k = Kernel::new(
        "k",
        vec![f32buf("A", &[14], BufferRole::Output)],
        Stmt::loop_(
            "o",
            4,
            ForKind::Serial,
            Stmt::for_(
                "x",
                Expr::mul(v("o"), i(4)),
                Expr::min(i(4), Expr::sub(i(14), Expr::mul(v("o"), i(4)))),
                ForKind::Serial,
                Stmt::store("A", vec![v("x")], Expr::f32(0.0)),
            ),
        ),
    );
    assert!(
        check_bounds(&k).unwrap().is_empty(),
        "{:?}",
        check_bounds(&k)
    );
    let mut bufs = vec![BufferData::zeros(DType::F32, 14)];
    run(&k, &mut bufs, InterpOptions::default()).unwrap();
}

/// A channel shuffle's concat, after simplification: output channel `c` (of 8) reads the
/// second half `B` (2 blocks of 2) at block `c / 4 + (c % 2) * 2 - 2` when
/// `(c % 2) * 4 + c / 2 >= 4`. Only the condition's bound on the atom `c % 2` (≥ 1: `c / 2`
/// is at most 3) proves the block index non-negative.
#[test]
fn bounds_select_conditions_bound_non_variable_atoms() {
    let c = || v("c");
    let odd = || Expr::floormod(c(), i(2));
    let concat_c = Expr::add(Expr::mul(odd(), i(4)), Expr::floordiv(c(), i(2)));
    let block = |shift: i64| {
        Expr::sub(
            Expr::add(Expr::floordiv(c(), i(4)), Expr::mul(odd(), i(2))),
            i(shift),
        )
    };
    let shuffle = |shift: i64| {
        Kernel::new(
            "k",
            vec![
                f32buf("A", &[4], BufferRole::Input),
                f32buf("B", &[2, 2], BufferRole::Input),
                f32buf("C", &[8], BufferRole::Output),
            ],
            Stmt::loop_(
                "c",
                8,
                ForKind::Serial,
                Stmt::store(
                    "C",
                    vec![c()],
                    Expr::select(
                        Expr::lt(concat_c.clone(), i(4)),
                        Expr::load("A", vec![concat_c.clone()]),
                        Expr::load(
                            "B",
                            vec![
                                block(shift),
                                Expr::floormod(Expr::floordiv(c(), i(2)), i(2)),
                            ],
                        ),
                    ),
                ),
            ),
        )
    };
    let proven = check_bounds(&shuffle(2)).unwrap();
    assert!(proven.is_empty(), "{proven:?}");
    // one block further down is out of bounds for c = 1 and must stay unproven
    let r = check_bounds(&shuffle(3)).unwrap();
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].buffer, "B");
    let mut bufs = vec![
        BufferData::F32(vec![0.0, 1.0, 2.0, 3.0]),
        BufferData::F32(vec![4.0, 5.0, 6.0, 7.0]),
        BufferData::zeros(DType::F32, 8),
    ];
    run(&shuffle(2), &mut bufs, InterpOptions::default()).unwrap();
    // channels 0..8 of concat(A, B) = 0..8, shuffled in 2 groups of 4
    assert_eq!(
        bufs[2],
        BufferData::F32(vec![0.0, 4.0, 1.0, 5.0, 2.0, 6.0, 3.0, 7.0])
    );
}

#[test]
fn printer_is_stable() {
    let k = matmul(4);
    let s = kernel_to_string(&k);
    let expected =
        "kernel matmul(A: float32[4, 4] input, B: float32[4, 4] input, C: float32[4, 4] output) {
  for (i, 0, 4) {
    for (j, 0, 4) {
      C[i, j] = 0.0f
      for (k, 0, 4) {
        C[i, j] = (C[i, j] + (A[i, k] * B[k, j]))
      }
    }
  }
}
";
    assert_eq!(s, expected);
}

#[test]
fn simplifier_affine() {
    let e = Expr::add(
        Expr::mul(Expr::add(v("i"), i(1)), i(4)),
        Expr::sub(v("j"), i(4)),
    );
    assert_eq!(printer::expr_to_string(&simplify_expr(&e)), "((i * 4) + j)");
    let c = Expr::select(Expr::lt(i(1), i(2)), v("a"), v("b"));
    assert_eq!(simplify_expr(&c), v("a"));
}

fn unroll_kernel(max_step: i64, explicit: bool, inner: i64, outer: i64) -> Kernel {
    let body = Stmt::loop_(
        "o",
        2,
        ForKind::Serial,
        Stmt::attr(
            Attr::AutoUnroll { max_step, explicit },
            Stmt::loop_(
                "a",
                outer,
                ForKind::Serial,
                Stmt::loop_(
                    "b",
                    inner,
                    ForKind::Serial,
                    Stmt::store(
                        "A",
                        vec![Expr::add(
                            Expr::mul(v("o"), i(outer * inner)),
                            Expr::add(Expr::mul(v("a"), i(inner)), v("b")),
                        )],
                        Expr::f32(1.0),
                    ),
                ),
            ),
        ),
    );
    Kernel::new(
        "u",
        vec![f32buf("A", &[2 * outer * inner], BufferRole::Output)],
        body,
    )
}

fn count_loops(s: &Stmt) -> usize {
    match s {
        Stmt::For { body, .. } => 1 + count_loops(body),
        Stmt::Attr { body, .. } | Stmt::Allocate { body, .. } => count_loops(body),
        Stmt::Seq(v) => v.iter().map(count_loops).sum(),
        Stmt::IfThenElse { then_, else_, .. } => {
            count_loops(then_) + else_.as_ref().map_or(0, |e| count_loops(e))
        }
        _ => 0,
    }
}

#[test]
fn unroll_tvm_rules() {
    // 4x4 = 16 stores ≤ 16: both inner loops unrolled; the pragma'd outer loop stays.
    let k = unroll_loops(&unroll_kernel(16, true, 4, 4)).unwrap();
    assert_eq!(count_loops(&k.body), 1);
    // 64 > 16: only the innermost (4 ≤ 16) is unrolled; the next is 4*4 = 16 ≤ 16 -> unrolled too
    // when inner = 4, outer = 8: inner 4*1 ≤ 16 yes (steps 4), outer 8*4 = 32 > 16 no.
    let k = unroll_loops(&unroll_kernel(16, true, 4, 8)).unwrap();
    assert_eq!(count_loops(&k.body), 2);
    // max_step 0: nothing unrolled
    let k = unroll_loops(&unroll_kernel(0, true, 4, 4)).unwrap();
    assert_eq!(count_loops(&k.body), 3);
    // not explicit: loops are only marked Unrolled
    let k = unroll_loops(&unroll_kernel(16, false, 4, 4)).unwrap();
    assert_eq!(count_loops(&k.body), 3);
    assert!(printer::kernel_to_string(&k).contains("unrolled (b, 0, 4)"));
    // semantics preserved
    for (s, e, inner, outer) in [(16, true, 4, 4), (16, true, 4, 8), (512, true, 3, 5)] {
        let orig = unroll_kernel(s, e, inner, outer);
        let un = unroll_loops(&orig).unwrap();
        let n = (2 * inner * outer) as usize;
        let mut b1 = vec![BufferData::zeros(DType::F32, n)];
        let mut b2 = vec![BufferData::zeros(DType::F32, n)];
        run(&orig, &mut b1, InterpOptions::default()).unwrap();
        run(&un, &mut b2, InterpOptions::default()).unwrap();
        assert_eq!(b1, b2);
        assert!(check_bounds(&un).unwrap().is_empty());
    }
}

#[test]
fn unroll_explicit_kind_and_depth_limit() {
    // An explicit `Unrolled` loop is always unrolled, even outside a pragma scope.
    let k = Kernel::new(
        "k",
        vec![f32buf("A", &[8], BufferRole::Output)],
        Stmt::loop_(
            "i",
            8,
            ForKind::Unrolled,
            Stmt::store("A", vec![v("i")], Expr::f32(2.0)),
        ),
    );
    let u = unroll_loops(&k).unwrap();
    assert_eq!(count_loops(&u.body), 0);
    assert_eq!(u.body.size(), 9);
    // Depth: ten nested extent-1 loops; TVM unrolls while unroll_depth ≤ 8 (i.e. 9 levels).
    let mut s = Stmt::store("A", vec![i(0)], Expr::f32(1.0));
    for d in 0..10 {
        s = Stmt::loop_(&format!("l{d}"), 1, ForKind::Serial, s);
    }
    let k = Kernel::new(
        "k",
        vec![f32buf("A", &[8], BufferRole::Output)],
        Stmt::attr(
            Attr::AutoUnroll {
                max_step: 1 << 20,
                explicit: true,
            },
            s,
        ),
    );
    let u = unroll_loops(&k).unwrap();
    assert_eq!(count_loops(&u.body), 1);
    // A serial loop around a non-unrolled loop is never auto-unrolled.
    let k = Kernel::new(
        "k",
        vec![f32buf("A", &[64], BufferRole::Output)],
        Stmt::attr(
            Attr::AutoUnroll {
                max_step: 1 << 20,
                explicit: true,
            },
            Stmt::loop_(
                "a",
                2,
                ForKind::Serial,
                Stmt::loop_(
                    "p",
                    2,
                    ForKind::Parallel,
                    Stmt::store("A", vec![v("p")], Expr::f32(1.0)),
                ),
            ),
        ),
    );
    assert_eq!(count_loops(&unroll_loops(&k).unwrap().body), 2);
    // code-size guard
    let big = Kernel::new(
        "k",
        vec![f32buf("A", &[1], BufferRole::Output)],
        Stmt::loop_(
            "i",
            1 << 30,
            ForKind::Unrolled,
            Stmt::store("A", vec![i(0)], Expr::f32(2.0)),
        ),
    );
    assert!(unroll_loops(&big).is_err());
}

#[test]
fn cost_guard_rejects_absurd_kernels() {
    let big = Kernel::new(
        "k",
        vec![f32buf("A", &[1], BufferRole::Output)],
        Stmt::loop_(
            "i",
            1 << 30,
            ForKind::Serial,
            Stmt::loop_(
                "j",
                1 << 30,
                ForKind::Serial,
                Stmt::store("A", vec![i(0)], Expr::f32(2.0)),
            ),
        ),
    );
    assert!(cost::check_cost(&big, &cost::CostLimits::default()).is_err());
    let mem = Kernel::new(
        "k",
        vec![f32buf("A", &[1], BufferRole::Output)],
        Stmt::allocate(f32buf("T", &[1 << 34], BufferRole::Temporary), Stmt::nop()),
    );
    assert!(cost::check_cost(&mem, &cost::CostLimits::default()).is_err());
    assert!(cost::check_cost(&matmul(64), &cost::CostLimits::default()).is_ok());
}

#[test]
fn bounds_guard_invalidated_by_store_is_not_trusted() {
    // if (I[0] < 16) { I[0] = 100; A[I[0]] = 0 }  -- the guard is stale after the store.
    let idx = || Expr::cast(DType::I64, Expr::load("I", vec![i(0)]));
    let mk = |store_first: bool| {
        let mut body = vec![Stmt::store("A", vec![idx()], Expr::f32(0.0))];
        if store_first {
            body.insert(0, Stmt::store("I", vec![i(0)], Expr::i32(100)));
        }
        Kernel::new(
            "k",
            vec![
                Buffer::new("I", DType::I32, &[1], BufferRole::Output),
                f32buf("A", &[16], BufferRole::Output),
            ],
            Stmt::if_(
                Expr::And(
                    Box::new(Expr::cmp(CmpOp::Ge, idx(), i(0))),
                    Box::new(Expr::lt(idx(), i(16))),
                ),
                Stmt::seq(body),
                None,
            ),
        )
    };
    assert!(check_bounds(&mk(false)).unwrap().is_empty());
    assert_eq!(check_bounds(&mk(true)).unwrap().len(), 1);
}

#[test]
fn a_store_into_an_input_buffer_is_invalid() {
    // model runners share weight buffers between kernels and pass the caller's inputs
    // directly: a kernel may only write its outputs and temporaries
    let k = Kernel::new(
        "writes_input",
        vec![
            f32buf("W", &[4], BufferRole::Input),
            f32buf("Y", &[4], BufferRole::Output),
        ],
        Stmt::store("W", vec![i(0)], Expr::f32(1.0)),
    );
    let e = validate(&k).unwrap_err();
    assert!(e.0.contains("store into input buffer `W`"), "{}", e.0);
    let mut bufs = vec![
        BufferData::zeros(DType::F32, 4),
        BufferData::zeros(DType::F32, 4),
    ];
    assert!(run(&k, &mut bufs, InterpOptions::default()).is_err());
}
