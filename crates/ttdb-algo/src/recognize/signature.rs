//! Workload signatures of recognized workloads. Everything era-specific (stage names,
//! placeholder names, key argument order) is left out: a signature is built from the
//! spec's attributes and the inputs in canonical order (anchor inputs, then epilogue
//! operands in the order the chain applies them), so a residual-first key and a
//! residual-last key of the same kernel, or the same conv tuned by TVM 0.7 and 0.15, get
//! the same sha256.
use crate::ir::DType;
use crate::ops::{EpilogueOp, WorkloadSpec};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use ttdb_format::signature::WorkloadSignature;

pub fn spec_signature(
    spec: &WorkloadSpec,
    canonical: &[Vec<i64>],
    output: &[i64],
) -> WorkloadSignature {
    let mut attrs = spec.anchor.attrs(canonical);
    let mut scalars = Vec::new();
    for op in &spec.epilogue {
        match op {
            EpilogueOp::Clip { lo, hi } => {
                attrs.insert("clip".into(), json!([lo, hi]));
            }
            // the constants are the kernel's: `x / 2` and `x / 6` are different kernels
            EpilogueOp::Scalar { value, .. } => scalars.push(json!(value)),
            _ => {}
        }
    }
    if !scalars.is_empty() {
        attrs.insert("scalars".into(), Value::Array(scalars));
    }
    // `mean(x^2)` and `mean(x^3)` are different kernels too
    let prologue: Vec<Value> = spec
        .prologue
        .iter()
        .filter_map(|op| match op {
            EpilogueOp::Scalar { value, .. } => Some(json!(value)),
            _ => None,
        })
        .collect();
    if !prologue.is_empty() {
        attrs.insert("prologue_scalars".into(), Value::Array(prologue));
    }
    // A lower-rank epilogue operand (a 1-D bias via expand_dims, or a right-aligned
    // broadcast) is the same data as its rank-padded form: `[768]` and `[1, 768]` biases
    // of one dense kernel must give one signature.
    let k = spec.anchor.num_inputs();
    let inputs = canonical
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if i >= k && s.len() < output.len() {
                [vec![1; output.len() - s.len()], s.clone()].concat()
            } else {
                s.clone()
            }
        })
        .collect();
    WorkloadSignature {
        op_class: spec.op_class(),
        attrs,
        inputs,
        output: output.to_vec(),
        dtype: spec.dtype.to_string(),
        layout: spec.anchor.layout(&canonical[0]),
    }
}

/// Signature of a registered workload.
pub fn registered_signature(
    op_class: &str,
    attrs: BTreeMap<String, serde_json::Value>,
    inputs: Vec<Vec<i64>>,
    output: Vec<i64>,
    dtype: DType,
    layout: &str,
) -> WorkloadSignature {
    WorkloadSignature {
        op_class: op_class.into(),
        attrs,
        inputs,
        output,
        dtype: dtype.to_string(),
        layout: layout.into(),
    }
}

/// The signature of a workload key and which producer made it: `md5`, `registered`,
/// `structural` (see `crate::recognize`), or `unknown` when no DAG fits (the signature then
/// carries the key's hash and the reason, so distinct unknown keys stay distinct).
pub fn signature_for(key: &ttdb_format::ansor::WorkloadKey) -> (WorkloadSignature, &'static str) {
    match super::recognize_signature(key) {
        Ok(found) => found,
        Err(e) => (unknown_signature(key, &e.to_string()), "unknown"),
    }
}

/// The signature of a key no DAG is known for: class `unknown`, the key and `reason` as
/// attributes (so distinct unknown keys stay distinct), the key's shapes as inputs.
pub fn unknown_signature(key: &ttdb_format::ansor::WorkloadKey, reason: &str) -> WorkloadSignature {
    let mut attrs = BTreeMap::new();
    attrs.insert("key".to_string(), Value::from(key.raw.as_str()));
    attrs.insert("reason".to_string(), Value::from(reason));
    WorkloadSignature {
        op_class: "unknown".into(),
        attrs,
        inputs: key.nested_shapes().unwrap_or_default(),
        output: vec![],
        dtype: String::new(),
        layout: String::new(),
    }
}
