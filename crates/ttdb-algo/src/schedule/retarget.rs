//! Transfer-tuning's basic move: the steps of a record tuned for one workload, replayed on
//! another workload of the same class (same op builder, era and epilogue, other sizes).
//!
//! Everything but the split lengths carries over (stage and loop ids depend only on the DAG's
//! structure). Each SP is adapted to the extent its loop has in the new workload: lengths are
//! clamped, innermost first (outermost first for nparts splits), to the largest divisor of
//! what remains of the extent, so the product divides the extent and no guard is needed; the
//! SP `extent` field is set to the new extent. FSP/FFSP follow the adapted SPs as before.
use super::divisors::{divisors, largest_divisor_at_most};
use super::{ReplayFailure, StageInit, State};
use ttdb_format::ansor::step::SplitStep;
use ttdb_format::ansor::Step;

/// The adapted steps, the state they give on the new workload, and what changed.
#[derive(Clone, Debug)]
pub struct Retargeted {
    pub steps: Vec<Step>,
    pub state: State,
    /// `(step index, old step, new step)` for every step that changed.
    pub changes: Vec<(usize, String, String)>,
}

/// Split lengths by clamping: each length to the largest divisor of the extent left after
/// the previous (inner, or outer for nparts) ones. The fallback of [`adapt_split_lengths`]
/// where the nearest-factorization search would be too big.
fn clamp_split_lengths(extent: i64, lengths: &[i64], inner_to_outer: bool) -> Vec<i64> {
    let mut out = vec![1; lengths.len()];
    let mut rest = extent.max(1);
    let order: Vec<usize> = if inner_to_outer {
        (0..lengths.len()).rev().collect()
    } else {
        (0..lengths.len()).collect()
    };
    for k in order {
        let l = largest_divisor_at_most(rest, lengths[k].max(1));
        out[k] = l;
        rest /= l;
    }
    out
}

/// Ansor's `max_innermost_split_factor`.
pub const MAX_INNERMOST: i64 = 64;

