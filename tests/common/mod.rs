//! Helpers shared by integration tests. The real-world corpus lives beside the checkout in
//! `../shared/corpus`; tests that need it fail loudly when it is missing.
#![allow(dead_code)]
pub mod fuzz;
pub mod mutate;
pub mod pg_cluster;
pub mod reference;
pub mod shrink;

use std::path::{Path, PathBuf};
use ttdb::store::testing::{db_arg, Backend};
use ttdb::store::{Location, OpenMode, Store, StoreError};

pub fn corpus_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    assert!(
        dir.is_dir(),
        "the shared corpus is missing: expected it at {} (checkout ttdb beside `shared/`)",
        dir.display()
    );
    dir
}

/// All Ansor log files of the corpus, sorted.
pub fn ansor_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let root = corpus_dir().join("ansor");
    for dir in std::fs::read_dir(&root).expect("read corpus/ansor") {
        let dir = dir.unwrap().path();
        for f in std::fs::read_dir(&dir).unwrap() {
            out.push(f.unwrap().path());
        }
    }
    out.sort();
    assert!(
        out.len() >= 20,
        "expected the corpus's Ansor logs under {}",
        root.display()
    );
    out
}

/// The folder of full tuning histories (73k records in measurement order, failed trials
/// included): the material for search experiments. Tests that do heavy work per record
/// (lowering, interpreting) check a deterministic sample of it: see [`sample_full_histories`].
pub const FULL_HISTORY_DIR: &str = "tvm_ansor_bench_full_nchwc";

/// A log of the full tuning histories.
pub fn is_full_history(p: &Path) -> bool {
    p.parent()
        .and_then(|d| d.file_name())
        .is_some_and(|d| d == FULL_HISTORY_DIR)
}

/// One distinct record in this many of the full histories is checked by the heavy tests:
/// about 1,000 of their ~60,000 distinct records, spread over every task and over the whole
/// of each search, on top of every record of the curated logs.
pub const FULL_HISTORY_STRIDE: usize = 64;

/// Keeps every record of the curated logs and every [`FULL_HISTORY_STRIDE`]-th (in the
/// iteration order of `items`) of the full histories; `file_of` names an item's log file.
pub fn sample_full_histories<T>(items: Vec<T>, file_of: impl Fn(&T) -> String) -> Vec<T> {
    let mut n = 0usize;
    items
        .into_iter()
        .filter(|t| {
            if !is_full_history(Path::new(&file_of(t))) {
                return true;
            }
            n += 1;
            (n - 1).is_multiple_of(FULL_HISTORY_STRIDE)
        })
        .collect()
}

/// CUDA logs: real records, but not for this CPU.
pub fn is_cuda_log(p: &Path) -> bool {
    let name = p.file_name().unwrap().to_string_lossy();
    name.contains("cuda") || name == "conv2d.json"
}

/// Path relative to the corpus root, for readable tables.
pub fn rel(p: &Path) -> String {
    p.strip_prefix(corpus_dir().join("ansor"))
        .unwrap_or(p)
        .display()
        .to_string()
}

/// What `--db` takes for a new database of `backend`: a file `name` in `dir` (made by the
/// first command that stores) for SQLite, a new empty database on the test cluster for
/// PostgreSQL. Tests pass it to [`ttdb_on`] and the helpers below alike.
pub fn new_db(backend: Backend, dir: &Path, name: &str) -> PathBuf {
    PathBuf::from(db_arg(&backend.location(dir, name)))
}

/// The database `db` names (a file or a postgres:// URL, as `--db` takes it), opened to
/// read.
pub fn open_db(db: &Path) -> Store {
    Store::open_at(&Location::parse(db), OpenMode::ReadOnly)
        .unwrap_or_else(|e| panic!("opening {}: {e}", db.display()))
}

