//! Unit tests of shape inference (`shape.rs` and the op descriptors' rules in `ops/`).
use super::*;
use crate::onnx::graph::dtype;
use std::collections::BTreeMap;

pub fn node(op: &str, attrs: Vec<(&str, Attr)>) -> Node {
    Node {
        name: format!("{op}_0"),
        op_type: op.into(),
        domain: String::new(),
        inputs: vec![],
        outputs: vec!["y".into()],
        attrs: attrs
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect::<BTreeMap<_, _>>(),
        folded: vec![],
    }
}

fn t(shape: &[i64]) -> Option<TensorInfo> {
    Some(TensorInfo::new(shape.to_vec(), dtype::FLOAT))
}

fn c(v: &[i64]) -> Option<TensorInfo> {
    Some(TensorInfo::constant(
        vec![v.len() as i64],
        dtype::INT64,
        Some(Data::Ints(v.to_vec())),
    ))
}

fn shape_of(
    op: &str,
    attrs: Vec<(&str, Attr)>,
    ins: &[Option<TensorInfo>],
    opset: i64,
) -> Vec<i64> {
    infer_node(&node(op, attrs), ins, opset).unwrap()[0]
        .shape
        .clone()
}

#[test]
fn conv_pads_strides_dilation_and_auto_pad() {
    let a = vec![
        ("strides", Attr::Ints(vec![2, 2])),
        ("pads", Attr::Ints(vec![3, 3, 3, 3])),
    ];
    assert_eq!(
        shape_of("Conv", a, &[t(&[1, 3, 224, 224]), t(&[64, 3, 7, 7])], 14),
        [1, 64, 112, 112]
    );
    let a = vec![("dilations", Attr::Ints(vec![2, 2]))];
    assert_eq!(
        shape_of("Conv", a, &[t(&[1, 8, 10, 10]), t(&[4, 8, 3, 3])], 14),
        [1, 4, 6, 6]
    );
    let a = vec![
        ("auto_pad", Attr::Str("SAME_UPPER".into())),
        ("strides", Attr::Ints(vec![2, 2])),
    ];
    assert_eq!(
        shape_of("Conv", a, &[t(&[1, 8, 15, 15]), t(&[4, 8, 3, 3])], 14),
        [1, 4, 8, 8]
    );
    let a = vec![
        ("group", Attr::Int(8)),
        ("pads", Attr::Ints(vec![1, 1, 1, 1])),
    ];
    assert_eq!(
        shape_of("Conv", a, &[t(&[1, 8, 5, 5]), t(&[8, 1, 3, 3])], 14),
        [1, 8, 5, 5]
    );
    let e = infer_node(
        &node("Conv", vec![("group", Attr::Int(3))]),
        &[t(&[1, 8, 5, 5]), t(&[8, 1, 3, 3])],
        14,
    );
    assert!(matches!(e, Err(OnnxError::Shape { .. })), "{e:?}");
}

#[test]
fn pool_ceil_mode_and_pads() {
    let k = || ("kernel_shape", Attr::Ints(vec![3, 3]));
    let s = || ("strides", Attr::Ints(vec![2, 2]));
    // googlenet: 3x3/s2 ceil_mode, no pad: 112 -> 56
    assert_eq!(
        shape_of(
            "MaxPool",
            vec![k(), s(), ("ceil_mode", Attr::Int(1))],
            &[t(&[1, 64, 112, 112])],
            14
        ),
        [1, 64, 56, 56]
    );
    // resnet: 3x3/s2 pad 1: 112 -> 56
    assert_eq!(
        shape_of(
            "MaxPool",
            vec![k(), s(), ("pads", Attr::Ints(vec![1; 4]))],
            &[t(&[1, 64, 112, 112])],
            14
        ),
        [1, 64, 56, 56]
    );
    // floor vs ceil: 55 -> 27 either way; 14 -> 6 floor, 7 ceil
    assert_eq!(
        shape_of("MaxPool", vec![k(), s()], &[t(&[1, 1, 14, 14])], 14),
        [1, 1, 6, 6]
    );
    assert_eq!(
        shape_of(
            "MaxPool",
            vec![k(), s(), ("ceil_mode", Attr::Int(1))],
            &[t(&[1, 1, 14, 14])],
            14
        ),
        [1, 1, 7, 7]
    );
    assert_eq!(
        shape_of("GlobalAveragePool", vec![], &[t(&[1, 512, 7, 7])], 14),
        [1, 512, 1, 1]
    );
}

#[test]
fn gemm_matmul_flatten() {
    assert_eq!(
        shape_of(
            "Gemm",
            vec![("transB", Attr::Int(1))],
            &[t(&[1, 512]), t(&[1000, 512]), t(&[1000])],
            14
        ),
        [1, 1000]
    );
    assert_eq!(
        shape_of("Gemm", vec![], &[t(&[1, 512]), t(&[512, 10])], 9),
        [1, 10]
    );
    assert_eq!(
        shape_of("MatMul", vec![], &[t(&[2, 3, 4, 5]), t(&[5, 6])], 14),
        [2, 3, 4, 6]
    );
    assert_eq!(shape_of("MatMul", vec![], &[t(&[4]), t(&[4, 6])], 14), [6]);
    assert_eq!(
        shape_of("Flatten", vec![], &[t(&[1, 512, 1, 1])], 14),
        [1, 512]
    );
    assert_eq!(
        shape_of("Flatten", vec![("axis", Attr::Int(0))], &[t(&[2, 3])], 14),
        [1, 6]
    );
}

