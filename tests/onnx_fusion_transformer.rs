//! Fusion of transformer blocks, on small graphs written with ttdb's ONNX writer: the
//! kernels ttdb extracts are the groups TVM's FuseOps (`src/relay/transforms/fuse_ops.cc`)
//! forms, written out here from its rules:
//!
//! * a `kCommReduce` op is never fused into what follows it, but an element-wise or
//!   broadcast producer whose post-dominator is the reduction fuses into it (phase 0,
//!   `group_node->pattern <= kBroadcast` with a `kCommReduce` parent): LayerNorm's
//!   `power` joins the variance's `mean`;
//! * a broadcast op fuses into its post-dominator only if every op on the way is injective
//!   or element-wise (`fcond` of non-sink nodes): LayerNorm's `x - mean` also reaches the
//!   `divide` through the variance's reduction, so it stays alone;
//! * an out-element-wise-fusable anchor (dense, batch_matmul) takes the element-wise chain
//!   after it when the edge into it is element-wise (an operand of the output's shape or a
//!   scalar): GELU after a dense, the `1/sqrt(d)` scaling after `q @ k^T`;
//! * softmax is `kOpaque`: a group of its own.
use ttdb::onnx::{self, HostEstimates, KernelKind, LayoutPlanning, Options};
use ttdb_testkit::onnx_model::{attr_int, attr_ints, attr_tensor, float_scalar, ModelBuilder};

/// (class, kind, ONNX nodes of the first occurrence) of each kernel, in graph order.
fn groups(b: &ModelBuilder) -> Vec<(String, String, Vec<String>)> {
    let g = onnx::load_bytes(&b.encode(), &[]).unwrap();
    let list = onnx::extract(&g, &Options::default()).unwrap();
    list.kernels
        .iter()
        .map(|k| {
            let kind = match &k.kind {
                KernelKind::Tuned => "tuned".to_string(),
                KernelKind::Simple => "simple".to_string(),
                KernelKind::Untunable { reason } => format!("untunable: {reason}"),
            };
            (k.class.clone(), kind, k.occurrences[0].clone())
        })
        .collect()
}

fn constant(b: &mut ModelBuilder, name: &str, v: f32) {
    b.node(
        "Constant",
        &format!("/{name}"),
        &[],
        &[name],
        vec![attr_tensor("value", float_scalar(v))],
    );
}