/// The integer `sql` returns on the database `db`, of either backend.
pub fn query_int(db: &Path, sql: &str) -> i64 {
    open_db(db)
        .sql_for_tests()
        .query_one(sql, &[], |r| r.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Whether ttdb's database exists at `db`: a reading command must never make one (for
/// SQLite, no file; for PostgreSQL, none of ttdb's tables in the database).
pub fn holds_ttdb_database(db: &Path) -> bool {
    match Store::open_at(&Location::parse(db), OpenMode::ReadOnly) {
        Ok(_) => true,
        Err(StoreError::Missing { .. }) => false,
        Err(e) => panic!("{}: {e}", db.display()),
    }
}

/// The workload keys of the Ansor lines in `text` (a log, a bundle), lines that do not
/// parse skipped.
pub fn workload_keys(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter_map(|l| ttdb::ansor::Record::parse(l).ok())
        .map(|r| r.task.workload_key)
        .collect()
}

/// Runs the ttdb binary on the database `db`: (exit code, stdout, stderr).
pub fn ttdb_on(db: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Measurement rows of `kind` in `db` whose provenance starts with `provenance`.
pub fn measurements(db: &Path, kind: &str, provenance: &str) -> i64 {
    ttdb::store::Store::open(db)
        .unwrap()
        .connection_for_tests()
        .query_row(
            "SELECT COUNT(*) FROM measurements WHERE kind = ?1 AND provenance LIKE ?2 || '%'",
            [kind, provenance],
            |r| r.get(0),
        )
        .unwrap()
}

/// Starts ttdb with `args` on `db`, sends it SIGINT once `stored(db)` counts a stored trial
/// (failing after 240 s without one), and returns its exit code, its JSON report and its
/// stderr.
pub fn interrupt_once_stored(
    db: &Path,
    args: &[&str],
    stored: impl Fn(&Path) -> i64,
) -> (Option<i32>, serde_json::Value, String) {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let child = Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .arg("--db")
        .arg(db)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    // The child creates a new database: it may not open until its migrations ran.
    while ttdb::store::Store::open(db).is_err() || stored(db) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(240),
            "no trial stored after 240 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{stderr}"));
    (out.status.code(), report, stderr)
}

/// Records whose measurement failed (`error_no != 0`) in `db`.
pub fn failed_records(db: &Path) -> i64 {
    ttdb::store::Store::open(db)
        .unwrap()
        .connection_for_tests()
        .query_row(
            "SELECT COUNT(*) FROM records WHERE error_no != 0",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

/// `ttdb tune MODEL --trials T --batch 8 --population P [extra...] --json` on `db`: the
/// report, once checked that the run succeeded, that every kernel got a best time (which
/// only a verified trial gives) and that no stored trial failed.
pub fn tune_small_model(
    db: &Path,
    model: &Path,
    trials: usize,
    population: usize,
    extra: &[&str],
) -> serde_json::Value {
    let (trials, population) = (trials.to_string(), population.to_string());
    let mut args = vec![
        "tune",
        model.to_str().unwrap(),
        "--trials",
        &trials,
        "--batch",
        "8",
        "--population",
        &population,
        "--json",
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = ttdb_on(db, &args);
    assert_eq!(code, 0, "{args:?}: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    for k in v["kernels"].as_array().unwrap() {
        assert!(k["best_ms"].as_f64().is_some_and(|t| t > 0.0), "{k}");
    }
    assert_eq!(failed_records(db), 0, "every measured trial verified");
    v
}

/// A tuned kernel's DAG, with TVM v0.15's names.
pub fn kernel_dag(k: &ttdb::onnx::Kernel) -> ttdb::ir::Dag {
    k.spec
        .as_ref()
        .expect("a tuned kernel has a workload spec")
        .build(ttdb::ops::Era::V015, &k.inputs)
        .unwrap()
}

/// Recognizes the TVM workload key of `dag` (kernel `k`'s DAG) afresh and checks that its
/// md5 finds it, under `k`'s own signature.
pub fn recognized_by_md5(
    k: &ttdb::onnx::Kernel,
    dag: &ttdb::ir::Dag,
) -> ttdb::recognize::Recognized {
    use ttdb::recognize::{recognize_uncached, RecognizedBy};
    let key = ttdb::ansor::WorkloadKey::parse(&ttdb::tune::apply::workload_key_of(dag)).unwrap();
    let r = recognize_uncached(&key).unwrap();
    assert_eq!(r.recognized_by, RecognizedBy::Md5, "{}", k.class);
    assert_eq!(
        Some(r.signature.sha256_hex()),
        k.signature_hash,
        "{}",
        k.class
    );
    r
}
