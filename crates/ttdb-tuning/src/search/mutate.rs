//! The evolutionary search's mutations (TVM `sketch_policy_rules.cc`, weights from
//! `sketch_policy.cc`): tile size 0.90, auto-unroll 0.04, compute location 0.05, parallel
//! granularity 0.01. A mutation returns a new step list or `None` when it found nothing
//! to change; the caller replays it (an invalid result is dropped, as in TVM).
//!
//! Parallel granularity moves Droplet's fuse knob ([`super::knobs`]) to a random other
//! value, so both searches share one definition of what that FU may become. Compute
//! location picks another of the initial population's candidate loops. Tile size moves a factor between the levels of one split,
//! which keeps the product of a dividing split unchanged.
use super::init::compute_location_candidates;
use super::init::{MAX_INNERMOST_SPLIT, UNROLL_CHOICES};
use super::knobs::{KnobKind, Space};
use super::rng::Rng;
use super::sketch::{is_tiled, Analysis};
use ttdb_algo::ir::Dag;
use ttdb_algo::schedule::{replay, StageInit};
use ttdb_format::ansor::Step;

/// The mutation kinds, with TVM's weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    TileSize,
    AutoUnroll,
    ComputeLocation,
    Parallel,
}

pub const WEIGHTS: [(Mutation, f64); 4] = [
    (Mutation::TileSize, 0.90),
    (Mutation::AutoUnroll, 0.04),
    (Mutation::ComputeLocation, 0.05),
    (Mutation::Parallel, 0.01),
];

/// Draws a mutation kind by weight.
pub fn pick(rng: &mut Rng) -> Mutation {
    let mut x = rng.unit() * WEIGHTS.iter().map(|w| w.1).sum::<f64>();
    for (m, w) in WEIGHTS {
        if x < w {
            return m;
        }
        x -= w;
    }
    Mutation::TileSize
}

fn divisors_above_one(n: i64) -> Vec<i64> {
    (2..=n).filter(|d| n % d == 0).take(64).collect()
}

/// MutateTileSize: in a random SP whose lengths divide its extent, or tile an awkward one
/// padded (`init::padded_extents`), move a random factor (> 1) of one level to another;
/// the innermost level stays <= 64. A padded split keeps its padded extent.
pub fn mutate_tile_size(steps: &[Step], rng: &mut Rng) -> Option<Vec<Step>> {
    // (step, the extent its lengths tile)
    let mut splits: Vec<(usize, i64)> = steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            Step::Split(sp) if sp.extent > 1 && !sp.lengths.is_empty() => {
                Some((i, tiled_extent(sp.extent, &sp.lengths)?))
            }
            _ => None,
        })
        .collect();
    rng.shuffle(&mut splits);
    for (i, tiled) in splits {
        let Step::Split(sp) = &steps[i] else { continue };
        let inner: i64 = sp.lengths.iter().product();
        // [outer, l1, ..., ln]: the outer part is what the lengths leave of the extent.
        let mut levels = vec![tiled / inner];
        levels.extend(&sp.lengths);
        let n = levels.len();
        let mut order: Vec<usize> = (0..n).collect();
        rng.shuffle(&mut order);
        for &src in &order {
            if levels[src] <= 1 {
                continue;
            }
            let dst = (src + 1 + rng.below(n - 1)) % n;
            let divs = divisors_above_one(levels[src]);
            let d = divs[rng.below(divs.len())];
            let mut new = levels.clone();
            new[src] /= d;
            new[dst] *= d;
            if new[n - 1] > MAX_INNERMOST_SPLIT {
                continue;
            }
            let mut out = steps.to_vec();
            if let Step::Split(sp) = &mut out[i] {
                sp.lengths = new[1..].to_vec();
            }
            return Some(out);
        }
    }
    None
}

/// The extent a split's lengths tile: its own when they divide it, else the padded extent
/// (`init::padded_extents`) they divide; None for other lengths (as an imported record may
/// have), which mutation leaves alone.
fn tiled_extent(extent: i64, lengths: &[i64]) -> Option<i64> {
    let inner = lengths.iter().product::<i64>();
    if inner <= 0 {
        return None;
    }
    std::iter::once(extent)
        .chain(super::init::padded_extents(extent))
        .find(|e| e % inner == 0)
}

/// Moves a random knob of the kinds `which` accepts to a random other value.
fn mutate_knob(
    inits: &[StageInit],
    steps: &[Step],
    lanes: i64,
    rng: &mut Rng,
    which: impl Fn(&KnobKind) -> bool,
) -> Option<Vec<Step>> {
    let space = Space::new(inits, steps, lanes).ok()?;
    let knobs: Vec<usize> = (0..space.knobs.len())
        .filter(|&k| which(&space.knobs[k].kind) && space.knobs[k].values.len() > 1)
        .collect();
    if knobs.is_empty() {
        return None;
    }
    let k = knobs[rng.below(knobs.len())];
    let mut point = space.start.clone();
    let n = space.knobs[k].values.len();
    point[k] = ((point[k] as usize + 1 + rng.below(n - 1)) % n) as u16;
    space.steps_at(&point).ok()
}

