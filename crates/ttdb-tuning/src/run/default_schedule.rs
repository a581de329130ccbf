//! The schedule a kernel runs when no stored one applies, as Ansor steps so that it replays
//! and lowers like any record. Element-wise stages are inlined into their consumers; each
//! remaining stage fuses its outer spatial loops into one parallel loop and vectorizes its
//! innermost spatial axis, split by the widest factor of at most the vector width that
//! divides it and moved inside the reduction loops. For injective kernels (the glue) that is
//! TVM's `schedule_injective`; for a reduction it is a plain parallel, vectorized loop nest,
//! far from a tuned one but much faster than the naive nest. Nothing is measured.
use ttdb_algo::ir::{Dag, Operation};
use ttdb_format::ansor::step::{
    Annotation, AnnotationStep, ComputeInlineStep, FuseStep, ReorderStep, SplitStep,
};
use ttdb_format::ansor::Step;

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
