// Indices are spelled out coordinate by coordinate, zeros and ones included.
#![allow(clippy::identity_op, clippy::erasing_op)]
use super::*;
use crate::onnx::weights::{Origin, Weight};

fn iota(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

fn constant(shape: &[i64]) -> Constant {
    Constant {
        shape: shape.to_vec(),
        values: Values::F32(iota(shape.iter().product::<i64>() as usize)),
    }
}

fn floats(v: &Values) -> &[f32] {
    match v {
        Values::F32(x) => x,
        _ => panic!("floats"),
    }
}

#[test]
fn layouts_round_trip_and_put_each_element_where_its_layout_says() {
    let logical = constant(&[1, 8, 3, 2]);
    for (layout, phys) in [
        (Layout::Nchwc(4), vec![1, 2, 3, 2, 4]),
        (Layout::Nhwc, vec![1, 3, 2, 8]),
        (Layout::Plain, vec![1, 8, 3, 2]),
    ] {
        let laid = from_logical(&logical.values, layout, &phys).unwrap();
        let back = to_logical(
            &Constant {
                shape: phys.clone(),
                values: laid.clone(),
            },
            layout,
        )
        .unwrap();
        assert_eq!(back, logical.values, "{layout:?}");
        if layout == Layout::Nchwc(4) {
            // logical (0, c=5, y=1, x=0) is physical (0, 1, 1, 0, 1)
            let l = ((5 * 3) + 1) * 2;
            let p = (((1 * 3 + 1) * 2) * 4) + 1;
            assert_eq!(floats(&laid)[p], l as f32);
        }
    }
    assert_eq!(
        logical_shape(Layout::Nchwc(4), &[1, 2, 3, 2, 4]),
        [1, 8, 3, 2]
    );
}

#[test]
fn conv_weights_pack_into_each_kernel_layout() {
    // OIHW [8, 4, 3, 3]: element value = its OIHW row-major index
    let w = constant(&[8, 4, 3, 3]);
    let at = |o: usize, i: usize, y: usize, x: usize| (((o * 4 + i) * 3 + y) * 3 + x) as f32;
    let nchwc = pack_conv_weight(
        &w,
        &[8, 4, 3, 3],
        ConvWeightLayout::Nchwc { ic_bn: 2, oc_bn: 4 },
    )
    .unwrap();
    // [O/4, I/2, 3, 3, 2, 4]: (co=1, ci=1, y=2, x=0, bi=1, bo=3) is W[7, 3, 2, 0]
    let p = ((((1 * 2 + 1) * 3 + 2) * 3 + 0) * 2 + 1) * 4 + 3;
    assert_eq!(floats(&nchwc)[p], at(7, 3, 2, 0));
    let hwio = pack_conv_weight(&w, &[8, 4, 3, 3], ConvWeightLayout::Hwio).unwrap();
    // [3, 3, 4, 8]: (y=1, x=2, i=3, o=5)
    assert_eq!(floats(&hwio)[((1 * 3 + 2) * 4 + 3) * 8 + 5], at(5, 3, 1, 2));
    let dw = constant(&[8, 1, 3, 3]);
    let dwc = pack_conv_weight(
        &dw,
        &[8, 1, 3, 3],
        ConvWeightLayout::DepthwiseNchwc { oc_bn: 4 },
    )
    .unwrap();
    // [2, 1, 3, 3, 1, 4]: (co=1, y=0, x=2, bo=2) is W[6, 0, 0, 2]
    assert_eq!(
        floats(&dwc)[((1 * 3 + 0) * 3 + 2) * 4 + 2],
        ((6 * 3) * 3 + 2) as f32
    );
    let wino = pack_conv_weight(&w, &[8, 4, 3, 3], ConvWeightLayout::Winograd).unwrap();
    assert_eq!(wino.len(), 6 * 6 * 8 * 4);
    assert!(pack_conv_weight(&w, &[8, 4, 3], ConvWeightLayout::Oihw).is_err());
}

#[test]
fn transposes_swap_the_last_two_axes_of_each_batch() {
    let t = transpose_last2(&constant(&[2, 2, 3]), &[2, 2, 3]).unwrap();
    assert_eq!(
        floats(&t),
        [0., 3., 1., 4., 2., 5., 6., 9., 7., 10., 8., 11.]
    );
}

fn weight(dims: &[i64], values: Vec<f32>) -> Weight {
    Weight {
        dims: dims.to_vec(),
        dtype: crate::onnx::graph::dtype::FLOAT,
        values: Values::F32(values),
        origin: Origin::Inline,
    }
}

#[test]
fn a_folded_batchnorm_gives_the_weight_and_bias_of_conv_then_bn() {
    let mut g = Graph::default();
    let mut w = Weights::default();
    w.tensors
        .insert("w".into(), weight(&[2, 1, 1, 1], vec![2.0, 3.0]));
    for (n, v) in [
        ("s", [1.0, 2.0]),
        ("b", [0.5, -0.5]),
        ("m", [1.0, 0.0]),
        ("v", [3.0, 0.0]),
    ] {
        w.tensors.insert(n.into(), weight(&[2], v.to_vec()));
    }
    g.recipes.insert(
        "fw".into(),
        Recipe::BnWeight {
            weight: "w".into(),
            scale: "s".into(),
            var: "v".into(),
            eps: 1.0,
        },
    );
    g.recipes.insert(
        "fb".into(),
        Recipe::BnBias {
            bias: None,
            scale: "s".into(),
            shift: "b".into(),
            mean: "m".into(),
            var: "v".into(),
            eps: 1.0,
        },
    );
    g.recipes.insert(
        "inference_scale".into(),
        Recipe::BnScale {
            scale: "s".into(),
            var: "v".into(),
            eps: 1.0,
        },
    );
    let og = OpGraph::default();
    let f = Folder::new(&g, &og, &w);
    // channel 0: factor 1/sqrt(4) = 0.5; channel 1: 2/sqrt(1) = 2
    assert_eq!(f.tensor("fw").unwrap(), Values::F32(vec![1.0, 6.0]));
    assert_eq!(
        f.tensor("inference_scale").unwrap(),
        Values::F32(vec![0.5, 2.0])
    );
    assert_eq!(
        f.tensor("fb").unwrap(),
        Values::F32(vec![(0.0 - 1.0) * 0.5 + 0.5, -0.5])
    );
    let e = f.tensor("nothing").unwrap_err().to_string();
    assert!(e.contains("`nothing`") && e.contains("no values"), "{e}");
}

#[test]
fn derived_constants_chain_through_the_op_graph() {
    let g = Graph::default();
    let mut w = Weights::default();
    w.tensors
        .insert("bias".into(), weight(&[4], vec![1.0, 2.0, 3.0, 4.0]));
    let mut og = OpGraph::default();
    let b = og.add_value("bias".into(), vec![4], true);
    let c = og.add_value("c".into(), vec![], true);
    og.values[c].data = Some(Data::Floats(vec![10.0]));
    let scaled = og.derive_const(b, ConstOp::Scale(c), "bias::scaled".into(), vec![4]);
    let blocked = og.derive_const(scaled, ConstOp::Relayout, "bias::NCHW2c".into(), vec![4]);
    og.values[blocked].layout = Layout::Nchwc(2);
    og.values[blocked].phys = vec![1, 2, 1, 1, 2];
    let mut f = Folder::new(&g, &og, &w);
    let v = f.value(blocked).unwrap();
    assert_eq!(v.shape, [1, 2, 1, 1, 2]);
    assert_eq!(v.values, Values::F32(vec![10.0, 20.0, 30.0, 40.0]));
    let x = og.add_value("x".into(), vec![1], false);
    let mut f = Folder::new(&g, &og, &w);
    assert!(f.value(x).unwrap_err().to_string().contains("run time"));
}

#[test]
fn constant_of_shape_fills_its_shape_with_its_value_within_the_weight_limit() {
    use crate::onnx::graph::{dtype, Attr, Node, TensorInfo};
    let mut g = Graph::default();
    let node = |name: &str, out: &str, value: Option<TensorInfo>| Node {
        name: name.into(),
        op_type: "ConstantOfShape".into(),
        domain: String::new(),
        inputs: vec!["shape".into()],
        outputs: vec![out.into()],
        attrs: value
            .map(|t| ("value".to_string(), Attr::Tensor(t)))
            .into_iter()
            .collect(),
        folded: vec![],
    };
    let one = |dtype: i32, d: Data| TensorInfo::constant(vec![1], dtype, Some(d));
    g.nodes.push(node(
        "fill",
        "w",
        Some(one(dtype::FLOAT, Data::Floats(vec![0.25]))),
    ));
    g.nodes.push(node("zeros", "z", None));
    g.nodes.push(node(
        "ints",
        "i",
        Some(one(dtype::INT64, Data::Ints(vec![7]))),
    ));
    for (name, shape) in [("w", vec![2, 3]), ("z", vec![4]), ("i", vec![2])] {
        g.tensors
            .insert(name.into(), TensorInfo::constant(shape, dtype::FLOAT, None));
    }
    let og = OpGraph::default();
    let w = Weights::default();
    let f = Folder::new(&g, &og, &w);
    assert_eq!(f.tensor("w").unwrap(), Values::F32(vec![0.25; 6]));
    assert_eq!(f.tensor("z").unwrap(), Values::F32(vec![0.0; 4]));
    assert_eq!(f.tensor("i").unwrap(), Values::I64(vec![7, 7]));
    // what the initializers left of the limit: 6 floats fit, the next 4 do not
    let w = Weights {
        unspent_bytes: 24,
        ..Weights::default()
    };
    let f = Folder::new(&g, &og, &w);
    assert!(f.tensor("w").is_ok());
    let e = f.tensor("z").unwrap_err().to_string();
    assert!(e.contains("`z`") && e.contains("weight limit"), "{e}");
}

#[test]
fn expand_and_reshape_of_constants_are_computed_at_load() {
    use crate::onnx::graph::{dtype, Node, TensorInfo};
    let node = |op: &str, inputs: &[&str], out: &str| Node {
        name: format!("/{out}"),
        op_type: op.into(),
        domain: String::new(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![out.into()],
        attrs: Default::default(),
        folded: vec![],
    };
    let mut g = Graph::default();
    g.nodes.push(node("Expand", &["tok", "shape"], "e"));
    g.nodes.push(node("Reshape", &["e", "flat"], "r"));
    g.nodes.push(node("Tile", &["tok", "reps"], "t"));
    for (name, shape) in [
        ("tok", vec![1, 3, 1]),
        ("e", vec![2, 3, 2]),
        ("r", vec![12]),
        ("t", vec![2, 3, 1]),
    ] {
        g.tensors
            .insert(name.into(), TensorInfo::constant(shape, dtype::FLOAT, None));
    }
    let mut w = Weights::default();
    w.tensors
        .insert("tok".into(), weight(&[1, 3, 1], vec![1.0, 2.0, 3.0]));
    let og = OpGraph::default();
    let f = Folder::new(&g, &og, &w);
    let want = vec![1., 1., 2., 2., 3., 3., 1., 1., 2., 2., 3., 3.];
    assert_eq!(f.tensor("e").unwrap(), Values::F32(want.clone()));
    assert_eq!(f.tensor("r").unwrap(), Values::F32(want));
    // an op whose values ttdb does not compute is refused, naming the tensor
    let e = f.tensor("t").unwrap_err().to_string();
    assert!(e.contains("`t`") && e.contains("no values"), "{e}");
}

#[test]
fn gathers_casts_and_masks_of_constants_are_computed_at_load() {
    use crate::onnx::graph::{dtype, Attr, Node, TensorInfo};
    let node = |op: &str, inputs: &[&str], out: &str, attrs: &[(&str, i64)]| Node {
        name: format!("/{out}"),
        op_type: op.into(),
        domain: String::new(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: vec![out.into()],
        attrs: attrs
            .iter()
            .map(|(k, v)| (k.to_string(), Attr::Int(*v)))
            .collect(),
        folded: vec![],
    };
    let int_weight = |dims: &[i64], values: Vec<i64>| Weight {
        dims: dims.to_vec(),
        dtype: dtype::INT64,
        values: Values::I64(values),
        origin: Origin::Inline,
    };
    let mut g = Graph::default();
    g.nodes
        .push(node("Gather", &["emb", "idx"], "rows", &[("axis", 0)]));
    g.nodes.push(node("Cast", &["idx"], "idx_f", &[("to", 1)]));
    g.nodes
        .push(node("LessOrEqual", &["col", "row"], "causal", &[]));
    g.nodes
        .push(node("Where", &["causal", "one", "minus"], "bias", &[]));
    // a hostile Where with two operands
    g.nodes.push(node("Where", &["causal", "one"], "half", &[]));
    for (name, shape, dt) in [
        ("emb", vec![3, 2], dtype::FLOAT),
        ("idx", vec![2], dtype::INT64),
        ("rows", vec![2, 2], dtype::FLOAT),
        ("idx_f", vec![2], dtype::FLOAT),
        ("col", vec![3, 1], dtype::INT64),
        ("row", vec![1, 3], dtype::INT64),
        ("causal", vec![3, 3], dtype::BOOL),
        ("one", vec![1], dtype::FLOAT),
        ("minus", vec![], dtype::FLOAT),
        ("bias", vec![3, 3], dtype::FLOAT),
        ("half", vec![3, 3], dtype::FLOAT),
    ] {
        g.tensors
            .insert(name.into(), TensorInfo::constant(shape, dt, None));
    }
    let mut w = Weights::default();
    w.tensors.insert("emb".into(), weight(&[3, 2], iota(6)));
    w.tensors
        .insert("idx".into(), int_weight(&[2], vec![2, -3]));
    w.tensors
        .insert("col".into(), int_weight(&[3, 1], vec![0, 1, 2]));
    w.tensors
        .insert("row".into(), int_weight(&[1, 3], vec![0, 1, 2]));
    w.tensors.insert("one".into(), weight(&[1], vec![1.0]));
    w.tensors.insert("minus".into(), weight(&[], vec![-1.0]));
    let og = OpGraph::default();
    let f = Folder::new(&g, &og, &w);
    assert_eq!(f.tensor("rows").unwrap(), Values::F32(vec![4., 5., 0., 1.]));
    assert_eq!(f.tensor("idx_f").unwrap(), Values::F32(vec![2., -3.]));
    assert_eq!(
        f.tensor("causal").unwrap(),
        Values::I64(vec![1, 1, 1, 0, 1, 1, 0, 0, 1])
    );
    assert_eq!(
        f.tensor("bias").unwrap(),
        Values::F32(vec![1., 1., 1., -1., 1., 1., -1., -1., 1.])
    );
    let e = f.tensor("half").unwrap_err().to_string();
    assert!(e.contains("2 inputs, Where takes 3"), "{e}");
}
