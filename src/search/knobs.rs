//! The knobs of a step list: what Droplet search turns, and how a point of the knob space
//! becomes a step list again.
//!
//! * every SP length of a loop of known extent > 1: the current length, powers of two,
//!   multiples of the host's vector width (up to 8 vectors) and divisors of the extent (exact
//!   tiles need no guards), up to the extent; non-dividing lengths are allowed, as in TVM.
//!   FSP/FFSP steps follow their source SP on replay, so they move with it;
//! * every `auto_unroll_max_step` pragma: 0, 16, ..., 1024 and the current value;
//! * the parallel granularity: how many outer loops the FU before an `AN parallel` fuses
//!   (TVM's `MutateParallel`), and the vectorized extent: how many inner loops the FU before
//!   an `AN vectorize` fuses (the vectorized SP length itself is a split knob).
//!
//! A point is one index per knob into its value list; values are distinct, so distinct
//! points give distinct step lists (the visited set of the search is injective). A point
//! whose steps do not replay is invalid, never measured.
use crate::ansor::step::FuseStep;
use crate::ansor::{Annotation, Step};
use crate::schedule::divisors::{divisors, prime_factors};
use crate::schedule::{replay, IterKind, StageInit, State};

/// One index per knob into its values.
pub type Point = Vec<u16>;

