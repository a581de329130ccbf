//! Normalized workload signatures.
//!
//! A signature identifies *what a kernel computes*, independently of the TVM version that
//! tuned it: TOPI stage names, placeholder names (`placeholder` vs `p0`) and the order of
//! arguments in the workload key (residual-first adds) do not enter it. It is a sha256 over
//! the canonical JSON of [`WorkloadSignature`] (sorted object keys, no whitespace).
//!
//! DAG recognition (`ttdb_algo::recognize::signature_for`) produces it: by md5 match of ttdb's own
//! PrintDAG text, by registered-function name, or structurally from the key's shapes as a
//! fallback. This module is a leaf: it knows the type and its hash, not who computes it. The
//! database stores the signature with its `SIGNATURE_VERSION` and `recognized_by`, so a better
//! producer recomputes `workloads.signature` in place without a schema change
//! (`store::resign_outdated`).
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Bumped whenever the canonical form or its producer changes; stored signatures of older
/// versions are recomputed on open. v1: shape/step heuristics; v2: DAG recognition.
pub const SIGNATURE_VERSION: u32 = 2;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSignature {
    /// Anchor op then fused epilogue ops, joined by `+`: `conv2d_nchwc+add+relu`,
    /// `dense+add`, `batch_matmul`, `softmax`, `pool_max+add+relu`. `unknown` if not classified.
    pub op_class: String,
    /// Op attributes where derivable: `stride`, `padding` ([top, left, bottom, right]),
    /// `dilation`, `groups`, `kernel` ([kh, kw]), `pool` window, `axis`, ...
    pub attrs: BTreeMap<String, Value>,
    /// Input shapes in canonical order: anchor inputs (data, weight) first, then epilogue
    /// operands in the order the epilogue applies them.
    pub inputs: Vec<Vec<i64>>,
    /// Output shape.
    pub output: Vec<i64>,
    pub dtype: String,
    /// Data layout in TVM's notation: `NHWC`, `NCHW`, `NCHW8c`, `NC` (dense), `BNK` ...
    pub layout: String,
}

impl WorkloadSignature {
    /// Canonical JSON: the same struct always gives the same bytes.
    pub fn canonical_json(&self) -> String {
        // serde_json's Map is a BTreeMap without the preserve_order feature: keys are sorted.
        let v = serde_json::to_value(self).expect("signature serializes");
        serde_json::to_string(&v).expect("signature serializes")
    }

    pub fn sha256_hex(&self) -> String {
        hex(&Sha256::digest(self.canonical_json().as_bytes()))
    }

    pub fn is_unknown(&self) -> bool {
        self.op_class == "unknown"
    }
}

/// Lower-case hex of a byte string.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_and_hash_is_stable() {
        let mut attrs = BTreeMap::new();
        attrs.insert("stride".to_string(), serde_json::json!([2, 2]));
        attrs.insert("padding".to_string(), serde_json::json!([1, 1, 1, 1]));
        let s = WorkloadSignature {
            op_class: "conv2d_nhwc+add+relu".into(),
            attrs,
            inputs: vec![vec![1, 56, 56, 64], vec![3, 3, 64, 64], vec![1, 1, 1, 64]],
            output: vec![1, 28, 28, 64],
            dtype: "float32".into(),
            layout: "NHWC".into(),
        };
        let j = s.canonical_json();
        assert!(
            j.starts_with(
                r#"{"attrs":{"padding":[1,1,1,1],"stride":[2,2]},"dtype":"float32","inputs""#
            ),
            "{j}"
        );
        assert_eq!(s.sha256_hex().len(), 64);
        assert_eq!(s.sha256_hex(), s.clone().sha256_hex());
    }
}
