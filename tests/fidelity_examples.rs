//! The real records of `corpus/fidelity_examples/` (one per class ttdb once refused, see its
//! README) end to end: recognized by md5, replayed, lowered, compiled with LLVM, run and
//! compared with the reference at their real shapes.
use crate::common;
#[allow(dead_code)]
use crate::common::shrink;
use ttdb::ansor::{Record, WorkloadKey};
use ttdb::evaluate::{evaluate_steps, EvalOptions, Reference};
use ttdb::recognize::{recognize, recognize_uncached, Recognized, RecognizedBy};
use ttdb::schedule::{retarget_steps, stage_inits_from_dag};
use ttdb::tune::apply::workload_key_of;

const HELD_OUT: &str = "thaisacs_held_out_examples.json";

/// Line `line` (from 1) of `file` in `fidelity_examples/`, recognized.
fn example(file: &str, line: usize) -> (Record, Recognized) {
    let path = common::corpus_dir().join("fidelity_examples").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let raw = text.lines().nth(line - 1).expect("no such line");
    let record = Record::parse(raw).unwrap();
    let key = WorkloadKey::parse(&record.task.workload_key).unwrap();
    let rec = recognize(&key).unwrap_or_else(|e| panic!("{file}:{line}: {e}"));
    assert_eq!(
        rec.recognized_by,
        RecognizedBy::Md5,
        "{file}:{line}: not recognized by md5"
    );
    (record, rec)
}

/// Replays, lowers, compiles and verifies `record` on `rec`'s DAG.
fn check(what: &str, record: &Record, rec: &Recognized) {
    let reference = Reference::new(&rec.dag, 7).unwrap();
    let opts = EvalOptions {
        verify_only: true,
        ..EvalOptions::default()
    };
    let r = evaluate_steps(&rec.dag, &record.steps, &reference, &opts);
    assert!(
        r.verified(),
        "{what} ({}): {:?}",
        rec.signature.op_class,
        r.failure
    );
    assert!(r.rel_error.unwrap() <= ttdb::loopnest::verify::RTOL);
}

/// Replays, lowers, compiles and verifies the example; returns its op class.
fn verifies(file: &str, line: usize) -> String {
    let (record, rec) = example(file, line);
    check(&format!("{file}:{line}"), &record, &rec);
    rec.signature.op_class
}

/// The example's workload at other input shapes (canonical order): its steps re-targeted (or,
/// with `keep_lengths`, its split lengths kept whatever the new extents), written by ttdb's
/// writer under the new key, read back, recognized by md5 as the same class, replayed,
/// compiled and verified.
fn verifies_at(file: &str, line: usize, inputs: &[Vec<i64>], keep_lengths: bool) {
    let (record, rec) = example(file, line);
    let spec = rec.spec.as_ref().unwrap();
    let dag = spec.build(rec.era.unwrap(), inputs).unwrap();
    let mut written = record.clone();
    written.task.workload_key = workload_key_of(&dag);
    let inits = stage_inits_from_dag(&dag);
    written.steps = if keep_lengths {
        shrink::replay_with_lengths(&inits, &record.steps, |_, sp| sp.lengths.clone())
            .unwrap()
            .1
    } else {
        retarget_steps(&inits, &record.steps).unwrap().steps
    };
    let back = Record::parse(&written.to_line()).unwrap();
    let again = recognize_uncached(&WorkloadKey::parse(&back.task.workload_key).unwrap()).unwrap();
    assert_eq!(again.recognized_by, RecognizedBy::Md5);
    assert_eq!(again.signature.op_class, rec.signature.op_class);
    check(&format!("{file}:{line} at {inputs:?}"), &back, &again);
}

/// Droplet's `[4, 4, 4]` on an extent of 14: the reduction's init stage needs its guard too.
#[test]
fn droplet_over_long_splits_verify() {
    let class = verifies("bennu_densenet201_droplet_overlong.json", 1);
    assert_eq!(class, "conv2d_nchwc+add+relu");
}

/// The over-long record's workload at a smaller shape, its `[4, 4, 4]` splits kept on extents
/// of 7 and 8.
#[test]
fn droplet_over_long_splits_verify_at_another_shape() {
    verifies_at(
        "bennu_densenet201_droplet_overlong.json",
        1,
        &[
            vec![1, 16, 7, 7, 4],
            vec![8, 16, 1, 1, 4, 4],
            vec![1, 8, 1, 1, 4],
        ],
        true,
    );
}

