//! f32 exp, sigmoid, tanh and erf as branch-free polynomial IR, on any lane count.
//!
//! LLVM has no vector exp: `llvm.exp` on `<8 x float>` becomes eight calls of libm's `expf`,
//! and sigmoid and tanh were built on it (erf on libm's `erff`, one call per lane), so a
//! SiLU / GELU / tanh epilogue cost more than the conv it followed. Here each function is
//! straight-line IR (1 lane = scalar): a range reduction, a minimax polynomial whose
//! coefficients `tools/vmath_coeffs.py` derives (Remez in mpmath, then rounded to f32), and
//! selects for the ranges and the special values. Polynomials are Horner chains of
//! `llvm.fmuladd` (an FMA where the target has one, else a multiply and an add; the figures
//! below are for FMA hosts). f64 keeps `expr.rs`'s libm path: no model of the corpus
//! computes these in f64.
//!
//! Accuracy, as the largest distance in f32 steps (ULP) from the f64 reference rounded to
//! f32, over every f32 of the range where the result is not saturated (`vmath_tests.rs`;
//! its CI tests sweep every 61st float, the ignored `vmath_all_floats` every float):
//! exp 1 ULP on [-104, 89], sigmoid 2 ULP on [-105, 20], tanh 1 ULP on [-10, 10],
//! erf 1 ULP on [-4.5, 4.5].
//!
//! Special values: NaN gives NaN (the clamps are selects on ordered compares, which keep
//! NaN; `llvm.minnum` would not). exp: +inf and x >= 88.72284 give +inf, -inf and
//! x < -103.9721 (e^x < 2^-150) give +0, and results below 2^-126 are denormals rounded once
//! (the scale 2^n is two normal factors, see `Vm::exp`). sigmoid: +inf and x > 17.33 give exactly 1,
//! -inf gives +0, and large negative x keeps the denormal tail e^x; sigmoid(±0) = 0.5.
//! tanh and erf: odd, so ±0 and tiny (also denormal) inputs keep their sign, and they
//! saturate to exactly ±1 (tanh past |x| = 9.01, erf past 3.92), ±inf included.
//!
//! Cost: the code is inline, 25-50 IR instructions per vector and function (a call would spill
//! every live vector register, none being callee-saved, and the kernel pipeline has no
//! inliner), so kernels compile slower: efficientnet_b1's 171 kernels in 2.68 s, not 2.35.

use super::llvm::*;
use super::translate::Tr;
use crate::loopnest::ir::{DType, Intrinsic};

