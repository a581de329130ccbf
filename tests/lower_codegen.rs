//! Smoke test: real records lowered at their REAL shapes, compiled with LLVM, run, and
//! compared with the DAG's reference evaluator; lowering and compile times are reported.
use crate::common;

use std::time::Instant;
use ttdb::ansor::log::{lines, parse_line, LogLine};
use ttdb::ansor::{Record, WorkloadKey};
use ttdb::codegen::{compile, CodegenOptions, RunOptions};
use ttdb::ir::eval::{evaluate, random_inputs};
use ttdb::loopnest::ir::Kernel;
use ttdb::lower::check::{compare_outputs, kernel_args};
use ttdb::lower::{lower, LowerOptions};
use ttdb::recognize::recognize;
use ttdb::schedule::{replay, stage_inits_from_dag};

fn record(file: &str, key_prefix: &str, nth: usize) -> Record {
    let path = common::corpus_dir().join("ansor").join(file);
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let found = lines(&text)
        .filter_map(|(_, b)| match parse_line(b) {
            LogLine::Record { record, .. } => Some(*record),
            _ => None,
        })
        .filter(|r| r.task.workload_key.contains(key_prefix))
        .nth(nth)
        .unwrap_or_else(|| panic!("{file}: no record #{nth} with key {key_prefix}"));
    found
}

/// (file, part of the workload key, which record with that key)
const CASES: &[(&str, &str, usize)] = &[
    // resnet-50 1x1 conv + bias + residual add + relu, conv computed at the relu's tile
    (
        "tvm_gallery/resnet-50-NHWC-B1-llvm.json",
        "875556d12d0be2269206a7775d5296a6",
        0,
    ),
    // resnet-50 softmax: two rfactors, .repl stages computed inside their consumers
    (
        "tvm_gallery/resnet-50-NHWC-B1-llvm.json",
        "d7b65649a4dd54becea0a52aabbc5af5",
        0,
    ),
    // conv2d_NCHWc 1x1 stride 2 + bias
    (
        "tvm_ansor_bench_nchwc/resnet_18.best.json",
        "63163dfaa69dc65fc4319ac2dfa138da",
        0,
    ),
    // depthwise conv2d_NCHWc + bias + clip
    (
        "tvm_ansor_bench_nchwc/mobilenet_v2.best.json",
        r#"374c777cd99c72d8a55bbe0fd7c3a352", [1, 240, 7, 7, 4]"#,
        0,
    ),
    // winograd NHWC (data_pack, bgemm with cache_write, inverse) + bias + relu
    (
        "tvm_ansor_bench_nhwc/resnet_18.best.json",
        "38552500208b25b4035682b0e93cbce3",
        0,
    ),
    // max pool NCHWc
    (
        "tvm_ansor_bench_nchwc/resnet_18.best.json",
        "5dbf6b49975651f2bcf58cb55546df6d",
        0,
    ),
    // BERT dense with cache_write, batch_matmul with cache_write, mean/variance with rfactor
    (
        "bert_cpu/ansor-bert-tuning.stage1.log",
        r#"218090bc617f9a36fbabdf253ec28064", [14, 3072]"#,
        0,
    ),
    (
        "bert_cpu/ansor-bert-tuning.stage1.log",
        r#"32a5ff201401d5600f77ced9f22defaa", [12, 14, 14]"#,
        0,
    ),
    (
        "bert_cpu/ansor-bert-tuning.stage1.log",
        "dde89265d3f1a59075cee648386eac1e",
        0,
    ),
];

