//! Whole-state checks: nested parallel loops (after AN/CA/RE) and the structural
//! invariants every replayed state keeps (used by tests and by consumers of a state).
use super::state::{ComputeAt, State};
use ttdb_format::ansor::Annotation;

fn parallel_count(state: &State, stage: usize, upto: Option<usize>) -> usize {
    let iters = &state.stages[stage].iters;
    let end = upto.map_or(iters.len(), |i| (i + 1).min(iters.len()));
    iters[..end]
        .iter()
        .filter(|it| it.annotation == Annotation::Parallel)
        .count()
}

/// TVM's CPU codegen cannot nest parallel loops ("Nested parallel loop is not supported by
/// threadpool"): a stage may have one parallel loop, and none if it is computed inside a
/// parallel loop of a stage it is attached to (directly or through a chain of attaches).
pub fn check_parallel_nesting(state: &State) -> Result<(), String> {
    for (s, stage) in state.stages.iter().enumerate() {
        if stage.compute_at == ComputeAt::Inlined || stage.op.is_placeholder() {
            continue;
        }
        let own = parallel_count(state, s, None);
        if own > 1 {
            return Err(format!(
                "stage {s} ({}) would have {own} nested parallel loops",
                stage.op.name
            ));
        }
        if own == 0 {
            continue;
        }
        // Attach targets always have larger ids, so this walk ends; the bound is a guard.
        let mut cur = s;
        for _ in 0..state.stages.len() {
            if state.stages[cur].compute_at != ComputeAt::Iter {
                break;
            }
            let Some(p) = state.attach_map.attach_point(cur) else {
                break;
            };
            if parallel_count(state, p.stage, Some(p.iter)) > 0 {
                return Err(format!(
                    "stage {s} ({}) has a parallel loop inside a parallel loop of stage {} ({}): nested parallel",
                    stage.op.name, p.stage, state.stages[p.stage].op.name
                ));
            }
            cur = p.stage;
        }
    }
    Ok(())
}

impl State {
    /// Structural invariants of a replayed state; `Err` names the first violation. Every
    /// state reachable through [`State::apply`] satisfies them.
    pub fn check_invariants(&self) -> Result<(), String> {
        let n = self.stages.len();
        for (s, stage) in self.stages.iter().enumerate() {
            let entry = self.attach_map.attach_point(s);
            match (stage.compute_at, entry) {
                (ComputeAt::Iter, None) => {
                    return Err(format!(
                        "stage {s} is computed at a loop but has no attach entry"
                    ))
                }
                (ComputeAt::Root | ComputeAt::Inlined, Some(_)) => {
                    return Err(format!(
                        "stage {s} is not computed at a loop but has an attach entry"
                    ))
                }
                _ => {}
            }
            if stage.op.is_placeholder()
                && (!stage.iters.is_empty() || stage.compute_at != ComputeAt::Root)
            {
                return Err(format!(
                    "placeholder stage {s} has loops or a compute location"
                ));
            }
            for it in &stage.iters {
                if let Some(e) = it.extent {
                    if !(1..=super::MAX_EXTENT).contains(&e) {
                        return Err(format!("stage {s} loop {} has extent {e}", it.name));
                    }
                }
            }
        }
        for (s, p) in self.attach_map.entries() {
            if s >= n || p.stage >= n {
                return Err(format!(
                    "attach entry {s} -> {}.{} names a missing stage",
                    p.stage, p.iter
                ));
            }
            if p.stage <= s {
                return Err(format!(
                    "stage {s} is attached to stage {}, which is not after it",
                    p.stage
                ));
            }
            let target = &self.stages[p.stage];
            if target.op.is_placeholder() || target.compute_at == ComputeAt::Inlined {
                return Err(format!(
                    "stage {s} is attached to stage {} which has no loops",
                    p.stage
                ));
            }
            if self.iter_position(p.stage, p.ident) != Some(p.iter) {
                return Err(format!(
                    "stage {s} is attached at index {}.{} but its loop is at {:?}",
                    p.stage,
                    p.iter,
                    self.iter_position(p.stage, p.ident)
                ));
            }
            if !self.attach_map.attached_at(p.stage, p.iter).contains(&s) {
                return Err(format!("attach map halves disagree for stage {s}"));
            }
        }
        let listed: usize = self.attach_map.attached_loops().map(|(_, v)| v.len()).sum();
        if listed != self.attach_map.entries().count() {
            return Err("attach map halves disagree in size".into());
        }
        check_parallel_nesting(self)
    }
}
