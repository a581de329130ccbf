//! `ttdb tune` end to end on a stored workload: every trial is stored as a record of this
//! host (provenance "search") that `export` writes and a fresh database re-imports
//! losslessly; a second run starts from the stored trials (they seed it); a whole model is
//! tuned under one trial budget; `apply --tune` searches the kernels nothing was transferred
//! to; `apply` searches with the rest of its time budget; Ctrl-C stops cleanly with every trial stored.
use crate::common;
use ttdb::store::Store;

use common::ttdb_on as ttdb;

fn search_measurements(db: &std::path::Path) -> i64 {
    common::measurements(db, "search", "search trial ")
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
    // The imported record, and the default schedule `ttdb run` would run untuned.
    assert_eq!(k["seeds"], 2, "{k}");
    let trials = k["trials"].as_u64().unwrap();
    assert_eq!(trials, 24, "{k}");
    assert_eq!(k["failed_trials"], 0, "{k}");
    assert!(k["best_ms"].as_f64().unwrap() > 0.0, "{k}");
    assert_eq!(search_measurements(&db), 24);
    // The cost model learned from every trial and was kept for this host class.
    assert_eq!(v["cost_model"]["warm_programs"], 0, "{}", v["cost_model"]);
    assert_eq!(v["cost_model"]["programs"], 24, "{}", v["cost_model"]);

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
    // the cost `verify --measured` reports as logged: the best mean of what the tune stored
    let best_stored_ms = (ours.iter())
        .map(|l| ttdb::ansor::Record::parse(l).unwrap().result.mean_cost() * 1e3)
        .fold(f64::INFINITY, f64::min);
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

    // `verify --measured` times again the best record the tune measured, plain `verify`
    // the imported one; where ttdb measured nothing, --measured says so.
    let verify = |db: &std::path::Path, measured: bool| {
        let mut args = vec!["verify", "--workload", &sig[..12], "--no-naive"];
        args.extend(["--peak", "100", "--dry-run", "--json"]);
        if measured {
            args.push("--measured");
        }
        let (code, out, err) = ttdb(db, &args);
        (code, serde_json::from_str(&out).unwrap_or_default(), err)
    };
    let (code, ours, err) = verify(&db, true);
    assert_eq!(code, 0, "{err}");
    let (code, imported, err) = verify(&db, false);
    assert_eq!(code, 0, "{err}");
    let (ours, imported): (&serde_json::Value, &serde_json::Value) = (&ours, &imported);
    let row = &ours["rows"][0];
    assert_eq!(row["verified"], true, "{ours}");
    assert!(row["tuned_ms"].as_f64().unwrap() > 0.0, "{ours}");
    // its logged cost is the best record the tune stored (not the imported record's)
    let logged = row["logged_ms"].as_f64().unwrap();
    assert!(
        (logged - best_stored_ms).abs() <= 1e-9 * best_stored_ms,
        "{ours}\nbest stored {best_stored_ms} ms"
    );
    assert_ne!(
        row["record_id"], imported["rows"][0]["record_id"],
        "{imported}"
    );
    let (code, _, err) = verify(&fresh, true);
    assert_ne!(code, 0);
    assert!(err.contains("ttdb measured itself"), "{err}");

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
    // ... and its cost model starts warm from the first run's programs.
    assert_eq!(
        v2["cost_model"]["warm_programs"], 24,
        "{}",
        v2["cost_model"]
    );
    assert_eq!(v2["cost_model"]["programs"], 48, "{}", v2["cost_model"]);
    assert!(
        v2["cost_model"]["trees"].as_u64().unwrap() > 0,
        "{}",
        v2["cost_model"]
    );
    // A dry run starts from the stored model too, and stores nothing (neither trials nor
    // the model: a third run starts from the same 48).
    let mut dry = TUNE.to_vec();
    dry.push("--dry-run");
    let (code, out, err) = ttdb(&db, &dry);
    assert_eq!(code, 0, "{err}");
    let v3: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v3["cost_model"]["warm_programs"], 48,
        "{}",
        v3["cost_model"]
    );
    assert_eq!(search_measurements(&db), 48);
    let stored = ttdb::store::Store::open(&db).unwrap();
    let host = ttdb::target::Target::detect().host;
    assert_eq!(
        stored.cost_model(&host.class()).unwrap().unwrap().programs,
        48
    );
}

