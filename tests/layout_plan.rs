//! Graph-level NCHWc blocking (`--layout-plan planned`, docs/design/layout-plan.md): on real
//! models it removes transforms TopHub's per-conv choice forces, never raises its own
//! estimate above TopHub's, and gives blockings extraction accepts. (Outputs against
//! onnxruntime under planned blockings: `run_model::*_planned`.)
use crate::common;
use std::path::PathBuf;
use std::sync::Arc;
use ttdb::onnx::{self, HostEstimates, KernelList, LayoutMode, Options};

fn model(path: &str) -> PathBuf {
    common::corpus_dir().join("onnx").join(path)
}

/// The CLI's defaults (NCHWc, 4 lanes, TopHub), planned for a 16-lane 2-core host or not.
fn kernels(path: &str, planned: bool) -> KernelList {
    let opts = Options {
        layout: LayoutMode::Nchwc,
        lanes: 4,
        tophub: Some(Arc::new(onnx::TopHub::builtin())),
        layout_plan: planned.then(|| HostEstimates::typical(16, 2)),
        ..Options::default()
    };
    onnx::kernels_for_file(model(path), &[], &opts).unwrap()
}

#[test]
fn resnet50_planned_removes_the_transforms_tophub_forces() {
    let planned = kernels("torchvision_graph_only/resnet50.onnx", true);
    let tophub = kernels("torchvision_graph_only/resnet50.onnx", false);
    let p = planned.layout_plan.as_ref().unwrap();
    println!("{p:?}");
    assert!(tophub.layout_plan.is_none());
    assert!(p.estimated_ms <= p.estimated_ms_tophub, "{p:?}");
    assert!(p.transforms < p.transforms_tophub, "{p:?}");
    assert_eq!(p.convs, 53, "{p:?}");
    // What extraction inserted agrees with what the plan counted.
    assert!(
        planned.layout_transforms() < tophub.layout_transforms(),
        "{} planned against {} with TopHub",
        planned.layout_transforms(),
        tophub.layout_transforms()
    );
    // The same convs, the same kernel count (only blockings change).
    assert_eq!(
        planned.tuned().map(|k| k.multiplicity()).sum::<usize>(),
        tophub.tuned().map(|k| k.multiplicity()).sum::<usize>()
    );
}

/// mobilenet_v3_small's convs are not in TopHub: the fallback rule blocks them by 4 lanes
/// on a 16-lane host. The plan fills wider vectors where the channels allow.
#[test]
fn mobilenet_v3_small_planned_fills_the_hosts_vectors() {
    let planned = kernels("torchvision_more/mobilenet_v3_small.onnx", true);
    let tophub = kernels("torchvision_more/mobilenet_v3_small.onnx", false);
    let p = planned.layout_plan.as_ref().unwrap();
    println!("{p:?}");
    assert!(p.estimated_ms < p.estimated_ms_tophub, "{p:?}");
    assert!(p.changed > p.convs / 2, "{p:?}");
    let mean_oc = |l: &KernelList| {
        let blocks: Vec<i64> = l
            .kernels
            .iter()
            .filter_map(|k| Some(k.blocking?.oc_bn))
            .collect();
        blocks.iter().sum::<i64>() as f64 / blocks.len() as f64
    };
    assert!(
        mean_oc(&planned) > 2.0 * mean_oc(&tophub),
        "mean oc_bn {} planned, {} TopHub",
        mean_oc(&planned),
        mean_oc(&tophub)
    );
    // Deterministic: the same plan twice.
    let again = kernels("torchvision_more/mobilenet_v3_small.onnx", true);
    assert_eq!(signatures(&planned), signatures(&again));
}

/// mobilenet_v2's depthwise convs are blocked in whole 16-lane vectors (not 24-channel
/// blocks of a 16- and an 8-lane load), and the project convs that read them agree on the
/// block: no transform between ops but the flatten's.
#[test]
fn mobilenet_v2_planned_blocks_depthwise_convs_in_whole_vectors() {
    let planned = kernels("torchvision_graph_only/mobilenet_v2.onnx", true);
    let p = planned.layout_plan.as_ref().unwrap();
    println!("{p:?}");
    assert!(p.transforms <= 1, "{p:?}");
    let depthwise: Vec<i64> = planned
        .kernels
        .iter()
        .filter(|k| k.class.starts_with("depthwise"))
        .filter_map(|k| Some(k.blocking?.oc_bn))
        .collect();
    assert!(depthwise.len() >= 10, "{depthwise:?}");
    assert!(depthwise.iter().all(|b| b % 16 == 0), "{depthwise:?}");
}

fn signatures(l: &KernelList) -> Vec<Option<String>> {
    l.kernels.iter().map(|k| k.signature_hash.clone()).collect()
}

/// Models without an NCHWc conv have nothing to plan: the same kernels either way.
#[test]
fn a_model_without_convs_is_unchanged_by_planning() {
    let planned = kernels("transformers/distilbert_like.onnx", true);
    let tophub = kernels("transformers/distilbert_like.onnx", false);
    let p = planned.layout_plan.as_ref().unwrap();
    assert_eq!((p.convs, p.changed, p.transforms), (0, 0, 0), "{p:?}");
    assert_eq!(signatures(&planned), signatures(&tophub));
}

fn ttdb(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn kernels_shows_the_plan_and_refuses_an_unknown_one() {
    let m = model("torchvision_graph_only/resnet18.onnx");
    let out = ttdb(&["kernels", m.to_str().unwrap(), "--layout-plan", "planned"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("layout plan: "), "{text}");
    assert!(text.contains("layout transforms between ops"), "{text}");
    let out = ttdb(&["kernels", m.to_str().unwrap(), "--layout-plan", "neocpu"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown --layout-plan `neocpu` (tophub, planned)"),
        "{err}"
    );
}
