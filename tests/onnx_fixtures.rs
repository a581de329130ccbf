//! ttdb's own ONNX fixtures (`fixtures/models/`, written by `ttdb_testkit::onnx_model`): they are
//! up to date with the generator, and fast end-to-end checks of the frontend run on them.
//! Regenerate with `TTDB_UPDATE_FIXTURES=1 cargo test --test suite onnx_fixtures::`.
use std::path::PathBuf;
use ttdb::onnx::{self, InputShape, KernelList, LayoutMode, OnnxError, Options};
use ttdb::ops::{Anchor, EpilogueOp};
use ttdb_testkit::onnx_model as writer;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/models")
}

#[test]
fn fixtures_are_up_to_date() {
    let update = std::env::var_os("TTDB_UPDATE_FIXTURES").is_some();
    for (name, bytes) in writer::fixture_models() {
        let path = dir().join(name);
        if update {
            std::fs::create_dir_all(dir()).unwrap();
            std::fs::write(&path, &bytes).unwrap();
            continue;
        }
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (run with TTDB_UPDATE_FIXTURES=1)", path.display())
        });
        assert!(
            on_disk == bytes,
            "{} is stale: rerun with TTDB_UPDATE_FIXTURES=1",
            path.display()
        );
    }
}

fn kernels(name: &str, opts: &Options) -> KernelList {
    // generated in memory too, so these checks do not depend on the files being fresh
    let bytes = writer::fixture_models()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap()
        .1;
    let g = onnx::load_bytes(&bytes, &[]).unwrap();
    onnx::extract(&g, opts).unwrap()
}

fn find<'a>(list: &'a KernelList, class: &str) -> &'a onnx::Kernel {
    list.kernels
        .iter()
        .find(|k| k.class == class)
        .unwrap_or_else(|| {
            panic!(
                "no {class} kernel in {:#?}",
                list.kernels.iter().map(|k| &k.class).collect::<Vec<_>>()
            )
        })
}

#[test]
fn tiny_resnet_nchwc_kernels() {
    let list = kernels("tiny_resnet.onnx", &Options::default());
    // BN folded: the bias appears; fallback blocking with 4 lanes
    let c1 = find(&list, "conv2d_nchwc+add+relu");
    assert_eq!(
        c1.inputs,
        vec![
            vec![1, 4, 14, 14, 4],
            vec![4, 4, 3, 3, 4, 4],
            vec![1, 4, 1, 1, 4]
        ]
    );
    assert_eq!(c1.output, vec![1, 4, 14, 14, 4]);
    assert_eq!(
        c1.occurrences[0],
        [
            "/layer1.conv1/Conv",
            "/layer1.conv1/BatchNormalization",
            "/layer1/relu1"
        ]
    );
    let b = c1.blocking.unwrap();
    assert_eq!(
        (b.ic_bn, b.oc_bn, b.source),
        (4, 4, onnx::BlockingSource::Fallback)
    );
    // the residual add (block input second) fuses into the second conv
    let c2 = find(&list, "conv2d_nchwc+add+add+relu");
    assert_eq!(c2.inputs.len(), 4);
    assert_eq!(c2.inputs[3], vec![1, 4, 14, 14, 4]);
    assert_eq!(
        c2.spec.as_ref().unwrap().epilogue[1],
        EpilogueOp::Add {
            operand_first: false
        }
    );
    assert_eq!(
        find(&list, "adaptive_pool_avg").inputs,
        vec![vec![1, 4, 14, 14, 4]]
    );
    assert_eq!(
        find(&list, "dense+add").inputs,
        vec![vec![1, 16], vec![10, 16], vec![10]]
    );
    assert!(find(&list, "softmax").is_tuned());
    // input NCHW -> NCHW4c once (shared by conv1 and the residual), NCHW4c -> NCHW before flatten
    assert_eq!(list.layout_transforms(), 2);
    assert_eq!(list.tuned().count(), 5);
    let sig = c2.signature.as_ref().unwrap();
    assert_eq!(sig.layout, "NCHW4c");
    assert_eq!(sig.attrs["padding"], serde_json::json!([1, 1, 1, 1]));

    let avx2 = kernels(
        "tiny_resnet.onnx",
        &Options {
            lanes: 8,
            ..Options::default()
        },
    );
    assert_eq!(
        find(&avx2, "conv2d_nchwc+add+relu").inputs[1],
        vec![2, 2, 3, 3, 8, 8]
    );
}

