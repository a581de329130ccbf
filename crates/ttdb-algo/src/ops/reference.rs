//! Hand-written direct loop implementations of a few ops, independent of the IR: they
//! cross-check the IR evaluator (and through it the op builders) on small random shapes.
//! Row-major f32 inputs, f64 accumulation and f64 outputs, so the comparison with the f64
//! evaluator is exact up to summation order.

/// conv2d NHWC, kernel HWIO; padding (top, left, bottom, right).
#[allow(clippy::too_many_arguments)]
pub fn conv2d_nhwc(
    data: &[f32],
    dshape: [usize; 4],
    kernel: &[f32],
    kshape: [usize; 4],
    stride: [usize; 2],
    padding: [usize; 4],
    dilation: [usize; 2],
) -> (Vec<f64>, [usize; 4]) {
    let [n, h, w, ci] = dshape;
    let [kh, kw, kci, co] = kshape;
    assert_eq!(ci, kci);
    let oh = (h + padding[0] + padding[2] - ((kh - 1) * dilation[0] + 1)) / stride[0] + 1;
    let ow = (w + padding[1] + padding[3] - ((kw - 1) * dilation[1] + 1)) / stride[1] + 1;
    let mut out = vec![0.0; n * oh * ow * co];
    for b in 0..n {
        for y in 0..oh {
            for x in 0..ow {
                for f in 0..co {
                    let mut acc = 0.0f64;
                    for ry in 0..kh {
                        for rx in 0..kw {
                            let iy =
                                (y * stride[0] + ry * dilation[0]) as isize - padding[0] as isize;
                            let ix =
                                (x * stride[1] + rx * dilation[1]) as isize - padding[1] as isize;
                            if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                continue;
                            }
                            for c in 0..ci {
                                let d =
                                    data[((b * h + iy as usize) * w + ix as usize) * ci + c] as f64;
                                let k = kernel[((ry * kw + rx) * ci + c) * co + f] as f64;
                                acc += d * k;
                            }
                        }
                    }
                    out[((b * oh + y) * ow + x) * co + f] = acc;
                }
            }
        }
    }
    (out, [n, oh, ow, co])
}

/// conv2d_NCHWc: data [N, C/ib, H, W, ib], kernel [O/ob, C/ib, KH, KW, ib, ob] (groups 1).
pub fn conv2d_nchwc(
    data: &[f32],
    dshape: [usize; 5],
    kernel: &[f32],
    kshape: [usize; 6],
    stride: [usize; 2],
    padding: [usize; 4],
) -> (Vec<f64>, [usize; 5]) {
    let [n, icc, h, w, ib] = dshape;
    let [occ, kicc, kh, kw, kib, ob] = kshape;
    assert_eq!((icc, ib), (kicc, kib));
    let oh = (h + padding[0] + padding[2] - kh) / stride[0] + 1;
    let ow = (w + padding[1] + padding[3] - kw) / stride[1] + 1;
    let mut out = vec![0.0; n * occ * oh * ow * ob];
    for b in 0..n {
        for oc in 0..occ {
            for y in 0..oh {
                for x in 0..ow {
                    for obi in 0..ob {
                        let mut acc = 0.0f64;
                        for c in 0..icc * ib {
                            let (cc, cb) = (c / ib, c % ib);
                            for ry in 0..kh {
                                for rx in 0..kw {
                                    let iy = (y * stride[0] + ry) as isize - padding[0] as isize;
                                    let ix = (x * stride[1] + rx) as isize - padding[1] as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                        continue;
                                    }
                                    let d = data[(((b * icc + cc) * h + iy as usize) * w
                                        + ix as usize)
                                        * ib
                                        + cb] as f64;
                                    let k = kernel[((((oc * kicc + cc) * kh + ry) * kw + rx) * kib
                                        + cb)
                                        * ob
                                        + obi] as f64;
                                    acc += d * k;
                                }
                            }
                        }
                        out[(((b * occ + oc) * oh + y) * ow + x) * ob + obi] = acc;
                    }
                }
            }
        }
    }
    (out, [n, occ, oh, ow, ob])
}

/// dense: data [M, K] x weight [N, K]^T -> [M, N].
pub fn dense(data: &[f32], m: usize, k: usize, weight: &[f32], n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k)
                .map(|t| data[i * k + t] as f64 * weight[j * k + t] as f64)
                .sum();
        }
    }
    out
}

