//! Hostile inputs: random bytes, and real models (ttdb's fixtures and corpus graphs) with
//! mutated bytes, must give `Ok` or `Err` from load + kernel extraction, never a panic.
use crate::common;

use proptest::prelude::*;
use ttdb::onnx::{self, InputShape, LayoutMode, Options};
use ttdb_testkit::onnx_model as writer;

fn seeds() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = writer::fixture_models()
        .into_iter()
        .map(|(_, b)| b)
        .collect();
    for f in [
        "torchvision_graph_only/resnet18.onnx",
        "zoo_light/light_squeezenet.onnx",
        "odd/pnet.onnx",
    ] {
        v.push(std::fs::read(common::corpus_dir().join("onnx").join(f)).unwrap());
    }
    v
}

fn exercise(bytes: &[u8]) {
    let overrides = [
        InputShape::new("input_1", vec![1, 12, 12, 3]),
        InputShape::new("image", vec![1, 3, 16, 16]),
    ];
    for ov in [&overrides[..0], &overrides[..1], &overrides[1..]] {
        if let Ok(g) = onnx::load_bytes(bytes, ov) {
            for layout in [LayoutMode::Nchwc, LayoutMode::Nhwc] {
                let _ = onnx::extract(
                    &g,
                    &Options {
                        layout,
                        ..Options::default()
                    },
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        exercise(&bytes);
    }

    #[test]
    fn mutated_models_never_panic(seed in 0usize..6, edits in proptest::collection::vec((any::<u32>(), any::<u8>(), 0u8..4), 1..12)) {
        let seeds = seeds();
        let mut bytes = seeds[seed % seeds.len()].clone();
        for (pos, val, how) in edits {
            if bytes.is_empty() {
                break;
            }
            let p = pos as usize % bytes.len();
            match how {
                0 => bytes[p] = val,
                1 => bytes[p] ^= 1 << (val % 8),
                2 => bytes.truncate(p.max(1)),
                _ => bytes.insert(p, val),
            }
        }
        exercise(&bytes);
    }
}

/// Structurally valid models with hostile numbers: huge dims, zero strides, bad pads.
#[test]
fn hostile_attributes_are_errors_not_panics() {
    use writer::{attr_int, attr_ints, ModelBuilder};
    let cases: Vec<(&str, Vec<i64>, Vec<ttdb::onnx::proto::AttributeProto>)> = vec![
        (
            "zero stride",
            vec![4, 3, 3, 3],
            vec![attr_ints("strides", &[0, 0])],
        ),
        (
            "negative pads",
            vec![4, 3, 3, 3],
            vec![attr_ints("pads", &[-5, -5, -5, -5])],
        ),
        ("huge kernel", vec![4, 3, 1 << 40, 3], vec![]),
        ("bad group", vec![4, 3, 3, 3], vec![attr_int("group", 0)]),
        (
            "pads rank",
            vec![4, 3, 3, 3],
            vec![attr_ints("pads", &[1, 1])],
        ),
        ("i64 max dim", vec![i64::MAX, 3, 3, 3], vec![]),
    ];
    for (what, w, attrs) in cases {
        let mut b = ModelBuilder::new("hostile", 14);
        b.input("x", &[1, 3, 8, 8]).weight("w", &w);
        b.node("Conv", "conv", &["x", "w"], &["y"], attrs)
            .output("y");
        let r =
            onnx::load_bytes(&b.encode(), &[]).and_then(|g| onnx::extract(&g, &Options::default()));
        assert!(r.is_err(), "{what}: expected an error");
    }
    // a ConstantOfShape with an absurd shape keeps its dims, never allocates
    let mut b = ModelBuilder::new("hostile", 14);
    b.int64s("shape", &[1 << 40, 1 << 20]);
    b.node("ConstantOfShape", "cos", &["shape"], &["y"], vec![])
        .output("y");
    let r = onnx::load_bytes(&b.encode(), &[]);
    assert!(r.is_err() || r.unwrap().shape("y").is_some());
}
