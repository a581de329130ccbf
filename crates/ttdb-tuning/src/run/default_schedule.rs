//! The schedule a kernel runs when no stored one applies, as Ansor steps so that it replays
//! and lowers like any record. Nothing is measured.
//!
//! - **Register-tiled** (a kernel with one reduction and an element-wise epilogue: convs,
//!   pools, matmuls): the output's innermost axis is split by the vector width and the one
//!   before it by a small tile; the outer loops are fused into one parallel loop, and the
//!   reduction is computed at that loop into a tile of accumulators (cache-written when it
//!   is itself the output), with its reduction loops outside the unrolled tile and the
//!   vector. The accumulators stay in registers, as in TVM's x86 conv schedules.
//! - **Plain** (everything else, and the fallback): element-wise stages are inlined into
//!   their consumers; each remaining stage fuses its outer spatial loops into one parallel
//!   loop and vectorizes its innermost spatial axis, split by the widest factor of at most
//!   the vector width that divides it and moved inside the reduction loops. For injective
//!   kernels (the glue) that is TVM's `schedule_injective`.
use ttdb_algo::ir::{Dag, Operation};
use ttdb_format::ansor::step::{
    Annotation, AnnotationStep, CacheWriteStep, ComputeAtStep, ComputeInlineStep, FuseStep,
    ReorderStep, SplitStep,
};
use ttdb_format::ansor::Step;

/// The default schedules for `dag`, best first: the caller runs the first that lowers.
pub fn default_schedules(dag: &Dag, lanes: i64) -> Vec<Vec<Step>> {
    register_tiled_steps(dag, lanes)
        .into_iter()
        .chain([default_steps(dag, lanes)])
        .collect()
}

/// Accumulator vectors a register tile may hold (16 vector registers on AVX2 and AVX-512
/// besides the broadcast input and the weight vector).
const MAX_TILE: i64 = 8;

/// The register-tiled schedule, when `dag` is one reduction stage followed only by
/// element-wise stages of its shape (else None).
fn register_tiled_steps(dag: &Dag, lanes: i64) -> Option<Vec<Step>> {
    let last = dag.stages.len().checked_sub(1)?;
    let computes: Vec<usize> = (0..dag.stages.len())
        .filter(|&i| dag.stages[i].compute().is_some())
        .collect();
    let reductions: Vec<usize> = computes
        .iter()
        .copied()
        .filter(|&i| !dag.stages[i].compute().unwrap().reduce_axes.is_empty())
        .collect();
    let &[r] = reductions.as_slice() else {
        return None;
    };
    let rc = dag.stages[r].compute()?;
    let extents: Vec<i64> = rc
        .axes
        .iter()
        .map(|a| a.const_extent())
        .collect::<Option<_>>()?;
    rc.reduce_axes
        .iter()
        .try_for_each(|a| a.const_extent().map(drop))?;
    let k = extents.len();
    if k < 2 || dag.stages[last].compute()?.axes.len() != k || dag.stages[last].shape() != extents {
        return None;
    }
    let vector = [16, 8, 4]
        .into_iter()
        .find(|&f| f <= lanes.max(4) && extents[k - 1] % f == 0)?;
    let tile = (2..=MAX_TILE)
        .rev()
        .find(|&t| extents[k - 2] % t == 0)
        .unwrap_or(1);
    let mut steps = Vec::new();
    for &i in &computes {
        if i != r && i != last {
            steps.push(Step::ComputeInline(ComputeInlineStep {
                stage_id: i as u32,
            }));
        }
    }
    // `acc` accumulates; `out` holds the tile loops (the reduction's own stage when it is
    // the output, after a cache write puts the accumulation in a stage of its own)
    let (acc, out) = if r == last {
        steps.push(Step::CacheWrite(CacheWriteStep {
            stage_id: r as u32,
            scope: "local".into(),
        }));
        (r as u32, r as u32 + 1)
    } else {
        (r as u32, last as u32)
    };
    let k = k as u32;
    // out: spatial 0..k-2, w = k-2, c = k-1  ->  0..k-2, w_o, w_i, c_o, c_i
    steps.push(Step::Split(SplitStep {
        stage_id: out,
        iter_id: k - 1,
        extent: extents[k as usize - 1],
        lengths: vec![vector],
        inner_to_outer: true,
    }));
    steps.push(Step::Split(SplitStep {
        stage_id: out,
        iter_id: k - 2,
        extent: extents[k as usize - 2],
        lengths: vec![tile],
        inner_to_outer: true,
    }));
    // -> 0..k-2, w_o, c_o, w_i, c_i; the first k fused into the parallel loop
    let mut order: Vec<u32> = (0..k - 1).collect();
    order.extend([k, k - 1, k + 1]);
    steps.push(Step::Reorder(ReorderStep {
        stage_id: out,
        after_ids: order,
    }));
    steps.push(Step::Fuse(FuseStep {
        stage_id: out,
        fused_ids: (0..k).collect(),
    }));
    let annotate = |stage_id, iter_id, annotation| {
        Step::Annotation(AnnotationStep {
            stage_id,
            iter_id,
            annotation,
        })
    };
    steps.push(annotate(out, 0, Annotation::Parallel));
    steps.push(Step::ComputeAt(ComputeAtStep {
        stage_id: acc,
        target_stage_id: out,
        target_iter_id: 0,
    }));
    steps.push(annotate(out, 2, Annotation::Vectorize));
    // acc: spatial 0..k, reductions k..k+m  ->  spatial 0..k-2, reductions, w, c
    let m = rc.reduce_axes.len() as u32;
    let mut order: Vec<u32> = (0..k - 2).collect();
    order.extend(k..k + m);
    order.extend([k - 2, k - 1]);
    steps.push(Step::Reorder(ReorderStep {
        stage_id: acc,
        after_ids: order,
    }));
    steps.push(annotate(acc, k - 2 + m, Annotation::Unroll));
    steps.push(annotate(acc, k - 1 + m, Annotation::Vectorize));
    Some(steps)
}