#[test]
fn tiny_resnet_nhwc_kernels() {
    let list = kernels(
        "tiny_resnet.onnx",
        &Options {
            layout: LayoutMode::Nhwc,
            ..Options::default()
        },
    );
    let c2 = find(&list, "conv2d_nhwc+add+add+relu");
    assert_eq!(
        c2.inputs,
        vec![
            vec![1, 14, 14, 16],
            vec![3, 3, 16, 16],
            vec![1, 1, 1, 16],
            vec![1, 14, 14, 16]
        ]
    );
    assert!(!c2.winograd, "CO=16 is not in (64, 512): direct conv");
}

/// mobilenet_v2's `x + conv(x)`: the residual is the add's FIRST operand, like the Relay key.
#[test]
fn tiny_mobilenet_residual_first_and_depthwise() {
    let list = kernels("tiny_mobilenet.onnx", &Options::default());
    let proj = find(&list, "conv2d_nchwc+add+add");
    let spec = proj.spec.as_ref().unwrap();
    assert_eq!(
        spec.epilogue,
        vec![
            EpilogueOp::Add {
                operand_first: false
            },
            EpilogueOp::Add {
                operand_first: true
            }
        ]
    );
    assert_eq!(
        spec.key_order(),
        vec![3, 0, 1, 2],
        "key order: residual, data, weight, bias"
    );
    assert_eq!(proj.inputs[0], vec![1, 24, 14, 14, 4]);
    let dw = find(&list, "depthwise_conv2d_nchwc+add+clip");
    assert!(matches!(
        dw.spec.as_ref().unwrap().anchor,
        Anchor::DepthwiseNchwc(_)
    ));
    assert_eq!(
        dw.inputs,
        vec![
            vec![1, 24, 14, 14, 4],
            vec![24, 1, 3, 3, 1, 4],
            vec![1, 24, 1, 1, 4]
        ]
    );
    assert_eq!(
        dw.signature.as_ref().unwrap().attrs["clip"],
        serde_json::json!([0.0, 6.0])
    );
}

#[test]
fn a_chosen_blocking_gives_the_kernel_and_its_transforms() {
    let bytes = writer::fixture_models()
        .into_iter()
        .find(|(n, _)| *n == "tiny_resnet.onnx")
        .unwrap()
        .1;
    let g = onnx::load_bytes(&bytes, &[]).unwrap();
    let c = onnx::with_blocking(&g, &Options::default(), "/layer1.conv1/Conv", 8, 16).unwrap();
    assert_eq!(c.kernel.inputs[0], vec![1, 2, 14, 14, 8]);
    assert_eq!(c.kernel.inputs[1], vec![1, 2, 3, 3, 8, 16]);
    assert_eq!(
        c.kernel.blocking.unwrap().source,
        onnx::BlockingSource::Override
    );
    let details: Vec<&str> = c.transforms.iter().map(|k| k.detail.as_str()).collect();
    assert_eq!(details, ["NCHW->NCHW8c", "NCHW16c->NCHW4c"]);
    let e = onnx::with_blocking(&g, &Options::default(), "/layer1.conv1/Conv", 3, 16).unwrap_err();
    assert!(
        matches!(e, OnnxError::Layout(_)) && e.to_string().contains("does not divide"),
        "{e}"
    );
    assert!(onnx::with_blocking(&g, &Options::default(), "nope", 4, 4).is_err());
}

#[test]
fn symbolic_dims_need_an_override() {
    let path = dir().join("symbolic_input.onnx");
    match onnx::load(&path, &[]) {
        Err(OnnxError::SymbolicDim {
            input, index, dim, ..
        }) => assert_eq!((input.as_str(), index, dim.as_str()), ("image", 0, "N")),
        other => panic!("{other:?}"),
    }
    let g = onnx::load(&path, &[InputShape::parse("image=1,3,32,32").unwrap()]).unwrap();
    assert_eq!(g.shape("z").unwrap(), [1, 8, 32, 32]);
    let err = onnx::load(&path, &[InputShape::parse("image=1,4,32,32").unwrap()]).unwrap_err();
    assert!(err.to_string().contains("fixed to 3"), "{err}");
}

#[test]
fn control_flow_is_a_clear_error() {
    let err = onnx::load(dir().join("control_flow.onnx"), &[]).unwrap_err();
    match &err {
        OnnxError::Unsupported { node, op, reason } => {
            assert_eq!((node.as_str(), op.as_str()), ("branch", "If"));
            assert!(reason.contains("Conv"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}
