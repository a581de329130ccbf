//! Structural classification: a workload's signature from the shapes in its key and the
//! structure of its steps, without knowing the DAG. It is the fallback of DAG recognition
//! (`crate::recognize`), which identifies the DAG exactly by md5 of PrintDAG text.
//!
//! What shapes alone tell: the anchor op (conv layouts, depthwise, winograd, dense,
//! batch_matmul, pooling, softmax-like reductions), strides and paddings (smallest symmetric
//! padding that gives the output size), and binary epilogue operands (bias = a broadcast of
//! the output channels, residual = the output shape). What steps tell: a lower bound on the
//! number of stages (from the stage ids they use), hence how many unary epilogue stages
//! (relu, clip, tanh: indistinguishable here, so classed `eltwise`) follow the anchor.
use super::WorkloadSignature;
use crate::ansor::{KeyArg, KeyForm, Step, WorkloadKey};
use serde_json::json;
use std::collections::BTreeMap;

/// What the steps of one record reveal about the initial DAG.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepStructure {
    /// Lower bound on the number of stages of the initial DAG.
    pub min_stages: usize,
    /// Stages that steps attach (CA) to the stage right after them: `(stage, target)`.
    pub attached_to_next: Vec<u32>,
    /// Stages inlined by CI (initial ids).
    pub inlined: Vec<u32>,
}

impl StepStructure {
    pub fn from_steps(steps: &[Step]) -> StepStructure {
        let mut s = StepStructure::default();
        // Stage ids in a step refer to the state after all earlier steps; each CHR/CHW/RF
        // inserted one stage before them. Map ids back to the initial DAG conservatively.
        let mut added = 0u32;
        for step in steps {
            let initial = step.stage_id().saturating_sub(added);
            s.min_stages = s.min_stages.max(initial as usize + 1);
            match step {
                Step::ComputeAt(ca) if added == 0 && ca.target_stage_id == ca.stage_id + 1 => {
                    s.attached_to_next.push(ca.stage_id)
                }
                Step::ComputeInline(ci) if added == 0 => s.inlined.push(ci.stage_id),
                _ => {}
            }
            if step.adds_stage() {
                added += 1;
            }
        }
        s
    }
}

fn unknown(key: &WorkloadKey, shapes: Vec<Vec<i64>>) -> WorkloadSignature {
    let (inputs, output) = split_io(shapes);
    let mut attrs = BTreeMap::new();
    attrs.insert("key_hash".to_string(), json!(key.head));
    WorkloadSignature { op_class: "unknown".into(), attrs, inputs, output, dtype: "float32".into(), layout: String::new() }
}

fn split_io(mut shapes: Vec<Vec<i64>>) -> (Vec<Vec<i64>>, Vec<i64>) {
    let out = shapes.pop().unwrap_or_default();
    (shapes, out)
}

/// Smallest (stride, symmetric padding) such that `out = (inp + 2p - k) / s + 1`.
fn stride_and_pad(inp: i64, k: i64, out: i64) -> Option<(i64, i64)> {
    for s in 1..=k.max(4) {
        for p in 0..k.max(1) {
            if inp + 2 * p >= k && (inp + 2 * p - k) / s + 1 == out {
                return Some((s, p));
            }
        }
    }
    None
}

/// Spatial window attributes of a conv-like op over `(H, W)`.
fn window_attrs(attrs: &mut BTreeMap<String, serde_json::Value>, hw: [i64; 2], k: [i64; 2], out: [i64; 2]) -> Option<()> {
    let (sh, ph) = stride_and_pad(hw[0], k[0], out[0])?;
    let (sw, pw) = stride_and_pad(hw[1], k[1], out[1])?;
    attrs.insert("kernel".into(), json!(k));
    attrs.insert("stride".into(), json!([sh, sw]));
    attrs.insert("padding".into(), json!([ph, pw, ph, pw]));
    attrs.insert("dilation".into(), json!([1, 1]));
    Some(())
}

/// A recognised anchor: its class, layout, canonical inputs, stages in the initial DAG.
struct Anchor {
    class: &'static str,
    layout: String,
    inputs: Vec<Vec<i64>>,
    attrs: BTreeMap<String, serde_json::Value>,
    stages: usize,
}

