//! Ops that mostly compute index tensors inside shape sub-graphs (`Range`, `CumSum`,
//! `GatherElements`, `Scatter*`, `Trilu`, `NonZero`): their shape rules live with the
//! constant folding that computes their values ([`consteval`]); when their inputs are
//! known at load time they fold away, else they stay opaque run-time ops (registry rows).
use crate::onnx::error::Result;
use crate::onnx::graph::TensorInfo;
use crate::onnx::shape::{consteval, Ctx};

pub(super) fn range(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    Ok(vec![consteval::range(ctx)?])
}

pub(super) fn cumsum(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    Ok(vec![consteval::cumsum_shape(ctx)?])
}

pub(super) fn gather_elements(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    Ok(vec![consteval::gather_elements_shape(ctx)?])
}

pub(super) fn nonzero(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    Ok(vec![consteval::nonzero(ctx)?])
}
