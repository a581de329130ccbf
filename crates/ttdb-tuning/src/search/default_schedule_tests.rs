//! Tests of the default schedules ([`super`]).
use super::*;
use ttdb_algo::ops::{
    Anchor, EpilogueOp, Era, PoolAttrs, PoolKind, PoolLayout, Window2d, WorkloadSpec,
};
use ttdb_backend::loopnest::kernel_to_string;
use ttdb_backend::lower::check::interpret_against_reference;
use ttdb_backend::lower::{lower_steps, LowerOptions};

fn dag(anchor: Anchor, epilogue: Vec<EpilogueOp>, era: Era, shapes: &[Vec<i64>]) -> Dag {
    WorkloadSpec::new(anchor, epilogue)
        .build(era, shapes)
        .unwrap()
}

fn bias() -> EpilogueOp {
    EpilogueOp::Add {
        operand_first: false,
    }
}

/// Lowers `steps` (which must exist) on `dag`, checks every access in bounds and the
/// result against the reference in the checked interpreter, and returns the kernel text.
fn lowered_matching_reference(dag: &Dag, steps: Option<Vec<Step>>) -> String {
    let steps = steps.unwrap_or_else(|| panic!("no such schedule for {dag:?}"));
    let k = lower_steps(dag, &steps, &LowerOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{steps:?}"));
    let text = kernel_to_string(&k);
    let cmp = interpret_against_reference(dag, &k, 5, Some(100_000_000))
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(cmp.rel_err < 1e-5, "{}\n{text}", cmp.rel_err);
    text
}

/// Every kernel with one reduction and an element-wise epilogue gets the register-tiled
/// schedule, and it lowers and matches the reference (in the checked interpreter, so
/// every access is in bounds), whether the reduction is the output (cache-written) or
/// feeds an epilogue, at shapes whose tile axis the tile does and does not divide.
#[test]
fn register_tiled_schedules_lower_and_match_the_reference() {
    let conv = |s, p| Anchor::Conv2dNchwc(Window2d::simple(s, p));
    let cases = [
        // NCHWc conv + bias + relu (epilogue), a 7-wide row (tile 7)
        dag(
            conv(1, 1),
            vec![bias(), EpilogueOp::Relu],
            Era::V015,
            &[
                vec![1, 2, 7, 7, 4],
                vec![2, 2, 3, 3, 4, 8],
                vec![1, 2, 1, 1, 8],
            ],
        ),
        // NCHWc conv alone (the reduction is the output), stride 2, a 5-wide row
        dag(
            conv(2, 0),
            vec![],
            Era::V015,
            &[vec![1, 1, 11, 11, 8], vec![1, 1, 3, 3, 8, 8]],
        ),
        // NHWC conv + bias + relu: channels last
        dag(
            Anchor::Conv2dNhwc(Window2d::simple(1, 1)),
            vec![bias(), EpilogueOp::Relu],
            Era::V07,
            &[vec![1, 6, 6, 3], vec![3, 3, 3, 16], vec![1, 1, 1, 16]],
        ),
        // depthwise NCHWc
        dag(
            Anchor::DepthwiseNchwc(Window2d::simple(1, 1)),
            vec![],
            Era::V015,
            &[vec![1, 2, 5, 5, 8], vec![2, 1, 3, 3, 1, 8]],
        ),
        // dense + bias, a batch of 3 rows (tile 3)
        dag(
            Anchor::Dense,
            vec![bias()],
            Era::V08,
            &[vec![3, 7], vec![16, 7], vec![1, 16]],
        ),
        dag(
            Anchor::BatchMatmul { transpose_b: true },
            vec![],
            Era::V08,
            &[vec![2, 6, 5], vec![2, 8, 5]],
        ),
        // batch_matmul NN: the weights' last axis is the output's, contiguous
        dag(
            Anchor::BatchMatmul { transpose_b: false },
            vec![],
            Era::V08,
            &[vec![2, 6, 5], vec![2, 5, 8]],
        ),
        dag(
            Anchor::Pool(PoolAttrs {
                kind: PoolKind::Max,
                kernel: [3, 3],
                stride: [2, 2],
                dilation: [1, 1],
                padding: [0; 4],
                ceil_mode: false,
                layout: PoolLayout::Nchwc,
            }),
            vec![],
            Era::V015,
            &[vec![1, 2, 9, 9, 8]],
        ),
    ];
    for dag in &cases {
        let text = lowered_matching_reference(dag, register_tiled_steps(dag, 8));
        // the accumulators are a local tile, not the output
        assert!(text.contains("allocate "), "{text}");
    }
}

/// Dense and batch_matmul NT (both operands contiguous along K) get the row-reduced
/// schedule, with or without an epilogue, at row counts the tile does and does not
/// divide; a conv does not.
#[test]
fn row_reduced_schedules_lower_and_match_the_reference() {
    let cases = [
        dag(
            Anchor::Dense,
            vec![bias(), EpilogueOp::Relu],
            Era::V08,
            &[vec![3, 16], vec![12, 16], vec![1, 12]],
        ),
        dag(
            Anchor::Dense,
            vec![],
            Era::V08,
            &[vec![1, 24], vec![10, 24]],
        ),
        dag(
            Anchor::Dense,
            vec![bias()],
            Era::V08,
            &[vec![4, 8], vec![5, 8], vec![1, 5]],
        ),
        dag(
            Anchor::BatchMatmul { transpose_b: true },
            vec![],
            Era::V08,
            &[vec![2, 6, 16], vec![2, 8, 16]],
        ),
    ];
    for dag in &cases {
        let text = lowered_matching_reference(dag, row_reduced_steps(dag, 8));
        assert!(text.contains("_rf["), "{text}");
    }
    let conv = dag(
        Anchor::Conv2dNhwc(Window2d::simple(1, 1)),
        vec![],
        Era::V07,
        &[vec![1, 6, 6, 8], vec![3, 3, 8, 16]],
    );
    assert!(row_reduced_steps(&conv, 8).is_none());
    // batch_matmul NN reads its weights along the output's columns: register-tiled
    let nn = dag(
        Anchor::BatchMatmul { transpose_b: false },
        vec![],
        Era::V08,
        &[vec![2, 6, 16], vec![2, 16, 8]],
    );
    assert!(row_reduced_steps(&nn, 8).is_none());
}

/// Layout transforms, the glue between convs: vectorized even when no vector width
/// divides the innermost axis, with only enough outer axes fused into the parallel loop.
#[test]
fn layout_transforms_vectorize_and_keep_plain_inner_loops() {
    use ttdb_algo::ir::{DType, DagBuilder};
    use ttdb_algo::ops::layout_transform::{layout_transform, DataLayout};
    let transform = |logical: [i64; 4], src: DataLayout, dst: DataLayout| {
        let mut b = DagBuilder::new();
        let x = b.placeholder("p0".to_string(), &src.physical(logical), DType::F32);
        let y = layout_transform(&mut b, &x, logical, src, dst).unwrap();
        b.finish(&[&y])
    };
    // NCHW -> NCHW3c (a CNN's input): w and c fused and split by lcm(3, 16) = 48.
    let input = transform([1, 3, 32, 32], DataLayout::Nchw, DataLayout::Nchwc(3));
    let text = lowered_matching_reference(&input, Some(default_steps(&input, 16)));
    assert!(
        text.contains("vectorized") && text.contains(", 0, 48)"),
        "{text}"
    );
    // NCHW32c -> NCHW24c: the innermost 24 by 8 (contiguous loads); the parallel loop
    // fuses n, C and h (2·56 >= 128 is not enough), w stays a plain loop.
    let blocks = transform(
        [1, 96, 56, 56],
        DataLayout::Nchwc(32),
        DataLayout::Nchwc(24),
    );
    let text = lowered_matching_reference(&blocks, Some(default_steps(&blocks, 16)));
    assert!(
        text.contains("parallel") && text.contains(", 0, 224)"),
        "{text}"
    );
    assert!(
        text.contains(", 0, 56)") && text.contains(", 0, 8)"),
        "{text}"
    );
    // NCHW11c -> NCHW of 440 x 7 x 7 (regnet): no vector stays within rows of 7 x 7
    // (lcm(7, 8) = 56 would wrap h), so the loops stay scalar and plain: c parallel.
    let rows = transform([1, 440, 7, 7], DataLayout::Nchwc(11), DataLayout::Nchw);
    let text = lowered_matching_reference(&rows, Some(default_steps(&rows, 16)));
    assert!(!text.contains("vectorized"), "{text}");
    assert!(
        text.contains("parallel") && text.contains(", 0, 440)"),
        "{text}"
    );
}

/// Glue whose innermost axis takes no vector runs the axis its loads read best
/// innermost: NCHW -> NCHW29c (shufflenet_v2's 116-channel stages) loops over `w`
/// inside a block's 29 channels, so that a row's channel arithmetic is computed once and
/// its loads are contiguous. Where the innermost axis reads as well as any (an
/// element-wise add of NCHW29c tensors) the order stays.
#[test]
fn glue_without_a_vector_runs_its_best_read_axis_innermost() {
    use ttdb_algo::ir::{DType, DagBuilder, IterVar};
    use ttdb_algo::ops::layout_transform::{layout_transform, DataLayout};
    let reorders = |steps: &[Step]| -> Vec<Vec<u32>> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Reorder(r) => Some(r.after_ids.clone()),
                _ => None,
            })
            .collect()
    };
    let logical = [1, 58, 8, 12];
    let mut b = DagBuilder::new();
    let x = b.placeholder("p0".to_string(), &logical, DType::F32);
    let src = DataLayout::Nchw;
    let y = layout_transform(&mut b, &x, logical, src, DataLayout::Nchwc(29)).unwrap();
    let blocked = b.finish(&[&y]);
    let steps = default_steps(&blocked, 16);
    assert_eq!(reorders(&steps), [vec![0, 1, 2, 4, 3]], "{steps:?}");
    let text = lowered_matching_reference(&blocked, Some(steps));
    let inner = text.lines().rfind(|l| l.contains("for (")).unwrap();
    assert!(inner.contains("ax3, 0, 12)"), "{text}");

    let shape = [1, 2, 8, 12, 29];
    let mut b = DagBuilder::new();
    let p0 = b.placeholder("p0".to_string(), &shape, DType::F32);
    let p1 = b.placeholder("p1".to_string(), &shape, DType::F32);
    let axes: Vec<IterVar> = (0..5)
        .map(|i| IterVar::new(format!("ax{i}"), shape[i]))
        .collect();
    let sum = b.elementwise("T_add", "broadcast", axes, |v| {
        p0.at(v.to_vec()) + p1.at(v.to_vec())
    });
    let add = b.finish(&[&sum]);
    let steps = default_steps(&add, 16);
    assert!(reorders(&steps).is_empty(), "{steps:?}");
    lowered_matching_reference(&add, Some(steps));
}

