//! Re-targeting a recorded workload to a smaller one of the same class: the
//! transfer-tuning move (the same steps on another workload), at shapes the interpreter
//! can check in seconds. Shared by tests/lower_corpus.rs and tests/prepack_corpus.rs.
use ttdb::ansor::step::SplitStep;
use ttdb::ansor::{KeyForm, Step, WorkloadKey};
use ttdb::ir::{DType, Dag};
use ttdb::ops::{registered, Anchor, Era, PoolLayout, WorkloadSpec};
use ttdb::schedule::{StageInit, State};

fn cap(v: i64, c: i64) -> i64 {
    v.min(c).max(1)
}

/// Input extent that gives `out` outputs of a window (at least 1, at most `orig`).
fn window_input(orig: i64, out: i64, k: i64, stride: i64, dilation: i64, pad: i64) -> i64 {
    let dk = (k - 1) * dilation + 1;
    ((out - 1) * stride + dk - pad).clamp(1, orig)
}

/// Shrunk anchor inputs (canonical order) for one anchor.
fn shrink_anchor(anchor: &Anchor, ins: &[Vec<i64>]) -> Result<Vec<Vec<i64>>, String> {
    const OUT: i64 = 5; // target output rows/columns
    let hw = |d: &[i64], k: [i64; 2], w: &ttdb::ops::Window2d, hx: usize, wx: usize| -> [i64; 2] {
        let [pt, pl, pb, pr] = w.padding;
        let [oh, ow] = w.out_hw([d[hx], d[wx]], k);
        [
            window_input(
                d[hx],
                cap(oh, OUT),
                k[0],
                w.stride[0],
                w.dilation[0],
                pt + pb,
            ),
            window_input(
                d[wx],
                cap(ow, OUT),
                k[1],
                w.stride[1],
                w.dilation[1],
                pl + pr,
            ),
        ]
    };
    Ok(match anchor {
        Anchor::Conv2dNhwc(w) => {
            let (d, k) = (&ins[0], &ins[1]);
            let [h, wd] = hw(d, [k[0], k[1]], w, 1, 2);
            let (ci, co) = (cap(d[3], 16), cap(k[3], 32));
            vec![vec![1, h, wd, ci], vec![k[0], k[1], ci, co]]
        }
        Anchor::Conv2dNchw { window: w, groups } => {
            let (d, k) = (&ins[0], &ins[1]);
            let [h, wd] = hw(d, [k[2], k[3]], w, 2, 3);
            let g = *groups;
            let (cig, cog) = (cap(d[1] / g, 16), cap(k[0] / g, 32));
            vec![vec![1, cig * g, h, wd], vec![cog * g, cig, k[2], k[3]]]
        }
        Anchor::GroupConv2dNchwSpatialPack {
            window: w,
            groups,
            blocking,
        } => {
            let (d, k) = (&ins[0], &ins[1]);
            let [h, wd] = hw(d, [k[2], k[3]], w, 2, 3);
            let g = *groups;
            // whole blocks, at most two per group
            let cig = blocking.ic_bn * cap(d[1] / g / blocking.ic_bn, 2);
            let cog = blocking.oc_bn * cap(k[0] / g / blocking.oc_bn, 2);
            vec![vec![1, cig * g, h, wd], vec![cog * g, cig, k[2], k[3]]]
        }
        Anchor::Conv2dNchwc(w) => {
            let (d, k) = (&ins[0], &ins[1]);
            let [h, wd] = hw(d, [k[2], k[3]], w, 2, 3);
            let g = d[1] / k[1].max(1);
            let (icb, ocb) = (cap(d[4], 8), cap(k[5], 8));
            let (icc, occ) = (g * cap(d[1] / g, 2), g * cap(k[0] / g, 2));
            vec![
                vec![1, icc, h, wd, icb],
                vec![occ, icc / g, k[2], k[3], icb, ocb],
            ]
        }
        Anchor::GroupConv2dNhwc { window: w, groups } => {
            let (d, k) = (&ins[0], &ins[1]);
            let [h, wd] = hw(d, [k[0], k[1]], w, 1, 2);
            let g = *groups;
            let (cig, cog) = (cap(d[3] / g, 16), cap(k[3] / g, 32));
            vec![vec![1, h, wd, cig * g], vec![k[0], k[1], cig, cog * g]]
        }
        Anchor::DepthwiseNhwc(w) => {
            let (d, k) = (&ins[0], &ins[1]);
            let [h, wd] = hw(d, [k[0], k[1]], w, 1, 2);
            let c = cap(d[3], 16);
            vec![vec![1, h, wd, c], vec![k[0], k[1], c, k[3]]]
        }
        Anchor::DepthwiseNchwc(w) => {
            let (d, k) = (&ins[0], &ins[1]);
            let [h, wd] = hw(d, [k[2], k[3]], w, 2, 3);
            let (cc, cb) = (cap(d[1], 2), cap(d[4], 8));
            let ocb = if k[5] == d[4] {
                cb
            } else {
                return Err("depthwise NCHWc with differing blocks".into());
            };
            vec![
                vec![1, cc, h, wd, cb],
                vec![cc, k[1], k[2], k[3], k[4], ocb],
            ]
        }
        Anchor::WinogradNhwc { .. } => {
            let (d, k) = (&ins[0], &ins[1]);
            let (ci, co) = (cap(d[3], 8), cap(k[2], 16));
            vec![
                vec![1, cap(d[1], 6), cap(d[2], 6), ci],
                vec![k[0], k[1], co, ci],
            ]
        }
        Anchor::Dense => {
            let (d, w) = (&ins[0], &ins[1]);
            let kk = cap(d[1], 64);
            vec![vec![cap(d[0], 16), kk], vec![cap(w[0], 32), kk]]
        }
        Anchor::BatchMatmul { transpose_b } => {
            let (a, b) = (&ins[0], &ins[1]);
            let kk = cap(a[2], 32);
            let (bb, n) = (cap(b[0], 2), cap(b[if *transpose_b { 1 } else { 2 }], 16));
            vec![
                vec![cap(a[0], 2), cap(a[1], 16), kk],
                if *transpose_b {
                    vec![bb, n, kk]
                } else {
                    vec![bb, kk, n]
                },
            ]
        }
        Anchor::Pool(p) => {
            let d = &ins[0];
            let (hx, wx) = match p.layout {
                PoolLayout::Nhwc => (1, 2),
                _ => (2, 3),
            };
            let w = ttdb::ops::Window2d {
                stride: p.stride,
                padding: p.effective_padding(),
                dilation: p.dilation,
            };
            let [h, wd] = hw(d, p.kernel, &w, hx, wx);
            let mut s: Vec<i64> = d.iter().map(|&x| cap(x, 8)).collect();
            s[0] = 1;
            if p.layout == PoolLayout::Nchwc {
                s[1] = cap(d[1], 2);
            }
            s[hx] = h;
            s[wx] = wd;
            vec![s]
        }
        Anchor::AdaptivePool { layout, out_hw, .. } => {
            let d = &ins[0];
            let (hx, wx) = if *layout == PoolLayout::Nhwc {
                (1, 2)
            } else {
                (2, 3)
            };
            let mut s: Vec<i64> = d.iter().map(|&x| cap(x, 8)).collect();
            s[0] = 1;
            if *layout == PoolLayout::Nchwc {
                s[1] = cap(d[1], 2);
            }
            s[hx] = d[hx].min(out_hw[0].max(8));
            s[wx] = d[wx].min(out_hw[1].max(8));
            vec![s]
        }
        Anchor::Softmax { .. } | Anchor::Mean { .. } => {
            vec![ins[0].iter().map(|&x| cap(x, 24)).collect()]
        }
        Anchor::Variance { axes, keepdims, .. } => {
            let d: Vec<i64> = ins[0].iter().map(|&x| cap(x, 24)).collect();
            let m: Vec<i64> = if *keepdims {
                d.iter()
                    .enumerate()
                    .map(|(i, &x)| if axes.contains(&i) { 1 } else { x })
                    .collect()
            } else {
                d.iter()
                    .enumerate()
                    .filter(|(i, _)| !axes.contains(i))
                    .map(|(_, &x)| x)
                    .collect()
            };
            vec![d, m]
        }
    })
}

