//! Import throughput on a large log: corpus records replicated over batch-size variants of
//! their keys, >= 1,000,000 records. Reports records/s (median of runs) and the
//! database bytes per record on top of the raw text; on SQLite, and on PostgreSQL beside it
//! when `$TTDB_BENCH_POSTGRES` names a cluster (benches/store_scale.sh).
//!
//! `cargo bench --bench import` (TTDB_BENCH_RECORDS overrides the record count,
//! TTDB_BENCH_RUNS the number of timed imports).
mod common;
#[path = "common/stats.rs"]
mod stats;

use common::write_log;
use std::path::Path;
use std::time::Instant;
use ttdb::store::import::import_file;
use ttdb::store::{Location, OpenMode, PgUrl, Store};

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
    let runs: usize = std::env::var("TTDB_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1);
    let mut medians = Vec::new();
    for backend in backends() {
        let mut rates = Vec::new();
        let mut overhead = 0.0;
        for run in 0..runs {
            let at = backend.location(dir.path(), run);
            let mut store = Store::open_at(&at, OpenMode::Create).unwrap();
            let t = Instant::now();
            let cpu = cpu_seconds();
            let r = import_file(&mut store, &log, &|_| {}).unwrap();
            let secs = t.elapsed().as_secs_f64();
            // This process's CPU: on PostgreSQL the server's own work is not in it.
            let cpu_us = (cpu_seconds() - cpu) * 1e6 / n as f64;
            assert_eq!((r.inserted, r.rejected.len()), (n, 0));
            let size = backend.size(&store);
            overhead = (size as f64 - raw_bytes as f64) / n as f64;
            println!(
                "{} run {run}: {secs:.2} s, {:.0} records/s, {cpu_us:.1} client CPU-us/record, db {:.1} MB = raw + {overhead:.0} bytes/record, {} workloads",
                backend.name(),
                n as f64 / secs,
                size as f64 / 1e6,
                r.new_workloads
            );
            rates.push(n as f64 / secs);
            drop(store);
            backend.remove(&at, run);
        }
        let median = stats::median(&rates);
        println!(
            "{}: median {median:.0} records/s; database overhead {overhead:.0} bytes/record over the raw text",
            backend.name()
        );
        medians.push((backend.name(), median));
    }
    if let [(a, ra), (b, rb)] = medians.as_slice() {
        println!("{b} / {a}: {:.2}x the records/s", rb / ra);
    }
    println!("targets: >= 200000 records/s, <= 400 bytes/record (SQLite)");
}

/// Where the bench imports: a SQLite file, and a PostgreSQL database too when
/// `$TTDB_BENCH_POSTGRES` names a cluster (benches/store_scale.sh starts one).
enum Backend {
    Sqlite,
    Postgres(PgUrl),
}

fn backends() -> Vec<Backend> {
    let mut v = vec![Backend::Sqlite];
    match std::env::var("TTDB_BENCH_POSTGRES") {
        Ok(url) => v.push(Backend::Postgres(
            PgUrl::parse(&url).expect("$TTDB_BENCH_POSTGRES: a postgres:// URL"),
        )),
        Err(_) => println!("(SQLite only: set $TTDB_BENCH_POSTGRES, or run benches/store_scale.sh, for PostgreSQL beside it)"),
    }
    v
}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    fn location(&self, dir: &Path, run: usize) -> Location {
        match self {
            Backend::Sqlite => Location::File(dir.join(format!("bench{run}.db"))),
            Backend::Postgres(admin) => {
                ttdb::store::testing::new_database(admin, &format!("ttdb_import_bench_{run}"))
            }
        }
    }

    /// The database's bytes on disk, write-ahead log folded in.
    fn size(&self, store: &Store) -> u64 {
        match (self, store.location()) {
            (Backend::Sqlite, Location::File(path)) => {
                store.checkpoint().unwrap();
                std::fs::metadata(path).unwrap().len()
            }
            _ => store
                .sql_for_tests()
                .query_one("SELECT pg_database_size(current_database())", &[], |r| {
                    r.get::<i64>(0)
                })
                .unwrap() as u64,
        }
    }

    fn remove(&self, at: &Location, run: usize) {
        match (self, at) {
            (Backend::Sqlite, Location::File(path)) => {
                std::fs::remove_file(path).ok();
            }
            (Backend::Postgres(admin), _) => {
                let admin = Location::Postgres(admin.clone());
                ttdb::store::testing::raw_session(&admin)
                    .execute_batch(&format!("DROP DATABASE ttdb_import_bench_{run}"))
                    .unwrap();
            }
            _ => unreachable!("a backend makes its own locations"),
        }
    }
}
