//! `Slice`: its shape rule is shared with the folding of its values
//! ([`consteval::slice`]); Relay's injective `strided_slice`.
use super::{Relay, Simple};
use crate::onnx::error::Result;
use crate::onnx::graph::TensorInfo;
use crate::onnx::shape::{consteval, Ctx};

pub(super) const SLICE: Simple = Simple::new(&["Slice"], infer, Relay::Injective("strided_slice"));

fn infer(ctx: &Ctx) -> Result<Vec<TensorInfo>> {
    Ok(vec![consteval::slice(ctx)?])
}
