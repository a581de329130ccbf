//! Per-op-family checks on small shapes: each builder's DAG, run by the reference
//! evaluator, equals a direct loop written here from the op's definition; plus era naming
//! and FLOP counts.
use ttdb::ir::eval::{evaluate, evaluate_points, random_inputs, TensorData};
use ttdb::ir::{print_dag, DType, Dag};
use ttdb::ops::registered::{conv2d_layer, matmul_add, sparse_dense};
use ttdb::ops::winograd::winograd_kernel_transform;
use ttdb::ops::{Anchor, EpilogueOp, Era, PoolAttrs, PoolKind, PoolLayout, Window2d, WorkloadSpec};

fn close(got: &TensorData, want: &[f64]) {
    assert_eq!(got.data.len(), want.len(), "length");
    let worst = got
        .data
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(worst < 1e-9, "max abs diff {worst}");
}

fn run(
    spec: &WorkloadSpec,
    era: Era,
    canonical: &[Vec<i64>],
    seed: u64,
) -> (Dag, Vec<TensorData>, TensorData) {
    let dag = spec.build(era, canonical).unwrap();
    let ins = random_inputs(&dag, seed);
    let out = evaluate(&dag, &ins).unwrap().remove(0);
    (dag, ins, out)
}

/// Row-major index helper.
fn idx(shape: &[i64], at: &[i64]) -> usize {
    at.iter().zip(shape).fold(0i64, |acc, (&i, &d)| acc * d + i) as usize
}

#[test]
fn depthwise_nhwc_with_multiplier() {
    let w = Window2d::simple(2, 1);
    let spec = WorkloadSpec::new(Anchor::DepthwiseNhwc(w), vec![]);
    let (d, k) = (vec![1, 7, 6, 3], vec![3, 3, 3, 2]);
    let (_, ins, out) = run(&spec, Era::V010, &[d.clone(), k.clone()], 1);
    let (oh, ow) = (4, 3);
    assert_eq!(out.shape, vec![1, oh, ow, 6]);
    let mut want = vec![0.0; out.len()];
    for y in 0..oh {
        for x in 0..ow {
            for c in 0..6 {
                let (ch, m) = (c / 2, c % 2);
                for ry in 0..3 {
                    for rx in 0..3 {
                        let (iy, ix) = (y * 2 + ry - 1, x * 2 + rx - 1);
                        if iy < 0 || ix < 0 || iy >= 7 || ix >= 6 {
                            continue;
                        }
                        want[idx(&out.shape, &[0, y, x, c])] += ins[0].data
                            [idx(&d, &[0, iy, ix, ch])]
                            * ins[1].data[idx(&k, &[ry, rx, ch, m])];
                    }
                }
            }
        }
    }
    close(&out, &want);
}

#[test]
fn depthwise_nchwc_equals_per_channel_conv() {
    let spec = WorkloadSpec::new(Anchor::DepthwiseNchwc(Window2d::simple(1, 1)), vec![]);
    let (d, k) = (vec![1, 2, 5, 5, 4], vec![4, 1, 3, 3, 1, 2]);
    let (dag, ins, out) = run(&spec, Era::V015, &[d.clone(), k.clone()], 2);
    assert!(dag.stages.iter().any(|s| s.name == "PaddedInput"));
    let mut want = vec![0.0; out.len()];
    for oco in 0..4 {
        for oci in 0..2 {
            let c = oco * 2 + oci; // channel multiplier 1: output channel = input channel
            for y in 0..5 {
                for x in 0..5 {
                    for ry in 0..3 {
                        for rx in 0..3 {
                            let (iy, ix) = (y + ry - 1, x + rx - 1);
                            if iy < 0 || ix < 0 || iy >= 5 || ix >= 5 {
                                continue;
                            }
                            want[idx(&out.shape, &[0, oco, y, x, oci])] += ins[0].data
                                [idx(&d, &[0, c / 4, iy, ix, c % 4])]
                                * ins[1].data[idx(&k, &[oco, 0, ry, rx, 0, oci])];
                        }
                    }
                }
            }
        }
    }
    close(&out, &want);
}