/// What a knob changes.
#[derive(Clone, Debug, PartialEq)]
pub enum KnobKind {
    /// Length `index` of the SP at step `step`, whose loop has extent `extent`.
    SplitLength {
        step: usize,
        index: usize,
        extent: i64,
    },
    /// The `auto_unroll_max_step` of the PR at step `step`.
    Unroll { step: usize },
    /// How many loops of `stage` the FU before the annotation at step `an_step` fuses: the
    /// outer ones from loop `first` for `AN parallel`, the inner ones ending at the stage's
    /// last loop for `AN vectorize`. `fused` is the FU step right before, if any.
    Fuse {
        an_step: usize,
        fused: Option<usize>,
        stage: u32,
        first: u32,
        annotation: Annotation,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Knob {
    pub kind: KnobKind,
    /// Distinct values, ascending.
    pub values: Vec<i64>,
}

impl Knob {
    /// `SP@12[2]`, `PR@20`, `parallel@15`: where the knob sits in the step list.
    pub fn label(&self) -> String {
        match &self.kind {
            KnobKind::SplitLength { step, index, .. } => format!("SP@{step}[{index}]"),
            KnobKind::Unroll { step } => format!("unroll@{step}"),
            KnobKind::Fuse {
                an_step,
                annotation,
                ..
            } => format!("{}@{an_step}", annotation.name()),
        }
    }
}

/// The knob space of one schedule on one workload.
#[derive(Clone, Debug)]
pub struct Space {
    inits: Vec<StageInit>,
    base: Vec<Step>,
    pub knobs: Vec<Knob>,
    /// The point of the schedule the space was built from.
    pub start: Point,
    /// This host's fp32 lanes.
    lanes: i64,
}

/// `auto_unroll_max_step$N` -> N.
fn unroll_value(pragma: &str) -> Option<i64> {
    pragma
        .strip_prefix("auto_unroll_max_step$")
        .and_then(|v| v.parse().ok())
}

/// Sorted distinct `values` with the index of `current` among them.
fn with_current(mut values: Vec<i64>, current: i64) -> (Vec<i64>, u16) {
    values.push(current);
    values.sort_unstable();
    values.dedup();
    let at = values.binary_search(&current).expect("current is a value");
    (values, at as u16)
}

/// The lengths a split knob of a loop of `extent` tries.
fn split_values(extent: i64, current: i64, lanes: i64) -> (Vec<i64>, u16) {
    let mut v: Vec<i64> = (0..40)
        .map(|k| 1i64 << k)
        .take_while(|&p| p <= extent)
        .collect();
    v.extend((1..=8).map(|m| m * lanes).take_while(|&m| m <= extent));
    // Divisors give exact tiles; a huge extent has few small ones worth the list's length.
    if extent <= 1 << 20 {
        v.extend(divisors(extent));
    }
    with_current(v, current)
}

const UNROLL_VALUES: [i64; 8] = [0, 16, 32, 64, 128, 256, 512, 1024];

impl Space {
    /// The knobs of `steps` (a record that replays on `inits`), for a host with `lanes` fp32
    /// lanes. Errors when the steps do not replay.
    pub fn new(inits: &[StageInit], steps: &[Step], lanes: i64) -> Result<Space, String> {
        let mut state = State::new(inits).map_err(|e| e.to_string())?;
        let mut knobs = Vec::new();
        let mut start = Vec::new();
        let mut push = |knobs: &mut Vec<Knob>, kind: KnobKind, (values, at): (Vec<i64>, u16)| {
            if values.len() > 1 {
                knobs.push(Knob { kind, values });
                start.push(at);
            }
        };
        for (q, step) in steps.iter().enumerate() {
            match step {
                Step::Split(sp) => {
                    let extent = state.loop_extent(sp.stage_id, sp.iter_id);
                    if let Some(extent) = extent.filter(|&e| e > 1) {
                        for (index, &l) in sp.lengths.iter().enumerate() {
                            let kind = KnobKind::SplitLength {
                                step: q,
                                index,
                                extent,
                            };
                            push(&mut knobs, kind, split_values(extent, l, lanes));
                        }
                    }
                }
                Step::Pragma(pr) => {
                    if let Some(v) = unroll_value(&pr.pragma) {
                        let values = with_current(UNROLL_VALUES.to_vec(), v);
                        push(&mut knobs, KnobKind::Unroll { step: q }, values);
                    }
                }
                // Stages a later step inserts shift every later stage id: a fuse knob before
                // one would have to rewrite them all, so there is none.
                Step::Annotation(an)
                    if matches!(an.annotation, Annotation::Parallel | Annotation::Vectorize)
                        && !steps[q + 1..].iter().any(Step::adds_stage) =>
                {
                    if let Some((kind, values)) = fuse_knob(inits, &state, steps, q, lanes) {
                        push(&mut knobs, kind, values);
                    }
                }
                _ => {}
            }
            state.apply(step).map_err(|e| e.to_string())?;
        }
        Ok(Space {
            inits: inits.to_vec(),
            base: steps.to_vec(),
            knobs,
            start,
            lanes,
        })
    }

    /// The number of values of each knob.
    pub fn sizes(&self) -> Vec<usize> {
        self.knobs.iter().map(|k| k.values.len()).collect()
    }

    /// The steps of point `p`: the base steps with every knob set to its value, every SP
    /// `extent` field as the replay finds it. Errors when they do not replay (an invalid
    /// point) or `p` is not a point of this space.
    pub fn steps_at(&self, p: &[u16]) -> Result<Vec<Step>, String> {
        if p.len() != self.knobs.len() {
            return Err(format!(
                "a point of {} knobs, the space has {}",
                p.len(),
                self.knobs.len()
            ));
        }
        let mut steps = self.base.clone();
        let mut fuses = Vec::new();
        for (knob, &i) in self.knobs.iter().zip(p) {
            let v = *knob.values.get(i as usize).ok_or_else(|| {
                format!(
                    "index {i} past the {} values of {}",
                    knob.values.len(),
                    knob.label()
                )
            })?;
            match &knob.kind {
                KnobKind::SplitLength { step, index, .. } => {
                    if let Step::Split(sp) = &mut steps[*step] {
                        sp.lengths[*index] = v;
                    }
                }
                KnobKind::Unroll { step } => {
                    if let Step::Pragma(pr) = &mut steps[*step] {
                        pr.pragma = format!("auto_unroll_max_step${v}");
                    }
                }
                kind @ KnobKind::Fuse { .. } => fuses.push((kind, v)),
            }
        }
        // Structural edits last, from the back: an edit moves only later steps.
        fuses.sort_by_key(|(k, _)| match k {
            KnobKind::Fuse { an_step, .. } => std::cmp::Reverse(*an_step),
            _ => unreachable!(),
        });
        for (kind, count) in fuses {
            set_fuse_count(&mut steps, kind, count as u32)?;
        }
        let state = replay(&self.inits, &steps).map_err(|e| e.to_string())?;
        // The SP `extent` field records the loop's extent when the step applies.
        for m in &state.split_report().mismatches {
            if let Some(Step::Split(sp)) = steps.get_mut(m.step_index) {
                sp.extent = m.simulated;
            }
        }
        Ok(steps)
    }

    /// Ansor's tile-size mutation as moves of this space: a prime factor of one length of a
    /// split moves to another length of the same split, or to or from its outer loop (one
    /// length alone). Exact tiles stay exact, so these moves are often good ones, but one of
    /// them may be many values away in a length's list, or change two knobs at once.
    pub fn factor_moves(&self, p: &[u16]) -> Vec<Point> {
        let mut out = Vec::new();
        let value = |k: usize, i: u16| self.knobs[k].values[i as usize];
        let index_of = |k: usize, v: i64| {
            self.knobs[k]
                .values
                .binary_search(&v)
                .ok()
                .map(|i| i as u16)
        };
        for a in 0..self.knobs.len() {
            let KnobKind::SplitLength { step, extent, .. } = self.knobs[a].kind else {
                continue;
            };
            let va = value(a, p[a]);
            let factors = prime_factors(va);
            let with = |moves: &[(usize, i64)]| -> Option<Point> {
                let mut n = p.to_vec();
                for &(k, v) in moves {
                    n[k] = index_of(k, v)?;
                }
                Some(n)
            };
            // To the outer loop (the length shrinks) and from it (the length grows).
            let shrink = factors.iter().map(|q| va / q);
            let grow = prime_factors(extent).into_iter().map(|q| va * q);
            out.extend(shrink.chain(grow).filter_map(|v| with(&[(a, v)])));
            // To another length of the same split.
            for (b, (knob, &ib)) in self.knobs.iter().zip(p).enumerate() {
                let same_split =
                    matches!(knob.kind, KnobKind::SplitLength { step: s, .. } if s == step);
                if b == a || !same_split {
                    continue;
                }
                let vb = knob.values[ib as usize];
                out.extend(
                    factors
                        .iter()
                        .filter_map(|q| with(&[(a, va / q), (b, vb * q)])),
                );
            }
        }
        out
    }

    /// Moves that widen a vectorized loop narrower than this host's vector to one or two
    /// full vectors: more inner loops fused before `AN vectorize`, alone or with one
    /// innermost split length changed (the lengths the loops added to the group get). A
    /// vector of 4 lanes (an NCHW4c block) on a 16-lane host leaves most of each FMA idle,
    /// and neither knob alone widens it when the next loop's length is 1. At most `max`,
    /// one full vector first.
    pub fn widening_moves(&self, p: &[u16], max: usize) -> Vec<Point> {
        // The extent of the vectorized loop of `stage` at point `q`. A compute_at clears
        // the extents of its stage's loops (as in TVM); the loops are the same without it.
        let width = |q: &[u16], stage: u32| -> Option<i64> {
            let mut steps = self.steps_at(q).ok()?;
            steps.retain(|s| !matches!(s, Step::ComputeAt(_)));
            let state = replay(&self.inits, &steps).ok()?;
            state
                .stages()
                .get(stage as usize)?
                .iters
                .iter()
                .find(|it| it.annotation == Annotation::Vectorize)?
                .extent
        };
        let inner_lengths: Vec<usize> = (0..self.knobs.len())
            .filter(|&k| match self.knobs[k].kind {
                KnobKind::SplitLength { step, index, .. } => matches!(
                    &self.base[step],
                    Step::Split(sp) if index + 1 == sp.lengths.len()
                ),
                _ => false,
            })
            .collect();
        let (mut one, mut two) = (Vec::new(), Vec::new());
        for (v, knob) in self.knobs.iter().enumerate() {
            let KnobKind::Fuse {
                annotation: Annotation::Vectorize,
                stage,
                ..
            } = knob.kind
            else {
                continue;
            };
            if width(p, stage).is_none_or(|w| w >= self.lanes) {
                continue;
            }
            for count in p[v] as usize + 1..knob.values.len() {
                let mut q = p.to_vec();
                q[v] = count as u16;
                let mut tries = vec![q.clone()];
                for &k in &inner_lengths {
                    for i in (0..self.knobs[k].values.len()).filter(|&i| i as u16 != p[k]) {
                        let mut r = q.clone();
                        r[k] = i as u16;
                        tries.push(r);
                    }
                }
                for t in tries {
                    match width(&t, stage) {
                        Some(w) if w == self.lanes => one.push(t),
                        Some(w) if w == 2 * self.lanes => two.push(t),
                        _ => {}
                    }
                }
            }
        }
        one.extend(two);
        one.truncate(max);
        one
    }

    /// What point `p` changes from the start: `SP@3[1] 8->16, parallel@20 3->2`.
    pub fn describe(&self, p: &[u16]) -> String {
        let parts: Vec<String> = self
            .knobs
            .iter()
            .zip(p.iter().zip(&self.start))
            .filter(|(_, (a, b))| a != b)
            .map(|(k, (&a, &b))| {
                format!(
                    "{} {}->{}",
                    k.label(),
                    k.values[b as usize],
                    k.values[a as usize]
                )
            })
            .collect();
        if parts.is_empty() {
            "start".into()
        } else {
            parts.join(", ")
        }
    }
}

#[cfg(test)]
fn is_prime(n: i64) -> bool {
    n > 1 && prime_factors(n) == [n]
}

/// What no knob can change: the kinds of steps and the stages they touch, compute
/// locations, caching and inlining. Two schedules with one structure lie in one knob space
/// (up to fuse groups); Droplet restarts from another structure rather than reach it.
pub fn structure(steps: &[Step]) -> String {
    let parts: Vec<String> = steps
        .iter()
        .map(|s| match s {
            Step::Split(sp) => format!("SP{}/{}", sp.stage_id, sp.lengths.len()),
            Step::Pragma(pr) => format!("PR{}", pr.stage_id),
            Step::Fuse(fu) => format!("FU{}", fu.stage_id),
            Step::Annotation(an) => format!("AN{}:{}", an.stage_id, an.annotation.name()),
            Step::ComputeAt(ca) => format!("CA{}@{}", ca.stage_id, ca.target_stage_id),
            other => other.to_string(),
        })
        .collect();
    parts.join(" ")
}

/// The fuse knob of the annotation at step `q` (the state is the one before step `q`).
fn fuse_knob(
    inits: &[StageInit],
    state: &State,
    steps: &[Step],
    q: usize,
    lanes: i64,
) -> Option<(KnobKind, (Vec<i64>, u16))> {
    let Step::Annotation(an) = &steps[q] else {
        return None;
    };
    let stage = state.stages().get(an.stage_id as usize)?;
    // A FU right before whose fused loop is the annotated one: its group size is the knob.
    let fu = q.checked_sub(1).and_then(|p| match &steps[p] {
        Step::Fuse(fu)
            if fu.stage_id == an.stage_id && fu.fused_ids.first() == Some(&an.iter_id) =>
        {
            Some((p, fu))
        }
        _ => None,
    });
    // The loops as they were before that FU.
    let before_fuse;
    let (iters, attach) = match fu {
        Some((p, _)) => {
            let mut st = State::new(inits).ok()?;
            st.apply_all(&steps[..p]).ok()?;
            before_fuse = st;
            (
                before_fuse.stages()[an.stage_id as usize].iters.clone(),
                before_fuse.attach_map().clone(),
            )
        }
        None => (stage.iters.clone(), state.attach_map().clone()),
    };
    let (first, count) = match fu {
        Some((_, fu)) => {
            let ids = &fu.fused_ids;
            let contiguous = ids.windows(2).all(|w| w[1] == w[0] + 1);
            if !contiguous {
                return None;
            }
            (ids[0], ids.len())
        }
        None => (an.iter_id, 1),
    };
    let s = an.stage_id as usize;
    // (Extents may be unknown: a computed-at stage's loops get theirs from bound inference.)
    let free = |i: usize| {
        iters
            .get(i)
            .is_some_and(|it| it.kind == IterKind::Spatial && it.annotation == Annotation::None)
    };
    let max = match an.annotation {
        Annotation::Parallel => {
            // Outer spatial loops from `first`, up to and including one with attached stages.
            let mut n = 0;
            for i in first as usize..iters.len() {
                if !free(i) {
                    break;
                }
                n += 1;
                if !attach.attached_at(s, i).is_empty() {
                    break;
                }
            }
            n
        }
        Annotation::Vectorize => {
            // Only a group that ends at the stage's last loop: inner spatial loops without
            // attached stages, up to 16 vectors of work, and at most 3 loops where the
            // extents are not known yet.
            if first as usize + count != iters.len() {
                return None;
            }
            let (mut n, mut product) = (0, 1i64);
            for i in (0..iters.len()).rev() {
                if !free(i) || !attach.attached_at(s, i).is_empty() {
                    break;
                }
                match iters[i].extent {
                    Some(e) => product = product.saturating_mul(e),
                    None if n >= 3 => break,
                    None => {}
                }
                if n > 0 && product > 16 * lanes {
                    break;
                }
                n += 1;
            }
            n
        }
        _ => return None,
    };
    if max < count {
        return None;
    }
    let kind = KnobKind::Fuse {
        an_step: q,
        fused: fu.map(|(p, _)| p),
        stage: an.stage_id,
        first,
        annotation: an.annotation,
    };
    Some((kind, with_current((1..=max as i64).collect(), count as i64)))
}

/// Sets the group size of a fuse knob to `count`: rewrites (or inserts, or removes) the FU
/// before the annotation and moves the loop ids of later steps on the stage. Errors when a
/// later step names a loop that the new group swallows, or reorders the stage.
fn set_fuse_count(steps: &mut Vec<Step>, kind: &KnobKind, count: u32) -> Result<(), String> {
    let KnobKind::Fuse {
        an_step,
        fused,
        stage,
        first,
        annotation,
    } = *kind
    else {
        return Err("not a fuse knob".into());
    };
    let old = match fused {
        Some(p) => match &steps[p] {
            Step::Fuse(fu) => fu.fused_ids.len() as u32,
            _ => return Err("the fuse knob's FU moved".into()),
        },
        None => 1,
    };
    if count == old {
        return Ok(());
    }
    // The group's first loop: outer groups keep their start, inner ones their end.
    let new_first = match annotation {
        Annotation::Vectorize => (first + old)
            .checked_sub(count)
            .ok_or("group past the first loop")?,
        _ => first,
    };
    // A loop id of the stage after the old FU -> after the new one.
    let remap = |i: u32| -> Option<u32> {
        if i == first {
            return Some(new_first);
        }
        let original = if i < first { i } else { i + old - 1 };
        if (new_first..new_first + count).contains(&original) {
            None
        } else if original < new_first {
            Some(original)
        } else {
            Some(original - count + 1)
        }
    };
    let from = fused.unwrap_or(an_step);
    for step in steps[from..].iter_mut().skip(usize::from(fused.is_some())) {
        if !map_stage_loops(step, stage, &remap) {
            return Err(format!("{step} names a loop the new fuse group swallows"));
        }
    }
    let group = FuseStep {
        stage_id: stage,
        fused_ids: (new_first..new_first + count).collect(),
    };
    match (fused, count) {
        (Some(p), 1) => remove_step(steps, p),
        (Some(p), _) => steps[p] = Step::Fuse(group),
        (None, _) => insert_step(steps, an_step, Step::Fuse(group)),
    }
    Ok(())
}

/// Applies `remap` to every loop id of `stage` that `step` names; false if one has no image
/// (or the step reorders the stage: its permutation would change length).
fn map_stage_loops(step: &mut Step, stage: u32, remap: &dyn Fn(u32) -> Option<u32>) -> bool {
    let one = |id: &mut u32| match remap(*id) {
        Some(n) => {
            *id = n;
            true
        }
        None => false,
    };
    match step {
        Step::Annotation(s) if s.stage_id == stage => one(&mut s.iter_id),
        Step::Pragma(s) if s.stage_id == stage => one(&mut s.iter_id),
        Step::Split(s) if s.stage_id == stage => one(&mut s.iter_id),
        Step::FollowSplit(s) if s.stage_id == stage => one(&mut s.iter_id),
        Step::FollowFusedSplit(s) if s.stage_id == stage => one(&mut s.iter_id),
        Step::StorageAlign(s) if s.stage_id == stage => one(&mut s.iter_id),
        Step::Fuse(s) if s.stage_id == stage => s.fused_ids.iter_mut().all(one),
        Step::ComputeAt(s) if s.target_stage_id == stage => one(&mut s.target_iter_id),
        Step::Reorder(s) if s.stage_id == stage => false,
        Step::Rfactor(s) if s.stage_id == stage => false,
        _ => true,
    }
}

/// Follow-split sources name steps by index: they move with an insertion or removal.
fn shift_sources(steps: &mut [Step], at: usize, by: i64) {
    let shift = |id: &mut u32| {
        if *id as usize >= at {
            *id = (*id as i64 + by) as u32;
        }
    };
    for s in steps {
        match s {
            Step::FollowSplit(f) => shift(&mut f.src_step_id),
            Step::FollowFusedSplit(f) => f.src_step_ids.iter_mut().for_each(shift),
            _ => {}
        }
    }
}

fn insert_step(steps: &mut Vec<Step>, at: usize, step: Step) {
    shift_sources(steps, at, 1);
    steps.insert(at, step);
}

fn remove_step(steps: &mut Vec<Step>, at: usize) {
    steps.remove(at);
    shift_sources(steps, at, -1);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ir::Dag;
    use crate::lower::check::interpret_against_reference;
    use crate::lower::{lower_steps, LowerOptions};
    use crate::ops::{Anchor, EpilogueOp, Era, Window2d, WorkloadSpec};
    use crate::schedule::stage_inits_from_dag;
    use std::collections::HashSet;

    /// An NHWC conv + bias + relu with the usual CPU sketch (spec §4.1): SSRSRS tiles, the
    /// conv at the relu's fused parallel loop, vectorized inner loops.
    pub(crate) fn conv_and_sketch() -> (Dag, Vec<Step>) {
        let spec = WorkloadSpec::new(
            Anchor::Conv2dNhwc(Window2d::simple(1, 1)),
            vec![
                EpilogueOp::Add {
                    operand_first: false,
                },
                EpilogueOp::Relu,
            ],
        );
        let dag = spec
            .build(
                Era::V010,
                &[vec![1, 8, 8, 8], vec![3, 3, 8, 16], vec![1, 1, 1, 16]],
            )
            .unwrap();
        let sketch = r#"[["CI", 5], ["SP", 3, 0, 1, [1, 1, 1], 1], ["SP", 3, 4, 8, [1, 2, 2], 1], ["SP", 3, 8, 8, [2, 1, 2], 1],
 ["SP", 3, 12, 16, [2, 2, 4], 1], ["SP", 3, 16, 3, [3], 1], ["SP", 3, 18, 3, [1], 1], ["SP", 3, 20, 8, [4], 1],
 ["RE", 3, [0, 4, 8, 12, 1, 5, 9, 13, 16, 18, 20, 2, 6, 10, 14, 17, 19, 21, 3, 7, 11, 15]],
 ["FSP", 6, 0, 1, 2], ["FSP", 6, 3, 2, 2], ["FSP", 6, 6, 3, 2], ["FSP", 6, 9, 4, 2], ["RE", 6, [0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]],
 ["CA", 3, 6, 7], ["CI", 1], ["FU", 6, [0, 1, 2, 3, 4, 5, 6, 7]], ["AN", 6, 0, 3], ["PR", 3, 0, "auto_unroll_max_step$64"],
 ["AN", 3, 21, 2], ["AN", 6, 4, 2]]"#;
        let v: serde_json::Value = serde_json::from_str(sketch).unwrap();
        let steps = v
            .as_array()
            .unwrap()
            .iter()
            .map(|s| Step::from_json(s).unwrap())
            .collect();
        (dag, steps)
    }

    fn space() -> (Dag, Space) {
        let (dag, steps) = conv_and_sketch();
        let space = Space::new(&stage_inits_from_dag(&dag), &steps, 8).unwrap();
        (dag, space)
    }

    #[test]
    fn the_sketch_has_split_unroll_parallel_and_vector_knobs() {
        let (_, sp) = space();
        let labels: Vec<String> = sp.knobs.iter().map(Knob::label).collect();
        // SP lengths of loops of extent > 1 (the batch loop of extent 1 has none).
        assert!(labels.contains(&"SP@2[0]".to_string()), "{labels:?}");
        assert!(!labels.iter().any(|l| l.starts_with("SP@1[")), "{labels:?}");
        assert!(labels.contains(&"unroll@18".to_string()));
        assert!(labels.contains(&"parallel@17".to_string()));
        assert!(labels.contains(&"vectorize@19".to_string()));
        assert!(labels.contains(&"vectorize@20".to_string()));
        // The extent-8 loop split [1, 2, 2]: powers of two, multiples of 8 lanes, divisors.
        let k = &sp.knobs[labels.iter().position(|l| l == "SP@2[0]").unwrap()];
        assert_eq!(k.values, [1, 2, 4, 8]);
        let par = &sp.knobs[labels.iter().position(|l| l == "parallel@17").unwrap()];
        assert_eq!(par.values, (1..=8).collect::<Vec<_>>());
        assert_eq!(sp.start.len(), sp.knobs.len());
    }

    #[test]
    fn the_start_point_gives_the_steps_back() {
        let (dag, sp) = space();
        let (_, steps) = conv_and_sketch();
        assert_eq!(sp.steps_at(&sp.start).unwrap(), steps);
        assert_eq!(sp.describe(&sp.start), "start");
        assert!(lower_steps(&dag, &steps, &LowerOptions::default()).is_ok());
    }

    /// Every single-knob move, up and down: it replays (or is refused as invalid), and what
    /// replays lowers to a kernel that matches the reference in the checked interpreter.
    #[test]
    fn every_single_knob_move_is_a_correct_schedule() {
        let (dag, sp) = space();
        let (mut valid, mut invalid) = (0, 0);
        for (i, size) in sp.sizes().into_iter().enumerate() {
            for delta in [1, size - 1] {
                let mut p = sp.start.clone();
                p[i] = ((p[i] as usize + delta) % size) as u16;
                match sp.steps_at(&p) {
                    Ok(steps) => {
                        valid += 1;
                        let k = lower_steps(&dag, &steps, &LowerOptions::default())
                            .unwrap_or_else(|e| panic!("{}: {e}", sp.describe(&p)));
                        let c = interpret_against_reference(&dag, &k, 3, Some(50_000_000))
                            .unwrap_or_else(|e| panic!("{}: {e}", sp.describe(&p)));
                        assert!(
                            c.rel_err <= crate::loopnest::verify::RTOL,
                            "{}",
                            sp.describe(&p)
                        );
                    }
                    Err(_) => invalid += 1,
                }
            }
        }
        assert!(
            valid > 2 * sp.knobs.len() * 3 / 4,
            "{valid} valid, {invalid} invalid"
        );
    }

    #[test]
    fn fuse_counts_rewrite_the_fu_and_later_loop_ids() {
        let (_, sp) = space();
        let par = sp
            .knobs
            .iter()
            .position(|k| k.label() == "parallel@17")
            .unwrap();
        // Fuse 3 outer loops instead of 8: the vectorized loop of the stage moves from 4 to 9.
        let mut p = sp.start.clone();
        p[par] = 2;
        let steps = sp.steps_at(&p).unwrap();
        assert_eq!(steps[16].to_string(), r#"["FU", 6, [0, 1, 2]]"#);
        assert_eq!(steps[20].to_string(), r#"["AN", 6, 9, 2]"#);
        // One loop: no FU at all (later steps move up by one).
        p[par] = 0;
        let steps = sp.steps_at(&p).unwrap();
        assert_eq!(steps.len(), 20);
        assert_eq!(steps[16].to_string(), r#"["AN", 6, 0, 3]"#);
        assert_eq!(steps[19].to_string(), r#"["AN", 6, 11, 2]"#);
        // Vectorizing two inner loops of the conv inserts a FU before its AN.
        let vec3 = sp
            .knobs
            .iter()
            .position(|k| k.label() == "vectorize@19")
            .unwrap();
        let mut p = sp.start.clone();
        p[vec3] = 1;
        let steps = sp.steps_at(&p).unwrap();
        assert_eq!(steps.len(), 22);
        assert_eq!(steps[19].to_string(), r#"["FU", 3, [20, 21]]"#);
        assert_eq!(steps[20].to_string(), r#"["AN", 3, 20, 2]"#);
    }

    /// Ansor's tile-size moves: a prime factor passes between two lengths of one split (its
    /// product, the tile, stays) or to and from the outer loop (one length moves by a prime).
    #[test]
    fn factor_moves_pass_a_prime_between_lengths_of_one_split() {
        let (_, sp) = space();
        let moves = sp.factor_moves(&sp.start);
        let lengths = |p: &[u16]| -> Vec<(usize, i64)> {
            sp.knobs
                .iter()
                .zip(p)
                .filter_map(|(k, &i)| match k.kind {
                    KnobKind::SplitLength { step, .. } => Some((step, k.values[i as usize])),
                    _ => None,
                })
                .collect()
        };
        let start = lengths(&sp.start);
        let (mut within, mut outer) = (0, 0);
        for m in &moves {
            let changed: Vec<usize> = (0..m.len()).filter(|&i| m[i] != sp.start[i]).collect();
            let now = lengths(m);
            let diffs: Vec<(usize, i64, i64)> = start
                .iter()
                .zip(&now)
                .filter(|(a, b)| a.1 != b.1)
                .map(|(a, b)| (a.0, a.1, b.1))
                .collect();
            assert_eq!(diffs.len(), changed.len(), "{}", sp.describe(m));
            let ratio = |(_, a, b): (usize, i64, i64)| if a > b { a / b } else { b / a };
            match diffs[..] {
                [d] => {
                    assert!(is_prime(ratio(d)), "{}", sp.describe(m));
                    outer += 1;
                }
                [a, b] => {
                    assert_eq!(a.0, b.0, "two splits moved: {}", sp.describe(m));
                    assert_eq!(a.1 * b.1, a.2 * b.2, "tile changed: {}", sp.describe(m));
                    within += 1;
                }
                _ => panic!("{} knobs moved: {}", diffs.len(), sp.describe(m)),
            }
        }
        assert!(within > 0 && outer > 0, "{within} within, {outer} outer");
        // SP@3 [2, 1, 2] of extent 8: a 2 passes from length 0 to length 1.
        assert!(
            moves
                .iter()
                .any(|m| sp.describe(m) == "SP@3[0] 2->1, SP@3[1] 1->2"),
            "{:?}",
            moves.iter().map(|m| sp.describe(m)).collect::<Vec<_>>()
        );
    }

    /// Distinct points give distinct step lists: the visited set keyed by points is exact.
    #[test]
    fn points_map_injectively_to_step_lists() {
        let (_, sp) = space();
        let sizes = sp.sizes();
        let mut seen = HashSet::new();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut points = HashSet::new();
        for _ in 0..300 {
            let p: Point = sizes
                .iter()
                .map(|&n| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % n as u64) as u16
                })
                .collect();
            if !points.insert(p.clone()) {
                continue;
            }
            if let Ok(steps) = sp.steps_at(&p) {
                let text: Vec<String> = steps.iter().map(|s| s.to_string()).collect();
                assert!(
                    seen.insert(text.join(",")),
                    "two points, one step list: {p:?}"
                );
            }
        }
        assert!(seen.len() > 50, "only {} valid random points", seen.len());
    }

    /// The sketch vectorizes a 4-long loop: on an 8-lane host, the widening moves fuse more
    /// inner loops (changing an innermost length where needed) to one or two full vectors;
    /// on a 4-lane host there is nothing to widen.
    #[test]
    fn widening_moves_fill_the_hosts_vector() {
        let (dag, sp) = space();
        let vector_of_stage_3 = |p: &[u16]| {
            let mut steps = sp.steps_at(p).unwrap();
            steps.retain(|s| !matches!(s, Step::ComputeAt(_)));
            let state = replay(&stage_inits_from_dag(&dag), &steps).unwrap();
            state.stages()[3]
                .iters
                .iter()
                .find(|it| it.annotation == Annotation::Vectorize)
                .and_then(|it| it.extent)
        };
        assert_eq!(vector_of_stage_3(&sp.start), Some(4));
        let moves = sp.widening_moves(&sp.start, 100);
        assert!(!moves.is_empty());
        for m in &moves {
            let w = vector_of_stage_3(m).unwrap();
            assert!(w == 8 || w == 16, "{}: {w} lanes", sp.describe(m));
            assert!(sp.describe(m).contains("vectorize@"), "{}", sp.describe(m));
        }
        // One full vector first, and `max` bounds the list.
        assert_eq!(vector_of_stage_3(&moves[0]), Some(8));
        assert_eq!(sp.widening_moves(&sp.start, 2).len(), 2.min(moves.len()));
        let (_, steps) = conv_and_sketch();
        let narrow = Space::new(&stage_inits_from_dag(&dag), &steps, 4).unwrap();
        assert!(narrow.widening_moves(&narrow.start, 100).is_empty());
    }
}
