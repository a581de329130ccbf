//! Registered-function keys (`["matmul_add", 1024, 1024, 1024, "float32"]`) map by name to
//! the tutorial workloads of `crate::ops::registered`.
use super::signature::registered_signature;
use super::RecognizeError;
use crate::ir::{DType, Dag};
use crate::ops::registered::{conv2d_layer, matmul_add, sparse_dense};
use crate::ops::{Anchor, Era, Window2d};
use serde_json::json;
use std::collections::BTreeMap;
use ttdb_format::ansor::{KeyArg, WorkloadKey};
use ttdb_format::signature::WorkloadSignature;

fn int(key: &WorkloadKey, i: usize) -> Result<i64, RecognizeError> {
    key.args
        .get(i)
        .and_then(KeyArg::as_int)
        .ok_or_else(|| bad(key, &format!("argument {i} must be an int")))
}

/// An int or a pair of ints (`stride=1` or `stride=[1, 1]`).
fn pair(key: &WorkloadKey, i: usize) -> Result<[i64; 2], RecognizeError> {
    match key.args.get(i) {
        Some(KeyArg::Int(v)) => Ok([*v, *v]),
        Some(a) => match a.as_int_list().as_deref() {
            Some([h, w]) => Ok([*h, *w]),
            _ => Err(bad(key, &format!("argument {i} must be an int or a pair"))),
        },
        None => Err(bad(key, &format!("argument {i} is missing"))),
    }
}

fn shape(key: &WorkloadKey, i: usize) -> Result<Vec<i64>, RecognizeError> {
    match key.args.get(i) {
        Some(KeyArg::Tensor { shape, .. }) => Ok(shape.clone()),
        Some(a) => a
            .as_int_list()
            .ok_or_else(|| bad(key, &format!("argument {i} must be a shape"))),
        None => Err(bad(key, &format!("argument {i} is missing"))),
    }
}

fn dtype(key: &WorkloadKey, i: usize) -> Result<DType, RecognizeError> {
    match key.args.get(i) {
        None => Ok(DType::F32),
        Some(KeyArg::Str(s)) => {
            DType::parse(s).ok_or_else(|| bad(key, &format!("unknown dtype {s}")))
        }
        Some(_) => Err(bad(key, &format!("argument {i} must be a dtype string"))),
    }
}

fn bad(key: &WorkloadKey, msg: &str) -> RecognizeError {
    RecognizeError::BadArguments(format!("{}: {msg}", key.head))
}

/// (DAG, era the names follow if they depend on one, signature).
pub fn recognize_registered(
    key: &WorkloadKey,
) -> Result<(Dag, Option<Era>, WorkloadSignature), RecognizeError> {
    let build = |r: Result<Dag, crate::ir::BuildError>| {
        r.map_err(|e| RecognizeError::BadArguments(format!("{}: {e}", key.head)))
    };
    match key.head.as_str() {
        "matmul_add" => {
            let (n, l, m) = (int(key, 0)?, int(key, 1)?, int(key, 2)?);
            let dt = dtype(key, 3)?;
            let dag = build(matmul_add(n, l, m, dt))?;
            let sig = registered_signature(
                "matmul+add",
                BTreeMap::new(),
                vec![vec![n, l], vec![l, m], vec![n, m]],
                vec![n, m],
                dt,
                "NC",
            );
            Ok((dag, None, sig))
        }
        "conv2d_layer" => {
            let (n, h, w, co, ci, kh, kw) = (
                int(key, 0)?,
                int(key, 1)?,
                int(key, 2)?,
                int(key, 3)?,
                int(key, 4)?,
                int(key, 5)?,
                int(key, 6)?,
            );
            let (stride, padding) = (pair(key, 7)?, pair(key, 8)?);
            // the tutorial logs come from TVM 0.7, whose conv2d_nchw op is named `compute`
            let era = Era::V07;
            let dag = build(conv2d_layer(era, n, h, w, co, ci, kh, kw, stride, padding))?;
            let window = Window2d {
                stride,
                padding: [padding[0], padding[1], padding[0], padding[1]],
                dilation: [1, 1],
            };
            let anchor = Anchor::Conv2dNchw { window, groups: 1 };
            let inputs = vec![vec![n, ci, h, w], vec![co, ci, kh, kw], vec![1, co, 1, 1]];
            let out = dag.stage(dag.output()).shape();
            let sig = registered_signature(
                "conv2d_nchw+add+relu",
                anchor.attrs(&inputs),
                inputs,
                out,
                DType::F32,
                "NCHW",
            );
            Ok((dag, Some(era), sig))
        }
        "sparse_dense" => {
            let (m, n, k) = (int(key, 0)?, int(key, 1)?, int(key, 2)?);
            let (wd, wi, wp) = (shape(key, 3)?, shape(key, 4)?, shape(key, 5)?);
            let dt = dtype(key, 6)?;
            let dag = build(sparse_dense(m, n, k, &wd, &wi, &wp, dt))?;
            let mut attrs = BTreeMap::new();
            attrs.insert("block".into(), json!([wd[1], wd[2]]));
            attrs.insert("prologue".into(), json!("relu"));
            let inputs = vec![vec![m, k], wd, wi, wp, vec![m, n]];
            let sig = registered_signature(
                "sparse_dense_bsr+add+relu",
                attrs,
                inputs,
                vec![m, n],
                dt,
                "NC",
            );
            Ok((dag, None, sig))
        }
        other => Err(RecognizeError::UnknownRegistered(other.to_string())),
    }
}