fn nodes(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// LayerNorm as PyTorch exports it (no LayerNormalization op before opset 17).
fn layer_norm() -> ModelBuilder {
    let mut b = ModelBuilder::new("layer_norm", 14);
    b.input("x", &[1, 8, 32]);
    b.weight("gamma", &[32]).weight("beta", &[32]);
    constant(&mut b, "two", 2.0);
    constant(&mut b, "eps", 1e-5);
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
    b
}

/// `mean | subtract | power+mean | add+sqrt+divide+multiply+add`. The last group is a
/// simple kernel either way; relay's SimplifyExpr (`SimplifyRSqrt`, run before FuseOps)
/// makes it `add, rsqrt, multiply, multiply, add`, ttdb lists it under the ONNX ops' names.
#[test]
fn layer_norm_groups_follow_fuse_ops() {
    let got = groups(&layer_norm());
    let want = vec![
        ("mean", "tuned", nodes(&["/ln/ReduceMean"])),
        ("subtract", "simple", nodes(&["/ln/Sub"])),
        (
            "power_scalar+mean",
            "tuned",
            nodes(&["/ln/Pow", "/ln/ReduceMean_1"]),
        ),
        (
            "add+sqrt+divide+multiply+add",
            "simple",
            nodes(&["/ln/Add", "/ln/Sqrt", "/ln/Div", "/ln/Mul", "/ln/Add_1"]),
        ),
    ];
    let want: Vec<(String, String, Vec<String>)> = want
        .into_iter()
        .map(|(c, k, n)| (c.to_string(), k.to_string(), n))
        .collect();
    assert_eq!(got, want);
}

/// GELU (erf form) after a 2-D MatMul + bias, as PyTorch exports `nn.GELU()`.
fn gelu() -> ModelBuilder {
    let mut b = ModelBuilder::new("gelu", 14);
    b.input("x", &[8, 16]);
    b.weight("w", &[16, 32]).weight("bias", &[32]);
    b.node("MatMul", "/fc/MatMul", &["x", "w"], &["h0"], vec![]);
    b.node("Add", "/fc/Add", &["bias", "h0"], &["h"], vec![]);
    gelu_of_h(&mut b);
    b.output("y");
    b
}

/// `y = h * (1 + erf(h / sqrt2)) * 0.5`, as PyTorch exports `nn.GELU()`.
fn gelu_of_h(b: &mut ModelBuilder) {
    constant(b, "sqrt2", std::f32::consts::SQRT_2);
    constant(b, "one", 1.0);
    constant(b, "half", 0.5);
    b.node("Div", "/act/Div", &["h", "sqrt2"], &["a"], vec![]);
    b.node("Erf", "/act/Erf", &["a"], &["e"], vec![]);
    b.node("Add", "/act/Add", &["e", "one"], &["e1"], vec![]);
    b.node("Mul", "/act/Mul", &["h", "e1"], &["g"], vec![]);
    b.node("Mul", "/act/Mul_1", &["g", "half"], &["y"], vec![]);
}

/// Scaled dot-product attention on `[heads, seq, dim]` tensors.
fn attention() -> ModelBuilder {
    let mut b = ModelBuilder::new("attention", 14);
    b.input("q", &[2, 8, 4])
        .input("kt", &[2, 4, 8])
        .input("v", &[2, 8, 4]);
    constant(&mut b, "scale", 2.0);
    b.node("MatMul", "/attn/MatMul", &["q", "kt"], &["s"], vec![]);
    b.node("Div", "/attn/Div", &["s", "scale"], &["s1"], vec![]);
    b.node(
        "Softmax",
        "/attn/Softmax",
        &["s1"],
        &["p"],
        vec![attr_int("axis", -1)],
    );
    b.node("MatMul", "/attn/MatMul_1", &["p", "v"], &["y"], vec![]);
    b.output("y");
    b
}

/// The whole GELU joins the dense: bias add, `/ sqrt2`, erf, `+ 1`, the multiply by the
/// dense's value again (a diamond of element-wise ops: FuseOps fuses up to the
/// post-dominator) and `* 0.5`.
#[test]
fn gelu_fuses_into_the_dense() {
    let got = groups(&gelu());
    assert_eq!(got.len(), 1, "{got:?}");
    let (_, kind, names) = &got[0];
    assert_eq!(
        names,
        &nodes(&[
            "/fc/MatMul",
            "/fc/Add",
            "/act/Div",
            "/act/Erf",
            "/act/Add",
            "/act/Mul",
            "/act/Mul_1"
        ])
    );
    // the multiply by `h` rejoins the dense's biased output: a tuned DAG epilogue
    assert_eq!(kind, "tuned", "{got:?}");
    assert_eq!(
        got[0].0,
        "dense+add+divide_scalar+erf+add_scalar+multiply@1+multiply_scalar"
    );
}

/// `q @ k^T / scale`, softmax, `@ v`: relay's ONNX MatMul on 3-D inputs is an NT
/// batch_matmul of a transposed right operand (`use_nt_batch_matmul`); the transpose of a
/// graph input is an injective group of its own (its post-dominator is the batch_matmul,
/// not injective); the scalar divide joins the first batch_matmul; softmax is opaque.
#[test]
fn attention_groups_follow_fuse_ops() {
    let got = groups(&attention());
    let want = vec![
        ("transpose", "simple", nodes(&["/attn/MatMul"])),
        (
            "batch_matmul+divide_scalar",
            "tuned",
            nodes(&["/attn/MatMul", "/attn/Div"]),
        ),
        ("softmax", "tuned", nodes(&["/attn/Softmax"])),
        ("transpose", "simple", nodes(&["/attn/MatMul_1"])),
        ("batch_matmul", "tuned", nodes(&["/attn/MatMul_1"])),
    ];
    let want: Vec<(String, String, Vec<String>)> = want
        .into_iter()
        .map(|(c, k, n)| (c.to_string(), k.to_string(), n))
        .collect();
    assert_eq!(got, want);
}

/// The corpus's transformers and convnext: every LayerNorm's variance is a tuned kernel
/// (`power_scalar+mean`), and no anchored kernel is left untunable.
#[test]
fn layer_norm_models_have_no_untunable_kernels() {
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/onnx");
    let opts = Options::default().with_default_tophub().unwrap();
    for (model, variances) in [
        ("transformers/distilbert_like", 1),
        ("transformers/gpt2_like", 1),
        ("transformers/roberta_small_like", 1),
        ("torchvision_more/vit_b_16", 1),
        ("torchvision_more/convnext_tiny", 5),
    ] {
        let path = corpus.join(format!("{model}.onnx"));
        let list = onnx::kernels_for_file(&path, &[], &opts).unwrap();
        let untunable: Vec<String> = list
            .kernels
            .iter()
            .filter_map(|k| match &k.kind {
                KernelKind::Untunable { reason } => Some(format!("{}: {reason}", k.name)),
                _ => None,
            })
            .collect();
        assert!(untunable.is_empty(), "{model}: {untunable:?}");
        let tuned = list
            .kernels
            .iter()
            .filter(|k| k.class == "power_scalar+mean" && k.kind == KernelKind::Tuned)
            .count();
        assert_eq!(tuned, variances, "{model}");
    }
}

/// A mean over `op(x)`: unary ops and scalar constants make a prologue; a tensor operand
/// (another task input) or a constant other groups read too (a rank-0 parameter) is
/// refused, naming the ONNX node.
#[test]
fn reduction_prologues_and_their_refusals() {
    let build = |mid: &dyn Fn(&mut ModelBuilder)| {
        let mut b = ModelBuilder::new("prologue", 14);
        b.input("x", &[1, 4, 16]).input("w", &[1, 4, 16]);
        constant(&mut b, "two", 2.0);
        mid(&mut b);
        b.node(
            "ReduceMean",
            "/ReduceMean",
            &["p"],
            &["y"],
            vec![attr_ints("axes", &[-1]), attr_int("keepdims", 1)],
        );
        b.output("y");
        b
    };
    // the reduction's group
    let only = |b: &ModelBuilder| {
        groups(b)
            .into_iter()
            .find(|g| g.2.iter().any(|n| n == "/ReduceMean"))
            .unwrap()
    };
    // exp, then a scalar multiply: a two-op prologue
    let (class, kind, names) = only(&build(&|b| {
        b.node("Exp", "/Exp", &["x"], &["e"], vec![]);
        b.node("Mul", "/Mul", &["two", "e"], &["p"], vec![]);
    }));
    assert_eq!(
        (class.as_str(), kind.as_str()),
        ("exp+multiply_scalar+mean", "tuned")
    );
    assert_eq!(names, nodes(&["/Exp", "/Mul", "/ReduceMean"]));
    // a tensor operand
    let (_, kind, _) = only(&build(&|b| {
        b.node("Mul", "/Mul", &["x", "w"], &["p"], vec![]);
    }));
    assert!(
        kind.starts_with("untunable") && kind.contains("`/Mul`") && kind.contains("tensor operand"),
        "{kind}"
    );
    // the exponent is also read by another group: a rank-0 parameter of the function
    let (_, kind, _) = only(&build(&|b| {
        b.node("Pow", "/Pow", &["x", "two"], &["p"], vec![]);
        b.node("Add", "/Other", &["w", "two"], &["o"], vec![]);
        b.output("o");
    }));
    assert!(
        kind.starts_with("untunable") && kind.contains("`/Pow`"),
        "{kind}"
    );
}

/// [`gelu`] on a transformer's `[batch, seq, hidden]` activation, as distilbert exports
/// it (Relay's MatMul is `reshape`, `dense`, `reshape` back); with `residual`, the biased
/// value is added to another tensor instead (an attention block's output projection).
fn dense_3d(residual: bool) -> ModelBuilder {
    let mut b = ModelBuilder::new("dense_3d", 14);
    b.input("x", &[2, 4, 16]).input("r", &[2, 4, 32]);
    b.weight("w", &[16, 32]).weight("bias", &[32]);
    b.node("MatMul", "/fc/MatMul", &["x", "w"], &["h0"], vec![]);
    b.node("Add", "/fc/Add", &["bias", "h0"], &["h"], vec![]);
    if residual {
        b.node("Add", "/res/Add", &["h", "r"], &["y"], vec![]);
    } else {
        gelu_of_h(&mut b);
    }
    b.output("y");
    b
}

/// TVM never fuses a dense across the reshape back to 3-D (FuseOps stops at an injective
/// op), so its bias add and GELU are glue; under a layout plan (ttdb's own partition) they
/// move in front of the reshape and become the dense's epilogue. A residual add of another
/// tensor stays out and reads the biased value reshaped back.
#[test]
fn under_a_plan_a_dense_takes_its_gelu_across_the_reshape() {
    let classes = |b: ModelBuilder, opts: &Options| -> Vec<(String, String)> {
        let g = onnx::load_bytes(&b.encode(), &[]).unwrap();
        let list = onnx::extract(&g, opts).unwrap();
        let kind = |k: &KernelKind| match k {
            KernelKind::Tuned => "tuned".to_string(),
            _ => "not tuned".to_string(),
        };
        let mut v: Vec<_> = list
            .kernels
            .iter()
            .map(|k| (k.class.clone(), kind(&k.kind)))
            .collect();
        v.sort();
        v
    };
    let own = |c: &[(&str, &str)]| -> Vec<(String, String)> {
        c.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    let planned = Options {
        layout_plan: Some(LayoutPlanning::Estimate(HostEstimates::typical(16, 2))),
        ..Options::default()
    };
    let tvm = Options::default();
    assert_eq!(
        classes(dense_3d(false), &tvm),
        own(&[
            ("dense", "tuned"),
            ("reshape", "not tuned"),
            ("reshape+add+divide+erf+add+multiply+multiply", "not tuned"),
        ]),
    );
    // the reshapes left are the MatMul's own to 2-D and the output's back to 3-D (views
    // when run)
    assert_eq!(
        classes(dense_3d(false), &planned),
        own(&[
            (
                "dense+add+divide_scalar+erf+add_scalar+multiply@1+multiply_scalar",
                "tuned"
            ),
            ("reshape", "not tuned"),
            ("reshape", "not tuned"),
        ]),
    );
    assert_eq!(
        classes(dense_3d(true), &tvm),
        own(&[
            ("dense", "tuned"),
            ("reshape", "not tuned"),
            ("reshape+add+add", "not tuned"),
        ]),
    );
    assert_eq!(
        classes(dense_3d(true), &planned),
        own(&[
            ("dense+add", "tuned"),
            ("reshape", "not tuned"),
            ("reshape+add", "not tuned"),
        ]),
    );
}
