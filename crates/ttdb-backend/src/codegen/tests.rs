//! Codegen tests: every kernel is checked against the reference interpreter on random inputs.

use super::*;
use crate::loopnest::interp::{run as interp, InterpOptions};
use crate::loopnest::ir::*;

pub(super) fn v(n: &str) -> Expr {
    Expr::var(n)
}
pub(super) fn i(x: i64) -> Expr {
    Expr::int(x)
}

pub(super) fn inputs(k: &Kernel, seed: u64) -> Vec<BufferData> {
    k.params
        .iter()
        .enumerate()
        .map(|(n, p)| match p.role {
            BufferRole::Input => {
                BufferData::random(p.dtype, p.num_elements() as usize, seed + n as u64)
            }
            _ => BufferData::for_buffer(p),
        })
        .collect()
}

pub(super) fn close(a: &BufferData, b: &BufferData) -> Result<(), String> {
    for n in 0..a.len() {
        let (x, y) = (a.get_f64(n), b.get_f64(n));
        if x.is_nan() && y.is_nan() {
            continue;
        }
        if (x - y).abs() > 1e-4 * x.abs().max(y.abs()).max(1.0) {
            return Err(format!("element {n}: jit {x} vs interp {y}"));
        }
    }
    Ok(())
}

/// Compile + run with `threads`, compare all buffers with the interpreter.
pub(super) fn check(k: &Kernel, threads: usize) -> CompiledKernel {
    check_with(k, threads, &CodegenOptions::default())
}

/// [`check`] compiling with `opts`.
pub(super) fn check_with(k: &Kernel, threads: usize, opts: &CodegenOptions) -> CompiledKernel {
    let c = compile(k, opts).unwrap_or_else(|e| panic!("{e}"));
    let mut a = inputs(k, 7);
    let mut b = a.clone();
    c.run(
        &mut a,
        &RunOptions {
            threads: Some(threads),
            timeout: None,
        },
    )
    .unwrap();
    interp(k, &mut b, InterpOptions::default()).unwrap();
    for (n, (x, y)) in a.iter().zip(&b).enumerate() {
        close(x, y).unwrap_or_else(|e| panic!("buffer {}: {e}", k.params[n].name));
    }
    c
}

pub(super) fn f32b(name: &str, shape: &[i64], role: BufferRole) -> Buffer {
    Buffer::new(name, DType::F32, shape, role)
}

#[test]
fn scalar_matmul() {
    let k = crate::loopnest::textbook::textbook_gemm_kernel("mm", 7, 7, 7, ForKind::Serial);
    check(&k, 1);
}

/// One output element per expression, inputs X (f32) and Y (i32), all indexed by `e`.
fn expr_kernel(exprs: Vec<Expr>, out_t: DType, kind: ForKind) -> Kernel {
    let n = 16;
    let m = exprs.len() as i64;
    let stores = exprs
        .into_iter()
        .enumerate()
        .map(|(c, e)| Stmt::store("O", vec![i(c as i64), v("e")], e))
        .collect();
    Kernel::new(
        "exprs",
        vec![
            f32b("X", &[n], BufferRole::Input),
            Buffer::new("Y", DType::I32, &[n], BufferRole::Input),
            Buffer::new("O", out_t, &[m, n], BufferRole::Output),
        ],
        Stmt::loop_("e", n, kind, Stmt::seq(stores)),
    )
}

fn x() -> Expr {
    Expr::load("X", vec![v("e")])
}
fn y() -> Expr {
    Expr::load("Y", vec![v("e")])
}
fn yv() -> Expr {
    // odd, never zero: a second integer operand derived from the loop index
    Expr::cast(DType::I32, Expr::sub(Expr::mul(v("e"), i(2)), i(15)))
}

