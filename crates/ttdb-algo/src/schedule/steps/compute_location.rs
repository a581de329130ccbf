//! CA, CI, CR: where a stage is computed.
use crate::schedule::apply::ApplyToState;
use crate::schedule::attach::AttachPoint;
use crate::schedule::error::{ensure, StepResult};
use crate::schedule::state::{ComputeAt, State};
use crate::schedule::step_ids::{IdsMut, StepIds};
use crate::schedule::te::{ApplyToSchedule, Loc, TSchedule, TeError};
use ttdb_format::ansor::step::{ComputeAtStep, ComputeInlineStep, ComputeRootStep};
use ttdb_format::ansor::Step;

/// After CA/CR the loop ranges are stale until bounds are inferred again (TVM drops them).
fn forget_extents(state: &mut State, s: usize) {
    for it in &mut state.stages[s].iters {
        it.extent = None;
    }
}

impl ApplyToState for ComputeAtStep {
    fn apply_to_state(&self, state: &mut State) -> StepResult {
        let s = state.compute_stage(self.stage_id)?;
        ensure(self.target_stage_id != self.stage_id, || {
            format!("CA of stage {s} onto itself")
        })?;
        let (t, ti) = state.loop_iter(self.target_stage_id, self.target_iter_id)?;
        // Stage order is a post-order of the DAG, so every consumer (direct or not) has a
        // larger id; a smaller one is a producer and the attach would form a cycle.
        ensure(t > s, || {
            format!(
                "CA target stage {t} comes before stage {s} in DAG order, so it cannot consume it"
            )
        })?;
        ensure(state.consumes(t, s) != Some(false), || {
            format!("CA target stage {t} does not consume stage {s}")
        })?;
        let ident = state.stages[t].iters[ti].ident;
        forget_extents(state, s);
        state.stages[s].compute_at = ComputeAt::Iter;
        state.attach_map.set_compute_at(
            s,
            AttachPoint {
                stage: t,
                iter: ti,
                ident,
            },
        );
        Ok(())
    }
}

impl ApplyToSchedule for ComputeAtStep {
    fn apply_to_schedule(&self, sch: &mut TSchedule, _: &[Step]) -> Result<(), TeError> {
        let target = self.target_stage_id as usize;
        let var = sch
            .stage_mut(self.target_stage_id)?
            .leaf(self.target_iter_id)?;
        sch.stage_mut(self.stage_id)?.loc = Loc::At { stage: target, var };
        Ok(())
    }
}

impl StepIds for ComputeAtStep {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        let target = self.target_stage_id;
        IdsMut {
            stages: vec![&mut self.stage_id, &mut self.target_stage_id],
            loops: vec![(target, &mut self.target_iter_id)],
            ..IdsMut::default()
        }
    }
}

impl ApplyToState for ComputeInlineStep {
    fn apply_to_state(&self, state: &mut State) -> StepResult {
        let s = state.compute_stage(self.stage_id)?;
        let name = &state.stages[s].op.name;
        ensure(!state.attach_map.has_attached_stages(s), || {
            format!("CI of stage {s} ({name}), which other stages are attached to")
        })?;
        // TE cannot inline a reduction into an expression, nor drop the output's loops.
        ensure(state.stages[s].op.reduce_axes().is_empty(), || {
            format!("CI of stage {s} ({name}), a reduction")
        })?;
        let is_output = state
            .has_consumers(s)
            .map_or(s + 1 == state.stages.len(), |c| !c);
        ensure(!is_output, || {
            format!("CI of stage {s} ({name}), an output")
        })?;
        state.stages[s].compute_at = ComputeAt::Inlined;
        state.attach_map.delete_stage(s);
        Ok(())
    }
}

impl ApplyToSchedule for ComputeInlineStep {
    fn apply_to_schedule(&self, sch: &mut TSchedule, _: &[Step]) -> Result<(), TeError> {
        sch.stage_mut(self.stage_id)?.loc = Loc::Inline;
        Ok(())
    }
}