/// x * LOG2E + ROUND_MAGIC, with |x * LOG2E| < 2^22, rounds x * LOG2E to an integer n held in
/// the low mantissa bits (1.5 * 2^23 has an ULP of 1, and the 0.5 keeps negative n in the
/// same binade); subtracting it again gives n as a float.
const ROUND_MAGIC: f32 = 12582912.0;
const LOG2E: f32 = f32::from_bits(0x3fb8aa3b); // 1.44269502
/// ln 2 = LN2_HI + LN2_LO (Cody-Waite): LN2_HI has 14 significant bits, so n * LN2_HI is exact
/// for |n| < 2^10 and x - n * LN2_HI is exact near x = n ln 2.
const LN2_HI: f32 = f32::from_bits(0x3f317000); // 0.693115234375
const LN2_LO: f32 = f32::from_bits(0x3805fdf4); // 3.19461833e-5
/// e^89 > FLT_MAX (ln FLT_MAX = 88.7228): clamping there still overflows to +inf.
const EXP_HI: f32 = 89.0;
/// e^-104 < 2^-150 (half the smallest denormal): clamping there still rounds to +0, and
/// keeps n >= -150, so that each of the two scale factors stays a normal float.
const EXP_LO: f32 = -104.0;
/// e^r ~ 1 + r + r^2 (c2 + c3 r + ...), |r| <= ln2/2: relative error 3.5e-9 (2^-28).
const EXP_P: [f32; 7] = [
    1.0,
    1.0,
    f32::from_bits(0x3efffffe), // 0.49999994
    f32::from_bits(0x3e2aaa41), // 0.16666509
    f32::from_bits(0x3d2aac13), // 0.041668009
    f32::from_bits(0x3c09225c), // 0.0083700083
    f32::from_bits(0x3ab5817b), // 0.0013847792
];
/// Below this |x|, tanh(x) = x + x^3 p(x^2); above, 1 - 2 / (1 + e^2|x|) loses nothing to
/// cancellation (tanh >= 0.55 there).
const TANH_SMALL: f32 = 0.625;
/// tanh(x) ~ x + x^3 p(x^2) on |x| <= 0.625: relative error 4.6e-9 (2^-27.7).
const TANH_P: [f32; 5] = [
    f32::from_bits(0xbeaaaa99), // -0.33333281
    f32::from_bits(0x3e08837b), // 0.13331406
    f32::from_bits(0xbd5c1ad2), // -0.053736515
    f32::from_bits(0x3ca8fc6a), // 0.020628173
    f32::from_bits(0xbbba8685), // -0.0056923055
];
/// Below this |x|, erf(x) = x + x p(x^2); above, erf = 1 - erfc with erfc(x) <= 0.19, so
/// erfc's error reaches the result scaled by less than a quarter.
const ERF_SMALL: f32 = 0.921875;
/// erf(x) ~ x + x p(x^2) on |x| <= 0.921875: relative error 2.1e-9 (2^-28.8). Not x p(x^2):
/// no f32 is within 5e-8 of 2/sqrt(pi) (0.9 ULP near 0), p(0) = 2/sqrt(pi) - 1 is.
const ERF_SMALL_P: [f32; 7] = [
    f32::from_bits(0x3e0375d4), // 0.12837917
    f32::from_bits(0xbec093a0), // -0.37612629
    f32::from_bits(0x3de716b2), // 0.11283626
    f32::from_bits(0xbcdc0083), // -0.026855713
    f32::from_bits(0x3baa246a), // 0.0051923292
    f32::from_bits(0xba52fcc2), // -0.00080485281
    f32::from_bits(0x38a78eae), // 7.9897567e-5
];
/// erfc(4) = 1.5e-8 rounds 1 - erfc to 1: |x| is clamped here, which saturates erf.
const ERF_BIG: f32 = 4.0;
/// log(erfc(x)) ~ P(x - ERF_SMALL) on [ERF_SMALL, ERF_BIG], weighted by erfc(x) / erf(x) (an
/// error d in P is an error erfc(x) d of erf): weighted error 1.4e-8 (2^-26), most of it
/// c0's rounding. The variable starts at 0 where the weight is largest, so Horner's rounding
/// there is only c0's and the last step's.
const ERF_BIG_P: [f32; 8] = [
    f32::from_bits(0xbfd30413), // -1.6485618
    f32::from_bits(0xc0208362), // -2.508019
    f32::from_bits(0xbf5537e9), // -0.83288437
    f32::from_bits(0xbd39fddf), // -0.045408126
    f32::from_bits(0x3c495bfd), // 0.012289998
    f32::from_bits(0xbb7c1048), // -0.0038461853
    f32::from_bits(0x3aa286fd), // 0.0012399849
    f32::from_bits(0xb9616e81), // -0.00021498838
];

impl<'c> Tr<'c, '_> {
    /// `f` on f32 `x` (scalar or `lanes` lanes) when it is one of the functions this module
    /// emits, else `None` (the caller's generic path).
    pub fn emit_vmath(&self, f: Intrinsic, x: Value<'c>, lanes: u32) -> Option<Value<'c>> {
        let vm = Vm { tr: self, lanes };
        Some(match f {
            Intrinsic::Exp => vm.exp(x),
            Intrinsic::Sigmoid => vm.sigmoid(x),
            Intrinsic::Tanh => vm.tanh(x),
            Intrinsic::Erf => vm.erf(x),
            _ => return None,
        })
    }
}

