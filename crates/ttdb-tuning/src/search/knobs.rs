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
use ttdb_algo::schedule::divisors::{divisors, prime_factors};
use ttdb_algo::schedule::{insert_step, remove_step, replay, IterKind, StageInit, State, StepIds};
use ttdb_format::ansor::step::FuseStep;
use ttdb_format::ansor::{Annotation, Step};

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
    /// one full vector first. A changed length may overrun its loop: the last tile's guard
    /// then masks lanes of the fused vector (measured: better than exact tiles only).
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

    /// Whether the lengths of the split of split knob `k` at point `p` divide its loop.
    #[cfg(test)]
    fn split_is_exact(&self, p: &[u16], k: usize) -> bool {
        let KnobKind::SplitLength { step, extent, .. } = self.knobs[k].kind else {
            return true;
        };
        let Step::Split(sp) = &self.base[step] else {
            return true;
        };
        let mut lengths = sp.lengths.clone();
        for (knob, &i) in self.knobs.iter().zip(p) {
            if let KnobKind::SplitLength { step: s, index, .. } = knob.kind {
                if s == step {
                    lengths[index] = knob.values[i as usize];
                }
            }
        }
        let product = lengths.iter().fold(1i64, |a, &l| a.saturating_mul(l));
        product > 0 && extent % product == 0
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
        if !step.map_loop_ids(stage, remap) {
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

#[cfg(test)]
#[path = "knobs_tests.rs"]
pub mod tests;
