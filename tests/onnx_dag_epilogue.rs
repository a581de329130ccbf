//! Element-wise epilogues that are DAGs, not chains: SiLU (`x * sigmoid(x)`), hardswish
//! and hardsigmoid as Relay's ONNX frontend expands them (`x * clip(x * 1/6 + 0.5, 0, 1)`,
//! `clip(x * alpha + beta, 0, 1)`), and squeeze-excitation blocks. Small graphs written
//! with ttdb's ONNX writer; the expected groups follow TVM FuseOps' rules
//! (`src/relay/transforms/fuse_ops.cc`):
//!
//! * a conv (kOutEWiseFusable) fuses into its immediate post-dominator when every path to
//!   it is element-wise: the diamonds of SiLU and hardswish end in one multiply, so the
//!   whole activation is in the conv's task;
//! * a value also read by a pool (kOutEWiseFusable) or a broadcast multiply ends the group:
//!   the SE block's global pool, its two convs, and the broadcast `block input * gate`
//!   are separate tasks; the multiply has no anchor, so it is a simple kernel;
//! * a global pool never fuses into the conv after it (two anchors).
//!
//! Every tuned kernel's DAG compiles under the default schedule and verifies against the
//! reference evaluator; the PrintDAG text of the SiLU and hardswish tasks is TOPI's.
use crate::common;
use std::path::Path;
use ttdb::evaluate::{evaluate_default, EvalOptions, Reference};
use ttdb::ir::print_dag;
use ttdb::onnx::{self, KernelKind, KernelList, Options};
use ttdb::ops::{EpilogueOp, Era, ScalarOp};
use ttdb_testkit::onnx_model::{attr_float, attr_ints, ModelBuilder};

const SILU: &str = "conv2d_nchwc+add+sigmoid+multiply@1";
const HARDSWISH: &str = "conv2d_nchwc+add+multiply_scalar+add_scalar+clip+multiply@1";
/// The hardsigmoid's `* alpha` right after conv + bias goes into the weights (FoldScaleAxis).
const HARDSIGMOID: &str = "conv2d_nchwc+add+add_scalar+clip";

fn conv(b: &mut ModelBuilder, name: &str, x: &str, cin: i64, cout: i64, k: i64) -> String {
    let (w, bias, out) = (
        format!("{name}.weight"),
        format!("{name}.bias"),
        format!("{name}_out"),
    );
    b.weight(&w, &[cout, cin, k, k]).weight(&bias, &[cout]);
    b.node(
        "Conv",
        &format!("/{name}/Conv"),
        &[x, &w, &bias],
        &[&out],
        vec![
            attr_ints("kernel_shape", &[k, k]),
            attr_ints("pads", &[k / 2; 4]),
        ],
    );
    out
}

/// conv + SiLU, conv + hardswish, then an SE block on the hardswish output whose gate is
/// `gate` (`HardSigmoid` as in MobileNetV3, `Sigmoid` as in EfficientNet), then a conv.
fn se_model(gate: &str) -> Vec<u8> {
    let mut b = ModelBuilder::new("dag_epilogues", 14);
    b.input("input", &[1, 8, 8, 8]);
    let c1 = conv(&mut b, "c1", "input", 8, 8, 3);
    b.node("Sigmoid", "/c1/Sigmoid", &[&c1], &["s1"], vec![]);
    b.node("Mul", "/c1/Mul", &[&c1, "s1"], &["silu"], vec![]);
    let c2 = conv(&mut b, "c2", "silu", 8, 8, 1);
    b.node("HardSwish", "/c2/HardSwish", &[&c2], &["hs"], vec![]);
    b.node(
        "GlobalAveragePool",
        "/se/Pool",
        &["hs"],
        &["pooled"],
        vec![],
    );
    let c3 = conv(&mut b, "se1", "pooled", 8, 4, 1);
    b.node("Relu", "/se1/Relu", &[&c3], &["squeezed"], vec![]);
    let c4 = conv(&mut b, "se2", "squeezed", 4, 8, 1);
    let attrs = if gate == "HardSigmoid" {
        vec![attr_float("alpha", 1.0 / 6.0)]
    } else {
        vec![]
    };
    b.node(gate, "/se2/Gate", &[&c4], &["g"], attrs);
    b.node("Mul", "/se/Mul", &["hs", "g"], &["excited"], vec![]);
    // the block's projection conv, so the multiply sits between NCHWc tensors
    let out = conv(&mut b, "proj", "excited", 8, 8, 1);
    b.output(&out);
    b.encode()
}

