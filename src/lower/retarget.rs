//! Transfer-tuning's basic move: the steps of a record tuned for one workload, replayed on
//! another workload of the same class (same op builder, era and epilogue, other sizes).
//!
//! Everything but the split lengths carries over (stage and loop ids depend only on the DAG's
//! structure). Each SP is adapted to the extent its loop has in the new workload: lengths are
//! clamped, innermost first (outermost first for nparts splits), to the largest divisor of
//! what remains of the extent, so the product divides the extent and no guard is needed; the
//! SP `extent` field is set to the new extent. FSP/FFSP follow the adapted SPs as before.
use crate::ansor::step::SplitStep;
use crate::ansor::Step;
use crate::schedule::{ReplayFailure, StageInit, State};

/// The adapted steps, the state they give on the new workload, and what changed.
#[derive(Clone, Debug)]
pub struct Retargeted {
    pub steps: Vec<Step>,
    pub state: State,
    /// `(step index, old step, new step)` for every step that changed.
    pub changes: Vec<(usize, String, String)>,
}

/// Largest divisor of `n` (>= 1) that is at most `cap` (>= 1).
fn largest_divisor_at_most(n: i64, cap: i64) -> i64 {
    if cap >= n {
        return n;
    }
    let mut best = 1;
    let mut d = 1i64;
    while d.saturating_mul(d) <= n {
        if n % d == 0 {
            for x in [d, n / d] {
                if x <= cap && x > best {
                    best = x;
                }
            }
        }
        d += 1;
    }
    best
}

/// Split lengths for a loop of `extent`: each length clamped to the largest divisor of the
/// extent left after the previous (inner, or outer for nparts) ones, so the product divides
/// `extent`. Lengths below 1 become 1.
pub fn adapt_split_lengths(extent: i64, lengths: &[i64], inner_to_outer: bool) -> Vec<i64> {
    let mut out = vec![1; lengths.len()];
    let mut rest = extent.max(1);
    let order: Vec<usize> = if inner_to_outer { (0..lengths.len()).rev().collect() } else { (0..lengths.len()).collect() };
    for k in order {
        let l = largest_divisor_at_most(rest, lengths[k].max(1));
        out[k] = l;
        rest /= l;
    }
    out
}

/// Replays `steps` on `inits` (a workload of the same class as the record's), adapting every
/// SP to the extents of the new workload. Fails like [`crate::schedule::replay`] when a step
/// cannot apply even after adaptation.
pub fn retarget_steps(inits: &[StageInit], steps: &[Step]) -> Result<Retargeted, ReplayFailure> {
    let mut state = State::new(inits).map_err(ReplayFailure::Init)?;
    let mut out = Vec::with_capacity(steps.len());
    let mut changes = Vec::new();
    for (k, step) in steps.iter().enumerate() {
        let new = match step {
            Step::Split(sp) => {
                let extent = state
                    .stages()
                    .get(sp.stage_id as usize)
                    .and_then(|s| s.iters.get(sp.iter_id as usize))
                    .and_then(|it| it.extent);
                match extent {
                    Some(e) => Step::Split(SplitStep {
                        extent: e,
                        lengths: adapt_split_lengths(e, &sp.lengths, sp.inner_to_outer),
                        ..sp.clone()
                    }),
                    None => Step::Split(SplitStep { extent: 0, ..sp.clone() }),
                }
            }
            other => other.clone(),
        };
        state.apply(&new).map_err(ReplayFailure::Step)?;
        if &new != step {
            changes.push((k, step.to_string(), new.to_string()));
        }
        out.push(new);
    }
    Ok(Retargeted { steps: out, state, changes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_divide_the_new_extent() {
        assert_eq!(adapt_split_lengths(512, &[32, 1, 8], true), vec![32, 1, 8]);
        // 14: innermost 8 -> 7, then 1, then 32 -> 2
        assert_eq!(adapt_split_lengths(14, &[32, 1, 8], true), vec![2, 1, 7]);
        assert_eq!(adapt_split_lengths(7, &[1, 1, 7], true), vec![1, 1, 7]);
        assert_eq!(adapt_split_lengths(6, &[4, 4], false), vec![3, 2]);
        assert_eq!(adapt_split_lengths(1, &[16, 0], true), vec![1, 1]);
        for e in 1..60 {
            let l = adapt_split_lengths(e, &[5, 3, 8], true);
            assert_eq!(e % l.iter().product::<i64>(), 0, "{e} {l:?}");
        }
        assert_eq!(largest_divisor_at_most(1 << 40, 3), 2);
    }
}
