//! The corpus's modern models (`torchvision_more/`, `transformers/`), several of which
//! compute their own shapes at run time (ViT's packed qkv slices, RoBERTa's position ids),
//! through what `ttdb kernels` runs; the `odd/` models give kernels or a clear error that
//! names the node (or the graph input) at fault, never a panic. Snapshots of the `ttdb
//! kernels` table for vit_b_16 and roberta_small_like.
use crate::common;

use prost::Message;
use std::path::{Path, PathBuf};
use ttdb::onnx::graph::Data;
use ttdb::onnx::{self, proto, InputShape, KernelKind, KernelList, OnnxError, Options};

fn models(dir: &str) -> Vec<PathBuf> {
    let d = common::corpus_dir().join("onnx").join(dir);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&d)
        .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no models in {}", d.display());
    v
}

/// The options `ttdb kernels MODEL` uses: NCHWc, 4 lanes (no --mcpu), the default TopHub.
fn cli_options() -> Options {
    Options::default().with_default_tophub().unwrap()
}

fn counts(list: &KernelList) -> (usize, usize, usize) {
    let kind = |f: fn(&KernelKind) -> bool| list.kernels.iter().filter(|k| f(&k.kind)).count();
    (
        kind(|k| matches!(k, KernelKind::Tuned)),
        kind(|k| matches!(k, KernelKind::Simple)),
        kind(|k| matches!(k, KernelKind::Untunable { .. })),
    )
}

/// ONNX node names as ttdb reports them (`<op>_<index>` for unnamed nodes).
fn node_names(path: &Path) -> Vec<String> {
    let m = proto::ModelProto::decode(std::fs::read(path).unwrap().as_slice()).unwrap();
    let g = m.graph.unwrap_or_default();
    g.node
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if n.name.is_empty() {
                format!("{}_{i}", n.op_type)
            } else {
                n.name.clone()
            }
        })
        .collect()
}

#[test]
fn every_torchvision_more_and_transformers_model_lists_its_kernels() {
    let opts = cli_options();
    println!(
        "{:<45} {:>7} {:>6} {:>6} {:>10}",
        "model", "kernels", "tuned", "simple", "untunable"
    );
    for dir in ["torchvision_more", "transformers"] {
        for path in models(dir) {
            let list = onnx::kernels_for_file(&path, &[], &opts)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let (tuned, simple, untunable) = counts(&list);
            println!(
                "{:<45} {:>7} {:>6} {:>6} {:>10}",
                format!("{dir}/{}", path.file_stem().unwrap().to_string_lossy()),
                list.kernels.len(),
                tuned,
                simple,
                untunable
            );
            assert!(tuned > 0, "{}: no tunable kernel", path.display());
            let names = node_names(&path);
            for k in &list.kernels {
                // every kernel is named by an ONNX node of the file, and an untunable one
                // says why
                assert!(
                    names.contains(&k.name),
                    "{}: kernel `{}` names no node",
                    path.display(),
                    k.name
                );
                if let KernelKind::Untunable { reason } = &k.kind {
                    assert!(
                        !reason.trim().is_empty(),
                        "{}: `{}` untunable without a reason",
                        path.display(),
                        k.name
                    );
                    println!("      untunable {} ({}): {reason}", k.name, k.class);
                }
            }
        }
    }
}

/// Input shapes that make the odd models static (the rest get none).
fn odd_overrides(file: &str) -> Vec<InputShape> {
    let specs: &[&str] = match file {
        "ch_ppocr_mobile_v2.0_cls_infer.onnx" => &["x=1,3,48,192"],
        "pnet.onnx" => &["input_1=1,12,12,3"],
        "rnet.onnx" => &["input_2=1,24,24,3"],
        "silero_vad_16k_op15.onnx" => &["input=1,512", "state=2,1,128"],
        _ => &[],
    };
    specs
        .iter()
        .map(|s| InputShape::parse(s).unwrap())
        .collect()
}

