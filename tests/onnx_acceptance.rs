//! Acceptance: the NCHWc kernels ttdb extracts from the torchvision ONNX graphs of the shared
//! corpus equal the Ansor tasks TVM extracted from the same models (tvm_ansor_bench_nchwc,
//! target without -mcpu: 4 SIMD lanes, TopHub configs where listed). Every conv / pool key of
//! the log is recognized by ttdb (`recognize()`) and compared with the extracted kernels'
//! signatures.
use crate::common;

use std::collections::BTreeMap;
use ttdb::ansor::WorkloadKey;
use ttdb::onnx::{self, Kernel, LayoutMode, Options};
use ttdb::recognize::recognize;
use ttdb::signature::WorkloadSignature;

const MODELS: &[(&str, &str)] = &[
    ("alexnet", "alexnet"),
    ("densenet121", "densenet_121"),
    ("googlenet", "googlenet"),
    ("mobilenet_v2", "mobilenet_v2"),
    ("resnet18", "resnet_18"),
    ("resnet50", "resnet_50"),
    ("vgg16", "vgg_16"),
];

/// Distinct workload keys of a best-record log, recognized.
fn key_signatures(path: &std::path::Path) -> Vec<(String, WorkloadSignature)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out: Vec<(String, WorkloadSignature)> = Vec::new();
    for line in text.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let raw = v["i"][0][0].as_str().unwrap().to_string();
        if out.iter().any(|(k, _)| *k == raw) {
            continue;
        }
        let key = WorkloadKey::parse(&raw).unwrap();
        let r = recognize(&key).unwrap_or_else(|e| panic!("{raw}: {e}"));
        out.push((raw, r.signature));
    }
    out
}

fn shape_key(s: &WorkloadSignature) -> (String, Vec<Vec<i64>>, Vec<i64>) {
    (s.op_class.clone(), s.inputs.clone(), s.output.clone())
}

fn is_conv_or_pool(class: &str) -> bool {
    class.contains("conv2d") || class.contains("pool")
}

fn attr_diff(a: &WorkloadSignature, b: &WorkloadSignature) -> String {
    let mut d = Vec::new();
    for k in a.attrs.keys().chain(b.attrs.keys()) {
        let (x, y) = (a.attrs.get(k), b.attrs.get(k));
        if x != y && !d.iter().any(|s: &String| s.starts_with(&format!("{k}:"))) {
            d.push(format!(
                "{k}: ours {} vs key {}",
                x.map(|v| v.to_string()).unwrap_or("-".into()),
                y.map(|v| v.to_string()).unwrap_or("-".into())
            ));
        }
    }
    d.join("; ")
}

#[test]
fn torchvision_nchwc_kernels_match_tvm_ansor_bench_keys() {
    let corpus = common::corpus_dir();
    let opts = Options {
        layout: LayoutMode::Nchwc,
        lanes: 4,
        ..Options::default()
    }
    .with_default_tophub()
    .unwrap();
    assert!(
        opts.tophub.is_some(),
        "TopHub log missing from the shared corpus"
    );
    let mut total = BTreeMap::new();
    let mut failures = Vec::new();
    println!(
        "{:<14} {:>7} {:>7} {:>7} {:>7} {:>9} {:>8}",
        "model", "kernels", "convs", "exact", "shapes", "mismatch", "keys_hit"
    );
    for &(file, log) in MODELS {
        let list = onnx::kernels_for_file(
            corpus.join(format!("onnx/torchvision_graph_only/{file}.onnx")),
            &[],
            &opts,
        )
        .unwrap();
        let keys =
            key_signatures(&corpus.join(format!("ansor/tvm_ansor_bench_nchwc/{log}.best.json")));
        let ours: Vec<&Kernel> = list.tuned().filter(|k| is_conv_or_pool(&k.class)).collect();
        let (mut exact, mut shapes, mut miss) = (0, 0, Vec::new());
        let mut hit = vec![false; keys.len()];
        for k in &ours {
            let sig = k.signature.as_ref().unwrap();
            if let Some(i) = keys.iter().position(|(_, s)| s == sig) {
                exact += 1;
                hit[i] = true;
            } else if let Some(i) = keys
                .iter()
                .position(|(_, s)| shape_key(s) == shape_key(sig))
            {
                shapes += 1;
                hit[i] = true;
                println!(
                    "    {file}: {} {} {:?} -> {:?}: same class/shapes, attrs differ ({})",
                    k.name,
                    k.class,
                    k.inputs,
                    k.output,
                    attr_diff(sig, &keys[i].1)
                );
            } else {
                miss.push(format!(
                    "{} {} {:?} -> {:?}",
                    k.name, k.class, k.inputs, k.output
                ));
            }
        }
        let keys_hit = hit.iter().filter(|&&h| h).count();
        let conv_keys = keys
            .iter()
            .filter(|(_, s)| is_conv_or_pool(&s.op_class))
            .count();
        println!(
            "{file:<14} {:>7} {:>7} {exact:>7} {shapes:>7} {:>9} {keys_hit:>4}/{conv_keys}",
            list.kernels.len(),
            ours.len(),
            miss.len()
        );
        for m in &miss {
            println!("    MISS {file}: {m}");
        }
        for (i, (raw, s)) in keys.iter().enumerate() {
            if !hit[i] && is_conv_or_pool(&s.op_class) {
                println!("    UNMATCHED KEY {log}: {} {raw}", s.op_class);
            }
        }
        let conv_miss = miss.iter().filter(|m| m.contains("conv2d")).count();
        if conv_miss > 0 {
            failures.push(format!("{file}: {conv_miss} conv kernels without a key"));
        }
        total.insert(file, (ours.len(), exact, shapes, miss.len()));
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
