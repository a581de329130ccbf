//! Accuracy of `vmath.rs`: one JIT kernel per function maps a buffer of f32 inputs, and each
//! result is compared with the f64 reference (Rust's `exp`/`tanh`, libm's `erf`) rounded to
//! f32, as a distance in f32 steps (ULP). The CI tests sweep every `STEP`-th float of each
//! range (every bit pattern in turn, so all binades and the denormals are covered);
//! `vmath_all_floats` (ignored: a few minutes) sweeps every float.

use super::{compile, CodegenOptions, CompiledKernel, RunOptions};
use crate::loopnest::data::BufferData;
use crate::loopnest::interp::erf_f64;
use crate::loopnest::ir::*;
use rayon::prelude::*;

/// The CI sweeps' stride through the float bit patterns (odd and prime, so it does not
/// follow the mantissa's powers of two).
const STEP: i64 = 61;
/// Lanes of one row: the vectorized loop (chunked by the codegen to its vector width).
const ROW: i64 = 64;
/// Floats per kernel run: the kernel is compiled once per function and rerun on chunks.
const CHUNK: i64 = 1 << 22;

/// The functions, the range swept (the result is not saturated inside it) and the bound.
const CASES: [(Intrinsic, f32, f32, u32); 4] = [
    (Intrinsic::Exp, -104.0, 89.0, 1),
    (Intrinsic::Sigmoid, -105.0, 20.0, 2),
    (Intrinsic::Tanh, -10.0, 10.0, 1),
    (Intrinsic::Erf, -4.5, 4.5, 1),
];

fn reference(f: Intrinsic, x: f32) -> f32 {
    let x = x as f64;
    (match f {
        Intrinsic::Exp => x.exp(),
        Intrinsic::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Intrinsic::Tanh => x.tanh(),
        Intrinsic::Erf => erf_f64(x),
        _ => unreachable!(),
    }) as f32
}

/// O[r, j] = f(X[r, j]), the row loop parallel, the lane loop vectorized (or serial, and
/// with LLVM's vectorizers off, for the scalar code).
fn map_kernel(f: Intrinsic, rows: i64, vector: bool) -> CompiledKernel {
    let xs = |n| Buffer::new(n, DType::F32, &[rows, ROW], BufferRole::Input);
    let mut o = xs("O");
    o.role = BufferRole::Output;
    let idx = || vec![Expr::var("r"), Expr::var("j")];
    let body = Stmt::store("O", idx(), Expr::call(f, vec![Expr::load("X", idx())]));
    let inner = if vector {
        ForKind::Vectorized
    } else {
        ForKind::Serial
    };
    let k = Kernel::new(
        "vmath",
        vec![xs("X"), o],
        Stmt::loop_(
            "r",
            rows,
            ForKind::Parallel,
            Stmt::loop_("j", ROW, inner, body),
        ),
    );
    let opts = CodegenOptions {
        llvm_vectorizers: vector,
        ..CodegenOptions::default()
    };
    compile(&k, &opts).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `k` on `xs` (padded to whole rows with zeros).
fn apply(k: &CompiledKernel, xs: &[f32]) -> Vec<f32> {
    let n = k.kernel.params[0].num_elements() as usize;
    assert!(xs.len() <= n);
    let mut x = xs.to_vec();
    x.resize(n, 0.0);
    let mut bufs = vec![BufferData::F32(x), BufferData::F32(vec![0.0; n])];
    k.run(&mut bufs, &RunOptions::default()).unwrap();
    let mut out = bufs[1].as_f32().unwrap().to_vec();
    out.truncate(xs.len());
    out
}

/// The f32 order as integers: adjacent floats differ by 1, and ±0 are both 0.
fn ordered(x: f32) -> i64 {
    let b = x.to_bits() as i32 as i64;
    if b < 0 {
        -(b & 0x7fff_ffff)
    } else {
        b
    }
}

fn from_ordered(o: i64) -> f32 {
    if o < 0 {
        f32::from_bits((-o) as u32 | 0x8000_0000)
    } else {
        f32::from_bits(o as u32)
    }
}

fn ulps(a: f32, b: f32) -> u64 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0
        } else {
            u64::MAX
        };
    }
    (ordered(a) - ordered(b)).unsigned_abs()
}

