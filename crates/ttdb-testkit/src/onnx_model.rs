//! A small ONNX model writer (prost encode), used to generate ttdb's own test fixtures
//! (`fixtures/models/*.onnx`, see [`fixture_models`]). Weights are written like the
//! torchvision exports in the corpus: dims only, data in an external file that is never
//! shipped (the loader must not need it).
use prost::Message;
use ttdb_onnx::onnx::proto;

/// A graph input dim: fixed or symbolic.
#[derive(Clone, Debug)]
pub enum Dim {
    Fixed(i64),
    Param(&'static str),
}

pub struct ModelBuilder {
    graph: proto::GraphProto,
    opset: i64,
}

pub fn attr_int(name: &str, v: i64) -> proto::AttributeProto {
    proto::AttributeProto {
        name: name.into(),
        r#type: proto::attribute_proto::AttributeType::Int as i32,
        i: v,
        ..Default::default()
    }
}

pub fn attr_ints(name: &str, v: &[i64]) -> proto::AttributeProto {
    proto::AttributeProto {
        name: name.into(),
        r#type: proto::attribute_proto::AttributeType::Ints as i32,
        ints: v.to_vec(),
        ..Default::default()
    }
}

pub fn attr_float(name: &str, v: f32) -> proto::AttributeProto {
    proto::AttributeProto {
        name: name.into(),
        r#type: proto::attribute_proto::AttributeType::Float as i32,
        f: v,
        ..Default::default()
    }
}

pub fn attr_str(name: &str, v: &str) -> proto::AttributeProto {
    proto::AttributeProto {
        name: name.into(),
        r#type: proto::attribute_proto::AttributeType::String as i32,
        s: v.as_bytes().to_vec(),
        ..Default::default()
    }
}

pub fn attr_graph(name: &str, g: proto::GraphProto) -> proto::AttributeProto {
    proto::AttributeProto {
        name: name.into(),
        r#type: proto::attribute_proto::AttributeType::Graph as i32,
        g: Some(g),
        ..Default::default()
    }
}

pub fn attr_tensor(name: &str, t: proto::TensorProto) -> proto::AttributeProto {
    proto::AttributeProto {
        name: name.into(),
        r#type: proto::attribute_proto::AttributeType::Tensor as i32,
        t: Some(t),
        ..Default::default()
    }
}

/// A float scalar tensor with inline data.
pub fn float_scalar(v: f32) -> proto::TensorProto {
    proto::TensorProto {
        data_type: 1,
        float_data: vec![v],
        ..Default::default()
    }
}

fn value_info(name: &str, dims: &[Dim]) -> proto::ValueInfoProto {
    use proto::tensor_shape_proto::dimension::Value as D;
    let shape = proto::TensorShapeProto {
        dim: dims
            .iter()
            .map(|d| proto::tensor_shape_proto::Dimension {
                value: Some(match d {
                    Dim::Fixed(k) => D::DimValue(*k),
                    Dim::Param(p) => D::DimParam((*p).into()),
                }),
                denotation: String::new(),
            })
            .collect(),
    };
    proto::ValueInfoProto {
        name: name.into(),
        r#type: Some(proto::TypeProto {
            value: Some(proto::type_proto::Value::TensorType(
                proto::type_proto::Tensor {
                    elem_type: 1,
                    shape: Some(shape),
                },
            )),
            denotation: String::new(),
        }),
        ..Default::default()
    }
}

impl ModelBuilder {
    pub fn new(name: &str, opset: i64) -> ModelBuilder {
        ModelBuilder {
            graph: proto::GraphProto {
                name: name.into(),
                ..Default::default()
            },
            opset,
        }
    }

    pub fn input(&mut self, name: &str, dims: &[i64]) -> &mut Self {
        let d: Vec<Dim> = dims.iter().map(|&k| Dim::Fixed(k)).collect();
        self.input_dims(name, &d)
    }

    pub fn input_dims(&mut self, name: &str, dims: &[Dim]) -> &mut Self {
        self.graph.input.push(value_info(name, dims));
        self
    }

    /// A float initializer with its data in a (never shipped) external file.
    pub fn weight(&mut self, name: &str, dims: &[i64]) -> &mut Self {
        self.graph.initializer.push(proto::TensorProto {
            name: name.into(),
            dims: dims.to_vec(),
            data_type: 1,
            data_location: proto::tensor_proto::DataLocation::External as i32,
            external_data: vec![
                proto::StringStringEntryProto {
                    key: "location".into(),
                    value: format!("{}.onnx.data", self.graph.name),
                },
                proto::StringStringEntryProto {
                    key: "offset".into(),
                    value: "0".into(),
                },
            ],
            ..Default::default()
        });
        self
    }