/// Emission helpers over f32 values of `lanes` lanes (constants are splatted).
struct Vm<'t, 'c, 'a> {
    tr: &'t Tr<'c, 'a>,
    lanes: u32,
}

impl<'c> Vm<'_, 'c, '_> {
    fn splat(&self, c: Value<'c>) -> Value<'c> {
        if self.lanes > 1 {
            Value::const_vector(&vec![c; self.lanes as usize])
        } else {
            c
        }
    }
    fn f(&self, v: f32) -> Value<'c> {
        self.splat(self.tr.cx.f32().const_float(v as f64))
    }
    fn i(&self, v: i32) -> Value<'c> {
        self.splat(self.tr.cx.i32().const_int(v as i64))
    }
    fn int_ty(&self) -> Type<'c> {
        self.tr.ty_lanes(DType::I32, self.lanes)
    }
    fn float_ty(&self) -> Type<'c> {
        self.tr.ty_lanes(DType::F32, self.lanes)
    }
    fn intr(&self, name: &str, args: &[Value<'c>]) -> Value<'c> {
        let f = self.tr.m.intrinsic(name, &[self.float_ty()]);
        self.tr.b.call_fn(f.expect("math intrinsic"), args)
    }
    fn fma(&self, a: Value<'c>, b: Value<'c>, c: Value<'c>) -> Value<'c> {
        self.intr("llvm.fmuladd", &[a, b, c])
    }
    /// c[0] + x (c[1] + x (c[2] + ...)) by Horner.
    fn poly(&self, x: Value<'c>, c: &[f32]) -> Value<'c> {
        let (last, rest) = c.split_last().expect("a coefficient");
        rest.iter()
            .rev()
            .fold(self.f(*last), |acc, &k| self.fma(acc, x, self.f(k)))
    }
    /// x clamped to [lo, hi], NaN kept (an ordered compare is false on NaN).
    fn clamp(&self, x: Value<'c>, lo: f32, hi: f32) -> Value<'c> {
        let b = &self.tr.b;
        let x = b.select(b.fcmp(LLVMRealOGT, x, self.f(hi)), self.f(hi), x);
        b.select(b.fcmp(LLVMRealOLT, x, self.f(lo)), self.f(lo), x)
    }
    /// 2^n for integer n in [-126, 127]: the biased exponent shifted into place.
    fn pow2(&self, n: Value<'c>) -> Value<'c> {
        let b = &self.tr.b;
        let e = b.shl(b.add(n, self.i(127)), self.i(23));
        b.bitcast(e, self.float_ty())
    }

    /// e^x = 2^n e^r with n = round(x / ln 2) and r = x - n ln 2, |r| <= ln2/2 (+1% for the
    /// rounding of x * LOG2E), e^r by EXP_P. The scale 2^n is applied as 2^(n >> 1) times
    /// 2^(n - (n >> 1)): for n in [-150, 128] both are normal floats, the first product is
    /// exact, and the second overflows to +inf or rounds a denormal result once, so neither
    /// end of the range needs its own select. n comes from ROUND_MAGIC's bits rather than
    /// fptosi, which is poison on NaN; a NaN x gives a NaN p whatever the scale.
    fn exp(&self, x: Value<'c>) -> Value<'c> {
        let b = &self.tr.b;
        let x = self.clamp(x, EXP_LO, EXP_HI);
        let t = self.fma(x, self.f(LOG2E), self.f(ROUND_MAGIC));
        let n = b.fsub(t, self.f(ROUND_MAGIC));
        let r = self.fma(n, self.f(-LN2_HI), x);
        let r = self.fma(n, self.f(-LN2_LO), r);
        let p = self.poly(r, &EXP_P);
        let magic_bits = self.i(ROUND_MAGIC.to_bits() as i32);
        let ni = b.sub(b.bitcast(t, self.int_ty()), magic_bits);
        let n1 = b.ashr(ni, self.i(1));
        let n2 = b.sub(ni, n1);
        b.fmul(b.fmul(p, self.pow2(n1)), self.pow2(n2))
    }

    /// 1 / (1 + e^-x) from e = e^-|x| in [0, 1], which cannot overflow: x >= 0 gives
    /// 1 / (1 + e) (exactly 1 once e < 2^-25), x < 0 gives e / (1 + e) = e^x / (1 + e^x),
    /// which keeps the tail down to the denormals where the naive 1 / (1 + inf) gives 0.
    /// 1 + e and the division each round: one Newton step on the exact 1 + e (d + dl,
    /// Fast2Sum) takes both errors out of q for five cheap operations (3 ULP -> 2 at worst).
    fn sigmoid(&self, x: Value<'c>) -> Value<'c> {
        let b = &self.tr.b;
        let one = self.f(1.0);
        let e = self.exp(b.fneg(self.intr("llvm.fabs", &[x])));
        let d = b.fadd(one, e);
        let dl = b.fsub(e, b.fsub(d, one));
        let q = b.fdiv(one, d);
        // 1 - (d + dl) q, exact in its first step
        let r = self.fma(b.fneg(d), q, one);
        let r = self.fma(b.fneg(dl), q, r);
        let q = self.fma(q, r, q);
        let neg = b.fcmp(LLVMRealOLT, x, self.f(0.0));
        b.select(neg, b.fmul(e, q), q)
    }

    /// tanh: x + x^3 p(x^2) below TANH_SMALL, where 1 - 2 / (1 + e^2|x|) would cancel (and
    /// which keeps denormals); beyond, that form; x's sign is copied onto either:
    /// e^2|x| = +inf past |x| = 44.4 gives exactly 1, and 1 - 2 / (1 + e) rounds to 1 from
    /// |x| = 9.01 on. NaN fails the compare and goes through exp.
    fn tanh(&self, x: Value<'c>) -> Value<'c> {
        let b = &self.tr.b;
        let a = self.intr("llvm.fabs", &[x]);
        let x2 = b.fmul(x, x);
        let small = self.fma(b.fmul(x, x2), self.poly(x2, &TANH_P), x);
        let e = self.exp(b.fadd(a, a));
        let big = b.fsub(self.f(1.0), b.fdiv(self.f(2.0), b.fadd(self.f(1.0), e)));
        let t = b.select(b.fcmp(LLVMRealOLT, a, self.f(TANH_SMALL)), small, big);
        // the sign for `big`, and for `small` at x = -0, where x^3 p is +0 (p < 0)
        self.intr("llvm.copysign", &[t, x])
    }

    /// erf: x + x p(x^2) below ERF_SMALL (odd, so -0 and denormals keep their sign); beyond,
    /// 1 - e^P(|x| - ERF_SMALL) with x's sign, P ~ log erfc. |x| is clamped to ERF_BIG, where
    /// the result rounds to 1 (so ±inf give ±1); NaN fails the compares and stays NaN.
    fn erf(&self, x: Value<'c>) -> Value<'c> {
        let b = &self.tr.b;
        let a = self.intr("llvm.fabs", &[x]);
        let small = self.fma(x, self.poly(b.fmul(x, x), &ERF_SMALL_P), x);
        let u = b.fsub(self.clamp(a, 0.0, ERF_BIG), self.f(ERF_SMALL));
        let big = b.fsub(self.f(1.0), self.exp(self.poly(u, &ERF_BIG_P)));
        let e = b.select(b.fcmp(LLVMRealOLT, a, self.f(ERF_SMALL)), small, big);
        self.intr("llvm.copysign", &[e, x])
    }
}