fn conv_anchor(data: &[i64], w: &[i64], out: &[i64]) -> Option<Anchor> {
    let mut attrs = BTreeMap::new();
    let (class, layout, padded) = match (data.len(), w.len(), out.len()) {
        (4, 4, 4) if data[0] == out[0] => {
            let (hw, ohw) = ([data[1], data[2]], [out[1], out[2]]);
            let even = w[0] == w[1] && w[0] % 2 == 0 && (w[0] == 4 || w[0] == 6 || w[0] == 8);
            if even && w[3] == data[3] && w[2] == out[3] && hw == ohw {
                // Pre-transformed winograd kernel [alpha, alpha, CO, CI] (3x3, stride 1, pad 1).
                attrs.insert("kernel".into(), json!([3, 3]));
                attrs.insert("stride".into(), json!([1, 1]));
                attrs.insert("padding".into(), json!([1, 1, 1, 1]));
                attrs.insert("tile_size".into(), json!(w[0] - 2));
                return Some(Anchor {
                    class: "conv2d_winograd_nhwc",
                    layout: "NHWC".into(),
                    inputs: vec![data.to_vec(), w.to_vec()],
                    attrs,
                    stages: 10,
                });
            }
            window_attrs(&mut attrs, hw, [w[0], w[1]], ohw)?;
            if w[2] == data[3] && w[3] == 1 && out[3] == data[3] && data[3] > 1 {
                attrs.insert("groups".into(), json!(data[3]));
                ("depthwise_conv2d_nhwc", "NHWC".to_string(), true)
            } else if w[2] == data[3] && w[3] == out[3] {
                attrs.insert("groups".into(), json!(1));
                ("conv2d_nhwc", "NHWC".to_string(), true)
            } else {
                return None;
            }
        }
        (5, 6, 5) if data[0] == out[0] && w[0] == out[1] && w[5] == out[4] => {
            window_attrs(&mut attrs, [data[2], data[3]], [w[2], w[3]], [out[2], out[3]])?;
            let padded = attrs["padding"] != json!([0, 0, 0, 0]);
            let channels = data[1] * data[4];
            if w[1] == 1 && w[4] == 1 && w[0] * w[5] == channels && channels > 1 && !(w[1] == data[1] && w[4] == data[4]) {
                attrs.insert("groups".into(), json!(channels));
                ("depthwise_conv2d_nchwc", format!("NCHW{}c", data[4]), padded)
            } else if w[1] == data[1] && w[4] == data[4] {
                attrs.insert("groups".into(), json!(1));
                ("conv2d_nchwc", format!("NCHW{}c", data[4]), padded)
            } else {
                return None;
            }
        }
        _ => return None,
    };
    if class.starts_with("conv2d_nchwc") || class.starts_with("depthwise_conv2d_nchwc") {
        attrs.insert("oc_bn".into(), json!(out[4]));
    }
    Some(Anchor {
        class,
        layout,
        inputs: vec![data.to_vec(), w.to_vec()],
        attrs,
        stages: if padded { 4 } else { 3 },
    })
}

fn matmul_anchor(a: &[i64], b: &[i64], out: &[i64]) -> Option<Anchor> {
    let attrs = BTreeMap::new();
    match (a.len(), b.len(), out.len()) {
        (2, 2, 2) if a[1] == b[1] && out == [a[0], b[0]] => {
            Some(Anchor { class: "dense", layout: "NC".into(), inputs: vec![a.to_vec(), b.to_vec()], attrs, stages: 3 })
        }
        (3, 3, 3) if a[2] == b[2] && out[1..] == [a[1], b[1]] && (b[0] == a[0] || b[0] == 1 || a[0] == 1) => {
            Some(Anchor { class: "batch_matmul", layout: "BNK".into(), inputs: vec![a.to_vec(), b.to_vec()], attrs, stages: 3 })
        }
        _ => None,
    }
}

