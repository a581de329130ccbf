//! onnxruntime's outputs for the corpus models (`fixtures/reference/<model>/`, written by
//! tools/onnx_reference.py on the deterministic weights and inputs of
//! docs/design/deterministic-data.md), and the tolerance ttdb's outputs are held to.
#![allow(dead_code)]
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Every output element within this fraction of the output's largest magnitude (fp32
/// summation orders differ between ttdb's kernels and onnxruntime's).
pub const TOLERANCE: f64 = 1e-3;

pub fn reference_dir(model: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/reference")
        .join(model)
}

/// The model's `reference.json`: its corpus path, inputs (names, shapes) and outputs (names,
/// files).
pub fn manifest(model: &str) -> Value {
    let p = reference_dir(model).join("reference.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

pub fn reference_output(model: &str, file: &str) -> Vec<f32> {
    let p = reference_dir(model).join(file);
    let a = ttdb::npy::read(&std::fs::read(&p).unwrap()).unwrap();
    a.to_f32().expect("float32 reference")
}

/// The worst error of `got` (the model's outputs, in the manifest's order) relative to each
/// reference output's scale.
pub fn worst_error(model: &str, got: &[Vec<f64>]) -> f64 {
    let m = manifest(model);
    let outputs = m["outputs"].as_array().unwrap();
    assert_eq!(got.len(), outputs.len(), "{model}: outputs");
    let mut worst: f64 = 0.0;
    for (o, got) in outputs.iter().zip(got) {
        let want = reference_output(model, o["file"].as_str().unwrap());
        assert_eq!(got.len(), want.len(), "{model}: output {}", o["name"]);
        let scale = want
            .iter()
            .fold(0f64, |a, &x| a.max((x as f64).abs()))
            .max(1e-30);
        let err = got
            .iter()
            .zip(&want)
            .map(|(&a, &b)| (a - b as f64).abs() / scale)
            .fold(0f64, f64::max);
        worst = worst.max(err);
    }
    worst
}

/// `--input-shape` flags for the shapes onnxruntime ran (models with symbolic dims).
pub fn input_shape_flags(model: &str) -> Vec<String> {
    manifest(model)["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|i| {
            let dims: Vec<String> = i["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.to_string())
                .collect();
            [
                "--input-shape".to_string(),
                format!("{}={}", i["name"].as_str().unwrap(), dims.join(",")),
            ]
        })
        .collect()
}