#[test]
fn grouped_and_plain_conv2d_nchw() {
    for (groups, era) in [(1, Era::V07), (1, Era::V015), (2, Era::V010)] {
        let spec = WorkloadSpec::new(
            Anchor::Conv2dNchw {
                window: Window2d::simple(1, 1),
                groups,
            },
            vec![],
        );
        let (d, k) = (vec![1, 4, 5, 4], vec![6, 4 / groups, 3, 3]);
        let (dag, ins, out) = run(&spec, era, &[d.clone(), k.clone()], 3);
        let name = &dag.stage(dag.output()).name;
        let want_name = match (era, groups) {
            (Era::V07, _) => "compute",
            (_, 1) => "conv2d_nchw",
            _ => "group_conv2d_nchw",
        };
        assert_eq!(name, want_name);
        let (opg, ipg) = (6 / groups, 4 / groups);
        let mut want = vec![0.0; out.len()];
        for f in 0..6 {
            let g = f / opg;
            for y in 0..5 {
                for x in 0..4 {
                    for rc in 0..ipg {
                        for ry in 0..3 {
                            for rx in 0..3 {
                                let (iy, ix) = (y + ry - 1, x + rx - 1);
                                if iy < 0 || ix < 0 || iy >= 5 || ix >= 4 {
                                    continue;
                                }
                                want[idx(&out.shape, &[0, f, y, x])] += ins[0].data
                                    [idx(&d, &[0, g * ipg + rc, iy, ix])]
                                    * ins[1].data[idx(&k, &[f, rc, ry, rx])];
                            }
                        }
                    }
                }
            }
        }
        close(&out, &want);
    }
}

/// The winograd DAG with a transformed kernel computes the same convolution as the
/// direct NHWC conv, also when the output is not a multiple of the tile.
#[test]
fn winograd_equals_direct_convolution() {
    for (tile, hw) in [(4i64, 7i64), (2, 5), (4, 8)] {
        let alpha = tile + 2;
        let direct = WorkloadSpec::new(Anchor::Conv2dNhwc(Window2d::simple(1, 1)), vec![]);
        let ddag = direct
            .build(Era::V010, &[vec![1, hw, hw, 3], vec![3, 3, 3, 4]])
            .unwrap();
        let ins = random_inputs(&ddag, 9);
        let want = evaluate(&ddag, &ins).unwrap().remove(0);
        let packed = winograd_kernel_transform(&ins[1], tile).unwrap();
        let wino = WorkloadSpec::new(Anchor::WinogradNhwc { padding: [1; 4] }, vec![]);
        let wdag = wino
            .build(Era::V010, &[vec![1, hw, hw, 3], vec![alpha, alpha, 4, 3]])
            .unwrap();
        let names: Vec<&str> = wdag.stages.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "p0",
                "data_pad",
                "input_tile",
                "B",
                "data_pack",
                "p1",
                "bgemm",
                "A",
                "inverse",
                "conv2d_winograd"
            ]
        );
        let got = evaluate(&wdag, &[ins[0].clone(), packed])
            .unwrap()
            .remove(0);
        assert_eq!(got.shape, want.shape);
        let worst = got.max_abs_diff(&want);
        assert!(worst < 1e-9, "tile {tile}, {hw}x{hw}: max abs diff {worst}");
    }
}

fn direct_pool(data: &TensorData, a: &PoolAttrs, out_shape: &[i64]) -> Vec<f64> {
    let (hx, wx) = a.layout.hw_axes();
    let (h, w) = (data.shape[hx], data.shape[wx]);
    let mut out = vec![0.0; out_shape.iter().product::<i64>() as usize];
    let n = out.len();
    for (flat, slot) in out.iter_mut().enumerate().take(n) {
        let mut at = vec![0i64; out_shape.len()];
        let mut rem = flat as i64;
        for d in (0..out_shape.len()).rev() {
            at[d] = rem % out_shape[d];
            rem /= out_shape[d];
        }
        let (mut best, mut sum, mut valid) = (f64::MIN, 0.0, 0i64);
        for ry in 0..a.kernel[0] {
            for rx in 0..a.kernel[1] {
                let iy = at[hx] * a.stride[0] + ry - a.padding[0];
                let ix = at[wx] * a.stride[1] + rx - a.padding[1];
                let mut src = at.clone();
                src[hx] = iy;
                src[wx] = ix;
                if iy >= 0 && ix >= 0 && iy < h && ix < w {
                    let v = data.data[idx(&data.shape, &src)];
                    best = best.max(v);
                    sum += v;
                    valid += 1;
                } else {
                    best = best.max(f32::MIN as f64);
                }
            }
        }
        *slot = match a.kind {
            PoolKind::Max => best,
            // symmetric padding, no ceil mode: every era divides by the full window
            PoolKind::Avg {
                count_include_pad: true,
            } => sum / (a.kernel[0] * a.kernel[1]) as f64,
            PoolKind::Avg {
                count_include_pad: false,
            } => sum / valid.max(1) as f64,
        };
    }
    out
}

