//! Smoke test: real records lowered at their REAL shapes, compiled with LLVM, run, and
//! compared with the DAG's reference evaluator; lowering and compile times are reported.
mod common;

use std::time::Instant;
use ttdb::ansor::log::{lines, parse_line, LogLine};
use ttdb::ansor::{Record, WorkloadKey};
use ttdb::codegen::{compile, CodegenOptions, RunOptions};
use ttdb::ir::eval::{evaluate, random_inputs};
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

/// (file, key hash prefix, which record with that key)
const CASES: &[(&str, &str, usize)] = &[
    // resnet-50 1x1 conv + bias + residual add + relu, conv computed at the relu's tile
    ("tvm_gallery/resnet-50-NHWC-B1-llvm.json", "875556d12d0be2269206a7775d5296a6", 0),
];

#[test]
fn real_records_compile_and_match_the_reference() {
    for &(file, key, nth) in CASES {
        let rec = record(file, key, nth);
        let dag = recognize(&WorkloadKey::parse(&rec.task.workload_key).unwrap()).unwrap().dag;
        let state = replay(&stage_inits_from_dag(&dag), &rec.steps).unwrap();
        let t0 = Instant::now();
        let k = lower(&dag, &state, &LowerOptions::default()).unwrap();
        let t_lower = t0.elapsed();
        println!("{}", ttdb::loopnest::kernel_to_string(&k));
        let t1 = Instant::now();
        let ck = compile(&k, &CodegenOptions::default()).unwrap();
        let t_compile = t1.elapsed();
        let inputs = random_inputs(&dag, 3);
        let reference = evaluate(&dag, &inputs).unwrap();
        let mut args = kernel_args(&k, &inputs).unwrap();
        ck.run(&mut args, &RunOptions::default()).unwrap();
        let (abs, rel) = compare_outputs(&k, &args, &reference).unwrap();
        println!("{file} {key}: lower {:.1} ms, compile {:.1} ms, rel err {rel:.2e} (abs {abs:.2e})", t_lower.as_secs_f64() * 1e3, t_compile.as_secs_f64() * 1e3);
        assert!(rel < 1e-4);
    }
}
