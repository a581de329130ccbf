//! Whole models run by ttdb (`ttdb::run`) against onnxruntime's outputs in
//! `fixtures/reference/` (tools/onnx_reference.py), on the same deterministic weights and
//! inputs (docs/design/deterministic-data.md).
//! The tolerance is `reference::TOLERANCE`.
use crate::common;
use crate::common::reference;

use reference::{manifest, reference_output, TOLERANCE};
use serde_json::Value;
use std::collections::HashMap;
use ttdb::loopnest::ir::DType;
use ttdb::loopnest::BufferData;
use ttdb::onnx::{fill, HostEstimates, InputShape, LayoutMode, LayoutPlanning, Options};
use ttdb::run::{ModelPlan, ModelRun, ModelRunOptions, Schedule};
use ttdb::target::Target;

/// The options `ttdb run` would take for the reference's model: `layout` and the input
/// shapes onnxruntime ran (models with symbolic dims need them).
fn run_options(m: &Value, layout: LayoutMode) -> ModelRunOptions {
    let input_shapes = m["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let dims = i["shape"].as_array().unwrap();
            let dims = dims.iter().map(|d| d.as_i64().unwrap()).collect();
            InputShape::new(i["name"].as_str().unwrap(), dims)
        })
        .collect();
    ModelRunOptions {
        layout,
        input_shapes,
        extract: Options::default().with_default_tophub().unwrap(),
        target: Target::detect(),
        weight_limits: Default::default(),
        naive: false,
        records: Default::default(),
    }
}

/// Runs `model` in `layout` and returns the worst error relative to each output's scale.
fn worst_error(model: &str, layout: LayoutMode) -> f64 {
    worst_error_planned(model, layout, None)
}

/// [`worst_error`], with the NCHWc blocking planned for the whole graph for `plan`.
fn worst_error_planned(model: &str, layout: LayoutMode, plan: Option<HostEstimates>) -> f64 {
    let m = manifest(model);
    let path = common::corpus_dir().join(m["model"].as_str().unwrap());
    let mut opts = run_options(&m, layout);
    opts.extract.layout_plan = plan.map(LayoutPlanning::Estimate);
    let run =
        ModelRun::load(&path, &opts, None).unwrap_or_else(|e| panic!("{model} ({layout:?}): {e}"));
    // a default schedule that does not lower leaves the kernel on the naive loop nest, with
    // its intermediates in memory: slow, and a sign of a bounds proof gone missing
    let naive: Vec<_> = run
        .plan
        .iter()
        .filter(|k| matches!(k.schedule, Schedule::Naive(_)))
        .collect();
    assert!(naive.is_empty(), "{model} ({layout:?}): {naive:?}");
    let inputs: HashMap<String, BufferData> = run
        .inputs
        .iter()
        .map(|p| {
            let n = p.shape.iter().product::<i64>() as usize;
            let values = match p.dtype {
                DType::I64 => BufferData::I64(fill::input_ints(&p.name, n)),
                _ => BufferData::F32(fill::input_floats(&p.name, n)),
            };
            (p.name.clone(), values)
        })
        .collect();
    let (outputs, _) = run
        .run(&inputs, None)
        .unwrap_or_else(|e| panic!("{model}: {e}"));
    let got: Vec<Vec<f64>> = outputs
        .iter()
        .map(|got| match got {
            BufferData::F32(x) => x.iter().map(|&v| v as f64).collect(),
            BufferData::I64(x) => x.iter().map(|&v| v as f64).collect(),
            other => panic!("{model}: an output is {}", other.dtype()),
        })
        .collect();
    let worst = reference::worst_error(model, &got);
    println!("{model} {layout:?}: worst error {worst:.2e} of the output scale");
    worst
}

