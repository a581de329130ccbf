//! GEMM fixture (C = A·B, fp32, row-major) expressed as a loop-nest kernel with a hand-written
//! schedule: B packed into `nr`-column panels, an `mr × nr` register-blocked micro-kernel of
//! vector FMAs (accumulators in a small temporary promoted to registers), and one parallel loop
//! over (panel, row-split) pairs. Used by the GEMM benchmark as the codegen performance proof.

use crate::loopnest::ir::*;
use crate::loopnest::textbook::textbook_gemm_kernel;

#[derive(Clone, Copy, Debug)]
pub struct GemmSchedule {
    /// Rows per micro-tile.
    pub mr: i64,
    /// Vectors per micro-tile row (`nr = nv · lanes` columns).
    pub nv: i64,
    /// fp32 lanes per vector.
    pub lanes: i64,
    /// The M dimension is split into this many parts; parallel work items = panels × splits.
    pub row_splits: i64,
    /// Reduction block: a `kc × nr` slice of a B panel stays in L1 (used when it divides k).
    pub kc: i64,
    /// Also pack A into `[m/mr, k, mr]` tiles: the micro-kernel then broadcasts from one
    /// contiguous stream instead of `mr` rows (which alias in L1 when the row pitch is 4 KiB).
    pub pack_a: bool,
}

impl Default for GemmSchedule {
    /// 4×24 micro-kernel for 16 AVX2 registers (12 accumulators + 3 B vectors + 1 broadcast).
    fn default() -> Self {
        GemmSchedule {
            mr: 4,
            nv: 3,
            lanes: 8,
            row_splits: 2,
            kc: 256,
            pack_a: true,
        }
    }
}

pub fn gemm_flops(m: i64, n: i64, k: i64) -> f64 {
    2.0 * m as f64 * n as f64 * k as f64
}

