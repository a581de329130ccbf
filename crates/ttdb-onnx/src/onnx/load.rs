//! Loading an `.onnx` file into a [`Graph`] with static shapes.
//!
//! * Weights: only dims are read. Initializers whose bytes live in an external file
//!   (`data_location = EXTERNAL`) are fine: the data file is never opened. Weights given as
//!   `Constant` nodes or as `ConstantOfShape(<int64 shape>)` get their shapes from shape
//!   inference like any other tensor.
//! * Graph inputs with symbolic or unknown dims need an override (`name=d0,d1,...`, the CLI's
//!   `--input-shape`); without one the error names the input and the dim.
//! * Decoding never panics: prost rejects malformed bytes, and every number taken from the
//!   file is checked before it is used in arithmetic.
use super::error::{OnnxError, Result};
use super::graph::{dims_ok, dtype, numel, Attr, Data, Graph, Node, TensorInfo, MAX_KEPT_ELEMENTS};
use super::proto;
use super::shape;
use prost::Message;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// A graph input's shape given by the user (`name=1,3,224,224`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputShape {
    pub name: String,
    pub dims: Vec<i64>,
}

impl InputShape {
    pub fn new(name: impl Into<String>, dims: Vec<i64>) -> InputShape {
        InputShape {
            name: name.into(),
            dims,
        }
    }

    /// Parses `name=d0,d1,...` (the name may itself contain `=`; the last one splits).
    pub fn parse(s: &str) -> Result<InputShape> {
        let (name, dims) = s.rsplit_once('=').ok_or_else(|| {
            OnnxError::Override(format!(
                "`{s}`: expected NAME=d0,d1,... (e.g. input=1,3,224,224)"
            ))
        })?;
        if name.is_empty() {
            return Err(OnnxError::Override(format!("`{s}`: empty input name")));
        }
        let dims = if dims.trim().is_empty() {
            Vec::new()
        } else {
            dims.split(',')
                .map(|d| match d.trim().parse::<i64>() {
                    Ok(v) if v > 0 => Ok(v),
                    _ => Err(OnnxError::Override(format!(
                        "`{s}`: dim `{d}` is not a positive integer"
                    ))),
                })
                .collect::<Result<Vec<_>>>()?
        };
        Ok(InputShape {
            name: name.to_string(),
            dims,
        })
    }
}

/// Reads and decodes `path`, then infers all shapes.
pub fn load(path: impl AsRef<Path>, overrides: &[InputShape]) -> Result<Graph> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| OnnxError::Io {
        path: path.display().to_string(),
        msg: e.to_string(),
    })?;
    let mut g = load_bytes(&bytes, overrides).map_err(|e| match e {
        OnnxError::Decode(m) => OnnxError::Decode(format!("{}: {m}", path.display())),
        e => e,
    })?;
    if g.name.is_empty() {
        g.name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    Ok(g)
}

/// Decodes a serialized `ModelProto` and infers all shapes.
pub fn load_bytes(bytes: &[u8], overrides: &[InputShape]) -> Result<Graph> {
    let model = proto::ModelProto::decode(bytes).map_err(|e| OnnxError::Decode(e.to_string()))?;
    from_model(&model, overrides)
}

