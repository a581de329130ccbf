//! Import throughput on a large log: corpus records replicated with varied keys (one new
//! workload per replica), >= 1,000,000 records. Reports records/s (median of runs) and the
//! database bytes per record on top of the raw text.
//!
//! `cargo bench --bench import` (TTDB_BENCH_RECORDS overrides the record count).
use std::path::Path;
use std::time::Instant;
use ttdb::store::import::import_file;
use ttdb::store::Store;

fn corpus_lines() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/ansor");
    assert!(dir.is_dir(), "the shared corpus is missing at {}", dir.display());
    let mut lines = Vec::new();
    for sub in ["tvm_ansor_bench_nchwc", "tvm_ansor_bench_nhwc", "jaspann_tt", "bert_cpu"] {
        let mut files: Vec<_> = std::fs::read_dir(dir.join(sub)).unwrap().map(|e| e.unwrap().path()).collect();
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
fn key_variants(raw_key: &str, batches: usize) -> Vec<String> {
    let key = ttdb::ansor::WorkloadKey::parse(raw_key).unwrap();
    let Ok(r) = ttdb::recognize::recognize(&key) else { return vec![raw_key.to_string()] };
    let (Some(spec), Some(era)) = (r.spec.clone(), r.era) else { return vec![raw_key.to_string()] };
    let out = r.signature.output.clone();
    let key_inputs = r.dag.io_shapes()[..spec.num_inputs()].to_vec();
    let canonical = spec.canonical_inputs(&key_inputs);
    let Ok(canonical) = canonical else { return vec![raw_key.to_string()] };
    let mut keys = Vec::new();
    for b in 1..=batches as i64 {
        let scaled: Vec<Vec<i64>> = canonical
            .iter()
            .enumerate()
            .map(|(i, s)| if i == 0 || *s == out { [vec![s[0] * b], s[1..].to_vec()].concat() } else { s.clone() })
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
fn write_log(path: &Path, n: usize, batches: usize) -> (u64, usize) {
    let base = corpus_lines();
    let mut variants: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
    let mut out = String::with_capacity(n * 1100);
    for i in 0..n {
        let replica = i / base.len();
        let line = &base[i % base.len()];
        let record = ttdb::ansor::Record::parse(line).unwrap();
        let keys = variants.entry(record.task.workload_key.clone()).or_insert_with(|| key_variants(&record.task.workload_key, batches));
        let new_key = &keys[replica % keys.len()];
        let old_escaped = serde_json::to_string(&record.task.workload_key).unwrap();
        let new_escaped = serde_json::to_string(new_key).unwrap();
        let line = line.replacen(&old_escaped, &new_escaped, 1);
        let cut = line.rfind("\"}").expect("records end with the version string");
        out.push_str(&line[..cut]);
        out.push_str(&format!("-r{replica}\"}}\n"));
    }
    std::fs::write(path, &out).unwrap();
    (out.len() as u64, variants.values().map(Vec::len).sum())
}

/// CPU seconds (user + system, all threads) this process has used: a load-independent cost.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn main() {
    let n: usize = std::env::var("TTDB_BENCH_RECORDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("big.json");
    let batches: usize = std::env::var("TTDB_BENCH_BATCHES").ok().and_then(|s| s.parse().ok()).unwrap_or(16);
    let (raw_bytes, keys) = write_log(&log, n, batches);
    println!("log: {n} records over {keys} workload keys, {:.1} MB", raw_bytes as f64 / 1e6);
    // Parse alone, one thread: the ceiling of what the inserter can be fed per core.
    let buf = std::fs::read(&log).unwrap();
    let t = Instant::now();
    let parsed = ttdb::ansor::log::lines(&buf)
        .filter(|(_, l)| matches!(ttdb::ansor::parse_line(l), ttdb::ansor::LogLine::Record { .. }))
        .count();
    println!("parse only (1 thread): {:.0} records/s", parsed as f64 / t.elapsed().as_secs_f64());
    if std::env::var_os("TTDB_BENCH_PARSE_ONLY").is_some() {
        return;
    }
    let mut rates = Vec::new();
    let mut overhead = 0.0;
    for run in 0..3 {
        let db = dir.path().join(format!("bench{run}.db"));
        let mut store = Store::open(&db).unwrap();
        let t = Instant::now();
        let cpu = cpu_seconds();
        let r = import_file(&mut store, &log, &|_| {}).unwrap();
        let secs = t.elapsed().as_secs_f64();
        let cpu_us = (cpu_seconds() - cpu) * 1e6 / n as f64;
        assert_eq!((r.inserted, r.rejected.len()), (n, 0));
        store.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        let size = std::fs::metadata(&db).unwrap().len();
        overhead = (size as f64 - raw_bytes as f64) / n as f64;
        println!(
            "run {run}: {secs:.2} s, {:.0} records/s, {cpu_us:.1} CPU-us/record, db {:.1} MB = raw + {overhead:.0} bytes/record, {} workloads",
            n as f64 / secs,
            size as f64 / 1e6,
            r.new_workloads
        );
        rates.push(n as f64 / secs);
        drop(store);
        std::fs::remove_file(&db).ok();
    }
    rates.sort_by(f64::total_cmp);
    println!("median: {:.0} records/s; database overhead {overhead:.0} bytes/record over the raw text", rates[1]);
    println!("targets: >= 200000 records/s, <= 400 bytes/record");
}
