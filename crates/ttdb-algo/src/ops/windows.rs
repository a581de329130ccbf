//! Solving window attributes (stride, padding, dilation, kernel) from input and output
//! sizes, for the families' recognition candidates. A workload key only carries shapes; strides and dilations show in PrintDAG text
//! (`(yy*2)`), padding only as "padded or not" (the pad body is an opaque if_then_else), so
//! candidates are enumerated here and the md5 decides. Padding amounts that the text does
//! not pin are chosen by a fixed rule: the smallest symmetric padding that gives the output
//! size, else the smallest total split as (total/2, total - total/2).
use super::util::{window_out, Window2d};

/// A kernel size and its (before, after) padding in one dimension.
type DimChoice = (i64, (i64, i64));

/// Largest stride tried.
const MAX_STRIDE: i64 = 8;

/// Padding (before, after) of one dimension, with at least one non-zero side.
pub fn solve_padding(
    input: i64,
    kernel: i64,
    stride: i64,
    dilation: i64,
    out: i64,
) -> Option<(i64, i64)> {
    let dk = (kernel - 1) * dilation + 1;
    (1..=dk)
        .map(|p| (p, p))
        .chain((1..=2 * dk).map(|t| (t / 2, t - t / 2)))
        .find(|&(b, a)| window_out(input, kernel, stride, dilation, b, a) == out)
}

/// True when the unpadded window maps `input` to exactly `out`.
pub fn fits_unpadded(input: i64, kernel: i64, stride: i64, dilation: i64, out: i64) -> bool {
    let dk = (kernel - 1) * dilation + 1;
    input >= dk && window_out(input, kernel, stride, dilation, 0, 0) == out
}

/// Convolution windows mapping `in_hw` to `out_hw` with kernel `k_hw`: per dilation (1
/// first) and stride, the unpadded window if it fits, then the padded one.
pub fn conv_windows(in_hw: [i64; 2], k_hw: [i64; 2], out_hw: [i64; 2]) -> Vec<Window2d> {
    let mut out = Vec::new();
    for dilation in [1, 2] {
        if dilation > 1 && k_hw == [1, 1] {
            continue; // dilation is invisible and meaningless for 1x1 kernels
        }
        for stride in 1..=MAX_STRIDE {
            if stride > 1 && stride > in_hw[0].max(in_hw[1]) {
                break;
            }
            let unpadded =
                (0..2).all(|i| fits_unpadded(in_hw[i], k_hw[i], stride, dilation, out_hw[i]));
            if unpadded {
                out.push(Window2d {
                    stride: [stride, stride],
                    padding: [0; 4],
                    dilation: [dilation, dilation],
                });
            }
            if let Some(w) = padded_window(in_hw, k_hw, out_hw, stride, dilation) {
                out.push(w);
            }
        }
    }
    out
}

/// The padded window for one stride/dilation: each dim padded if it can be, else
/// unpadded if that fits; None if neither dim is padded or a dim cannot be mapped.
fn padded_window(
    in_hw: [i64; 2],
    k_hw: [i64; 2],
    out_hw: [i64; 2],
    stride: i64,
    dilation: i64,
) -> Option<Window2d> {
    let mut pads = [(0, 0); 2];
    let mut any = false;
    for i in 0..2 {
        if let Some(p) = solve_padding(in_hw[i], k_hw[i], stride, dilation, out_hw[i]) {
            pads[i] = p;
            any = true;
        } else if !fits_unpadded(in_hw[i], k_hw[i], stride, dilation, out_hw[i]) {
            return None;
        }
    }
    any.then_some(Window2d {
        stride: [stride, stride],
        padding: [pads[0].0, pads[1].0, pads[0].1, pads[1].1],
        dilation: [dilation, dilation],
    })
}

/// Pool windows. Max-pool kernels never show in the text, so for each stride and
/// padded/unpadded choice one kernel is picked per dimension: the largest k <= 3 that maps
/// the size (resnet's 3x3/s2 pool wins over googlenet's ceil-mode 3x3/s2 ambiguity: one key
/// can stand for both). Average pools show their kernel; `all_kernels` enumerates more.
/// Returns (kernel, stride, padding (t, l, b, r)).
pub fn pool_windows(
    in_hw: [i64; 2],
    out_hw: [i64; 2],
    all_kernels: bool,
) -> Vec<([i64; 2], i64, [i64; 4])> {
    let kernels: Vec<i64> = if all_kernels {
        vec![3, 2, 1, 4, 5, 6, 7]
    } else {
        vec![3, 2, 1]
    };
    let mut out = Vec::new();
    for stride in 1..=MAX_STRIDE.min(in_hw[0].max(in_hw[1]).max(1)) {
        for padded in [false, true] {
            // per dim: the kernels that work, in preference order
            let per_dim: Vec<Vec<DimChoice>> = (0..2)
                .map(|i| {
                    kernels
                        .iter()
                        .filter_map(|&k| {
                            if padded {
                                solve_padding(in_hw[i], k, stride, 1, out_hw[i]).map(|p| (k, p))
                            } else {
                                fits_unpadded(in_hw[i], k, stride, 1, out_hw[i])
                                    .then_some((k, (0, 0)))
                            }
                        })
                        .collect()
                })
                .collect();
            let choices: Vec<(DimChoice, DimChoice)> = if all_kernels {
                // square kernels, every size
                per_dim[0]
                    .iter()
                    .filter_map(|&h| per_dim[1].iter().find(|w| w.0 == h.0).map(|&w| (h, w)))
                    .collect()
            } else {
                match (per_dim[0].first(), per_dim[1].first()) {
                    (Some(&h), Some(&w)) => vec![(h, w)],
                    _ => vec![],
                }
            };
            for ((kh, (pt, pb)), (kw, (pl, pr))) in choices {
                out.push(([kh, kw], stride, [pt, pl, pb, pr]));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resnet_stem_and_downsampling_windows() {
        // 7x7/s2 224 -> 112 needs pad 3
        let w = conv_windows([224, 224], [7, 7], [112, 112]);
        assert_eq!(w[0], Window2d::simple(2, 3));
        // 1x1/s2 14 -> 7 unpadded
        let w = conv_windows([14, 14], [1, 1], [7, 7]);
        assert_eq!(w[0], Window2d::simple(2, 0));
        // 3x3/s1 56 -> 56 pad 1 (no unpadded stride-1 solution)
        let w = conv_windows([56, 56], [3, 3], [56, 56]);
        assert_eq!(w[0], Window2d::simple(1, 1));
        // alexnet 11x11/s4 224 -> 55 pad 2
        let w = conv_windows([224, 224], [11, 11], [55, 55]);
        assert_eq!(w[0], Window2d::simple(4, 2));
    }

    #[test]
    fn pool_windows_prefer_3x3() {
        let w = pool_windows([112, 112], [56, 56], false);
        assert!(w.contains(&([3, 3], 2, [1, 1, 1, 1])), "{w:?}");
        let w = pool_windows([13, 13], [6, 6], false);
        assert_eq!(w[0], ([3, 3], 2, [0; 4]));
        // avg pool 2x2/s2 14 -> 7 unpadded
        let w = pool_windows([14, 14], [7, 7], true);
        assert!(w.contains(&([2, 2], 2, [0; 4])), "{w:?}");
    }
}