/// The classifier of MobileNetV3: Gemm + bias, hardswish.
fn dense_model() -> Vec<u8> {
    let mut b = ModelBuilder::new("dense_hardswish", 14);
    b.input("input", &[1, 16]);
    b.weight("fc.weight", &[8, 16]).weight("fc.bias", &[8]);
    b.node(
        "Gemm",
        "/fc/Gemm",
        &["input", "fc.weight", "fc.bias"],
        &["fc"],
        vec![ttdb_testkit::onnx_model::attr_int("transB", 1)],
    );
    b.node("HardSwish", "/fc/HardSwish", &["fc"], &["out"], vec![]);
    b.output("out");
    b.encode()
}

fn kernels(bytes: &[u8]) -> KernelList {
    let g = onnx::load_bytes(bytes, &[]).unwrap();
    onnx::extract(&g, &Options::default()).unwrap()
}

/// (class, kind, ONNX nodes of the first occurrence) of each kernel, in order.
fn groups(list: &KernelList) -> Vec<(String, &'static str, Vec<String>)> {
    list.kernels
        .iter()
        .map(|k| {
            let kind = match k.kind {
                KernelKind::Tuned => "tuned",
                KernelKind::Simple => "simple",
                KernelKind::Untunable { .. } => "untunable",
            };
            (k.class.clone(), kind, k.occurrences[0].clone())
        })
        .collect()
}

