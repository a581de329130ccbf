//! ttdb's in-memory view of an ONNX graph: nodes with decoded attributes and, after shape
//! inference, a static shape (and, for small integer/float constants, the values) of every
//! tensor. Weight *data* is never kept: only dims matter for kernel extraction.
use std::collections::{BTreeMap, HashMap};

/// ONNX `TensorProto.DataType` codes used here.
pub mod dtype {
    pub const UNDEFINED: i32 = 0;
    pub const FLOAT: i32 = 1;
    pub const UINT8: i32 = 2;
    pub const INT8: i32 = 3;
    pub const INT32: i32 = 6;
    pub const INT64: i32 = 7;
    pub const BOOL: i32 = 9;
    pub const FLOAT16: i32 = 10;
    pub const DOUBLE: i32 = 11;

    pub fn name(code: i32) -> &'static str {
        match code {
            FLOAT => "float32",
            UINT8 => "uint8",
            INT8 => "int8",
            INT32 => "int32",
            INT64 => "int64",
            BOOL => "bool",
            FLOAT16 => "float16",
            DOUBLE => "float64",
            _ => "unknown",
        }
    }

    pub fn is_integer(code: i32) -> bool {
        matches!(code, UINT8 | INT8 | INT32 | INT64 | BOOL)
            || code == 4
            || code == 5
            || code == 12
            || code == 13
    }
}

/// Known element values of a (small) tensor, row-major.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    Ints(Vec<i64>),
    Floats(Vec<f64>),
}

