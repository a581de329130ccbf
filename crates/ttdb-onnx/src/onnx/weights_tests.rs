use super::*;
use crate::onnx::proto::{
    tensor_proto::DataLocation, GraphProto, ModelProto, NodeProto, StringStringEntryProto,
    TensorProto,
};

fn float_tensor(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: dtype::FLOAT,
        raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ..Default::default()
    }
}

fn external(name: &str, dims: &[i64], data_type: i32, entries: &[(&str, &str)]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type,
        data_location: DataLocation::External as i32,
        external_data: entries
            .iter()
            .map(|(k, v)| StringStringEntryProto {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

fn model(inits: Vec<TensorProto>, nodes: Vec<NodeProto>) -> ModelProto {
    ModelProto {
        graph: Some(GraphProto {
            initializer: inits,
            node: nodes,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec!["y".into()],
        ..Default::default()
    }
}

fn err(m: &ModelProto, dir: Option<&Path>) -> String {
    read_weights(m, dir, &WeightLimits::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn inline_raw_and_typed_values_are_read() {
    let mut ints = TensorProto {
        name: "shape".into(),
        dims: vec![2],
        data_type: dtype::INT64,
        int64_data: vec![1, -1],
        ..Default::default()
    };
    let typed = TensorProto {
        name: "typed".into(),
        dims: vec![3],
        data_type: dtype::FLOAT,
        float_data: vec![1.0, 2.0, 3.0],
        ..Default::default()
    };
    let m = model(
        vec![
            float_tensor("w", &[2, 2], &[1.5, -2.0, 0.0, 4.0]),
            ints.clone(),
            typed,
        ],
        vec![],
    );
    let w = read_weights(&m, None, &WeightLimits::default()).unwrap();
    assert_eq!(
        w.tensors["w"].values,
        Values::F32(vec![1.5, -2.0, 0.0, 4.0])
    );
    assert_eq!(w.tensors["w"].origin, Origin::Inline);
    assert_eq!(w.tensors["shape"].values, Values::I64(vec![1, -1]));
    assert_eq!(w.tensors["typed"].values, Values::F32(vec![1.0, 2.0, 3.0]));
    assert_eq!(w.filled().0, 0);
    ints.int64_data.push(7);
    let e = err(&model(vec![ints], vec![]), None);
    assert!(e.contains("`shape`") && e.contains("holds 3 values"), "{e}");
}

#[test]
fn external_data_is_read_at_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = vec![0xAAu8; 8];
    for v in [1.0f32, 2.0, 3.0] {
        bytes.extend(v.to_le_bytes());
    }
    std::fs::write(dir.path().join("m.onnx.data"), &bytes).unwrap();
    let t = external(
        "w",
        &[3],
        dtype::FLOAT,
        &[
            ("location", "m.onnx.data"),
            ("offset", "8"),
            ("length", "12"),
        ],
    );
    let w = read_weights(
        &model(vec![t], vec![]),
        Some(dir.path()),
        &WeightLimits::default(),
    )
    .unwrap();
    assert_eq!(w.tensors["w"].values, Values::F32(vec![1.0, 2.0, 3.0]));
    assert_eq!(
        w.tensors["w"].origin,
        Origin::External("m.onnx.data".into())
    );
}

#[test]
fn a_truncated_or_mismatched_external_file_is_an_error_not_a_fill() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("d.bin"), [0u8; 10]).unwrap();
    let short = external("w", &[3], dtype::FLOAT, &[("location", "d.bin")]);
    let e = err(&model(vec![short], vec![]), Some(dir.path()));
    assert!(e.contains("`w`") && e.contains("truncated"), "{e}");
    let wrong_length = external(
        "w",
        &[2],
        dtype::FLOAT,
        &[("location", "d.bin"), ("length", "9")],
    );
    let e = err(&model(vec![wrong_length], vec![]), Some(dir.path()));
    assert!(e.contains("length 9"), "{e}");
    let huge_offset = external(
        "w",
        &[2],
        dtype::FLOAT,
        &[("location", "d.bin"), ("offset", "18446744073709551615")],
    );
    let e = err(&model(vec![huge_offset], vec![]), Some(dir.path()));
    assert!(e.contains("truncated"), "{e}");
}

#[test]
fn locations_outside_the_model_folder_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for loc in ["../secret", "/etc/passwd", "a/../../b", ""] {
        let t = external("w", &[1], dtype::FLOAT, &[("location", loc)]);
        let e = err(&model(vec![t], vec![]), Some(dir.path()));
        assert!(e.contains("leaves the model's folder"), "{loc}: {e}");
    }
}

#[test]
fn missing_external_files_get_the_deterministic_fill_by_role() {
    let inits = vec![
        external(
            "conv.w",
            &[4, 3, 3, 3],
            dtype::FLOAT,
            &[("location", "gone.data")],
        ),
        external("bn.var", &[4], dtype::FLOAT, &[("location", "gone.data")]),
        external("ids", &[5], dtype::INT64, &[("location", "gone.data")]),
    ];
    let nodes = vec![
        node("Conv", &["x", "conv.w"]),
        node("BatchNormalization", &["y", "s", "b", "m", "bn.var"]),
        node("Gather", &["table", "ids"]),
    ];
    let mut nodes = nodes;
    // an Identity first in node order aliases the BN's scale: its role is the BN's
    nodes.insert(
        0,
        NodeProto {
            op_type: "Identity".into(),
            input: vec!["bn.scale".into()],
            output: vec!["bn.scale_alias".into()],
            ..Default::default()
        },
    );
    nodes.push(node(
        "BatchNormalization",
        &["z", "bn.scale_alias", "b", "m", "v"],
    ));
    let inits = {
        let mut i = inits;
        i.push(external(
            "bn.scale",
            &[4],
            dtype::FLOAT,
            &[("location", "gone.data")],
        ));
        i
    };
    let w = read_weights(&model(inits, nodes), None, &WeightLimits::default()).unwrap();
    assert_eq!(w.filled(), (4, ["gone.data".to_string()].into()));
    assert_eq!(
        w.tensors["bn.scale"].values,
        Values::F32(fill::weight_values(
            "bn.scale",
            &[4],
            Role::BatchNormScaleOrVar
        ))
    );
    assert_eq!(
        w.tensors["conv.w"].values,
        Values::F32(fill::weight_values("conv.w", &[4, 3, 3, 3], Role::Other))
    );
    let Values::F32(var) = &w.tensors["bn.var"].values else {
        panic!()
    };
    assert!(var.iter().all(|&v| v >= 0.5));
    assert_eq!(w.tensors["ids"].values, Values::I64(vec![0; 5]));
}

#[test]
fn the_weight_limit_refuses_before_allocating() {
    let t = external("big", &[1 << 40], dtype::FLOAT, &[("location", "gone")]);
    let e = err(&model(vec![t], vec![]), None);
    assert!(e.contains("`big`") && e.contains("weight limit"), "{e}");
    let t = external("neg", &[-1, 4], dtype::FLOAT, &[("location", "gone")]);
    assert!(err(&model(vec![t], vec![]), None).contains("negative"));
}

#[test]
fn a_model_without_a_graph_or_with_duplicate_names_is_refused() {
    assert!(err(&ModelProto::default(), None).contains("no graph"));
    let m = model(
        vec![
            float_tensor("w", &[1], &[1.0]),
            float_tensor("w", &[1], &[2.0]),
        ],
        vec![],
    );
    assert!(err(&m, None).contains("two initializers"));
}

#[test]
fn a_constant_nodes_tensor_is_a_weight_under_its_output_name_within_the_limit() {
    use crate::onnx::proto::AttributeProto;
    let constant = |out: &str, t: TensorProto| NodeProto {
        op_type: "Constant".into(),
        output: vec![out.into()],
        attribute: vec![AttributeProto {
            name: "value".into(),
            t: Some(t),
            ..Default::default()
        }],
        ..Default::default()
    };
    let w = float_tensor("", &[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let m = model(
        vec![float_tensor("b", &[1], &[0.5])],
        vec![constant("conv_w", w), node("Relu", &["conv_w"])],
    );
    let got = read_weights(&m, None, &WeightLimits::default()).unwrap();
    assert_eq!(
        got.tensors["conv_w"].values,
        Values::F32(vec![1.0, 2.0, 3.0, 4.0])
    );
    assert_eq!(got.tensors["conv_w"].dims, [2, 2]);
    // 4 bytes of the initializer and 16 of the constant are spent
    let limits = WeightLimits {
        max_total_bytes: 24,
    };
    assert_eq!(read_weights(&m, None, &limits).unwrap().unspent_bytes, 4);
    let tight = WeightLimits {
        max_total_bytes: 16,
    };
    let e = read_weights(&m, None, &tight).unwrap_err().to_string();
    assert!(e.contains("conv_w") && e.contains("weight limit"), "{e}");
}