fn anchored(list: &KernelList) -> Vec<(String, Vec<String>)> {
    groups(list)
        .into_iter()
        .filter(|(_, kind, _)| *kind != "simple")
        .map(|(class, kind, nodes)| {
            assert_eq!(kind, "tuned", "{class}: {list:#?}");
            (class, nodes)
        })
        .collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn silu_hardswish_and_se_groups_follow_fuse_ops() {
    for (gate, gate_class) in [
        ("HardSigmoid", HARDSIGMOID),
        ("Sigmoid", "conv2d_nchwc+add+sigmoid"),
    ] {
        let list = kernels(&se_model(gate));
        assert_eq!(
            anchored(&list),
            vec![
                (
                    SILU.to_string(),
                    strings(&["/c1/Conv", "/c1/Sigmoid", "/c1/Mul"])
                ),
                (
                    HARDSWISH.to_string(),
                    strings(&["/c2/Conv", "/c2/HardSwish"])
                ),
                ("adaptive_pool_avg".to_string(), strings(&["/se/Pool"])),
                (
                    "conv2d_nchwc+add+relu".to_string(),
                    strings(&["/se1/Conv", "/se1/Relu"])
                ),
                (gate_class.to_string(), strings(&["/se2/Conv", "/se2/Gate"])),
                ("conv2d_nchwc+add".to_string(), strings(&["/proj/Conv"])),
            ],
            "{gate}"
        );
        // the broadcast multiply of the SE block is a kernel of its own, no anchor
        let se_mul: Vec<_> = groups(&list)
            .into_iter()
            .filter(|(_, _, nodes)| nodes.contains(&"/se/Mul".to_string()))
            .collect();
        assert_eq!(
            se_mul,
            vec![("multiply".to_string(), "simple", strings(&["/se/Mul"]))],
            "{gate}"
        );
    }
}

#[test]
fn hardswish_and_hardsigmoid_expand_as_relay_does() {
    let list = kernels(&se_model("HardSigmoid"));
    let spec = |class: &str| {
        list.kernels
            .iter()
            .find(|k| k.class == class)
            .and_then(|k| k.spec.clone())
            .unwrap_or_else(|| panic!("no {class}"))
    };
    let scalar = |op, value: f64| EpilogueOp::Scalar {
        op,
        value: value as f32 as f64,
        operand_first: false,
    };
    let bias = EpilogueOp::Add {
        operand_first: false,
    };
    let clip = EpilogueOp::Clip { lo: 0.0, hi: 1.0 };
    // x * clip(x * 1/6 + 0.5, 0, 1): x (value 1, after the bias) on the left
    assert_eq!(
        spec(HARDSWISH).epilogue,
        vec![
            bias,
            scalar(ScalarOp::Multiply, 1.0 / 6.0),
            scalar(ScalarOp::Add, 0.5),
            clip,
            EpilogueOp::Rejoin {
                op: ScalarOp::Multiply,
                with: 1,
                with_first: true
            }
        ]
    );
    // FoldScaleAxis moved the SE gate's `* 1/6` into the conv: only `+ 0.5` and the clip
    assert_eq!(
        spec(HARDSIGMOID).epilogue,
        vec![bias, scalar(ScalarOp::Add, 0.5), clip]
    );
    // ONNX's HardSigmoid defaults (alpha 0.2) when the attribute is absent; `x *
    // hardsigmoid(x)` reads the bias add twice, so no scale is folded
    let mut b = ModelBuilder::new("hardsigmoid_default", 14);
    b.input("input", &[1, 8, 4, 4]);
    let c = conv(&mut b, "c", "input", 8, 8, 1);
    b.node("HardSigmoid", "/c/HardSigmoid", &[&c], &["h"], vec![]);
    b.node("Mul", "/c/Mul", &[&c, "h"], &["out"], vec![]);
    b.output("out");
    let list = kernels(&b.encode());
    let k = list.kernels.iter().find(|k| k.is_tuned()).unwrap();
    assert_eq!(
        k.spec.as_ref().unwrap().epilogue,
        vec![
            bias,
            scalar(ScalarOp::Multiply, 0.2),
            scalar(ScalarOp::Add, 0.5),
            clip,
            EpilogueOp::Rejoin {
                op: ScalarOp::Multiply,
                with: 1,
                with_first: true
            }
        ]
    );
    assert_eq!(
        k.signature.as_ref().unwrap().attrs["scalars"],
        serde_json::json!([0.2f32 as f64, 0.5])
    );
}

/// BackwardFoldScaleAxis: a scalar multiply after conv + bias (+ relu, for a positive
/// scale) whose values nothing else reads leaves the graph; a negative one after a relu
/// stays (TVM requires a positive scale there).
#[test]
fn scalar_scales_fold_into_the_conv() {
    for (relu, value, folded) in [(false, 3.0, true), (true, 3.0, true), (true, -3.0, false)] {
        let mut b = ModelBuilder::new("scaled_conv", 14);
        b.input("input", &[1, 8, 4, 4]);
        let c = conv(&mut b, "c", "input", 8, 8, 1);
        let x = if relu {
            b.node("Relu", "/c/Relu", &[&c], &["r"], vec![]);
            "r".to_string()
        } else {
            c
        };
        b.node(
            "Constant",
            "/k",
            &[],
            &["k"],
            vec![ttdb_testkit::onnx_model::attr_tensor(
                "value",
                ttdb_testkit::onnx_model::float_scalar(value),
            )],
        );
        b.node("Mul", "/c/Mul", &[&x, "k"], &["out"], vec![]);
        b.output("out");
        let list = kernels(&b.encode());
        let k = list.kernels.iter().find(|k| k.is_tuned()).unwrap();
        let want = match (relu, folded) {
            (false, _) => "conv2d_nchwc+add",
            (true, true) => "conv2d_nchwc+add+relu",
            (true, false) => "conv2d_nchwc+add+relu+multiply_scalar",
        };
        assert_eq!(k.class, want, "relu {relu}, scale {value}");
        // the multiply's node is still covered by the kernel
        assert!(k.occurrences[0].contains(&"/c/Mul".to_string()), "{k:?}");
    }
}

/// TOPI's stages: `T_multiply` of the bias add and the sigmoid (the diamond's two
/// branches), the hardswish constants as `compile_engine_const` stages met by the
/// post-order DFS right before the op that reads them, `clip` as `compute` over `i*`.
#[test]
fn dag_epilogues_print_like_tvm() {
    let list = kernels(&se_model("Sigmoid"));
    let text = |class: &str| {
        let k = list.kernels.iter().find(|k| k.class == class).unwrap();
        let dag = common::kernel_dag(k);
        let t = print_dag(&dag);
        // from the bias add on
        t[t.find("T_add(").unwrap()..].to_string()
    };
    assert_eq!(
        text(SILU),
        "T_add(ax0, ax1, ax2, ax3, ax4) = (conv2d_NCHWc[ax0, ax1, ax2, ax3, ax4] + p2[ax0, ax1, 0, 0, ax4])\n\
         T_sigmoid(ax0, ax1, ax2, ax3, ax4) = Op(tir.sigmoid)\n\
         T_multiply(ax0, ax1, ax2, ax3, ax4) = (T_add[ax0, ax1, ax2, ax3, ax4]*T_sigmoid[ax0, ax1, ax2, ax3, ax4])\n"
    );
    assert_eq!(
        text(HARDSWISH),
        "T_add(ax0, ax1, ax2, ax3, ax4) = (conv2d_NCHWc[ax0, ax1, ax2, ax3, ax4] + p2[ax0, ax1, 0, 0, ax4])\n\
         compile_engine_const() = 0.166667f\n\
         T_multiply(ax0, ax1, ax2, ax3, ax4) = (T_add[ax0, ax1, ax2, ax3, ax4]*compile_engine_const[])\n\
         compile_engine_const() = 0.5f\n\
         T_add(ax0, ax1, ax2, ax3, ax4) = (T_multiply[ax0, ax1, ax2, ax3, ax4] + compile_engine_const[])\n\
         compute(i0, i1, i2, i3, i4) = max(min(T_add[i0, i1, i2, i3, i4], 1f), 0f)\n\
         T_multiply(ax0, ax1, ax2, ax3, ax4) = (T_add[ax0, ax1, ax2, ax3, ax4]*compute[ax0, ax1, ax2, ax3, ax4])\n"
    );
}

#[test]
fn dense_hardswish_is_one_task() {
    let list = kernels(&dense_model());
    assert_eq!(
        anchored(&list),
        vec![(
            "dense+add+multiply_scalar+add_scalar+clip+multiply@1".to_string(),
            strings(&["/fc/Gemm", "/fc/HardSwish"])
        )]
    );
}

/// Each tuned kernel of these graphs compiles under the default schedule and verifies
/// against the reference evaluator.
#[test]
fn dag_epilogue_kernels_compile_and_verify() {
    let opts = EvalOptions {
        verify_only: true,
        ..EvalOptions::default()
    };
    let mut seen = Vec::new();
    for bytes in [se_model("HardSigmoid"), se_model("Sigmoid"), dense_model()] {
        for k in kernels(&bytes).tuned() {
            let spec = k.spec.as_ref().unwrap();
            let dag = spec.build(Era::V015, &k.inputs).unwrap();
            let reference = Reference::new(&dag, 3).unwrap();
            let e = evaluate_default(&dag, &reference, &opts);
            assert!(e.verified(), "{}: {:?}", k.class, e.failure);
            seen.push(k.class.clone());
        }
    }
    for class in [SILU, HARDSWISH, HARDSIGMOID] {
        assert!(seen.iter().any(|c| c == class), "{class}: {seen:?}");
    }
}

/// `ttdb tune` searches the SiLU, hardswish and hardsigmoid kernels end to end: every kernel
/// gets a verified best time, and no stored trial failed.
#[test]
fn dag_epilogue_kernels_tune_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("dag_epilogues.onnx");
    std::fs::write(&model, se_model("HardSigmoid")).unwrap();
    let db = dir.path().join("t.db");
    let v = common::tune_small_model(&db, &model, 24, 16, &[]);
    assert_eq!(v["kernels"].as_array().unwrap().len(), 6, "{v}");
}

