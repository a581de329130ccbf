//! The real records of `corpus/fidelity_examples/` (one per class ttdb once refused, see its
//! README) end to end: recognized by md5, replayed, lowered, compiled with LLVM, run and
//! compared with the reference at their real shapes.
mod common;
use ttdb::ansor::{Record, WorkloadKey};
use ttdb::evaluate::{evaluate_steps, EvalOptions, Reference};
use ttdb::recognize::{recognize, Recognized, RecognizedBy};

/// Line `line` (from 1) of `file` in `fidelity_examples/`, recognized.
fn example(file: &str, line: usize) -> (Record, Recognized) {
    let path = common::corpus_dir().join("fidelity_examples").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let raw = text.lines().nth(line - 1).expect("no such line");
    let record = Record::parse(raw).unwrap();
    let key = WorkloadKey::parse(&record.task.workload_key).unwrap();
    let rec = recognize(&key).unwrap_or_else(|e| panic!("{file}:{line}: {e}"));
    assert_eq!(
        rec.recognized_by,
        RecognizedBy::Md5,
        "{file}:{line}: not recognized by md5"
    );
    (record, rec)
}

/// Replays, lowers, compiles and verifies the example; returns its op class.
fn verifies(file: &str, line: usize) -> String {
    let (record, rec) = example(file, line);
    let reference = Reference::new(&rec.dag, 7).unwrap();
    let opts = EvalOptions {
        verify_only: true,
        ..EvalOptions::default()
    };
    let r = evaluate_steps(&rec.dag, &record.steps, &reference, &opts);
    assert!(
        r.verified(),
        "{file}:{line} ({}): {:?}",
        rec.signature.op_class,
        r.failure
    );
    assert!(r.rel_error.unwrap() <= ttdb::loopnest::verify::RTOL);
    rec.signature.op_class
}

/// Droplet's `[4, 4, 4]` on an extent of 14: the reduction's init stage needs its guard too.
#[test]
fn droplet_over_long_splits_verify() {
    let class = verifies("bennu_densenet201_droplet_overlong.json", 1);
    assert_eq!(class, "conv2d_nchwc+add+relu");
}
