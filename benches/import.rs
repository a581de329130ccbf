//! Import throughput on a large log: corpus records replicated over batch-size variants of
//! their keys, >= 1,000,000 records. Reports records/s (median of runs) and the
//! database bytes per record on top of the raw text.
//!
//! `cargo bench --bench import` (TTDB_BENCH_RECORDS overrides the record count,
//! TTDB_BENCH_RUNS the number of timed imports).
mod common;

use common::write_log;
use std::time::Instant;
use ttdb::store::import::import_file;
use ttdb::store::Store;

/// CPU seconds (user + system, all threads) this process has used: a load-independent cost.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn main() {
    let n: usize = std::env::var("TTDB_BENCH_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("big.json");
    let batches: usize = std::env::var("TTDB_BENCH_BATCHES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    let (raw_bytes, keys) = write_log(&log, n, batches);
    println!(
        "log: {n} records over {keys} workload keys, {:.1} MB",
        raw_bytes as f64 / 1e6
    );
    // Parse alone, one thread: the ceiling of what the inserter can be fed per core.
    let buf = std::fs::read(&log).unwrap();
    let t = Instant::now();
    let parsed = ttdb::ansor::log::lines(&buf)
        .filter(|(_, l)| {
            matches!(
                ttdb::ansor::parse_line(l),
                ttdb::ansor::LogLine::Record { .. }
            )
        })
        .count();
    println!(
        "parse only (1 thread): {:.0} records/s",
        parsed as f64 / t.elapsed().as_secs_f64()
    );
    if std::env::var_os("TTDB_BENCH_PARSE_ONLY").is_some() {
        return;
    }
    let mut rates = Vec::new();
    let mut overhead = 0.0;
    let runs: usize = std::env::var("TTDB_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1);
    for run in 0..runs {
        let db = dir.path().join(format!("bench{run}.db"));
        let mut store = Store::open(&db).unwrap();
        let t = Instant::now();
        let cpu = cpu_seconds();
        let r = import_file(&mut store, &log, &|_| {}).unwrap();
        let secs = t.elapsed().as_secs_f64();
        let cpu_us = (cpu_seconds() - cpu) * 1e6 / n as f64;
        assert_eq!((r.inserted, r.rejected.len()), (n, 0));
        store.checkpoint().unwrap();
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
    println!(
        "median: {:.0} records/s; database overhead {overhead:.0} bytes/record over the raw text",
        rates[rates.len() / 2]
    );
    println!("targets: >= 200000 records/s, <= 400 bytes/record");
}
