//! Tests of explicit vectorization (`vector.rs`): access patterns, when a loop stays a
//! vector body (masked lanes, fused loops, chunks) and when it is scalarized. Every kernel is
//! checked against the reference interpreter on random inputs.

use super::tests::{check, check_with, close, f32b, i, inputs, v};
use super::{CodegenOptions, RunOptions};
use crate::loopnest::ir::*;

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
fn masked_tiles() -> Kernel {
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
    Kernel::new(
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
    )
}

#[test]
fn lane_varying_guards_are_masked_vector_bodies() {
    let c = check(&masked_tiles(), 1);
    assert_eq!(c.stats.scalarized_loops, 0);
    assert!(c.stats.vector_loops >= 1);
}

fn keep_ir() -> CodegenOptions {
    CodegenOptions {
        keep_ir: true,
        ..CodegenOptions::default()
    }
}

/// The IR of `k` (checked against the interpreter first).
fn ir_of(k: &Kernel) -> String {
    check_with(k, 1, &keep_ir()).ir.expect("keep_ir")
}

/// An inactive lane holds 0, never poison: masked loads and gathers pass `zeroinitializer`,
/// and masks are selects (`and false, poison` would be poison, i.e. maybe active).
#[test]
fn masked_loads_and_masks_hold_no_poison() {
    let ir = ir_of(&masked_tiles());
    let loads: Vec<&str> = ir
        .lines()
        .filter(|l| l.contains("call") && l.contains("@llvm.masked."))
        .filter(|l| l.contains("masked.load") || l.contains("masked.gather"))
        .collect();
    assert!(loads.len() >= 3, "{}", loads.join("\n"));
    for l in &loads {
        // The passthrough is the last operand.
        assert!(l.trim_end().ends_with(" zeroinitializer)"), "{l}");
    }
    let ands: Vec<&str> = ir
        .lines()
        .filter(|l| l.contains(" = and <") && l.contains(" x i1> "))
        .collect();
    assert!(ands.is_empty(), "masks made by `and`:\n{}", ands.join("\n"));
}

/// An `if` in an `if`: the inner condition loads the divisors under the outer mask (span load
/// `V`, gather `U`) and the inner arm divides by them. They are non-zero where the inner
/// condition holds (the interpreter never divides by 0) and read as 0 in inactive lanes,
/// where the quotient is computed (its divisor frozen) and dropped. Tiles 0-2 are full, 3 mixed, 4 empty; the
/// outputs have rows past the guard. Integer outputs: exact.
#[test]
fn nested_masks_guard_loaded_conditions_and_divisors() {
    let col = || Expr::add(Expr::mul(v("xo"), i(4)), Expr::floordiv(v("f"), i(4)));
    let oc = || Expr::floormod(v("f"), i(4));
    let x = || Expr::load("X", vec![col(), oc()]);
    let vd = || Expr::load("V", vec![col()]);
    let ud = || Expr::load("U", vec![Expr::add(Expr::mul(col(), i(16)), oc())]);
    let nonzero = |e: Expr| Expr::cmp(CmpOp::Ne, e, Expr::i32(0));
    let body = Stmt::if_(
        Expr::lt(col(), i(14)),
        Stmt::if_(
            Expr::And(Box::new(nonzero(vd())), Box::new(nonzero(ud()))),
            Stmt::store(
                "O",
                vec![col(), oc()],
                Expr::add(
                    Expr::bin(BinOp::Div, x(), vd()),
                    Expr::bin(BinOp::FloorMod, x(), ud()),
                ),
            ),
            Some(Stmt::store("O", vec![col(), oc()], x())),
        ),
        None,
    );
    let i32b = |n: &str, shape: &[i64], role| Buffer::new(n, DType::I32, shape, role);
    let k = Kernel::new(
        "nested_masks",
        vec![
            i32b("V", &[14], BufferRole::Input),
            i32b("U", &[13 * 16 + 4], BufferRole::Input),
            i32b("X", &[14, 4], BufferRole::Input),
            i32b("O", &[20, 4], BufferRole::Output),
        ],
        Stmt::loop_(
            "xo",
            5,
            ForKind::Serial,
            Stmt::loop_("f", 16, ForKind::Vectorized, body),
        ),
    );
    let c = check_with(&k, 1, &keep_ir());
    assert_eq!((c.stats.vector_loops, c.stats.scalarized_loops), (1, 0));
    let ir = c.ir.expect("keep_ir");
    let frozen = ir.lines().filter(|l| l.contains(" = freeze <")).count();
    assert!(frozen >= 2, "divisors not frozen ({frozen} freezes)");
}