/// Fewer output elements than this run on one thread: a fork-join costs more than the work.
const MIN_PARALLEL_ELEMENTS: i64 = 16 * 1024;

/// The default steps for `dag` on a vector of `lanes` 32-bit elements; the output is the
/// last stage. Stages whose extents are not constant are left at root, unscheduled.
pub fn default_steps(dag: &Dag, lanes: i64) -> Vec<Step> {
    let mut steps = Vec::new();
    let last = dag.stages.len().saturating_sub(1);
    for (id, stage) in dag.stages.iter().enumerate() {
        let Operation::Compute(c) = &stage.op else {
            continue;
        };
        let id = id as u32;
        if id as usize != last && c.reduce_axes.is_empty() {
            steps.push(Step::ComputeInline(ComputeInlineStep { stage_id: id }));
            continue;
        }
        let extents: Option<Vec<i64>> = c.axes.iter().map(|a| a.const_extent()).collect();
        let Some(extents) = extents else { continue };
        let reduce = c.reduce_axes.len() as u32;
        let k = extents.len() as u32;
        if k == 0 {
            continue;
        }
        let inner = extents[k as usize - 1];
        let factor = [16, 8, 4]
            .into_iter()
            .find(|&f| f <= lanes.max(4) && inner % f == 0);
        let total: i64 = extents.iter().product();
        let parallel = reduce > 0 || total >= MIN_PARALLEL_ELEMENTS;
        // iterators: spatial 0..k, then the reduction's
        let outer = match factor {
            Some(f) => {
                steps.push(Step::Split(SplitStep {
                    stage_id: id,
                    iter_id: k - 1,
                    extent: inner,
                    lengths: vec![f],
                    inner_to_outer: true,
                }));
                // now: spatial 0..k-1, outer k-1, inner k, reductions k+1..; move the
                // vector lane inside the reductions
                if reduce > 0 {
                    let mut order: Vec<u32> = (0..k).collect();
                    order.extend(k + 1..=k + reduce);
                    order.push(k);
                    steps.push(Step::Reorder(ReorderStep {
                        stage_id: id,
                        after_ids: order,
                    }));
                }
                k
            }
            None => k,
        };
        // fuse the `outer` leading spatial iterators into one (iterator 0)
        if outer > 1 {
            steps.push(Step::Fuse(FuseStep {
                stage_id: id,
                fused_ids: (0..outer).collect(),
            }));
        }
        if parallel {
            steps.push(Step::Annotation(AnnotationStep {
                stage_id: id,
                iter_id: 0,
                annotation: Annotation::Parallel,
            }));
        }
        if factor.is_some() {
            steps.push(Step::Annotation(AnnotationStep {
                stage_id: id,
                iter_id: 1 + reduce,
                annotation: Annotation::Vectorize,
            }));
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttdb_algo::ops::{
        Anchor, EpilogueOp, Era, PoolAttrs, PoolKind, PoolLayout, Window2d, WorkloadSpec,
    };
    use ttdb_backend::loopnest::{kernel_to_string, Stmt};
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

    /// The sizes of the kernel's local allocations (the accumulator tiles).
    fn allocations(s: &Stmt, out: &mut Vec<String>) {
        match s {
            Stmt::Allocate { body, .. } => {
                out.push(format!("{s:?}").chars().take(120).collect());
                allocations(body, out)
            }
            Stmt::For { body, .. } | Stmt::Attr { body, .. } => allocations(body, out),
            Stmt::Seq(v) => v.iter().for_each(|x| allocations(x, out)),
            Stmt::IfThenElse { then_, else_, .. } => {
                allocations(then_, out);
                if let Some(e) = else_ {
                    allocations(e, out)
                }
            }
            _ => {}
        }
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
                Anchor::BatchMatmul,
                vec![],
                Era::V08,
                &[vec![2, 6, 5], vec![2, 8, 5]],
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
            let steps = register_tiled_steps(dag, 8).expect("register-tiled");
            let k = lower_steps(dag, &steps, &LowerOptions::default())
                .unwrap_or_else(|e| panic!("{e}\n{dag:?}"));
            let cmp = interpret_against_reference(dag, &k, 5, Some(100_000_000))
                .unwrap_or_else(|e| panic!("{e}\n{}", kernel_to_string(&k)));
            assert!(
                cmp.rel_err < 1e-5,
                "{}\n{}",
                cmp.rel_err,
                kernel_to_string(&k)
            );
            let mut a = Vec::new();
            allocations(&k.body, &mut a);
            println!("{}", kernel_to_string(&k));
        }
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
}
