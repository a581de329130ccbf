//! Re-targeting a record's steps to another workload of the same class: split lengths move
//! to the nearest exact factorization of the new extents
//! ([`ttdb_algo::schedule::retarget::adapt_split_lengths`]), and stage lists that differ by
//! inlinable stages are aligned ([`map_stages`]).
use ttdb_algo::schedule::{ReplayFailure, StageInit, StepIds};
use ttdb_format::ansor::Step;

/// Replays `steps` on `inits`, adapting every SP to its loop's extent in the new workload
/// (FSP/FFSP then follow the adapted SPs). Fails where a step cannot apply at all.
pub fn retarget(
    inits: &[StageInit],
    steps: &[Step],
) -> Result<ttdb_algo::schedule::Retargeted, ReplayFailure> {
    ttdb_algo::schedule::retarget_steps(inits, steps)
}

/// Source-stage to target-stage ids while steps are translated.
struct StageMap {
    /// `map[source id] = target id`, None for a source stage the target does not have.
    map: Vec<Option<u32>>,
}

impl StageMap {
    fn get(&self, s: u32) -> Result<u32, String> {
        self.map
            .get(s as usize)
            .copied()
            .flatten()
            .ok_or_else(|| format!("stage {s} of the source has no counterpart in the target"))
    }

    /// A stage inserted at source id `s` and target id `t`: later ids shift in both.
    fn insert(&mut self, s: u32, t: u32) {
        for x in self.map.iter_mut().flatten() {
            if *x >= t {
                *x += 1;
            }
        }
        self.map.insert(s as usize, Some(t));
    }
}

/// The stage names of `source` and `target`, None when they are the same list.
fn differing_stage_names(
    source: &ttdb_algo::ir::Dag,
    target: &ttdb_algo::ir::Dag,
) -> Option<(Vec<String>, Vec<String>)> {
    let names =
        |d: &ttdb_algo::ir::Dag| d.stages.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    let (src, tgt) = (names(source), names(target));
    (src != tgt).then_some((src, tgt))
}

/// Translates a record's steps from the source DAG to a target DAG of the same op whose
/// stage list differs by inlinable element-wise stages (NCHWc convs have a `data_pad` stage
/// only when padded, so a padded conv can take a 1x1 conv's schedule). Stages are aligned by
/// name (both DAGs are built in the source's TVM era); extra target stages are inlined first
/// (`CI`, as Ansor's always-inline rule does); steps on source-only stages are dropped.
/// Returns None when the lists are identical (nothing to translate).
pub fn map_stages(
    source: &ttdb_algo::ir::Dag,
    target: &ttdb_algo::ir::Dag,
    steps: &[Step],
) -> Result<Option<Vec<Step>>, String> {
    use ttdb_format::ansor::step::ComputeInlineStep;
    let Some((src, tgt)) = differing_stage_names(source, target) else {
        return Ok(None);
    };
    // Greedy alignment: equal names pair up; an unpaired target stage must be inlinable.
    let (mut i, mut j) = (0, 0);
    let mut map = vec![None; src.len()];
    let mut extra = Vec::new();
    while i < src.len() || j < tgt.len() {
        if i < src.len() && j < tgt.len() && src[i] == tgt[j] {
            map[i] = Some(j as u32);
            i += 1;
            j += 1;
        } else if j < tgt.len() && !src[i.min(src.len())..].contains(&tgt[j]) {
            extra.push(j);
            j += 1;
        } else if i < src.len() {
            i += 1; // a source-only stage
        } else {
            return Err("the stage lists cannot be aligned".into());
        }
    }
    for &t in &extra {
        let st = &target.stages[t];
        let inlinable = st.compute().is_some_and(|c| c.reduce_axes.is_empty())
            && !target.outputs.iter().any(|o| o.0 == t);
        if !inlinable {
            return Err(format!(
                "the target has stage {} ({}) that the source lacks and it cannot be inlined",
                t, st.name
            ));
        }
    }
    let out: Vec<Step> = extra
        .iter()
        .map(|&t| Step::ComputeInline(ComputeInlineStep { stage_id: t as u32 }))
        .collect();
    translate(StageMap { map }, out, steps).map(Some)
}

/// Translates a record's steps from `source` to `target`, two DAGs of one workload whose
/// stages are the same but ordered differently: a residual add's operand first in one and
/// second in the other puts its placeholder first or next to the add (TVM orders stages
/// by a post-order walk from the output). Stages pair by name, the k-th of a name with
/// the k-th. Returns None when the orders are the same, and an error when the stages
/// differ.
pub fn permute_stages(
    source: &ttdb_algo::ir::Dag,
    target: &ttdb_algo::ir::Dag,
    steps: &[Step],
) -> Result<Option<Vec<Step>>, String> {
    let Some((src, tgt)) = differing_stage_names(source, target) else {
        return Ok(None);
    };
    let mut sorted = (src.clone(), tgt.clone());
    sorted.0.sort();
    sorted.1.sort();
    if sorted.0 != sorted.1 {
        return Err("the stage lists differ".into());
    }
    let mut used = vec![false; tgt.len()];
    let map = src
        .iter()
        .map(|name| {
            let t = (0..tgt.len()).find(|&t| !used[t] && tgt[t] == *name)?;
            used[t] = true;
            Some(t as u32)
        })
        .collect();
    translate(StageMap { map }, Vec::new(), steps).map(Some)
}

/// Appends `steps`, their stage ids mapped by `sm`, to `out` (steps the target needs
/// first); steps that only inline, root, annotate or pragma a stage the target lacks are
/// dropped.
fn translate(mut sm: StageMap, mut out: Vec<Step>, steps: &[Step]) -> Result<Vec<Step>, String> {
    // New index of every kept source step (FSP/FFSP refer to steps by index).
    let mut new_index: Vec<Option<u32>> = Vec::with_capacity(steps.len());
    for step in steps {
        let s = step.stage_id();
        let Ok(t) = sm.get(s) else {
            // A step on a stage the target does not have (e.g. inlining its data_pad).
            if let Step::ComputeInline(_)
            | Step::ComputeRoot(_)
            | Step::Annotation(_)
            | Step::Pragma(_) = step
            {
                new_index.push(None);
                continue;
            }
            return Err(format!(
                "step {step} works on a stage the target does not have"
            ));
        };
        let mut translated = step.clone();
        translated.map_stage_ids(|id| sm.get(id))?;
        translated.map_step_ids(|src| {
            new_index
                .get(src as usize)
                .copied()
                .flatten()
                .ok_or_else(|| format!("step {step} follows a dropped step"))
        })?;
        // Stage-adding steps insert a stage in both lists.
        match step {
            Step::CacheWrite(_) | Step::Rfactor(_) => sm.insert(s, t),
            Step::CacheRead(_) => sm.insert(s + 1, t + 1),
            _ => {}
        }
        new_index.push(Some(out.len() as u32));
        out.push(translated);
    }
    Ok(out)
}