#[test]
fn pools_in_every_era_and_layout() {
    let layouts = [
        (PoolLayout::Nhwc, vec![1, 7, 7, 3]),
        (PoolLayout::Nchw, vec![1, 3, 7, 7]),
        (PoolLayout::Nchwc, vec![1, 2, 7, 7, 4]),
    ];
    let kinds = [
        PoolKind::Max,
        PoolKind::Avg {
            count_include_pad: true,
        },
        PoolKind::Avg {
            count_include_pad: false,
        },
    ];
    for (layout, shape) in layouts {
        for kind in kinds {
            for (kernel, stride, pad) in [(3, 2, 1), (2, 2, 0), (3, 1, 1)] {
                let a = PoolAttrs {
                    kind,
                    kernel: [kernel; 2],
                    stride: [stride; 2],
                    dilation: [1, 1],
                    padding: [pad; 4],
                    ceil_mode: false,
                    layout,
                };
                for era in Era::ALL {
                    let spec = WorkloadSpec::new(Anchor::Pool(a), vec![]);
                    let (dag, ins, out) = run(&spec, era, std::slice::from_ref(&shape), 4);
                    assert_eq!(dag.stages.iter().any(|s| s.name == "pad_temp"), pad > 0);
                    let want = direct_pool(&ins[0], &a, &out.shape);
                    close(&out, &want);
                }
            }
        }
    }
}

#[test]
fn pool_names_follow_the_era() {
    let a = PoolAttrs {
        kind: PoolKind::Max,
        kernel: [3, 3],
        stride: [2, 2],
        dilation: [1, 1],
        padding: [1; 4],
        ceil_mode: false,
        layout: PoolLayout::Nhwc,
    };
    let spec = WorkloadSpec::new(Anchor::Pool(a), vec![]);
    let text = |era| print_dag(&spec.build(era, &[vec![1, 8, 8, 2]]).unwrap());
    assert!(text(Era::V07).contains(
        "tensor(ax0, ax1, ax2, ax3) max= pad_temp[ax0, ((ax1*2) + dh), ((ax2*2) + dw), ax3]"
    ));
    assert!(text(Era::V010Early).starts_with(
        "p0 = PLACEHOLDER \npad_temp(ax0, ax1, ax2, ax3) = Op(tir.if_then_else)\ntensor("
    ));
    assert!(text(Era::V015).contains(
        "pool_max(ax0, ax1, ax2, ax3) max= pad_temp[ax0, ((ax1*2) + rv0), ((ax2*2) + rv1), ax3]"
    ));
}

#[test]
fn adaptive_avg_pool_windows() {
    for (in_hw, out_hw) in [(7, 1), (14, 4), (6, 6), (5, 3)] {
        let spec = WorkloadSpec::new(
            Anchor::AdaptivePool {
                kind: PoolKind::Avg {
                    count_include_pad: true,
                },
                layout: PoolLayout::Nchw,
                out_hw: [out_hw, out_hw],
            },
            vec![],
        );
        let (dag, ins, out) = run(&spec, Era::V010, &[vec![1, 2, in_hw, in_hw]], 5);
        assert_eq!(
            dag.flop_count(),
            None,
            "non-constant windows: TVM's flop_ct is -1"
        );
        let mut want = vec![0.0; out.len()];
        for c in 0..2 {
            for oy in 0..out_hw {
                for ox in 0..out_hw {
                    let (y0, y1) = (
                        oy * in_hw / out_hw,
                        ((oy + 1) * in_hw + out_hw - 1) / out_hw,
                    );
                    let (x0, x1) = (
                        ox * in_hw / out_hw,
                        ((ox + 1) * in_hw + out_hw - 1) / out_hw,
                    );
                    let mut s = 0.0;
                    for y in y0..y1 {
                        for x in x0..x1 {
                            s += ins[0].data[idx(&[1, 2, in_hw, in_hw], &[0, c, y, x])];
                        }
                    }
                    want[idx(&out.shape, &[0, c, oy, ox])] = s / ((y1 - y0) * (x1 - x0)) as f64;
                }
            }
        }
        close(&out, &want);
    }
}