/// Every model of the corpus's `torchvision_graph_only/`, `torchvision_more/`,
/// `transformers/` and `zoo_light/`, in both data layouts, on default schedules (no
/// database). One test per layout (`<model>::nchwc`, `::nhwc`), so they run apart.
macro_rules! matches_onnxruntime_in_both_layouts {
    ($($test:ident: $model:literal),* $(,)?) => {$(
        mod $test {
            use super::*;

            #[test]
            fn nchwc() {
                let e = worst_error($model, LayoutMode::Nchwc);
                assert!(e < TOLERANCE, "{} NCHWc: {e:.3e}", $model);
            }

            #[test]
            fn nhwc() {
                let e = worst_error($model, LayoutMode::Nhwc);
                assert!(e < TOLERANCE, "{} NHWC: {e:.3e}", $model);
            }
        }
    )*};
}

matches_onnxruntime_in_both_layouts! {
    // torchvision_graph_only/
    alexnet: "alexnet",
    // channel concatenation (along the block axis in NCHWc, the last axis in NHWC), and
    // BatchNormalizations left unfolded after a concatenate
    densenet121: "densenet121",
    googlenet: "googlenet",
    mobilenet_v2: "mobilenet_v2",
    resnet18: "resnet18",
    resnet50: "resnet50",
    squeezenet1_0: "squeezenet1_0",
    vgg16: "vgg16",
    // torchvision_more/: LayerNorm glue and transposes around the NHWC convs (convnext),
    // SiLU and squeeze-excite gates, hardswish, channel shuffles (reshape, transpose) and
    // halves (slice / split), a transformer encoder on patches (vit)
    convnext_tiny: "convnext_tiny",
    efficientnet_b1: "efficientnet_b1",
    mnasnet1_0: "mnasnet1_0",
    mobilenet_v3_small: "mobilenet_v3_small",
    regnet_x_400mf: "regnet_x_400mf",
    regnet_y_400mf: "regnet_y_400mf",
    resnet34: "resnet34",
    shufflenet_v2_x1_0: "shufflenet_v2_x1_0",
    vit_b_16: "vit_b_16",
    // zoo_light/: weights in ConstantOfShape nodes, computed at load; LRN glue
    light_bvlc_alexnet: "light_bvlc_alexnet",
    light_densenet121: "light_densenet121",
    light_inception_v1: "light_inception_v1",
    light_inception_v2: "light_inception_v2",
    light_resnet50: "light_resnet50",
    light_shufflenet: "light_shufflenet",
    light_squeezenet: "light_squeezenet",
    light_vgg19: "light_vgg19",
    light_zfnet512: "light_zfnet512",
    // odd/: weights in Constant nodes, a symbolic input shape
    ch_ppocr_mobile_v2_0_cls_infer: "ch_ppocr_mobile_v2.0_cls_infer",
}

/// Models whose convs the layout plan blocks otherwise than TopHub (16 lanes: wider
/// blocks, transforms removed) still match onnxruntime: residual adds, SE gates, grouped
/// convs, channel shuffles and concatenations across the new blockings.
macro_rules! matches_onnxruntime_with_planned_blocking {
    ($($test:ident: $model:literal),* $(,)?) => {$(
        #[test]
        fn $test() {
            let plan = Some(HostEstimates::typical(16, 2));
            let e = worst_error_planned($model, LayoutMode::Nchwc, plan);
            assert!(e < TOLERANCE, "{} NCHWc, planned: {e:.3e}", $model);
        }
    )*};
}

matches_onnxruntime_with_planned_blocking! {
    resnet50_planned: "resnet50",
    mobilenet_v3_small_planned: "mobilenet_v3_small",
    regnet_y_400mf_planned: "regnet_y_400mf",
    // grouped convs of 16 channels a group, blocked by the plan
    regnet_x_400mf_planned: "regnet_x_400mf",
    shufflenet_v2_x1_0_planned: "shufflenet_v2_x1_0",
    densenet121_planned: "densenet121",
    // no convs, but a plan is ttdb's own partition: the bias adds and GELUs after each
    // dense move in front of its reshape and become its epilogue
    distilbert_like_planned: "distilbert_like",
    gpt2_like_planned: "gpt2_like",
    roberta_small_like_planned: "roberta_small_like",
    vit_b_16_planned: "vit_b_16",
}

