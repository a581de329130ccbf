//! Matching latency: `ttdb match resnet50.onnx` (a fresh process: open the database, load the
//! ONNX graph, extract kernels, match every one, print) against a database holding every
//! corpus log plus 1,000,000 synthetic records. Target: under 200 ms. Median of 7 runs.
//!
//! `cargo bench --bench matching` (TTDB_BENCH_RECORDS overrides the synthetic count; the
//! SQLite database is kept in target/bench-matching-N.db and rebuilt only when missing). With
//! `$TTDB_BENCH_POSTGRES` (benches/store_scale.sh), the same on a PostgreSQL database beside it.
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;
use ttdb::store::import::import_file;
use ttdb::store::testing::db_arg;
use ttdb::store::{Location, OpenMode, PgUrl, Store};

fn main() {
    let n: usize = std::env::var("TTDB_BENCH_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = root.join("target/release/ttdb");
    assert!(
        exe.exists(),
        "build the release binary first: cargo build --release"
    );
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("synthetic.json");
    let mut log_keys = None;
    let mut databases = vec![(
        "sqlite",
        Location::File(root.join(format!("target/bench-matching-{n}.db"))),
    )];
    match std::env::var("TTDB_BENCH_POSTGRES") {
        Ok(url) => {
            let admin = PgUrl::parse(&url).expect("$TTDB_BENCH_POSTGRES: a postgres:// URL");
            databases.push(("postgres", ttdb::store::testing::new_database(&admin, &format!("ttdb_match_bench_{n}"))));
        }
        Err(_) => println!("(SQLite only: set $TTDB_BENCH_POSTGRES, or run benches/store_scale.sh, for PostgreSQL beside it)"),
    }
    let model = root.join("../shared/corpus/onnx/torchvision_graph_only/resnet50.onnx");
    let mut medians = Vec::new();
    for (name, at) in &databases {
        let mut store = Store::open_at(at, OpenMode::Create).unwrap();
        if ttdb::store::query::stats(&store).unwrap().records == 0 {
            let keys = *log_keys.get_or_insert_with(|| common::write_log(&log, n, 16).1);
            let corpus = root.join("../shared/corpus/ansor");
            for f in ttdb::bundle::inputs::collect(&[corpus])
                .files
                .into_iter()
                .map(|f| f.path)
            {
                import_file(&mut store, &f, &|_| {}).unwrap();
            }
            let t = Instant::now();
            let r = import_file(&mut store, &log, &|_| {}).unwrap();
            println!(
                "built {name} {at}: corpus + {} synthetic records over {keys} keys ({:.1} s)",
                r.inserted,
                t.elapsed().as_secs_f64()
            );
            store.checkpoint().unwrap();
        }
        let stats = ttdb::store::query::stats(&store).unwrap();
        drop(store);
        println!(
            "{name} database: {} records, {} workload keys, {} signatures",
            stats.records, stats.workload_keys, stats.signatures
        );
        let mut times = Vec::new();
        let mut summary = String::new();
        for _ in 0..7 {
            let t = Instant::now();
            let out = Command::new(&exe)
                .arg("--db")
                .arg(db_arg(at))
                .arg("match")
                .arg(&model)
                .output()
                .unwrap();
            times.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            summary = String::from_utf8_lossy(&out.stdout)
                .lines()
                .rev()
                .take(2)
                .collect::<Vec<_>>()
                .join(" | ");
        }
        times.sort_by(f64::total_cmp);
        println!("{summary}");
        println!("{name}: ttdb match resnet50.onnx: median {:.0} ms (min {:.0}, max {:.0}) over 7 runs; target < 200 ms", times[3], times[0], times[6]);
        medians.push((*name, times[3]));
    }
    if let [(a, ta), (b, tb)] = medians.as_slice() {
        println!("{b} / {a}: {:.2}x the match latency", tb / ta);
    }
}