#[test]
fn broadcasting_binary_ops() {
    assert_eq!(
        shape_of("Add", vec![], &[t(&[1, 64, 56, 56]), t(&[64, 1, 1])], 14),
        [1, 64, 56, 56]
    );
    assert_eq!(
        shape_of("Mul", vec![], &[t(&[3, 1]), t(&[1, 4])], 14),
        [3, 4]
    );
    assert!(infer_node(&node("Sub", vec![]), &[t(&[2, 3]), t(&[4, 3])], 14).is_err());
    let r = infer_node(&node("Mul", vec![]), &[c(&[2, 3]), c(&[4, 5])], 14).unwrap();
    assert_eq!(r[0].data, Some(Data::Ints(vec![8, 15])));
}

#[test]
fn shape_gather_unsqueeze_concat_reshape_chain() {
    let x = t(&[1, 256, 6, 6]);
    let s = infer_node(&node("Shape", vec![]), std::slice::from_ref(&x), 9)
        .unwrap()
        .remove(0);
    assert_eq!(s.data, Some(Data::Ints(vec![1, 256, 6, 6])));
    let g = infer_node(
        &node("Gather", vec![]),
        &[
            Some(s),
            Some(TensorInfo::constant(
                vec![],
                dtype::INT64,
                Some(Data::Ints(vec![0])),
            )),
        ],
        9,
    )
    .unwrap()
    .remove(0);
    assert_eq!(
        (g.shape.clone(), g.data.clone()),
        (vec![], Some(Data::Ints(vec![1])))
    );
    let u = infer_node(
        &node("Unsqueeze", vec![("axes", Attr::Ints(vec![0]))]),
        &[Some(g)],
        9,
    )
    .unwrap()
    .remove(0);
    assert_eq!(u.shape, [1]);
    let cat = infer_node(
        &node("Concat", vec![("axis", Attr::Int(0))]),
        &[Some(u), c(&[-1])],
        9,
    )
    .unwrap()
    .remove(0);
    assert_eq!(cat.data, Some(Data::Ints(vec![1, -1])));
    assert_eq!(shape_of("Reshape", vec![], &[x, Some(cat)], 9), [1, 9216]);
    assert_eq!(
        shape_of("Reshape", vec![], &[t(&[2, 3, 4]), c(&[0, -1])], 14),
        [2, 12]
    );
    assert!(infer_node(&node("Reshape", vec![]), &[t(&[2, 3]), c(&[4, -1])], 14).is_err());
    // a run-time shape tensor is a clear "unsupported"
    let e = infer_node(&node("Reshape", vec![]), &[t(&[2, 3]), t(&[2])], 14).unwrap_err();
    assert!(e.to_string().contains("must be a constant"), "{e}");
}

#[test]
fn transpose_and_slice_fold_small_constants() {
    let m = Some(TensorInfo::constant(
        vec![3, 2],
        dtype::INT64,
        Some(Data::Ints(vec![1, 2, 3, 4, 5, 6])),
    ));
    let t = infer_node(
        &node("Transpose", vec![("perm", Attr::Ints(vec![1, 0]))]),
        std::slice::from_ref(&m),
        14,
    )
    .unwrap()
    .remove(0);
    assert_eq!(
        (t.shape, t.data),
        (vec![2, 3], Some(Data::Ints(vec![1, 3, 5, 2, 4, 6])))
    );
    // reverse the rows: starts -1, ends -INT_MAX, axes 0, steps -1 (silero_vad's pad chain)
    let s = infer_node(
        &node("Slice", vec![]),
        &[m, c(&[-1]), c(&[i64::MIN + 1]), c(&[0]), c(&[-1])],
        14,
    )
    .unwrap()
    .remove(0);
    assert_eq!(
        (s.shape, s.data),
        (vec![3, 2], Some(Data::Ints(vec![5, 6, 3, 4, 1, 2])))
    );
}

#[test]
fn clip_dropout_softmax_transpose_squeeze_pad_constantofshape() {
    assert_eq!(
        shape_of("Clip", vec![], &[t(&[1, 32, 112, 112]), None, None], 14),
        [1, 32, 112, 112]
    );
    assert_eq!(
        infer_node(&node("Dropout", vec![]), &[t(&[1, 4096])], 14)
            .unwrap()
            .len(),
        2
    );
    assert_eq!(shape_of("Softmax", vec![], &[t(&[1, 1000])], 14), [1, 1000]);
    assert_eq!(
        shape_of(
            "Transpose",
            vec![("perm", Attr::Ints(vec![0, 3, 1, 2]))],
            &[t(&[1, 12, 12, 3])],
            9
        ),
        [1, 3, 12, 12]
    );
    assert_eq!(
        shape_of("Squeeze", vec![], &[t(&[1, 2, 1, 1]), c(&[2, 3])], 14),
        [1, 2]
    );
    assert_eq!(
        shape_of(
            "Pad",
            vec![],
            &[t(&[1, 3, 4, 4]), c(&[0, 0, 1, 1, 0, 0, 1, 1])],
            14
        ),
        [1, 3, 6, 6]
    );
    let w = infer_node(&node("ConstantOfShape", vec![]), &[c(&[64, 3, 7, 7])], 9)
        .unwrap()
        .remove(0);
    assert_eq!(w.shape, [64, 3, 7, 7]);
    assert!(w.constant);
    assert!(matches!(
        infer_node(&node("NonMaxSuppression", vec![]), &[t(&[1])], 14),
        Err(OnnxError::Unsupported { .. })
    ));
}