    /// An int64 initializer with inline data.
    pub fn int64s(&mut self, name: &str, values: &[i64]) -> &mut Self {
        self.graph.initializer.push(proto::TensorProto {
            name: name.into(),
            dims: vec![values.len() as i64],
            data_type: 7,
            int64_data: values.to_vec(),
            ..Default::default()
        });
        self
    }

    pub fn node(
        &mut self,
        op: &str,
        name: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<proto::AttributeProto>,
    ) -> &mut Self {
        self.graph.node.push(proto::NodeProto {
            op_type: op.into(),
            name: name.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs,
            ..Default::default()
        });
        self
    }

    pub fn output(&mut self, name: &str) -> &mut Self {
        self.graph.output.push(proto::ValueInfoProto {
            name: name.into(),
            ..Default::default()
        });
        self
    }

    pub fn graph(&self) -> proto::GraphProto {
        self.graph.clone()
    }

    pub fn model(&self) -> proto::ModelProto {
        proto::ModelProto {
            ir_version: 7,
            producer_name: "ttdb".into(),
            producer_version: "fixtures".into(),
            opset_import: vec![proto::OperatorSetIdProto {
                domain: String::new(),
                version: self.opset,
            }],
            graph: Some(self.graph.clone()),
            ..Default::default()
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        self.model().encode_to_vec()
    }
}

#[allow(clippy::too_many_arguments)]
fn conv_bn(
    b: &mut ModelBuilder,
    name: &str,
    x: &str,
    cin: i64,
    cout: i64,
    k: i64,
    stride: i64,
    group: i64,
) -> String {
    let pad = k / 2;
    b.weight(&format!("{name}.weight"), &[cout, cin / group, k, k]);
    for p in ["bn_scale", "bn_bias", "bn_mean", "bn_var"] {
        b.weight(&format!("{name}.{p}"), &[cout]);
    }
    let c = format!("{name}_conv");
    let wname = format!("{name}.weight");
    b.node(
        "Conv",
        &format!("/{name}/Conv"),
        &[x, &wname],
        &[&c],
        vec![
            attr_ints("kernel_shape", &[k, k]),
            attr_ints("pads", &[pad; 4]),
            attr_ints("strides", &[stride, stride]),
            attr_int("group", group),
        ],
    );
    let y = format!("{name}_bn");
    let ins: Vec<String> = ["bn_scale", "bn_bias", "bn_mean", "bn_var"]
        .iter()
        .map(|p| format!("{name}.{p}"))
        .collect();
    b.node(
        "BatchNormalization",
        &format!("/{name}/BatchNormalization"),
        &[&c, &ins[0], &ins[1], &ins[2], &ins[3]],
        &[&y],
        vec![attr_float("epsilon", 1e-5)],
    );
    y
}

/// A grouped 3x3 conv (padding 1) + bias + relu on a `[1, channels, hw, hw]` input, with
/// `groups` groups: the encoded model.
pub fn grouped_conv_relu(name: &str, channels: i64, hw: i64, groups: i64) -> Vec<u8> {
    let mut b = ModelBuilder::new(name, 14);
    b.input("input", &[1, channels, hw, hw]);
    b.weight("w", &[channels, channels / groups, 3, 3])
        .weight("bias", &[channels]);
    b.node(
        "Conv",
        "/g/Conv",
        &["input", "w", "bias"],
        &["conv"],
        vec![
            attr_ints("kernel_shape", &[3, 3]),
            attr_ints("pads", &[1; 4]),
            attr_int("group", groups),
        ],
    );
    b.node("Relu", "/g/Relu", &["conv"], &["out"], vec![]);
    b.output("out");
    b.encode()
}

/// ttdb's own ONNX fixtures: (file name, bytes). Deterministic.
pub fn fixture_models() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();