/// Applies one mutation of kind `m` to `steps`.
pub fn mutate(
    m: Mutation,
    dag: &Dag,
    inits: &[StageInit],
    steps: &[Step],
    lanes: i64,
    rng: &mut Rng,
) -> Option<Vec<Step>> {
    match m {
        Mutation::TileSize => mutate_tile_size(steps, rng),
        Mutation::AutoUnroll => {
            // Resample among the initial population's values, not Droplet's finer grid.
            let prs: Vec<usize> = steps
                .iter()
                .enumerate()
                .filter(|(_, s)| {
                    matches!(s, Step::Pragma(p) if p.pragma.starts_with("auto_unroll_max_step$"))
                })
                .map(|(i, _)| i)
                .collect();
            if prs.is_empty() {
                return None;
            }
            let i = prs[rng.below(prs.len())];
            let mut out = steps.to_vec();
            if let Step::Pragma(p) = &mut out[i] {
                let cur = p.pragma.clone();
                let choices: Vec<String> = UNROLL_CHOICES
                    .iter()
                    .map(|v| format!("auto_unroll_max_step${v}"))
                    .filter(|s| *s != cur)
                    .collect();
                p.pragma = choices[rng.below(choices.len())].clone();
            }
            Some(out)
        }
        Mutation::ComputeLocation => mutate_compute_location(dag, inits, steps, rng),
        Mutation::Parallel => mutate_knob(inits, steps, lanes, rng, |k| {
            matches!(
                k,
                KnobKind::Fuse {
                    annotation: ttdb_format::ansor::Annotation::Parallel,
                    ..
                }
            )
        }),
    }
}

/// MutateComputeLocation: a CA of an untiled stage that needs no multi-level tiling moves
/// to another candidate loop (as the initial population chooses them).
fn mutate_compute_location(
    dag: &Dag,
    inits: &[StageInit],
    steps: &[Step],
    rng: &mut Rng,
) -> Option<Vec<Step>> {
    let mut cas: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, Step::ComputeAt(_)))
        .map(|(i, _)| i)
        .collect();
    rng.shuffle(&mut cas);
    for q in cas {
        let Step::ComputeAt(ca) = &steps[q] else {
            continue;
        };
        let Ok(before) = replay(inits, &steps[..q]) else {
            continue;
        };
        let s = ca.stage_id as usize;
        let analysis = Analysis::new(dag, &before);
        if s >= before.stages().len()
            || is_tiled(&before, s)
            || analysis.needs_multi_level_tiling(s)
        {
            continue;
        }
        let current = (ca.target_stage_id as usize, ca.target_iter_id as usize);
        let others: Vec<(usize, usize)> = compute_location_candidates(&analysis, &before, s)
            .into_iter()
            .filter(|&c| c != current)
            .collect();
        if others.is_empty() {
            continue;
        }
        let (t, i) = others[rng.below(others.len())];
        let mut out = steps.to_vec();
        if let Step::ComputeAt(c) = &mut out[q] {
            c.target_stage_id = t as u32;
            c.target_iter_id = i as u32;
        }
        return Some(out);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttdb_format::ansor::step::SplitStep;

    fn split(extent: i64, lengths: &[i64]) -> Vec<Step> {
        vec![Step::Split(SplitStep {
            stage_id: 2,
            iter_id: 0,
            extent,
            lengths: lengths.to_vec(),
            inner_to_outer: true,
        })]
    }

    /// A padded split of 197 rows stays a tiling of 200 (8-row tiles move between levels);
    /// lengths that tile no extent ttdb would choose are left alone.
    #[test]
    fn a_padded_split_mutates_within_its_padded_extent() {
        let mut rng = Rng::new(7);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let out = mutate_tile_size(&split(197, &[25, 1, 8]), &mut rng).unwrap();
            let Step::Split(sp) = &out[0] else { panic!() };
            let p: i64 = sp.lengths.iter().product();
            assert_eq!(200 % p, 0, "{:?}", sp.lengths);
            assert!(sp.lengths[2] <= MAX_INNERMOST_SPLIT);
            seen.insert(sp.lengths.clone());
        }
        assert!(seen.len() > 5, "{seen:?}");
        assert!(mutate_tile_size(&split(197, &[3, 1, 7]), &mut rng).is_none());
    }
}
