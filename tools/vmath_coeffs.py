#!/usr/bin/env python3
"""Coefficients of ttdb's vector f32 transcendentals (crates/ttdb-backend/src/codegen/vmath.rs).

Each polynomial is a weighted minimax fit found by the Remez exchange algorithm in mpmath
(30 digits), then rounded to f32; the script prints every constant as the f32 bit pattern
and its decimal value, in the order vmath.rs lists them, and the fit's weighted error before
and after that rounding. `python3 tools/vmath_coeffs.py` (mpmath only; a few minutes).

The fits (the weight makes the fitted error what matters for an f32 result):
* exp: e^r = 1 + r + r^2 q(r) on |r| <= ln2/2 (+1%), relative error;
* tanh near 0: tanh(x) = x + x^3 p(x^2) on (0, TANH_SMALL], relative error;
* erf near 0: erf(x) = x + x p(x^2) on (0, ERF_SMALL], relative error;
* erf beyond: erf(x) = 1 - exp(P(x - ERF_SMALL)) on [ERF_SMALL, ERF_BIG]: P approximates
  log(erfc(x)); an error d in P is a relative error d of erfc, so an error erfc(x) * d of erf,
  and the weight is erfc(x) / erf(x) (the error relative to the result).
"""
import mpmath as mp

mp.mp.dps = 30

TANH_SMALL = mp.mpf("0.625")
ERF_SMALL = mp.mpf("0.921875")
ERF_BIG = mp.mpf(4)


def f32(x):
    """Round to the nearest f32 (normal range is all these constants need)."""
    import struct

    return mp.mpf(struct.unpack("<f", struct.pack("<f", float(x)))[0])


def f32_bits(x):
    import struct

    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def solve_reference(f, basis, w, pts):
    """Coefficients c and levelled error E with w(x_i)(sum c_k b_k(x_i) - f(x_i)) = (-1)^i E."""
    n = len(basis)
    a = mp.matrix(n + 1, n + 1)
    rhs = mp.matrix(n + 1, 1)
    for i, x in enumerate(pts):
        for k, b in enumerate(basis):
            a[i, k] = b(x)
        a[i, n] = (-1) ** i / w(x)
        rhs[i] = f(x)
    sol = mp.lu_solve(a, rhs)
    return [sol[k] for k in range(n)], sol[n]


def err_fn(f, basis, w, c):
    return lambda x: w(x) * (sum(ck * b(x) for ck, b in zip(c, basis)) - f(x))


def extrema(e, lo, hi, m):
    """Alternating extrema of e: the largest |e| between sign changes on an m-point grid."""
    xs = [lo + (hi - lo) * i / (m - 1) for i in range(m)]
    es = [e(x) for x in xs]
    groups = []
    for x, v in zip(xs, es):
        if groups and (v >= 0) == (groups[-1][1] >= 0):
            if abs(v) > abs(groups[-1][1]):
                groups[-1] = (x, v)
        else:
            groups.append((x, v))
    return groups


def remez(f, basis, w, lo, hi, iters=12, grid=3000):
    n = len(basis)
    pts = [(lo + hi) / 2 - (hi - lo) / 2 * mp.cos(mp.pi * i / n) for i in range(n + 1)]
    c = None
    for _ in range(iters):
        c, lev = solve_reference(f, basis, w, pts)
        g = extrema(err_fn(f, basis, w, c), lo, hi, grid)
        # keep n+1 consecutive alternating extrema holding the largest one
        while len(g) > n + 1:
            if abs(g[0][1]) < abs(g[-1][1]):
                g.pop(0)
            else:
                g.pop()
        if len(g) < n + 1:
            break
        pts = [x for x, _ in g]
    return c


def max_err(f, basis, w, c, lo, hi, grid=6000):
    e = err_fn(f, basis, w, c)
    return max(abs(e(lo + (hi - lo) * i / (grid - 1))) for i in range(grid))


