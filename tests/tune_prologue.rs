//! LayerNorm's variance kernel (`power_scalar+mean`: an element-wise prologue fused into a
//! reduction) through the whole pipeline on a writer-built LayerNorm model: `ttdb kernels`
//! lists it as tuned, `ttdb tune model.onnx` searches it (sketches with the power and
//! constant stages inlined) and every measured trial verifies against the reference,
//! `ttdb tune --workload` searches it again seeded with the stored records, `ttdb apply`
//! picks a verified schedule for it.
use crate::common;
use common::ttdb_on as ttdb;
use std::path::{Path, PathBuf};
use ttdb_testkit::onnx_model::{attr_int, attr_ints, attr_tensor, float_scalar, ModelBuilder};

fn layer_norm_model(dir: &Path, seq: i64, width: i64) -> PathBuf {
    let name = format!("tiny_layer_norm_{seq}x{width}");
    let mut b = ModelBuilder::new(&name, 14);
    b.input("x", &[1, seq, width]);
    b.weight("gamma", &[width]).weight("beta", &[width]);
    for (name, v) in [("two", 2.0), ("eps", 1e-5)] {
        b.node(
            "Constant",
            &format!("/{name}"),
            &[],
            &[name],
            vec![attr_tensor("value", float_scalar(v))],
        );
    }
    let mean = |b: &mut ModelBuilder, name: &str, x: &str, y: &str| {
        b.node(
            "ReduceMean",
            name,
            &[x],
            &[y],
            vec![attr_ints("axes", &[-1]), attr_int("keepdims", 1)],
        );
    };
    mean(&mut b, "/ln/ReduceMean", "x", "m");
    b.node("Sub", "/ln/Sub", &["x", "m"], &["d"], vec![]);
    b.node("Pow", "/ln/Pow", &["d", "two"], &["p"], vec![]);
    mean(&mut b, "/ln/ReduceMean_1", "p", "v");
    b.node("Add", "/ln/Add", &["v", "eps"], &["ve"], vec![]);
    b.node("Sqrt", "/ln/Sqrt", &["ve"], &["s"], vec![]);
    b.node("Div", "/ln/Div", &["d", "s"], &["n"], vec![]);
    b.node("Mul", "/ln/Mul", &["n", "gamma"], &["g"], vec![]);
    b.node("Add", "/ln/Add_1", &["g", "beta"], &["y"], vec![]);
    b.output("y");
    let path = dir.join(format!("{name}.onnx"));
    std::fs::write(&path, b.encode()).unwrap();
    path
}

fn json(args: &[&str], db: &Path) -> serde_json::Value {
    let (code, out, err) = ttdb(db, args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

#[test]
fn layer_norm_variance_tunes_verifies_and_applies() {
    let dir = tempfile::tempdir().unwrap();
    let model = layer_norm_model(dir.path(), 16, 64);
    let m = model.to_str().unwrap();
    let db = dir.path().join("t.db");
    let v = json(&["kernels", m, "--json"], &db);
    let tuned: Vec<&serde_json::Value> = v["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["kind"]["kind"] == "tuned")
        .collect();
    let classes: Vec<&str> = tuned.iter().map(|k| k["class"].as_str().unwrap()).collect();
    assert_eq!(classes, ["mean", "power_scalar+mean"], "{v}");
    let var = tuned[1];
    assert_eq!(var["inputs"], serde_json::json!([[1, 16, 64]]), "{var}");
    assert_eq!(
        var["signature"]["attrs"]["prologue_scalars"],
        serde_json::json!([2.0])
    );

    // Every kernel gets a best time (only a verified trial gives one), no trial failed.
    let v = common::tune_small_model(&db, Path::new(m), 16, 16, &[]);
    let kernels = v["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 2, "{v}");

    // the stored workload searched again by signature
    let sig = var["signature_hash"].as_str().unwrap();
    let v = json(
        &[
            "tune",
            "--workload",
            &sig[..12],
            "--trials",
            "8",
            "--batch",
            "8",
            "--population",
            "8",
            "--json",
        ],
        &db,
    );
    let s = v.to_string();
    assert!(s.contains("power_scalar+mean"), "{s}");

    // Droplet over the knobs of its best schedule
    let v = json(
        &[
            "refine",
            "--workload",
            &sig[..12],
            "--trials-per-kernel",
            "8",
            "--batch",
            "4",
            "--samples",
            "3",
            "--json",
        ],
        &db,
    );
    let s = v.to_string();
    assert!(s.contains("power_scalar+mean"), "{s}");
    assert!(!s.contains("\"error\""), "{s}");
    let k = &v["kernels"][0];
    assert_eq!(k["op_class"], "power_scalar+mean", "{s}");
    assert!(k["knobs"].as_u64().unwrap() > 0, "{s}");
    assert!(k["trials"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(k["failed_trials"], 0, "{s}");

    // apply: transfer from the stored records, measured and verified
    let v = json(
        &["apply", m, "--top-k", "2", "--transfer-only", "--json"],
        &db,
    );
    let s = v.to_string();
    assert!(s.contains("power_scalar+mean"), "{s}");
    // the tuned records of this very signature are exact candidates, measured and verified
    assert_applied_with_verified(&v, "exact");

    // another LayerNorm width: the stored records transfer by class (split lengths moved
    // to the new extents), measured and verified
    let other = layer_norm_model(dir.path(), 8, 48);
    let v = json(
        &[
            "apply",
            other.to_str().unwrap(),
            "--top-k",
            "2",
            "--transfer-only",
            "--json",
        ],
        &db,
    );
    assert_applied_with_verified(&v, "class");
}

/// `apply --json` chose a verified schedule for the `power_scalar+mean` kernel, and among
/// its measured candidates is a verified one of match tier `tier`.
fn assert_applied_with_verified(v: &serde_json::Value, tier: &str) {
    let applied = v["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["class"] == "power_scalar+mean")
        .unwrap();
    assert_eq!(applied["verified"], true, "{applied}");
    let trials = applied["trials"].as_array().unwrap();
    assert!(
        trials
            .iter()
            .any(|t| t["tier"] == tier && t["verified"] == true),
        "{applied}"
    );
}