#[test]
fn real_records_compile_and_match_the_reference() {
    for &(file, key, nth) in CASES {
        let rec = record(file, key, nth);
        let dag = recognize(&WorkloadKey::parse(&rec.task.workload_key).unwrap())
            .unwrap()
            .dag;
        let state = replay(&stage_inits_from_dag(&dag), &rec.steps).unwrap();
        let t0 = Instant::now();
        let k = lower(&dag, &state, &LowerOptions::default())
            .unwrap_or_else(|e| panic!("{file} {key}: {e}"));
        let t_lower = t0.elapsed();
        let t1 = Instant::now();
        let ck =
            compile(&k, &CodegenOptions::default()).unwrap_or_else(|e| panic!("{file} {key}: {e}"));
        let t_compile = t1.elapsed();
        let inputs = random_inputs(&dag, 3);
        let t2 = Instant::now();
        let reference = evaluate(&dag, &inputs).unwrap();
        let t_eval = t2.elapsed();
        let mut args = kernel_args(&k, &inputs).unwrap();
        ck.run(&mut args, &RunOptions::default()).unwrap();
        let (abs, rel) = compare_outputs(&k, &args, &reference).unwrap();
        println!(
            "{file} {}: lower {:.1} ms, compile {:.1} ms (reference {:.0} ms), rel err {rel:.2e} (abs {abs:.2e})",
            &key[..8],
            t_lower.as_secs_f64() * 1e3,
            t_compile.as_secs_f64() * 1e3,
            t_eval.as_secs_f64() * 1e3
        );
        assert!(
            rel <= ttdb::loopnest::verify::RTOL,
            "{file} {key}: relative error {rel}"
        );
    }
}

/// Lowering + LLVM compilation time of every resnet-50 task (real shapes).
#[test]
fn resnet50_tasks_lower_and_compile_quickly() {
    let path = common::corpus_dir().join("ansor/tvm_gallery/resnet-50-NHWC-B1-llvm.json");
    let text = std::fs::read(&path).unwrap();
    let mut rows = Vec::new();
    for (_, b) in lines(&text) {
        let LogLine::Record { record, .. } = parse_line(b) else {
            continue;
        };
        let dag = recognize(&WorkloadKey::parse(&record.task.workload_key).unwrap())
            .unwrap()
            .dag;
        let state = replay(&stage_inits_from_dag(&dag), &record.steps).unwrap();
        let t0 = Instant::now();
        let k = lower(&dag, &state, &LowerOptions::default()).unwrap();
        let lower_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        compile(&k, &CodegenOptions::default()).unwrap();
        let compile_ms = t1.elapsed().as_secs_f64() * 1e3;
        let name = dag
            .stages
            .iter()
            .rev()
            .find(|s| s.compute().is_some_and(|c| !c.reduce_axes.is_empty()))
            .map_or("?", |s| s.name.as_str())
            .to_string();
        rows.push((name, lower_ms, compile_ms));
    }
    println!(
        "{:<24} {:>9} {:>11} {:>9}",
        "anchor stage", "lower ms", "compile ms", "total ms"
    );
    for (n, l, c) in &rows {
        println!("{n:<24} {l:>9.2} {c:>11.1} {:>9.1}", l + c);
    }
    let mut total: Vec<f64> = rows.iter().map(|r| r.1 + r.2).collect();
    total.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let max_lower = rows.iter().map(|r| r.1).fold(0.0, f64::max);
    println!(
        "{} tasks: lower max {max_lower:.2} ms; lower+compile median {:.1} ms, max {:.1} ms",
        rows.len(),
        total[total.len() / 2],
        total[total.len() - 1]
    );
    assert_eq!(rows.len(), 26);
    assert!(max_lower < 100.0, "lowering took {max_lower:.1} ms");
}