/// Max ULP error of `f` over every `step`-th float of [lo, hi], the worst input, and how
/// many results were not the correctly rounded one, of how many.
fn sweep(f: Intrinsic, lo: f32, hi: f32, step: i64) -> (u64, f32, usize, usize) {
    let k = map_kernel(f, CHUNK / ROW, true);
    let (a, b) = (ordered(lo), ordered(hi));
    let (mut worst, mut inexact, mut total) = ((0, lo), 0, 0);
    let mut start = a;
    while start <= b {
        let xs: Vec<f32> = (0..CHUNK)
            .map(|i| start + i * step)
            .take_while(|&o| o <= b)
            .map(from_ordered)
            .collect();
        start += CHUNK * step;
        let ys = apply(&k, &xs);
        let errs: Vec<(u64, f32)> = xs
            .par_iter()
            .zip(&ys)
            .map(|(&x, &y)| (ulps(y, reference(f, x)), x))
            .collect();
        inexact += errs.iter().filter(|e| e.0 > 0).count();
        total += errs.len();
        let w = errs
            .iter()
            .fold((0, 0.0), |p, &q| if q.0 > p.0 { q } else { p });
        if w.0 > worst.0 {
            worst = w;
        }
    }
    (worst.0, worst.1, inexact, total)
}

fn check_sweep(f: Intrinsic, step: i64) {
    let &(_, lo, hi, bound) = CASES.iter().find(|c| c.0 == f).unwrap();
    let t = std::time::Instant::now();
    let (e, x, inexact, total) = sweep(f, lo, hi, step);
    println!(
        "{}: max {e} ULP on [{lo}, {hi}] (every {step}th float: {total}), at x = {x:e}; \
         {:.3}% not correctly rounded; {:.2?}",
        f.name(),
        100.0 * inexact as f64 / total as f64,
        t.elapsed()
    );
    assert!(e <= bound as u64, "{}({x:e}): {e} ULP > {bound}", f.name());
}

#[test]
fn vmath_exp_sweep() {
    check_sweep(Intrinsic::Exp, STEP);
}

#[test]
fn vmath_sigmoid_sweep() {
    check_sweep(Intrinsic::Sigmoid, STEP);
}

#[test]
fn vmath_tanh_sweep() {
    check_sweep(Intrinsic::Tanh, STEP);
}

#[test]
fn vmath_erf_sweep() {
    check_sweep(Intrinsic::Erf, STEP);
}

/// Every float of each range (about 2^31 for exp): minutes, so not in CI.
#[test]
#[ignore]
fn vmath_all_floats() {
    for (f, ..) in CASES {
        check_sweep(f, 1);
    }
}

/// A function, its (input, exact result) pairs, and inputs checked against the reference.
type Case = (Intrinsic, Vec<(f32, f32)>, Vec<f32>);

