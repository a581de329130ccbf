//! End-to-end on real records (a representative sample; `ttdb verify --all` is the full
//! job): recognize → replay → lower → LLVM → run → compare with the reference.
use crate::common;
use std::time::Duration;
use ttdb::ansor::{Record, WorkloadKey};
use ttdb::evaluate::{evaluate_default, evaluate_steps, EvalOptions, Reference};
use ttdb::measure::runner::MeasureOptions;

/// First record of each listed file whose key's class starts with `class`.
fn record_of(file: &str, class: &str) -> (Record, ttdb::recognize::Recognized) {
    let path = common::corpus_dir().join("ansor").join(file);
    for line in std::fs::read_to_string(&path).unwrap().lines() {
        let Ok(r) = Record::parse(line) else { continue };
        if !r.result.is_valid() {
            continue;
        }
        let rec =
            ttdb::recognize::recognize(&WorkloadKey::parse(&r.task.workload_key).unwrap()).unwrap();
        if rec.signature.op_class.starts_with(class) {
            return (r, rec);
        }
    }
    panic!("no valid {class} record in {file}");
}

fn verify_only() -> EvalOptions {
    EvalOptions {
        verify_only: true,
        ..EvalOptions::default()
    }
}

#[test]
fn real_records_compile_run_and_verify_at_their_real_shapes() {
    let sample = [
        (
            "tvm_gallery/resnet-50-NHWC-B1-llvm.json",
            "conv2d_nhwc+add+relu",
        ),
        ("tvm_gallery/resnet-50-NHWC-B1-llvm.json", "softmax"),
        ("tvm_gallery/resnet-50-NHWC-B1-llvm.json", "pool_max"),
        (
            "tvm_ansor_bench_nchwc/resnet_18.best.json",
            "conv2d_nchwc+add+relu",
        ),
        (
            "tvm_ansor_bench_nchwc/mobilenet_v2.best.json",
            "depthwise_conv2d_nchwc",
        ),
        (
            "tvm_ansor_bench_nhwc/resnet_18.best.json",
            "conv2d_winograd_nhwc",
        ),
        ("bert_cpu/ansor-bert-tuning.stage1.log", "dense"),
        ("bert_cpu/ansor-bert-tuning.stage1.log", "batch_matmul"),
        ("tvm_gallery/matmul.json", "matmul+add"),
    ];
    let mut failures = Vec::new();
    for (file, class) in sample {
        let (record, rec) = record_of(file, class);
        let reference = Reference::new(&rec.dag, 11).unwrap();
        let tuned = evaluate_steps(&rec.dag, &record.steps, &reference, &verify_only());
        eprintln!(
            "{file:<46} {:<32} verified={} rel_err={:.1e} lower+compile={:.0} ms",
            rec.signature.op_class,
            tuned.verified(),
            tuned.rel_error.unwrap_or(f64::NAN),
            tuned.total_compile_time().as_secs_f64() * 1e3
        );
        if !tuned.verified() {
            failures.push(format!("{file} {class}: {:?}", tuned.failure));
        }
        assert!(tuned.rel_error.unwrap_or(0.0) <= ttdb::loopnest::verify::RTOL);
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn a_wrong_kernel_fails_verification() {
    let (record, rec) = record_of("bert_cpu/ansor-bert-tuning.stage1.log", "dense");
    let mut reference = Reference::new(&rec.dag, 11).unwrap();
    // Corrupt one expected value: the kernel must now be reported as a wrong answer.
    reference.expected[0].1[0] += 1.0;
    let e = evaluate_steps(&rec.dag, &record.steps, &reference, &verify_only());
    let f = e.failure.clone().expect("must fail");
    assert_eq!(f.error_no, 5, "{}", f.message);
    assert!(!e.verified() && e.median().is_none());
}

#[test]
fn a_kernel_over_its_timeout_is_reported_not_hung() {
    // The naive schedule of a 1024^3 matmul takes seconds; give it 20 ms.
    let (_, rec) = record_of("tvm_gallery/matmul.json", "matmul+add");
    let reference = Reference::new(&rec.dag, 1).unwrap();
    let opts = EvalOptions {
        measure: MeasureOptions {
            timeout: Some(Duration::from_millis(20)),
            ..MeasureOptions::default()
        },
        ..EvalOptions::default()
    };
    let t = std::time::Instant::now();
    let e = evaluate_default(&rec.dag, &reference, &opts);
    assert_eq!(
        e.failure.as_ref().map(|f| f.error_no),
        Some(7),
        "{:?}",
        e.failure
    );
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "the timeout did not stop the kernel"
    );
}
