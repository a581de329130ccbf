//! The schedule a kernel runs when no stored one applies (`ttdb run`), and the baseline
//! `apply` measures candidates against, as Ansor steps so that it replays and lowers like
//! any record. Nothing is measured here.
//!
//! - **Register-tiled** (a kernel with one reduction and an element-wise epilogue: convs,
//!   pools, matmuls): the output's innermost axis is split by the vector width and the one
//!   before it by a small tile; the outer loops are fused into one parallel loop, and the
//!   reduction is computed at that loop into a tile of accumulators (cache-written when it
//!   is itself the output), with its reduction loops outside the unrolled tile and the
//!   vector. The accumulators stay in registers, as in TVM's x86 conv schedules.
//! - **Row-reduced** (a matmul whose operands are both contiguous along the reduction, as
//!   dense `[N, K]` weights and batch_matmul NT are): the reduction split by the vector
//!   width and factored out (`rfactor`), so each output of a tile accumulates a vector
//!   along K from two contiguous loads, summed once at the end; the tile and the parallel
//!   outer loop as above. Vectorizing the output axis instead would load the weights with
//!   a stride of K.
//! - **Plain** (everything else, and the fallback): element-wise stages are inlined into
//!   their consumers; each remaining stage fuses its outer spatial loops into one parallel
//!   loop and vectorizes its innermost spatial axis, split by the widest factor of at most
//!   the vector width that divides it and moved inside the reduction loops. For injective
//!   kernels (the glue) that is TVM's `schedule_injective`.
use std::sync::atomic::{AtomicBool, Ordering};
use ttdb_algo::ir::{Body, Dag, Expr, Operation};
use ttdb_format::ansor::step::{
    Annotation, AnnotationStep, CacheWriteStep, ComputeAtStep, ComputeInlineStep, FuseStep,
    ReorderStep, RfactorStep, SplitStep,
};
use ttdb_format::ansor::Step;

/// The default schedules for `dag`, best first: the caller runs the first that lowers.
pub fn default_schedules(dag: &Dag, lanes: i64) -> Vec<Vec<Step>> {
    row_reduced_steps(dag, lanes)
        .into_iter()
        .chain(register_tiled_steps(dag, lanes))
        .chain([default_steps(dag, lanes)])
        .collect()
}

/// The first of [`default_schedules`] that lowers; None when none does (only the naive loop
/// nest is left).
pub fn lowering_default(dag: &Dag, lanes: i64) -> Option<Vec<Step>> {
    let opts = ttdb_backend::lower::LowerOptions::default();
    default_schedules(dag, lanes)
        .into_iter()
        .find(|steps| ttdb_backend::lower::lower_steps(dag, steps, &opts).is_ok())
}

/// Accumulator vectors a register tile may hold (16 vector registers on AVX2 and AVX-512
/// besides the broadcast input and the weight vector).
const MAX_TILE: i64 = 8;

/// The one reduction stage of `dag` and its spatial extents, when every later compute stage
/// is element-wise and the last one has the reduction's shape.
fn single_reduction(dag: &Dag) -> Option<(usize, Vec<i64>)> {
    let last = dag.stages.len().checked_sub(1)?;
    let reductions: Vec<usize> = (0..dag.stages.len())
        .filter(|&i| {
            dag.stages[i]
                .compute()
                .is_some_and(|c| !c.reduce_axes.is_empty())
        })
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
    let out = dag.stages[last].compute()?;
    (out.axes.len() == extents.len() && dag.stages[last].shape() == extents).then_some((r, extents))
}

/// Inlines every compute stage but `keep` and the last.
fn inline_others(dag: &Dag, keep: usize, steps: &mut Vec<Step>) {
    let last = dag.stages.len() - 1;
    for i in 0..dag.stages.len() {
        if dag.stages[i].compute().is_some() && i != keep && i != last {
            steps.push(Step::ComputeInline(ComputeInlineStep {
                stage_id: i as u32,
            }));
        }
    }
}

fn annotate(stage_id: u32, iter_id: u32, annotation: Annotation) -> Step {
    Step::Annotation(AnnotationStep {
        stage_id,
        iter_id,
        annotation,
    })
}

