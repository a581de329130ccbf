//! The reference outputs in `fixtures/reference/` (written offline by
//! `tools/onnx_reference.py` with onnxruntime) were computed on weights and inputs that ttdb
//! can reproduce: the deterministic fill of docs/design/deterministic-data.md. This checks that
//! ttdb's fill gives the very numbers the script used, model by model, so that comparing
//! ttdb's outputs with those files compares the same computation.
use crate::common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use ttdb::onnx::fill;
use ttdb::onnx::weights::{read_model_weights, Origin, Values, WeightLimits};

fn manifests() -> Vec<(PathBuf, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference");
    let mut out: Vec<(PathBuf, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (run tools/onnx_reference.py)", dir.display()))
        .map(|e| e.unwrap().path().join("reference.json"))
        .filter(|p| p.is_file())
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 20, "only {} reference manifests", out.len());
    out
}

/// The f64 sum of f32 values, compared with a relative tolerance (numpy sums pairwise).
fn close_sum(ours: f64, theirs: f64) -> bool {
    (ours - theirs).abs() <= 1e-9 * ours.abs().max(theirs.abs()).max(1.0)
}

fn first4(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn the_fill_matches_the_reference_script() {
    let corpus = common::corpus_dir();
    let mut weights_checked = 0;
    let mut inputs_checked = 0;
    for (path, m) in manifests() {
        if m.get("error").is_some() {
            continue;
        }
        let model = corpus.join(m["model"].as_str().unwrap());
        let w = read_model_weights(&model, &WeightLimits::default())
            .unwrap_or_else(|e| panic!("{}: {e}", model.display()));
        let filled = w.filled().0;
        assert_eq!(
            filled as u64,
            m["filled_initializers"].as_u64().unwrap(),
            "{}: filled initializers",
            path.display()
        );
        for c in m["fill_check"].as_array().unwrap() {
            let name = c["name"].as_str().unwrap();
            let t = &w.tensors[name];
            assert!(matches!(t.origin, Origin::Filled { .. }), "{name}");
            let values: Vec<f64> = match &t.values {
                Values::F32(v) => v.iter().map(|&x| x as f64).collect(),
                Values::F64(v) => v.clone(),
                Values::I64(v) => v.iter().map(|&x| x as f64).collect(),
            };
            let ctx = format!("{}: initializer {name} ({})", path.display(), c["role"]);
            assert_eq!(values.len() as u64, c["count"].as_u64().unwrap(), "{ctx}");
            assert_eq!(
                values[..values.len().min(4)],
                first4(&c["first4"])[..],
                "{ctx}"
            );
            let sum: f64 = values.iter().sum();
            assert!(
                close_sum(sum, c["sum"].as_f64().unwrap()),
                "{ctx}: sum {sum} vs {}",
                c["sum"]
            );
            weights_checked += 1;
        }
        for i in m["inputs"].as_array().unwrap() {
            if i.get("special").is_some() {
                // a value the model needs (silero's sample rate), not the fill: the manifest
                // says which, and a run passes it as an input
                continue;
            }
            let name = i["name"].as_str().unwrap();
            let n = i["count"].as_u64().unwrap() as usize;
            let values: Vec<f64> = if i["dtype"].as_str().unwrap().starts_with("float") {
                fill::input_floats(name, n)
                    .iter()
                    .map(|&x| x as f64)
                    .collect()
            } else {
                fill::input_ints(name, n)
                    .iter()
                    .map(|&x| x as f64)
                    .collect()
            };
            let ctx = format!("{}: input {name}", path.display());
            assert_eq!(values[..n.min(4)], first4(&i["first4"])[..], "{ctx}");
            let sum: f64 = values.iter().sum();
            assert!(
                close_sum(sum, i["sum"].as_f64().unwrap()),
                "{ctx}: sum {sum} vs {}",
                i["sum"]
            );
            inputs_checked += 1;
        }
    }
    assert!(
        weights_checked > 50,
        "only {weights_checked} filled weights checked"
    );
    assert!(inputs_checked >= 20, "only {inputs_checked} inputs checked");
}
