//! Codegen tests: every kernel is checked against the reference interpreter on random inputs.

use super::*;
use crate::loopnest::interp::{run as interp, InterpOptions};
use crate::loopnest::ir::*;

fn v(n: &str) -> Expr {
    Expr::var(n)
}
fn i(x: i64) -> Expr {
    Expr::int(x)
}

fn inputs(k: &Kernel, seed: u64) -> Vec<BufferData> {
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

fn close(a: &BufferData, b: &BufferData) -> Result<(), String> {
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
fn check(k: &Kernel, threads: usize) -> CompiledKernel {
    let c = compile(k, &CodegenOptions::default()).unwrap_or_else(|e| panic!("{e}"));
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

fn f32b(name: &str, shape: &[i64], role: BufferRole) -> Buffer {
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

/// out[r, j] = A[r, j] * B[j] + A[r, 2j'] … exercises contiguous, broadcast, gather, scatter.
#[test]
fn vector_access_patterns() {
    let n = 8;
    let a = || Expr::load("A", vec![v("r"), v("j")]);
    let bcast = || Expr::load("B", vec![v("r")]);
    let strided = || Expr::load("S", vec![Expr::mul(v("j"), i(2))]);
    let nonaffine = || Expr::load("S", vec![Expr::floordiv(v("j"), i(2))]);
    let body = Stmt::seq(vec![
        Stmt::store(
            "O",
            vec![v("r"), v("j")],
            Expr::add(Expr::mul(a(), bcast()), Expr::add(strided(), nonaffine())),
        ),
        Stmt::store("T", vec![v("j"), v("r")], a()), // scatter (stride 4)
        // in-place accumulate on the same index is lane-private
        Stmt::store(
            "O",
            vec![v("r"), v("j")],
            Expr::add(Expr::load("O", vec![v("r"), v("j")]), Expr::f32(1.0)),
        ),
    ]);
    let k = Kernel::new(
        "vec",
        vec![
            f32b("A", &[4, n], BufferRole::Input),
            f32b("B", &[4], BufferRole::Input),
            f32b("S", &[2 * n], BufferRole::Input),
            f32b("O", &[4, n], BufferRole::Output),
            f32b("T", &[n, 4], BufferRole::Output),
        ],
        Stmt::loop_(
            "r",
            4,
            ForKind::Serial,
            Stmt::loop_("j", n, ForKind::Vectorized, body),
        ),
    );
    let c = check(&k, 1);
    // the 4-row loop is tiny, so it is emitted unrolled: one vector body per row
    assert_eq!(c.stats.vector_loops, 4);
    assert_eq!(c.stats.scalarized_loops, 0);
}

#[test]
fn vector_falls_back_to_scalar_when_lanes_interact() {
    // Reduction over the vectorized variable: store index has stride 0 → scalarized.
    let k = Kernel::new(
        "red",
        vec![
            f32b("A", &[16], BufferRole::Input),
            f32b("O", &[1], BufferRole::Output),
        ],
        Stmt::loop_(
            "j",
            16,
            ForKind::Vectorized,
            Stmt::store(
                "O",
                vec![i(0)],
                Expr::add(Expr::load("O", vec![i(0)]), Expr::load("A", vec![v("j")])),
            ),
        ),
    );
    let c = check(&k, 1);
    assert_eq!((c.stats.vector_loops, c.stats.scalarized_loops), (0, 1));
    // Shifted read of the written buffer (loop-carried dependence) → scalarized.
    let k = Kernel::new(
        "shift",
        vec![f32b("O", &[17], BufferRole::Output)],
        Stmt::loop_(
            "j",
            16,
            ForKind::Vectorized,
            Stmt::store(
                "O",
                vec![Expr::add(v("j"), i(1))],
                Expr::add(Expr::load("O", vec![v("j")]), Expr::f32(1.0)),
            ),
        ),
    );
    let c = check(&k, 1);
    assert_eq!(c.stats.scalarized_loops, 1);
    // Lane-varying select guarding a load: vectorized with a masked load.
    let k = Kernel::new(
        "guard",
        vec![
            f32b("A", &[10], BufferRole::Input),
            f32b("O", &[16], BufferRole::Output),
        ],
        Stmt::loop_(
            "j",
            16,
            ForKind::Vectorized,
            Stmt::store(
                "O",
                vec![v("j")],
                Expr::select(
                    Expr::lt(v("j"), i(10)),
                    Expr::load("A", vec![v("j")]),
                    Expr::f32(0.0),
                ),
            ),
        ),
    );
    let c = check(&k, 1);
    assert_eq!((c.stats.vector_loops, c.stats.scalarized_loops), (1, 0));
    // Lane-varying `if`: vectorized, the store masked.
    let k = Kernel::new(
        "guard_if",
        vec![
            f32b("A", &[10], BufferRole::Input),
            f32b("O", &[16], BufferRole::Output),
        ],
        Stmt::loop_(
            "j",
            16,
            ForKind::Vectorized,
            Stmt::if_(
                Expr::lt(v("j"), i(10)),
                Stmt::store("O", vec![v("j")], Expr::load("A", vec![v("j")])),
                None,
            ),
        ),
    );
    let c = check(&k, 1);
    assert_eq!((c.stats.vector_loops, c.stats.scalarized_loops), (1, 0));
    // An `if` reading a buffer the body writes → scalarized.
    let k = Kernel::new(
        "guard_written",
        vec![f32b("O", &[16], BufferRole::Output)],
        Stmt::loop_(
            "j",
            16,
            ForKind::Vectorized,
            Stmt::if_(
                Expr::lt(Expr::load("O", vec![i(0)]), Expr::f32(0.5)),
                Stmt::store("O", vec![v("j")], Expr::f32(1.0)),
                None,
            ),
        ),
    );
    let c = check(&k, 1);
    assert_eq!(c.stats.scalarized_loops, 1);
}

/// The guard of a split that does not divide its loop, with the split's inner loop fused into
/// the vector (14 columns in tiles of 4, fused with a 4-lane channel block, as a Droplet
/// candidate makes them): in the last tile only half the lanes are in range. The body is one
/// masked vector body per tile: masked contiguous store and load (`O`), span load under a
/// span mask (`D`: each column read by 4 lanes; `S`: stride 2), a masked gather of a long
/// span (`G`), and a nested lane-varying `if`/`else` whose condition loads a buffer (`K`).
/// The outputs have two rows past the guard, which the interpreter never writes: a lane
/// stored outside its mask shows as a mismatch.
#[test]
fn lane_varying_guards_are_masked_vector_bodies() {
    let col = || Expr::add(Expr::mul(v("xo"), i(4)), Expr::floordiv(v("f"), i(4)));
    let oc = || Expr::floormod(v("f"), i(4));
    let value = Expr::add(
        Expr::add(
            Expr::mul(Expr::load("D", vec![col()]), Expr::load("W", vec![oc()])),
            Expr::load("S", vec![Expr::add(Expr::mul(col(), i(2)), oc())]),
        ),
        Expr::load("G", vec![Expr::add(Expr::mul(col(), i(16)), oc())]),
    );
    let acc = Expr::add(Expr::load("O", vec![col(), oc()]), value);
    let body = Stmt::if_(
        Expr::lt(col(), i(14)),
        Stmt::seq(vec![
            Stmt::store("O", vec![col(), oc()], acc),
            Stmt::if_(
                Expr::lt(Expr::load("K", vec![col()]), Expr::f32(0.0)),
                Stmt::store("T", vec![col(), oc()], Expr::f32(1.0)),
                Some(Stmt::store(
                    "T",
                    vec![col(), oc()],
                    Expr::load("D", vec![col()]),
                )),
            ),
        ]),
        None,
    );
    let k = Kernel::new(
        "masked_tiles",
        vec![
            f32b("D", &[14], BufferRole::Input),
            f32b("K", &[14], BufferRole::Input),
            f32b("W", &[4], BufferRole::Input),
            f32b("S", &[13 * 2 + 4], BufferRole::Input),
            f32b("G", &[13 * 16 + 4], BufferRole::Input),
            f32b("O", &[16, 4], BufferRole::Output),
            f32b("T", &[16, 4], BufferRole::Output),
        ],
        Stmt::loop_(
            "xo",
            4,
            ForKind::Serial,
            Stmt::loop_("f", 16, ForKind::Vectorized, body),
        ),
    );
    let c = check(&k, 1);
    assert_eq!(c.stats.scalarized_loops, 0);
    assert!(c.stats.vector_loops >= 1);
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

#[test]
fn long_vector_loops_are_chunked() {
    // extent 100 = 6 chunks of 16 lanes + 4 scalar iterations; stride-2 gather and broadcast.
    let k = Kernel::new(
        "chunked",
        vec![
            f32b("A", &[200], BufferRole::Input),
            f32b("B", &[1], BufferRole::Input),
            f32b("O", &[100], BufferRole::Output),
        ],
        Stmt::loop_(
            "j",
            100,
            ForKind::Vectorized,
            Stmt::store(
                "O",
                vec![v("j")],
                Expr::add(
                    Expr::load("A", vec![Expr::mul(v("j"), i(2))]),
                    Expr::load("B", vec![i(0)]),
                ),
            ),
        ),
    );
    let c = check(&k, 1);
    assert_eq!((c.stats.vector_loops, c.stats.scalarized_loops), (1, 0));
}

/// Regression: LLVM 19's loop vectorizer turned `B[floormod(3j, 16)]` (i.e. `(3j) & 15`) into a
/// stride-3 interleaved load without the mask. Interleaved accesses are disabled at init.
#[test]
fn floormod_index_in_llvm_vectorized_loop() {
    // Shape found by the property test: the B access is vectorized by LLVM's loop vectorizer.
    let a = |r: &str, c: &str| Expr::load("A", vec![v(r), v(c)]);
    let b = Expr::load("B", vec![Expr::floormod(Expr::mul(v("j"), i(3)), i(16))]);
    let e = Expr::sub(
        Expr::min(a("j", "i"), Expr::min(a("i", "j"), b)),
        Expr::select(
            Expr::lt(v("j"), i(12)),
            Expr::add(a("i", "j"), Expr::load("C", vec![v("j")])),
            Expr::f32(0.0),
        ),
    );
    let k = Kernel::new(
        "fm",
        vec![
            f32b("A", &[16, 16], BufferRole::Input),
            f32b("B", &[16], BufferRole::Input),
            f32b("C", &[12], BufferRole::Input),
            f32b("O", &[16, 16], BufferRole::Output),
        ],
        Stmt::loop_(
            "i",
            16,
            ForKind::Serial,
            Stmt::loop_(
                "j",
                16,
                ForKind::Serial,
                Stmt::store("O", vec![v("i"), v("j")], e),
            ),
        ),
    );
    check(&k, 1);
}

/// Loops fused before `AN vectorize`: the variable enters the indices through floordiv and
/// floormod. Each lane's offset is a constant, so the loop is a vector body (not scalarized):
/// a short span is one load and a shuffle (`D`, `W`, `S`), a long one a gather (`G`), a
/// permuted store a shuffle and a store (`T`), a contiguous one a plain store (`O`).
#[test]
fn fused_vector_loops_use_constant_lane_offsets() {
    let ow = || Expr::floordiv(v("f"), i(4));
    let oc = || Expr::floormod(v("f"), i(4));
    let d = || Expr::load("D", vec![v("r"), Expr::add(Expr::mul(ow(), i(2)), i(1))]);
    let w = || Expr::load("W", vec![oc()]);
    let s = || Expr::load("S", vec![Expr::add(Expr::mul(ow(), i(8)), oc())]);
    let g = || Expr::load("G", vec![Expr::add(Expr::mul(ow(), i(16)), oc())]);
    let body = Stmt::seq(vec![
        Stmt::store(
            "O",
            vec![v("r"), ow(), oc()],
            Expr::add(Expr::mul(d(), w()), Expr::add(s(), g())),
        ),
        Stmt::store("T", vec![v("r"), oc(), ow()], w()),
        Stmt::store(
            "O",
            vec![v("r"), ow(), oc()],
            Expr::add(Expr::load("O", vec![v("r"), ow(), oc()]), Expr::f32(1.0)),
        ),
    ]);
    let k = Kernel::new(
        "fused",
        vec![
            f32b("D", &[3, 8], BufferRole::Input),
            f32b("W", &[4], BufferRole::Input),
            f32b("S", &[32], BufferRole::Input),
            f32b("G", &[64], BufferRole::Input),
            f32b("O", &[3, 4, 4], BufferRole::Output),
            f32b("T", &[3, 4, 4], BufferRole::Output),
        ],
        Stmt::loop_(
            "r",
            3,
            ForKind::Serial,
            Stmt::loop_("f", 16, ForKind::Vectorized, body),
        ),
    );
    let c = check(&k, 1);
    assert_eq!((c.stats.vector_loops, c.stats.scalarized_loops), (3, 0));
}

/// Chunked (40 lanes: chunks of the host's chunk width, then a scalar remainder): every
/// chunk base is a multiple of the period 4, so the offsets hold in every chunk.
#[test]
fn fused_vector_loops_are_chunked() {
    let ow = || Expr::floordiv(v("f"), i(4));
    let oc = || Expr::floormod(v("f"), i(4));
    let k = Kernel::new(
        "fused_chunks",
        vec![
            f32b("D", &[40], BufferRole::Input),
            f32b("W", &[4], BufferRole::Input),
            f32b("O", &[4, 10], BufferRole::Output),
        ],
        Stmt::loop_(
            "f",
            40,
            ForKind::Vectorized,
            Stmt::store(
                "O",
                vec![oc(), ow()],
                Expr::mul(Expr::load("D", vec![ow()]), Expr::load("W", vec![oc()])),
            ),
        ),
    );
    let c = check(&k, 1);
    assert_eq!((c.stats.vector_loops, c.stats.scalarized_loops), (1, 0));
}

#[test]
fn lane_offsets_of_fused_indices() {
    use super::vector::lane_offsets;
    let f = || v("f");
    // 4 * floordiv(f, 4) * 3 + floormod(f, 4): lanes 0..8
    let e = Expr::add(
        Expr::mul(Expr::floordiv(f(), i(4)), i(12)),
        Expr::floormod(f(), i(4)),
    );
    assert_eq!(
        lane_offsets(&e, "f", 8, 0),
        Some(vec![0, 1, 2, 3, 12, 13, 14, 15])
    );
    assert_eq!(lane_offsets(&e, "f", 8, 8), lane_offsets(&e, "f", 8, 0));
    // A chunk base that is not a multiple of 4: the offsets would differ by chunk.
    assert_eq!(lane_offsets(&e, "f", 8, 2), None);
    // Affine: stride 3.
    assert_eq!(
        lane_offsets(&Expr::mul(f(), i(3)), "f", 4, 1),
        Some(vec![0, 3, 6, 9])
    );
    // Another variable inside the division: not a constant per lane.
    let mixed = Expr::floordiv(Expr::add(f(), v("x")), i(4));
    assert_eq!(lane_offsets(&mixed, "f", 4, 0), None);
}
