//! Every ONNX graph of the shared corpus: zoo_light and torchvision_graph_only load and their
//! kernels are listed (NCHWc and NHWC); odd/ graphs either load (with input-shape overrides)
//! or fail with a clear message naming what is unsupported.
use crate::common;

use std::path::PathBuf;
use ttdb::onnx::{self, InputShape, LayoutMode, OnnxError, Options};

fn graphs(dir: &str) -> Vec<PathBuf> {
    let d = common::corpus_dir().join("onnx").join(dir);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&d)
        .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no graphs in {}", d.display());
    v
}

#[test]
fn zoo_light_and_torchvision_graphs_load_and_list_kernels() {
    let base = Options::default().with_default_tophub().unwrap();
    println!(
        "{:<40} {:>6} {:>7} {:>8} {:>6} {:>8} {:>7} {:>9}",
        "model", "nodes", "layout", "kernels", "tuned", "tuned_x", "untun.", "l.transf"
    );
    for dir in ["zoo_light", "torchvision_graph_only"] {
        for path in graphs(dir) {
            let g = onnx::load(&path, &[]).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for layout in [LayoutMode::Nchwc, LayoutMode::Nhwc] {
                let opts = Options {
                    layout,
                    ..base.clone()
                };
                let list = onnx::extract(&g, &opts)
                    .unwrap_or_else(|e| panic!("{} ({layout:?}): {e}", path.display()));
                let tuned = list.tuned().count();
                let untunable: Vec<String> = list
                    .kernels
                    .iter()
                    .filter_map(|k| match &k.kind {
                        onnx::KernelKind::Untunable { reason } => {
                            Some(format!("{} {}: {reason}", k.name, k.class))
                        }
                        _ => None,
                    })
                    .collect();
                println!(
                    "{:<40} {:>6} {:>7} {:>8} {:>6} {:>8} {:>7} {:>9}",
                    format!("{dir}/{}", path.file_stem().unwrap().to_string_lossy()),
                    g.nodes.len(),
                    layout.as_str(),
                    list.kernels.len(),
                    tuned,
                    list.tuned().map(|k| k.multiplicity()).sum::<usize>(),
                    untunable.len(),
                    list.layout_transforms()
                );
                for u in &untunable {
                    println!("      untunable: {u}");
                }
                assert!(tuned > 0, "{}: no tuned kernels", path.display());
                // every conv of the file is covered by exactly one anchored kernel occurrence
                let convs = g.nodes.iter().filter(|n| n.op_type == "Conv").count();
                let conv_occ: usize = list
                    .kernels
                    .iter()
                    .filter(|k| k.is_anchored() && k.class.contains("conv2d"))
                    .map(|k| k.multiplicity())
                    .sum();
                assert_eq!(
                    conv_occ,
                    convs,
                    "{} ({layout:?}): conv kernels vs Conv nodes",
                    path.display()
                );
                for k in list.tuned() {
                    let sig = k.signature.as_ref().unwrap();
                    assert_eq!(sig.op_class, k.class);
                    assert_eq!(k.signature_hash.as_deref(), Some(sig.sha256_hex().as_str()));
                }
            }
        }
    }
}

#[test]
fn odd_graphs_load_or_fail_clearly() {
    let odd = common::corpus_dir().join("onnx/odd");
    let opts = Options::default();
    // without overrides: every odd graph has a symbolic input dim
    for (file, input, dim) in [
        ("ch_ppocr_mobile_v2.0_cls_infer.onnx", "x", "-1"),
        ("pnet.onnx", "input_1", "N"),
        ("rnet.onnx", "input_2", "N"),
        ("silero_vad_16k_op15.onnx", "input", "batch"),
    ] {
        match onnx::load(odd.join(file), &[]) {
            Err(OnnxError::SymbolicDim {
                input: i, dim: d, ..
            }) => {
                assert_eq!((i.as_str(), d.as_str()), (input, dim), "{file}");
            }
            other => panic!("{file}: expected a symbolic-dim error, got {other:?}"),
        }
    }
    let ov = |specs: &[&str]| {
        specs
            .iter()
            .map(|s| InputShape::parse(s).unwrap())
            .collect::<Vec<_>>()
    };
    // with overrides: PP-OCR cls (Constant-node weights, hard-swish), mtcnn pnet/rnet (NHWC input, PRelu, MatMul)
    for (file, shapes, min_tuned) in [
        (
            "ch_ppocr_mobile_v2.0_cls_infer.onnx",
            ov(&["x=1,3,48,192"]),
            10,
        ),
        ("pnet.onnx", ov(&["input_1=1,12,12,3"]), 2),
        ("rnet.onnx", ov(&["input_2=1,24,24,3"]), 2),
    ] {
        let list = onnx::kernels_for_file(odd.join(file), &shapes, &opts)
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let untunable = list
            .kernels
            .iter()
            .filter(|k| matches!(k.kind, onnx::KernelKind::Untunable { .. }))
            .count();
        println!("{file}: {} kernels, {} tuned, {untunable} untunable (fused epilogues outside ttdb's registry)", list.kernels.len(), list.tuned().count());
        assert!(list.tuned().count() >= min_tuned, "{file}");
    }
    // silero_vad: control flow; the error names the node and the op
    let e = onnx::load(
        odd.join("silero_vad_16k_op15.onnx"),
        &ov(&["input=1,512", "state=2,1,128", "sr=1"]),
    )
    .unwrap_err();
    match &e {
        OnnxError::Unsupported { node, op, reason } => {
            assert_eq!(op, "If", "{e}");
            assert!(node.contains("If"), "{e}");
            assert!(reason.contains("subgraph"), "{e}");
        }
        other => panic!("silero_vad: expected an unsupported-op error, got {other:?}"),
    }
    println!("silero_vad_16k_op15.onnx: {e}");
    // a wrong override is named
    let e = onnx::load(odd.join("rnet.onnx"), &ov(&["input_2=1,24,24"])).unwrap_err();
    assert!(
        matches!(e, OnnxError::Override(_)) && e.to_string().contains("rank"),
        "{e}"
    );
    let e = onnx::load(odd.join("rnet.onnx"), &ov(&["nope=1"])).unwrap_err();
    assert!(
        e.to_string().contains("no input `nope`") && e.to_string().contains("input_2"),
        "{e}"
    );
}