fn float_exprs() -> Vec<Expr> {
    use Intrinsic::*;
    let ax = || Expr::call(Fabs, vec![x()]);
    vec![
        Expr::add(x(), Expr::f32(1.5)),
        Expr::sub(x(), Expr::f32(0.25)),
        Expr::mul(x(), x()),
        Expr::bin(BinOp::Div, x(), Expr::f32(3.0)),
        Expr::min(x(), Expr::f32(0.1)),
        Expr::max(x(), Expr::f32(0.1)),
        Expr::select(Expr::lt(x(), Expr::f32(0.0)), Expr::f32(-1.0), x()),
        Expr::cast(DType::F32, y()),
        Expr::cast(DType::F32, Expr::cast(DType::F64, x())),
        Expr::call(Exp, vec![x()]),
        Expr::call(Log, vec![Expr::add(ax(), Expr::f32(0.5))]),
        Expr::call(Sqrt, vec![ax()]),
        Expr::call(Rsqrt, vec![Expr::add(ax(), Expr::f32(1.0))]),
        Expr::call(Tanh, vec![x()]),
        Expr::call(Sigmoid, vec![x()]),
        Expr::call(Erf, vec![x()]),
        ax(),
        Expr::call(Floor, vec![Expr::mul(x(), Expr::f32(4.0))]),
        Expr::call(Ceil, vec![Expr::mul(x(), Expr::f32(4.0))]),
        Expr::call(Round, vec![Expr::mul(x(), Expr::f32(4.0))]),
        Expr::call(Pow, vec![ax(), Expr::f32(1.5)]),
        Expr::cast(
            DType::F32,
            Expr::cast(DType::I32, Expr::mul(x(), Expr::f32(1e10))),
        ),
        Expr::cast(
            DType::F32,
            Expr::cast(DType::U8, Expr::mul(x(), Expr::f32(300.0))),
        ),
        Expr::select(
            Expr::And(
                Box::new(Expr::lt(x(), Expr::f32(0.5))),
                Box::new(Expr::Not(Box::new(Expr::lt(x(), Expr::f32(-0.5))))),
            ),
            Expr::f32(1.0),
            Expr::f32(2.0),
        ),
        Expr::select(
            Expr::Or(
                Box::new(Expr::cmp(CmpOp::Ge, x(), Expr::f32(0.5))),
                Box::new(Expr::cmp(CmpOp::Eq, y(), Expr::i32(0))),
            ),
            Expr::f32(1.0),
            Expr::f32(2.0),
        ),
    ]
}

fn int_exprs() -> Vec<Expr> {
    let ops = [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::Div,
        BinOp::Mod,
        BinOp::FloorDiv,
        BinOp::FloorMod,
        BinOp::Min,
        BinOp::Max,
    ];
    let mut v: Vec<Expr> = ops.iter().map(|op| Expr::bin(*op, y(), yv())).collect();
    v.extend(ops.iter().map(|op| Expr::bin(*op, yv(), Expr::i32(3))));
    v.extend(ops.iter().map(|op| Expr::bin(*op, yv(), Expr::i32(-3))));
    for c in [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ] {
        v.push(Expr::select(
            Expr::cmp(c, y(), yv()),
            Expr::i32(1),
            Expr::i32(0),
        ));
    }
    v.push(Expr::cast(
        DType::I32,
        Expr::cast(DType::I8, Expr::mul(y(), Expr::i32(40))),
    ));
    v.push(Expr::cast(DType::I32, Expr::cast(DType::U8, y())));
    v.push(Expr::cast(DType::I32, Expr::cast(DType::I64, y())));
    v.push(Expr::bin(
        BinOp::Add,
        Expr::i32(i32::MAX as i64),
        Expr::cast(DType::I32, v_e()),
    ));
    v
}

fn v_e() -> Expr {
    v("e")
}

#[test]
fn expression_kinds_scalar_and_vector() {
    for kind in [ForKind::Serial, ForKind::Vectorized] {
        let c = check(&expr_kernel(float_exprs(), DType::F32, kind), 1);
        if kind == ForKind::Vectorized {
            assert_eq!(c.stats.vector_loops, 1);
        }
        let c = check(&expr_kernel(int_exprs(), DType::I32, kind), 1);
        if kind == ForKind::Vectorized {
            assert_eq!(c.stats.vector_loops, 1);
        }
    }
}

#[test]
fn integer_division_by_zero_is_defined() {
    // Y contains zeros; the interpreter errors on them, codegen yields 0 and must not trap.
    let k = Kernel::new(
        "div0",
        vec![Buffer::new("O", DType::I32, &[4], BufferRole::Output)],
        Stmt::loop_(
            "e",
            4,
            ForKind::Serial,
            Stmt::store(
                "O",
                vec![v("e")],
                Expr::bin(
                    BinOp::FloorDiv,
                    Expr::i32(7),
                    Expr::cast(DType::I32, Expr::sub(v("e"), i(1))),
                ),
            ),
        ),
    );
    let c = compile(&k, &CodegenOptions::default()).unwrap();
    let mut b = vec![BufferData::zeros(DType::I32, 4)];
    c.run(&mut b, &RunOptions::default()).unwrap();
    assert_eq!(b[0], BufferData::I32(vec![-7, 0, 7, 3]));
}

