//! `ttdb tune` end to end on a stored workload: every trial is stored as a record of this
//! host (provenance "search") that `export` writes and a fresh database re-imports
//! losslessly; a second run starts from the stored trials (they seed it); a whole model is
//! refused with a clear message until the task scheduler exists.
mod common;
use std::process::Command;
use ttdb::store::Store;

fn ttdb(db: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ttdb"))
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

fn search_measurements(db: &std::path::Path) -> i64 {
    Store::open(db)
        .unwrap()
        .connection_for_tests()
        .query_row(
            "SELECT COUNT(*) FROM measurements WHERE kind = 'search' AND provenance LIKE 'search trial %'",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

const TUNE: &[&str] = &[
    "tune",
    "--class",
    "conv2d_nchwc+add",
    "--limit",
    "1",
    "--trials",
    "24",
    "--batch",
    "8",
    "--population",
    "24",
    "--json",
];

#[test]
fn tune_stores_every_trial_exports_round_trip_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let log = common::corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json");
    let (code, _, err) = ttdb(&db, &["import", log.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");

    let (code, out, err) = ttdb(&db, TUNE);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let k = &v["kernels"][0];
    assert!(k["note"].is_null(), "{k}");
    assert_eq!(k["sketches"], 3, "{k}");
    let trials = k["trials"].as_u64().unwrap();
    assert_eq!(trials, 24, "{k}");
    assert_eq!(k["failed_trials"], 0, "{k}");
    assert!(k["best_ms"].as_f64().unwrap() > 0.0, "{k}");
    assert_eq!(search_measurements(&db), 24);

    // Export: Ansor lines of this host's target that parse; a fresh database imports them
    // and exports the same lines again.
    let sig = k["signature"].as_str().unwrap().to_string();
    let (code, lines, err) = ttdb(&db, &["export", "--workload", &sig[..12]]);
    assert_eq!(code, 0, "{err}");
    let ours: Vec<&str> = lines.lines().filter(|l| l.contains("-mcpu=")).collect();
    assert!(ours.len() >= 24, "{} lines of this host", ours.len());
    for l in &ours {
        ttdb::ansor::Record::parse(l).unwrap();
    }
    let file = dir.path().join("tuned.json");
    std::fs::write(&file, ours.join("\n") + "\n").unwrap();
    let fresh = dir.path().join("fresh.db");
    let (code, _, err) = ttdb(&fresh, &["import", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, again, err) = ttdb(&fresh, &["export", "--workload", &sig[..12]]);
    assert_eq!(code, 0, "{err}");
    let mut a: Vec<&str> = ours.clone();
    let mut b: Vec<&str> = again.lines().collect();
    a.sort();
    b.sort();
    assert_eq!(a, b, "re-imported records export differently");

    // A second run is seeded with the stored trials (the imported record and the best
    // measured here), so it does not start over.
    let (code, out, err) = ttdb(&db, TUNE);
    assert_eq!(code, 0, "{err}");
    let v2: serde_json::Value = serde_json::from_str(&out).unwrap();
    let k2 = &v2["kernels"][0];
    assert!(
        k2["seeds"].as_u64().unwrap() > k["seeds"].as_u64().unwrap(),
        "first {k}\nsecond {k2}"
    );
    assert_eq!(search_measurements(&db), 48);
}

#[test]
fn tune_needs_a_selection_and_says_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("empty.db");
    let (code, _, err) = ttdb(&db, &["tune"]);
    assert_eq!(code, 2);
    assert!(err.contains("--workload SIG, --class C or --all"), "{err}");
    let (code, _, err) = ttdb(&db, &["tune", "model.onnx"]);
    assert_eq!(code, 2);
    assert!(err.contains("not implemented in this version"), "{err}");
    let (code, _, err) = ttdb(&db, &["tune", "--all"]);
    assert_eq!(code, 1);
    assert!(err.contains("no workload with a valid CPU record"), "{err}");
}