/// The output shape of `spec`'s anchor for `inputs` (canonical anchor inputs).
fn anchor_out(spec: &WorkloadSpec, era: Era, ins: &[Vec<i64>]) -> Result<Vec<i64>, String> {
    let k = spec.anchor.num_inputs();
    let dag = WorkloadSpec {
        anchor: spec.anchor.clone(),
        prologue: vec![],
        epilogue: vec![],
        dtype: spec.dtype,
    }
    .build(era, &ins[..k])
    .map_err(|e| e.to_string())?;
    Ok(dag.stage(dag.output()).shape())
}

/// A smaller DAG of the same class as `dag` (the record's workload).
pub fn shrink(
    key: &WorkloadKey,
    dag: &Dag,
    spec: Option<&WorkloadSpec>,
    era: Option<Era>,
) -> Result<Dag, String> {
    if key.form == KeyForm::Registered {
        let ints: Vec<i64> = key.args.iter().filter_map(|a| a.as_int()).collect();
        return match key.head.as_str() {
            "matmul_add" => registered::matmul_add(
                cap(ints[0], 32),
                cap(ints[1], 24),
                cap(ints[2], 40),
                DType::F32,
            )
            .map_err(|e| e.to_string()),
            "conv2d_layer" => {
                let l = |i: usize| key.args[i].as_int_list().unwrap_or_default();
                let (stride, pad) = (l(7), l(8));
                let (kh, kw) = (ints[5], ints[6]);
                let h = window_input(ints[1], 4, kh, stride[0], 1, 2 * pad[0]);
                let w = window_input(ints[2], 4, kw, stride[1], 1, 2 * pad[1]);
                registered::conv2d_layer(
                    era.unwrap_or(Era::V07),
                    1,
                    h,
                    w,
                    cap(ints[3], 16),
                    cap(ints[4], 8),
                    kh,
                    kw,
                    [stride[0], stride[1]],
                    [pad[0], pad[1]],
                )
                .map_err(|e| e.to_string())
            }
            // the weights fix N and K: only the rows of the dense operand shrink
            "sparse_dense" => {
                let l = |i: usize| key.args[i].as_int_list().unwrap_or_default();
                registered::sparse_dense(
                    cap(ints[0], 8),
                    ints[1],
                    ints[2],
                    &l(3),
                    &l(4),
                    &l(5),
                    DType::F32,
                )
                .map_err(|e| e.to_string())
            }
            other => Err(format!(
                "no shrink rule for the registered workload {other}"
            )),
        };
    }
    let (spec, era) = match (spec, era) {
        (Some(s), Some(e)) => (s, e),
        _ => return Err("recognized without a workload spec".into()),
    };
    let canonical = spec
        .canonical_inputs(&dag.placeholder_shapes())
        .map_err(|e| e.to_string())?;
    let k = spec.anchor.num_inputs();
    let mut new = shrink_anchor(&spec.anchor, &canonical[..k])?;
    let (old_out, new_out) = (
        anchor_out(spec, era, &canonical)?,
        anchor_out(spec, era, &new)?,
    );
    let mut next = k;
    for op in &spec.epilogue {
        if !op.takes_operand() {
            continue;
        }
        let operand = &canonical[next];
        next += 1;
        // broadcast dims stay 1, the others follow the anchor output (aligned to the end)
        let off = old_out
            .len()
            .checked_sub(operand.len())
            .ok_or("operand of higher rank")?;
        let s = operand
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                if d == 1 && old_out[off + i] != 1 {
                    1
                } else {
                    new_out[off + i]
                }
            })
            .collect();
        new.push(s);
    }
    spec.build(era, &new).map_err(|e| e.to_string())
}

