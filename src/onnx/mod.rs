//! ONNX frontend: from an `.onnx` file to the fused kernels TVM Relay would extract on x86.
pub mod error;
pub mod graph;
pub mod load;
pub mod proto;
pub mod shape;

pub use error::OnnxError;
pub use graph::{Graph, Node, TensorInfo};
pub use load::{load, load_bytes, InputShape};
