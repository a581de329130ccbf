//! Welch's t-test: does a candidate's timing differ from the incumbent's by more than the
//! noise? (Droplet accepts a move only when it does; the artifact uses Student's
//! equal-variance test, but two kernels' timings need not share a variance.)

/// Welch's two-sample t-test of `a` against `b`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Welch {
    /// t statistic: (mean a - mean b) / standard error.
    pub t: f64,
    /// Welch-Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value.
    pub p: f64,
}

pub fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

/// Unbiased sample variance (n - 1 in the denominator).
fn variance(x: &[f64]) -> f64 {
    let m = mean(x);
    x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (x.len() as f64 - 1.0)
}

/// Welch's test; None when either side has fewer than 2 samples or a sample is not finite.
pub fn welch(a: &[f64], b: &[f64]) -> Option<Welch> {
    if a.len() < 2 || b.len() < 2 || a.iter().chain(b).any(|v| !v.is_finite()) {
        return None;
    }
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (va, vb) = (variance(a) / na, variance(b) / nb);
    let diff = mean(a) - mean(b);
    let se2 = va + vb;
    if se2 == 0.0 {
        // Both sides constant: either identical or certainly different.
        let p = if diff == 0.0 { 1.0 } else { 0.0 };
        let t = if diff == 0.0 {
            0.0
        } else {
            diff.signum() * f64::INFINITY
        };
        return Some(Welch {
            t,
            df: na + nb - 2.0,
            p,
        });
    }
    let t = diff / se2.sqrt();
    let df = se2 * se2 / (va * va / (na - 1.0) + vb * vb / (nb - 1.0));
    // P(|T| > |t|) for Student's t with df degrees of freedom = I_{df/(df+t^2)}(df/2, 1/2).
    let p = regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
    Some(Welch { t, df, p })
}

/// ln Γ(x) for x > 0 (Lanczos approximation, g = 7, 9 terms; ~1e-15 relative).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1-x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// I_x(a, b), the regularized incomplete beta function, by its continued fraction (modified
/// Lentz), using the symmetry I_x(a,b) = 1 - I_{1-x}(b,a) where that converges faster.
fn regularized_incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(a, b, x) / a
    } else {
        1.0 - front * beta_fraction(b, a, 1.0 - x) / b
    }
}

fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let mut c = 1.0;
    let mut d = 1.0 - (a + b) * x / (a + 1.0);
    d = if d.abs() < TINY { TINY } else { d };
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=300 {
        let m = m as f64;
        for num in [
            m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0)),
        ] {
            d = 1.0 + num * d;
            d = if d.abs() < TINY { TINY } else { d };
            c = 1.0 + num / c;
            c = if c.abs() < TINY { TINY } else { c };
            d = 1.0 / d;
            h *= d * c;
        }
        if (d * c - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from scipy 1.16 `stats.ttest_ind(a, b, equal_var=False)`.
    #[test]
    fn welch_matches_scipy() {
        // (a, b, t, degrees of freedom, p) as scipy gives them
        type Case<'a> = (&'a [f64], &'a [f64], f64, f64, f64);
        let cases: [Case; 4] = [
            (
                &[1.0, 2.0, 3.0, 4.0],
                &[2.5, 3.5, 4.5, 5.5, 6.5],
                -2.088931871468374,
                0.07519774959850842,
                6.980769230769231,
            ),
            (
                &[0.00101, 0.00099, 0.00102],
                &[0.00090, 0.00091, 0.00089],
                10.11928851253879,
                0.0011032114832226173,
                3.448275862068966,
            ),
            (
                &[10.1, 10.3, 9.9, 10.0, 10.2],
                &[10.0, 10.4, 9.8, 10.1, 10.3],
                -0.15617376188860274,
                0.8803401225741921,
                6.942694889003612,
            ),
            (
                &[1.0, 2.0, 3.0],
                &[10.0, 11.0, 13.0, 12.0, 30.0, 40.0],
                -3.3537919036683657,
                0.01949544289262749,
                5.125121361246627,
            ),
        ];
        for (a, b, t, p, df) in cases {
            let w = welch(a, b).unwrap();
            assert!((w.t - t).abs() < 1e-9 * t.abs(), "t {} vs {t}", w.t);
            assert!((w.df - df).abs() < 1e-9 * df, "df {} vs {df}", w.df);
            assert!((w.p - p).abs() < 1e-9, "p {} vs {p}", w.p);
        }
    }

    #[test]
    fn degenerate_samples() {
        assert!(welch(&[1.0], &[1.0, 2.0]).is_none());
        assert!(welch(&[1.0, f64::NAN], &[1.0, 2.0]).is_none());
        assert_eq!(welch(&[2.0, 2.0], &[2.0, 2.0, 2.0]).unwrap().p, 1.0);
        let w = welch(&[1.0, 1.0], &[2.0, 2.0]).unwrap();
        assert_eq!((w.p, w.t), (0.0, f64::NEG_INFINITY));
    }

    #[test]
    fn incomplete_beta_known_values() {
        // I_x(1, 1) = x; I_x(a, 1) = x^a; I_0.5(a, a) = 0.5.
        assert!((regularized_incomplete_beta(1.0, 1.0, 0.3) - 0.3).abs() < 1e-12);
        assert!((regularized_incomplete_beta(2.5, 1.0, 0.4) - 0.4f64.powf(2.5)).abs() < 1e-12);
        assert!((regularized_incomplete_beta(3.7, 3.7, 0.5) - 0.5).abs() < 1e-12);
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-12);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-12);
    }
}