/// Split lengths for a loop of `extent`: the lengths, one per split level, whose product
/// divides `extent` (no guards needed) and which are nearest to `lengths` in log space
/// (sum of |ln(new / old)|, so 8 -> 7 is nearer than 8 -> 1); the innermost length stays
/// within max(64, its old value), Ansor's `max_innermost_split_factor`. Ties go to the
/// larger inner lengths (more work per inner loop).
pub fn adapt_split_lengths(extent: i64, lengths: &[i64], inner_to_outer: bool) -> Vec<i64> {
    if extent <= 0 || lengths.is_empty() {
        return lengths.iter().map(|&l| l.max(1)).collect();
    }
    // Hostile or huge extents: the exhaustive search is bounded, clamping is not.
    let n_div = if extent <= 1 << 24 {
        divisors(extent).len()
    } else {
        usize::MAX
    };
    if n_div == usize::MAX || (n_div as f64).powi(lengths.len() as i32 - 1) > 1e6 {
        return clamp_split_lengths(extent, lengths, inner_to_outer);
    }
    let want: Vec<f64> = lengths.iter().map(|&l| (l.max(1) as f64).ln()).collect();
    // With factor splits the last length is the innermost loop; with nparts splits the
    // innermost loop is the remainder, so no length is capped.
    let innermost = if inner_to_outer {
        lengths.len() - 1
    } else {
        usize::MAX
    };
    let cap = |i: usize| {
        if i == innermost {
            MAX_INNERMOST.max(lengths[i])
        } else {
            i64::MAX
        }
    };
    struct Search<'a> {
        want: &'a [f64],
        cap: &'a dyn Fn(usize) -> i64,
        best: (f64, Vec<i64>),
        cur: Vec<i64>,
    }
    fn go(s: &mut Search, i: usize, rest: i64, cost: f64) {
        if cost > s.best.0 + 1e-12 {
            return;
        }
        if i == s.want.len() {
            let better = cost < s.best.0 - 1e-12
                || (cost <= s.best.0 + 1e-12 && s.cur.iter().rev().gt(s.best.1.iter().rev()));
            if better {
                s.best = (cost, s.cur.clone());
            }
            return;
        }
        for d in divisors(rest) {
            if d > (s.cap)(i) {
                break;
            }
            s.cur.push(d);
            go(
                s,
                i + 1,
                rest / d,
                cost + ((d as f64).ln() - s.want[i]).abs(),
            );
            s.cur.pop();
        }
    }
    let mut s = Search {
        want: &want,
        cap: &cap,
        best: (f64::INFINITY, vec![1; lengths.len()]),
        cur: Vec::new(),
    };
    go(&mut s, 0, extent, 0.0);
    s.best.1
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
                let extent = state.loop_extent(sp.stage_id, sp.iter_id);
                match extent {
                    Some(e) => Step::Split(SplitStep {
                        extent: e,
                        lengths: adapt_split_lengths(e, &sp.lengths, sp.inner_to_outer),
                        ..sp.clone()
                    }),
                    None => Step::Split(SplitStep {
                        extent: 0,
                        ..sp.clone()
                    }),
                }
            }
            other => other.clone(),
        };
        // On error the whole re-targeting fails and the state is dropped.
        state.apply_or_spoil(&new).map_err(ReplayFailure::Step)?;
        if &new != step {
            changes.push((k, step.to_string(), new.to_string()));
        }
        out.push(new);
    }
    Ok(Retargeted {
        steps: out,
        state,
        changes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_divide_the_new_extent() {
        assert_eq!(adapt_split_lengths(512, &[32, 1, 8], true), vec![32, 1, 8]);
        // 14 with [32, 1, 8]: [2, 1, 7] and [14, 1, 1] are equally near; inner work wins.
        assert_eq!(adapt_split_lengths(14, &[32, 1, 8], true), vec![2, 1, 7]);
        assert_eq!(adapt_split_lengths(7, &[1, 1, 7], true), vec![1, 1, 7]);
        assert_eq!(adapt_split_lengths(1, &[16, 0], true), vec![1, 1]);
        for e in 1..60 {
            let l = adapt_split_lengths(e, &[5, 3, 8], true);
            assert_eq!(e % l.iter().product::<i64>(), 0, "{e} {l:?}");
        }
        // Huge extents fall back to clamping instead of searching.
        let l = adapt_split_lengths(1 << 40, &[3, 5, 7], true);
        assert_eq!((1i64 << 40) % l.iter().product::<i64>(), 0);
    }

    #[test]
    fn keeps_lengths_that_still_fit() {
        assert_eq!(adapt_split_lengths(512, &[32, 1, 8], true), vec![32, 1, 8]);
    }

    #[test]
    fn moves_to_the_nearest_divisors() {
        // 56 = 2^3 * 7: [4, 2, 8] -> [4, 2, 7] (one length moves by 8/7).
        assert_eq!(adapt_split_lengths(56, &[4, 2, 8], true), vec![4, 2, 7]);
        // 14 with [1, 1, 16]: 16 does not divide 14; the nearest is 14 (not 1, not 7).
        assert_eq!(adapt_split_lengths(14, &[1, 1, 16], true), vec![1, 1, 14]);
        // Prime extents leave only 1 and the extent.
        assert_eq!(
            7 % adapt_split_lengths(7, &[2, 2, 2], true)
                .iter()
                .product::<i64>(),
            0
        );
    }

    #[test]
    fn innermost_stays_at_most_64() {
        let l = adapt_split_lengths(4096, &[1, 1, 64], true);
        assert!(l[2] <= 64, "{l:?}");
        let l = adapt_split_lengths(128, &[1, 100], true);
        assert!(l[1] <= 100, "{l:?}");
    }

    #[test]
    fn nparts_splits_are_not_capped() {
        let l = adapt_split_lengths(200, &[100, 2], false);
        assert_eq!(l, vec![100, 2]);
    }
}