def fit(name, f, basis, w, lo, hi, fixed=(), seq=2):
    """Fit, round to f32, and print; `fixed` are leading coefficients printed as-is.

    Rounding every coefficient at once can cost far more than the fit's error (the leading
    one alone moves by up to 2^-24 relative), so the first `seq` coefficients are rounded one
    at a time, each time refitting the higher ones to absorb the rounding; the rest are then
    rounded together (their rounding errors are scaled by powers of the small variable).
    """
    c = remez(f, basis, w, lo, hi)
    e = max_err(f, basis, w, c, lo, hi)
    c32 = []
    for k in range(min(seq, len(basis) - 1)):
        done = list(c32)
        g = lambda x, d=done: f(x) - sum(ck * b(x) for ck, b in zip(d, basis))
        rest = remez(g, basis[k:], w, lo, hi)
        c32.append(f32(rest[0]))
    done = list(c32)
    g = lambda x, d=done: f(x) - sum(ck * b(x) for ck, b in zip(d, basis))
    c32 += [f32(x) for x in remez(g, basis[len(done):], w, lo, hi)]
    e32 = max_err(f, basis, w, c32, lo, hi)
    print(f"// {name}: minimax on [{mp.nstr(lo, 8)}, {mp.nstr(hi, 8)}], weighted error")
    print(f"//   {mp.nstr(e, 4)} (= 2^{mp.nstr(mp.log(e, 2), 4)}), with f32 coefficients {mp.nstr(e32, 4)}")
    for k, x in enumerate(list(fixed) + c32):
        print(f"    f32::from_bits(0x{f32_bits(x):08x}), // c{k} = {mp.nstr(x, 10)}")
    return c32


def main():
    ln2 = mp.log(2)
    # Cody-Waite: ln2_hi keeps 15 significant bits, so n * ln2_hi is exact for |n| < 512
    ln2_hi = mp.floor(ln2 * 2**14) / 2**14
    ln2_lo = f32(ln2 - ln2_hi)
    print("// exp range reduction")
    for nm, v in [("LOG2E", f32(1 / ln2)), ("LN2_HI", ln2_hi), ("LN2_LO", ln2_lo)]:
        print(f"const {nm}: f32 = f32::from_bits(0x{f32_bits(v):08x}); // {mp.nstr(v, 12)}")

    r = ln2 / 2 * mp.mpf("1.01")
    fit(
        "exp: e^r - 1 - r = r^2 q(r), relative to e^r",
        lambda x: mp.exp(x) - 1 - x,
        [lambda x, k=k: x ** (k + 2) for k in range(5)],
        lambda x: mp.exp(-x),
        -r,
        r,
        fixed=(1, 1),
    )
    fit(
        "tanh(x) - x = x^3 p(x^2), relative to tanh(x)",
        lambda x: mp.tanh(x) - x,
        [lambda x, k=k: x ** (2 * k + 3) for k in range(5)],
        lambda x: 1 / mp.tanh(x),
        mp.mpf(2) ** -20,
        TANH_SMALL,
    )
    # x + x p(x^2) rather than x p(x^2): 2/sqrt(pi) has no f32 within 5e-8 relative (0.9
    # ULP near 0); p(0) = 2/sqrt(pi) - 1 rounds with 8x less absolute error
    fit(
        "erf(x) - x = x p(x^2), relative to erf(x)",
        lambda x: mp.erf(x) - x,
        [lambda x, k=k: x ** (2 * k + 1) for k in range(7)],
        lambda x: 1 / mp.erf(x),
        mp.mpf(2) ** -20,
        ERF_SMALL,
    )
    fit(
        f"log(erfc(x)) = P(x - {mp.nstr(ERF_SMALL, 8)}), weighted erfc(x)/erf(x)",
        lambda x: mp.log(mp.erfc(x)),
        [lambda x, k=k: (x - ERF_SMALL) ** k for k in range(8)],
        lambda x: mp.erfc(x) / mp.erf(x),
        ERF_SMALL,
        ERF_BIG,
    )


if __name__ == "__main__":
    main()