#[test]
fn mean_and_variance() {
    let spec = WorkloadSpec::new(
        Anchor::Mean {
            axes: vec![2],
            keepdims: true,
        },
        vec![],
    );
    let (dag, ins, out) = run(&spec, Era::V08, &[vec![1, 3, 8]], 6);
    assert_eq!(dag.stages[1].name, "placeholder_red");
    let means: Vec<f64> = (0..3)
        .map(|r| ins[0].data[r * 8..(r + 1) * 8].iter().sum::<f64>() / 8.0)
        .collect();
    close(&out, &means);
    for unbiased in [false, true] {
        let spec = WorkloadSpec::new(
            Anchor::Variance {
                axes: vec![2],
                keepdims: true,
                unbiased,
            },
            vec![],
        );
        let dag = spec
            .build(Era::V08, &[vec![1, 3, 8], vec![1, 3, 1]])
            .unwrap();
        let x = random_inputs(&dag, 7).remove(0);
        let mean = TensorData::new(&[1, 3, 1], means.clone());
        let out = evaluate(&dag, &[x.clone(), mean]).unwrap().remove(0);
        let want: Vec<f64> = (0..3)
            .map(|r| {
                x.data[r * 8..(r + 1) * 8]
                    .iter()
                    .map(|v| (v - means[r]).powi(2))
                    .sum::<f64>()
                    / (8 - unbiased as i64) as f64
            })
            .collect();
        close(&out, &want);
    }
}

#[test]
fn batch_matmul_broadcasts_a_batch_of_one() {
    let spec = WorkloadSpec::new(Anchor::BatchMatmul { transpose_b: true }, vec![]);
    let (a, b) = (vec![3, 2, 5], vec![1, 4, 5]);
    let (dag, ins, out) = run(&spec, Era::V08, &[a.clone(), b.clone()], 8);
    // TOPI indexes a batch dim of 1 with 0
    assert!(
        print_dag(&dag).contains("placeholder[b, i, k]*placeholder[0, j, k]"),
        "{}",
        print_dag(&dag)
    );
    let mut want = vec![0.0; out.len()];
    for bb in 0..3 {
        for i in 0..2 {
            for j in 0..4 {
                want[idx(&out.shape, &[bb, i, j])] = (0..5)
                    .map(|k| ins[0].data[idx(&a, &[bb, i, k])] * ins[1].data[idx(&b, &[0, j, k])])
                    .sum();
            }
        }
    }
    close(&out, &want);
}

#[test]
fn dense_names_per_era() {
    let spec = WorkloadSpec::new(Anchor::Dense, vec![EpilogueOp::ExpandAdd, EpilogueOp::Tanh]);
    let text = |era| print_dag(&spec.build(era, &[vec![1, 4], vec![3, 4], vec![3]]).unwrap());
    assert!(text(Era::V07).contains("T_dense(i, j) += (placeholder[i, k]*placeholder[j, k])"));
    assert!(text(Era::V08).contains("T_matmul_NT(i, j) += (placeholder[i, k]*placeholder[j, k])"));
    assert!(text(Era::V015).contains("T_matmul_NT(i0, i1) += (p0[i0, k]*p1[i1, k])"));
    assert!(text(Era::V08).ends_with("T_expand_dims(ax0, ax1) = placeholder[ax1]\nT_add(ax0, ax1) = (T_matmul_NT[ax0, ax1] + T_expand_dims[ax0, ax1])\nT_tanh(ax0, ax1) = Op(tir.tanh)\n"));
}