/// Single-input reductions: pooling (NHWC / NCHW[x]c), softmax, mean, variance.
fn reduce_anchor(ins: &[Vec<i64>], out: &[i64], st: &StepStructure) -> Option<(Anchor, usize)> {
    let data = ins.first()?;
    let mut attrs = BTreeMap::new();
    // mean / variance over the last axis: [.., K] -> [.., 1]
    if data.len() == out.len() && out.last() == Some(&1) && data[..data.len() - 1] == out[..out.len() - 1] && data.last() != Some(&1) {
        attrs.insert("axis".into(), json!(-1));
        if ins.len() >= 2 && ins[1] == out {
            return Some((Anchor { class: "variance", layout: String::new(), inputs: ins[..2].to_vec(), attrs, stages: 6 }, 2));
        }
        return Some((Anchor { class: "mean", layout: String::new(), inputs: vec![data.clone()], attrs, stages: 3 }, 1));
    }
    let (layout, hw_axes, c_axes): (String, [usize; 2], Vec<usize>) = match data.len() {
        4 if data[3] == out.get(3).copied().unwrap_or(-1) && data[1] >= out[1] => ("NHWC".into(), [1, 2], vec![3]),
        5 if data[1] == out[1] && data[4] == out[4] => (format!("NCHW{}c", data[4]), [2, 3], vec![1, 4]),
        _ => (String::new(), [0, 0], vec![]),
    };
    let same_shape = data.as_slice() == out;
    if !c_axes.is_empty() && out.len() == data.len() && !(same_shape && st.min_stages >= 5) {
        let (hw, ohw) = ([data[hw_axes[0]], data[hw_axes[1]]], [out[hw_axes[0]], out[hw_axes[1]]]);
        if ohw[0] > hw[0] || ohw[1] > hw[1] {
            return None;
        }
        if ohw == [1, 1] && hw != [1, 1] || (hw[0] % ohw[0] != 0 && st.min_stages <= 3 && st.attached_to_next.contains(&1)) {
            attrs.insert("output_size".into(), json!(ohw));
            return Some((Anchor { class: "adaptive_pool_avg", layout, inputs: vec![data.clone()], attrs, stages: 3 }, 1));
        }
        attrs.insert("stride".into(), json!([hw[0] / ohw[0].max(1), hw[1] / ohw[1].max(1)]));
        // Average pooling attaches pool_sum to pool_avg (the next stage); max pooling has one
        // compute stage after the (inlined) pad.
        let avg = st.attached_to_next.iter().any(|&s| s >= 1);
        let padded = st.inlined.contains(&1) || st.attached_to_next.contains(&2);
        let stages = 2 + padded as usize + avg as usize;
        let class = if avg { "pool_avg" } else { "pool_max" };
        return Some((Anchor { class, layout, inputs: vec![data.clone()], attrs, stages }, 1));
    }
    if same_shape && (2..=4).contains(&data.len()) {
        attrs.insert("axis".into(), json!(-1));
        return Some((Anchor { class: "softmax", layout: String::new(), inputs: vec![data.clone()], attrs, stages: 5 }, 1));
    }
    None
}

/// Is `operand` a broadcast of the output along its channel axes (a bias)?
fn is_bias(operand: &[i64], out: &[i64]) -> bool {
    let n: i64 = operand.iter().product();
    let channels = match out.len() {
        5 => out[1] * out[4],
        _ => *out.last().unwrap_or(&0),
    };
    operand != out && n == channels && operand.len() <= out.len()
}

/// The binary epilogue operands, in application order, and the extra stages they add.
fn epilogue(extra: &[Vec<i64>], out: &[i64]) -> Option<(Vec<&'static str>, usize)> {
    let mut ops = Vec::new();
    let mut stages = 0;
    for e in extra {
        if e.as_slice() == out {
            ops.push("add");
            stages += 2;
        } else if is_bias(e, out) {
            ops.push("add");
            // A lower-rank bias goes through T_expand_dims first.
            stages += if e.len() < out.len() { 3 } else { 2 };
        } else {
            return None;
        }
    }
    Some((ops, stages))
}

fn finish(anchor: Anchor, extra: Vec<Vec<i64>>, out: Vec<i64>, st: &StepStructure) -> Option<WorkloadSignature> {
    let (binary, epi_stages) = epilogue(&extra, &out)?;
    let unary = st.min_stages.saturating_sub(anchor.stages + epi_stages);
    let mut class = anchor.class.to_string();
    for op in binary {
        class.push('+');
        class.push_str(op);
    }
    for _ in 0..unary {
        class.push_str("+eltwise");
    }
    let mut inputs = anchor.inputs;
    inputs.extend(extra);
    Some(WorkloadSignature { op_class: class, attrs: anchor.attrs, inputs, output: out, dtype: "float32".into(), layout: anchor.layout })
}

