//! `ttdb kernels` and `ttdb tune` on models whose convs end in the new element-wise
//! epilogues: a tiny squeeze-excitation-like model written with ttdb's ONNX writer (conv +
//! bias + sigmoid; conv + bias - 0.5, to the power 2: a shared scalar constant, which is a
//! rank-0 parameter, and a fused one), searched and verified
//! end to end through the CLI; and the corpus models whose `conv2d+add+sigmoid` kernels
//! were untunable before (and whose SiLU kernels were, until DAG epilogues).
use crate::common;
use common::ttdb_on as ttdb;
use std::path::{Path, PathBuf};
use ttdb_testkit::onnx_model::{attr_ints, attr_tensor, float_scalar, ModelBuilder};

fn tiny_model(dir: &Path) -> PathBuf {
    let mut b = ModelBuilder::new("tiny_epilogues", 14);
    b.input("input", &[1, 8, 8, 8]);
    b.weight("c1.weight", &[8, 8, 3, 3]).weight("c1.bias", &[8]);
    b.weight("c2.weight", &[8, 8, 1, 1]).weight("c2.bias", &[8]);
    for (name, v) in [("half", 0.5), ("two", 2.0)] {
        b.node(
            "Constant",
            &format!("/{name}"),
            &[],
            &[name],
            vec![attr_tensor("value", float_scalar(v))],
        );
    }
    // `half` is read here, outside the conv groups: relay passes it to the second conv's
    // function as a rank-0 parameter instead of fusing it
    b.node("Mul", "/scale", &["input", "half"], &["x"], vec![]);
    b.node(
        "Conv",
        "/c1/Conv",
        &["x", "c1.weight", "c1.bias"],
        &["c1"],
        vec![
            attr_ints("kernel_shape", &[3, 3]),
            attr_ints("pads", &[1; 4]),
        ],
    );
    b.node("Sigmoid", "/c1/Sigmoid", &["c1"], &["s1"], vec![]);
    b.node(
        "Conv",
        "/c2/Conv",
        &["s1", "c2.weight", "c2.bias"],
        &["c2"],
        vec![attr_ints("kernel_shape", &[1, 1])],
    );
    b.node("Sub", "/c2/Sub", &["c2", "half"], &["d"], vec![]);
    b.node("Pow", "/c2/Pow", &["d", "two"], &["p"], vec![]);
    b.output("p");
    let path = dir.join("tiny_epilogues.onnx");
    std::fs::write(&path, b.encode()).unwrap();
    path
}

fn tuned_classes(v: &serde_json::Value) -> Vec<String> {
    v["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["kind"]["kind"] == "tuned")
        .map(|k| k["class"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn tiny_model_kernels_tune_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let db = dir.path().join("t.db");
    let (code, out, err) = ttdb(&db, &["kernels", model.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut classes = tuned_classes(&v);
    classes.sort();
    assert_eq!(
        classes,
        [
            "conv2d_nchwc+add+sigmoid",
            "conv2d_nchwc+add+subtract+power_scalar"
        ],
        "{v}"
    );
    let scalar = v["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["class"] == "conv2d_nchwc+add+subtract+power_scalar")
        .unwrap();
    // the fused constant is no task input, but part of the kernel's identity; the shared
    // one is a rank-0 input
    let inputs = scalar["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 4, "{scalar}");
    assert_eq!(inputs[3], serde_json::json!([]), "{scalar}");
    assert_eq!(
        scalar["signature"]["attrs"]["scalars"],
        serde_json::json!([2.0])
    );

    // Every kernel gets a best time (only a verified trial gives one), no trial failed.
    let v = common::tune_small_model(&db, &model, 16, 16, &[]);
    let kernels = v["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 2, "{v}");
    let trials = v["trials"].as_u64().unwrap();
    assert!(trials >= 16, "{v}");
    let searched = common::measurements(&db, "search", "search trial ");
    assert_eq!(searched as u64, trials);
}

fn corpus_model(name: &str) -> PathBuf {
    common::corpus_dir().join(format!("onnx/torchvision_more/{name}.onnx"))
}

/// The SE blocks' second conv (`conv + bias + sigmoid`, before the broadcast multiply) is a
/// tuned kernel, and so is every other conv.
#[test]
fn corpus_se_convs_with_sigmoid_are_tunable() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    for (model, sigmoid_kernels) in [("regnet_y_400mf", 7), ("efficientnet_b1", 9)] {
        let (code, out, err) = ttdb(
            &db,
            &["kernels", corpus_model(model).to_str().unwrap(), "--json"],
        );
        assert_eq!(code, 0, "{model}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let classes = tuned_classes(&v);
        let n = classes
            .iter()
            .filter(|c| *c == "conv2d_nchwc+add+sigmoid")
            .count();
        assert_eq!(n, sigmoid_kernels, "{model}: {classes:?}");
        // the SiLU diamonds (`x * sigmoid(x)`) are tuned too: nothing is untunable
        for k in v["kernels"].as_array().unwrap() {
            if let Some(reason) = k["kind"]["reason"].as_str() {
                panic!("{model}: {} untunable: {reason}", k["name"]);
            }
        }
    }
}
