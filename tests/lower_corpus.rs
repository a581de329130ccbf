//! Every real CPU record of the corpus, re-targeted to a smaller workload of the same class
//! (transfer-tuning's move: the same steps on a new workload), lowered, run in the checked
//! interpreter and compared with the DAG's reference evaluator.
//!
//! The reduced DAG comes from the same op builder, TVM era and epilogue as the record's,
//! with spatial sizes and channels shrunk (kernel sizes, strides, padding, dilation and
//! blocking kept); the steps are adapted with `ttdb::lower::retarget_steps` (split lengths
//! clamped to divisors of the new extents, SP `extent` fields recomputed).
//! Records are deduplicated by (workload key, steps).
mod common;

use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;
use ttdb::ansor::log::{lines, parse_line, LogLine};
use ttdb::ansor::{KeyForm, Step, WorkloadKey};
use ttdb::ir::{DType, Dag};
use ttdb::lower::check::interpret_against_reference;
use ttdb::lower::{lower_detailed, retarget_steps, LowerOptions};
use ttdb::ops::{registered, Anchor, Era, PoolLayout, WorkloadSpec};
use ttdb::recognize::recognize;
use ttdb::schedule::stage_inits_from_dag;

/// Records ttdb refuses by design: (file, part of the reason).
const KNOWN_UNSUPPORTED: &[(&str, &str)] = &[
    // BSR sparse_dense: loop extents and indices come from the weight's index arrays
    ("tvm_gallery/sparse_dense.json", "depends on input data"),
];

/// Relative error bound (max |kernel - reference| / max |reference|).
const TOLERANCE: f64 = 1e-4;
/// Interpreter step budget per kernel (the reduced workloads need far less).
const STEP_BUDGET: u64 = 400_000_000;

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
        Anchor::BatchMatmul => {
            let (a, b) = (&ins[0], &ins[1]);
            let kk = cap(a[2], 32);
            vec![
                vec![cap(a[0], 2), cap(a[1], 16), kk],
                vec![cap(b[0], 2), cap(b[1], 16), kk],
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
        epilogue: vec![],
        dtype: spec.dtype,
    }
    .build(era, &ins[..k])
    .map_err(|e| e.to_string())?;
    Ok(dag.stage(dag.output()).shape())
}

