//! `ttdb refine` end to end on a real record: every trial is stored as a record of this host
//! that `export` writes back, the JSON report adds up, refining never gives a slower
//! schedule, and Ctrl-C stops cleanly with every measured trial stored.
use crate::common;
use ttdb::store::Store;

use common::ttdb_on as ttdb;

/// A database holding the resnet_18 log; refinements target its small 1x1 convs.
fn database(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let db = dir.path().join("t.db");
    let log = common::corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json");
    let (code, _, err) = ttdb(&db, &["import", log.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    db
}

fn droplet_measurements(db: &std::path::Path) -> i64 {
    common::measurements(db, "droplet", "droplet trial ")
}

#[test]
fn refine_stores_every_trial_as_a_record_tvm_reads() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(&dir);
    let (code, out, err) = ttdb(
        &db,
        &[
            "refine",
            "--class",
            "conv2d_nchwc+add",
            "--limit",
            "1",
            "--trials-per-kernel",
            "20",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let k = &v["kernels"][0];
    let trials = k["trials"].as_u64().unwrap();
    assert!(trials > 0 && trials <= 20, "{k}");
    assert!(k["note"].is_null(), "{k}");
    // Never slower than the start (as Droplet timed them back to back).
    assert!(
        k["refined_ms"].as_f64().unwrap() <= k["start_ms"].as_f64().unwrap() * 1.0001,
        "{k}"
    );
    assert_eq!(droplet_measurements(&db), trials as i64);
    // The trials are Ansor lines of the workload's TVM key on this host's target.
    let sig = k["signature"].as_str().unwrap();
    let (code, lines, err) = ttdb(&db, &["export", "--workload", &sig[..12]]);
    assert_eq!(code, 0, "{err}");
    let host = lines.lines().filter(|l| l.contains("-mcpu=")).count() as u64;
    assert!(
        host >= trials,
        "{host} lines of this host for {trials} trials"
    );
    for l in lines.lines() {
        ttdb::ansor::Record::parse(l).unwrap();
    }
    // The human table says what happened.
    let (code, out, err) = ttdb(
        &db,
        &[
            "refine",
            "--class",
            "conv2d_nchwc+add",
            "--limit",
            "1",
            "--trials-per-kernel",
            "16",
            "--dry-run",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("kernel(s) refined") && out.contains("record "),
        "{out}"
    );
    assert_eq!(
        droplet_measurements(&db),
        trials as i64,
        "--dry-run stored trials"
    );
}

#[test]
fn refine_needs_a_selection_and_sane_options() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("empty.db");
    let (code, _, err) = ttdb(&db, &["refine"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--workload SIG, --class C, --model M.onnx or --all"),
        "{err}"
    );
    let (code, _, err) = ttdb(&db, &["refine", "--all", "--samples", "2"]);
    assert_eq!(code, 2);
    assert!(err.contains("--samples must be at least 3"), "{err}");
    let (code, _, err) = ttdb(&db, &["refine", "--all"]);
    assert_eq!(code, 1);
    assert!(err.contains("no workload with a valid CPU record"), "{err}");
}

#[test]
fn ctrl_c_stops_cleanly_and_keeps_every_trial() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(&dir);
    // Interrupt once the first batch is stored.
    let (code, v, stderr) = common::interrupt_once_stored(
        &db,
        &[
            "refine",
            "--class",
            "conv2d_nchwc",
            "--trials-per-kernel",
            "1000",
            "--patience",
            "50",
            "--json",
        ],
        droplet_measurements,
    );
    assert_eq!(code, Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert_eq!(v["interrupted"], true);
    let reported = v["trials"].as_u64().unwrap();
    assert!(reported > 0);
    assert_eq!(
        droplet_measurements(&db) as u64,
        reported,
        "every reported trial is stored"
    );
    assert_eq!(Store::open(&db).unwrap().integrity_check().unwrap(), "ok");
}

/// `refine --model` is TT + Droplet: the chosen transferred schedules are refined.
#[test]
fn refine_a_model_refines_its_transferred_schedules() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(&dir);
    let model =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/models/tiny_resnet.onnx");
    let (code, out, err) = ttdb(
        &db,
        &[
            "refine",
            "--model",
            model.to_str().unwrap(),
            "--trials-per-kernel",
            "16",
            "--top-k",
            "1",
            // TopHub's blocking, the log's: under a plan of 16-channel blocks the class
            // transfer and the default schedule time within noise of each other, and
            // Droplet starts only from a transferred schedule that beats the default
            "--layout-plan",
            "tophub",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["transferred_total_ms"].as_f64().is_some(), "{v}");
    assert!(v["droplet_trials"].as_u64().unwrap() > 0, "{v}");
    assert!(v["tuned_total_ms"].as_f64().unwrap() <= v["untuned_total_ms"].as_f64().unwrap());
    assert_eq!(
        droplet_measurements(&db),
        v["droplet_trials"].as_i64().unwrap()
    );
}
