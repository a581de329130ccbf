//! The ids a step names, for code that edits step lists rather than states (the search's
//! fuse knobs, re-targeting a record to another DAG's stage list): stage ids, loop ids of a
//! stage, and indices of earlier steps. Each step declares which of its fields are which
//! in its [`StepIds`] impl, in `steps/` beside its `ApplyToState`; the renumberings here are
//! written once over those declarations.
use ttdb_format::ansor::Step;
use ttdb_format::each_step;

/// Mutable references to the ids of one step, by what they index.
#[derive(Default)]
pub struct IdsMut<'a> {
    /// Stage ids (the step's own stage, a compute-at target, cache-read readers).
    pub stages: Vec<&'a mut u32>,
    /// Loop ids, each with the stage whose loop list it indexes.
    pub loops: Vec<(u32, &'a mut u32)>,
    /// A stage whose whole loop list the step names in some order (RE): no renumbering that
    /// changes the number of loops can keep it a permutation.
    pub all_loops_of: Option<u32>,
    /// Indices of earlier steps in the list (FSP and FFSP sources).
    pub steps: Vec<&'a mut u32>,
}

impl<'a> IdsMut<'a> {
    /// The ids of a step on stage `stage` that names nothing else.
    pub fn stage(stage: &'a mut u32) -> IdsMut<'a> {
        IdsMut {
            stages: vec![stage],
            ..IdsMut::default()
        }
    }

    /// The ids of a step on loop `iter` of stage `stage`.
    pub fn stage_loop(stage: &'a mut u32, iter: &'a mut u32) -> IdsMut<'a> {
        let of = *stage;
        IdsMut {
            stages: vec![stage],
            loops: vec![(of, iter)],
            ..IdsMut::default()
        }
    }
}

/// A step that says which of its fields are ids, and the renumberings that follow.
pub trait StepIds {
    /// The step's id fields, each by what it indexes.
    fn ids_mut(&mut self) -> IdsMut<'_>;

    /// Applies `remap` to every stage id the step names; stops at the first error.
    fn map_stage_ids<E>(&mut self, mut remap: impl FnMut(u32) -> Result<u32, E>) -> Result<(), E> {
        for id in self.ids_mut().stages {
            *id = remap(*id)?;
        }
        Ok(())
    }

    /// Applies `remap` to every loop id of stage `stage` the step names. False when one has
    /// no image, or when the step names the stage's whole loop list (RE); the step may then
    /// be partly renumbered.
    fn map_loop_ids(&mut self, stage: u32, remap: impl Fn(u32) -> Option<u32>) -> bool {
        let ids = self.ids_mut();
        if ids.all_loops_of == Some(stage) {
            return false;
        }
        for (of, id) in ids.loops {
            if of != stage {
                continue;
            }
            match remap(*id) {
                Some(n) => *id = n,
                None => return false,
            }
        }
        true
    }

    /// Applies `remap` to every index of an earlier step the step names; stops at the
    /// first error.
    fn map_step_ids<E>(&mut self, mut remap: impl FnMut(u32) -> Result<u32, E>) -> Result<(), E> {
        for id in self.ids_mut().steps {
            *id = remap(*id)?;
        }
        Ok(())
    }
}

impl StepIds for Step {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        each_step!(self, s => s.ids_mut())
    }
}

/// Inserts `step` at `at`, moving the FSP/FFSP sources at or after `at` along.
pub fn insert_step(steps: &mut Vec<Step>, at: usize, step: Step) {
    shift_step_ids(steps, at, 1);
    steps.insert(at, step);
}

/// Removes the step at `at`; FSP/FFSP sources at or after `at` move back by one.
pub fn remove_step(steps: &mut Vec<Step>, at: usize) {
    steps.remove(at);
    shift_step_ids(steps, at, -1);
}

/// Adds `by` to every step index at or after `at`.
fn shift_step_ids(steps: &mut [Step], at: usize, by: i64) {
    for s in steps {
        for id in s.ids_mut().steps {
            if *id as usize >= at {
                *id = (*id as i64 + by) as u32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(s: &str) -> Step {
        Step::parse(s).unwrap()
    }

    #[test]
    fn every_stage_id_is_mapped() {
        for (before, after) in [
            (r#"["CA", 2, 3, 3]"#, r#"["CA", 12, 13, 3]"#),
            (
                r#"["CHR", 2, "shared", [3, 4]]"#,
                r#"["CHR", 12, "shared", [13, 14]]"#,
            ),
            (r#"["RF", 3, 2, 1]"#, r#"["RF", 13, 2, 1]"#),
            (
                r#"["FFSP", 5, 0, [1, 2], 1, 1]"#,
                r#"["FFSP", 15, 0, [1, 2], 1, 1]"#,
            ),
        ] {
            let mut s = step(before);
            s.map_stage_ids(|id| Ok::<_, ()>(id + 10)).unwrap();
            assert_eq!(s.to_string(), after);
        }
        let mut ca = step(r#"["CA", 2, 3, 3]"#);
        let refused = ca.map_stage_ids(|id| if id == 3 { Err(id) } else { Ok(id) });
        assert_eq!(refused, Err(3));
    }

    #[test]
    fn loop_ids_of_one_stage_are_mapped() {
        let next = |i: u32| Some(i + 1);
        // CA names a loop of its target stage, not of its own.
        let mut ca = step(r#"["CA", 2, 3, 3]"#);
        assert!(ca.map_loop_ids(2, next));
        assert_eq!(ca.to_string(), r#"["CA", 2, 3, 3]"#);
        assert!(ca.map_loop_ids(3, next));
        assert_eq!(ca.to_string(), r#"["CA", 2, 3, 4]"#);
        let mut fu = step(r#"["FU", 3, [0, 1]]"#);
        assert!(fu.map_loop_ids(3, next));
        assert_eq!(fu.to_string(), r#"["FU", 3, [1, 2]]"#);
        // RE names the whole loop list: no renumbering of its stage keeps it a permutation.
        assert!(!step(r#"["RE", 3, [1, 0]]"#).map_loop_ids(3, next));
        assert!(step(r#"["RE", 3, [1, 0]]"#).map_loop_ids(2, next));
        assert!(!step(r#"["AN", 3, 0, 3]"#).map_loop_ids(3, |_| None));
    }

    #[test]
    fn follow_split_sources_move_with_inserted_and_removed_steps() {
        let original: Vec<Step> = [
            r#"["SP", 2, 0, 8, [2], 1]"#,
            r#"["SP", 2, 2, 8, [4], 1]"#,
            r#"["FSP", 3, 0, 1, 2]"#,
            r#"["FFSP", 3, 2, [0, 1], 0, 1]"#,
        ]
        .map(step)
        .into();
        let mut steps = original.clone();
        insert_step(&mut steps, 1, step(r#"["AN", 2, 0, 3]"#));
        assert_eq!(steps[3].to_string(), r#"["FSP", 3, 0, 2, 2]"#);
        assert_eq!(steps[4].to_string(), r#"["FFSP", 3, 2, [0, 2], 0, 1]"#);
        remove_step(&mut steps, 1);
        assert_eq!(steps, original);
    }
}
