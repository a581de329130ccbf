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

/// Writes `n` records; replica `r` rewrites the key's leading batch dim `[1, ` to `[r+2, `
/// (a new workload per replica) and tags the version string, so every line is distinct.
fn write_log(path: &Path, n: usize) -> u64 {
    let base = corpus_lines();
    let mut out = String::with_capacity(n * 1100);
    for i in 0..n {
        let replica = i / base.len();
        let l = &base[i % base.len()];
        let line = l.replacen("[1, ", &format!("[{}, ", replica + 2), 1);
        let cut = line.rfind("\"}").expect("records end with the version string");
        out.push_str(&line[..cut]);
        out.push_str(&format!("-r{replica}\"}}\n"));
    }
    std::fs::write(path, &out).unwrap();
    out.len() as u64
}

fn main() {
    let n: usize = std::env::var("TTDB_BENCH_RECORDS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("big.json");
    let raw_bytes = write_log(&log, n);
    println!("log: {n} records, {:.1} MB", raw_bytes as f64 / 1e6);
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
        let r = import_file(&mut store, &log, &|_| {}).unwrap();
        let secs = t.elapsed().as_secs_f64();
        assert_eq!((r.inserted, r.rejected.len()), (n, 0));
        store.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        let size = std::fs::metadata(&db).unwrap().len();
        overhead = (size as f64 - raw_bytes as f64) / n as f64;
        println!(
            "run {run}: {secs:.2} s, {:.0} records/s, db {:.1} MB = raw + {overhead:.0} bytes/record, {} workloads",
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