/// Same stages, names and loop counts: the record's ids stay meaningful.
pub fn same_structure(a: &Dag, b: &Dag) -> bool {
    let (x, y) = (a.initial_stages(), b.initial_stages());
    x.len() == y.len()
        && x.iter().zip(&y).all(|(p, q)| {
            p.name == q.name
                && p.iters.len() == q.iters.len()
                && p.is_placeholder == q.is_placeholder
        })
}

/// New lengths for split `sp` of a loop of `extent`, level by level in the order the split
/// consumes the extent (innermost first for factors, outermost first for nparts):
/// `pick(level, rest, old)` gets what is left of the extent (ceil quotients so far) and the
/// old length at that level.
pub fn fill_levels(
    extent: i64,
    sp: &SplitStep,
    mut pick: impl FnMut(usize, i64, i64) -> i64,
) -> Vec<i64> {
    let mut rest = extent;
    let mut l = sp.lengths.clone();
    let order: Vec<usize> = if sp.inner_to_outer {
        (0..l.len()).rev().collect()
    } else {
        (0..l.len()).collect()
    };
    for k in order {
        l[k] = pick(k, rest, l[k]);
        rest = (rest + l[k] - 1) / l[k];
    }
    l
}

/// Replays `steps` on `inits`, every SP whose loop has a known extent rewritten to
/// `lengths(extent, sp)` and its recorded extent set to the loop's. Returns the state and the
/// steps as replayed (FSP/FFSP follow the rewritten SPs).
pub fn replay_with_lengths(
    inits: &[StageInit],
    steps: &[Step],
    mut lengths: impl FnMut(i64, &SplitStep) -> Vec<i64>,
) -> Result<(State, Vec<Step>), String> {
    let mut st = State::new(inits).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(steps.len());
    for step in steps {
        let new = match step {
            Step::Split(sp) => {
                let ext = st.loop_extent(sp.stage_id, sp.iter_id);
                match ext {
                    Some(e) => Step::Split(SplitStep {
                        extent: e,
                        lengths: lengths(e, sp),
                        ..sp.clone()
                    }),
                    None => step.clone(),
                }
            }
            other => other.clone(),
        };
        st.apply(&new).map_err(|e| e.to_string())?;
        out.push(new);
    }
    Ok((st, out))
}

/// Replays `steps` on `inits` with split lengths clamped (innermost first) to what is left of
/// each extent, without requiring divisibility.
pub fn partial_tiles(inits: &[StageInit], steps: &[Step]) -> Result<State, String> {
    replay_with_lengths(inits, steps, |e, sp| {
        fill_levels(e, sp, |_, rest, old| old.clamp(1, rest.max(1)))
    })
    .map(|(st, _)| st)
}
