//! LLVM pass pipelines side by side on real schedules: for the best record of each workload
//! in a few corpus logs (NCHWc and NHWC convs, depthwise, dense, batch_matmul, pools,
//! softmax), build the kernel with each pipeline, verify it, and time the builds
//! interleaved (A B A B ...), so both see the same machine. Prints per workload the run time
//! and the compile time of each, then the geomean ratios: what a lighter pipeline costs in
//! kernel speed against what it saves in compile time (the search's trials/s).
//!
//! `cargo bench --bench pipeline` compares `default<O3>` with ttdb's default pipeline;
//! `TTDB_PIPELINES='P1;P2'` names others, `TTDB_PIPELINE_LIMIT` caps workloads per log (8).
#[path = "common/stats.rs"]
mod stats;
use stats::{geomean, median};
use std::collections::HashMap;
use std::time::Instant;
use ttdb::ansor::{Record, WorkloadKey};
use ttdb::codegen::CodegenOptions;
use ttdb::evaluate::{build_steps, EvalOptions, Reference};
use ttdb::measure::runner::MeasureOptions;

const LOGS: [&str; 4] = [
    "tvm_ansor_bench_nchwc/resnet_50.best.json",
    "tvm_ansor_bench_nchwc/mobilenet_v2.best.json",
    "tvm_ansor_bench_nhwc/resnet_50.best.json",
    "bert_cpu/ansor-bert-tuning.stage1.log",
];

fn main() {
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/ansor");
    assert!(
        corpus.is_dir(),
        "the shared corpus is missing at {}",
        corpus.display()
    );
    let pipelines: Vec<String> = std::env::var("TTDB_PIPELINES")
        .map(|s| s.split(';').map(str::to_string).collect())
        .unwrap_or_else(|_| vec!["default<O3>".into(), CodegenOptions::default().pipeline]);
    let limit: usize = std::env::var("TTDB_PIPELINE_LIMIT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let host = ttdb::target::Target::detect().host;
    println!(
        "host: {} ({}, {} cores)",
        host.cpu_model, host.llvm_cpu, host.cores
    );
    for (i, p) in pipelines.iter().enumerate() {
        println!("pipeline {}: {p}", (b'A' + i as u8) as char);
    }
    let measure = MeasureOptions {
        warmup: 1,
        repeat: 1,
        min_repeat_ms: 20,
        ..MeasureOptions::default()
    };
    let (mut run_ratio, mut compile_ratio) = (Vec::new(), Vec::new());
    println!(
        "\n{:<14} {:<38} {:>9} {:>9} {:>7} {:>11} {:>11}",
        "log", "workload", "A ms", "B ms", "B/A", "A build ms", "B build ms"
    );
    for log in LOGS {
        let text = std::fs::read_to_string(corpus.join(log)).expect("corpus log");
        // The best valid record of each workload, in order of first appearance.
        let mut best: Vec<Record> = Vec::new();
        let mut at: HashMap<String, usize> = HashMap::new();
        for r in text
            .lines()
            .filter_map(|l| Record::parse(l).ok())
            .filter(|r| r.result.is_valid())
        {
            match at.get(&r.task.workload_key) {
                Some(&i) if best[i].result.mean_cost() <= r.result.mean_cost() => {}
                Some(&i) => best[i] = r,
                None => {
                    at.insert(r.task.workload_key.clone(), best.len());
                    best.push(r);
                }
            }
        }
        for r in best.iter().take(limit) {
            let Ok(key) = WorkloadKey::parse(&r.task.workload_key) else {
                continue;
            };
            let Ok(rec) = ttdb::recognize::recognize(&key) else {
                continue;
            };
            let Ok(reference) = Reference::new(&rec.dag, 7) else {
                continue;
            };
            let builds: Vec<_> = pipelines
                .iter()
                .map(|p| {
                    let opts = EvalOptions {
                        measure: measure.clone(),
                        codegen: CodegenOptions {
                            pipeline: p.clone(),
                            ..CodegenOptions::default()
                        },
                        ..EvalOptions::default()
                    };
                    let t = Instant::now();
                    let b = build_steps(&rec.dag, &r.steps, &opts);
                    (b, t.elapsed().as_secs_f64() * 1e3, opts)
                })
                .collect();
            let mut prepared = Vec::new();
            for (b, _, opts) in &builds {
                match b.prepare(&reference, opts) {
                    Ok(p) => prepared.push(p),
                    Err(e) => {
                        println!(
                            "{:<14} {:<38} skipped: {:?}",
                            short(log),
                            rec.signature.op_class,
                            e.failure
                        );
                        break;
                    }
                }
            }
            if prepared.len() != builds.len() {
                continue;
            }
            let mut samples = vec![Vec::new(); prepared.len()];
            for _ in 0..5 {
                for (p, s) in prepared.iter_mut().zip(&mut samples) {
                    if let Ok(m) = p.time(&measure) {
                        s.push(m.median);
                    }
                }
            }
            let med: Vec<f64> = samples.iter().map(|s| median(s) * 1e3).collect();
            let (a, b) = (med[0], *med.get(1).unwrap_or(&med[0]));
            let (ca, cb) = (builds[0].1, builds.get(1).map_or(builds[0].1, |x| x.1));
            run_ratio.push(b / a);
            compile_ratio.push(cb / ca);
            println!(
                "{:<14} {:<38} {a:>9.3} {b:>9.3} {:>7.3} {ca:>11.0} {cb:>11.0}",
                short(log),
                format!("{} {}", rec.signature.op_class, short_shape(&key.raw)),
                b / a
            );
        }
    }
    println!(
        "\n{} workloads: run time B/A geomean {:.3} (median {:.3}); build time B/A geomean {:.3}",
        run_ratio.len(),
        geomean(&run_ratio),
        median(&run_ratio),
        geomean(&compile_ratio)
    );
}

fn short(log: &str) -> String {
    let (dir, file) = log.split_once('/').unwrap_or(("", log));
    format!(
        "{}/{}",
        &dir[dir.len().saturating_sub(5)..],
        file.split('.').next().unwrap_or(file)
    )
}

/// The key's argument list, shortened for a table cell.
fn short_shape(key: &str) -> String {
    let s: String = key
        .split_once(',')
        .map_or(key, |x| x.1)
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    s.chars().take(24).collect()
}
