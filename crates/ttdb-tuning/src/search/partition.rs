//! Which core computes which part of an NCHWc conv's output, and the variant of a schedule
//! that splits its parallel loop over output rows instead of channel chunks.
//!
//! A schedule's outer tile of `n, oc_chunk, oh, ow` is fused into its parallel loop, so the
//! cores share the work channel chunks first. Alone that costs nothing. In a model the next
//! conv reads every channel of the rows it computes: split by channels, half of its input
//! sits in the other core's cache; split by rows, a 1x1 conv reads exactly the rows its core
//! wrote (a 3x3 conv a row more). Measured on resnet50 (twentieth session,
//! docs/measurements.md): nine chosen records re-split by rows ran the model 5% faster,
//! layer 3's 1x1 convs 0.41 -> 0.38 ms. A kernel timed alone cannot show this, so the
//! variant is measured after a model's search and the model decides
//! (`crate::run::in_model`).
use ttdb_algo::schedule::{replay, StageInit, State};
use ttdb_format::ansor::step::SplitStep;
use ttdb_format::ansor::{Annotation, Step};

/// TVM's names of the NCHWc conv's output axes the variant moves.
const CHANNEL_AXIS: &str = "oc_chunk";
const ROW_AXIS: &str = "oh";

/// `steps` with the parallel loop over output rows: the outer tile of the channel-chunk
/// axis folded into the next level, and the outer tile of the rows grown to at least
/// `threads` (from the outer levels' factors). `None` when that is what `steps` do already,
/// when they tile no NCHWc conv (or not with exact splits), or when the parallel loop would
/// leave cores idle: its extent must divide among `threads` or be at least four per core.
pub fn rows_across_cores(inits: &[StageInit], steps: &[Step], threads: usize) -> Option<Vec<Step>> {
    let threads = threads as i64;
    if threads < 2 {
        return None;
    }
    let (channel, row) = channel_and_row_splits(inits, steps)?;
    let mut out = steps.to_vec();
    let (Step::Split(c), Step::Split(r)) = (&steps[channel], &steps[row]) else {
        return None;
    };
    let (mut c, mut r) = (c.clone(), r.clone());
    let c_outer = exact_outer(&c)?;
    let mut r_outer = exact_outer(&r)?;
    if c_outer == 1 && r_outer >= threads {
        return None;
    }
    c.lengths[0] *= c_outer;
    // Grow the rows' outer tile from the outer levels (never the innermost, the register
    // tile), smallest prime factors first.
    let levels = r.lengths.len();
    for j in 0..levels.saturating_sub(1) {
        while r_outer < threads && r.lengths[j] > 1 {
            let p = smallest_prime_factor(r.lengths[j]);
            r.lengths[j] /= p;
            r_outer *= p;
        }
    }
    if r_outer < threads {
        return None;
    }
    out[channel] = Step::Split(c);
    out[row] = Step::Split(r);
    let state = replay(inits, &out).ok()?;
    let parallel = parallel_extent(&state)?;
    (parallel % threads == 0 || parallel >= 4 * threads).then_some(out)
}

/// The indices of the first SP of the channel-chunk axis and of the row axis, on one stage.
fn channel_and_row_splits(inits: &[StageInit], steps: &[Step]) -> Option<(usize, usize)> {
    let mut state = State::new(inits).ok()?;
    let (mut channel, mut row) = (None::<(usize, u32)>, None::<(usize, u32)>);
    for (i, step) in steps.iter().enumerate() {
        if let Step::Split(sp) = step {
            match axis_name(&state, sp) {
                Some(CHANNEL_AXIS) if channel.is_none() => channel = Some((i, sp.stage_id)),
                Some(ROW_AXIS) if row.is_none() => row = Some((i, sp.stage_id)),
                _ => {}
            }
        }
        state.apply_or_spoil(step).ok()?;
    }
    let ((c, cs), (r, rs)) = (channel?, row?);
    (cs == rs).then_some((c, r))
}

/// The op axis an SP splits, when its loop is one whole axis.
fn axis_name<'s>(state: &'s State, sp: &SplitStep) -> Option<&'s str> {
    let stage = state.stages().get(sp.stage_id as usize)?;
    let it = stage.iters.get(sp.iter_id as usize)?;
    match it.source_axes[..] {
        [axis] if it.extent == Some(sp.extent) => {
            stage.op.axes().get(axis).map(|a| a.te_name.as_str())
        }
        _ => None,
    }
}

/// The outer loop's extent of a split whose lengths divide its extent.
fn exact_outer(sp: &SplitStep) -> Option<i64> {
    let product: i64 = sp.lengths.iter().product();
    (sp.inner_to_outer && product > 0 && sp.extent % product == 0).then(|| sp.extent / product)
}

fn smallest_prime_factor(n: i64) -> i64 {
    (2..)
        .take_while(|p| p * p <= n)
        .find(|p| n % p == 0)
        .unwrap_or(n)
}

/// The iterations the cores share: the product of the parallel loops' extents (one fused
/// loop in a sketch's schedules).
fn parallel_extent(state: &State) -> Option<i64> {
    let extents: Vec<i64> = (state.stages().iter())
        .flat_map(|s| s.iters.iter())
        .filter(|it| it.annotation == Annotation::Parallel)
        .map(|it| it.extent)
        .collect::<Option<_>>()?;
    (!extents.is_empty()).then(|| extents.iter().product())
}

#[cfg(test)]
mod tests;
