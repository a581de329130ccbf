//! Recognition never guesses wrong: a key ttdb cannot verify by md5 falls back to a guess
//! from its shapes, and the guess stands only while every valid record of the workload
//! replays on it; otherwise the workload is stored as `unknown` with the reason. Over the
//! whole corpus, every recognized workload's valid records replay.
use crate::common;
use rayon::prelude::*;
use ttdb::ansor::{Record, WorkloadKey};
use ttdb::recognize::recognize;
use ttdb::schedule::{replay, stage_inits_from_dag};
use ttdb::store::Store;

/// resnet_18's records with the key's md5 altered (ttdb's PrintDAG no longer hashes to it,
/// so recognition guesses from the shapes), one line per record.
fn with_altered_hashes(class_of: impl Fn(&str) -> bool) -> Vec<String> {
    let path = common::corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json");
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| {
            let r = Record::parse(l).unwrap();
            let key = WorkloadKey::parse(&r.task.workload_key).unwrap();
            class_of(&recognize(&key).unwrap().signature.op_class)
        })
        .map(|l| {
            let r = Record::parse(l).unwrap();
            let head = WorkloadKey::parse(&r.task.workload_key).unwrap().head;
            // The key is a JSON string inside the record line: its hash appears as is.
            let altered: String = head.chars().rev().collect();
            l.replacen(&head, &altered, 1)
        })
        .collect()
}

fn workload_rows(db: &std::path::Path) -> Vec<(String, String, String)> {
    let store = Store::open(db).unwrap();
    let mut q = store
        .connection_for_tests()
        .prepare("SELECT op_class, recognized_by, signature_json FROM workloads ORDER BY id")
        .unwrap();
    let rows = q
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    rows
}

#[test]
fn a_guess_its_records_refute_is_stored_as_unknown_with_the_reason() {
    // conv + bias + relu: the guess is the plainest epilogue (adds only), which has fewer
    // stages than the records' steps address.
    let lines = with_altered_hashes(|c| c == "conv2d_nchwc+add+relu");
    assert!(lines.len() >= 3, "{} records", lines.len());
    let dir = tempfile::tempdir().unwrap();
    let (db, log) = (dir.path().join("g.db"), dir.path().join("guess.json"));
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let (code, out, err) = common::ttdb_on(&db, &["import", log.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let refuted = &report["per_file"][0]["refuted_guesses"];
    assert_eq!(refuted.as_array().unwrap().len(), lines.len(), "{report}");
    for g in refuted.as_array().unwrap() {
        assert_eq!(g["guessed_class"], "conv2d_nchwc+add", "{g}");
        let reason = g["reason"].as_str().unwrap();
        assert!(
            reason.contains("does not replay") && reason.contains("guess.json:"),
            "{reason}"
        );
    }
    for (class, by, sig) in workload_rows(&db) {
        assert_eq!((class.as_str(), by.as_str()), ("unknown", "unknown"));
        assert!(sig.contains("refuted"), "the reason is kept: {sig}");
    }
    // The human summary says so too, and a second import changes nothing.
    let (code, text, err) = common::ttdb_on(&db, &["import", log.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(!text.contains("unrecognized"), "already unknown: {text}");
    let (_, out, _) = common::ttdb_on(&db, &["workloads", "--class", "conv2d_nchwc+add"]);
    assert!(
        !out.contains("conv2d_nchwc"),
        "no workload under the wrong class: {out}"
    );
}

#[test]
fn a_guess_its_records_replay_on_stands_as_structural() {
    // conv + bias: the plainest epilogue is the right one.
    let lines = with_altered_hashes(|c| c == "conv2d_nchwc+add");
    assert!(!lines.is_empty());
    let dir = tempfile::tempdir().unwrap();
    let (db, log) = (dir.path().join("g.db"), dir.path().join("guess.json"));
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let (code, out, err) = common::ttdb_on(&db, &["import", log.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        report["per_file"][0]["refuted_guesses"],
        serde_json::json!([])
    );
    for (class, by, _) in workload_rows(&db) {
        assert_eq!(
            (class.as_str(), by.as_str()),
            ("conv2d_nchwc+add", "structural")
        );
    }
}

/// Over the whole corpus: every workload is recognized with all its valid records
/// replaying on its DAG, or unknown with a reason.
#[test]
fn every_recognized_corpus_workload_replays_all_its_valid_records() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("corpus.db");
    let mut store = Store::open(&db).unwrap();
    let mut files = 0;
    for f in common::ansor_files() {
        if common::is_cuda_log(&f) {
            continue;
        }
        ttdb::store::import_file(&mut store, &f, &|_| {}).unwrap();
        files += 1;
    }
    let rows: Vec<(String, String, String, String)> = {
        let mut q = store
            .connection_for_tests()
            .prepare(
                "SELECT w.key, w.op_class, w.signature_json, r.raw FROM records r
                 JOIN workloads w ON w.id = r.workload_id
                 WHERE r.error_no = 0 AND r.mean_cost IS NOT NULL",
            )
            .unwrap();
        let rows = q
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        rows
    };
    assert!(
        rows.len() > 70_000,
        "{files} files, {} valid records",
        rows.len()
    );
    let failures: Vec<String> = rows
        .par_iter()
        .filter_map(|(key, class, sig, raw)| {
            if class == "unknown" {
                return (!sig.contains("reason"))
                    .then(|| format!("unknown without a reason: {key}"));
            }
            let r = recognize(&WorkloadKey::parse(key).unwrap()).ok()?;
            let rec = Record::parse(raw).unwrap();
            replay(&stage_inits_from_dag(&r.dag), &rec.steps)
                .err()
                .map(|e| format!("{class} {key}: {e}"))
        })
        .collect();
    println!("{} valid records of {files} files replayed", rows.len());
    assert!(
        failures.is_empty(),
        "{} recognized records do not replay: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
}
