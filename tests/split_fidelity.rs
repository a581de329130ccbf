//! Split-length fidelity on real records. TVM accepts and measures SP lengths that do not
//! divide the loop's extent, or whose product exceeds it (Droplet search, a coordinate-descent
//! tuner, emits such records): a factor split of extent E by l gives loops of ceil(E/l) and l
//! with the excess iterations guarded. ttdb must replay, lower and compute them right.
//!
//! A deterministic sample of the curated corpus's CPU records (every log but the full tuning
//! histories of `tvm_ansor_bench_full_nchwc/`), spread over files and op classes, is
//! re-targeted to a small workload of its class (`shrink`), every SP of a known extent
//! rewritten to
//! * non-dividing lengths: at each level the length nearest the record's that does not divide
//!   what is left of the extent (partial tiles at several levels);
//! * over-long lengths: a product of at least twice the extent, either Droplet-style (every
//!   level the largest of 2, 4, 8, 16, 24, 32, 48, 64 within the extent) or one length alone
//!   at least twice the extent (alternating per SP);
//!
//! then replayed, lowered, unrolled as codegen does (every access proven in bounds after the
//! tail guards become constants), run in the checked interpreter and compared with the
//! reference; over-long ones also with pre-packed weights (fused over-long parts pad the
//! packed layout).
use crate::common;
// partial_tiles is lower_corpus's
#[allow(dead_code)]
use crate::common::shrink;
use shrink::{fill_levels, replay_with_lengths, same_structure, shrink};

use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;
use ttdb::ansor::log::{lines, parse_line, LogLine};
use ttdb::ansor::step::SplitStep;
use ttdb::ansor::{Step, WorkloadKey};
use ttdb::codegen::{prepare, CodegenOptions};
use ttdb::ir::Dag;
use ttdb::loopnest::Stmt;
use ttdb::lower::check::{interpret_against_reference, interpret_with_layout};
use ttdb::lower::{lower_detailed, LowerOptions, WeightLayout, WeightLayoutMode};
use ttdb::recognize::recognize;
use ttdb::schedule::stage_inits_from_dag;

/// Distinct records sampled (the same ones in both modes).
const SAMPLE: usize = 256;
/// ttdb's one output tolerance.
use ttdb::loopnest::verify::RTOL as TOLERANCE;
const STEP_BUDGET: u64 = 100_000_000;
/// Lengths of the kind Droplet search tries, regardless of divisibility.
const DROPLET: [i64; 8] = [2, 4, 8, 16, 24, 32, 48, 64];

/// Records refused by design, whatever their lengths: (file, part of the reason).
const REFUSED_BY_DESIGN: &[(&str, &str)] = &[
    // BSR sparse_dense: loop extents and indices come from the weight's index arrays
    ("tvm_gallery/sparse_dense.json", "depends on input data"),
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    NonDividing,
    OverLong,
}

struct Rec {
    file: String,
    line: usize,
    key: String,
    steps: Vec<Step>,
}

/// What the rewrite did to one record's SPs.
#[derive(Default)]
struct Rewrite {
    /// SPs whose lengths now fit the mode (non-dividing, or product >= 2x the extent).
    sps: usize,
    /// SPs with a single length above the whole extent.
    single_above: usize,
}

/// The length nearest `want` in 2..rest that does not divide `rest` (`rest` >= 3; rest - 1
/// always qualifies).
fn nearest_non_divisor(rest: i64, want: i64) -> i64 {
    let want = want.clamp(2, rest - 1);
    (0..rest)
        .flat_map(|d| [want + d, want - d])
        .find(|&c| (2..rest).contains(&c) && rest % c != 0)
        .unwrap_or(rest - 1)
}

/// New lengths for `sp` on a loop of `e` (the `index`-th SP of the record, from 1); what they
/// are is counted in `rw`.
fn rewrite(mode: Mode, e: i64, sp: &SplitStep, index: usize, rw: &mut Rewrite) -> Vec<i64> {
    let product = |l: &[i64]| l.iter().product::<i64>();
    match mode {
        Mode::NonDividing => {
            let l = fill_levels(e, sp, |_, rest, old| {
                if rest >= 3 {
                    nearest_non_divisor(rest, old)
                } else {
                    old.clamp(1, rest.max(1))
                }
            });
            rw.sps += usize::from(e % product(&l) != 0);
            l
        }
        Mode::OverLong if sp.lengths.is_empty() => Vec::new(),
        Mode::OverLong => {
            let inner = if sp.inner_to_outer {
                sp.lengths.len() - 1
            } else {
                0
            };
            let within = DROPLET.iter().rev().copied().find(|&c| c <= e);
            let mut l = match within {
                Some(c) if index % 2 == 1 && sp.lengths.len() >= 2 => vec![c; sp.lengths.len()],
                _ => Vec::new(),
            };
            if l.is_empty() || product(&l) < 2 * e {
                // one length alone at least twice the extent, the others as recorded (<= 64)
                let above = DROPLET.iter().copied().find(|&c| c >= 2 * e);
                l = sp.lengths.iter().map(|&x| x.clamp(1, 64)).collect();
                l[inner] = above.unwrap_or(2 * e + 1);
                rw.single_above += 1;
            }
            rw.sps += usize::from(product(&l) >= 2 * e);
            l
        }
    }
}