/// The `ttdb kernels` table of a corpus model (TopHub shown by file name).
fn kernels_table(rel: &str) -> (KernelList, String) {
    let path = common::corpus_dir().join("onnx").join(rel);
    let opts = Options::default().with_default_tophub().unwrap();
    let mut list = onnx::kernels_for_file(&path, &[], &opts).unwrap();
    list.tophub = list.tophub.map(|p| {
        Path::new(&p)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    });
    let table = ttdb::cli::render_kernels(&list, false);
    (list, table)
}

fn untunable(list: &KernelList) -> Vec<(String, String)> {
    list.kernels
        .iter()
        .filter_map(|k| match &k.kind {
            KernelKind::Untunable { reason } => Some((k.name.clone(), reason.clone())),
            _ => None,
        })
        .collect()
}

/// EfficientNet-B1: every conv ends in SiLU (or the SE gate's sigmoid); all are tuned.
#[test]
fn kernels_of_efficientnet_b1() {
    let (list, table) = kernels_table("torchvision_more/efficientnet_b1.onnx");
    assert_eq!(untunable(&list), vec![]);
    assert!(list
        .kernels
        .iter()
        .any(|k| k.class.ends_with("+sigmoid+multiply@1")));
    insta::assert_snapshot!(table);
}

/// MobileNetV3-Small: hardswish after convs and the classifier's dense, hardsigmoid SE
/// gates; all are tuned.
#[test]
fn kernels_of_mobilenet_v3_small() {
    let (list, table) = kernels_table("torchvision_more/mobilenet_v3_small.onnx");
    assert_eq!(untunable(&list), vec![]);
    for class in [HARDSWISH, HARDSIGMOID] {
        assert!(list.kernels.iter().any(|k| k.class == class), "{class}");
    }
    insta::assert_snapshot!(table);
}

