//! `tune MODEL` chooses each kernel's schedule among its few best records by its time inside
//! the model (`ttdb_tuning::run::in_model`) and pins it; `export --model` (and so `run` and
//! `build`, which take the record it chooses) follow a pin only while the cheapest record is
//! the one it was chosen over. `apply` chooses the same way unless it only transfers.
use crate::common;
use serde_json::Value;

use common::ttdb_on as ttdb;

fn fixture_model() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/models/tiny_resnet.onnx")
        .display()
        .to_string()
}

/// The record `export --model` writes under `workload_key`.
fn exported(db: &std::path::Path, dir: &std::path::Path, workload_key: &str) -> (i64, bool) {
    let log = dir.join("chosen.log");
    let (code, out, err) = ttdb(
        db,
        &[
            "export",
            "--model",
            &fixture_model(),
            "--layout-plan",
            "auto",
            "-o",
            log.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let written = v["per_kernel"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|k| k["written"].as_array().cloned().unwrap_or_default())
        .find(|w| w["workload_key"] == workload_key)
        .unwrap_or_else(|| panic!("{workload_key} not written: {v}"));
    (
        written["record_id"].as_i64().unwrap(),
        written["chosen_in_model"].as_bool().unwrap_or(false),
    )
}

fn sql(db: &std::path::Path, statement: &str) {
    ttdb::store::Store::open(db)
        .unwrap()
        .connection_for_tests()
        .execute(statement, [])
        .unwrap();
}

#[test]
fn tune_pins_the_fastest_in_the_model_and_export_follows_the_pin_while_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let model = fixture_model();
    let tune = [
        "tune",
        &model,
        "--trials",
        "64",
        "--population",
        "24",
        "--e2e-runs",
        "0",
        "--json",
    ];
    let (code, out, err) = ttdb(&db, &tune);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let r = &v["model_choice"]["chosen"];
    let workloads = r["workloads"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert!(
        !workloads.is_empty(),
        "no kernel had two near-best records: {r}"
    );
    assert_eq!(
        r["variants"].as_u64().unwrap() as usize,
        workloads
            .iter()
            .map(|w| w["candidates"].as_array().unwrap().len())
            .max()
            .unwrap()
    );
    let mut changed = 0;
    for w in workloads {
        let c = w["candidates"].as_array().unwrap();
        assert!(c.len() >= 2 && c.len() <= 3, "{w}");
        let tuned: Vec<f64> = c.iter().map(|x| x["tuned_ms"].as_f64().unwrap()).collect();
        assert!(
            tuned.windows(2).all(|p| p[0] <= p[1]),
            "cheapest first: {w}"
        );
        assert!(
            tuned.iter().all(|&t| t <= tuned[0] * 1.25),
            "within 25%: {w}"
        );
        assert!(
            c.iter().all(|x| x["model_ms"].as_f64().unwrap() > 0.0),
            "{w}"
        );
        let chosen = w["chosen"].as_i64().unwrap();
        assert!(c.iter().any(|x| x["record_id"] == chosen), "{w}");
        changed += usize::from(c[0]["record_id"] != chosen);
        // export takes the chosen record, and says so when it is not the cheapest
        let key = w["workload_key"].as_str().unwrap();
        assert_eq!(
            exported(&db, dir.path(), key),
            (chosen, c[0]["record_id"] != chosen),
            "{w}"
        );
    }
    assert_eq!(r["changed"].as_u64().unwrap() as usize, changed);

    // A pin on the second candidate holds while the cheapest is the one it was chosen over,
    // and no longer once another record is (a later tune found a faster one).
    let w = &workloads[0];
    let c = w["candidates"].as_array().unwrap();
    let (cheapest, second) = (
        c[0]["record_id"].as_i64().unwrap(),
        c[1]["record_id"].as_i64().unwrap(),
    );
    let key = w["workload_key"].as_str().unwrap();
    sql(
        &db,
        &format!("UPDATE record_pins SET record_id = {second}, over_record_id = {cheapest}"),
    );
    assert_eq!(exported(&db, dir.path(), key), (second, true));
    sql(
        &db,
        &format!("UPDATE record_pins SET over_record_id = {second}"),
    );
    assert_eq!(exported(&db, dir.path(), key), (cheapest, false));

    // apply chooses the same way after its search, but not when it only transfers.
    let apply = [
        "apply",
        &model,
        "--time-budget",
        "6",
        "--e2e-runs",
        "0",
        "--json",
    ];
    let (code, out, err) = ttdb(&db, &apply);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["model_choice"]["chosen"]["workloads"].is_array(), "{v}");
    let (code, out, err) = ttdb(&db, &[&apply[..], &["--transfer-only"]].concat());
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["model_choice"]["not_chosen"], "--transfer-only", "{v}");

    // Asked not to, it chooses nothing.
    let again = [
        "tune",
        &model,
        "--trials",
        "8",
        "--population",
        "8",
        "--e2e-runs",
        "0",
        "--json",
        "--no-model-choice",
    ];
    let (code, out, err) = ttdb(&db, &again);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["model_choice"]["not_chosen"], "--no-model-choice", "{v}");
}
