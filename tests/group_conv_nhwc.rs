//! Grouped convolutions in NHWC (`topi.nn.group_conv2d_nhwc`, relay's x86 strategy for
//! NHWC convs with groups > 1): regnet_x_400mf's grouped convs under `--layout nhwc` are
//! tuned kernels; their keys are recognized by md5 with the kernel's signature, their
//! default schedules verify against the reference, and `ttdb tune` searches them.
use crate::common;
use ttdb::evaluate::{evaluate_default, EvalOptions, Reference};
use ttdb::onnx::{self, KernelList, LayoutMode, Options};
use ttdb::ops::Era;

fn regnet() -> std::path::PathBuf {
    common::corpus_dir().join("onnx/torchvision_more/regnet_x_400mf.onnx")
}

fn nhwc_kernels() -> KernelList {
    let opts = Options {
        layout: LayoutMode::Nhwc,
        ..Options::default()
    };
    onnx::kernels_for_file(regnet(), &[], &opts).unwrap()
}

#[test]
fn grouped_nhwc_convs_are_tuned_and_recognized_by_md5() {
    let list = nhwc_kernels();
    let untunable: Vec<_> = list
        .kernels
        .iter()
        .filter(|k| matches!(k.kind, onnx::KernelKind::Untunable { .. }))
        .map(|k| (&k.name, &k.kind))
        .collect();
    assert!(untunable.is_empty(), "{untunable:?}");
    let grouped: Vec<_> = list
        .tuned()
        .filter(|k| k.class.starts_with("group_conv2d_nhwc"))
        .collect();
    assert!(grouped.len() >= 5, "{} grouped NHWC kernels", grouped.len());
    let opts = EvalOptions {
        verify_only: true,
        ..EvalOptions::default()
    };
    for (i, k) in grouped.iter().enumerate() {
        let sig = k.signature.as_ref().unwrap();
        assert_eq!(
            sig.attrs["groups"],
            serde_json::json!(k.inputs[0][3] / k.inputs[1][2])
        );
        let dag = common::kernel_dag(k);
        common::recognized_by_md5(k, &dag);
        // Default schedules of the two smallest (the reference evaluator is slow).
        if i >= grouped.len() - 2 {
            let reference = Reference::new(&dag, 5).unwrap();
            let e = evaluate_default(&dag, &reference, &opts);
            assert!(e.verified(), "{}: {:?}", k.class, e.failure);
        }
    }
    // Before v0.9 TVM had no generic grouped NHWC conv: no DAG is claimed for that era.
    let k = grouped[0];
    assert!(k.spec.as_ref().unwrap().build(Era::V08, &k.inputs).is_err());
}

/// A grouped 3x3 conv (32 channels, 4 groups) + bias + relu, written with ttdb's writer.
fn grouped_conv_model() -> Vec<u8> {
    ttdb_testkit::onnx_model::grouped_conv_relu("grouped_conv", 32, 14, 4)
}

/// `ttdb tune --layout nhwc` searches a grouped NHWC conv end to end, every trial verified.
#[test]
fn tune_searches_a_grouped_nhwc_conv() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("grouped.onnx");
    std::fs::write(&model, grouped_conv_model()).unwrap();
    let db = dir.path().join("g.db");
    let v = common::tune_small_model(&db, &model, 16, 16, &["--layout", "nhwc"]);
    let kernels = v["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 1, "{v}");
    assert_eq!(kernels[0]["class"], "group_conv2d_nhwc+add+relu", "{v}");
    assert_eq!(kernels[0]["failed_trials"], 0, "{v}");
}
