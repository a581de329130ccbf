//! Winograd conv2d NHWC with a pre-transformed kernel (`_conv2d_winograd_nhwc_impl`,
//! `pre_computed=True`): what relay picks on x86 for 3x3 stride-1 convolutions when the
//! auto-scheduler is on (spec §4.1). Stages:
//! `data, data_pad, input_tile, B, data_pack, kernel_pack, bgemm, A, inverse, conv2d_winograd`.
//!
//! `A` and `B` are `topi.utils.const_matrix` stages whose bodies are select chains over the
//! Cook-Toom transform matrices; PrintDAG prints them in full, so reproducing the key hash
//! needs the exact matrix values. They are computed here with exact rational arithmetic
//! (TVM uses numpy float64; for tile sizes 2 and 4 both give the same float32 values, checked
//! against real key hashes).
use super::era::Era;
use super::pad::{pad, PadFlavor};
use super::registry::Anchor;
use super::util::{check, named_axes, rank};
use super::windows::{fits_unpadded, solve_padding};
use crate::ir::eval::TensorData;
use crate::ir::{BuildError, Combiner, ComputeAttrs, DagBuilder, Expr, IterVar, Tensor};

/// Exact rational number for the transform matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Q {
    n: i128,
    d: i128,
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

#[allow(clippy::should_implement_trait)]
impl Q {
    fn new(n: i128, d: i128) -> Q {
        let g = gcd(n, d).max(1);
        let s = if d < 0 { -1 } else { 1 };
        Q {
            n: s * n / g,
            d: s * d / g,
        }
    }
    fn int(n: i128) -> Q {
        Q { n, d: 1 }
    }
    fn add(self, o: Q) -> Q {
        Q::new(self.n * o.d + o.n * self.d, self.d * o.d)
    }
    fn sub(self, o: Q) -> Q {
        Q::new(self.n * o.d - o.n * self.d, self.d * o.d)
    }
    fn mul(self, o: Q) -> Q {
        Q::new(self.n * o.n, self.d * o.d)
    }
    fn div(self, o: Q) -> Q {
        Q::new(self.n * o.d, self.d * o.n)
    }
    fn neg(self) -> Q {
        Q {
            n: -self.n,
            d: self.d,
        }
    }
    fn pow(self, e: usize) -> Q {
        (0..e).fold(Q::int(1), |acc, _| acc.mul(self))
    }
    fn is_zero(self) -> bool {
        self.n == 0
    }
    fn to_f64(self) -> f64 {
        self.n as f64 / self.d as f64
    }
}

type Mat = Vec<Vec<Q>>;

fn matmul(x: &Mat, y: &Mat) -> Mat {
    (0..x.len())
        .map(|i| {
            (0..y[0].len())
                .map(|j| (0..y.len()).fold(Q::int(0), |acc, k| acc.add(x[i][k].mul(y[k][j]))))
                .collect()
        })
        .collect()
}

fn transpose(x: &Mat) -> Mat {
    (0..x[0].len())
        .map(|j| (0..x.len()).map(|i| x[i][j]).collect())
        .collect()
}

fn inverse(m: &Mat) -> Mat {
    let n = m.len();
    let mut a: Mat = m
        .iter()
        .enumerate()
        .map(|(i, r)| {
            r.iter()
                .copied()
                .chain((0..n).map(|j| Q::int((i == j) as i128)))
                .collect()
        })
        .collect();
    for c in 0..n {
        let p = (c..n)
            .find(|&r| !a[r][c].is_zero())
            .expect("Cook-Toom F matrix is invertible");
        a.swap(c, p);
        let pv = a[c][c];
        a[c] = a[c].iter().map(|x| x.div(pv)).collect();
        for r in 0..n {
            if r != c && !a[r][c].is_zero() {
                let f = a[r][c];
                let pivot_row = a[c].clone();
                a[r] = a[r]
                    .iter()
                    .zip(&pivot_row)
                    .map(|(x, y)| x.sub(f.mul(*y)))
                    .collect();
            }
        }
    }
    a.into_iter().map(|r| r[n..].to_vec()).collect()
}

