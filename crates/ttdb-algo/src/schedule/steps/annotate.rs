//! Steps that only set attributes: AN (loop annotation), PR (pragma), SA (storage align).
use crate::schedule::apply::ApplyToState;
use crate::schedule::error::{ensure, StepResult};
use crate::schedule::state::{ComputeAt, State};
use crate::schedule::step_ids::{IdsMut, StepIds};
use crate::schedule::te::{ApplyToSchedule, TSchedule, TeError};
use ttdb_format::ansor::step::{AnnotationStep, PragmaStep, StorageAlignStep};
use ttdb_format::ansor::{Annotation, Step};

impl ApplyToState for AnnotationStep {
    fn apply_to_state(&self, state: &mut State) -> StepResult {
        let (s, i) = state.loop_iter(self.stage_id, self.iter_id)?;
        let it = &state.stages[s].iters[i];
        // TVM ICHECKs this: an annotation is never replaced.
        ensure(it.annotation == Annotation::None, || {
            format!(
                "iterator {} of stage {s} is already annotated `{}`",
                it.name,
                it.annotation.name()
            )
        })?;
        // The enum has it, but no record can carry the intrinsic it needs (TVM: LOG(FATAL)).
        ensure(self.annotation != Annotation::Tensorize, || {
            "tensorize cannot be applied from a record".into()
        })?;
        let stage = &mut state.stages[s];
        stage.iters[i].annotation = self.annotation;
        stage.transformed = true;
        Ok(())
    }
}

impl ApplyToSchedule for AnnotationStep {
    fn apply_to_schedule(&self, sch: &mut TSchedule, _: &[Step]) -> Result<(), TeError> {
        let st = sch.stage_mut(self.stage_id)?;
        let v = st.leaf(self.iter_id)?;
        st.vars[v].ann = self.annotation;
        Ok(())
    }
}

impl StepIds for AnnotationStep {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        IdsMut::stage_loop(&mut self.stage_id, &mut self.iter_id)
    }
}

/// `auto_unroll_max_step$N` -> N (a non-negative int).
fn parse_auto_unroll(pragma: &str) -> Option<i64> {
    let digits = pragma.strip_prefix("auto_unroll_max_step$")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<i32>().ok().map(i64::from)
}

impl ApplyToState for PragmaStep {
    fn apply_to_state(&self, state: &mut State) -> StepResult {
        // The state ignores the loop, but the schedule puts the pragma on it.
        let (s, _) = state.loop_iter(self.stage_id, self.iter_id)?;
        if self.pragma == "debug_skip_region" {
            // TVM drops the stage's attach entry; a stage still computed at a loop would then
            // have no loop, so only the harmless case is accepted.
            ensure(state.stages[s].compute_at != ComputeAt::Iter, || {
                format!("debug_skip_region on stage {s}, which is computed at a loop, would lose its attach point")
            })?;
            return Ok(());
        }
        let n = parse_auto_unroll(&self.pragma).ok_or_else(|| {
            format!(
                "unsupported pragma {:?}: only auto_unroll_max_step$<N> and debug_skip_region have a state effect",
                self.pragma
            )
        })?;
        state.stages[s].attrs.auto_unroll_max_step = n;
        Ok(())
    }
}

impl ApplyToSchedule for PragmaStep {
    fn apply_to_schedule(&self, sch: &mut TSchedule, _: &[Step]) -> Result<(), TeError> {
        let st = sch.stage_mut(self.stage_id)?;
        let v = st.leaf(self.iter_id)?;
        if self.pragma == "debug_skip_region" {
            return Err(TeError::Unsupported(
                "pragma debug_skip_region (skips the stage's computation)".into(),
            ));
        }
        let n = parse_auto_unroll(&self.pragma)
            .ok_or_else(|| TeError::Unsupported(format!("pragma {:?}", self.pragma)))?;
        st.pragma = Some((v, n));
        Ok(())
    }
}

impl StepIds for PragmaStep {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        IdsMut::stage_loop(&mut self.stage_id, &mut self.iter_id)
    }
}

impl ApplyToState for StorageAlignStep {
    fn apply_to_state(&self, state: &mut State) -> StepResult {
        let (s, _) = state.loop_iter(self.stage_id, self.iter_id)?;
        ensure(
            self.factor >= 1 && (0..self.factor).contains(&self.offset),
            || {
                format!("storage_align needs factor >= 1 and 0 <= offset < factor, got factor {} offset {}", self.factor, self.offset)
            },
        )?;
        state.stages[s].attrs.storage_offset = self.offset;
        Ok(())
    }
}

impl ApplyToSchedule for StorageAlignStep {
    /// Storage alignment only pads the allocation's row stride: no effect on values.
    fn apply_to_schedule(&self, _: &mut TSchedule, _: &[Step]) -> Result<(), TeError> {
        Ok(())
    }
}

impl StepIds for StorageAlignStep {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        IdsMut::stage_loop(&mut self.stage_id, &mut self.iter_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::test_util::{matmul_state, step};

    #[test]
    fn annotation_sets_and_refuses_reannotation() {
        let mut st = matmul_state();
        st.apply(&step(r#"["AN", 2, 1, 2]"#)).unwrap();
        assert_eq!(st.stages()[2].iters[1].annotation, Annotation::Vectorize);
        let e = st.apply(&step(r#"["AN", 2, 1, 1]"#)).unwrap_err();
        assert!(e.reason.contains("already annotated `vectorize`"), "{e}");
        assert_eq!(e.step_index, 1);
        assert!(st
            .apply(&step(r#"["AN", 2, 0, 11]"#))
            .unwrap_err()
            .reason
            .contains("tensorize"));
        assert!(st
            .apply(&step(r#"["AN", 2, 3, 3]"#))
            .unwrap_err()
            .reason
            .contains("out of range"));
        assert!(st
            .apply(&step(r#"["AN", 0, 0, 3]"#))
            .unwrap_err()
            .reason
            .contains("placeholder"));
    }

    #[test]
    fn pragma_sets_auto_unroll_only() {
        let mut st = matmul_state();
        st.apply(&step(r#"["PR", 2, 0, "auto_unroll_max_step$512"]"#))
            .unwrap();
        assert_eq!(st.stages()[2].attrs.auto_unroll_max_step, 512);
        st.apply(&step(r#"["PR", 2, 0, "debug_skip_region"]"#))
            .unwrap();
        for bad in [
            "auto_unroll_max_step$",
            "auto_unroll_max_step$-4",
            "auto_unroll_max_step$9999999999",
            "unroll_explicit",
        ] {
            let e = st
                .apply(&step(&format!(r#"["PR", 2, 0, "{bad}"]"#)))
                .unwrap_err();
            assert!(e.reason.contains("unsupported pragma"), "{bad}: {e}");
        }
        assert!(st
            .apply(&step(r#"["PR", 2, 7, "auto_unroll_max_step$8"]"#))
            .is_err());
        assert_eq!(st.stages()[2].attrs.auto_unroll_max_step, 512);
    }

    #[test]
    fn storage_align_sets_offset() {
        let mut st = matmul_state();
        st.apply(&step(r#"["SA", 2, 0, 32, 8]"#)).unwrap();
        assert_eq!(st.stages()[2].attrs.storage_offset, 8);
        assert!(st.dump().contains("unroll=0 offset=8 :"));
        assert!(st.apply(&step(r#"["SA", 2, 0, 0, 0]"#)).is_err());
        assert!(st.apply(&step(r#"["SA", 2, 0, 8, 8]"#)).is_err());
    }
}