/// A uniform select condition that loads, under a lane-varying guard: `K[xo·2^44]` is in
/// bounds only for `xo = 0`, the one row with an active lane; every other row's vector has
/// no active lane, and reading `K` there would fault (64 TiB past the buffer). The load must
/// be masked like the arms.
#[test]
fn uniform_select_conditions_load_only_in_active_lanes() {
    let far = || Expr::mul(v("xo"), i(1 << 44));
    let guard = Expr::lt(Expr::add(far(), v("j")), i(4));
    let inner = Expr::select(
        Expr::cmp(CmpOp::Gt, Expr::load("K", vec![far()]), Expr::f32(0.0)),
        Expr::load("A", vec![v("j")]),
        Expr::f32(2.0),
    );
    let k = Kernel::new(
        "far_select",
        vec![
            f32b("K", &[4], BufferRole::Input),
            f32b("A", &[8], BufferRole::Input),
            f32b("O", &[20, 8], BufferRole::Output),
        ],
        Stmt::loop_(
            "xo",
            20,
            ForKind::Serial,
            Stmt::loop_(
                "j",
                8,
                ForKind::Vectorized,
                Stmt::store(
                    "O",
                    vec![v("xo"), v("j")],
                    Expr::select(guard, inner, Expr::f32(3.0)),
                ),
            ),
        ),
    );
    let c = check(&k, 1);
    assert_eq!((c.stats.vector_loops, c.stats.scalarized_loops), (1, 0));
}

/// Entering a masked region, a tile whose lanes all take the guard runs the unmasked body,
/// one with none skips it: a branch on `llvm.vector.reduce.and` of the mask.
#[test]
fn full_tiles_branch_to_unmasked_bodies() {
    let ir = ir_of(&masked_tiles());
    let all = ir
        .lines()
        .find_map(|l| l.split_once(" = call i1 @llvm.vector.reduce.and"))
        .map(|(name, _)| name.trim().to_string())
        .expect("a reduce.and of the guard's mask");
    let br = format!("br i1 {all}, ");
    assert!(
        ir.lines().any(|l| l.trim_start().starts_with(&br)),
        "no {br}"
    );
    // The full tile's `O` is a plain vector store.
    assert!(ir
        .lines()
        .any(|l| l.trim_start().starts_with("store <") && l.contains(" x float> ")));
}

/// Tiles of 4 columns with a guard `col < 16` that always holds but is not known at compile
/// time (the tile loop runs, not unrolled), or without the guard.
fn guarded_tiles(guard: bool) -> Kernel {
    let col = || Expr::add(Expr::mul(v("xo"), i(4)), Expr::floordiv(v("f"), i(4)));
    let oc = || Expr::floormod(v("f"), i(4));
    let value = Expr::add(
        Expr::mul(Expr::load("D", vec![col()]), Expr::load("W", vec![oc()])),
        Expr::load("G", vec![Expr::add(Expr::mul(col(), i(16)), oc())]),
    );
    let mut body = Stmt::seq(vec![
        Stmt::store(
            "O",
            vec![col(), oc()],
            Expr::add(Expr::load("O", vec![col(), oc()]), value),
        ),
        Stmt::if_(
            Expr::lt(Expr::load("K", vec![col()]), Expr::f32(0.0)),
            Stmt::store("T", vec![col(), oc()], Expr::f32(1.0)),
            Some(Stmt::store(
                "T",
                vec![col(), oc()],
                Expr::load("D", vec![col()]),
            )),
        ),
    ]);
    if guard {
        body = Stmt::if_(Expr::lt(col(), i(16)), body, None);
    }
    Kernel::new(
        if guard { "guarded" } else { "unguarded" },
        vec![
            f32b("D", &[16], BufferRole::Input),
            f32b("K", &[16], BufferRole::Input),
            f32b("W", &[4], BufferRole::Input),
            f32b("G", &[15 * 16 + 4], BufferRole::Input),
            f32b("O", &[16, 4], BufferRole::Output),
            f32b("T", &[16, 4], BufferRole::Output),
        ],
        Stmt::loop_(
            "xo",
            4,
            ForKind::Serial,
            Stmt::loop_("f", 16, ForKind::Vectorized, body),
        ),
    )
}

#[test]
fn always_true_guards_match_unguarded_bodies() {
    let (guarded, plain) = (guarded_tiles(true), guarded_tiles(false));
    assert!(ir_of(&guarded).contains("@llvm.vector.reduce.and"));
    let run = |k: &Kernel| {
        let mut bufs = inputs(k, 11);
        let opts = RunOptions {
            threads: Some(1),
            timeout: None,
        };
        check(k, 1).run(&mut bufs, &opts).unwrap();
        bufs
    };
    let (a, b) = (run(&guarded), run(&plain));
    for (n, (x, y)) in a.iter().zip(&b).enumerate() {
        close(x, y).unwrap_or_else(|e| panic!("buffer {}: {e}", guarded.params[n].name));
    }
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
