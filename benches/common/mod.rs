//! Shared by the benches: a large synthetic Ansor log made from the real corpus.
#![allow(dead_code)]
use std::path::Path;

pub fn corpus_lines() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/ansor");
    assert!(
        dir.is_dir(),
        "the shared corpus is missing at {}",
        dir.display()
    );
    let mut lines = Vec::new();
    for sub in [
        "tvm_ansor_bench_nchwc",
        "tvm_ansor_bench_nhwc",
        "jaspann_tt",
        "bert_cpu",
    ] {
        let mut files: Vec<_> = std::fs::read_dir(dir.join(sub))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for f in files {
            for l in std::fs::read_to_string(&f).unwrap().lines() {
                if !l.trim().is_empty() && !l.starts_with('#') && !lines.contains(&l.to_string()) {
                    lines.push(l.to_string());
                }
            }
        }
    }
    lines
}

/// Valid variants of a relay workload key at other batch sizes, made with ttdb's own op
/// library: the recognized spec is rebuilt with the batch dim of its data input, output and
/// output-shaped operands scaled, and the new key carries the md5 of the new DAG's PrintDAG
/// text (as TVM would write it). Registered keys and specs that do not rebuild are kept as is.
pub fn key_variants(raw_key: &str, batches: usize) -> Vec<String> {
    let key = ttdb::ansor::WorkloadKey::parse(raw_key).unwrap();
    let Ok(r) = ttdb::recognize::recognize(&key) else {
        return vec![raw_key.to_string()];
    };
    let (Some(spec), Some(era)) = (r.spec.clone(), r.era) else {
        return vec![raw_key.to_string()];
    };
    let out = r.signature.output.clone();
    let key_inputs = r.dag.io_shapes()[..spec.num_inputs()].to_vec();
    let canonical = spec.canonical_inputs(&key_inputs);
    let Ok(canonical) = canonical else {
        return vec![raw_key.to_string()];
    };
    let mut keys = Vec::new();
    for b in 1..=batches as i64 {
        let scaled: Vec<Vec<i64>> = canonical
            .iter()
            .enumerate()
            .map(|(i, s)| {
                if i == 0 || *s == out {
                    [vec![s[0] * b], s[1..].to_vec()].concat()
                } else {
                    s.clone()
                }
            })
            .collect();
        if let Ok(dag) = spec.build(era, &scaled) {
            let mut items = vec![serde_json::json!(ttdb::ir::dag_hash(&dag))];
            items.extend(dag.io_shapes().into_iter().map(|s| serde_json::json!(s)));
            keys.push(serde_json::to_string(&items).unwrap().replace(",", ", "));
        }
    }
    if keys.is_empty() {
        keys.push(raw_key.to_string());
    }
    keys
}

/// Writes `n` records: corpus records cycled over batch-size variants of their keys (about
/// `batches` workloads per corpus key), each line made distinct by a replica tag on "v".
pub fn write_log(path: &Path, n: usize, batches: usize) -> (u64, usize) {
    let base = corpus_lines();
    let mut variants: std::collections::HashMap<String, Vec<String>> =
        std::collections::HashMap::new();
    let mut out = String::with_capacity(n * 1100);
    for i in 0..n {
        let replica = i / base.len();
        let line = &base[i % base.len()];
        let record = ttdb::ansor::Record::parse(line).unwrap();
        let keys = variants
            .entry(record.task.workload_key.clone())
            .or_insert_with(|| key_variants(&record.task.workload_key, batches));
        let new_key = &keys[replica % keys.len()];
        let old_escaped = serde_json::to_string(&record.task.workload_key).unwrap();
        let new_escaped = serde_json::to_string(new_key).unwrap();
        let line = line.replacen(&old_escaped, &new_escaped, 1);
        let cut = line
            .rfind("\"}")
            .expect("records end with the version string");
        out.push_str(&line[..cut]);
        out.push_str(&format!("-r{replica}\"}}\n"));
    }
    std::fs::write(path, &out).unwrap();
    (out.len() as u64, variants.values().map(Vec::len).sum())
}