/// Builds the graph from a decoded model and infers all shapes.
pub fn from_model(model: &proto::ModelProto, overrides: &[InputShape]) -> Result<Graph> {
    let gp = model
        .graph
        .as_ref()
        .ok_or_else(|| OnnxError::Invalid("the model has no graph".into()))?;
    let opset = model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .unwrap_or(1);
    let mut g = Graph {
        name: gp.name.clone(),
        opset,
        producer: format!("{} {}", model.producer_name, model.producer_version)
            .trim()
            .to_string(),
        ..Graph::default()
    };
    for t in &gp.initializer {
        if t.name.is_empty() {
            return Err(OnnxError::Invalid("an initializer has no name".into()));
        }
        g.tensors.insert(
            t.name.clone(),
            tensor_info(t)
                .map_err(|m| OnnxError::Invalid(format!("initializer `{}`: {m}", t.name)))?,
        );
    }
    let initializers: HashSet<&str> = gp.initializer.iter().map(|t| t.name.as_str()).collect();
    let real_inputs: Vec<&proto::ValueInfoProto> = gp
        .input
        .iter()
        .filter(|v| !initializers.contains(v.name.as_str()))
        .collect();
    for o in overrides {
        if !real_inputs.iter().any(|v| v.name == o.name) {
            let names: Vec<&str> = real_inputs.iter().map(|v| v.name.as_str()).collect();
            return Err(OnnxError::Override(format!(
                "the graph has no input `{}` (inputs: {})",
                o.name,
                names.join(", ")
            )));
        }
    }
    for v in real_inputs {
        let (shape, elem) = input_shape(v)?;
        let chosen = overrides.iter().rev().find(|o| o.name == v.name);
        let info = match chosen {
            Some(o) => {
                if !shape.is_empty() && o.dims.len() != shape.len() {
                    return Err(OnnxError::Override(format!(
                        "`{}` has rank {} ({}) but the override gives {} dims",
                        v.name,
                        shape.len(),
                        fmt_dims(&shape),
                        o.dims.len()
                    )));
                }
                for (i, d) in shape.iter().enumerate() {
                    if let Dim::Fixed(k) = d {
                        if *k != o.dims[i] {
                            return Err(OnnxError::Override(format!(
                                "`{}` dim {i} is fixed to {k} in the model, the override says {}",
                                v.name, o.dims[i]
                            )));
                        }
                    }
                }
                o.dims.clone()
            }
            None => shape
                .iter()
                .enumerate()
                .map(|(i, d)| match d {
                    Dim::Fixed(k) => Ok(*k),
                    Dim::Symbolic(s) => Err(OnnxError::SymbolicDim {
                        input: v.name.clone(),
                        index: i,
                        dim: s.clone(),
                        shape: fmt_dims(&shape),
                    }),
                    Dim::Negative(k) => Err(OnnxError::Invalid(format!(
                        "graph input `{}` has dim {i} = {k} in shape {}: a size cannot be negative (to run it anyway, give the shape with --input-shape {}=d0,d1,...)",
                        v.name,
                        fmt_dims(&shape),
                        v.name
                    ))),
                })
                .collect::<Result<Vec<_>>>()?,
        };
        if !dims_ok(&info) {
            let why = format!("`{}`: shape {info:?} has too many elements", v.name);
            // Blame the flag only when it gave the shape.
            return Err(match chosen {
                Some(_) => OnnxError::Override(why),
                None => OnnxError::Invalid(format!("graph input {why} (as the model declares it)")),
            });
        }
        g.tensors
            .insert(v.name.clone(), TensorInfo::new(info, elem));
        g.inputs.push(v.name.clone());
    }
    for (i, n) in gp.node.iter().enumerate() {
        g.nodes.push(node(n, i)?);
    }
    g.outputs = gp.output.iter().map(|o| o.name.clone()).collect();
    shape::infer(&mut g)?;
    Ok(g)
}

#[derive(Clone, Debug, PartialEq)]
enum Dim {
    Fixed(i64),
    /// A named (`dim_param`) or unset dim: its size comes from `--input-shape`.
    Symbolic(String),
    /// A `dim_value` below -1: not a size.
    Negative(i64),
}