#[derive(Debug)]
enum Outcome {
    /// No SP of a known extent to rewrite.
    NotApplicable,
    Verified {
        guarded: bool,
        /// Also verified with its weights pre-packed (a layout other than the original).
        packed: bool,
    },
    Failed {
        stage: &'static str,
        reason: String,
    },
}

impl Outcome {
    /// How far the record got: 0 not rewritten, 1 rewritten, 2 replayed, 3 lowered, 4 verified.
    fn rank(&self) -> usize {
        match self {
            Outcome::NotApplicable
            | Outcome::Failed {
                stage: "shrink", ..
            } => 0,
            Outcome::Failed {
                stage: "replay", ..
            } => 1,
            Outcome::Failed { stage: "lower", .. } => 2,
            Outcome::Failed { .. } => 3,
            Outcome::Verified { .. } => 4,
        }
    }
}

fn has_guard(s: &Stmt) -> bool {
    match s {
        Stmt::IfThenElse { .. } => true,
        Stmt::For { body, .. } | Stmt::Attr { body, .. } | Stmt::Allocate { body, .. } => {
            has_guard(body)
        }
        Stmt::Seq(v) => v.iter().any(has_guard),
        _ => false,
    }
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Curated CPU logs: every file under `ansor/` but the full histories and CUDA logs.
fn curated_files() -> Vec<std::path::PathBuf> {
    let root = common::corpus_dir().join("ansor");
    let files: Vec<_> = common::ansor_files()
        .into_iter()
        .filter(|p| !common::is_full_history(p) && !common::is_cuda_log(p))
        .collect();
    assert!(
        files.len() >= 15,
        "expected the curated CPU Ansor logs under {}, found {}",
        root.display(),
        files.len()
    );
    files
}

/// The sample, with each key's (class, small DAG) or why it has none.
#[allow(clippy::type_complexity)]
fn sample() -> (
    Vec<Rec>,
    usize,
    HashMap<String, Result<(String, Dag), String>>,
) {
    let mut unique: BTreeMap<(String, String), Rec> = BTreeMap::new();
    for f in curated_files() {
        let text = std::fs::read(&f).unwrap();
        for (ln, bytes) in lines(&text) {
            match parse_line(bytes) {
                // records without an SP have no lengths to rewrite
                LogLine::Record { record, .. }
                    if record.steps.iter().any(|s| matches!(s, Step::Split(_))) =>
                {
                    let sk: Vec<String> = record.steps.iter().map(|s| s.to_string()).collect();
                    unique
                        .entry((record.task.workload_key.clone(), sk.join(",")))
                        .or_insert(Rec {
                            file: common::rel(&f),
                            line: ln,
                            key: record.task.workload_key.clone(),
                            steps: record.steps,
                        });
                }
                LogLine::Bad { reason, .. } => {
                    panic!("{}:{ln}: unparsable record: {reason}", f.display())
                }
                _ => {}
            }
        }
    }
    let distinct = unique.len();
    let mut keys: Vec<String> = unique.values().map(|r| r.key.clone()).collect();
    keys.sort();
    keys.dedup();
    let dags: HashMap<String, Result<(String, Dag), String>> = keys
        .par_iter()
        .map(|key| {
            let r = (|| {
                let wk = WorkloadKey::parse(key).map_err(|e| e.to_string())?;
                let rec = recognize(&wk).map_err(|e| format!("recognize: {e}"))?;
                let class = match &rec.spec {
                    Some(s) => s.anchor.class_name(),
                    None => wk.head.clone(),
                };
                let small = shrink(&wk, &rec.dag, rec.spec.as_ref(), rec.era)?;
                if !same_structure(&rec.dag, &small) {
                    return Err("the reduced DAG has another stage structure".to_string());
                }
                Ok((class, small))
            })();
            (key.clone(), r)
        })
        .collect();
    // buckets of (file, op class), each in a fixed pseudo-random order; taken round-robin
    let mut buckets: BTreeMap<(String, String), Vec<(u64, Rec)>> = BTreeMap::new();
    for ((key, sk), r) in unique {
        let class = match &dags[&key] {
            Ok((c, _)) => c.clone(),
            Err(_) => "?".to_string(),
        };
        buckets
            .entry((r.file.clone(), class))
            .or_default()
            .push((fnv(&format!("{key}{sk}")), r));
    }
    let mut queues: Vec<std::vec::IntoIter<(u64, Rec)>> = buckets
        .into_values()
        .map(|mut v| {
            v.sort_by_key(|(h, _)| *h);
            v.into_iter()
        })
        .collect();
    let mut out = Vec::new();
    while out.len() < SAMPLE {
        let before = out.len();
        for q in &mut queues {
            if out.len() < SAMPLE {
                if let Some((_, r)) = q.next() {
                    out.push(r);
                }
            }
        }
        if out.len() == before {
            break;
        }
    }
    (out, distinct, dags)
}

fn check(mode: Mode) {
    let t0 = Instant::now();
    let (recs, distinct, dags) = sample();
    let classes: std::collections::BTreeSet<&str> = recs
        .iter()
        .filter_map(|r| dags[&r.key].as_ref().ok().map(|(c, _)| c.as_str()))
        .collect();
    println!(
        "{mode:?}: {} of {distinct} distinct curated CPU records sampled, {} files, {} op classes {classes:?}",
        recs.len(),
        recs.iter()
            .map(|r| r.file.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        classes.len(),
    );
    let results: Vec<(Outcome, Rewrite)> = recs
        .par_iter()
        .enumerate()
        .map(|(i, r)| {
            let mut rw = Rewrite::default();
            let out = (|| {
                let (_, small) = dags[&r.key].as_ref().map_err(|e| ("shrink", e.clone()))?;
                let mut n_sp = 0;
                let replayed =
                    replay_with_lengths(&stage_inits_from_dag(small), &r.steps, |e, sp| {
                        n_sp += 1;
                        rewrite(mode, e, sp, n_sp, &mut rw)
                    });
                let (state, _) = replayed.map_err(|e| ("replay", e))?;
                if rw.sps == 0 {
                    return Ok(Outcome::NotApplicable);
                }
                let lowered = lower_detailed(small, &state, &LowerOptions::default())
                    .map_err(|e| ("lower", format!("{}: {e}", e.kind())))?;
                // what codegen compiles: unrolled (constant tail guards decided), every
                // access proven in bounds again
                prepare(&lowered.kernel, &CodegenOptions::default())
                    .map_err(|e| ("codegen", e.to_string()))?;
                let cmp = interpret_against_reference(
                    small,
                    &lowered.kernel,
                    1 + i as u64,
                    Some(STEP_BUDGET),
                )
                .map_err(|e| ("run", e))?;
                if cmp.rel_err > TOLERANCE {
                    return Err(("compare", format!("relative error {:.3e}", cmp.rel_err)));
                }
                // Over-long parts that get fused pad a pre-packed weight (what measurement
                // uses by default): that layout must compute the same values.
                let mut packed = false;
                if mode == Mode::OverLong {
                    let opts = LowerOptions {
                        weight_layout: WeightLayoutMode::PrePacked,
                        ..LowerOptions::default()
                    };
                    let l = lower_detailed(small, &state, &opts)
                        .map_err(|e| ("pre-packed", format!("{}: {e}", e.kind())))?;
                    packed = l.weight_layout != WeightLayout::Original;
                    let cmp = interpret_with_layout(
                        small,
                        &l.kernel,
                        &l.weight_layout,
                        1 + i as u64,
                        Some(STEP_BUDGET),
                    )
                    .map_err(|e| ("pre-packed", e))?;
                    if cmp.rel_err > TOLERANCE {
                        return Err(("pre-packed", format!("relative error {:.3e}", cmp.rel_err)));
                    }
                }
                Ok(Outcome::Verified {
                    guarded: has_guard(&lowered.kernel.body),
                    packed,
                })
            })();
            let out = out.unwrap_or_else(|(stage, reason)| Outcome::Failed { stage, reason });
            (out, rw)
        })
        .collect();

    // table: per file, then the total
    #[derive(Default)]
    struct Row {
        tried: usize,
        rewritten: usize,
        replayed: usize,
        lowered: usize,
        verified: usize,
    }
    let add = |row: &mut Row, o: &Outcome| {
        let k = o.rank();
        row.tried += 1;
        row.rewritten += usize::from(k >= 1);
        row.replayed += usize::from(k >= 2);
        row.lowered += usize::from(k >= 3);
        row.verified += usize::from(k >= 4);
    };
    let mut rows: BTreeMap<&str, Row> = BTreeMap::new();
    let mut total = Row::default();
    for (r, (o, _)) in recs.iter().zip(&results) {
        add(rows.entry(&r.file).or_default(), o);
        add(&mut total, o);
    }
    println!(
        "\n{:<58} {:>6} {:>9} {:>8} {:>7} {:>8}",
        "file", "tried", "rewritten", "replayed", "lowered", "verified"
    );
    let print = |name: &str, w: &Row| {
        println!(
            "{name:<58} {:>6} {:>9} {:>8} {:>7} {:>8}",
            w.tried, w.rewritten, w.replayed, w.lowered, w.verified
        )
    };
    for (f, w) in &rows {
        print(f, w);
    }
    print(&format!("TOTAL ({mode:?})"), &total);
    let sps: usize = results.iter().map(|(_, rw)| rw.sps).sum();
    let single: usize = results.iter().map(|(_, rw)| rw.single_above).sum();
    let guarded = results
        .iter()
        .filter(|(o, _)| matches!(o, Outcome::Verified { guarded: true, .. }))
        .count();
    let packed = results
        .iter()
        .filter(|(o, _)| matches!(o, Outcome::Verified { packed: true, .. }))
        .count();
    println!(
        "{sps} SPs rewritten ({single} with one length >= 2x the extent); {guarded} verified kernels have guards"
    );
    if mode == Mode::OverLong {
        println!(
            "{packed} verified with pre-packed weights too (the others keep the original layout)"
        );
    }
    println!("{:.1} s", t0.elapsed().as_secs_f64());

    let mut by_design = Vec::new();
    let mut unexpected = Vec::new();
    for (r, (o, _)) in recs.iter().zip(&results) {
        if let Outcome::Failed { stage, reason } = o {
            let line = format!("{}:{}: {stage}: {reason}", r.file, r.line);
            if REFUSED_BY_DESIGN
                .iter()
                .any(|(f, why)| r.file == *f && reason.contains(why))
            {
                by_design.push(line);
            } else {
                unexpected.push(line);
            }
        }
    }
    for l in &by_design {
        println!("refused by design: {l}");
    }
    assert!(
        unexpected.is_empty(),
        "{} of {} rewritten records failed:\n{}",
        unexpected.len(),
        total.rewritten,
        unexpected.join("\n")
    );
    assert!(
        total.rewritten * 10 >= total.tried * 9,
        "only {} of {} records had an SP to rewrite",
        total.rewritten,
        total.tried
    );
    if mode == Mode::OverLong {
        assert!(single > 0, "no SP got a single length above the extent");
    }
}

#[test]
fn non_dividing_split_lengths_lower_and_match_the_reference() {
    check(Mode::NonDividing);
}

#[test]
fn over_long_split_lengths_lower_and_match_the_reference() {
    check(Mode::OverLong);
}

#[test]
fn rewrite_rules() {
    let sp = |lengths: Vec<i64>, inner_to_outer: bool| SplitStep {
        stage_id: 0,
        iter_id: 0,
        extent: 0,
        lengths,
        inner_to_outer,
    };
    let mut rw = Rewrite::default();
    // 16 by [8, 4]: innermost 5 (nearest non-divisor of 16 to 4), then 3 for ceil(16/5) = 4
    assert_eq!(
        rewrite(Mode::NonDividing, 16, &sp(vec![8, 4], true), 1, &mut rw),
        [3, 5]
    );
    assert_eq!(nearest_non_divisor(12, 6), 7);
    assert_eq!(nearest_non_divisor(3, 1), 2);
    // Droplet-style: 24 for 30, product 576 >= 60
    assert_eq!(
        rewrite(Mode::OverLong, 30, &sp(vec![1, 5], true), 1, &mut rw),
        [24, 24]
    );
    // a single length: the innermost (factors) or the outermost (nparts)
    assert_eq!(
        rewrite(Mode::OverLong, 5, &sp(vec![2, 1], true), 2, &mut rw),
        [2, 16]
    );
    assert_eq!(
        rewrite(Mode::OverLong, 40, &sp(vec![2], false), 2, &mut rw),
        [81]
    );
    assert_eq!((rw.sps, rw.single_above), (4, 2));
}