fn split(stage_id: u32, iter_id: u32, extent: i64, inner: i64) -> Step {
    Step::Split(SplitStep {
        stage_id,
        iter_id,
        extent,
        lengths: vec![inner],
        inner_to_outer: true,
    })
}

/// Every tensor read in `e`, with its indices.
fn loads<'a>(e: &'a Expr, out: &mut Vec<&'a [Expr]>) {
    match e {
        Expr::Load { indices, .. } => {
            out.push(indices);
            indices.iter().for_each(|i| loads(i, out));
        }
        Expr::Binary { a, b, .. } => {
            loads(a, out);
            loads(b, out);
        }
        Expr::Not(a) | Expr::Cast { value: a, .. } => loads(a, out),
        Expr::Select {
            cond,
            then,
            otherwise,
        } => {
            loads(cond, out);
            loads(then, out);
            loads(otherwise, out);
        }
        Expr::Call { args, .. } => args.iter().for_each(|a| loads(a, out)),
        Expr::IntImm { .. } | Expr::FloatImm { .. } | Expr::Var(_) => {}
    }
}

/// The row-reduced schedule, when `dag` is a matmul (one reduction axis, the last index of
/// every tensor it reads) followed only by element-wise stages of its shape.
fn row_reduced_steps(dag: &Dag, lanes: i64) -> Option<Vec<Step>> {
    let (r, extents) = single_reduction(dag)?;
    let rc = dag.stages[r].compute()?;
    let [k_axis] = rc.reduce_axes.as_slice() else {
        return None;
    };
    let Body::Reduce { source, .. } = &rc.body else {
        return None;
    };
    let mut reads = Vec::new();
    loads(source, &mut reads);
    let along_k = |ix: &&[Expr]| matches!(ix.last(), Some(Expr::Var(v)) if *v == k_axis.name);
    if reads.len() != 2 || !reads.iter().all(along_k) {
        return None;
    }
    let k_extent = k_axis.const_extent()?;
    let vector = [16, 8, 4]
        .into_iter()
        .find(|&f| f <= lanes.max(4) && k_extent % f == 0)?;
    let n = extents.len();
    if n < 2 {
        return None;
    }
    let (rows, cols) = (extents[n - 2], extents[n - 1]);
    // up to 8 vector accumulators: 2 rows x 4 columns, or 8 columns of a single row
    let row_tile = [2, 1].into_iter().find(|t| rows % t == 0).unwrap_or(1);
    let col_tile = (1..=8 / row_tile)
        .rev()
        .find(|t| cols % t == 0)
        .unwrap_or(1);
    let last = dag.stages.len() - 1;
    let mut steps = Vec::new();
    inline_others(dag, r, &mut steps);
    let n = n as u32;
    let r = r as u32;
    // dense: spatial 0..n, k = n  ->  k_o = n, k_i = n + 1; rfactor k_i as the last spatial
    // axis of `r` (the partial sums), `r + 1` sums them; later stages shift by one
    steps.push(split(r, n, k_extent, vector));
    steps.push(Step::Rfactor(RfactorStep {
        stage_id: r,
        iter_id: n + 1,
        factor_iter_id: n,
    }));
    let (partial, total) = (r, r + 1);
    let out = if r as usize == last {
        total
    } else {
        last as u32 + 1
    };
    // out: 0..n-2, i, j (, v)  ->  0..n-2, i_o, j_o, i_t, j_t (, v), the first n fused
    steps.push(split(out, n - 1, cols, col_tile));
    steps.push(split(out, n - 2, rows, row_tile));
    let mut order: Vec<u32> = (0..n - 1).collect();
    order.extend([n, n - 1, n + 1]);
    if out == total {
        order.push(n + 2);
    }
    steps.push(Step::Reorder(ReorderStep {
        stage_id: out,
        after_ids: order,
    }));
    steps.push(Step::Fuse(FuseStep {
        stage_id: out,
        fused_ids: (0..n).collect(),
    }));
    steps.push(annotate(out, 0, Annotation::Parallel));
    if out != total {
        steps.push(Step::ComputeAt(ComputeAtStep {
            stage_id: total,
            target_stage_id: out,
            target_iter_id: 0,
        }));
    }
    steps.push(Step::ComputeAt(ComputeAtStep {
        stage_id: partial,
        target_stage_id: out,
        target_iter_id: 0,
    }));
    // partial: 0..n-2, i, j, k_i (spatial), k_o  ->  0..n-2, k_o, i, j, k_i
    let mut order: Vec<u32> = (0..n - 2).collect();
    order.extend([n + 1, n - 2, n - 1, n]);
    steps.push(Step::Reorder(ReorderStep {
        stage_id: partial,
        after_ids: order,
    }));
    steps.push(annotate(partial, n - 1, Annotation::Unroll));
    steps.push(annotate(partial, n, Annotation::Unroll));
    steps.push(annotate(partial, n + 1, Annotation::Vectorize));
    Some(steps)
}

