//! A cheap static estimate for ranking candidates before anything is measured. Higher is
//! better; only the order among one kernel's candidates matters.
//!
//! Four factors, each in (0, 1] except the source's throughput:
//! * **parallel balance**: the parallel loop's extent over whole rounds of the machine's
//!   cores (a 3-iteration parallel loop on 2 cores wastes a quarter);
//! * **vector-lane use**: vectorized loop extents over whole vectors;
//! * **tile footprint**: the innermost tile's working set against the L2 cache;
//! * **adaptation**: the share of split steps that survived re-targeting unchanged;
//!
//! times the source record's per-core throughput where it was tuned (a schedule that ran
//! fast on its own workload is a better bet).
use super::{MatchOptions, SourceRecord};
use ttdb_algo::ir::Dag;
use ttdb_algo::schedule::State;
use ttdb_format::ansor::{Annotation, Step};

/// L2 cache per core assumed by the footprint factor (bytes).
pub const L2_BYTES: f64 = 512.0 * 1024.0;

/// Fraction of the last round of parallel chunks that is used.
pub fn parallel_balance(state: &State, cores: usize) -> f64 {
    let cores = cores.max(1) as f64;
    let mut best: Option<f64> = None;
    for st in state.stages() {
        for it in &st.iters {
            if it.annotation == Annotation::Parallel {
                if let Some(e) = it.extent.filter(|&e| e > 0) {
                    let e = e as f64;
                    let b = e / ((e / cores).ceil() * cores);
                    best = Some(best.map_or(b, |x: f64| x.max(b)));
                }
            }
        }
    }
    // No parallel loop at all: one core of `cores` works.
    best.unwrap_or(1.0 / cores)
}

/// Mean use of vector lanes over vectorized loops of known extent (1/lanes if none).
pub fn lane_use(state: &State, steps: &[Step], lanes: i64) -> f64 {
    let lanes = lanes.max(1);
    let use_of = |e: i64| {
        let vectors = (e + lanes - 1) / lanes;
        e as f64 / (vectors * lanes) as f64
    };
    let mut uses = Vec::new();
    for st in state.stages() {
        for it in &st.iters {
            if it.annotation == Annotation::Vectorize {
                if let Some(e) = it.extent {
                    uses.push(use_of(e));
                }
            }
        }
    }
    // Loops of attached stages have no extent in the state: their vectorized loop is the
    // innermost part of a split, whose length the SP step gives.
    if uses.is_empty() {
        for s in steps {
            if let Step::Split(sp) = s {
                if let Some(&inner) = sp.lengths.last() {
                    if steps.iter().any(|a| matches!(a, Step::Annotation(an) if an.stage_id == sp.stage_id && an.annotation == Annotation::Vectorize)) {
                        uses.push(use_of(inner.max(1)));
                    }
                }
            }
        }
    }
    if uses.is_empty() {
        return 1.0 / lanes as f64;
    }
    uses.iter().sum::<f64>() / uses.len() as f64
}

/// Working set of the innermost tile of the most-split stage, in bytes (f32): the output
/// tile (product of the inner split lengths of spatial loops) plus operand tiles estimated
/// from the reduction tile.
pub fn tile_footprint(steps: &[Step], state: &State) -> f64 {
    let mut per_stage: std::collections::HashMap<u32, Vec<&ttdb_format::ansor::step::SplitStep>> =
        Default::default();
    for s in steps {
        if let Step::Split(sp) = s {
            per_stage.entry(sp.stage_id).or_default().push(sp);
        }
    }
    let Some((&stage, splits)) = per_stage
        .iter()
        .max_by_key(|(id, v)| (v.len(), std::cmp::Reverse(**id)))
    else {
        return 0.0;
    };
    let reduction = |sp: &ttdb_format::ansor::step::SplitStep| {
        // Splits are recorded on the stage's original loops: spatial loops first.
        let n_spatial = state.stages().get(stage as usize).map_or(0, |st| {
            st.iters
                .iter()
                .filter(|i| i.kind == ttdb_algo::schedule::IterKind::Spatial)
                .count()
        });
        sp.iter_id as usize >= n_spatial && sp.lengths.len() == 1
    };
    let (mut out_tile, mut red_tile) = (1.0f64, 1.0f64);
    for sp in splits {
        let inner: i64 = sp.lengths.iter().skip(1).product::<i64>().max(1);
        if reduction(sp) {
            red_tile *= sp.lengths.iter().product::<i64>().max(1) as f64;
        } else {
            out_tile *= inner as f64;
        }
    }
    4.0 * (out_tile + 2.0 * red_tile * out_tile.sqrt())
}

fn footprint_factor(bytes: f64) -> f64 {
    if bytes <= L2_BYTES {
        1.0
    } else {
        L2_BYTES / bytes
    }
}

/// The source's per-core throughput where it was tuned, in GFLOP/s (1 if unknown).
fn source_throughput(source: &SourceRecord) -> f64 {
    let cores = ttdb_format::ansor::Record::parse(&source.raw)
        .ok()
        .and_then(|r| r.task.num_cores())
        .unwrap_or(1)
        .max(1) as f64;
    match source.source_flops {
        Some(f) if f > 0.0 && source.mean_cost > 0.0 => f / source.mean_cost / 1e9 / cores,
        _ => 1.0,
    }
}

pub fn estimate(
    _dag: &Dag,
    steps: &[Step],
    state: &State,
    changed: usize,
    source: &SourceRecord,
    opts: &MatchOptions,
) -> f64 {
    let splits = steps
        .iter()
        .filter(|s| matches!(s, Step::Split(_)))
        .count()
        .max(1);
    let adaptation = 1.0 - 0.5 * (changed as f64 / splits as f64).min(1.0);
    parallel_balance(state, opts.cores)
        * lane_use(state, steps, opts.lanes)
        * footprint_factor(tile_footprint(steps, state))
        * adaptation
        * source_throughput(source).max(1e-3)
}