    // A resnet basic block: conv-bn-relu, conv-bn, residual add (x second), relu, then the head.
    let mut b = ModelBuilder::new("tiny_resnet", 14);
    b.input("input", &[1, 16, 14, 14]);
    let y1 = conv_bn(&mut b, "layer1.conv1", "input", 16, 16, 3, 1, 1);
    b.node("Relu", "/layer1/relu1", &[&y1], &["r1"], vec![]);
    let y2 = conv_bn(&mut b, "layer1.conv2", "r1", 16, 16, 3, 1, 1);
    b.node("Add", "/layer1/Add", &[&y2, "input"], &["sum"], vec![]);
    b.node("Relu", "/layer1/relu2", &["sum"], &["r2"], vec![]);
    b.node(
        "GlobalAveragePool",
        "/avgpool/GlobalAveragePool",
        &["r2"],
        &["gap"],
        vec![],
    );
    b.node(
        "Flatten",
        "/Flatten",
        &["gap"],
        &["flat"],
        vec![attr_int("axis", 1)],
    );
    b.weight("fc.weight", &[10, 16]).weight("fc.bias", &[10]);
    b.node(
        "Gemm",
        "/fc/Gemm",
        &["flat", "fc.weight", "fc.bias"],
        &["logits"],
        vec![attr_int("transB", 1)],
    );
    b.node(
        "Softmax",
        "/Softmax",
        &["logits"],
        &["prob"],
        vec![attr_int("axis", -1)],
    );
    b.output("prob");
    out.push(("tiny_resnet.onnx", b.encode()));

    // A mobilenet_v2 inverted residual: expand 1x1 + relu6, depthwise 3x3 + relu6, project
    // 1x1, residual add with x FIRST (`x + conv(x)`), clip bounds as Constant nodes; x comes
    // from a conv stem so that it is already NCHW4c like in the real model.
    let mut b = ModelBuilder::new("tiny_mobilenet", 14);
    b.input("input", &[1, 3, 14, 14]);
    b.node(
        "Constant",
        "/Constant",
        &[],
        &["zero"],
        vec![attr_tensor("value", float_scalar(0.0))],
    );
    b.node(
        "Constant",
        "/Constant_1",
        &[],
        &["six"],
        vec![attr_tensor("value", float_scalar(6.0))],
    );
    let stem = conv_bn(&mut b, "stem", "input", 3, 16, 3, 1, 1);
    b.node(
        "Clip",
        "/stem/Clip",
        &[&stem, "zero", "six"],
        &["x"],
        vec![],
    );
    let e = conv_bn(&mut b, "conv.0", "x", 16, 96, 1, 1, 1);
    b.node(
        "Clip",
        "/conv.0/Clip",
        &[&e, "zero", "six"],
        &["e6"],
        vec![],
    );
    let d = conv_bn(&mut b, "conv.1", "e6", 96, 96, 3, 1, 96);
    b.node(
        "Clip",
        "/conv.1/Clip",
        &[&d, "zero", "six"],
        &["d6"],
        vec![],
    );
    let p = conv_bn(&mut b, "conv.2", "d6", 96, 16, 1, 1, 1);
    b.node("Add", "/Add", &["x", &p], &["out"], vec![]);
    b.output("out");
    out.push(("tiny_mobilenet.onnx", b.encode()));

    // Symbolic batch and spatial dims: needs --input-shape.
    let mut b = ModelBuilder::new("symbolic_input", 13);
    b.input_dims(
        "image",
        &[
            Dim::Param("N"),
            Dim::Fixed(3),
            Dim::Param("H"),
            Dim::Param("W"),
        ],
    );
    b.weight("w", &[8, 3, 3, 3]);
    b.node(
        "Conv",
        "conv",
        &["image", "w"],
        &["y"],
        vec![attr_ints("pads", &[1; 4])],
    );
    b.node("Relu", "relu", &["y"], &["z"], vec![]);
    b.output("z");
    out.push(("symbolic_input.onnx", b.encode()));

    // A conv inside an `If` branch (like silero_vad): unsupported, with a clear message.
    let mut then_b = ModelBuilder::new("then", 15);
    then_b.weight("w_then", &[4, 4, 3, 3]);
    then_b.node("Conv", "conv_in_if", &["x", "w_then"], &["t"], vec![]);
    then_b.output("t");
    let mut else_b = ModelBuilder::new("else", 15);
    else_b.node("Identity", "id_in_if", &["x"], &["e"], vec![]);
    else_b.output("e");
    let mut b = ModelBuilder::new("control_flow", 15);
    b.input("x", &[1, 4, 8, 8]);
    b.int64s("flag", &[1]);
    b.node(
        "Cast",
        "cast",
        &["flag"],
        &["cond"],
        vec![attr_int("to", 9)],
    );
    b.node(
        "If",
        "branch",
        &["cond"],
        &["y"],
        vec![
            attr_graph("then_branch", then_b.graph()),
            attr_graph("else_branch", else_b.graph()),
        ],
    );
    b.output("y");
    out.push(("control_flow.onnx", b.encode()));
    out
}