/// transformers/: int64 inputs (token ids, attention masks), attention masks built by
/// integer and truth-valued glue, batch matmuls, decomposed LayerNorm and GELU. They have
/// no conv, so both layouts lower to the same kernels (checked) and one run covers both.
macro_rules! layout_free_matches_onnxruntime {
    ($($test:ident: $model:literal),* $(,)?) => {$(
        #[test]
        fn $test() {
            let kernels = |layout| {
                let m = manifest($model);
                let path = common::corpus_dir().join(m["model"].as_str().unwrap());
                let opts = run_options(&m, layout);
                let plan = ModelPlan::new(&path, &opts, None)
                    .unwrap_or_else(|e| panic!("{} ({layout:?}): {e}", $model));
                plan.kernels.iter().map(ttdb::loopnest::kernel_to_string).collect::<Vec<_>>()
            };
            assert_eq!(kernels(LayoutMode::Nchwc), kernels(LayoutMode::Nhwc), "{}", $model);
            let e = worst_error($model, LayoutMode::Nchwc);
            assert!(e < TOLERANCE, "{}: {e:.3e}", $model);
        }
    )*};
}

layout_free_matches_onnxruntime! {
    distilbert_like_in_either_layout: "distilbert_like",
    gpt2_like_in_either_layout: "gpt2_like",
    roberta_small_like_in_either_layout: "roberta_small_like",
}

/// A reshape of an intermediate is no step: its readers read the value it views (the
/// model's outputs still match onnxruntime's, above). distilbert_like reshaped its
/// activations 30 times per run, a copy each.
#[test]
fn reshapes_of_intermediates_are_read_in_place() {
    let m = manifest("distilbert_like");
    let path = common::corpus_dir().join(m["model"].as_str().unwrap());
    let plan = ModelPlan::new(&path, &run_options(&m, LayoutMode::Nchwc), None).unwrap();
    assert!(plan.reshape_views >= 30, "{}", plan.reshape_views);
    let copies: Vec<_> = plan.plan.iter().filter(|k| k.class == "reshape").collect();
    assert!(copies.is_empty(), "{copies:?}");
}

/// A constant too large for shape inference to keep its values (more than 4096 elements)
/// made by `ConstantOfShape` is computed at load: its shape filled with its `value`.
#[test]
fn a_large_constant_of_shape_is_filled_with_its_value() {
    use ttdb_testkit::onnx_model::{attr_tensor, float_scalar, ModelBuilder};
    let n = 5000;
    let mut b = ModelBuilder::new("cos", 18);
    b.input("x", &[1, n]);
    b.int64s("shape", &[1, n]);
    b.node(
        "ConstantOfShape",
        "/c/ConstantOfShape",
        &["shape"],
        &["c"],
        vec![attr_tensor("value", float_scalar(0.5))],
    );
    b.node("Add", "/add/Add", &["x", "c"], &["y"], vec![]);
    b.output("y");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cos.onnx");
    std::fs::write(&path, b.encode()).unwrap();
    let opts = ModelRunOptions {
        layout: LayoutMode::Nchwc,
        input_shapes: vec![],
        extract: Options::default(),
        target: Target::detect(),
        weight_limits: Default::default(),
        naive: false,
        records: Default::default(),
    };
    let run = ModelRun::load(&path, &opts, None).unwrap();
    let x = fill::input_floats("x", n as usize);
    let (out, _) = run
        .run(
            &HashMap::from([("x".to_string(), BufferData::F32(x.clone()))]),
            None,
        )
        .unwrap();
    let want: Vec<f32> = x.iter().map(|v| v + 0.5).collect();
    assert_eq!(out[0], BufferData::F32(want));
}