#[test]
fn tune_needs_a_selection_and_says_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("empty.db");
    let (code, _, err) = ttdb(&db, &["tune"]);
    assert_eq!(code, 2);
    assert!(err.contains("--workload SIG, --class C or --all"), "{err}");
    let (code, _, err) = ttdb(&db, &["tune", "--all", "--trials", "0"]);
    assert_eq!(code, 2);
    assert!(err.contains("--trials 0 without MODEL"), "{err}");
    let (code, _, err) = ttdb(&db, &["tune", "--all"]);
    assert_eq!(code, 1);
    assert!(err.contains("no workload with a valid CPU record"), "{err}");
}

/// `--cold-weights` tunes (its eviction is `ttdb_backend::evaluate`'s unit tests), and asking
/// for it with TVM's flush is refused, not one of them silently dropped.
#[test]
fn tune_times_with_cold_weights_and_refuses_two_cache_states() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let log = common::corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json");
    let (code, _, err) = ttdb(&db, &["import", log.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let both = [TUNE, &["--cold-weights", "--flush-cache"]].concat();
    let (code, _, err) = ttdb(&db, &both);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--cold-weights") && err.contains("--flush-cache"),
        "{err}"
    );
    assert_eq!(search_measurements(&db), 0);
    let cold = [TUNE, &["--cold-weights"]].concat();
    let (code, out, err) = ttdb(&db, &cold);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kernels"][0]["trials"], 24, "{v}");
    assert_eq!(search_measurements(&db), 24);
}

fn fixture_model() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/models/tiny_resnet.onnx")
}