/// Small glue stays on one thread (a fork-join costs more than its work) unless the
/// threshold is off; large glue is parallel either way.
#[test]
fn small_stages_run_on_one_thread_unless_the_threshold_is_off() {
    use ttdb_algo::ir::{DType, DagBuilder};
    use ttdb_algo::ops::layout_transform::{layout_transform, DataLayout};
    let transform = |logical: [i64; 4]| {
        let mut b = DagBuilder::new();
        let src = DataLayout::Nchwc(16);
        let x = b.placeholder("p0".to_string(), &src.physical(logical), DType::F32);
        let y = layout_transform(&mut b, &x, logical, src, DataLayout::Nchw).unwrap();
        b.finish(&[&y])
    };
    let parallel = |steps: &[Step]| {
        steps
            .iter()
            .any(|s| matches!(s, Step::Annotation(a) if a.annotation == Annotation::Parallel))
    };
    let small = transform([1, 32, 8, 8]); // 2048 elements
    assert!(!parallel(&default_steps_with(
        &small,
        16,
        MIN_PARALLEL_ELEMENTS
    )));
    assert!(parallel(&default_steps_with(&small, 16, 1)));
    let large = transform([1, 64, 56, 56]);
    assert!(parallel(&default_steps_with(
        &large,
        16,
        MIN_PARALLEL_ELEMENTS
    )));
    // both lower and compute the reference's values
    lowered_matching_reference(&small, Some(default_steps_with(&small, 16, 1)));
}

