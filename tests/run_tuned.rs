//! Whole models on tuned schedules, against onnxruntime's outputs (`fixtures/reference/`):
//! the records of a real Ansor log of the same network (or one sharing its layers) imported,
//! or a short `ttdb tune` from an empty database, then `ttdb run`. The stored schedules
//! replace the default ones kernel by kernel; the outputs must not change beyond the
//! tolerance.
//!
//! Each model's run with default schedules, in both layouts, is in tests/run_model.rs.
use crate::common;
use crate::common::reference;

use reference::{input_shape_flags, TOLERANCE};
use serde_json::Value;
use std::path::Path;

fn ttdb(db: &Path, args: &[String]) -> Value {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .arg("--db")
        .arg(db)
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "ttdb {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The corpus file of `model` (from its reference manifest).
fn model_path(model: &str) -> String {
    let m = reference::manifest(model);
    let path = common::corpus_dir().join(m["model"].as_str().unwrap());
    path.to_str().unwrap().to_string()
}

/// Fills a new database with `ttdb FILL...`, then runs `model` in `layout` on it: at least
/// `min_stored` kernels run a stored schedule, at least `min_packed` weights were packed
/// into a stored schedule's layout (as the tuner measured it), and the outputs match
/// onnxruntime's.
fn stored_schedules_then_run(
    model: &str,
    layout: &str,
    fill: &[String],
    min_stored: usize,
    min_packed: usize,
) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    ttdb(&db, fill);
    let (stored, total, worst, packed) = run_on(&db, model, layout);
    assert!(
        stored >= min_stored,
        "{model}: only {stored} of {total} kernels ran a stored schedule"
    );
    assert!(
        packed >= min_packed,
        "{model}: {packed} weights packed for the stored schedules, expected {min_packed}+"
    );
    assert!(worst < TOLERANCE, "{model}: {worst:.3e}");
}

/// Runs `model` in `layout` on the schedules in `db`; returns how many kernels ran a stored
/// schedule, of how many, the worst error against onnxruntime, and the weights packed.
fn run_on(db: &Path, model: &str, layout: &str) -> (usize, usize, f64, usize) {
    let path = model_path(model);
    let out = db.with_file_name(format!("out-{model}"));
    let mut args: Vec<String> = [
        "run",
        &path,
        "--layout",
        layout,
        "--deterministic-inputs",
        "-o",
        out.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    args.extend(input_shape_flags(model));
    let report = ttdb(db, &args);
    let plan = report["kernels_planned"].as_array().unwrap();
    let stored = plan
        .iter()
        .filter(|k| k["schedule"].as_str().unwrap().starts_with("stored: "))
        .count();
    let got: Vec<Vec<f64>> = report["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let a = ttdb::npy::read(&std::fs::read(o["file"].as_str().unwrap()).unwrap()).unwrap();
            a.to_f32().unwrap().into_iter().map(f64::from).collect()
        })
        .collect();
    let worst = reference::worst_error(model, &got);
    println!(
        "{model} ({layout}): {stored} of {} kernels on a stored schedule; worst error {worst:.2e} of the output scale",
        plan.len()
    );
    (
        stored,
        plan.len(),
        worst,
        report["packed_weights"].as_u64().unwrap() as usize,
    )
}

/// `model` in `layout` after importing `logs` (paths under the corpus's `ansor/`): at least
/// `min_stored` kernels run a stored schedule, and the outputs still match.
macro_rules! stored_schedules_match {
    ($($test:ident: $model:literal, $layout:literal, [$($log:literal),+], $min_stored:literal;)*) => {$(
        #[test]
        fn $test() {
            let mut args = vec!["import".to_string()];
            $(args.push(common::corpus_dir().join("ansor").join($log).to_str().unwrap().into());)+
            // NHWC convs' weights are layout-free: their schedules pack them. NCHWc convs
            // read weights AlterOpLayout packed already.
            let min_packed = if $layout == "nhwc" { 1 } else { 0 };
            stored_schedules_then_run($model, $layout, &args, $min_stored, min_packed);
        }
    )*};
}