/// Interpolation points of TOPI's `_interpolation_points(tile + kernel - 2)` for kernel 3
/// (Barabasz et al.), as exact fractions.
fn interpolation_points(tile_size: usize) -> Option<Vec<Q>> {
    let h = Q::new(1, 2);
    let pts: Vec<Q> = match tile_size {
        2 => vec![Q::int(0), Q::int(-1), Q::int(1)],
        3 => vec![Q::int(0), Q::int(-1), Q::int(1), h],
        4 => vec![Q::int(0), Q::int(-1), Q::int(1), h, Q::int(-2)],
        5 => vec![Q::int(0), Q::int(-1), Q::int(1), h, Q::int(-2), h.neg()],
        6 => vec![
            Q::int(0),
            Q::int(-1),
            Q::int(1),
            h,
            h.neg(),
            Q::int(2),
            Q::int(-2),
        ],
        _ => return None,
    };
    Some(pts)
}

/// Product over k != i (k < count) of (a_i - a_k).
fn lagrange_denominator(a: &[Q], i: usize, count: usize) -> Q {
    (0..count)
        .filter(|&k| k != i)
        .fold(Q::int(1), |acc, k| acc.mul(a[i].sub(a[k])))
}

/// Cook-Toom A (alpha x m), B (alpha x alpha) and G (alpha x r) matrices, as TOPI's
/// `_cook_toom_convolution` defines them.
fn cook_toom(tile_size: usize, kernel_size: usize) -> Option<(Mat, Mat, Mat)> {
    let a = interpolation_points(tile_size)?;
    let n = tile_size + kernel_size - 1; // alpha
                                         // F: diag(lagrange denominators) with a trailing 1; first row sign-normalized
    let mut f: Mat = vec![vec![Q::int(0); n]; n];
    for (i, row) in f.iter_mut().enumerate().take(n - 1) {
        row[i] = lagrange_denominator(&a, i, n - 1);
    }
    f[n - 1][n - 1] = Q::int(1);
    if f[0][0].n < 0 {
        f[0] = f[0].iter().map(|x| x.neg()).collect();
    }
    // A: rows a_i^j (j < m), plus [0 .. 0 1]
    let mut am: Mat = (0..n - 1)
        .map(|i| (0..tile_size).map(|j| a[i].pow(j)).collect())
        .collect();
    am.push(
        (0..tile_size)
            .map(|j| Q::int((j == tile_size - 1) as i128))
            .collect(),
    );
    // B: rows of the Lagrange basis coefficients, times [I | -a_i^(n-1)], plus e_{n-1}; then * F^T
    let mut coef: Mat = vec![vec![Q::int(0); n - 1]; n - 1];
    for (i, coef_row) in coef.iter_mut().enumerate() {
        // polynomial prod_{k != i} (x - a_k), coefficients lowest degree first
        let mut p = vec![Q::int(1)];
        for k in (0..n - 1).filter(|&k| k != i) {
            let mut next = vec![Q::int(0); p.len() + 1];
            for (d, c) in p.iter().enumerate() {
                next[d + 1] = next[d + 1].add(*c);
                next[d] = next[d].sub(c.mul(a[k]));
            }
            p = next;
        }
        let den = lagrange_denominator(&a, i, n - 1);
        for (nth, slot) in coef_row.iter_mut().enumerate() {
            *slot = p[nth].div(den);
        }
    }
    let t: Mat = (0..n - 1)
        .map(|i| {
            (0..n)
                .map(|j| {
                    if j == n - 1 {
                        a[i].pow(n - 1).neg()
                    } else {
                        Q::int((i == j) as i128)
                    }
                })
                .collect()
        })
        .collect();
    let mut bm = matmul(&transpose(&coef), &t);
    bm.push((0..n).map(|j| Q::int((j == n - 1) as i128)).collect());
    let bm = matmul(&bm, &transpose(&f));
    // G = (A_r^T F^-1)^T, A_r the Vandermonde rows for the kernel size
    let mut ar: Mat = (0..n - 1)
        .map(|i| (0..kernel_size).map(|j| a[i].pow(j)).collect())
        .collect();
    ar.push(
        (0..kernel_size)
            .map(|j| Q::int((j == kernel_size - 1) as i128))
            .collect(),
    );
    let g = transpose(&matmul(&transpose(&ar), &inverse(&f)));
    Some((am, bm, g))
}

