//! Search throughput: trials per second on a ResNet-50 3x3 conv (56x56x64, NHWC, the gallery
//! record `2350d19d`). A trial = re-target a mutated schedule (split factors re-drawn like
//! Ansor's tile-size mutation), lower, compile (LLVM O3 + JIT), verify against the
//! reference, time with a tuning-runner profile (1 warm-up, 3 repeats of >= 10 ms).
//! Ansor/TVM manage about 1-2 trials/s per core. Also reports the median compile time.
use std::time::Instant;
use ttdb::ansor::step::SplitStep;
use ttdb::ansor::{Record, Step, WorkloadKey};
use ttdb::evaluate::{evaluate_steps, EvalOptions, Reference};
use ttdb::measure::runner::MeasureOptions;

fn main() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/corpus/ansor/tvm_gallery/resnet-50-NHWC-B1-llvm.json");
    let text = std::fs::read_to_string(&path).expect("the shared corpus is missing");
    let record = text
        .lines()
        .filter_map(|l| Record::parse(l).ok())
        .find(|r| {
            r.task
                .workload_key
                .contains("2350d19dc42a0665244368384c66b3a5")
                && r.task.workload_key.contains("56, 56, 64")
        })
        .expect("the 56x56x64 3x3 conv record");
    let rec = ttdb::recognize::recognize(&WorkloadKey::parse(&record.task.workload_key).unwrap())
        .unwrap();
    let t = Instant::now();
    let reference = Reference::new(&rec.dag, 5).unwrap();
    println!(
        "reference at {} sampled points: {:.0} ms (once per workload)",
        reference.expected[0].0.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
    let opts = EvalOptions {
        measure: MeasureOptions {
            warmup: 1,
            repeat: 3,
            min_repeat_ms: 10,
            ..MeasureOptions::default()
        },
        ..EvalOptions::default()
    };
    let inits = ttdb::schedule::stage_inits_from_dag(&rec.dag);
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let trials = 30;
    let (mut ok, mut compile) = (0, Vec::new());
    let start = Instant::now();
    for _ in 0..trials {
        // Mutate: every SP gets random lengths, moved to the nearest valid factorization.
        let mutated: Vec<Step> = record
            .steps
            .iter()
            .map(|s| match s {
                Step::Split(sp) => Step::Split(SplitStep {
                    lengths: sp.lengths.iter().map(|_| 1 << (next() % 4)).collect(),
                    ..sp.clone()
                }),
                other => other.clone(),
            })
            .collect();
        let Ok(r) = ttdb::schedule::retarget_steps(&inits, &mutated) else {
            continue;
        };
        let e = evaluate_steps(&rec.dag, &r.steps, &reference, &opts);
        compile.push(e.total_compile_time().as_secs_f64() * 1e3);
        ok += e.verified() as usize;
    }
    let secs = start.elapsed().as_secs_f64();
    compile.sort_by(f64::total_cmp);
    println!(
        "{trials} trials in {secs:.1} s: {:.1} trials/s ({ok} verified); median compile (lower + codegen + JIT) {:.0} ms",
        trials as f64 / secs,
        compile[compile.len() / 2]
    );
}
