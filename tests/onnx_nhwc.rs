//! NHWC comparison: ttdb's NHWC kernels (ConvertLayout to NHWC, winograd for 3x3 stride-1
//! convs with 64 < CO < 512) against the Ansor tasks of the tvm_ansor_bench NHWC run.
//! Winograd keys are not md5-reproducible by ttdb (recognized structurally, which does not
//! pin the fused activation), so they are compared by anchor class and shapes.
use crate::common;

use ttdb::ansor::WorkloadKey;
use ttdb::onnx::{self, LayoutMode, Options};
use ttdb::recognize::{recognize, RecognizedBy};
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

fn anchor(class: &str) -> &str {
    class.split('+').next().unwrap_or(class)
}

fn relevant(class: &str) -> bool {
    class.contains("conv2d") || class.contains("pool")
}

#[test]
fn nhwc_kernels_vs_tvm_ansor_bench_nhwc() {
    let corpus = common::corpus_dir();
    let opts = Options {
        layout: LayoutMode::Nhwc,
        ..Options::default()
    };
    println!(
        "{:<14} {:>6} {:>6} {:>7} {:>8} {:>5} {:>9} {:>8}",
        "model", "ours", "exact", "shapes", "anchor+s", "miss", "winograd", "keys_hit"
    );
    let mut conv_misses = Vec::new();
    for &(file, log) in MODELS {
        let list = onnx::kernels_for_file(
            corpus.join(format!("onnx/torchvision_graph_only/{file}.onnx")),
            &[],
            &opts,
        )
        .unwrap();
        let text = std::fs::read_to_string(
            corpus.join(format!("ansor/tvm_ansor_bench_nhwc/{log}.best.json")),
        )
        .unwrap();
        let mut keys: Vec<(String, WorkloadSignature, bool)> = Vec::new();
        for line in text.lines().filter(|l| l.starts_with('{')) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let raw = v["i"][0][0].as_str().unwrap().to_string();
            if keys.iter().any(|(k, _, _)| *k == raw) {
                continue;
            }
            let r = recognize(&WorkloadKey::parse(&raw).unwrap()).unwrap();
            keys.push((raw, r.signature, r.recognized_by == RecognizedBy::Md5));
        }
        let ours: Vec<&onnx::Kernel> = list.tuned().filter(|k| relevant(&k.class)).collect();
        let (mut exact, mut shapes, mut anchored, mut wino) = (0, 0, 0, 0);
        let mut hit = vec![false; keys.len()];
        for k in &ours {
            let s = k.signature.as_ref().unwrap();
            wino += k.winograd as usize;
            if let Some(i) = keys.iter().position(|(_, ks, _)| ks == s) {
                exact += 1;
                hit[i] = true;
            } else if let Some(i) = keys.iter().position(|(_, ks, _)| {
                ks.op_class == s.op_class && ks.inputs == s.inputs && ks.output == s.output
            }) {
                shapes += 1;
                hit[i] = true;
            } else if let Some(i) = keys.iter().position(|(_, ks, md5)| {
                !md5 && anchor(&ks.op_class) == anchor(&s.op_class)
                    && ks.inputs == s.inputs
                    && ks.output == s.output
            }) {
                anchored += 1;
                hit[i] = true;
                println!(
                    "    {file}: {} {} matches structural key {} by anchor and shapes",
                    k.name, k.class, keys[i].1.op_class
                );
            } else {
                println!(
                    "    MISS {file}: {} {} {:?} -> {:?}",
                    k.name, k.class, k.inputs, k.output
                );
                if k.class.contains("conv2d") {
                    conv_misses.push(format!("{file}: {} {}", k.name, k.class));
                }
            }
        }
        for (i, (raw, s, _)) in keys.iter().enumerate() {
            if !hit[i] && relevant(&s.op_class) {
                println!("    UNMATCHED KEY {log}: {} {raw}", s.op_class);
            }
        }
        let n_rel = keys
            .iter()
            .filter(|(_, s, _)| relevant(&s.op_class))
            .count();
        println!(
            "{file:<14} {:>6} {exact:>6} {shapes:>7} {anchored:>8} {:>5} {wino:>9} {:>4}/{n_rel}",
            ours.len(),
            ours.len() - exact - shapes - anchored,
            hit.iter().filter(|&&h| h).count()
        );
    }
    assert!(
        conv_misses.is_empty(),
        "NHWC conv kernels without a key: {conv_misses:#?}"
    );
}