#[test]
fn flop_counts_follow_tvm() {
    // conv 3x3 pad 1 + bias + relu: the pad stage (if_then_else on int conditions) is free
    let spec = WorkloadSpec::new(
        Anchor::Conv2dNhwc(Window2d::simple(1, 1)),
        vec![
            EpilogueOp::Add {
                operand_first: false,
            },
            EpilogueOp::Relu,
        ],
    );
    let dag = spec
        .build(
            Era::V010,
            &[vec![1, 8, 8, 4], vec![3, 3, 4, 16], vec![1, 1, 1, 16]],
        )
        .unwrap();
    let out_elems = (8 * 8 * 16) as f64;
    assert_eq!(
        dag.flop_count(),
        Some(out_elems * 3.0 * 3.0 * 4.0 * 2.0 + out_elems * 2.0)
    );
    // sparse_dense carries a FLOP attribute for its data-dependent block stage
    let dag = sparse_dense(4, 8, 6, &[5, 2, 3], &[5], &[5], DType::F32).unwrap();
    assert_eq!(
        dag.flop_count(),
        Some((2 * 4 * 4 * 2 * 6) as f64 + (4 * 6) as f64 + (4 * 8 * 2) as f64)
    );
}

#[test]
fn registered_matmul_add_and_conv2d_layer() {
    let dag = matmul_add(3, 5, 4, DType::F32).unwrap();
    let ins = random_inputs(&dag, 10);
    let out = evaluate(&dag, &ins).unwrap().remove(0);
    let mut want = vec![0.0; 12];
    for i in 0..3 {
        for j in 0..4 {
            want[i * 4 + j] = (0..5)
                .map(|k| ins[0].data[i * 5 + k] * ins[1].data[k * 4 + j])
                .sum::<f64>()
                + ins[2].data[i * 4 + j];
        }
    }
    close(&out, &want);
    let dag = conv2d_layer(Era::V07, 1, 5, 5, 3, 2, 3, 3, [1, 1], [1, 1]).unwrap();
    let names: Vec<&str> = dag.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["data", "pad_temp", "kernel", "compute", "bias", "T_add", "compute"]
    );
    let ins = random_inputs(&dag, 11);
    let out = evaluate(&dag, &ins).unwrap().remove(0);
    assert!(out.data.iter().all(|&v| v >= 0.0));
}

/// BSR sparse_dense with a valid block structure equals the dense product.
#[test]
fn sparse_dense_bsr_equals_dense_product() {
    let (m, n, k, bs_r, bs_c) = (3i64, 4i64, 6i64, 2i64, 3i64);
    // block rows: row 0 has blocks at block-cols 0 and 1, row 1 at block-col 1
    let indptr = [0.0, 2.0, 3.0];
    let indices = [0.0, 1.0, 1.0];
    let nnz = 3;
    let dag = sparse_dense(m, n, k, &[nnz, bs_r, bs_c], &[nnz], &[3], DType::F32).unwrap();
    let order: Vec<Vec<i64>> = dag.placeholder_shapes();
    assert_eq!(
        order,
        vec![
            vec![3],
            vec![nnz, bs_r, bs_c],
            vec![nnz],
            vec![m, k],
            vec![m, n]
        ]
    );
    let rnd = random_inputs(&dag, 12);
    let ins = vec![
        TensorData::new(&[3], indptr.to_vec()),
        rnd[1].clone(),
        TensorData::new(&[3], indices.to_vec()),
        rnd[3].clone(),
        rnd[4].clone(),
    ];
    let out = evaluate(&dag, &ins).unwrap().remove(0);
    // dense W [n, k]
    let mut w = vec![0.0; (n * k) as usize];
    for br in 0..2usize {
        for (e, &bc) in indices
            .iter()
            .enumerate()
            .take(indptr[br + 1] as usize)
            .skip(indptr[br] as usize)
        {
            let bc = bc as i64;
            for r in 0..bs_r {
                for c in 0..bs_c {
                    w[((br as i64 * bs_r + r) * k + bc * bs_c + c) as usize] =
                        ins[1].data[idx(&[nnz, bs_r, bs_c], &[e as i64, r, c])];
                }
            }
        }
    }
    let mut want = vec![0.0; (m * n) as usize];
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k)
                .map(|t| ins[3].data[(i * k + t) as usize].max(0.0) * w[(j * k + t) as usize])
                .sum();
            want[(i * n + j) as usize] = (s + ins[4].data[(i * n + j) as usize]).max(0.0);
        }
    }
    close(&out, &want);
}