/// Parallel loop nested in a serial loop, with small and large per-iteration temporaries.
#[test]
fn parallel_with_temporaries() {
    let big = 5000; // 20 KB > alloca limit → scratch
    let body = Stmt::allocate(
        f32b("t_small", &[8], BufferRole::Temporary),
        Stmt::allocate(
            f32b("t_big", &[big], BufferRole::Temporary),
            Stmt::seq(vec![
                Stmt::loop_(
                    "a",
                    8,
                    ForKind::Serial,
                    Stmt::store(
                        "t_small",
                        vec![v("a")],
                        Expr::mul(Expr::load("X", vec![v("p"), v("a")]), Expr::f32(2.0)),
                    ),
                ),
                Stmt::loop_(
                    "b",
                    big,
                    ForKind::Serial,
                    Stmt::store(
                        "t_big",
                        vec![v("b")],
                        Expr::cast(DType::F32, Expr::add(v("b"), v("s"))),
                    ),
                ),
                Stmt::loop_(
                    "a",
                    8,
                    ForKind::Vectorized,
                    Stmt::store(
                        "O",
                        vec![v("s"), v("p"), v("a")],
                        Expr::add(
                            Expr::load("t_small", vec![v("a")]),
                            Expr::load("t_big", vec![Expr::add(Expr::mul(v("p"), i(8)), v("a"))]),
                        ),
                    ),
                ),
            ]),
        ),
    );
    let k = Kernel::new(
        "par",
        vec![
            f32b("X", &[37, 8], BufferRole::Input),
            f32b("O", &[3, 37, 8], BufferRole::Output),
        ],
        Stmt::loop_(
            "s",
            3,
            ForKind::Serial,
            Stmt::loop_("p", 37, ForKind::Parallel, body),
        ),
    );
    for threads in [1, 2, 3] {
        check(&k, threads);
    }
}

#[test]
fn unproven_kernels_are_refused() {
    let k = Kernel::new(
        "oob",
        vec![f32b("A", &[16], BufferRole::Output)],
        Stmt::loop_(
            "o",
            3,
            ForKind::Serial,
            Stmt::loop_(
                "x",
                6,
                ForKind::Serial,
                Stmt::store(
                    "A",
                    vec![Expr::add(Expr::mul(v("o"), i(6)), v("x"))],
                    Expr::f32(0.0),
                ),
            ),
        ),
    );
    match compile(&k, &CodegenOptions::default()) {
        Err(CodegenError::Unproven(v)) => assert_eq!(v.len(), 1),
        other => panic!("expected Unproven, got {other:?}"),
    }
}