/// ResNet-50's 1x1 conv 32x28x28x4 -> 16x28x28x32 and a Droplet candidate's steps on it
/// (two inner loops fused and vectorized, 512 unroll steps), with the inner ow and oc tile
/// lengths given.
fn fused_candidate(ow: [i64; 3], oc: [i64; 3]) -> (ttdb::ir::Dag, Kernel) {
    let path = common::corpus_dir().join("ansor/tvm_ansor_bench_full_nchwc/resnet_50.json");
    let text = std::fs::read(&path).unwrap();
    let record = lines(&text)
        .filter_map(|(_, b)| match parse_line(b) {
            LogLine::Record { record, .. } => Some(record),
            _ => None,
        })
        .find(|r| {
            r.task
                .workload_key
                .starts_with(r#"["56243f87a374639e0c94f50873d7257f", [1, 32, 28, 28, 4]"#)
        })
        .expect("resnet_50's 1x1 conv 32x28x28x4 -> 16x28x28x32 in the corpus");
    let dag = recognize(&WorkloadKey::parse(&record.task.workload_key).unwrap())
        .unwrap()
        .dag;
    let steps = r#"[["CI", 6], ["CI", 4], ["SP", 2, 0, 1, [1, 1, 1], 1], ["SP", 2, 4, 16, [2, 1, 2], 1],
 ["SP", 2, 8, 28, [2, 2, 1], 1], ["SP", 2, 12, 28, OW, 1], ["SP", 2, 16, 32, OC, 1],
 ["SP", 2, 20, 128, [16], 1], ["SP", 2, 22, 1, [1], 1], ["SP", 2, 24, 1, [1], 1],
 ["RE", 2, [0, 4, 8, 12, 16, 1, 5, 9, 13, 17, 20, 22, 24, 2, 6, 10, 14, 18, 21, 23, 25, 3, 7, 11, 15, 19]],
 ["CR", 7], ["FU", 2, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]], ["AN", 2, 0, 3], ["FU", 7, [0, 1, 2]],
 ["AN", 7, 0, 3], ["PR", 2, 0, "auto_unroll_max_step$512"], ["FU", 2, [15, 16]], ["AN", 2, 15, 2]]"#
        .replace("OW", &format!("{ow:?}"))
        .replace("OC", &format!("{oc:?}"));
    let steps: Vec<ttdb::ansor::Step> = serde_json::from_str::<serde_json::Value>(&steps)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| ttdb::ansor::Step::from_json(s).unwrap())
        .collect();
    let state = replay(&stage_inits_from_dag(&dag), &steps).unwrap();
    let k = lower(&dag, &state, &LowerOptions::default()).unwrap();
    (dag, k)
}

/// Runs `c` (compiled from `k`) on random inputs: within tolerance of the DAG's reference.
fn assert_matches_reference(dag: &ttdb::ir::Dag, k: &Kernel, c: &ttdb::codegen::CompiledKernel) {
    let inputs = random_inputs(dag, 3);
    let reference = evaluate(dag, &inputs).unwrap();
    let mut args = kernel_args(k, &inputs).unwrap();
    c.run(&mut args, &RunOptions::default()).unwrap();
    let (_, rel) = compare_outputs(k, &args, &reference).unwrap();
    assert!(rel <= ttdb::loopnest::verify::RTOL, "relative error {rel}");
}

/// The fused loop (ow 2 x oc 8) has a constant offset per lane, so it is one vector body
/// (it was scalarized once: 747k LLVM instructions, and LLVM's loop vectorizer spent more
/// than ten minutes on it). It compiles and matches the reference.
#[test]
fn fused_inner_loops_are_vectorized_not_scalarized() {
    let (dag, k) = fused_candidate([1, 14, 2], [2, 1, 8]);
    let c = compile(&k, &CodegenOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.stats.scalarized_loops, 0);
    assert!(c.stats.vector_loops > 0);
    assert_matches_reference(&dag, &k, &c);
}

/// A fused loop whose lanes' offsets differ by chunk (14 x 3 lanes: no chunk width is a
/// multiple of 3) is scalarized, and still compiles and matches the reference. Over a size
/// limit, the same kernel is refused before the LLVM pipeline runs (the default limit
/// once stopped a scalarized candidate of 747k instructions that kept LLVM's loop
/// vectorizer busy for more than ten minutes; that candidate is now a vector body).
#[test]
fn code_too_large_for_llvm_is_refused_before_the_pipeline() {
    let (dag, k) = fused_candidate([1, 2, 14], [2, 1, 3]);
    let c = compile(&k, &CodegenOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    assert!(c.stats.scalarized_loops > 0);
    assert_matches_reference(&dag, &k, &c);
    let mut opts = CodegenOptions::default();
    opts.limits.max_ir_instructions = 2_000;
    let err = compile(&k, &opts).unwrap_err().to_string();
    assert!(err.contains("LLVM instructions in one function"), "{err}");
}