/// An empty database: nothing to transfer, so every kernel is searched from scratch.
#[test]
fn tune_a_model_searches_every_kernel_within_one_budget() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let curve = dir.path().join("curve.csv");
    let plot = dir.path().join("curve.svg");
    let (code, out, err) = ttdb(
        &db,
        &[
            "tune",
            fixture_model().to_str().unwrap(),
            "--trials",
            "48",
            "--population",
            "24",
            "--curve",
            curve.to_str().unwrap(),
            "--plot",
            plot.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let kernels = v["kernels"].as_array().unwrap();
    assert!(kernels.len() >= 2, "{v}");
    for k in kernels {
        assert!(k["best_ms"].as_f64().is_some(), "{k}");
        assert!(k["rounds"].as_u64().unwrap() >= 1, "{k}");
    }
    let trials = v["trials"].as_u64().unwrap();
    assert!((48..48 + 16).contains(&trials), "{trials}");
    assert_eq!(search_measurements(&db) as u64, trials);
    let sum: f64 = kernels
        .iter()
        .map(|k| k["best_ms"].as_f64().unwrap() * k["multiplicity"].as_f64().unwrap())
        .sum();
    assert!((v["kernel_sum_ms"].as_f64().unwrap() - sum).abs() < 1e-9);
    // At the end the tuned model ran end to end here, every tunable kernel on the schedule
    // the tune stored.
    let e2e = &v["end_to_end"]["measured"];
    assert_eq!(e2e["runs"], 20, "{v}");
    assert!(e2e["median_ms"].as_f64().unwrap() > 0.0, "{e2e}");
    assert!(e2e["stored_kernels"].as_u64().unwrap() >= 2, "{e2e}");
    assert_eq!(e2e["default_kernels"], 0, "{e2e}");
    let glue = e2e["glue_ms"].as_f64().unwrap();
    assert!(
        glue >= 0.0 && e2e["anchored_ms"].as_f64().unwrap() > 0.0,
        "{e2e}"
    );
    let csv = std::fs::read_to_string(&curve).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(
        rows[0],
        "trial,wall_s,kernel,kernel_name,kernel_best_ms,model_ms"
    );
    assert!(rows.len() > kernels.len(), "{csv}");
    // The last point's model time is the report's kernel sum.
    let last: Vec<&str> = rows.last().unwrap().split(',').collect();
    let model_ms: f64 = last[5].parse().unwrap();
    assert!((model_ms - sum).abs() < 1e-3, "{model_ms} vs {sum}");
    // The plot: one panel against trials, one against wall time, each with the model's
    // best-latency line (the blue polyline; the axes and ticks are black ones), labelled.
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    let series = svg
        .lines()
        .filter(|l| l.starts_with("<polyline") && l.contains("stroke=\"#1F77B4\""));
    assert_eq!(series.count(), 2, "{svg}");
    for label in [
        "trials",
        "wall time (s)",
        "best model latency, kernel sum (ms)",
    ] {
        assert!(
            svg.contains(&format!(">\n{label}\n</text>")),
            "{label}: {svg}"
        );
    }
    let host = v["host"].as_str().unwrap();
    assert!(
        svg.contains("tiny_resnet") && svg.contains(host.split(" (").next().unwrap()),
        "{svg}"
    );
    // Only the model mode has a curve to plot.
    let (code, _, err) = ttdb(&db, &["tune", "--all", "--plot", plot.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--plot"), "{err}");
}

/// `apply` spends its time budget on a search of the model's kernels (an empty database:
/// nothing transferred, each kernel's first round its default schedule), then times the
/// model end to end on what was stored.
#[test]
fn apply_searches_with_the_rest_of_its_time_budget() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let m = fixture_model();
    let t0 = std::time::Instant::now();
    let (code, out, err) = ttdb(
        &db,
        &[
            "apply",
            m.to_str().unwrap(),
            "--time-budget",
            "12",
            "--json",
        ],
    );
    let wall = t0.elapsed().as_secs_f64();
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let search = &v["search"]["ran"];
    let trials = search["trials"].as_u64().unwrap_or(0);
    assert!(trials > 0, "{v}");
    assert_eq!(search_measurements(&db) as u64, trials);
    // It stopped on the clock (or when every kernel's search space ran out), not on a
    // trial count: the search has none.
    let stop = search["stop"].as_str().unwrap();
    assert!(stop == "time" || stop == "all_dead", "{stop}");
    // No transfer measured apart: nothing to transfer, every kernel started on its default.
    assert!(v["kernels"].is_null(), "{v}");
    assert_eq!(common::measurements(&db, "apply", ""), 0);
    for k in search["kernels"].as_array().unwrap() {
        let from = k["best_from"].as_str().unwrap_or("-");
        assert!(from == "default" || from == "search", "{k}");
    }
    // Within the budget, give or take the round in flight and the end-to-end run.
    assert!(wall < 12.0 + 25.0, "{wall} s");
    let e2e = &v["end_to_end"]["measured"];
    assert!(e2e["median_ms"].as_f64().unwrap() > 0.0, "{v}");
    assert!(e2e["stored_kernels"].as_u64().unwrap() >= 2, "{e2e}");
    // --transfer-only: today's apply, no search.
    let (code, out, err) = ttdb(
        &db,
        &[
            "apply",
            m.to_str().unwrap(),
            "--transfer-only",
            "--e2e-runs",
            "0",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["search"]["not_run"], "--transfer-only", "{v}");
    assert_eq!(v["end_to_end"]["not_measured"], "--e2e-runs 0", "{v}");
    assert_eq!(search_measurements(&db) as u64, trials);
}

/// When a search follows, `apply`'s transfer is the search's first round: each kernel's
/// transferred candidates and its default, measured once, as the search measures (no
/// measurement of the transfer's own). Measured apart (the hidden `--transfer-apart`), the
/// transfer times its candidates as the search does (3 samples; the search times them again
/// as its seeds); `--transfer-only` keeps the precise timing (5 samples).
#[test]
fn apply_measures_the_transfer_as_the_searchs_first_round() {
    let dir = tempfile::tempdir().unwrap();
    let log = common::corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json");
    let repeats = |db: &std::path::Path| -> Vec<i64> {
        let store = Store::open(db).unwrap();
        let c = store.connection_for_tests();
        let mut q = c
            .prepare("SELECT DISTINCT repeats FROM measurements WHERE kind = 'apply' ORDER BY 1")
            .unwrap();
        q.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let m = fixture_model();
    let first_round_seeds =
        |db: &std::path::Path| -> i64 { common::measurements(db, "search", "%(round 0, seed)") };
    for (name, extra, want) in [
        ("seeded.db", vec!["--time-budget", "10"], vec![]),
        (
            "apart.db",
            vec!["--time-budget", "10", "--transfer-apart"],
            vec![3],
        ),
        ("precise.db", vec!["--transfer-only"], vec![5]),
    ] {
        let db = dir.path().join(name);
        let (code, _, err) = ttdb(&db, &["import", log.to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        let mut args = vec![
            "apply",
            m.to_str().unwrap(),
            "--top-k",
            "1",
            "--e2e-runs",
            "0",
        ];
        args.extend(extra);
        args.push("--json");
        let (code, out, err) = ttdb(&db, &args);
        assert_eq!(code, 0, "{err}");
        assert_eq!(repeats(&db), want, "{name}");
        if name != "seeded.db" {
            continue;
        }
        // The seeds' round: a transferred candidate (top-k 1) and the default of each
        // kernel with a match, the default alone of the others.
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let kernels = v["search"]["ran"]["kernels"].as_array().unwrap().clone();
        let seeds: u64 = kernels.iter().map(|k| k["seeds"].as_u64().unwrap()).sum();
        assert!(kernels.iter().any(|k| k["seeds"] == 2), "{v}");
        assert!(first_round_seeds(&db) >= kernels.len() as i64, "{v}");
        assert!(first_round_seeds(&db) <= seeds as i64, "{v}");
    }
}

#[test]
fn apply_tune_searches_kernels_without_a_candidate() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let (code, out, err) = ttdb(
        &db,
        &[
            "apply",
            fixture_model().to_str().unwrap(),
            "--tune",
            "24",
            "--transfer-only",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut searched_chosen = 0;
    for k in v["kernels"].as_array().unwrap() {
        // Every kernel is searched; the searched schedule is kept only when it beats the
        // default (a tiny dense can stay faster without parallel threads).
        assert!(k["search"]["trials"].as_u64().unwrap() > 0, "{k}");
        let (tuned, untuned) = (
            k["tuned_ms"].as_f64().unwrap(),
            k["untuned_ms"].as_f64().unwrap(),
        );
        assert!(tuned <= untuned, "{k}");
        let chose_search = k["chosen"].as_str().unwrap().starts_with("search");
        assert_eq!(chose_search, tuned < untuned, "{k}");
        searched_chosen += chose_search as usize;
    }
    assert!(searched_chosen >= 1, "{v}");
    assert!(v["tuned_total_ms"].as_f64().unwrap() < v["untuned_total_ms"].as_f64().unwrap());
    // One cost model learned from every kernel's search and was kept for this host class.
    let searched: i64 = v["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["search"]["trials"].as_i64().unwrap())
        .sum();
    let stored = Store::open(&db).unwrap();
    let host = ttdb::target::Target::detect().host;
    assert_eq!(
        stored.cost_model(&host.class()).unwrap().unwrap().programs,
        searched
    );
}

#[test]
fn ctrl_c_stops_a_tune_cleanly_and_keeps_every_trial() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let (code, v, stderr) = common::interrupt_once_stored(
        &db,
        &[
            "tune",
            fixture_model().to_str().unwrap(),
            "--trials",
            "5000",
            "--batch",
            "8",
            "--population",
            "16",
            "--json",
        ],
        search_measurements,
    );
    assert_eq!(code, Some(130), "{stderr}");
    assert_eq!(v["interrupted"], true);
    assert_eq!(
        search_measurements(&db) as u64,
        v["trials"].as_u64().unwrap()
    );
    assert_eq!(Store::open(&db).unwrap().integrity_check().unwrap(), "ok");
}

/// `tune MODEL` reads models with symbolic input dims as `kernels` and `apply` do
/// (`--input-shape`), and takes the blocking's lanes (`--mcpu`, `--lanes`).
#[test]
fn tune_a_model_with_symbolic_dims_takes_input_shapes() {
    let model = common::corpus_dir().join("onnx/odd/rnet.onnx");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let m = model.to_str().unwrap();
    let (code, _, err) = ttdb(&db, &["tune", m, "--trials", "8"]);
    assert_ne!(code, 0);
    assert!(err.contains("--input-shape input_2="), "{err}");
    let (code, out, err) = ttdb(
        &db,
        &[
            "tune",
            m,
            "--input-shape",
            "input_2=1,24,24,3",
            "--lanes",
            "16",
            "--trials",
            "16",
            "--batch",
            "8",
            "--population",
            "8",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let kernels = v["kernels"].as_array().unwrap();
    assert!(!kernels.is_empty(), "{v}");
    assert!(
        kernels
            .iter()
            .any(|k| k["best_ms"].as_f64().is_some_and(|t| t > 0.0)),
        "{v}"
    );
    // A dry run stores nothing, so there is no tuned model to run at the end.
    let (code, out, err) = ttdb(
        &db,
        &[
            "tune",
            m,
            "--input-shape",
            "input_2=1,24,24,3",
            "--lanes",
            "16",
            "--trials",
            "8",
            "--batch",
            "8",
            "--population",
            "8",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let why = v["end_to_end"]["not_measured"].as_str().unwrap_or_default();
    assert!(why.contains("--dry-run"), "{v}");
    let (code, _, err) = ttdb(&db, &["tune", "--all", "--lanes", "16"]);
    assert_ne!(code, 0, "--lanes needs a model: {err}");
    let (code, _, err) = ttdb(&db, &["tune", "--all", "--e2e-runs", "3"]);
    assert_ne!(code, 0, "--e2e-runs needs a model: {err}");
}