impl StepIds for ComputeInlineStep {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        IdsMut::stage(&mut self.stage_id)
    }
}

impl ApplyToState for ComputeRootStep {
    fn apply_to_state(&self, state: &mut State) -> StepResult {
        let s = state.compute_stage(self.stage_id)?;
        forget_extents(state, s);
        state.stages[s].compute_at = ComputeAt::Root;
        state.attach_map.delete_stage(s);
        Ok(())
    }
}

impl ApplyToSchedule for ComputeRootStep {
    fn apply_to_schedule(&self, sch: &mut TSchedule, _: &[Step]) -> Result<(), TeError> {
        sch.stage_mut(self.stage_id)?.loc = Loc::Root;
        Ok(())
    }
}

impl StepIds for ComputeRootStep {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        IdsMut::stage(&mut self.stage_id)
    }
}

#[cfg(test)]
mod tests {
    use crate::schedule::test_util::{matmul_state, stage_line, step};

    #[test]
    fn compute_at_forgets_extents_and_attaches() {
        let mut st = matmul_state();
        st.apply(&step(r#"["CA", 2, 4, 1]"#)).unwrap();
        assert_eq!(
            stage_line(&st, 2),
            "2 matmul at:4.1 unroll=0 : i=?:S j=?:S k=?:R"
        );
        assert_eq!(st.attach_map().attached_at(4, 1), &[2]);
        st.apply(&step(r#"["CR", 2]"#)).unwrap();
        assert_eq!(
            stage_line(&st, 2),
            "2 matmul root unroll=0 : i=?:S j=?:S k=?:R"
        );
        assert!(st.attach_map().entries().next().is_none());
        st.check_invariants().unwrap();
    }

    #[test]
    fn compute_at_refuses_bad_targets() {
        let mut st = matmul_state();
        for (s, want) in [
            (r#"["CA", 2, 2, 0]"#, "onto itself"),
            (r#"["CA", 4, 2, 0]"#, "comes before stage 4"),
            (r#"["CA", 2, 3, 0]"#, "placeholder"),
            (r#"["CA", 0, 2, 0]"#, "placeholder"),
            (r#"["CA", 2, 4, 2]"#, "out of range"),
            (r#"["CA", 2, 9, 0]"#, "out of range"),
        ] {
            let e = st.apply(&step(s)).unwrap_err();
            assert!(e.reason.contains(want), "{s}: {e}");
        }
    }

    #[test]
    fn compute_inline_rules() {
        let mut st = matmul_state();
        assert!(st
            .apply(&step(r#"["CI", 2]"#))
            .unwrap_err()
            .reason
            .contains("a reduction"));
        assert!(st
            .apply(&step(r#"["CI", 4]"#))
            .unwrap_err()
            .reason
            .contains("an output"));
        assert!(st
            .apply(&step(r#"["CI", 1]"#))
            .unwrap_err()
            .reason
            .contains("placeholder"));
        let mut st = crate::schedule::test_util::elementwise_chain_state();
        st.apply(&step(r#"["CA", 1, 2, 0]"#)).unwrap();
        assert!(st
            .apply(&step(r#"["CI", 2]"#))
            .unwrap_err()
            .reason
            .contains("other stages are attached"));
        st.apply(&step(r#"["CI", 1]"#)).unwrap();
        assert_eq!(stage_line(&st, 1), "1 B inline unroll=0 : ax0=?:S");
        assert!(st.attach_map().entries().next().is_none());
        // an inlined stage has no loops to transform or to attach to
        assert!(st
            .apply(&step(r#"["SP", 1, 0, 0, [2], 1]"#))
            .unwrap_err()
            .reason
            .contains("inlined"));
        st.check_invariants().unwrap();
        let mut st = crate::schedule::test_util::elementwise_chain_state();
        st.apply(&step(r#"["CI", 2]"#)).unwrap();
        assert!(st
            .apply(&step(r#"["CA", 1, 2, 0]"#))
            .unwrap_err()
            .reason
            .contains("inlined"));
    }
}