/// Keys of these kernels (the md5 of their PrintDAG text) are recognized by md5, as the
/// same class and signature: ttdb's own tuning records and TVM's keys of SiLU, hardswish
/// and hardsigmoid tasks find their workload, so `ttdb apply` matches them exactly.
#[test]
fn dag_epilogue_keys_are_recognized_by_md5() {
    let mut seen = Vec::new();
    for bytes in [se_model("HardSigmoid"), se_model("Sigmoid"), dense_model()] {
        for k in kernels(&bytes).tuned() {
            let r = common::recognized_by_md5(k, &common::kernel_dag(k));
            assert_eq!(r.signature.op_class, k.class);
            seen.push(k.class.clone());
        }
    }
    for class in [
        SILU,
        HARDSWISH,
        HARDSIGMOID,
        "dense+add+multiply_scalar+add_scalar+clip+multiply@1",
    ] {
        assert!(seen.iter().any(|c| c == class), "{class}: {seen:?}");
    }
}

/// Ansor's sketch rules treat the new stages like the chain ones: every element-wise stage
/// before the output (the bias add read twice, the sigmoid, the `compile_engine_const`
/// scalars, the clip) is always inlined; the conv, its padding and the output are not.
#[test]
fn sketches_inline_every_dag_epilogue_stage() {
    use ttdb::ansor::Step;
    use ttdb::search::sketch::{generate_sketches, HardwareParams};
    let hw = HardwareParams {
        num_cores: 4,
        vector_lanes: 16,
    };
    let list = kernels(&se_model("Sigmoid"));
    for (class, want) in [
        (SILU, vec!["T_add", "T_sigmoid"]),
        (
            HARDSWISH,
            vec![
                "T_add",
                "compile_engine_const",
                "T_multiply",
                "compile_engine_const",
                "T_add",
                "compute",
            ],
        ),
    ] {
        let k = list.kernels.iter().find(|k| k.class == class).unwrap();
        let dag = common::kernel_dag(k);
        let sketches = generate_sketches(&dag, &hw).unwrap();
        assert!(!sketches.is_empty(), "{class}");
        for s in &sketches {
            let inlined: Vec<&str> = s
                .steps
                .iter()
                .filter_map(|st| match st {
                    Step::ComputeInline(ci) => Some(dag.stages[ci.stage_id as usize].name.as_str()),
                    _ => None,
                })
                .collect();
            // the rule visits stages from the output back
            let mut want = want.clone();
            want.reverse();
            assert_eq!(inlined, want, "{class}: {:?}", s.steps);
        }
    }
}
