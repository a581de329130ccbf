//! RE: reorder the loops of a stage.
use crate::schedule::apply::ApplyToState;
use crate::schedule::error::{ensure, StepResult};
use crate::schedule::state::State;
use crate::schedule::step_ids::{IdsMut, StepIds};
use crate::schedule::te::{ApplyToSchedule, TSchedule, TeError};
use ttdb_format::ansor::step::ReorderStep;
use ttdb_format::ansor::Step;

impl ApplyToState for ReorderStep {
    fn apply_to_state(&self, state: &mut State) -> StepResult {
        let s = state.loop_stage(self.stage_id)?;
        let n = state.stages[s].iters.len();
        let mut seen = vec![false; n];
        let is_permutation = self.after_ids.len() == n
            && self
                .after_ids
                .iter()
                .all(|&i| (i as usize) < n && !std::mem::replace(&mut seen[i as usize], true));
        ensure(is_permutation, || {
            format!(
                "RE order {:?} is not a permutation of the {n} iterators of stage {s}",
                self.after_ids
            )
        })?;
        let new_iters: Vec<_> = self
            .after_ids
            .iter()
            .map(|&i| state.stages[s].iters[i as usize].clone())
            .collect();
        // Like TVM, the attach map keeps its indices. TE keeps attached stages at the same
        // loop *object*, so a reorder that moves an attach loop would make the state's index
        // name a different loop than the schedule uses: refused rather than silently
        // retargeted. (Ansor emits RE before the CA on a target, so real records never do it.)
        for (attached, p) in state.attach_map.entries() {
            if p.stage != s {
                continue;
            }
            let now = new_iters.iter().position(|it| it.ident == p.ident);
            if now != Some(p.iter) {
                let loop_name = &state.stages[s]
                    .iters
                    .iter()
                    .find(|it| it.ident == p.ident)
                    .map(|it| it.name.clone());
                return Err(format!(
                    "RE moves loop {} of stage {s}, where stage {attached} is attached, from index {} to {}; \
                     the attach map would then name loop {} instead",
                    loop_name.as_deref().unwrap_or("?"),
                    p.iter,
                    now.map_or("?".into(), |i| i.to_string()),
                    new_iters.get(p.iter).map_or("?", |it| it.name.as_str()),
                ));
            }
        }
        let stage = &mut state.stages[s];
        stage.iters = new_iters;
        stage.transformed = true;
        Ok(())
    }
}

impl ApplyToSchedule for ReorderStep {
    fn apply_to_schedule(&self, sch: &mut TSchedule, _: &[Step]) -> Result<(), TeError> {
        let st = sch.stage_mut(self.stage_id)?;
        let new: Vec<usize> = self
            .after_ids
            .iter()
            .map(|&i| st.leaf(i))
            .collect::<Result<_, _>>()?;
        let mut sorted = new.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != st.leaves.len() || new.len() != st.leaves.len() {
            return Err(TeError::Mismatch("RE is not a permutation".into()));
        }
        st.leaves = new;
        Ok(())
    }
}

impl StepIds for ReorderStep {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        let stage = self.stage_id;
        IdsMut {
            stages: vec![&mut self.stage_id],
            loops: self.after_ids.iter_mut().map(|id| (stage, id)).collect(),
            all_loops_of: Some(stage),
            ..IdsMut::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::schedule::test_util::{matmul_state, stage_line, step};

    #[test]
    fn reorder_permutes() {
        let mut st = matmul_state();
        st.apply(&step(r#"["RE", 2, [2, 0, 1]]"#)).unwrap();
        assert_eq!(
            stage_line(&st, 2),
            "2 matmul root unroll=0 : k=1024:R i=1024:S j=1024:S"
        );
        for bad in [
            r#"["RE", 2, [0, 1]]"#,
            r#"["RE", 2, [0, 1, 1]]"#,
            r#"["RE", 2, [0, 1, 3]]"#,
            r#"["RE", 2, [0, 1, 2, 0]]"#,
        ] {
            assert!(
                st.apply(&step(bad))
                    .unwrap_err()
                    .reason
                    .contains("not a permutation"),
                "{bad}"
            );
        }
    }

    #[test]
    fn reorder_that_moves_an_attach_loop_is_refused() {
        let mut st = matmul_state();
        st.apply(&step(r#"["CA", 2, 4, 0]"#)).unwrap();
        // moving the attach loop i away from index 0 would retarget stage 2 to j
        let e = st.apply(&step(r#"["RE", 4, [1, 0]]"#)).unwrap_err();
        assert!(
            e.reason.contains(
                "RE moves loop i of stage 4, where stage 2 is attached, from index 0 to 1"
            ),
            "{e}"
        );
        assert!(e.reason.contains("name loop j instead"), "{e}");
        // a reorder that keeps the attach loop in place is fine
        st.apply(&step(r#"["SP", 4, 1, 1024, [4, 4], 1]"#)).unwrap();
        st.apply(&step(r#"["RE", 4, [0, 2, 1, 3]]"#)).unwrap();
        assert_eq!(
            stage_line(&st, 4),
            "4 out root unroll=0 : i=1024:S j.1=4:S j.0=64:S j.2=4:S"
        );
        st.check_invariants().unwrap();
    }
}