/// softmax over the last axis of a [rows, cols] matrix.
pub fn softmax_last(x: &[f32], rows: usize, cols: usize) -> Vec<f64> {
    let mut out = vec![0.0; rows * cols];
    for r in 0..rows {
        let row = &x[r * cols..(r + 1) * cols];
        let m = row.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v as f64));
        let e: Vec<f64> = row.iter().map(|&v| (v as f64 - m).exp()).collect();
        let s: f64 = e.iter().sum();
        for c in 0..cols {
            out[r * cols + c] = e[c] / s;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::eval::{evaluate, random_inputs, TensorData};
    use crate::ops::{Anchor, EpilogueOp, Era, Window2d, WorkloadSpec};

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len());
        let worst = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-9, "max abs diff {worst}");
    }

    fn f32s(t: &TensorData) -> Vec<f32> {
        t.to_f32()
    }

    #[test]
    fn conv2d_nhwc_dag_matches_direct_loops() {
        for (stride, pad, dil) in [(1, 1, 1), (2, 1, 1), (2, 0, 1), (1, 2, 2)] {
            let w = Window2d::new(stride, [pad; 4], dil);
            let spec = WorkloadSpec::new(Anchor::Conv2dNhwc(w), vec![]);
            let dag = spec
                .build(Era::V010, &[vec![2, 7, 6, 3], vec![3, 3, 3, 4]])
                .unwrap();
            let ins = random_inputs(&dag, 7);
            let got = evaluate(&dag, &ins).unwrap();
            let (want, shape) = conv2d_nhwc(
                &f32s(&ins[0]),
                [2, 7, 6, 3],
                &f32s(&ins[1]),
                [3, 3, 3, 4],
                [stride as usize; 2],
                [pad as usize; 4],
                [dil as usize; 2],
            );
            assert_eq!(
                got[0].shape,
                shape.iter().map(|&d| d as i64).collect::<Vec<_>>()
            );
            close(&got[0].data, &want);
        }
    }

    #[test]
    fn conv2d_nchwc_dag_matches_direct_loops() {
        for (stride, pad) in [(1, 0), (1, 1), (2, 1)] {
            let spec =
                WorkloadSpec::new(Anchor::Conv2dNchwc(Window2d::simple(stride, pad)), vec![]);
            let dag = spec
                .build(Era::V015, &[vec![1, 2, 6, 5, 4], vec![3, 2, 3, 3, 4, 2]])
                .unwrap();
            assert_eq!(dag.stages.iter().any(|s| s.name == "data_pad"), pad > 0);
            let ins = random_inputs(&dag, 11);
            let got = evaluate(&dag, &ins).unwrap();
            let (want, _) = conv2d_nchwc(
                &f32s(&ins[0]),
                [1, 2, 6, 5, 4],
                &f32s(&ins[1]),
                [3, 2, 3, 3, 4, 2],
                [stride as usize; 2],
                [pad as usize; 4],
            );
            close(&got[0].data, &want);
        }
    }

    #[test]
    fn dense_bias_relu_dag_matches_direct_loops() {
        let spec = WorkloadSpec::new(
            Anchor::Dense,
            vec![
                EpilogueOp::Add {
                    operand_first: false,
                },
                EpilogueOp::Relu,
            ],
        );
        for era in [Era::V07, Era::V015] {
            let dag = spec
                .build(era, &[vec![3, 10], vec![5, 10], vec![1, 5]])
                .unwrap();
            let ins = random_inputs(&dag, 3);
            let got = evaluate(&dag, &ins).unwrap();
            let mm = dense(&f32s(&ins[0]), 3, 10, &f32s(&ins[1]), 5);
            let want: Vec<f64> = mm
                .iter()
                .enumerate()
                .map(|(i, v)| (v + ins[2].data[i % 5]).max(0.0))
                .collect();
            close(&got[0].data, &want);
        }
    }

    #[test]
    fn softmax_dag_matches_direct_loops() {
        let spec = WorkloadSpec::new(Anchor::Softmax { axis: 1 }, vec![]);
        let dag = spec.build(Era::V08, &[vec![4, 9]]).unwrap();
        let ins = random_inputs(&dag, 5);
        let got = evaluate(&dag, &ins).unwrap();
        close(&got[0].data, &softmax_last(&f32s(&ins[0]), 4, 9));
    }
}
