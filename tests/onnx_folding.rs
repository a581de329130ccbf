//! Load-time folding of graphs that compute their own shapes (`src/onnx/consteval.rs`), one
//! test per op family, on tiny graphs built with ttdb's ONNX writer. Expected values follow
//! the ONNX operator definitions; each case was also run through onnxruntime 1.32 (CPU,
//! optimizations off) and gave the same result, edge cases included (Slice clamping,
//! `Mod`'s sign rules, C-style integer division, `Cast` wrapping).
use ttdb::onnx::graph::Data;
use ttdb::onnx::{self, load::from_model, proto, Graph, OnnxError, Options};
use ttdb_testkit::onnx_model::{attr_int, attr_ints, attr_tensor, ModelBuilder};

const MAX: i64 = i64::MAX;
const MIN: i64 = i64::MIN;

fn int64(dims: &[i64], v: &[i64]) -> proto::TensorProto {
    proto::TensorProto {
        dims: dims.to_vec(),
        data_type: 7,
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

fn int32(dims: &[i64], v: &[i32]) -> proto::TensorProto {
    proto::TensorProto {
        dims: dims.to_vec(),
        data_type: 6,
        int32_data: v.to_vec(),
        ..Default::default()
    }
}

fn float(dims: &[i64], v: &[f32]) -> proto::TensorProto {
    proto::TensorProto {
        dims: dims.to_vec(),
        data_type: 1,
        float_data: v.to_vec(),
        ..Default::default()
    }
}

/// A graph under construction: constants are `Constant` nodes, like the torch exports.
struct G {
    b: ModelBuilder,
    int64_inputs: Vec<String>,
}

impl G {
    fn new(opset: i64) -> G {
        G {
            b: ModelBuilder::new("folding", opset),
            int64_inputs: vec![],
        }
    }

    fn konst(&mut self, name: &str, t: proto::TensorProto) -> &mut Self {
        let node = format!("{name}_const");
        self.b.node(
            "Constant",
            &node,
            &[],
            &[name],
            vec![attr_tensor("value", t)],
        );
        self
    }

    fn ints(&mut self, name: &str, dims: &[i64], v: &[i64]) -> &mut Self {
        self.konst(name, int64(dims, v))
    }

    fn op(
        &mut self,
        op: &str,
        ins: &[&str],
        out: &str,
        attrs: Vec<proto::AttributeProto>,
    ) -> &mut Self {
        self.b.node(op, &format!("/{out}/{op}"), ins, &[out], attrs);
        self
    }

    fn input(&mut self, name: &str, dims: &[i64]) -> &mut Self {
        self.b.input(name, dims);
        self
    }

    fn int64_input(&mut self, name: &str, dims: &[i64]) -> &mut Self {
        self.b.input(name, dims);
        self.int64_inputs.push(name.into());
        self
    }

    fn load(&mut self, outputs: &[&str]) -> Result<Graph, OnnxError> {
        for o in outputs {
            self.b.output(o);
        }
        let mut m = self.b.model();
        for v in &mut m.graph.as_mut().unwrap().input {
            if self.int64_inputs.contains(&v.name) {
                if let Some(proto::type_proto::Value::TensorType(t)) =
                    v.r#type.as_mut().and_then(|t| t.value.as_mut())
                {
                    t.elem_type = 7;
                }
            }
        }
        from_model(&m, &[])
    }
}

/// (shape, integer values) of a folded tensor.
fn ints(g: &Graph, name: &str) -> (Vec<i64>, Vec<i64>) {
    let t = g
        .tensor(name)
        .unwrap_or_else(|| panic!("no tensor `{name}`"));
    match &t.data {
        Some(Data::Ints(v)) => (t.shape.clone(), v.clone()),
        other => panic!("`{name}` {:?}: values {other:?}", t.shape),
    }
}

fn floats(g: &Graph, name: &str) -> (Vec<i64>, Vec<f64>) {
    let t = g.tensor(name).unwrap();
    match &t.data {
        Some(Data::Floats(v)) => (t.shape.clone(), v.clone()),
        other => panic!("`{name}` {:?}: values {other:?}", t.shape),
    }
}

fn unsupported(e: OnnxError) -> (String, String, String) {
    match e {
        OnnxError::Unsupported { node, op, reason } => (node, op, reason),
        other => panic!("expected an unsupported-node error, got {other}"),
    }
}

/// `x = [[0..5], [5..10]]`, sliced along axis 1 (or as given) with starts/ends/axes/steps.
fn slice(
    starts: &[i64],
    ends: &[i64],
    axes: &[i64],
    steps: Option<&[i64]>,
) -> (Vec<i64>, Vec<i64>) {
    let mut g = G::new(13);
    g.ints("x", &[2, 5], &(0..10).collect::<Vec<_>>())
        .ints("s", &[starts.len() as i64], starts)
        .ints("e", &[ends.len() as i64], ends)
        .ints("a", &[axes.len() as i64], axes);
    let mut ins = vec!["x", "s", "e", "a"];
    if let Some(p) = steps {
        g.ints("p", &[p.len() as i64], p);
        ins.push("p");
    }
    g.op("Slice", &ins, "y", vec![]);
    let g = g.load(&["y"]).unwrap();
    ints(&g, "y")
}

#[test]
fn slice_follows_onnx_index_normalization_and_clamping() {
    // negative start, INT64_MAX end
    assert_eq!(
        slice(&[-3], &[MAX], &[1], None),
        (vec![2, 3], vec![2, 3, 4, 7, 8, 9])
    );
    // end past the dim is clamped; a negative axis
    assert_eq!(
        slice(&[1], &[100], &[-1], None),
        (vec![2, 4], vec![1, 2, 3, 4, 6, 7, 8, 9])
    );
    // reversal: start -1, end INT64_MIN, step -1
    assert_eq!(
        slice(&[-1], &[MIN], &[1], Some(&[-1])),
        (vec![2, 5], vec![4, 3, 2, 1, 0, 9, 8, 7, 6, 5])
    );
    // negative step: start clamped to dim-1, negative end counted from the back
    assert_eq!(
        slice(&[10], &[-4], &[1], Some(&[-2])),
        (vec![2, 2], vec![4, 2, 9, 7])
    );
    // start after end with a positive step: empty
    assert_eq!(slice(&[4], &[2], &[1], None), (vec![2, 0], vec![]));
    // negative step, start far below -dim: clamped to 0 (not empty as numpy would have it)
    assert_eq!(
        slice(&[-100], &[MIN], &[1], Some(&[-1])),
        (vec![2, 1], vec![0, 5])
    );
    // two axes, a step of 3
    assert_eq!(
        slice(&[0, 1], &[2, 5], &[0, 1], Some(&[1, 3])),
        (vec![2, 2], vec![1, 4, 6, 9])
    );
    // axis 0 reversed with end -3 (= -1 after counting from the back, clamped)
    assert_eq!(
        slice(&[-1], &[-3], &[0], Some(&[-1])),
        (vec![2, 5], vec![5, 6, 7, 8, 9, 0, 1, 2, 3, 4])
    );
    // huge steps both ways
    assert_eq!(
        slice(&[0], &[-1], &[1], Some(&[MAX])),
        (vec![2, 1], vec![0, 5])
    );
    assert_eq!(
        slice(&[4], &[0], &[1], Some(&[MIN])),
        (vec![2, 1], vec![4, 9])
    );
}

#[test]
fn slice_before_opset_10_and_its_errors() {
    let mut g = G::new(9);
    g.ints("x", &[2, 5], &(0..10).collect::<Vec<_>>()).op(
        "Slice",
        &["x"],
        "y",
        vec![
            attr_ints("starts", &[1, -2]),
            attr_ints("ends", &[MAX, MAX]),
            attr_ints("axes", &[0, 1]),
        ],
    );
    assert_eq!(
        ints(&g.load(&["y"]).unwrap(), "y"),
        (vec![1, 2], vec![8, 9])
    );
    // a step of 0 and a repeated axis are shape errors naming the node
    for (axes, steps) in [(vec![1], vec![0]), (vec![1, -1], vec![1, 1])] {
        let mut g = G::new(13);
        let n = axes.len() as i64;
        g.ints("x", &[2, 5], &(0..10).collect::<Vec<_>>())
            .ints("s", &[n], &vec![0; n as usize])
            .ints("e", &[n], &vec![2; n as usize])
            .ints("a", &[n], &axes)
            .ints("p", &[n], &steps)
            .op("Slice", &["x", "s", "e", "a", "p"], "y", vec![]);
        match g.load(&["y"]).unwrap_err() {
            OnnxError::Shape { node, op, .. } => {
                assert_eq!((node.as_str(), op.as_str()), ("/y/Slice", "Slice"))
            }
            other => panic!("{other}"),
        }
    }
}

#[test]
fn shape_gather_mod_slice_like_vit() {
    // ViT's packed qkv: Shape -> Gather -> Div / Mod -> Unsqueeze -> Slice ends at load time
    let mut g = G::new(14);
    g.input("x", &[1, 197, 2304])
        .op("Shape", &["x"], "dims", vec![])
        .ints("last", &[], &[-1])
        .op("Gather", &["dims", "last"], "c", vec![attr_int("axis", 0)])
        .ints("three", &[], &[3])
        .op("Div", &["c", "three"], "third", vec![])
        .ints("seven", &[], &[7])
        .op("Mod", &["seven", "three"], "one", vec![])
        .op("Mul", &["one", "third"], "start", vec![])
        .op("Add", &["start", "third"], "end", vec![])
        .ints("zero", &[1], &[0])
        .op("Unsqueeze", &["start", "zero"], "starts", vec![])
        .op("Unsqueeze", &["end", "zero"], "ends", vec![])
        .ints("axes", &[1], &[-1])
        .op("Slice", &["x", "starts", "ends", "axes"], "k", vec![])
        // a Reshape target from the shape: [dims[0], dims[1], 12, -1]
        .ints("front", &[2], &[0, 1])
        .op("Gather", &["dims", "front"], "bs", vec![])
        .ints("tail", &[2], &[12, -1])
        .op(
            "Concat",
            &["bs", "tail"],
            "target",
            vec![attr_int("axis", 0)],
        )
        .op("Reshape", &["k", "target"], "heads", vec![]);
    let g = g.load(&["heads"]).unwrap();
    assert_eq!(ints(&g, "starts"), (vec![1], vec![768]));
    assert_eq!(ints(&g, "ends"), (vec![1], vec![1536]));
    assert_eq!(g.shape("k").unwrap(), [1, 197, 768]);
    assert_eq!(ints(&g, "target"), (vec![4], vec![1, 197, 12, -1]));
    assert_eq!(g.shape("heads").unwrap(), [1, 197, 12, 64]);
    // the shape arithmetic is folded away; the slice and reshape stay (simple kernels)
    let list = onnx::extract(&g, &Options::default()).unwrap();
    assert_eq!(list.kernels.len(), 1, "{:#?}", list.kernels);
    assert_eq!(list.kernels[0].class, "strided_slice+reshape");
}

#[test]
fn range_lengths_and_values() {
    let run = |t: [proto::TensorProto; 3]| {
        let mut g = G::new(11);
        let [s, l, d] = t;
        g.konst("s", s)
            .konst("l", l)
            .konst("d", d)
            .op("Range", &["s", "l", "d"], "y", vec![]);
        g.load(&["y"])
    };
    let i = |v: i64| int64(&[], &[v]);
    assert_eq!(
        ints(&run([i(0), i(10), i(3)]).unwrap(), "y"),
        (vec![4], vec![0, 3, 6, 9])
    );
    assert_eq!(
        ints(&run([i(10), i(0), i(-3)]).unwrap(), "y"),
        (vec![4], vec![10, 7, 4, 1])
    );
    assert_eq!(
        ints(&run([i(5), i(0), i(1)]).unwrap(), "y"),
        (vec![0], vec![])
    );
    // float32: ceil((1 - 0) / 0.3) = 4 values, accumulated in float32
    let f = |v: f32| float(&[], &[v]);
    let (shape, v) = floats(&run([f(0.0), f(1.0), f(0.3)]).unwrap(), "y");
    assert_eq!(shape, [4]);
    let expect = [0.0f32, 0.3, 0.6, 0.900_000_04];
    assert!(v.iter().zip(expect).all(|(&a, b)| a as f32 == b), "{v:?}");
    // delta 0 names the node
    assert!(
        matches!(run([i(0), i(4), i(0)]), Err(OnnxError::Shape { node, .. }) if node == "/y/Range")
    );
    // bounds computed at run time: the length is unknown, refused with the reason
    let mut g = G::new(13);
    g.input("n", &[1])
        .ints("ax", &[1], &[0])
        .op("Squeeze", &["n", "ax"], "limit", vec![])
        .konst("zero", float(&[], &[0.0]))
        .konst("one", float(&[], &[1.0]))
        .op("Range", &["zero", "limit", "one"], "y", vec![]);
    let (node, op, reason) = unsupported(g.load(&["y"]).unwrap_err());
    assert_eq!((node.as_str(), op.as_str()), ("/y/Range", "Range"));
    assert!(
        reason.contains("start, limit and delta must be known at load time"),
        "{reason}"
    );
}

#[test]
fn constant_of_shape_and_the_size_cap() {
    let mut g = G::new(14);
    g.ints("s", &[2], &[2, 3])
        .op(
            "ConstantOfShape",
            &["s"],
            "sevens",
            vec![attr_tensor("value", int64(&[1], &[7]))],
        )
        .ints("none", &[0], &[])
        .op(
            "ConstantOfShape",
            &["none"],
            "scalar",
            vec![attr_tensor("value", int64(&[1], &[7]))],
        )
        .op("ConstantOfShape", &["s"], "zeros", vec![]);
    let g = g.load(&["sevens", "scalar", "zeros"]).unwrap();
    assert_eq!(ints(&g, "sevens"), (vec![2, 3], vec![7; 6]));
    assert_eq!(ints(&g, "scalar"), (vec![], vec![7]));
    assert_eq!(floats(&g, "zeros"), (vec![2, 3], vec![0.0; 6]));

    // 5000 elements: above the cap, so the shape is known and the values are never built;
    // a node that needs them is refused, naming itself, the tensor and the cap
    let mut g = G::new(14);
    g.input("x", &[2, 3])
        .ints("n", &[1], &[5000])
        .op(
            "ConstantOfShape",
            &["n"],
            "big",
            vec![attr_tensor("value", int64(&[1], &[1]))],
        )
        .op("Reshape", &["x", "big"], "y", vec![]);
    let (node, op, reason) = unsupported(g.load(&["y"]).unwrap_err());
    assert_eq!((node.as_str(), op.as_str()), ("/y/Reshape", "Reshape"));
    assert!(
        reason.contains("`big`") && reason.contains("5000 elements") && reason.contains("4096"),
        "{reason}"
    );
    // a Range above the cap: length known, values not materialized
    let mut g = G::new(11);
    g.ints("s", &[], &[0])
        .ints("l", &[], &[1 << 40])
        .ints("d", &[], &[1])
        .op("Range", &["s", "l", "d"], "r", vec![]);
    let g = g.load(&["r"]).unwrap();
    let r = g.tensor("r").unwrap();
    assert_eq!(
        (r.shape.as_slice(), r.data.is_none(), r.constant),
        (&[1i64 << 40][..], true, true)
    );
}

#[test]
fn where_equal_expand_like_roberta() {
    // torch's expand(1, -1): Where(Equal(shape, -1), ones, shape) -> Expand at load time
    let mut g = G::new(14);
    g.input("x", &[1, 128])
        .ints("target", &[2], &[1, -1])
        .ints("two", &[1], &[2])
        .op(
            "ConstantOfShape",
            &["two"],
            "ones",
            vec![attr_tensor("value", int64(&[1], &[1]))],
        )
        .ints("neg", &[], &[-1])
        .op("Mul", &["ones", "neg"], "minus", vec![])
        .op("Equal", &["target", "minus"], "eq", vec![])
        .op("Where", &["eq", "ones", "target"], "shape", vec![])
        .op("Expand", &["x", "shape"], "y", vec![]);
    let g = g.load(&["y"]).unwrap();
    assert_eq!(ints(&g, "eq"), (vec![2], vec![0, 1]));
    assert_eq!(ints(&g, "shape"), (vec![2], vec![1, 1]));
    assert_eq!(g.shape("y").unwrap(), [1, 128]);
    // broadcasting of all three operands, and INT64_MAX kept exactly through Where
    let mut g = G::new(14);
    g.konst(
        "c",
        proto::TensorProto {
            dims: vec![2, 1],
            data_type: 9,
            int32_data: vec![1, 0],
            ..Default::default()
        },
    )
    .ints("a", &[3], &[1, 2, 3])
    .ints("b", &[], &[-1])
    .op("Where", &["c", "a", "b"], "w", vec![])
    .ints("t", &[1], &[1])
    .ints("big", &[1], &[MAX])
    .ints("small", &[1], &[2])
    .op("Where", &["t", "big", "small"], "end", vec![])
    .ints("x", &[5], &[0, 1, 2, 3, 4])
    .ints("one", &[1], &[1])
    .op("Slice", &["x", "one", "end"], "tail", vec![]);
    let g = g.load(&["w", "tail"]).unwrap();
    assert_eq!(ints(&g, "w"), (vec![2, 3], vec![1, 2, 3, -1, -1, -1]));
    assert_eq!(ints(&g, "end"), (vec![1], vec![MAX]));
    assert_eq!(ints(&g, "tail"), (vec![4], vec![1, 2, 3, 4]));
}

#[test]
fn cumsum_folds_constants_and_stays_a_run_time_op_otherwise() {
    for (exclusive, reverse, expect) in [
        (0, 0, [1, 3, 6, 4, 9, 15]),
        (1, 0, [0, 1, 3, 0, 4, 9]),
        (0, 1, [6, 5, 3, 15, 11, 6]),
        (1, 1, [5, 3, 0, 11, 6, 0]),
    ] {
        let mut g = G::new(14);
        g.ints("x", &[2, 3], &[1, 2, 3, 4, 5, 6])
            .konst("axis", int32(&[], &[1]))
            .op(
                "CumSum",
                &["x", "axis"],
                "y",
                vec![
                    attr_int("exclusive", exclusive),
                    attr_int("reverse", reverse),
                ],
            );
        let g = g.load(&["y"]).unwrap();
        assert_eq!(
            ints(&g, "y"),
            (vec![2, 3], expect.to_vec()),
            "exclusive={exclusive} reverse={reverse}"
        );
    }
    let mut g = G::new(14);
    g.ints("x", &[2, 3], &[1, 2, 3, 4, 5, 6])
        .ints("axis", &[], &[-2])
        .op("CumSum", &["x", "axis"], "y", vec![]);
    assert_eq!(
        ints(&g.load(&["y"]).unwrap(), "y"),
        (vec![2, 3], vec![1, 2, 3, 5, 7, 9])
    );

    // RoBERTa's position ids: a CumSum over a mask of the run-time input_ids
    let mut g = G::new(14);
    g.int64_input("ids", &[1, 128])
        .ints("pad", &[], &[1])
        .op("Equal", &["ids", "pad"], "is_pad", vec![])
        .op("Not", &["is_pad"], "mask_b", vec![])
        .op("Cast", &["mask_b"], "mask", vec![attr_int("to", 6)])
        .konst("axis", int32(&[], &[1]))
        .op("CumSum", &["mask", "axis"], "cs", vec![])
        .op("Mul", &["cs", "mask"], "inc", vec![])
        .op("Cast", &["inc"], "inc64", vec![attr_int("to", 7)])
        .op("Add", &["inc64", "pad"], "pos", vec![]);
    g.b.weight("pos_table", &[130, 16]);
    g.op("Gather", &["pos_table", "pos"], "emb", vec![]);
    let g = g.load(&["emb"]).unwrap();
    let cs = g.tensor("cs").unwrap();
    assert_eq!(
        (
            cs.shape.as_slice(),
            cs.dtype,
            cs.data.is_none(),
            cs.constant
        ),
        (&[1i64, 128][..], 6, true, false)
    );
    assert_eq!(g.shape("emb").unwrap(), [1, 128, 16]);
    let list = onnx::extract(&g, &Options::default()).unwrap();
    let cumsum = list
        .kernels
        .iter()
        .find(|k| k.class.contains("cumsum"))
        .expect("a cumsum kernel");
    assert!(
        !matches!(cumsum.kind, onnx::KernelKind::Untunable { .. }),
        "{cumsum:?}"
    );
}

#[test]
fn expand_tile_concat_gather_split_nonzero_values() {
    let mut g = G::new(13);
    g.ints("col", &[3, 1], &[1, 2, 3])
        .ints("s", &[3], &[2, 1, 4])
        .op("Expand", &["col", "s"], "ex", vec![])
        .ints("v", &[2], &[1, 2])
        .ints("r", &[1], &[3])
        .op("Tile", &["v", "r"], "tile", vec![])
        .ints("m", &[2, 2], &[1, 2, 3, 4])
        .ints("c", &[2, 1], &[5, 6])
        .op("Concat", &["m", "c"], "cat", vec![attr_int("axis", 1)])
        .ints("d", &[2, 3], &[0, 1, 2, 3, 4, 5])
        .ints("i", &[2, 1], &[2, -3])
        .op("Gather", &["d", "i"], "gat", vec![attr_int("axis", 1)])
        .ints("ie", &[2, 2], &[2, -1, 0, 1])
        .op(
            "GatherElements",
            &["d", "ie"],
            "gel",
            vec![attr_int("axis", 1)],
        )
        .ints("five", &[5], &[1, 2, 3, 4, 5])
        .ints("parts", &[2], &[2, 3]);
    g.b.node(
        "Split",
        "/split",
        &["five", "parts"],
        &["p0", "p1"],
        vec![attr_int("axis", 0)],
    );
    g.ints("z", &[2, 2], &[0, 3, 0, 4])
        .op("NonZero", &["z"], "nz", vec![])
        .ints("u", &[], &[9])
        .ints("ax0", &[1], &[0])
        .op("Unsqueeze", &["u", "ax0"], "u1", vec![])
        .op("Squeeze", &["u1", "ax0"], "u0", vec![]);
    let g = g
        .load(&["ex", "tile", "cat", "gat", "gel", "p0", "p1", "nz", "u0"])
        .unwrap();
    let mut ex = Vec::new();
    for _ in 0..2 {
        for v in 1..=3 {
            ex.extend([v; 4]);
        }
    }
    assert_eq!(ints(&g, "ex"), (vec![2, 3, 4], ex));
    assert_eq!(ints(&g, "tile"), (vec![6], vec![1, 2, 1, 2, 1, 2]));
    assert_eq!(ints(&g, "cat"), (vec![2, 3], vec![1, 2, 5, 3, 4, 6]));
    assert_eq!(ints(&g, "gat"), (vec![2, 2, 1], vec![2, 0, 5, 3]));
    assert_eq!(ints(&g, "gel"), (vec![2, 2], vec![2, 2, 3, 4]));
    assert_eq!(ints(&g, "p0"), (vec![2], vec![1, 2]));
    assert_eq!(ints(&g, "p1"), (vec![3], vec![3, 4, 5]));
    assert_eq!(ints(&g, "nz"), (vec![2, 2], vec![0, 1, 1, 1]));
    assert_eq!(ints(&g, "u1"), (vec![1], vec![9]));
    assert_eq!(ints(&g, "u0"), (vec![], vec![9]));
}

#[test]
fn integer_arithmetic_and_casts_match_onnxruntime() {
    let mut g = G::new(13);
    g.ints("a", &[4], &[-7, 7, -7, 7])
        .ints("b", &[4], &[3, -3, -3, 3])
        .op("Mod", &["a", "b"], "mod0", vec![])
        .op("Mod", &["a", "b"], "mod1", vec![attr_int("fmod", 1)])
        .ints("two", &[4], &[2, -2, -2, 2])
        .op("Div", &["a", "two"], "div", vec![])
        .op("Sub", &["a", "b"], "sub", vec![])
        .konst("f", float(&[3], &[-2.7, 2.7, 0.5]))
        .op("Cast", &["f"], "trunc", vec![attr_int("to", 7)])
        .ints("w", &[3], &[300, -129, 5])
        .op("Cast", &["w"], "i8", vec![attr_int("to", 3)])
        .ints("big", &[2], &[(1 << 40) + 3, -1])
        .op("Cast", &["big"], "i32", vec![attr_int("to", 6)])
        .ints("bits", &[3], &[0, 2, -1])
        .op("Cast", &["bits"], "bool", vec![attr_int("to", 9)])
        .op("Cast", &["bits"], "fl", vec![attr_int("to", 1)])
        .op("Less", &["a", "b"], "less", vec![])
        .op("GreaterOrEqual", &["a", "b"], "ge", vec![]);
    let g = g
        .load(&[
            "mod0", "mod1", "div", "sub", "trunc", "i8", "i32", "bool", "fl", "less", "ge",
        ])
        .unwrap();
    assert_eq!(ints(&g, "mod0").1, [2, -2, -1, 1]);
    assert_eq!(ints(&g, "mod1").1, [-1, 1, -1, 1]);
    assert_eq!(ints(&g, "div").1, [-3, -3, 3, 3]);
    assert_eq!(ints(&g, "sub").1, [-10, 10, -4, 4]);
    assert_eq!(ints(&g, "trunc").1, [-2, 2, 0]);
    assert_eq!(ints(&g, "i8").1, [44, 127, 5]);
    assert_eq!(ints(&g, "i32").1, [3, -1]);
    assert_eq!(ints(&g, "bool").1, [0, 1, 1]);
    assert_eq!(floats(&g, "fl").1, [0.0, 2.0, -1.0]);
    assert_eq!(ints(&g, "less").1, [1, 0, 1, 0]);
    assert_eq!(ints(&g, "ge").1, [0, 1, 0, 1]);
    // integer division by zero is undefined in ONNX: no value is guessed
    let mut g = G::new(13);
    g.ints("a", &[1], &[4])
        .ints("z", &[1], &[0])
        .op("Div", &["a", "z"], "q", vec![]);
    let g = g.load(&["q"]).unwrap();
    assert!(g.tensor("q").unwrap().data.is_none());
}

#[test]
fn a_gather_index_out_of_range_names_the_node() {
    let mut g = G::new(13);
    g.input("x", &[1, 3, 8, 8])
        .op("Shape", &["x"], "s", vec![])
        .ints("i", &[], &[4])
        .op("Gather", &["s", "i"], "d", vec![]);
    match g.load(&["d"]).unwrap_err() {
        OnnxError::Shape { node, op, msg } => {
            assert_eq!((node.as_str(), op.as_str()), ("/d/Gather", "Gather"));
            assert!(msg.contains("index 4 out of range"), "{msg}");
        }
        other => panic!("{other}"),
    }
}