/// The register-tiled schedule, when `dag` is one reduction stage followed only by
/// element-wise stages of its shape (else None).
fn register_tiled_steps(dag: &Dag, lanes: i64) -> Option<Vec<Step>> {
    let (r, extents) = single_reduction(dag)?;
    let rc = dag.stages[r].compute()?;
    let last = dag.stages.len() - 1;
    let k = extents.len();
    if k < 2 {
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
    inline_others(dag, r, &mut steps);
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
    steps.push(split(out, k - 1, extents[k as usize - 1], vector));
    steps.push(split(out, k - 2, extents[k as usize - 2], tile));
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

/// Whether small stages stay on one thread ([`MIN_PARALLEL_ELEMENTS`]); off, every stage
/// with an outer loop is parallel, as before the threshold (an ablation switch, read by
/// [`default_steps`] only).
static SERIAL_SMALL_WORK: AtomicBool = AtomicBool::new(true);

/// Whether default schedules keep stages below [`MIN_PARALLEL_ELEMENTS`] output elements on
/// one thread, process-wide: for ablations of the launch cost (`ttdb --serial-small-work 0`).
pub fn set_serial_small_work(on: bool) {
    SERIAL_SMALL_WORK.store(on, Ordering::Relaxed);
}

/// The smallest stage (in output elements) that default schedules run in parallel.
fn min_parallel_elements() -> i64 {
    if SERIAL_SMALL_WORK.load(Ordering::Relaxed) {
        MIN_PARALLEL_ELEMENTS
    } else {
        1
    }
}

/// A parallel loop of at least this many iterations is long enough: the runtime cuts it into
/// 4 chunks per thread.
const MIN_PARALLEL_EXTENT: i64 = 128;

/// An injective stage (the glue: layout transforms, transposes, element-wise ops). The
/// vector is the innermost axis split by the widest vector width that divides it (a NCHW32c
/// -> NCHW24c transform's loads stay contiguous that way, a longer vector's would not);
/// else the shortest suffix of axes whose product a multiple of the innermost extent and of
/// a vector width divides, fused and split by that multiple (a NCHW input to NCHW3c: `w·c`
/// by 48, so that each vector's lanes read at offsets known at compile time; only where the
/// vector stays within rows, [`lanes_stay_in_rows`], else the stage stays scalar). Only as many
/// leading axes are fused into the parallel loop as it takes to give it
/// [`MIN_PARALLEL_EXTENT`] iterations: the index of a fused loop is a chain of divisions,
/// paid once per iteration of it, and the loops under it keep plain strides. Before, every
/// axis but the vector's was fused, and an innermost extent no width divides (NCHW3c) left
/// the stage scalar: mobilenet_v2's input transform took 0.24 ms for 600 KB.
fn injective_steps(
    id: u32,
    extents: &[i64],
    lanes: i64,
    min_parallel: i64,
    better_inner: impl FnOnce() -> Option<usize>,
    steps: &mut Vec<Step>,
) {
    let k = extents.len();
    if extents.iter().any(|&e| e <= 0) {
        return;
    }
    let inner = extents[k - 1];
    let widths = || [16, 8, 4].into_iter().filter(|&f| f <= lanes.max(4));
    let vector = (0..k)
        .rev()
        .flat_map(|j| widths().map(move |f| (j, f)))
        .find_map(|(j, f)| {
            let v = if j == k - 1 { f } else { lcm(inner, f) };
            let p: i64 = extents[j..].iter().product();
            (v <= 4 * lanes.max(4) && p % v == 0 && lanes_stay_in_rows(&extents[j..], v))
                .then_some((j, v))
        });
    // after fusing the vector's axes: `axes` iterators, the vector's (if any) last
    let mut axes: Vec<i64> = match vector {
        Some((j, v)) => {
            if j + 1 < k {
                steps.push(Step::Fuse(FuseStep {
                    stage_id: id,
                    fused_ids: (j as u32..k as u32).collect(),
                }));
            }
            let p: i64 = extents[j..].iter().product();
            steps.push(split(id, j as u32, p, v));
            extents[..j].iter().copied().chain([p / v, v]).collect()
        }
        // no vector: the axis the loads read best innermost, when it is not the last
        None => match better_inner() {
            Some(j) => {
                let mut order: Vec<u32> = (0..k as u32).filter(|&i| i != j as u32).collect();
                order.push(j as u32);
                steps.push(Step::Reorder(ReorderStep {
                    stage_id: id,
                    after_ids: order.clone(),
                }));
                order.iter().map(|&i| extents[i as usize]).collect()
            }
            None => extents.to_vec(),
        },
    };
    let total: i64 = extents.iter().product();
    let serial = usize::from(vector.is_some());
    let outer = axes.len() - serial;
    if total >= min_parallel && outer > 0 {
        let mut m = 1;
        while m < outer && axes[..m].iter().product::<i64>() < MIN_PARALLEL_EXTENT {
            m += 1;
        }
        if m > 1 {
            steps.push(Step::Fuse(FuseStep {
                stage_id: id,
                fused_ids: (0..m as u32).collect(),
            }));
            let fused: i64 = axes.drain(..m).product();
            axes.insert(0, fused);
        }
        steps.push(annotate(id, 0, Annotation::Parallel));
    }
    if vector.is_some() {
        steps.push(annotate(id, axes.len() as u32 - 1, Annotation::Vectorize));
    }
}

/// Whether a vector of `v` lanes over the fused `axes`, starting at a multiple of `v`,
/// covers whole rows of the axes inside the outermost one it reaches and never wraps that
/// one: then every lane's index along each axis is the vector's plus a constant. A vector
/// that wraps (56 lanes over 7 x 7 rows) computes a division per lane and gathers: a NCHWc
/// -> NCHW transform of regnet's 440 x 7 x 7 ran at 2.5 GB/s that way.
fn lanes_stay_in_rows(axes: &[i64], v: i64) -> bool {
    let mut period = 1;
    for &e in axes.iter().rev() {
        if v <= period * e {
            return v % period == 0 && e % (v / period) == 0;
        }
        period *= e;
    }
    false
}

fn lcm(a: i64, b: i64) -> i64 {
    let gcd = |mut a: i64, mut b: i64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    a / gcd(a, b) * b
}

/// The default steps for `dag` on a vector of `lanes` 32-bit elements; the output is the
/// last stage. Stages whose extents are not constant are left at root, unscheduled.
pub fn default_steps(dag: &Dag, lanes: i64) -> Vec<Step> {
    default_steps_with(dag, lanes, min_parallel_elements())
}

/// [`default_steps`], with stages of fewer than `min_parallel` output elements on one thread.
fn default_steps_with(dag: &Dag, lanes: i64, min_parallel: i64) -> Vec<Step> {
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
        if reduce == 0 {
            let better_inner = || {
                let reads = crate::search::contiguity::axis_reads(dag)?;
                crate::search::contiguity::better_inner_axis(&reads, &extents)
            };
            injective_steps(id, &extents, lanes, min_parallel, better_inner, &mut steps);
            continue;
        }
        let inner = extents[k as usize - 1];
        let factor = [16, 8, 4]
            .into_iter()
            .find(|&f| f <= lanes.max(4) && inner % f == 0);
        let total: i64 = extents.iter().product();
        let parallel = reduce > 0 || total >= min_parallel;
        // iterators: spatial 0..k, then the reduction's
        let outer = match factor {
            Some(f) => {
                steps.push(split(id, k - 1, inner, f));
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
            steps.push(annotate(id, 0, Annotation::Parallel));
        }
        if factor.is_some() {
            steps.push(annotate(id, 1 + reduce, Annotation::Vectorize));
        }
    }
    steps
}

#[cfg(test)]
#[path = "default_schedule_tests.rs"]
mod tests;