/// A smaller DAG of the same class as `dag` (the record's workload).
fn shrink(
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
fn same_structure(a: &Dag, b: &Dag) -> bool {
    let (x, y) = (a.initial_stages(), b.initial_stages());
    x.len() == y.len()
        && x.iter().zip(&y).all(|(p, q)| {
            p.name == q.name
                && p.iters.len() == q.iters.len()
                && p.is_placeholder == q.is_placeholder
        })
}

struct Rec {
    file: String,
    line: usize,
    key: String,
    steps: Vec<Step>,
}

/// Features of a lowered kernel, for the coverage summary.
fn features(k: &ttdb::loopnest::Kernel) -> Vec<&'static str> {
    use ttdb::loopnest::{Attr, ForKind, Stmt};
    fn walk(s: &Stmt, depth: usize, out: &mut Vec<&'static str>) {
        match s {
            Stmt::For { kind, body, .. } => {
                out.push(match kind {
                    ForKind::Parallel => "parallel loop",
                    ForKind::Vectorized => "vectorized loop",
                    ForKind::Unrolled => "unrolled loop",
                    ForKind::Serial => "serial loop",
                });
                walk(body, depth + 1, out);
            }
            Stmt::Allocate { buffer, body } => {
                out.push(if depth > 0 {
                    "temporary inside a loop (compute_at)"
                } else {
                    "temporary at root"
                });
                if buffer.name.ends_with("_rf") {
                    out.push("rfactor stage");
                }
                if buffer.name.ends_with("_local") {
                    out.push("cache stage");
                }
                walk(body, depth, out);
            }
            Stmt::Attr { attr, body } => {
                if matches!(attr, Attr::AutoUnroll { .. }) {
                    out.push("auto_unroll pragma");
                }
                walk(body, depth, out);
            }
            Stmt::IfThenElse { then_, else_, .. } => {
                out.push("guard");
                walk(then_, depth, out);
                if let Some(e) = else_ {
                    walk(e, depth, out);
                }
            }
            Stmt::Seq(v) => v.iter().for_each(|x| walk(x, depth, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&k.body, 0, &mut out);
    out.sort_unstable();
    out.dedup();
    out
}

#[derive(Clone, Debug)]
enum Outcome {
    Verified { rel_err: f64 },
    Failed { stage: &'static str, reason: String },
}

#[derive(Default)]
struct Tally {
    records: usize,
    unique: usize,
    retargeted: usize,
    lowered: usize,
    verified: usize,
}

fn shorten(s: &str, n: usize) -> String {
    let s = s.replace('\n', " ");
    if s.len() <= n {
        s
    } else {
        format!(
            "{}…",
            &s[..s
                .char_indices()
                .take_while(|(i, _)| *i < n)
                .last()
                .map_or(0, |(i, _)| i)]
        )
    }
}

/// How split lengths are adapted to the reduced workload.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// `retarget_steps`: divisors of the new extents (no partial tiles).
    Divisors,
    /// Lengths only clamped to what is left of the extent, so tiles are partial and the
    /// kernels need guards; records whose adapted steps replay refuses are skipped.
    Partial,
}

/// Replays `steps` on `inits` with split lengths clamped (innermost first) to what is left of
/// each extent, without requiring divisibility.
fn partial_tiles(
    inits: &[ttdb::schedule::StageInit],
    steps: &[Step],
) -> Result<ttdb::schedule::State, String> {
    use ttdb::ansor::step::SplitStep;
    let mut st = ttdb::schedule::State::new(inits).map_err(|e| e.to_string())?;
    for step in steps {
        let new = match step {
            Step::Split(sp) => {
                let ext = st
                    .stages()
                    .get(sp.stage_id as usize)
                    .and_then(|s| s.iters.get(sp.iter_id as usize))
                    .and_then(|it| it.extent);
                match ext {
                    Some(e) => {
                        let mut rest = e;
                        let mut l = sp.lengths.clone();
                        let order: Vec<usize> = if sp.inner_to_outer {
                            (0..l.len()).rev().collect()
                        } else {
                            (0..l.len()).collect()
                        };
                        for k in order {
                            l[k] = l[k].clamp(1, rest.max(1));
                            rest = (rest + l[k] - 1) / l[k];
                        }
                        Step::Split(SplitStep {
                            extent: e,
                            lengths: l,
                            ..sp.clone()
                        })
                    }
                    None => step.clone(),
                }
            }
            other => other.clone(),
        };
        st.apply(&new).map_err(|e| e.to_string())?;
    }
    Ok(st)
}

#[test]
fn corpus_records_retargeted_lower_and_match_the_reference() {
    check_corpus(Mode::Divisors);
}

/// The same schedules with partial tiles (guards), on a deterministic sample: every record
/// of the small files, every 8th of the 5,056-record alexnet log.
#[test]
fn corpus_records_with_partial_tiles_lower_and_match_the_reference() {
    check_corpus(Mode::Partial);
}

fn check_corpus(mode: Mode) {
    let t0 = Instant::now();
    let files: Vec<_> = common::ansor_files()
        .into_iter()
        .filter(|p| !common::is_cuda_log(p))
        .collect();
    assert!(
        !files.is_empty(),
        "no CPU Ansor logs found under {}",
        common::corpus_dir().display()
    );
    let mut recs = Vec::new();
    for f in &files {
        let text = std::fs::read(f).unwrap();
        for (ln, bytes) in lines(&text) {
            match parse_line(bytes) {
                LogLine::Record { record, .. } => recs.push(Rec {
                    file: common::rel(f),
                    line: ln,
                    key: record.task.workload_key.clone(),
                    steps: record.steps,
                }),
                LogLine::Bad { reason, .. } => {
                    panic!("{}:{ln}: unparsable record: {reason}", f.display())
                }
                _ => {}
            }
        }
    }
    // dedupe by (key, steps)
    let mut unique: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (i, r) in recs.iter().enumerate() {
        let steps: Vec<String> = r.steps.iter().map(|s| s.to_string()).collect();
        unique.entry((r.key.clone(), steps.join(","))).or_insert(i);
    }
    if mode == Mode::Partial {
        let big = |i: usize| {
            recs[i]
                .file
                .starts_with("jaspann_tt/alexnet-NCHW-B1-llvm-core-avx2.json")
                && !recs[i].file.ends_with("best.json")
        };
        let mut n = 0;
        unique.retain(|_, &mut i| {
            n += 1;
            !big(i) || n % 8 == 0
        });
        println!("partial-tile mode: {} CPU records, {} distinct (key, steps) checked (sample: every 8th distinct record of the full alexnet log, all others)", recs.len(), unique.len());
    } else {
        println!(
            "{} CPU records, {} distinct (key, steps); all distinct ones are checked (no sampling)",
            recs.len(),
            unique.len()
        );
    }

    // one reduced DAG per key
    let keys: Vec<String> = {
        let mut k: Vec<String> = recs.iter().map(|r| r.key.clone()).collect();
        k.sort();
        k.dedup();
        k
    };
    let dags: HashMap<String, Result<(Dag, Dag), String>> = keys
        .par_iter()
        .map(|key| {
            let r = (|| {
                let wk = WorkloadKey::parse(key).map_err(|e| e.to_string())?;
                let rec = recognize(&wk).map_err(|e| format!("recognize: {e}"))?;
                let small = shrink(&wk, &rec.dag, rec.spec.as_ref(), rec.era)?;
                if !same_structure(&rec.dag, &small) {
                    return Err("the reduced DAG has another stage structure".to_string());
                }
                Ok((rec.dag, small))
            })();
            (key.clone(), r)
        })
        .collect();

    let lower_times = Mutex::new(Vec::new());
    let coverage: Mutex<BTreeMap<&'static str, usize>> = Mutex::new(BTreeMap::new());
    let todo: Vec<usize> = unique.values().copied().collect();
    let outcomes: HashMap<usize, Outcome> = todo
        .par_iter()
        .map(|&i| {
            let r = &recs[i];
            let out = (|| {
                let (_, small) = dags[&r.key].as_ref().map_err(|e| ("shrink", e.clone()))?;
                let state = match mode {
                    Mode::Divisors => {
                        retarget_steps(&stage_inits_from_dag(small), &r.steps)
                            .map_err(|e| ("retarget", e.to_string()))?
                            .state
                    }
                    Mode::Partial => partial_tiles(&stage_inits_from_dag(small), &r.steps)
                        .map_err(|e| ("retarget", e))?,
                };
                let t = Instant::now();
                let lowered = lower_detailed(small, &state, &LowerOptions::default())
                    .map_err(|e| ("lower", format!("{}: {e}", e.kind())))?;
                if lowered.explicit_guards > 0 {
                    *coverage
                        .lock()
                        .unwrap()
                        .entry("explicit access guard (checker could not use TE's guard)")
                        .or_default() += 1;
                }
                let k = lowered.kernel;
                let ms = t.elapsed().as_secs_f64() * 1e3;
                lower_times.lock().unwrap().push(ms);
                for f in features(&k) {
                    *coverage.lock().unwrap().entry(f).or_default() += 1;
                }
                let cmp = interpret_against_reference(small, &k, 1 + i as u64, Some(STEP_BUDGET))
                    .map_err(|e| ("run", e))?;
                if cmp.rel_err > TOLERANCE {
                    return Err((
                        "compare",
                        format!(
                            "relative error {:.3e} (max abs {:.3e})",
                            cmp.rel_err, cmp.max_abs_err
                        ),
                    ));
                }
                Ok(Outcome::Verified {
                    rel_err: cmp.rel_err,
                })
            })();
            (
                i,
                out.unwrap_or_else(|(stage, reason)| Outcome::Failed { stage, reason }),
            )
        })
        .collect();

    // per-file table
    let mut tally: BTreeMap<String, Tally> = BTreeMap::new();
    let mut seen_in_file: HashMap<(String, String, String), ()> = HashMap::new();
    let stage_rank = |o: &Outcome| match o {
        Outcome::Verified { .. } => 4,
        Outcome::Failed {
            stage: "compare" | "run",
            ..
        } => 2,
        Outcome::Failed { stage: "lower", .. } => 1,
        Outcome::Failed { .. } => 0,
    };
    for r in &recs {
        let steps: Vec<String> = r.steps.iter().map(|s| s.to_string()).collect();
        let sk = steps.join(",");
        let Some(&first) = unique.get(&(r.key.clone(), sk.clone())) else {
            continue;
        };
        let t = tally.entry(r.file.clone()).or_default();
        t.records += 1;
        if seen_in_file
            .insert((r.file.clone(), r.key.clone(), sk.clone()), ())
            .is_some()
        {
            continue;
        }
        t.unique += 1;
        let o = &outcomes[&first];
        let rank = stage_rank(o);
        t.retargeted += (rank >= 1) as usize;
        t.lowered += (rank >= 2) as usize;
        t.verified += (rank >= 4) as usize;
    }
    println!(
        "\n{:<58} {:>7} {:>7} {:>10} {:>7} {:>8}",
        "file", "records", "unique", "retargeted", "lowered", "verified"
    );
    let mut total = Tally::default();
    for (f, t) in &tally {
        println!(
            "{f:<58} {:>7} {:>7} {:>10} {:>7} {:>8}",
            t.records, t.unique, t.retargeted, t.lowered, t.verified
        );
        total.records += t.records;
        total.unique += t.unique;
        total.retargeted += t.retargeted;
        total.lowered += t.lowered;
        total.verified += t.verified;
    }
    println!(
        "{:<58} {:>7} {:>7} {:>10} {:>7} {:>8}",
        "TOTAL (per file)",
        total.records,
        total.unique,
        total.retargeted,
        total.lowered,
        total.verified
    );
    let verified = outcomes
        .values()
        .filter(|o| matches!(o, Outcome::Verified { .. }))
        .count();
    println!(
        "distinct (key, steps): {} checked, {} verified ({:.2}%)",
        outcomes.len(),
        verified,
        100.0 * verified as f64 / outcomes.len().max(1) as f64
    );
    let worst = outcomes
        .values()
        .filter_map(|o| {
            if let Outcome::Verified { rel_err, .. } = o {
                Some(*rel_err)
            } else {
                None
            }
        })
        .fold(0.0, f64::max);
    let mut times = lower_times.into_inner().unwrap();
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if !times.is_empty() {
        println!(
            "worst relative error {worst:.2e}; lowering time per kernel (reduced workloads): median {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            times[times.len() / 2],
            times[times.len() * 99 / 100],
            times[times.len() - 1]
        );
    }
    println!("kernels with each feature (of the lowered distinct records):");
    for (f, n) in coverage.into_inner().unwrap() {
        println!("  {n:>6}  {f}");
    }
    // failures, grouped by reason
    let mut by_reason: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (&i, o) in &outcomes {
        if let Outcome::Failed { stage, reason } = o {
            let r = &recs[i];
            let class = format!("{stage}: {}", shorten(reason, 140));
            by_reason
                .entry(class)
                .or_default()
                .push(format!("{}:{}", r.file, r.line));
        }
    }
    let failed: usize = by_reason.values().map(Vec::len).sum();
    println!("\n{failed} failure(s) in {} class(es):", by_reason.len());
    for (reason, locs) in &by_reason {
        println!("  [{}] {reason}", locs.len());
        for l in locs.iter().take(8) {
            println!("      {l}");
        }
        if locs.len() > 8 {
            println!("      ... and {} more", locs.len() - 8);
        }
    }
    println!("elapsed {:.1} s", t0.elapsed().as_secs_f64());
    // Known, documented limits: each must still fail for the stated reason (so a fix or a
    // new failure both show up here).
    let skipped = outcomes
        .values()
        .filter(|o| {
            matches!(
                o,
                Outcome::Failed {
                    stage: "retarget",
                    ..
                }
            )
        })
        .count();
    if mode == Mode::Partial {
        println!("{skipped} record(s) skipped: replay refuses their partial-tile adaptation");
        assert!(skipped * 10 < outcomes.len(), "too many records skipped");
    }
    let mut unexpected = Vec::new();
    let mut known_seen = vec![0; KNOWN_UNSUPPORTED.len()];
    for (&i, o) in &outcomes {
        if let Outcome::Failed { stage, reason } = o {
            let r = &recs[i];
            if mode == Mode::Partial && *stage == "retarget" {
                continue;
            }
            match KNOWN_UNSUPPORTED
                .iter()
                .position(|(f, why)| r.file == *f && reason.contains(why))
            {
                Some(k) => known_seen[k] += 1,
                None => unexpected.push(format!("{}:{}: {stage}: {reason}", r.file, r.line)),
            }
        }
    }
    assert!(
        unexpected.is_empty(),
        "{} of {} distinct records failed unexpectedly:\n{}",
        unexpected.len(),
        outcomes.len(),
        unexpected.join("\n")
    );
    for ((f, why), n) in KNOWN_UNSUPPORTED.iter().zip(known_seen) {
        assert!(
            n > 0,
            "{f} no longer fails with {why:?}: update KNOWN_UNSUPPORTED"
        );
    }
}

/// Every distinct record lowered at its real shapes (no execution): proofs, cost guard and
/// lowering time at full size.
#[test]
fn corpus_records_lower_at_real_shapes() {
    let t0 = Instant::now();
    let files: Vec<_> = common::ansor_files()
        .into_iter()
        .filter(|p| !common::is_cuda_log(p))
        .collect();
    let mut unique: BTreeMap<(String, String), (String, usize, Vec<Step>)> = BTreeMap::new();
    for f in &files {
        let text = std::fs::read(f).unwrap();
        for (ln, bytes) in lines(&text) {
            if let LogLine::Record { record, .. } = parse_line(bytes) {
                let sk: Vec<String> = record.steps.iter().map(|s| s.to_string()).collect();
                unique
                    .entry((record.task.workload_key.clone(), sk.join(",")))
                    .or_insert((common::rel(f), ln, record.steps));
            }
        }
    }
    let results: Vec<(String, Result<f64, String>)> = unique
        .par_iter()
        .map(|((key, _), (file, ln, steps))| {
            let r = (|| {
                let wk = WorkloadKey::parse(key).map_err(|e| e.to_string())?;
                let dag = recognize(&wk).map_err(|e| e.to_string())?.dag;
                let state = ttdb::schedule::replay(&stage_inits_from_dag(&dag), steps)
                    .map_err(|e| format!("replay: {e}"))?;
                let t = Instant::now();
                lower_detailed(&dag, &state, &LowerOptions::default())
                    .map_err(|e| format!("{}: {e}", e.kind()))?;
                Ok(t.elapsed().as_secs_f64() * 1e3)
            })();
            (format!("{file}:{ln}"), r)
        })
        .collect();
    let mut times: Vec<f64> = results
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok().copied())
        .collect();
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(w, r)| {
            r.as_ref()
                .err()
                .map(|e| format!("{w}: {}", shorten(e, 200)))
        })
        .collect();
    println!(
        "{} distinct records at real shapes: {} lowered; lowering time median {:.2} ms, p99 {:.2} ms, max {:.2} ms; {:.1} s",
        results.len(),
        times.len(),
        times[times.len() / 2],
        times[times.len() * 99 / 100],
        times[times.len() - 1],
        t0.elapsed().as_secs_f64()
    );
    for f in &failures {
        println!("  {f}");
    }
    let unexpected: Vec<&String> = failures
        .iter()
        .filter(|f| {
            !KNOWN_UNSUPPORTED
                .iter()
                .any(|(file, why)| f.starts_with(file) && f.contains(why))
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "{} records do not lower at their real shapes: {unexpected:?}",
        unexpected.len()
    );
    assert!(
        times[times.len() - 1] < 100.0,
        "lowering took {:.1} ms",
        times[times.len() - 1]
    );
}