fn classify_shapes(shapes: &[Vec<i64>], st: &StepStructure) -> Option<WorkloadSignature> {
    let (ins, out) = shapes.split_last().map(|(o, i)| (i, o.clone()))?;
    // Binary anchors: (data, weight) adjacent in key order; operands before them (residual-
    // first adds) or after them are epilogue operands, normalized to follow the anchor.
    for i in 0..ins.len().saturating_sub(1) {
        let (a, b) = (&ins[i], &ins[i + 1]);
        if let Some(anchor) = conv_anchor(a, b, &out).or_else(|| matmul_anchor(a, b, &out)) {
            let extra: Vec<_> = ins[i + 2..].iter().chain(&ins[..i]).cloned().collect();
            if let Some(sig) = finish(anchor, extra, out.clone(), st) {
                return Some(sig);
            }
        }
    }
    let (anchor, used) = reduce_anchor(ins, &out, st)?;
    finish(anchor, ins[used..].to_vec(), out, st)
}

fn classify_registered(key: &WorkloadKey) -> Option<WorkloadSignature> {
    let ints: Vec<i64> = key.args.iter().filter_map(KeyArg::as_int).collect();
    let dtype = key
        .args
        .iter()
        .rev()
        .find_map(|a| if let KeyArg::Str(s) = a { Some(s.clone()) } else { None })
        .unwrap_or_else(|| "float32".into());
    let mut attrs = BTreeMap::new();
    let (class, inputs, output, layout) = match key.head.as_str() {
        // gallery tutorial: out = matmul(A[N,L], B[L,M]) + C[N,M]
        "matmul_add" if ints.len() >= 3 => {
            let (n, l, m) = (ints[0], ints[1], ints[2]);
            ("matmul+add", vec![vec![n, l], vec![l, m], vec![n, m]], vec![n, m], "NC")
        }
        // gallery tutorial: relu(conv2d_nchw(data, kernel, stride, padding) + bias)
        "conv2d_layer" if ints.len() >= 7 => {
            let (n, h, w, co, ci, kh, kw) = (ints[0], ints[1], ints[2], ints[3], ints[4], ints[5], ints[6]);
            let pair = |i: usize| key.args.get(i).and_then(KeyArg::as_int_list).filter(|v| v.len() == 2);
            let (s, p) = (pair(7)?, pair(8)?);
            let oh = (h + 2 * p[0] - kh) / s[0] + 1;
            let ow = (w + 2 * p[1] - kw) / s[1] + 1;
            attrs.insert("kernel".into(), json!([kh, kw]));
            attrs.insert("stride".into(), json!(s));
            attrs.insert("padding".into(), json!([p[0], p[1], p[0], p[1]]));
            attrs.insert("dilation".into(), json!([1, 1]));
            attrs.insert("groups".into(), json!(1));
            let out = vec![n, co, oh, ow];
            ("conv2d_nchw+add+relu", vec![vec![n, ci, h, w], vec![co, ci, kh, kw], vec![1, co, 1, 1]], out, "NCHW")
        }
        // gallery tutorial: relu(sparse_dense(relu(X), BSR W) + bias)
        "sparse_dense" if ints.len() >= 3 => {
            let (m, n, k) = (ints[0], ints[1], ints[2]);
            let lists: Vec<Vec<i64>> = key.args.iter().filter_map(KeyArg::as_int_list).collect();
            attrs.insert("bsr".into(), json!(lists));
            let mut inputs = vec![vec![m, k]];
            inputs.extend(lists);
            inputs.push(vec![m, n]);
            ("sparse_dense+add+relu", inputs, vec![m, n], "NC")
        }
        _ => return None,
    };
    Some(WorkloadSignature { op_class: class.into(), attrs, inputs, output, dtype, layout: layout.into() })
}

