//! Errors of the ONNX frontend. Every message names what it is about (file, input, node and
//! op type) so a user can tell what to change: an `--input-shape` override, or that an op is
//! not supported yet.
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnnxError {
    /// The file could not be read.
    Io { path: String, msg: String },
    /// The bytes are not a valid ONNX `ModelProto`.
    Decode(String),
    /// Structurally invalid model (no graph, duplicate names, a value used before it is made ...).
    Invalid(String),
    /// A graph input has a symbolic or unknown dim and no `--input-shape` override was given.
    SymbolicDim {
        input: String,
        index: usize,
        dim: String,
        shape: String,
    },
    /// A bad `name=d0,d1,...` override (syntax, unknown input, rank mismatch).
    Override(String),
    /// A node whose op (or op variant) is not supported.
    Unsupported {
        node: String,
        op: String,
        reason: String,
    },
    /// Shape inference failed on a node (inconsistent shapes or attributes).
    Shape {
        node: String,
        op: String,
        msg: String,
    },
    /// A layout / blocking request that cannot be honoured.
    Layout(String),
    /// An initializer's values cannot be read (external file, size, type, limit).
    Weight { tensor: String, msg: String },
}

impl fmt::Display for OnnxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OnnxError::Io { path, msg } => write!(f, "cannot read {path}: {msg}"),
            OnnxError::Decode(m) => write!(f, "not a valid ONNX model: {m}"),
            OnnxError::Invalid(m) => write!(f, "invalid ONNX graph: {m}"),
            OnnxError::SymbolicDim { input, index, dim, shape } => write!(
                f,
                "graph input `{input}` has symbolic dim {index} (`{dim}`) in shape {shape}: give its shape with \
                 --input-shape {input}=d0,d1,..."
            ),
            OnnxError::Override(m) => write!(f, "bad --input-shape: {m}"),
            OnnxError::Unsupported { node, op, reason } => write!(f, "node `{node}` ({op}) is not supported: {reason}"),
            OnnxError::Shape { node, op, msg } => write!(f, "shape inference failed at node `{node}` ({op}): {msg}"),
            OnnxError::Layout(m) => write!(f, "layout: {m}"),
            OnnxError::Weight { tensor, msg } => write!(f, "weight `{tensor}`: {msg}"),
        }
    }
}

impl std::error::Error for OnnxError {}

pub type Result<T> = std::result::Result<T, OnnxError>;