/// Grouped conv2d_NCHWc (v0.11+) on packed tensors equals grouped conv2d NCHW on the
/// unpacked ones.
#[test]
fn grouped_conv2d_nchwc_equals_grouped_nchw() {
    let (groups, c, o, ib, ob) = (2i64, 4i64, 8i64, 2i64, 2i64);
    let nchw = WorkloadSpec::new(
        Anchor::Conv2dNchw {
            window: Window2d::simple(1, 1),
            groups,
        },
        vec![],
    );
    let ndag = nchw
        .build(Era::V015, &[vec![1, c, 5, 5], vec![o, c / groups, 3, 3]])
        .unwrap();
    let ins = random_inputs(&ndag, 13);
    let want = evaluate(&ndag, &ins).unwrap().remove(0);
    // pack data [1,C,H,W] -> [1,C/ib,H,W,ib]; kernel [O,C/g,KH,KW] -> [O/ob,C/g/ib,KH,KW,ib,ob]
    let dshape = [1, c / ib, 5, 5, ib];
    let mut data = vec![0.0; ins[0].len()];
    for ch in 0..c {
        for y in 0..5 {
            for x in 0..5 {
                data[idx(&dshape, &[0, ch / ib, y, x, ch % ib])] =
                    ins[0].data[idx(&[1, c, 5, 5], &[0, ch, y, x])];
            }
        }
    }
    let kshape = [o / ob, c / groups / ib, 3, 3, ib, ob];
    let mut kernel = vec![0.0; ins[1].len()];
    for f in 0..o {
        for ch in 0..c / groups {
            for ry in 0..3 {
                for rx in 0..3 {
                    kernel[idx(&kshape, &[f / ob, ch / ib, ry, rx, ch % ib, f % ob])] =
                        ins[1].data[idx(&[o, c / groups, 3, 3], &[f, ch, ry, rx])];
                }
            }
        }
    }
    let nchwc = WorkloadSpec::new(Anchor::Conv2dNchwc(Window2d::simple(1, 1)), vec![]);
    let cdag = nchwc
        .build(Era::V015, &[dshape.to_vec(), kshape.to_vec()])
        .unwrap();
    assert!(print_dag(&cdag).contains("conv2d_NCHWc(n, occ, oh, ow, oc_block)"));
    assert!(
        nchwc
            .build(Era::V09, &[dshape.to_vec(), kshape.to_vec()])
            .is_err(),
        "no grouped NCHWc before v0.11"
    );
    let got = evaluate(
        &cdag,
        &[
            TensorData::new(&dshape, data),
            TensorData::new(&kshape, kernel),
        ],
    )
    .unwrap()
    .remove(0);
    let mut unpacked = vec![0.0; want.len()];
    for f in 0..o {
        for y in 0..5 {
            for x in 0..5 {
                unpacked[idx(&[1, o, 5, 5], &[0, f, y, x])] =
                    got.data[idx(&got.shape, &[0, f / ob, y, x, f % ob])];
            }
        }
    }
    close(&want, &unpacked);
}

/// Point evaluation gives exactly the values of the full evaluation.
#[test]
fn points_equal_the_full_evaluation() {
    let spec = WorkloadSpec::new(
        Anchor::Conv2dNhwc(Window2d::simple(1, 1)),
        vec![
            EpilogueOp::Add {
                operand_first: false,
            },
            EpilogueOp::Relu,
        ],
    );
    let dag = spec
        .build(
            Era::V010,
            &[vec![1, 6, 6, 4], vec![3, 3, 4, 5], vec![1, 1, 1, 5]],
        )
        .unwrap();
    let inputs = random_inputs(&dag, 3);
    let full = evaluate(&dag, &inputs).unwrap();
    let points: Vec<usize> = (0..full[0].len()).step_by(7).collect();
    let got = evaluate_points(&dag, &inputs, 0, &points).unwrap();
    for (p, v) in points.iter().zip(got) {
        assert_eq!(v, full[0].data[*p], "point {p}");
    }
    assert!(evaluate_points(&dag, &inputs, 0, &[full[0].len()]).is_err());
}