/// Build the kernel. Requires `m % (mr · row_splits) == 0`; `n` is arbitrary (the last panel
/// is zero-padded and written back under guards).
pub fn gemm_kernel(m: i64, n: i64, k: i64, s: &GemmSchedule) -> Kernel {
    assert!(
        m % (s.mr * s.row_splits) == 0,
        "m must be a multiple of mr * row_splits"
    );
    let (mr, nv, lanes, splits) = (s.mr, s.nv, s.lanes, s.row_splits);
    let nr = nv * lanes;
    let np = (n + nr - 1) / nr;
    let tiles = m / splits / mr;
    let kc = if s.kc > 0 && k % s.kc == 0 { s.kc } else { k };
    let nko = k / kc;
    let v = Expr::var;
    let c = Expr::int;
    let add = Expr::add;
    let mul = Expr::mul;

    // Bp[jo, kk, jv*lanes + l] = B[kk, jo*nr + jv*lanes + l]  (0 past n)
    let col = |jo: Expr| add(add(mul(jo, c(nr)), mul(v("jv"), c(lanes))), v("l"));
    // Full panels are copied with plain vector loads; only the last, partial panel is guarded.
    let bp_index = || vec![v("jo"), v("kk"), add(mul(v("jv"), c(lanes)), v("l"))];
    let copy = |guarded: bool| {
        let load = Expr::load("B", vec![v("kk"), col(v("jo"))]);
        let value = if guarded {
            Expr::select(Expr::lt(col(v("jo")), c(n)), load, Expr::f32(0.0))
        } else {
            load
        };
        Stmt::loop_(
            "kk",
            k,
            ForKind::Serial,
            Stmt::loop_(
                "jv",
                nv,
                ForKind::Unrolled,
                Stmt::loop_(
                    "l",
                    lanes,
                    ForKind::Vectorized,
                    Stmt::store("Bp", bp_index(), value),
                ),
            ),
        )
    };
    let pack = Stmt::loop_(
        "jo",
        np,
        ForKind::Parallel,
        Stmt::if_(
            Expr::lt(add(mul(v("jo"), c(nr)), c(nr - 1)), c(n)),
            copy(false),
            Some(copy(true)),
        ),
    );

    // Work item p = hs·np + jo: consecutive items share the same block of A rows (which stays
    // in L2) and walk across B panels.
    let jo = || Expr::floormod(v("p"), c(np));
    let hs = || Expr::floordiv(v("p"), c(np));
    let row = || add(mul(add(mul(hs(), c(tiles)), v("it")), c(mr)), v("ii"));
    let cl = || vec![v("ii"), add(mul(v("jv"), c(lanes)), v("l"))];
    let tile = |body: Stmt| {
        Stmt::loop_(
            "ii",
            mr,
            ForKind::Unrolled,
            Stmt::loop_("jv", nv, ForKind::Unrolled, body),
        )
    };
    let vec_l = |st: Stmt| Stmt::loop_("l", lanes, ForKind::Vectorized, st);
    let ccol = || add(add(mul(jo(), c(nr)), mul(v("jv"), c(lanes))), v("l"));
    let full = || add(add(mul(jo(), c(nr)), mul(v("jv"), c(lanes))), c(lanes - 1));
    // First K block starts from zero, later ones continue from C.
    let init = Stmt::if_(
        Expr::cmp(CmpOp::Eq, v("ko"), c(0)),
        tile(vec_l(Stmt::store("Cl", cl(), Expr::f32(0.0)))),
        Some(tile(Stmt::if_(
            Expr::lt(full(), c(n)),
            vec_l(Stmt::store(
                "Cl",
                cl(),
                Expr::load("C", vec![row(), ccol()]),
            )),
            Some(Stmt::loop_(
                "l",
                lanes,
                ForKind::Serial,
                Stmt::store(
                    "Cl",
                    cl(),
                    Expr::select(
                        Expr::lt(ccol(), c(n)),
                        Expr::load("C", vec![row(), ccol()]),
                        Expr::f32(0.0),
                    ),
                ),
            )),
        ))),
    );
    let fma = Stmt::for_(
        "kk",
        mul(v("ko"), c(kc)),
        c(kc),
        ForKind::Serial,
        tile(vec_l(Stmt::store(
            "Cl",
            cl(),
            add(
                Expr::load("Cl", cl()),
                mul(
                    if s.pack_a {
                        Expr::load(
                            "Ap",
                            vec![add(mul(hs(), c(tiles)), v("it")), v("kk"), v("ii")],
                        )
                    } else {
                        Expr::load("A", vec![row(), v("kk")])
                    },
                    Expr::load(
                        "Bp",
                        vec![jo(), v("kk"), add(mul(v("jv"), c(lanes)), v("l"))],
                    ),
                ),
            ),
        ))),
    );
    let write = tile(Stmt::if_(
        Expr::lt(full(), c(n)),
        vec_l(Stmt::store(
            "C",
            vec![row(), ccol()],
            Expr::load("Cl", cl()),
        )),
        Some(Stmt::loop_(
            "l",
            lanes,
            ForKind::Serial,
            Stmt::if_(
                Expr::lt(ccol(), c(n)),
                Stmt::store("C", vec![row(), ccol()], Expr::load("Cl", cl())),
                None,
            ),
        )),
    ));
    let compute = Stmt::loop_(
        "p",
        np * splits,
        ForKind::Parallel,
        Stmt::loop_(
            "ko",
            nko,
            ForKind::Serial,
            Stmt::loop_(
                "it",
                tiles,
                ForKind::Serial,
                Stmt::allocate(
                    Buffer::new("Cl", DType::F32, &[mr, nr], BufferRole::Temporary),
                    Stmt::seq(vec![init, fma, write]),
                ),
            ),
        ),
    );
    let pack_a = Stmt::loop_(
        "ta",
        m / mr,
        ForKind::Parallel,
        Stmt::loop_(
            "ii",
            mr,
            ForKind::Serial,
            Stmt::loop_(
                "kk",
                k,
                ForKind::Serial,
                Stmt::store(
                    "Ap",
                    vec![v("ta"), v("kk"), v("ii")],
                    Expr::load("A", vec![add(mul(v("ta"), c(mr)), v("ii")), v("kk")]),
                ),
            ),
        ),
    );
    let mut steps = vec![pack];
    if s.pack_a {
        steps.push(pack_a);
    }
    steps.push(compute);
    let mut body = Stmt::seq(steps);
    if s.pack_a {
        body = Stmt::allocate(
            Buffer::new("Ap", DType::F32, &[m / mr, k, mr], BufferRole::Temporary),
            body,
        );
    }
    Kernel::new(
        &format!("gemm_{m}x{n}x{k}"),
        vec![
            Buffer::new("A", DType::F32, &[m, k], BufferRole::Input),
            Buffer::new("B", DType::F32, &[k, n], BufferRole::Input),
            Buffer::new("C", DType::F32, &[m, n], BufferRole::Output),
        ],
        Stmt::allocate(
            Buffer::new("Bp", DType::F32, &[np, k, nr], BufferRole::Temporary),
            body,
        ),
    )
}

/// Textbook kernel (parallel rows, vectorized columns, serial reduction) for comparison.
pub fn gemm_naive_kernel(m: i64, n: i64, k: i64) -> Kernel {
    textbook_gemm_kernel(
        &format!("gemm_naive_{m}x{n}x{k}"),
        m,
        n,
        k,
        ForKind::Parallel,
    )
}