/// NHWC mobilenet_v3 kernels as Relay's PyTorch frontend writes them: hardswish
/// `x * (relu6(x + 3) / 6)` after depthwise convs (stride 2 and 1) and a 1x1 conv, and the SE
/// block's hardsigmoid `relu6(x) / 6` (its `+ 3` folded into the bias) after its 1x1 conv on
/// the pooled `[1, 1, 1, C]` tensor.
#[test]
fn nhwc_hardswish_and_hardsigmoid_kernels_verify() {
    let hardswish = "add+add_scalar+clip+divide_scalar+multiply@1";
    for (line, class) in [
        (1, format!("depthwise_conv2d_nhwc+{hardswish}")),
        (2, format!("depthwise_conv2d_nhwc+{hardswish}")),
        (3, "conv2d_nhwc+add+clip+divide_scalar".to_string()),
        (4, format!("conv2d_nhwc+{hardswish}")),
    ] {
        assert_eq!(verifies(HELD_OUT, line), class);
    }
}

#[test]
fn nhwc_hardswish_and_hardsigmoid_kernels_verify_at_other_shapes() {
    // depthwise 3x3 stride 2 on 96 channels; the SE conv 16 -> 40; a 1x1 conv 24 -> 56
    verifies_at(
        HELD_OUT,
        1,
        &[vec![1, 18, 18, 96], vec![3, 3, 96, 1], vec![1, 1, 1, 96]],
        false,
    );
    verifies_at(
        HELD_OUT,
        3,
        &[vec![1, 1, 1, 16], vec![1, 1, 16, 40], vec![1, 1, 1, 40]],
        false,
    );
    verifies_at(
        HELD_OUT,
        4,
        &[vec![1, 14, 14, 24], vec![1, 1, 24, 56], vec![1, 1, 1, 56]],
        false,
    );
}

/// resnext's grouped 3x3 conv in NCHW with bias and relu (groups 32), as x86's
/// `group_conv2d_nchw.x86` builds it: packed data and kernel, the conv on blocks, an unpack.
#[test]
fn nchw_grouped_conv_verifies() {
    assert_eq!(
        verifies(HELD_OUT, 5),
        "group_conv2d_nchw_spatial_pack+add+relu"
    );
}

/// The same kernel with 8 channels a group (two blocks of 4 each), on 14x14.
#[test]
fn nchw_grouped_conv_verifies_at_another_shape() {
    verifies_at(
        HELD_OUT,
        5,
        &[vec![1, 256, 14, 14], vec![256, 8, 3, 3], vec![1, 256, 1, 1]],
        false,
    );
}

/// resnext's grouped conv as an ONNX model: in NCHWc (x86's AlterOpLayout keeps grouped
/// convs in NCHW) it is the spatial-pack kernel, blocked by the fallback rule of the default
/// 4 lanes, with the example record's signature, so `match` finds the record.
#[test]
fn onnx_grouped_conv_has_the_example_records_signature() {
    use ttdb::onnx::{self, Options};
    let model = ttdb_testkit::onnx_model::grouped_conv_relu("resnext_block", 128, 56, 32);
    let g = onnx::load_bytes(&model, &[]).unwrap();
    let list = onnx::extract(&g, &Options::default()).unwrap();
    let k = list.tuned().next().expect("a tuned kernel");
    assert_eq!(k.class, "group_conv2d_nchw_spatial_pack+add+relu");
    common::recognized_by_md5(k, &common::kernel_dag(k));
    let (_, rec) = example(HELD_OUT, 5);
    assert_eq!(k.signature_hash, Some(rec.signature.sha256_hex()));
}

/// The whole of mobilenet_v3_small in NHWC, the network the NHWC examples come from: every
/// kernel of it is one ttdb can tune (hardswish, hardsigmoid and squeeze-excite epilogues
/// included), none is left to a default schedule as untunable.
#[test]
fn mobilenet_v3_small_nhwc_has_no_untunable_kernel() {
    use ttdb::onnx::{self, KernelKind, LayoutMode, Options};
    let path = common::corpus_dir().join("onnx/torchvision_more/mobilenet_v3_small.onnx");
    let opts = Options {
        layout: LayoutMode::Nhwc,
        ..Options::default()
    };
    let list = onnx::kernels_for_file(path, &[], &opts).unwrap();
    let untunable: Vec<_> = list
        .kernels
        .iter()
        .filter_map(|k| match &k.kind {
            KernelKind::Untunable { .. } => Some((&k.name, &k.class)),
            _ => None,
        })
        .collect();
    assert!(untunable.is_empty(), "untunable: {untunable:?}");
    let classes: Vec<&str> = list.tuned().map(|k| k.class.as_str()).collect();
    for epilogue in ["add_scalar+clip+multiply@1", "add+add_scalar+clip"] {
        assert!(
            classes.iter().any(|c| c.contains(epilogue)),
            "no tuned kernel with the {epilogue} epilogue in {classes:?}"
        );
    }
    assert!(
        classes
            .iter()
            .any(|c| c.starts_with("depthwise_conv2d_nhwc")),
        "{classes:?}"
    );
}