#[test]
fn glue_ttdb_cannot_build_yet_is_refused_naming_the_op_and_node() {
    use ttdb_testkit::onnx_model::ModelBuilder;
    let mut b = ModelBuilder::new("tiled", 18);
    b.input("x", &[1, 4]);
    b.int64s("repeats", &[2, 1]);
    b.node("Tile", "/tile/Tile", &["x", "repeats"], &["y"], vec![]);
    b.output("y");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiled.onnx");
    std::fs::write(&path, b.encode()).unwrap();
    let opts = ModelRunOptions {
        layout: LayoutMode::Nchwc,
        input_shapes: vec![],
        extract: Options::default(),
        target: Target::detect(),
        weight_limits: Default::default(),
        naive: false,
        records: Default::default(),
    };
    let e = ModelRun::load(&path, &opts, None)
        .err()
        .expect("tile has no glue builder");
    assert!(
        e.contains("`tile`")
            && e.contains("/tile/Tile")
            && e.contains("not something ttdb run executes yet"),
        "{e}"
    );
}

/// Loads a hand-made model with default options and runs it on `x`'s deterministic values.
fn run_hand_made(
    b: &ttdb_testkit::onnx_model::ModelBuilder,
    x_len: usize,
) -> (Vec<f32>, Vec<Vec<f32>>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    std::fs::write(&path, b.encode()).unwrap();
    let opts = ModelRunOptions {
        layout: LayoutMode::Nchwc,
        input_shapes: vec![],
        extract: Options::default(),
        target: Target::detect(),
        weight_limits: Default::default(),
        naive: false,
        records: Default::default(),
    };
    let run = ModelRun::load(&path, &opts, None).unwrap();
    let x = fill::input_floats("x", x_len);
    let (out, _) = run
        .run(
            &HashMap::from([("x".to_string(), BufferData::F32(x.clone()))]),
            None,
        )
        .unwrap();
    let out = out
        .into_iter()
        .map(|o| match o {
            BufferData::F32(v) => v,
            other => panic!("an output of {}", other.dtype()),
        })
        .collect();
    (x, out)
}

/// Transpose (with its perm), Slice (a negative step, ends past the start), Split, Gather
/// (constant indices) and Concat as glue, against results written out by hand.
#[test]
fn data_movement_glue_matches_hand_computed_results() {
    use ttdb_testkit::onnx_model::{attr_int, attr_ints, ModelBuilder};
    let mut b = ModelBuilder::new("moves", 18);
    b.input("x", &[2, 3, 4]);
    b.int64s("starts", &[3, 0])
        .int64s("ends", &[-10, 3])
        .int64s("axes", &[0, 2])
        .int64s("steps", &[-2, 2])
        .int64s("sizes", &[1, 3])
        .int64s("idx", &[2, 0]);
    b.node(
        "Transpose",
        "/t/Transpose",
        &["x"],
        &["t"],
        vec![attr_ints("perm", &[2, 0, 1])],
    );
    b.node(
        "Slice",
        "/s/Slice",
        &["t", "starts", "ends", "axes", "steps"],
        &["s"],
        vec![],
    );
    b.node(
        "Split",
        "/sp/Split",
        &["x", "sizes"],
        &["sp0", "sp1"],
        vec![attr_int("axis", 2)],
    );
    b.node(
        "Gather",
        "/g/Gather",
        &["x", "idx"],
        &["g"],
        vec![attr_int("axis", 1)],
    );
    b.node(
        "Concat",
        "/c/Concat",
        &["sp1", "sp0"],
        &["c"],
        vec![attr_int("axis", 2)],
    );
    b.output("s").output("g").output("c");
    let (x, out) = run_hand_made(&b, 24);
    let at = |i: usize, j: usize, k: usize| x[(i * 3 + j) * 4 + k];
    // s[p, q, r] = t[3 - 2p, q, 2r] = x[q, 2r, 3 - 2p], shape [2, 2, 2]
    let mut s = Vec::new();
    for p in 0..2 {
        for q in 0..2 {
            for r in 0..2 {
                s.push(at(q, 2 * r, 3 - 2 * p));
            }
        }
    }
    assert_eq!(out[0], s, "slice of a transpose");
    // g[i, m, k] = x[i, [2, 0][m], k], shape [2, 2, 4]
    let mut g = Vec::new();
    for i in 0..2 {
        for m in [2, 0] {
            for k in 0..4 {
                g.push(at(i, m, k));
            }
        }
    }
    assert_eq!(out[1], g, "gather");
    // c = the last three columns, then the first
    let mut c = Vec::new();
    for i in 0..2 {
        for j in 0..3 {
            for k in [1, 2, 3, 0] {
                c.push(at(i, j, k));
            }
        }
    }
    assert_eq!(out[2], c, "split and concat");
}