/// Classifies a workload key, using the step structure of one of its records.
pub fn classify(key: &WorkloadKey, steps: &StepStructure) -> WorkloadSignature {
    let found = match key.form {
        KeyForm::Registered => classify_registered(key),
        KeyForm::Nested => classify_shapes(&key.nested_shapes().unwrap_or_default(), steps),
        // Flat keys lost the shape boundaries: try the ranks TOPI ops use.
        KeyForm::Flat => [4, 5, 2, 3, 6]
            .iter()
            .filter_map(|&r| key.shapes_with_rank(r))
            .find_map(|shapes| classify_shapes(&shapes, steps)),
        KeyForm::HashOnly => None,
    };
    found.unwrap_or_else(|| unknown(key, key.nested_shapes().unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class_of(key: &str, min_stages: usize) -> WorkloadSignature {
        let st = StepStructure { min_stages, ..Default::default() };
        classify(&WorkloadKey::parse(key).unwrap(), &st)
    }

    #[test]
    fn convs_by_layout() {
        let s = class_of(r#"["de7d1695278cf52778b038e6573d7626", 1, 14, 14, 1024, 1, 1, 1024, 512, 1, 1, 1, 512, 1, 7, 7, 512]"#, 7);
        assert_eq!(s.op_class, "conv2d_nhwc+add+eltwise");
        assert_eq!(s.attrs["stride"], json!([2, 2]));
        let s = class_of(r#"["fb532a07f021d1a7f55648384263ba04", [1, 1, 224, 224, 3], [8, 1, 11, 11, 3, 8], [1, 8, 1, 1, 8], [1, 8, 55, 55, 8]]"#, 7);
        assert_eq!(s.op_class, "conv2d_nchwc+add+eltwise");
        assert_eq!(s.layout, "NCHW3c");
        assert_eq!(s.attrs["stride"], json!([4, 4]));
        let s = class_of(r#"["38552500208b25b4035682b0e93cbce3", [1, 13, 13, 192], [6, 6, 384, 192], [1, 1, 1, 384], [1, 13, 13, 384]]"#, 12);
        assert_eq!(s.op_class, "conv2d_winograd_nhwc+add");
        let s = class_of(r#"["374c777cd99c72d8a55bbe0fd7c3a352", [1, 144, 14, 14, 4], [144, 1, 3, 3, 1, 4], [1, 144, 1, 1, 4], [1, 144, 14, 14, 4]]"#, 7);
        assert_eq!(s.op_class, "depthwise_conv2d_nchwc+add+eltwise");
    }

    #[test]
    fn residual_first_normalizes_input_order() {
        let a = class_of(r#"["755a065af6cf521cae90b5edd941bee4", [1, 16, 14, 14, 4], [1, 96, 14, 14, 4], [16, 96, 1, 1, 4, 4], [1, 16, 1, 1, 4], [1, 16, 14, 14, 4]]"#, 0);
        assert_eq!(a.op_class, "conv2d_nchwc+add+add");
        assert_eq!(a.inputs[0], vec![1, 96, 14, 14, 4]);
        assert_eq!(a.inputs[3], vec![1, 16, 14, 14, 4]);
    }

    #[test]
    fn matmuls_and_reductions() {
        assert_eq!(class_of(r#"["218090bc617f9a36fbabdf253ec28064", [14, 3072], [768, 3072], [14, 768]]"#, 3).op_class, "dense");
        assert_eq!(class_of(r#"["39c1c9cb5b1f8a9c3f5c1b049037f0ef", [1, 768], [768, 768], [768], [1, 768]]"#, 7).op_class, "dense+add+eltwise");
        assert_eq!(class_of(r#"["32a5ff201401d5600f77ced9f22defaa", [12, 14, 14], [12, 64, 14], [12, 14, 64]]"#, 3).op_class, "batch_matmul");
        assert_eq!(class_of(r#"["2dde9ffcbf97381c0f0307643e09dac5", [1, 14, 768], [1, 14, 1]]"#, 3).op_class, "mean");
        assert_eq!(class_of(r#"["cbd44ab40cd3043d1c2bce7ddb1f6392", [1, 12, 14, 14], [1, 12, 14, 14]]"#, 5).op_class, "softmax");
        assert_eq!(class_of(r#"["d7b65649a4dd54becea0a52aabbc5af5", 1, 1000, 1, 1000]"#, 5).op_class, "softmax");
        assert_eq!(class_of(r#"["69115f188984ae34ede37c3b8ca40b43", 1, 7, 7, 2048, 1, 1, 1, 2048]"#, 3).op_class, "adaptive_pool_avg");
    }

    #[test]
    fn registered_keys() {
        assert_eq!(class_of(r#"["matmul_add", 1024, 1024, 1024, "float32"]"#, 0).op_class, "matmul+add");
        let s = class_of(r#"["conv2d_layer", 1, 7, 7, 512, 512, 3, 3, [1, 1], [1, 1]]"#, 0);
        assert_eq!(s.output, vec![1, 512, 7, 7]);
        assert_eq!(class_of(r#"["nope", 1]"#, 0).op_class, "unknown");
    }
}