fn fmt_dims(shape: &[Dim]) -> String {
    let parts: Vec<String> = shape
        .iter()
        .map(|d| match d {
            Dim::Fixed(k) => k.to_string(),
            Dim::Symbolic(s) => s.clone(),
            Dim::Negative(k) => k.to_string(),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

fn input_shape(v: &proto::ValueInfoProto) -> Result<(Vec<Dim>, i32)> {
    use proto::tensor_shape_proto::dimension::Value as DimValue;
    use proto::type_proto::Value as TypeValue;
    let ty = v.r#type.as_ref().and_then(|t| t.value.as_ref());
    let Some(TypeValue::TensorType(tt)) = ty else {
        return Err(OnnxError::Unsupported {
            node: v.name.clone(),
            op: "graph input".into(),
            reason: "only tensor-typed graph inputs are supported (sequence/map/optional inputs are not)".into(),
        });
    };
    let Some(shape) = tt.shape.as_ref() else {
        return Err(OnnxError::SymbolicDim {
            input: v.name.clone(),
            index: 0,
            dim: "unknown rank".into(),
            shape: "?".into(),
        });
    };
    let dims = shape
        .dim
        .iter()
        .map(|d| match &d.value {
            Some(DimValue::DimValue(k)) if *k > 0 => Dim::Fixed(*k),
            Some(DimValue::DimParam(p)) if !p.is_empty() => Dim::Symbolic(p.clone()),
            // -1 and 0 are how some exporters (Paddle, keras2onnx) write an unknown size;
            // any other negative value is no size at all.
            Some(DimValue::DimValue(k)) if *k < -1 => Dim::Negative(*k),
            Some(DimValue::DimValue(k)) => Dim::Symbolic(format!("{k}")),
            _ => Dim::Symbolic("?".into()),
        })
        .collect();
    Ok((dims, tt.elem_type))
}

fn node(n: &proto::NodeProto, index: usize) -> Result<Node> {
    let name = if n.name.is_empty() {
        format!("{}_{index}", n.op_type)
    } else {
        n.name.clone()
    };
    let mut attrs = BTreeMap::new();
    for a in &n.attribute {
        attrs.insert(
            a.name.clone(),
            attr(a).map_err(|m| {
                OnnxError::Invalid(format!("node `{name}` attribute `{}`: {m}", a.name))
            })?,
        );
    }
    Ok(Node {
        name,
        op_type: n.op_type.clone(),
        domain: n.domain.clone(),
        inputs: n.input.clone(),
        outputs: n.output.clone(),
        attrs,
        folded: Vec::new(),
    })
}

fn attr(a: &proto::AttributeProto) -> std::result::Result<Attr, String> {
    use proto::attribute_proto::AttributeType as T;
    let ty = T::try_from(a.r#type).unwrap_or(T::Undefined);
    Ok(match ty {
        T::Int => Attr::Int(a.i),
        T::Float => Attr::Float(a.f),
        T::Ints => Attr::Ints(a.ints.clone()),
        T::Floats => Attr::Floats(a.floats.clone()),
        T::String => Attr::Str(String::from_utf8_lossy(&a.s).into_owned()),
        T::Strings => Attr::Strs(
            a.strings
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect(),
        ),
        T::Tensor => match &a.t {
            Some(t) => Attr::Tensor(tensor_info(t)?),
            None => return Err("tensor attribute without a tensor".into()),
        },
        T::Graph | T::Graphs => Attr::Graph(subgraph_ops(a)),
        // IR version 1 files may leave `type` unset: guess from the filled field
        T::Undefined => {
            if a.g.is_some() || !a.graphs.is_empty() {
                Attr::Graph(subgraph_ops(a))
            } else if let Some(t) = &a.t {
                Attr::Tensor(tensor_info(t)?)
            } else if !a.ints.is_empty() {
                Attr::Ints(a.ints.clone())
            } else if !a.floats.is_empty() {
                Attr::Floats(a.floats.clone())
            } else if !a.s.is_empty() {
                Attr::Str(String::from_utf8_lossy(&a.s).into_owned())
            } else if a.f != 0.0 {
                Attr::Float(a.f)
            } else {
                Attr::Int(a.i)
            }
        }
        _ => Attr::Other,
    })
}

fn subgraph_ops(a: &proto::AttributeProto) -> Vec<String> {
    fn walk(g: &proto::GraphProto, out: &mut Vec<String>, depth: usize) {
        for n in &g.node {
            out.push(n.op_type.clone());
            if depth < 16 {
                for a in &n.attribute {
                    for sub in a.g.iter().chain(&a.graphs) {
                        walk(sub, out, depth + 1);
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    for g in a.g.iter().chain(&a.graphs) {
        walk(g, &mut out, 0);
    }
    out
}

/// Dims, dtype and (for small tensors with inline data) values of a `TensorProto`.
pub fn tensor_info(t: &proto::TensorProto) -> std::result::Result<TensorInfo, String> {
    if let Some(d) = t.dims.iter().find(|&&d| d < 0) {
        return Err(format!("negative dim {d}"));
    }
    if !dims_ok(&t.dims) {
        return Err(format!("dims {:?} overflow", t.dims));
    }
    let n = numel(&t.dims).ok_or_else(|| format!("dims {:?} overflow", t.dims))?;
    let external = t.data_location == proto::tensor_proto::DataLocation::External as i32;
    let data = if external || n > MAX_KEPT_ELEMENTS {
        None
    } else {
        inline_data(t, n as usize)
    };
    Ok(TensorInfo::constant(t.dims.clone(), t.data_type, data))
}

fn inline_data(t: &proto::TensorProto, n: usize) -> Option<Data> {
    let raw = &t.raw_data;
    let from_raw = |width: usize| raw.len() == n * width;
    let d = match t.data_type {
        dtype::INT64 if !t.int64_data.is_empty() => Data::Ints(t.int64_data.clone()),
        dtype::INT64 if from_raw(8) => Data::Ints(
            raw.chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
        ),
        dtype::INT32 | 4 | 5 | dtype::INT8 | dtype::UINT8 | dtype::BOOL
            if !t.int32_data.is_empty() =>
        {
            Data::Ints(t.int32_data.iter().map(|&v| v as i64).collect())
        }
        dtype::INT32 if from_raw(4) => Data::Ints(
            raw.chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap_or([0; 4])) as i64)
                .collect(),
        ),
        dtype::INT8 if from_raw(1) => Data::Ints(raw.iter().map(|&b| b as i8 as i64).collect()),
        dtype::UINT8 | dtype::BOOL if from_raw(1) => {
            Data::Ints(raw.iter().map(|&b| b as i64).collect())
        }
        dtype::FLOAT if !t.float_data.is_empty() => {
            Data::Floats(t.float_data.iter().map(|&v| v as f64).collect())
        }
        dtype::FLOAT if from_raw(4) => Data::Floats(
            raw.chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap_or([0; 4])) as f64)
                .collect(),
        ),
        dtype::DOUBLE if !t.double_data.is_empty() => Data::Floats(t.double_data.clone()),
        dtype::DOUBLE if from_raw(8) => Data::Floats(
            raw.chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
        ),
        _ => return None,
    };
    (d.len() == n).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_parsing() {
        assert_eq!(
            InputShape::parse("input=1,3,224,224").unwrap(),
            InputShape::new("input", vec![1, 3, 224, 224])
        );
        assert_eq!(
            InputShape::parse("a=b=1,2").unwrap(),
            InputShape::new("a=b", vec![1, 2])
        );
        assert!(matches!(
            InputShape::parse("input"),
            Err(OnnxError::Override(_))
        ));
        assert!(matches!(
            InputShape::parse("input=1,x"),
            Err(OnnxError::Override(_))
        ));
        assert!(matches!(
            InputShape::parse("input=1,0"),
            Err(OnnxError::Override(_))
        ));
        assert!(matches!(
            InputShape::parse("=1"),
            Err(OnnxError::Override(_))
        ));
    }

    #[test]
    fn garbage_is_a_decode_error() {
        assert!(matches!(
            load_bytes(&[0xff, 0xff, 0xff], &[]),
            Err(OnnxError::Decode(_))
        ));
        assert!(matches!(load_bytes(&[], &[]), Err(OnnxError::Invalid(_))));
    }
}