/// LRN's attributes reach its glue kernel: each channel divided by
/// `(bias + alpha / size * sum of squares over its window) ^ beta`.
#[test]
fn lrn_glue_normalizes_across_channels() {
    use ttdb_testkit::onnx_model::{attr_float, attr_int, ModelBuilder};
    let mut b = ModelBuilder::new("lrn", 13);
    b.input("x", &[1, 4, 1, 2]);
    b.node(
        "LRN",
        "/lrn/LRN",
        &["x"],
        &["y"],
        vec![
            attr_int("size", 3),
            attr_float("alpha", 0.3),
            attr_float("beta", 0.5),
            attr_float("bias", 2.0),
        ],
    );
    b.output("y");
    let (x, out) = run_hand_made(&b, 8);
    for c in 0..4usize {
        for w in 0..2 {
            let window = c.saturating_sub(1)..(c + 2).min(4);
            let sq: f32 = window.map(|k| x[k * 2 + w] * x[k * 2 + w]).sum();
            let want = x[c * 2 + w] / (2.0 + 0.1 * sq).powf(0.5);
            let got = out[0][c * 2 + w];
            assert!(
                (got - want).abs() < 1e-6,
                "channel {c}: {got} against {want}"
            );
        }
    }
}

/// Integer and truth-valued glue, as the transformers' masks and position ids use it: casts
/// (truncating), Equal, Not, CumSum, Where, a run-time Expand and GatherElements, with
/// int64 tensors between kernels, against results written out by hand.
#[test]
fn integer_and_truth_valued_glue_matches_hand_computed_results() {
    use ttdb_testkit::onnx_model::{attr_int, attr_tensor, float_scalar, ModelBuilder};
    const INT64: i64 = 7;
    const FLOAT: i64 = 1;
    let mut b = ModelBuilder::new("ints", 18);
    b.input("x", &[1, 6]);
    b.int64s("zero", &[0])
        .int64s("axis", &[1])
        .int64s("shape", &[2, 1, 6]);
    b.node(
        "Constant",
        "/three/Constant",
        &[],
        &["three"],
        vec![attr_tensor("value", float_scalar(3.0))],
    );
    b.node("Mul", "/s/Mul", &["x", "three"], &["s"], vec![]);
    b.node(
        "Cast",
        "/i/Cast",
        &["s"],
        &["i"],
        vec![attr_int("to", INT64)],
    );
    b.node("Equal", "/e/Equal", &["i", "zero"], &["e"], vec![]);
    b.node("Not", "/n/Not", &["e"], &["n"], vec![]);
    b.node(
        "Cast",
        "/m/Cast",
        &["n"],
        &["m"],
        vec![attr_int("to", FLOAT)],
    );
    b.node("CumSum", "/c/CumSum", &["m", "axis"], &["c"], vec![]);
    b.node("Where", "/w/Where", &["e", "s", "c"], &["w"], vec![]);
    b.node("Expand", "/x/Expand", &["s", "shape"], &["wide"], vec![]);
    b.node(
        "GatherElements",
        "/g/GatherElements",
        &["s", "i"],
        &["picked"],
        vec![attr_int("axis", 1)],
    );
    b.output("w").output("wide").output("picked");
    let (x, out) = run_hand_made(&b, 6);
    let s: Vec<f32> = x.iter().map(|v| v * 3.0).collect();
    let i: Vec<i64> = s.iter().map(|v| v.trunc() as i64).collect();
    let mut count = 0.0;
    let mut w = Vec::new();
    for k in 0..6 {
        if i[k] != 0 {
            count += 1.0;
        }
        w.push(if i[k] == 0 { s[k] } else { count });
    }
    assert!(i.contains(&0) && i.iter().any(|&v| v != 0), "{i:?}");
    assert_eq!(out[0], w, "where of a cumsum");
    assert_eq!(out[1], [s.clone(), s.clone()].concat(), "expand");
    let picked: Vec<f32> = i.iter().map(|&k| s[k.rem_euclid(6) as usize]).collect();
    assert_eq!(out[2], picked, "gather_elements");
}

