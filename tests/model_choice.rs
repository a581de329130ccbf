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

/// `tune MODEL` on the fixture with `trials` trials, populations of `population`, no
/// end-to-end run, and `extra`: its JSON report.
fn tune_fixture(db: &std::path::Path, trials: &str, population: &str, extra: &[&str]) -> Value {
    let model = fixture_model();
    let args = [
        "tune",
        &model,
        "--trials",
        trials,
        "--population",
        population,
        "--e2e-runs",
        "0",
        "--json",
    ];
    let (code, out, err) = ttdb(db, &[&args[..], extra].concat());
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
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
    let v = tune_fixture(&db, "64", "24", &[]);
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
        // At most one is the rows variant of the cheapest, made for the model: in its
        // place by its cost alone, or last.
        let made: Vec<bool> = (c.iter())
            .map(|x| x["rows_across_cores"].as_bool().unwrap())
            .collect();
        assert!(made.iter().filter(|&&m| m).count() <= 1, "{w}");
        let found = c.len() - usize::from(made[c.len() - 1]);
        assert!(
            tuned[..found].windows(2).all(|p| p[0] <= p[1]),
            "cheapest first: {w}"
        );
        assert!(tuned.iter().all(|&t| t >= tuned[0]), "cheapest first: {w}");
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
    let v = tune_fixture(&db, "8", "8", &["--no-model-choice"]);
    assert_eq!(v["model_choice"]["not_chosen"], "--no-model-choice", "{v}");
}

/// The verified records: (id, workload id, mean cost, line), cheapest first.
fn verified_records(db: &std::path::Path) -> Vec<(i64, i64, f64, String)> {
    let store = ttdb::store::Store::open(db).unwrap();
    let c = store.connection_for_tests();
    let mut q = c
        .prepare(
            "SELECT DISTINCT r.id, r.workload_id, r.mean_cost, r.raw FROM records r \
             JOIN measurements m ON m.record_id = r.id AND m.verified = 1 ORDER BY r.mean_cost",
        )
        .unwrap();
    q.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The rows variant (`ttdb_tuning::search::partition`) of a record line, on `threads` cores.
fn rows_variant(raw: &str, threads: usize) -> Option<Vec<ttdb::ansor::Step>> {
    let record = ttdb::ansor::Record::parse(raw).ok()?;
    let key = ttdb::ansor::WorkloadKey::parse(&record.task.workload_key).ok()?;
    let dag = ttdb::recognize::recognize(&key).ok()?.dag;
    let inits = ttdb::schedule::stage_inits_from_dag(&dag);
    ttdb::search::partition::rows_across_cores(&inits, &record.steps, threads)
}

#[test]
fn the_choice_measures_and_tries_the_cheapest_conv_split_over_rows() {
    let cores = ttdb::host::available_cores();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let model = fixture_model();
    tune_fixture(&db, "64", "24", &["--no-model-choice"]);
    // Make a conv record that has a rows variant its workload's cheapest, as a later
    // search might.
    let records = verified_records(&db);
    let Some((start, workload, _, start_raw)) = (records.iter())
        .find(|(_, _, _, raw)| rows_variant(raw, cores).is_some())
        .cloned()
    else {
        assert!(cores < 2, "no record of the search has a rows variant");
        return;
    };
    let cheapest = 0.95
        * (records.iter())
            .filter(|r| r.1 == workload)
            .map(|r| r.2)
            .fold(f64::INFINITY, f64::min);
    sql(
        &db,
        &format!("UPDATE records SET mean_cost = {cheapest} WHERE id = {start}"),
    );
    let v = tune_fixture(&db, "1", "24", &[]);
    let workloads = v["model_choice"]["chosen"]["workloads"].as_array().cloned();
    // Its variant was measured alone, verified and stored, naming where it came from.
    let variant = rows_variant(&start_raw, cores).unwrap();
    let stored: Vec<(i64, i64, f64, String)> = verified_records(&db)
        .into_iter()
        .filter(|r| ttdb::ansor::Record::parse(&r.3).is_ok_and(|p| p.steps == variant))
        .collect();
    assert_eq!(stored.len(), 1, "the variant of record {start}: {stored:?}");
    let (variant_id, _, variant_cost, _) = stored[0].clone();
    let provenance: String = ttdb::store::Store::open(&db)
        .unwrap()
        .connection_for_tests()
        .query_row(
            "SELECT provenance FROM measurements WHERE record_id = ?1 AND verified = 1",
            [variant_id],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(
        provenance,
        format!("variant (rows across cores) of record {start}")
    );
    // Within 25% of the cheapest alone, it is one of the candidates tried in the model:
    // marked as the rows variant, unless it is now the cheapest alone itself (first).
    let tried = (workloads.iter().flatten())
        .filter_map(|w| w["candidates"].as_array().cloned())
        .find_map(|c| {
            let at = c.iter().position(|x| x["record_id"] == variant_id)?;
            Some((at, c[at].clone()))
        });
    if variant_cost <= cheapest * 1.25 {
        let (at, tried) = tried.unwrap_or_else(|| panic!("variant {variant_id} not tried: {v}"));
        assert_eq!(tried["rows_across_cores"], at > 0, "{tried}");
    } else {
        assert!(tried.is_none(), "{v}");
    }
    // The whole model weighed the configurations end to end, the cheapest records first,
    // and pinned the one it took.
    let chosen = &v["model_choice"]["chosen"];
    let configurations = chosen["configurations"].as_array().unwrap();
    assert_eq!(configurations[0]["name"], "cheapest", "{chosen}");
    let taken = chosen["taken"].as_str().unwrap();
    assert!(
        configurations.iter().any(|c| c["name"] == taken),
        "{chosen}"
    );

    // `--trials 0`: no search, the choice again on what is stored.
    let records_before = verified_records(&db).len();
    let (code, out, err) = ttdb(
        &db,
        &["tune", &model, "--trials", "0", "--e2e-runs", "0", "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let again: Value = serde_json::from_str(&out).unwrap();
    assert!(
        again.get("trials").is_none() && again.get("kernels").is_none(),
        "{again}"
    );
    assert!(
        again["model_choice"]["chosen"]["workloads"].is_array(),
        "{again}"
    );
    assert_eq!(
        verified_records(&db).len(),
        records_before,
        "--trials 0 measured a trial"
    );
    let (code, out, _) = ttdb(&db, &["tune", &model, "--trials", "0", "--e2e-runs", "0"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("no search (--trials 0)"), "{out}");
    let (code, _, err) = ttdb(&db, &["tune", "--all", "--trials", "0"]);
    assert_eq!(code, 2);
    assert!(err.contains("--trials 0 without MODEL"), "{err}");
}
