//! ttdb ONNX frontend: models to Relay-like fused kernels.
//!
//! One stage of the layer order in `docs/architecture.md`.

pub mod onnx;