#[test]
fn timeout_interrupts_kernel() {
    // ~10^11 multiply-adds: far beyond the timeout, interrupted by the abort flag.
    let n = 1 << 12;
    let k = Kernel::new(
        "slow",
        vec![
            f32b("A", &[n], BufferRole::Input),
            f32b("O", &[1], BufferRole::Output),
        ],
        Stmt::loop_(
            "r",
            1 << 23,
            ForKind::Parallel,
            Stmt::loop_(
                "x",
                n,
                ForKind::Serial,
                Stmt::store(
                    "O",
                    vec![i(0)],
                    Expr::add(Expr::load("O", vec![i(0)]), Expr::load("A", vec![v("x")])),
                ),
            ),
        ),
    );
    let c = compile(&k, &CodegenOptions::default()).unwrap();
    let mut b = inputs(&k, 1);
    let t = std::time::Instant::now();
    let r = c.run(
        &mut b,
        &RunOptions {
            threads: Some(2),
            timeout: Some(std::time::Duration::from_millis(100)),
        },
    );
    assert_eq!(r, Err(RunError::TimedOut));
    assert!(t.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn cache_reuses_compiled_kernels() {
    let k = expr_kernel(
        vec![Expr::add(x(), Expr::f32(1.0))],
        DType::F32,
        ForKind::Serial,
    );
    let cache = KernelCache::new();
    let a = cache
        .get_or_compile("k1", &k, &CodegenOptions::default())
        .unwrap();
    let b = cache
        .get_or_compile("k1", &k, &CodegenOptions::default())
        .unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(cache.len(), 1);
    let mut bufs = inputs(&k, 3);
    b.run(&mut bufs, &RunOptions::default()).unwrap();
    // Wrong arguments are an error, not UB.
    let mut wrong = vec![BufferData::zeros(DType::F32, 3)];
    assert!(matches!(
        a.run(&mut wrong, &RunOptions::default()),
        Err(RunError::BadArguments(_))
    ));
}

#[test]
fn unroll_pragmas_compile() {
    let body = Stmt::loop_(
        "o",
        4,
        ForKind::Serial,
        Stmt::attr(
            Attr::AutoUnroll {
                max_step: 64,
                explicit: true,
            },
            Stmt::loop_(
                "a",
                4,
                ForKind::Serial,
                Stmt::loop_(
                    "b",
                    4,
                    ForKind::Unrolled,
                    Stmt::store(
                        "O",
                        vec![v("o"), v("a"), v("b")],
                        Expr::cast(DType::F32, Expr::add(v("a"), v("b"))),
                    ),
                ),
            ),
        ),
    );
    let k = Kernel::new("unr", vec![f32b("O", &[4, 4, 4], BufferRole::Output)], body);
    check(&k, 1);
}

#[test]
fn compiled_code_is_freed_on_drop() {
    // Many compile/drop cycles: resource trackers must release code without disturbing others.
    let keep = compile(
        &expr_kernel(
            vec![Expr::add(x(), Expr::f32(2.0))],
            DType::F32,
            ForKind::Vectorized,
        ),
        &CodegenOptions::default(),
    )
    .unwrap();
    for n in 0..20 {
        let k = expr_kernel(
            vec![Expr::add(x(), Expr::f32(n as f64))],
            DType::F32,
            ForKind::Serial,
        );
        let c = compile(&k, &CodegenOptions::default()).unwrap();
        let mut b = inputs(&k, n);
        c.run(&mut b, &RunOptions::default()).unwrap();
    }
    let mut b = inputs(&keep.kernel, 1);
    keep.run(&mut b, &RunOptions::default()).unwrap();
}

/// The scratch contract (`translate.rs`): a temporary is zero each time its `Allocate` is
/// entered, compiled as interpreted. The kernel accumulates into a temporary allocated inside
/// a loop (read before write), small (an alloca) and large (scratch), serial and parallel,
/// and runs twice on reused scratch: each result equals the interpreter's.
#[test]
fn temporaries_are_zero_at_every_allocate() {
    for (len, kind) in [
        (8, ForKind::Serial),
        (5000, ForKind::Serial),
        (8, ForKind::Parallel),
        (5000, ForKind::Parallel),
    ] {
        let rows = 6;
        let t = |j: Expr| Expr::load("T", vec![j]);
        let body = Stmt::allocate(
            f32b("T", &[len], BufferRole::Temporary),
            Stmt::seq(vec![
                Stmt::loop_(
                    "j",
                    len,
                    ForKind::Serial,
                    Stmt::store(
                        "T",
                        vec![v("j")],
                        Expr::add(t(v("j")), Expr::load("X", vec![v("r"), v("j")])),
                    ),
                ),
                Stmt::loop_(
                    "j",
                    len,
                    ForKind::Serial,
                    Stmt::store("O", vec![v("r"), v("j")], t(v("j"))),
                ),
            ]),
        );
        let k = Kernel::new(
            "zeroed_temps",
            vec![
                f32b("X", &[rows, len], BufferRole::Input),
                f32b("O", &[rows, len], BufferRole::Output),
            ],
            Stmt::loop_("r", rows, kind, body),
        );
        let c = check(&k, 2);
        // Again on the same compiled kernel: its scratch is reused.
        let mut a = inputs(&k, 11);
        let mut b = a.clone();
        let opts = RunOptions {
            threads: Some(2),
            timeout: None,
        };
        c.run(&mut a, &opts).unwrap();
        c.run(&mut a, &opts).unwrap();
        interp(&k, &mut b, InterpOptions::default()).unwrap();
        close(&a[1], &b[1]).unwrap_or_else(|e| panic!("{len} {kind:?}, second run: {e}"));
    }
}

/// Unrolling makes an overrunning tail's guards constant: the tail iterations vanish and
/// what codegen compiles is still proven in bounds (Droplet's `[4, 4, 4]` on 14 under
/// `auto_unroll_max_step`).
#[test]
fn unrolled_over_long_tails_stay_in_bounds() {
    let dag = ttdb_algo::ops::registered::matmul_add(14, 6, 5, ttdb_algo::ir::DType::F32).unwrap();
    let k = crate::lower::tests::lowered_ok(
        &dag,
        r#"[["SP", 2, 0, 14, [4, 4], 1], ["SP", 2, 3, 5, [5], 1], ["SP", 2, 5, 6, [2], 1],
            ["RE", 2, [0, 3, 5, 1, 4, 6, 2]], ["PR", 2, 0, "auto_unroll_max_step$512"]]"#,
    );
    prepare(&k, &CodegenOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{}", crate::loopnest::kernel_to_string(&k)));
}
