//! Representative hand-scheduled kernels (shaped like Ansor output) for benchmarks and tests.

use crate::loopnest::ir::*;

/// conv2d NHWC 3×3, stride 1, pad 1, `c` → `c` channels on an `hw × hw` image, scheduled like a
/// typical Ansor CPU state: padding stage into a temporary (parallel over rows, guards as a
/// select), then a parallel loop over (row, 8-wide column tile), a `local` accumulator tile of
/// 8 × 16 output channels (unrolled × vectorized), reduction loops rh, rw, ci, write-back, all
/// under `auto_unroll_max_step = 64`. Requires `hw % 8 == 0` and `c % 16 == 0`.
pub fn conv2d_nhwc_kernel(hw: i64, c: i64) -> Kernel {
    assert!(hw % 8 == 0 && c % 16 == 0);
    let v = Expr::var;
    let k = Expr::int;
    let (add, mul) = (Expr::add, Expr::mul);
    let p = hw + 2;
    let inside = |e: Expr| {
        Expr::And(
            Box::new(Expr::cmp(CmpOp::Ge, e.clone(), k(1))),
            Box::new(Expr::lt(e, k(hw + 1))),
        )
    };
    let pad = Stmt::loop_(
        "ph",
        p,
        ForKind::Parallel,
        Stmt::loop_(
            "pw",
            p,
            ForKind::Serial,
            Stmt::loop_(
                "pc",
                c,
                ForKind::Vectorized,
                Stmt::store(
                    "Pad",
                    vec![v("ph"), v("pw"), v("pc")],
                    Expr::select(
                        Expr::likely(Expr::And(
                            Box::new(inside(v("ph"))),
                            Box::new(inside(v("pw"))),
                        )),
                        Expr::load(
                            "I",
                            vec![
                                k(0),
                                Expr::sub(v("ph"), k(1)),
                                Expr::sub(v("pw"), k(1)),
                                v("pc"),
                            ],
                        ),
                        Expr::f32(0.0),
                    ),
                ),
            ),
        ),
    );
    let h = || Expr::floordiv(v("f"), k(hw / 8));
    let w = || add(mul(Expr::floormod(v("f"), k(hw / 8)), k(8)), v("wi"));
    let co = || add(mul(v("co_o"), k(16)), v("cc"));
    let l = || vec![v("wi"), v("cc")];
    let tile = |s: Stmt| {
        Stmt::loop_(
            "wi",
            8,
            ForKind::Serial,
            Stmt::loop_("cc", 16, ForKind::Vectorized, s),
        )
    };
    let body = Stmt::allocate(
        Buffer::new("L", DType::F32, &[8, 16], BufferRole::Temporary),
        Stmt::seq(vec![
            tile(Stmt::store("L", l(), Expr::f32(0.0))),
            Stmt::loop_(
                "rh",
                3,
                ForKind::Serial,
                Stmt::loop_(
                    "rw",
                    3,
                    ForKind::Serial,
                    Stmt::loop_(
                        "ci",
                        c,
                        ForKind::Serial,
                        tile(Stmt::store(
                            "L",
                            l(),
                            add(
                                Expr::load("L", l()),
                                mul(
                                    Expr::load(
                                        "Pad",
                                        vec![add(h(), v("rh")), add(w(), v("rw")), v("ci")],
                                    ),
                                    Expr::load("W", vec![v("rh"), v("rw"), v("ci"), co()]),
                                ),
                            ),
                        )),
                    ),
                ),
            ),
            tile(Stmt::store(
                "O",
                vec![k(0), h(), w(), co()],
                Expr::load("L", l()),
            )),
        ]),
    );
    let compute = Stmt::loop_(
        "f",
        hw * hw / 8,
        ForKind::Parallel,
        Stmt::attr(
            Attr::AutoUnroll {
                max_step: 64,
                explicit: true,
            },
            Stmt::loop_("co_o", c / 16, ForKind::Serial, body),
        ),
    );
    Kernel::new(
        &format!("conv2d_nhwc_{hw}x{hw}x{c}"),
        vec![
            Buffer::new("I", DType::F32, &[1, hw, hw, c], BufferRole::Input),
            Buffer::new("W", DType::F32, &[3, 3, c, c], BufferRole::Input),
            Buffer::new("O", DType::F32, &[1, hw, hw, c], BufferRole::Output),
        ],
        Stmt::allocate(
            Buffer::new("Pad", DType::F32, &[p, p, c], BufferRole::Temporary),
            Stmt::seq(vec![pad, compute]),
        ),
    )
}

/// Element-wise bias + ReLU over `n` elements (parallel outer, vectorized inner).
pub fn bias_relu_kernel(rows: i64, cols: i64) -> Kernel {
    let v = Expr::var;
    Kernel::new(
        &format!("bias_relu_{rows}x{cols}"),
        vec![
            Buffer::new("X", DType::F32, &[rows, cols], BufferRole::Input),
            Buffer::new("B", DType::F32, &[cols], BufferRole::Input),
            Buffer::new("Y", DType::F32, &[rows, cols], BufferRole::Output),
        ],
        Stmt::loop_(
            "r",
            rows,
            ForKind::Parallel,
            Stmt::loop_(
                "co",
                cols / 8,
                ForKind::Serial,
                Stmt::loop_(
                    "ci",
                    8,
                    ForKind::Vectorized,
                    Stmt::store(
                        "Y",
                        vec![v("r"), Expr::add(Expr::mul(v("co"), Expr::int(8)), v("ci"))],
                        Expr::max(
                            Expr::add(
                                Expr::load(
                                    "X",
                                    vec![
                                        v("r"),
                                        Expr::add(Expr::mul(v("co"), Expr::int(8)), v("ci")),
                                    ],
                                ),
                                Expr::load(
                                    "B",
                                    vec![Expr::add(Expr::mul(v("co"), Expr::int(8)), v("ci"))],
                                ),
                            ),
                            Expr::f32(0.0),
                        ),
                    ),
                ),
            ),
        ),
    )
}
