//! `ttdb export --model`: the best valid record of each kernel of a model under the
//! kernel's own TVM workload keys, as a log TVM's `ApplyHistoryBest` reads.
use crate::common;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use ttdb::ansor::{ErrorNo, Record};
use ttdb::onnx::{self, LayoutMode, Options};
use ttdb::ops::Era;

/// Runs ttdb on `db`, playing a host with ISA flags `isa` (comma list) when given.
fn ttdb(db: &Path, isa: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"));
    if let Some(isa) = isa {
        cmd.env("TTDB_PRETEND_ISA", isa);
    }
    let out = cmd.arg("--db").arg(db).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn resnet_18_log() -> PathBuf {
    common::corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json")
}

/// Every TVM workload key of the model's tunable kernels (NCHWc, 4 lanes, TopHub blocking:
/// the CLI's defaults), over every TVM era, and the number of tunable kernels.
fn model_keys(model: &Path) -> (BTreeSet<String>, usize) {
    let tophub = Some(std::sync::Arc::new(onnx::TopHub::builtin()));
    let opts = Options {
        layout: LayoutMode::Nchwc,
        lanes: 4,
        tophub,
        ..Options::default()
    };
    let list = onnx::kernels_for_file(model, &[], &opts).unwrap();
    let mut keys = BTreeSet::new();
    for k in list.tuned() {
        for era in Era::ALL {
            if let Ok(dag) = k.spec.as_ref().unwrap().build(era, &k.inputs) {
                keys.insert(ttdb::tune::apply::workload_key_of(&dag));
            }
        }
    }
    (keys, list.tuned().count())
}

/// Every record in the database, parsed (`ttdb export` writes them all).
fn all_records(db: &Path) -> Vec<Record> {
    let (code, out, err) = ttdb(db, None, &["export"]);
    assert_eq!(code, 0, "{err}");
    out.lines().map(|l| Record::parse(l).unwrap()).collect()
}

/// Checks the written log against the database: every line parses, is under one of the
/// model's kernel keys, and is the best valid record of that key (`rank` orders targets:
/// this host's ISA first); every model key with a valid record is written once.
fn check_written(
    written: &str,
    db: &Path,
    keys: &BTreeSet<String>,
    rank: impl Fn(&str) -> u8,
) -> usize {
    let mut best: BTreeMap<String, Record> = BTreeMap::new();
    for r in all_records(db) {
        if !r.result.is_valid() || !keys.contains(&r.task.workload_key) {
            continue;
        }
        let order = |r: &Record| (rank(&r.task.target), r.result.mean_cost());
        let better = best
            .get(&r.task.workload_key)
            .is_none_or(|b| order(&r).partial_cmp(&order(b)).unwrap().is_lt());
        if better {
            best.insert(r.task.workload_key.clone(), r);
        }
    }
    let mut seen = BTreeSet::new();
    for line in written.lines() {
        let r = Record::parse(line).unwrap_or_else(|e| panic!("unreadable line {line}: {e}"));
        let key = &r.task.workload_key;
        assert!(keys.contains(key), "not a key of the model: {key}");
        assert!(seen.insert(key.clone()), "two lines for {key}");
        assert_eq!(
            line,
            best[key].to_line(),
            "not the best valid record of {key}"
        );
    }
    assert_eq!(
        seen,
        best.keys().cloned().collect(),
        "every key with a valid record"
    );
    seen.len()
}

/// The first record of the resnet_18 log with another target, cost and error code.
fn variant(first: &str, target: &str, cost: f64, error_no: u8) -> String {
    let mut r = Record::parse(first).unwrap();
    r.task.target = target.into();
    r.result.costs = vec![cost];
    r.result.error_no = ErrorNo(error_no);
    r.to_line()
}

#[test]
fn export_model_writes_the_best_valid_record_of_each_kernel_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ttdb.db");
    let (code, _, err) = ttdb(&db, None, &["import", resnet_18_log().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // For the first kernel's key: a faster failed record (never chosen), a record needing
    // AVX-512 (the fastest valid one) and an AVX2 one (faster than the log's own record,
    // whose target names no CPU).
    let text = std::fs::read_to_string(resnet_18_log()).unwrap();
    let first = text.lines().next().unwrap();
    let cost = Record::parse(first).unwrap().result.mean_cost();
    let extra = dir.path().join("extra.json");
    let lines = [
        variant(first, "llvm -keys=cpu", cost / 100.0, 4),
        variant(first, "llvm -keys=cpu -mcpu=skylake-avx512", cost / 10.0, 0),
        variant(first, "llvm -keys=cpu -mcpu=core-avx2", cost / 2.0, 0),
    ];
    std::fs::write(&extra, lines.join("\n") + "\n").unwrap();
    let (code, _, err) = ttdb(&db, None, &["import", extra.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");

    let model = common::corpus_dir().join("onnx/torchvision_graph_only/resnet18.onnx");
    let (keys, tuned) = model_keys(&model);
    let out = dir.path().join("model.json");
    let export = |isa: &str| {
        let args = [
            "export",
            "--model",
            model.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        let (code, _, err) = ttdb(&db, Some(isa), &args);
        assert_eq!(code, 0, "{err}");
        (std::fs::read_to_string(&out).unwrap(), err)
    };

    // An AVX2 host: the AVX-512 record goes last, though the fastest; then by cost (a
    // target naming no CPU ranks with the compatible ones).
    let (written, stderr) = export("avx,avx2,fma");
    let rank = |t: &str| t.contains("skylake-avx512") as u8;
    let n = check_written(&written, &db, &keys, rank);
    assert!(written.contains("-mcpu=core-avx2"), "{written}");
    // ResNet-18's fc layer has no record in the log: it is listed, with what to run.
    assert!(n >= 17, "{n} records for {tuned} kernels");
    assert!(
        stderr.contains(&format!("{n} record(s) for {n} of {tuned} tunable kernels")),
        "{stderr}"
    );
    assert!(stderr.contains("not written: /fc/Gemm (dense+add): no record under its TVM workload key(s); run `ttdb apply"), "{stderr}");

    // An AVX-512 host: every record is runnable, the fastest wins.
    let (written, _) = export("avx,avx2,avx512f,fma");
    check_written(&written, &db, &keys, |_| 0);
    assert!(written.contains("-mcpu=skylake-avx512"), "{written}");

    // --json: the summary on stdout.
    let args = [
        "export",
        "--model",
        model.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--json",
    ];
    let (code, json, err) = ttdb(&db, Some("avx,avx2,fma"), &args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["kernels"], tuned as u64);
    assert_eq!(v["written"], n as u64);
    let missing: Vec<&serde_json::Value> = v["per_kernel"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| !k["missing"].is_null())
        .collect();
    assert_eq!(v["missing"], missing.len() as u64);
    assert_eq!(missing[0]["name"], "/fc/Gemm");
}

/// After `ttdb apply`, every tunable kernel has what apply measured under its key: the
/// export covers the whole model and picks the fastest of it, and keeps it when the same
/// schedules arrive with far lower costs logged on another machine.
#[test]
fn export_after_apply_covers_every_kernel_of_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ttdb.db");
    let (code, _, err) = ttdb(&db, None, &["import", resnet_18_log().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/models/tiny_resnet.onnx");
    let (code, _, err) = ttdb(
        &db,
        None,
        &[
            "apply",
            model.to_str().unwrap(),
            "--top-k",
            "1",
            "--transfer-only",
            // the blocking TVM extracts (apply plans the whole graph by default)
            "--layout-plan",
            "tophub",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let out = dir.path().join("model.json");
    let args = [
        "export",
        "--model",
        model.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--json",
    ];
    // Only ttdb's own measurements (on this host) are under the tiny model's keys: cost
    // alone decides.
    let (code, json, err) = ttdb(&db, None, &args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let (keys, tuned) = model_keys(&model);
    assert_eq!(v["kernels"], tuned as u64, "{v}");
    assert_eq!(v["missing"], 0, "{v}");
    let written = std::fs::read_to_string(&out).unwrap();
    let n = check_written(&written, &db, &keys, |_| 0);
    assert!(n >= tuned, "{n} records for {tuned} kernels");
    let measured_here = |v: &serde_json::Value| {
        v["per_kernel"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|k| k["written"].as_array().unwrap().iter())
            .all(|w| w["measured_here"] == true)
    };
    assert!(measured_here(&v), "{v}");

    // The same schedules logged on another machine, 1000x cheaper: a cost measured there
    // says nothing about this host, so ttdb's own timings still choose, in export and run.
    let foreign: Vec<String> = written
        .lines()
        .map(|l| {
            let r = Record::parse(l).unwrap();
            variant(l, "llvm -keys=cpu", r.result.mean_cost() / 1000.0, 0)
        })
        .collect();
    let extra = dir.path().join("elsewhere.json");
    std::fs::write(&extra, foreign.join("\n") + "\n").unwrap();
    let (code, _, err) = ttdb(&db, None, &["import", extra.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, json, err) = ttdb(&db, None, &args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), written);
    assert!(
        measured_here(&serde_json::from_str(&json).unwrap()),
        "{json}"
    );
    let run_dir = dir.path().join("run");
    let (code, json, err) = ttdb(
        &db,
        None,
        &[
            "run",
            model.to_str().unwrap(),
            "--deterministic-inputs",
            "-o",
            run_dir.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let stored: Vec<&str> = v["kernels_planned"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["schedule"].as_str()?.strip_prefix("stored: "))
        .collect();
    assert!(!stored.is_empty(), "{v}");
    assert!(
        stored
            .iter()
            .all(|s| s.starts_with("ttdb:apply@") || s.starts_with("ttdb:default@")),
        "a foreign record was chosen: {stored:?}"
    );
}
