//! The full tuning histories (`../shared/corpus/ansor/tvm_ansor_bench_full_nchwc/`) as the
//! Droplet and stability benches read them, and how they time schedules side by side.
#![allow(dead_code)]
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use ttdb::ansor::{Record, Step, WorkloadKey};
use ttdb::evaluate::EvalOptions;
use ttdb::measure::runner::MeasureOptions;
use ttdb::recognize::Recognized;

/// The directory of the full histories.
pub fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/ansor/tvm_ansor_bench_full_nchwc")
}

pub struct Task {
    pub key: String,
    /// (position in the task's history, logged mean cost, steps) of the valid records.
    pub records: Vec<(usize, f64, Vec<Step>)>,
    /// Records of the task in the log, failed ones included.
    pub total: usize,
}

impl Task {
    /// The valid record of lowest logged mean cost (the first of equals).
    pub fn best_logged(&self) -> Option<&[Step]> {
        self.records
            .iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|r| r.2.as_slice())
    }
}

/// The tasks of a log, in the order they first appear, each with its records in history
/// order.
pub fn tasks_of(path: &Path) -> Vec<Task> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (the shared corpus is needed)", path.display()));
    let mut order: Vec<String> = Vec::new();
    let mut by_key: BTreeMap<String, Task> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let r = Record::parse(line).expect("corpus records parse");
        let key = r.task.workload_key.clone();
        let t = by_key.entry(key.clone()).or_insert_with(|| {
            order.push(key.clone());
            Task {
                key,
                records: vec![],
                total: 0,
            }
        });
        if r.result.error_no.0 == 0 {
            let cost = r.result.costs.iter().sum::<f64>() / r.result.costs.len().max(1) as f64;
            t.records.push((t.total, cost, r.steps));
        }
        t.total += 1;
    }
    order
        .into_iter()
        .filter_map(|k| by_key.remove(&k))
        .collect()
}

/// The task's workload recognized, with its row label (`045ab5:1x16x14x14x64`), when it
/// is a conv; None otherwise or when it is not recognized.
pub fn conv_task(key: &str) -> Option<(Recognized, String)> {
    let rec = ttdb::recognize::recognize(&WorkloadKey::parse(key).ok()?).ok()?;
    if !rec.signature.op_class.contains("conv") {
        return None;
    }
    let out: Vec<String> = rec.signature.output.iter().map(|d| d.to_string()).collect();
    let label = format!("{}:{}", &key[2..8], out.join("x"));
    Some((rec, label))
}

/// How the benches time the schedules they compare: 1 warm-up, 10 timings of >= 50 ms.
pub fn side_by_side_eval() -> EvalOptions {
    EvalOptions {
        measure: MeasureOptions {
            warmup: 1,
            repeat: 10,
            min_repeat_ms: 50,
            ..MeasureOptions::default()
        },
        ..EvalOptions::default()
    }
}