stored_schedules_match! {
    // the networks' own logs (thaisacs/TVM-Ansor-Bench, tuned in NCHWc and in NHWC)
    resnet18_on_its_own_log: "resnet18", "nchwc", ["tvm_ansor_bench_nchwc/resnet_18.best.json"], 12;
    resnet18_nhwc_on_its_own_log: "resnet18", "nhwc", ["tvm_ansor_bench_nhwc/resnet_18.best.json"], 12;
    resnet50_on_its_own_log: "resnet50", "nchwc", ["tvm_ansor_bench_nchwc/resnet_50.best.json"], 20;
    mobilenet_v2_on_its_own_log: "mobilenet_v2", "nchwc", ["tvm_ansor_bench_nchwc/mobilenet_v2.best.json"], 20;
    mobilenet_v2_nhwc_on_its_own_log: "mobilenet_v2", "nhwc", ["tvm_ansor_bench_nhwc/mobilenet_v2.best.json"], 20;
    googlenet_on_its_own_log: "googlenet", "nchwc", ["tvm_ansor_bench_nchwc/googlenet.best.json"], 40;
    densenet121_on_its_own_log: "densenet121", "nchwc", ["tvm_ansor_bench_nchwc/densenet_121.best.json"], 50;
    alexnet_on_its_own_log: "alexnet", "nchwc", ["tvm_ansor_bench_nchwc/alexnet.best.json"], 6;
    vgg16_on_its_own_log: "vgg16", "nchwc", ["tvm_ansor_bench_nchwc/vgg_16.best.json"], 10;
    // networks sharing layers with a tuned one: resnet34's convs are resnet18's, the ONNX
    // zoo's resnet50 v1, vgg19 and densenet121 share most convs with torchvision's
    resnet34_on_resnet18s_log: "resnet34", "nchwc", ["tvm_ansor_bench_nchwc/resnet_18.best.json"], 12;
    light_resnet50_on_resnet50s_log: "light_resnet50", "nchwc", ["tvm_ansor_bench_nchwc/resnet_50.best.json"], 15;
    light_vgg19_on_vgg16s_log: "light_vgg19", "nchwc", ["tvm_ansor_bench_nchwc/vgg_16.best.json"], 10;
    light_densenet121_on_densenet121s_log: "light_densenet121", "nchwc", ["tvm_ansor_bench_nchwc/densenet_121.best.json"], 5;
}

/// `model` after `ttdb tune MODEL --trials N` from an empty database (no log of it or of a
/// network like it exists): the kernels the search found schedules for run them.
macro_rules! tuned_schedules_match {
    ($($test:ident: $model:literal, $layout:literal, $trials:literal, $min_packed:literal;)*) => {$(
        #[test]
        fn $test() {
            // No seeds: with the default schedules among them, a tune this short stores
            // mostly defaults, and the packing of searched schedules would go untested.
            // (gpt2_like needs 16 trials for a searched dense schedule that packs: with 4,
            // the one dense kernel measured got a random state that keeps its weights.)
            let mut args: Vec<String> = ["tune", &model_path($model), "--layout", $layout, "--trials", $trials, "--seeds", "0"]
                .map(String::from)
                .to_vec();
            args.extend(input_shape_flags($model));
            stored_schedules_then_run($model, $layout, &args, 1, $min_packed);
        }
    )*};
}

tuned_schedules_match! {
    mobilenet_v3_small_after_a_short_tune: "mobilenet_v3_small", "nchwc", "16", 0;
    // dense and batch_matmul weights are layout-free
    gpt2_like_after_a_short_tune: "gpt2_like", "nchwc", "16", 1;
}

/// Without `--layout`, `run` takes the layout whose kernels the database has schedules for:
/// after the NHWC log of resnet18 NHWC (every conv on its stored schedule), after the NCHWc
/// log NCHWc; the outputs match either way.
#[test]
fn run_without_a_layout_takes_the_one_the_database_has_schedules_for() {
    for (log, expected) in [
        ("tvm_ansor_bench_nhwc/resnet_18.best.json", "nhwc"),
        ("tvm_ansor_bench_nchwc/resnet_18.best.json", "nchwc"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("t.db");
        let log = common::corpus_dir().join("ansor").join(log);
        ttdb(&db, &["import".into(), log.to_str().unwrap().into()]);
        let out = dir.path().join("out");
        let report = ttdb(
            &db,
            &[
                "run".into(),
                model_path("resnet18"),
                "--deterministic-inputs".into(),
                "-o".into(),
                out.to_str().unwrap().into(),
            ],
        );
        assert_eq!(report["layout"], expected, "after {}", log.display());
        let stored = report["kernels_planned"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|k| k["schedule"].as_str().unwrap().starts_with("stored: "))
            .count();
        assert!(
            stored >= 12,
            "{expected}: only {stored} kernels on a stored schedule"
        );
        let got: Vec<Vec<f64>> = report["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let a =
                    ttdb::npy::read(&std::fs::read(o["file"].as_str().unwrap()).unwrap()).unwrap();
                a.to_f32().unwrap().into_iter().map(f64::from).collect()
            })
            .collect();
        let worst = reference::worst_error("resnet18", &got);
        assert!(worst < TOLERANCE, "{expected}: {worst:.3e}");
    }
}