#[test]
fn odd_models_give_kernels_or_an_error_naming_the_node() {
    let opts = cli_options();
    for path in models("odd") {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let names = node_names(&path);
        let m = proto::ModelProto::decode(std::fs::read(&path).unwrap().as_slice()).unwrap();
        let inputs: Vec<String> = m
            .graph
            .unwrap_or_default()
            .input
            .iter()
            .map(|v| v.name.clone())
            .collect();
        for overrides in [vec![], odd_overrides(&file)] {
            let run = std::panic::catch_unwind(|| onnx::kernels_for_file(&path, &overrides, &opts));
            let label = format!("{file} with {} override(s)", overrides.len());
            match run {
                Err(_) => panic!("{label}: panicked"),
                Ok(Ok(list)) => {
                    let (tuned, simple, untunable) = counts(&list);
                    println!("{label}: {} kernels ({tuned} tuned, {simple} simple, {untunable} untunable)", list.kernels.len());
                    assert!(!list.kernels.is_empty(), "{label}: no kernels");
                }
                Ok(Err(e)) => {
                    println!("{label}: {e}");
                    match &e {
                        OnnxError::Unsupported { node, .. } | OnnxError::Shape { node, .. } => {
                            assert!(
                                names.contains(node),
                                "{label}: `{node}` is not a node of the file ({e})"
                            )
                        }
                        OnnxError::SymbolicDim { input, .. } => {
                            assert!(
                                inputs.contains(input),
                                "{label}: `{input}` is not an input ({e})"
                            )
                        }
                        other => panic!("{label}: an error that names no node: {other}"),
                    }
                }
            }
        }
    }
}

/// The `ttdb kernels` table; the TopHub path is shown by file name (it depends on the
/// working directory).
fn kernels_table(rel: &str) -> String {
    let path = common::corpus_dir().join("onnx").join(rel);
    let mut list = onnx::kernels_for_file(&path, &[], &cli_options()).unwrap();
    list.tophub = list.tophub.map(|p| {
        Path::new(&p)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    });
    ttdb::cli::render_kernels(&list, false)
}

#[test]
fn kernels_of_vit_b_16() {
    insta::assert_snapshot!(kernels_table("torchvision_more/vit_b_16.onnx"));
}

#[test]
fn kernels_of_roberta_small_like() {
    insta::assert_snapshot!(kernels_table("transformers/roberta_small_like.onnx"));
}

#[test]
fn kernels_of_distilbert_like() {
    insta::assert_snapshot!(kernels_table("transformers/distilbert_like.onnx"));
}

#[test]
fn kernels_of_gpt2_like() {
    insta::assert_snapshot!(kernels_table("transformers/gpt2_like.onnx"));
}

#[test]
fn kernels_of_convnext_tiny() {
    insta::assert_snapshot!(kernels_table("torchvision_more/convnext_tiny.onnx"));
}

/// ttdb's load-time folding against onnxruntime (`fixtures/onnx_fold/`, written by
/// `tools/ort_fold_reference.py`): the shape of every small integer tensor agrees, and every
/// one that is constant in ttdb's graph is folded, to the same values.
#[test]
fn folded_values_match_onnxruntime() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/onnx_fold");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 5, "reference files in {}", dir.display());
    for f in files {
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let model = r["model"].as_str().unwrap();
        let overrides: Vec<InputShape> = r["input_shapes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| InputShape::parse(s.as_str().unwrap()).unwrap())
            .collect();
        let g = onnx::load(common::corpus_dir().join("onnx").join(model), &overrides)
            .unwrap_or_else(|e| panic!("{model}: {e}"));
        let ints = |v: &serde_json::Value| -> Vec<i64> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap())
                .collect()
        };
        let mut folded = 0;
        for (name, e) in r["tensors"].as_object().unwrap() {
            let t = g
                .tensor(name)
                .unwrap_or_else(|| panic!("{model}: no tensor `{name}`"));
            assert_eq!(t.shape, ints(&e["shape"]), "{model}: shape of `{name}`");
            if t.constant {
                let values = match &t.data {
                    Some(Data::Ints(v)) => v.clone(),
                    other => panic!("{model}: constant `{name}` not folded to integers: {other:?}"),
                };
                assert_eq!(values, ints(&e["ints"]), "{model}: values of `{name}`");
                folded += 1;
            }
        }
        println!("{model}: {folded} folded tensors agree with onnxruntime");
        assert!(folded > 0, "{model}");
    }
}