/// `ttdb ARGS` with no database (the default one made absent: whatever the user has),
/// so every kernel runs its default schedule.
fn ttdb(args: &[&str]) -> std::process::Output {
    let home = tempfile::tempdir().unwrap();
    std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .args(args)
        .env_remove("TTDB_DB")
        .env("XDG_DATA_HOME", home.path())
        .output()
        .unwrap()
}

#[test]
fn the_cli_writes_outputs_and_refuses_bad_inputs_clearly() {
    let model = common::corpus_dir().join("onnx/torchvision_more/mnasnet1_0.onnx");
    let model = model.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = ttdb(&[
        "run",
        model,
        "--deterministic-inputs",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = ttdb::npy::read(&std::fs::read(out.join("output.npy")).unwrap()).unwrap();
    let want = reference_output("mnasnet1_0", "out0.npy");
    let got = got.to_f32().unwrap();
    let scale = want.iter().fold(0f32, |a, x| a.max(x.abs()));
    assert!(got
        .iter()
        .zip(&want)
        .all(|(a, b)| (a - b).abs() <= 1e-3 * scale));
    // only the output itself: no temporary left behind
    let names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["output.npy"]);

    // no input given
    let o = ttdb(&["run", model, "-o", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("input `input`") && err.contains("--deterministic-inputs"),
        "{err}"
    );

    // an input of the wrong shape
    let bad = dir.path().join("bad.npy");
    let a = ttdb::npy::Array::from_f32(vec![1, 3, 8, 8], &[0.0; 192]).unwrap();
    std::fs::write(&bad, ttdb::npy::write(&a)).unwrap();
    let spec = format!("input={}", bad.display());
    let o = ttdb(&["run", model, "--input", &spec, "-o", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("shape [1, 3, 8, 8]") && err.contains("[1, 3, 224, 224]"),
        "{err}"
    );

    // a truncated model
    let bytes = std::fs::read(model).unwrap();
    let cut = dir.path().join("cut.onnx");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let o = ttdb(&[
        "run",
        cut.to_str().unwrap(),
        "--deterministic-inputs",
        "-o",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cut.onnx") && err.contains("not a valid ONNX model"),
        "{err}"
    );
}

/// `Gemm` with `beta`: y = x W^T + beta * c, on weights the run fills (beta goes into the
/// constant c at load; an `alpha` would be a glue multiply, not run yet).
#[test]
fn gemm_beta_scales_its_bias() {
    use ttdb_testkit::onnx_model::{attr_float, attr_int, ModelBuilder};
    let mut b = ModelBuilder::new("gemm_ab", 18);
    b.input("x", &[1, 8]);
    b.weight("w", &[4, 8]).weight("c", &[4]);
    b.node(
        "Gemm",
        "/fc/Gemm",
        &["x", "w", "c"],
        &["y"],
        vec![attr_int("transB", 1), attr_float("beta", 0.5)],
    );
    b.output("y");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gemm_ab.onnx");
    std::fs::write(&path, b.encode()).unwrap();
    let opts = ModelRunOptions {
        layout: LayoutMode::Nchwc,
        input_shapes: vec![],
        extract: Options::default(),
        target: Target::detect(),
        weight_limits: Default::default(),
        naive: false,
        records: Default::default(),
    };
    let run = ModelRun::load(&path, &opts, None).unwrap();
    let x = fill::input_floats("x", 8);
    let (out, _) = run
        .run(
            &HashMap::from([("x".to_string(), BufferData::F32(x.clone()))]),
            None,
        )
        .unwrap();
    let BufferData::F32(y) = &out[0] else {
        panic!("y is not float32")
    };
    let w = fill::weight_values("w", &[4, 8], fill::Role::Other);
    let c = fill::weight_values("c", &[4], fill::Role::Other);
    for n in 0..4 {
        let dot: f32 = (0..8).map(|k| x[k] * w[n * 8 + k]).sum();
        let want = dot + 0.5 * c[n];
        assert!(
            (y[n] - want).abs() < 1e-5,
            "y[{n}] = {} against {want}",
            y[n]
        );
    }
}

/// odd/: PP-OCR's classifier runs (above); MTCNN's pnet and rnet (PReLU fused onto their
/// convs) and silero VAD (an `If` with subgraphs) are refused, naming the node and the op,
/// and no output file is written.
#[test]
fn odd_models_ttdb_cannot_run_are_refused_naming_the_node_and_op() {
    let dir = tempfile::tempdir().unwrap();
    for (model, shapes, why) in [
        (
            "pnet",
            &["input_1=1,24,24,3"][..],
            ["node `p_re_lu`", "`prelu`"],
        ),
        ("rnet", &["input_2=1,24,24,3"], ["node `p_re_lu", "`prelu`"]),
        (
            "silero_vad_16k_op15",
            &["input=1,576", "state=2,1,128"],
            ["node `/model/decoder/If`", "(If)"],
        ),
    ] {
        let path = common::corpus_dir().join(format!("onnx/odd/{model}.onnx"));
        let out = dir.path().join(model);
        let mut args = vec![
            "run",
            path.to_str().unwrap(),
            "--deterministic-inputs",
            "-o",
            out.to_str().unwrap(),
        ];
        for s in shapes {
            args.extend(["--input-shape", s]);
        }
        let o = ttdb(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{model}: {err}");
        for w in why {
            assert!(err.contains(w), "{model}: `{w}` not in: {err}");
        }
        assert!(!out.exists() || std::fs::read_dir(&out).unwrap().next().is_none());
    }
}

/// `ttdb run` keeps a model's weights in transparent huge pages where the kernel allows them
/// (the binary's jemalloc is told to, src/main.rs): while ResNet-18 (45 MB of weights) runs,
/// the process must hold at least 32 MiB in anonymous huge pages. Nothing to check on a
/// kernel with THP off.
#[test]
fn a_running_model_keeps_its_weights_in_huge_pages() {
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if thp.is_empty() || thp.contains("[never]") {
        eprintln!("transparent huge pages are off on this kernel ({thp:?}): nothing to check");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = common::corpus_dir().join("onnx/torchvision_graph_only/resnet18.onnx");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .env("XDG_DATA_HOME", dir.path())
        .env_remove("TTDB_DB")
        .env_remove("MALLOC_CONF")
        .args(["run", model.to_str().unwrap(), "--deterministic-inputs"])
        .args(["--repeat", "100000", "-o"])
        .arg(dir.path().join("out"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let rollup = format!("/proc/{}/smaps_rollup", child.id());
    let huge_kib = |text: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix("AnonHugePages:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    // the first timed runs start within seconds (default schedules compile quickly); the
    // weights are loaded by then
    let start = std::time::Instant::now();
    let mut seen = 0;
    while start.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(250));
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("ttdb run ended early ({status}): {err}");
        }
        if start.elapsed() < std::time::Duration::from_secs(3) {
            continue;
        }
        seen = huge_kib(&std::fs::read_to_string(&rollup).unwrap_or_default());
        if seen >= 32 * 1024 {
            break;
        }
    }
    child.kill().ok();
    child.wait().ok();
    assert!(
        seen >= 32 * 1024,
        "ttdb run held {seen} KiB in anonymous huge pages (THP {thp:?}); at least 32 MiB expected"
    );
}