/// Special values and the saturated ranges, bit-exact, and the thresholds between ranges
/// (within the sweep's bound), in vector and scalar code.
#[test]
fn vmath_special_values() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let den = f32::from_bits(1); // the smallest denormal
    let big: Vec<f32> = (0..60).map(|i| 20.0 * 1.5f32.powi(i)).collect(); // to 7e11
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        (Intrinsic::Exp, vec![
            (inf, inf), (-inf, 0.0), (0.0, 1.0), (-0.0, 1.0), (den, 1.0), (-den, 1.0),
            (f32::from_bits(0x42b17218), inf), // the first x with e^x > FLT_MAX + ULP/2
            (89.0, inf), (f32::MAX, inf), (-104.0, 0.0), (f32::MIN, 0.0),
        ], vec![
            f32::from_bits(0x42b17217), // the largest x with a finite result
            -87.33654, -87.3366, // the last normal result and the first denormal one
            -103.27893, -103.972, -103.9721, // about the results 2^-149 and 0
        ]),
        (Intrinsic::Sigmoid, vec![
            (inf, 1.0), (-inf, 0.0), (0.0, 0.5), (-0.0, 0.5), (17.4, 1.0), (-104.0, 0.0),
        ], vec![17.32, 17.33, -87.3, -88.8, -100.0, -103.9]),
        (Intrinsic::Tanh, vec![
            (inf, 1.0), (-inf, -1.0), (0.0, 0.0), (-0.0, -0.0), (den, den), (-den, -den),
            (1e-20, 1e-20), (-1e-20, -1e-20), (9.1, 1.0), (-9.1, -1.0), (50.0, 1.0),
        ], vec![0.62499994, 0.625, -0.625, 9.0, -9.0, 44.0]),
        (Intrinsic::Erf, vec![
            (inf, 1.0), (-inf, -1.0), (0.0, 0.0), (-0.0, -0.0), (3.93, 1.0), (-3.93, -1.0),
            (4.0, 1.0), (-den, -den),
        ], vec![0.9218749, 0.921875, -0.921875, 3.9, -3.9, 3.91]),
    ];
    for (f, mut exact, near) in cases {
        exact.push((nan, nan));
        exact.push((-nan, nan));
        let sat = |x: f32| match f {
            Intrinsic::Exp if x > 0.0 => inf,
            Intrinsic::Sigmoid if x > 0.0 => 1.0,
            Intrinsic::Exp | Intrinsic::Sigmoid => 0.0,
            _ => x.signum(),
        };
        // exp's and sigmoid's unsaturated inputs are the sweeps'
        let far = |x: &f32| !matches!(f, Intrinsic::Exp | Intrinsic::Sigmoid) || x.abs() > 105.0;
        exact.extend(
            big.iter()
                .flat_map(|&x| [x, -x])
                .filter(far)
                .map(|x| (x, sat(x))),
        );
        let xs: Vec<f32> = exact
            .iter()
            .map(|p| p.0)
            .chain(near.iter().copied())
            .collect();
        let bound = CASES.iter().find(|c| c.0 == f).unwrap().3 as u64;
        for vector in [true, false] {
            let rows = (xs.len() as i64 + ROW - 1) / ROW;
            let ys = apply(&map_kernel(f, rows, vector), &xs);
            for (&(x, want), y) in exact.iter().zip(&ys) {
                let same = (want.is_nan() && y.is_nan()) || want.to_bits() == y.to_bits();
                assert!(
                    same,
                    "{}({x:e}) = {y:e}, want {want:e} (vector {vector})",
                    f.name()
                );
            }
            for (&x, &y) in near.iter().zip(&ys[exact.len()..]) {
                let (want, e) = (reference(f, x), ulps(y, reference(f, x)));
                assert!(
                    e <= bound,
                    "{}({x:e}) = {y:e}, want {want:e}: {e} ULP",
                    f.name()
                );
            }
        }
    }
}

/// The scalar code (one lane, LLVM's vectorizers off) computes the same bits as the vector
/// code, so a kernel's result does not depend on which of its loops were vectorized.
#[test]
fn vmath_scalar_matches_vector() {
    for (f, lo, hi, _) in CASES {
        let xs: Vec<f32> = (0..ROW * 1024)
            .map(|i| lo + (hi - lo) * (i as f32 / (ROW * 1024) as f32))
            .collect();
        let rows = xs.len() as i64 / ROW;
        let v = apply(&map_kernel(f, rows, true), &xs);
        let s = apply(&map_kernel(f, rows, false), &xs);
        for ((x, a), b) in xs.iter().zip(v).zip(s) {
            assert_eq!(a.to_bits(), b.to_bits(), "{}({x:e})", f.name());
        }
    }
}