impl Data {
    pub fn len(&self) -> usize {
        match self {
            Data::Ints(v) => v.len(),
            Data::Floats(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn as_ints(&self) -> Option<Vec<i64>> {
        match self {
            Data::Ints(v) => Some(v.clone()),
            Data::Floats(v) => v
                .iter()
                .map(|&x| (x.fract() == 0.0 && x.abs() < 9.0e15).then_some(x as i64))
                .collect(),
        }
    }

    pub fn as_floats(&self) -> Vec<f64> {
        match self {
            Data::Ints(v) => v.iter().map(|&x| x as f64).collect(),
            Data::Floats(v) => v.clone(),
        }
    }
}

/// Largest tensor whose values are kept (shape arithmetic, clip bounds, pads).
pub const MAX_KEPT_ELEMENTS: i64 = 4096;

/// A tensor's static type, plus values when they are known and small.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub shape: Vec<i64>,
    pub dtype: i32,
    pub data: Option<Data>,
    /// An initializer or the output of constant folding (weights, biases, shape tensors).
    pub constant: bool,
}

impl TensorInfo {
    pub fn new(shape: Vec<i64>, dtype: i32) -> TensorInfo {
        TensorInfo {
            shape,
            dtype,
            data: None,
            constant: false,
        }
    }

    pub fn constant(shape: Vec<i64>, dtype: i32, data: Option<Data>) -> TensorInfo {
        TensorInfo {
            shape,
            dtype,
            data,
            constant: true,
        }
    }

    /// Element count; None on overflow.
    pub fn numel(&self) -> Option<i64> {
        numel(&self.shape)
    }
}

/// Whether a shape is usable: no negative dim, and the product of its non-zero dims fits
/// in an i64 (so any sub-product computed later cannot overflow either).
pub fn dims_ok(shape: &[i64]) -> bool {
    shape
        .iter()
        .try_fold(1i64, |acc, &d| {
            if d < 0 {
                None
            } else {
                acc.checked_mul(d.max(1))
            }
        })
        .is_some()
}

/// Product of dims, None on overflow or a negative dim.
pub fn numel(shape: &[i64]) -> Option<i64> {
    shape.iter().try_fold(
        1i64,
        |acc, &d| if d < 0 { None } else { acc.checked_mul(d) },
    )
}

/// A decoded attribute. Graph-valued attributes (control flow) are kept only by name.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Str(String),
    Strs(Vec<String>),
    Tensor(TensorInfo),
    /// A subgraph (control flow body); the op types of its nodes, nested ones included.
    Graph(Vec<String>),
    Other,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The node's name, or `<op_type>_<index>` when the file leaves it empty.
    pub name: String,
    pub op_type: String,
    pub domain: String,
    /// Input tensor names; `""` is an omitted optional input.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub attrs: BTreeMap<String, Attr>,
    /// Names of ONNX nodes that graph passes folded into this one (e.g. a BatchNormalization
    /// folded into its conv).
    pub folded: Vec<String>,
}

impl Node {
    pub fn input(&self, i: usize) -> Option<&str> {
        self.inputs
            .get(i)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    pub fn int(&self, name: &str) -> Option<i64> {
        match self.attrs.get(name) {
            Some(Attr::Int(v)) => Some(*v),
            _ => None,
        }
    }

    pub fn float(&self, name: &str) -> Option<f32> {
        match self.attrs.get(name) {
            Some(Attr::Float(v)) => Some(*v),
            Some(Attr::Int(v)) => Some(*v as f32),
            _ => None,
        }
    }

    pub fn ints(&self, name: &str) -> Option<&[i64]> {
        match self.attrs.get(name) {
            Some(Attr::Ints(v)) => Some(v),
            _ => None,
        }
    }

    pub fn string(&self, name: &str) -> Option<&str> {
        match self.attrs.get(name) {
            Some(Attr::Str(v)) => Some(v),
            _ => None,
        }
    }

    /// All ONNX node names this node stands for (itself first).
    pub fn covered(&self) -> Vec<String> {
        std::iter::once(self.name.clone())
            .chain(self.folded.iter().cloned())
            .collect()
    }
}

/// A loaded graph: nodes in topological order and every tensor's static type.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub name: String,
    /// Default-domain opset version.
    pub opset: i64,
    pub producer: String,
    /// Graph inputs that are not initializers, with their (overridden) static shapes.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub nodes: Vec<Node>,
    pub tensors: HashMap<String, TensorInfo>,
    /// Tensors that graph passes made from other tensors (a conv's weight and bias with a
    /// BatchNormalization folded in), computed from the weights when the model is run.
    pub recipes: HashMap<String, Recipe>,
}

/// How a tensor made by a graph pass is computed from the model's tensors (by name).
#[derive(Clone, Debug, PartialEq)]
pub enum Recipe {
    /// `weight[o, ...] * scale[o] / sqrt(var[o] + eps)`.
    BnWeight {
        weight: String,
        scale: String,
        var: String,
        eps: f64,
    },
    /// `scale[o] / sqrt(var[o] + eps)` (a BN left unfolded, as SimplifyInference scales).
    BnScale {
        scale: String,
        var: String,
        eps: f64,
    },
    /// `(bias[o] - mean[o]) * scale[o] / sqrt(var[o] + eps) + shift[o]` (bias 0 if none).
    BnBias {
        bias: Option<String>,
        scale: String,
        shift: String,
        mean: String,
        var: String,
        eps: f64,
    },
}

impl Graph {
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.get(name)
    }

    pub fn shape(&self, name: &str) -> Option<&[i64]> {
        self.tensors.get(name).map(|t| t.shape.as_slice())
    }

    /// How many node inputs (plus graph outputs) read each tensor.
    pub fn use_counts(&self) -> HashMap<String, usize> {
        let mut m: HashMap<String, usize> = HashMap::new();
        for n in &self.nodes {
            for i in n.inputs.iter().filter(|s| !s.is_empty()) {
                *m.entry(i.clone()).or_default() += 1;
            }
        }
        for o in &self.outputs {
            *m.entry(o.clone()).or_default() += 1;
        }
        m
    }

    /// Index of the node producing each tensor.
    pub fn producers(&self) -> HashMap<String, usize> {
        let mut m = HashMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for o in n.outputs.iter().filter(|s| !s.is_empty()) {
                m.insert(o.clone(), i);
            }
        }
        m
    }

    /// Op type -> count, sorted by op type.
    pub fn op_histogram(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for n in &self.nodes {
            *m.entry(n.op_type.clone()).or_default() += 1;
        }
        m
    }
}