/// A vector over fused axes keeps each lane's index a constant offset from the
/// vector's only when it covers whole inner rows and does not wrap the outer axis.
#[test]
fn fused_vectors_stay_within_rows() {
    assert!(lanes_stay_in_rows(&[224, 3], 48), "16 rows of 3 in 224");
    assert!(lanes_stay_in_rows(&[56, 24], 8), "within the innermost");
    assert!(!lanes_stay_in_rows(&[7, 7], 56), "wraps h");
    assert!(
        !lanes_stay_in_rows(&[1024, 7, 7], 56),
        "not whole 7 x 7 planes"
    );
    assert!(lanes_stay_in_rows(&[64, 7, 7], 49), "one whole plane");
    assert!(
        !lanes_stay_in_rows(&[30, 9], 36),
        "4 rows of 9 do not divide 30"
    );
    assert!(!lanes_stay_in_rows(&[3], 8), "longer than the axes");
}

/// Two reductions (softmax) or none (glue) keep the plain schedule.
#[test]
fn other_kernels_keep_the_plain_schedule() {
    let softmax = dag(
        Anchor::Softmax { axis: 1 },
        vec![],
        Era::V08,
        &[vec![1, 10]],
    );
    assert!(register_tiled_steps(&softmax, 8).is_none());
    assert_eq!(default_schedules(&softmax, 8).len(), 1);
}