/// `topi.utils.const_matrix`: `select((i % rows == ii) && (j % cols == jj), v, ...)`
/// nested from the first entry (innermost) to the last (outermost).
fn const_matrix(b: &mut DagBuilder, m: &Mat, name: &str) -> Tensor {
    let (rows, cols) = (m.len() as i64, m[0].len() as i64);
    let ax = named_axes(&["i", "j"], &[rows, cols]);
    let (i, j) = (ax[0].var(), ax[1].var());
    let mut now = Expr::f32(0.0);
    for (ii, row) in m.iter().enumerate() {
        for (jj, v) in row.iter().enumerate() {
            let cond = Expr::and(
                Expr::eq(Expr::floormod(i.clone(), rows), ii as i64),
                Expr::eq(Expr::floormod(j.clone(), cols), jj as i64),
            );
            // the value goes through numpy float32, then tir.const(float32)
            now = Expr::select(cond, Expr::f32(v.to_f64() as f32 as f64), now);
        }
    }
    let attrs = ComputeAttrs {
        const_matrix: true,
        ..Default::default()
    };
    b.compute(name, "", ax, vec![], crate::ir::Body::Expr(now), attrs)
}

/// data [N,H,W,CI], kernel_pack [alpha,alpha,CO,CI] -> [N,OH,OW,CO]; 3x3, stride 1.
pub fn conv2d_winograd_nhwc(
    b: &mut DagBuilder,
    _era: Era,
    data: &Tensor,
    kernel_pack: &Tensor,
    padding: [i64; 4],
) -> Result<Tensor, BuildError> {
    rank(&data.shape, 4, "winograd data")?;
    rank(&kernel_pack.shape, 4, "winograd kernel_pack")?;
    let (n, h, w, ci) = (data.shape[0], data.shape[1], data.shape[2], data.shape[3]);
    let (alpha, alpha2, co, kci) = (
        kernel_pack.shape[0],
        kernel_pack.shape[1],
        kernel_pack.shape[2],
        kernel_pack.shape[3],
    );
    check(alpha == alpha2 && kci == ci, || {
        format!(
            "winograd kernel_pack {:?} does not fit data {:?}",
            kernel_pack.shape, data.shape
        )
    })?;
    let r = 3i64;
    let m = alpha - r + 1;
    let (a_mat, b_mat, _) = cook_toom(m as usize, r as usize)
        .ok_or_else(|| BuildError(format!("winograd tile size {m} is not supported")))?;
    let [pt, pl, pb, pr] = padding;
    let oh = h + pt + pb - r + 1;
    let ow = w + pl + pr - r + 1;
    check(oh > 0 && ow > 0, || "winograd: empty output".into())?;
    let (nh, nw) = ((oh + m - 1) / m, (ow + m - 1) / m);
    let p = n * nh * nw;
    // TOPI computes the extra padding from nW and the *height* padding for both dims
    let pad_extra = (nw - 1) * m + alpha - (oh + pt + pb);
    let data_pad = pad(
        b,
        data,
        &[0, pt, pl, 0],
        &[0, pb + pad_extra, pr + pad_extra, 0],
        Expr::f32(0.0),
        "data_pad",
        PadFlavor::Python,
    )?;
    let tile_axes = named_axes(&["eps", "nu", "p", "ci"], &[alpha, alpha, p, ci]);
    let input_tile = b.elementwise("input_tile", "", tile_axes, |v| {
        let (eps, nu, pv, civ) = (v[0].clone(), v[1].clone(), v[2].clone(), v[3].clone());
        data_pad.at(vec![
            Expr::floordiv(pv.clone(), nh * nw),
            Expr::floormod(Expr::floordiv(pv.clone(), nw), nh) * m + eps,
            Expr::floormod(pv, nw) * m + nu,
            civ,
        ])
    });
    let bt = const_matrix(b, &b_mat, "B");
    let simplify = |names: &[&str]| ComputeAttrs {
        simplify_const_tensor_indices: names.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let data_pack = b.reduce(
        "data_pack",
        "",
        named_axes(&["eps", "nu", "p", "ci"], &[alpha, alpha, p, ci]),
        vec![IterVar::new("r_a", alpha), IterVar::new("r_b", alpha)],
        Combiner::Sum,
        simplify(&["eps", "nu", "r_a", "r_b"]),
        |v, rv| {
            input_tile.at(vec![
                rv[0].clone(),
                rv[1].clone(),
                v[2].clone(),
                v[3].clone(),
            ]) * bt.at(vec![rv[0].clone(), v[0].clone()])
                * bt.at(vec![rv[1].clone(), v[1].clone()])
        },
    );
    let bgemm = b.reduce(
        "bgemm",
        "",
        named_axes(&["eps", "nu", "p", "co"], &[alpha, alpha, p, co]),
        vec![IterVar::new("ci", ci)],
        Combiner::Sum,
        ComputeAttrs {
            layout_free_placeholders: vec![kernel_pack.id],
            ..Default::default()
        },
        |v, rv| {
            data_pack.at(vec![
                v[0].clone(),
                v[1].clone(),
                v[2].clone(),
                rv[0].clone(),
            ]) * kernel_pack.at(vec![
                v[0].clone(),
                v[1].clone(),
                v[3].clone(),
                rv[0].clone(),
            ])
        },
    );
    let at = const_matrix(b, &a_mat, "A");
    let inverse = b.reduce(
        "inverse",
        "",
        named_axes(&["vh", "vw", "p", "co"], &[m, m, p, co]),
        vec![IterVar::new("r_a", alpha), IterVar::new("r_b", alpha)],
        Combiner::Sum,
        simplify(&["vh", "vw", "r_a", "r_b"]),
        |v, rv| {
            bgemm.at(vec![
                rv[0].clone(),
                rv[1].clone(),
                v[2].clone(),
                v[3].clone(),
            ]) * at.at(vec![rv[0].clone(), v[0].clone()])
                * at.at(vec![rv[1].clone(), v[1].clone()])
        },
    );
    Ok(b.elementwise(
        "conv2d_winograd",
        "",
        named_axes(&["n", "h", "w", "co"], &[n, oh, ow, co]),
        |v| {
            let (nv, hv, wv, cov) = (v[0].clone(), v[1].clone(), v[2].clone(), v[3].clone());
            inverse.at(vec![
                Expr::floormod(hv.clone(), m),
                Expr::floormod(wv.clone(), m),
                nv * nh * nw + Expr::floordiv(hv, m) * nw + Expr::floordiv(wv, m),
                cov,
            ])
        },
    ))
}

/// The offline weight transform relay applies before calling the pre-computed winograd
/// kernel: `kernel_pack[eps, nu, co, ci] = sum_{kh,kw} G[eps,kh] G[nu,kw] w[kh,kw,ci,co]`
/// for an HWIO 3x3 kernel. Used to check the winograd DAG against a direct convolution.
pub fn winograd_kernel_transform(
    kernel_hwio: &TensorData,
    tile_size: i64,
) -> Result<TensorData, BuildError> {
    rank(&kernel_hwio.shape, 4, "winograd raw kernel")?;
    let (kh, kw, ci, co) = (
        kernel_hwio.shape[0],
        kernel_hwio.shape[1],
        kernel_hwio.shape[2],
        kernel_hwio.shape[3],
    );
    check(kh == 3 && kw == 3, || {
        "winograd kernel transform needs a 3x3 kernel".into()
    })?;
    let (_, _, g) = cook_toom(tile_size as usize, 3)
        .ok_or_else(|| BuildError(format!("tile size {tile_size} unsupported")))?;
    let alpha = tile_size + 2;
    // G w G^T per (output, input) channel pair, with G in f64 once: this runs on every 3x3
    // conv's weights at model load, so it must not redo the exact arithmetic per element.
    let g: Vec<[f64; 3]> = g
        .iter()
        .map(|row| [row[0].to_f64(), row[1].to_f64(), row[2].to_f64()])
        .collect();
    let a = alpha as usize;
    let mut out = TensorData::zeros(&[alpha, alpha, co, ci]);
    let mut gw = vec![[0.0f64; 3]; a];
    for o in 0..co {
        for c in 0..ci {
            let w = |y: i64, x: i64| kernel_hwio.data[(((y * kw + x) * ci + c) * co + o) as usize];
            for (e, row) in gw.iter_mut().enumerate() {
                for (x, v) in row.iter_mut().enumerate() {
                    *v = (0..3).map(|y| g[e][y] * w(y as i64, x as i64)).sum();
                }
            }
            for (e, gw_e) in gw.iter().enumerate().take(a) {
                for (u, g_u) in g.iter().enumerate().take(a) {
                    let s: f64 = (0..3).map(|x| gw_e[x] * g_u[x]).sum();
                    out.data[(((e as i64 * alpha + u as i64) * co + o) * ci + c) as usize] = s;
                }
            }
        }
    }
    Ok(out)
}

/// Recognition: NHWC data with the pre-transformed kernel `[alpha, alpha, CO, CI]` of a 3x3
/// stride-1 conv (alpha 4..=8: tile sizes 2..=6), padded or not.
pub fn candidates(a: &[i64], b: &[i64], out: &[i64]) -> Vec<Anchor> {
    if !super::conv2d::is_nhwc(a, b, out)
        || b[0] != b[1]
        || !(4..=8).contains(&b[0])
        || b[3] != a[3]
        || b[2] != out[3]
    {
        return vec![];
    }
    let (in_hw, out_hw) = ([a[1], a[2]], [out[1], out[2]]);
    let pads: Vec<Option<(i64, i64)>> = (0..2)
        .map(|i| {
            solve_padding(in_hw[i], 3, 1, 1, out_hw[i])
                .or(fits_unpadded(in_hw[i], 3, 1, 1, out_hw[i]).then_some((0, 0)))
        })
        .collect();
    match (pads[0], pads[1]) {
        (Some(h), Some(w)) => vec![Anchor::WinogradNhwc {
            padding: [h.0, w.0, h.1, w.1],
        }],
        _ => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A^T [(G g) . (B^T d)] equals the direct 1-D correlation, for tile sizes 2 and 4.
    #[test]
    fn cook_toom_matrices_compute_a_correlation() {
        for m in [2usize, 4] {
            let (a, bm, g) = cook_toom(m, 3).unwrap();
            let n = m + 2;
            let d: Vec<Q> = (0..n)
                .map(|i| Q::new((i as i128 * 7 + 3) % 11 - 5, 1))
                .collect();
            let k = [Q::int(2), Q::int(-1), Q::new(4, 3)];
            let u: Vec<Q> = (0..n)
                .map(|e| (0..3).fold(Q::int(0), |s, t| s.add(g[e][t].mul(k[t]))))
                .collect();
            let v: Vec<Q> = (0..n)
                .map(|e| (0..n).fold(Q::int(0), |s, t| s.add(bm[t][e].mul(d[t]))))
                .collect();
            for o in 0..m {
                let y = (0..n).fold(Q::int(0), |s, e| s.add(a[e][o].mul(u[e].mul(v[e]))));
                let direct = (0..3).fold(Q::int(0), |s, t| s.add(d[o + t].mul(k[t])));
                assert_eq!(y, direct, "tile {m} output {o}");
            }
        }
    }
}
