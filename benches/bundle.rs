//! Bundles on the whole corpus (every Ansor log of ../shared/corpus): bytes per record,
//! plain and zstd, against the logs themselves; export, read (every hash and the manifest
//! checked) and import throughput, against a plain `import` of the same logs, side by side.
//!
//! `cargo bench --bench bundle` (TTDB_BENCH_RUNS: timed repetitions, default 3; medians).
use std::path::{Path, PathBuf};
use std::time::Instant;
use ttdb::bundle::format::{self, Limits};
use ttdb::bundle::{self, Selection};
use ttdb::store::Store;

fn corpus_logs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/ansor");
    let dirs = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("the shared corpus is missing at {}: {e}", root.display()));
    let mut out = Vec::new();
    for d in dirs {
        for f in std::fs::read_dir(d.unwrap().path()).unwrap() {
            out.push(f.unwrap().path());
        }
    }
    out.sort();
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let runs: usize = std::env::var("TTDB_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let host = ttdb::target::Target::detect().host;
    println!(
        "host: {} ({}, {} cores)",
        host.cpu_model, host.llvm_cpu, host.cores
    );
    let logs = corpus_logs();
    let log_bytes: u64 = logs
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    let dir = tempfile::tempdir().unwrap();

    let (mut t_import, mut t_export, mut t_read, mut t_bundle_import) =
        (vec![], vec![], vec![], vec![]);
    let mut sizes = (0, 0, 0);
    for run in 0..runs {
        let db = dir.path().join(format!("logs{run}.db"));
        let mut store = Store::open(&db).unwrap();
        let t = Instant::now();
        for l in &logs {
            ttdb::store::import_file(&mut store, l, &|_| {}).unwrap();
        }
        t_import.push(t.elapsed().as_secs_f64());

        let t = Instant::now();
        let b = bundle::export(
            &store,
            &Selection::All,
            false,
            bundle::creation_now(None, None),
        )
        .unwrap();
        let plain = b.to_bytes(false).unwrap();
        t_export.push(t.elapsed().as_secs_f64());
        let packed = b.to_bytes(true).unwrap();
        sizes = (b.records.len(), plain.len(), packed.len());

        let t = Instant::now();
        let back = format::read(&packed, &Limits::default()).unwrap();
        t_read.push(t.elapsed().as_secs_f64());

        let mut fresh = Store::open(&dir.path().join(format!("bundle{run}.db"))).unwrap();
        let t = Instant::now();
        let back2 = format::read(&packed, &Limits::default()).unwrap();
        bundle::import(&mut fresh, Path::new("corpus.ttdb"), &back2).unwrap();
        t_bundle_import.push(t.elapsed().as_secs_f64());
        assert_eq!(back.records.len(), b.records.len());
    }
    let (n, plain, packed) = sizes;
    let per = |bytes: usize| bytes as f64 / n as f64;
    println!(
        "corpus: {} logs, {n} distinct records, {:.1} MB of logs ({:.0} bytes/record)",
        logs.len(),
        log_bytes as f64 / 1e6,
        log_bytes as f64 / n as f64
    );
    println!(
        "bundle: {:.1} MB plain ({:.0} bytes/record, {:.2}x the logs), {:.1} MB zstd ({:.0} bytes/record, {:.3}x)",
        plain as f64 / 1e6,
        per(plain),
        plain as f64 / log_bytes as f64,
        packed as f64 / 1e6,
        per(packed),
        packed as f64 / log_bytes as f64
    );
    let rate = |t: f64| n as f64 / t;
    let (imp, exp, rd, bimp) = (
        median(t_import),
        median(t_export),
        median(t_read),
        median(t_bundle_import),
    );
    println!("medians of {runs} runs, records/s:");
    println!(
        "  import of the logs        {:>9.0}  ({imp:.2} s)  1.00x",
        rate(imp)
    );
    println!(
        "  bundle export (plain)     {:>9.0}  ({exp:.2} s)  {:.2}x",
        rate(exp),
        imp / exp
    );
    println!(
        "  bundle read + check (zstd){:>9.0}  ({rd:.2} s)  {:.2}x",
        rate(rd),
        imp / rd
    );
    println!(
        "  bundle import (zstd)      {:>9.0}  ({bimp:.2} s)  {:.2}x",
        rate(bimp),
        imp / bimp
    );
}
