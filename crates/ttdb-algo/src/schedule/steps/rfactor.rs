//! RF (rfactor): split a reduction into a partial stage `<op>.rf` and a final `<op>.repl`
//! (spec §2.3, TE `Schedule::rfactor`).
use crate::schedule::apply::ApplyToState;
use crate::schedule::error::{ensure, StepResult};
use crate::schedule::iterator::IterKind;
use crate::schedule::state::{OpAxis, OpKind, OpOrigin, StageOp, State};
use crate::schedule::step_ids::{IdsMut, StepIds};
use crate::schedule::te::{ApplyToSchedule, TSchedule, TeError};
use ttdb_format::ansor::step::RfactorStep;
use ttdb_format::ansor::Step;

impl ApplyToState for RfactorStep {
    fn apply_to_state(&self, state: &mut State) -> StepResult {
        let (s, i) = state.loop_iter(self.stage_id, self.iter_id)?;
        // TVM replays the SP (and an FU before it) to build the TE rfactor: it must come
        // right before, on the same stage.
        let split = match state.transform_steps.last() {
            Some(Step::Split(sp)) if sp.stage_id == self.stage_id => sp.clone(),
            _ => return Err(format!("RF must come right after an SP of stage {s}")),
        };
        let first_part = split.iter_id as usize;
        let parts = first_part..=first_part + split.lengths.len();
        ensure(parts.contains(&i), || {
            format!("RF iterator {i} is not one of the loops {parts:?} made by the preceding SP")
        })?;
        let stage = &state.stages[s];
        let name = stage.op.name.clone();
        let axis = stage.iters[i].clone();
        ensure(axis.kind == IterKind::Reduction, || {
            format!("RF iterator {} is not a reduction loop", axis.name)
        })?;
        ensure(!state.attach_map.has_attached_stages(s), || {
            format!("RF of stage {s} ({name}), which other stages are attached to")
        })?;
        let n_axes = stage.op.axes().len();
        let factor_axis = self.factor_iter_id as usize;
        ensure(factor_axis <= n_axes, || {
            format!("RF factor_iter_id {factor_axis} is above the {n_axes} spatial axes")
        })?;

        // The original reduce axes the split loop came from are replaced by the split parts.
        let touched: Vec<usize> = stage.iters[parts.clone()]
            .iter()
            .flat_map(|p| p.source_axes.iter().copied())
            .collect();
        let mut rf_axes = stage.op.axes().to_vec();
        rf_axes.insert(
            factor_axis,
            OpAxis {
                te_name: axis.te_name.clone(),
                extent: axis.extent,
            },
        );
        let mut rf_reduce: Vec<OpAxis> = (stage.op.reduce_axes().iter().enumerate())
            .filter(|(k, _)| !touched.contains(&(n_axes + k)))
            .map(|(_, a)| a.clone())
            .collect();
        rf_reduce.extend(
            stage.iters[parts]
                .iter()
                .filter(|p| p.ident != axis.ident)
                .map(|p| OpAxis {
                    te_name: p.te_name.clone(),
                    extent: p.extent,
                }),
        );
        let rf_name = format!("{name}.rf");
        let rf = StageOp {
            name: rf_name.clone(),
            kind: OpKind::Compute {
                axes: rf_axes,
                reduce_axes: rf_reduce,
            },
            origin: OpOrigin::Rfactor {
                original: name.clone(),
                factored_axis: axis.te_name.clone(),
                factor_axis,
            },
            inputs: stage.op.inputs.clone(),
        };
        // The final reduction: axes ax0.. with the original extents, reducing over the factored loop.
        let repl_axes = (stage.op.axes().iter().enumerate())
            .map(|(k, a)| OpAxis {
                te_name: format!("ax{k}"),
                extent: a.extent,
            })
            .collect();
        let repl = StageOp {
            name: format!("{name}.repl"),
            kind: OpKind::Compute {
                axes: repl_axes,
                reduce_axes: vec![OpAxis {
                    te_name: format!("{}.v", axis.te_name),
                    extent: axis.extent,
                }],
            },
            origin: OpOrigin::RfactorRepl {
                original: name,
                rfactor: rf_name,
            },
            inputs: stage.op.inputs.as_ref().map(|_| vec![s]),
        };
        let compute_at = stage.compute_at;
        let rf = state.stage_from_op(rf);
        let mut repl = state.stage_from_op(repl);
        // The final stage keeps the place of the original (its attach entry moves with it).
        repl.compute_at = compute_at;
        state.stages[s] = repl;
        state.stages.insert(s, rf);
        state.shift_stage_ids(s, 1);
        // (the shift moved the final stage's input s, the partial stage, to s+1: put it back)
        if let Some(inputs) = &mut state.stages[s + 1].op.inputs {
            *inputs = vec![s];
        }
        Ok(())
    }
}

impl ApplyToSchedule for RfactorStep {
    fn apply_to_schedule(&self, sch: &mut TSchedule, _: &[Step]) -> Result<(), TeError> {
        sch.rfactor(
            self.stage_id as usize,
            self.iter_id,
            self.factor_iter_id as usize,
        )
    }
}

impl StepIds for RfactorStep {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        // `factor_iter_id` is a position among the new stage's axes, not a loop id.
        IdsMut::stage_loop(&mut self.stage_id, &mut self.iter_id)
    }
}

#[cfg(test)]
mod tests {
    use crate::schedule::test_util::{dump_of, stage_line, state_from_dump, step};

    fn softmax() -> crate::schedule::State {
        state_from_dump(
            "0 placeholder placeholder [1,1000]
1 T_softmax_maxelem root unroll=0 : i0=1:S k=1000:R
2 T_softmax_exp root unroll=0 : i0=1:S i1=1000:S
3 T_softmax_expsum root unroll=0 : i0=1:S k=1000:R
4 T_softmax_norm root unroll=0 : i0=1:S i1=1000:S",
        )
    }

    /// Spec §2.3 RF example (resnet-50 softmax `d7b65649...`).
    #[test]
    fn rfactor_inner_part() {
        let mut st = softmax();
        st.apply(&step(r#"["SP", 3, 1, 1000, [50], 1]"#)).unwrap();
        st.apply(&step(r#"["RF", 3, 2, 1]"#)).unwrap();
        st.apply(&step(r#"["RE", 3, [0, 2, 1]]"#)).unwrap();
        assert_eq!(
            stage_line(&st, 3),
            "3 T_softmax_expsum.rf root unroll=0 : i0=1:S k_o=20:R k_i=50:S"
        );
        assert_eq!(
            stage_line(&st, 4),
            "4 T_softmax_expsum.repl root unroll=0 : ax0=1:S k_i_v=50:R"
        );
        assert!(stage_line(&st, 5).starts_with("5 T_softmax_norm "));
        st.check_invariants().unwrap();
    }

    #[test]
    fn rfactor_of_fused_reduction_keeps_compute_location() {
        let mut st = state_from_dump(
            "0 p placeholder [1,64,8,8]
1 pool root unroll=0 : ax0=1:S ax1=64:S rv0=8:R rv1=8:R
2 out root unroll=0 : ax0=1:S ax1=64:S",
        );
        st.apply(&step(r#"["CA", 1, 2, 1]"#)).unwrap();
        st.apply(&step(r#"["FU", 1, [2, 3]]"#)).unwrap();
        st.apply(&step(r#"["SP", 1, 2, 0, [16], 1]"#)).unwrap();
        st.apply(&step(r#"["RF", 1, 2, 2]"#)).unwrap();
        assert_eq!(
            dump_of(&st),
            "0 p placeholder [1,64,8,8]
1 pool.rf root unroll=0 : ax0=1:S ax1=64:S rv0_rv1_fused_o=?:S rv0_rv1_fused_i=?:R
2 pool.repl at:3.1 unroll=0 : ax0=1:S ax1=64:S rv0_rv1_fused_o_v=?:R
3 out root unroll=0 : ax0=1:S ax1=64:S"
        );
        st.check_invariants().unwrap();
    }

    #[test]
    fn rfactor_refusals() {
        let mut st = softmax();
        assert!(st
            .apply(&step(r#"["RF", 3, 1, 1]"#))
            .unwrap_err()
            .reason
            .contains("right after an SP"));
        st.apply(&step(r#"["SP", 3, 1, 1000, [50], 1]"#)).unwrap();
        assert!(st
            .apply(&step(r#"["RF", 1, 1, 1]"#))
            .unwrap_err()
            .reason
            .contains("right after an SP of stage 1"));
        assert!(st
            .apply(&step(r#"["RF", 3, 0, 1]"#))
            .unwrap_err()
            .reason
            .contains("not one of the loops"));
        assert!(st
            .apply(&step(r#"["RF", 3, 2, 2]"#))
            .unwrap_err()
            .reason
            .contains("above the 1 spatial axes"));
        st.apply(&step(r#"["SP", 2, 1, 1000, [50], 1]"#)).unwrap();
        assert!(st
            .apply(&step(r#"["RF", 2, 1, 0]"#))
            .unwrap_err()
            .reason
            .contains("not a reduction loop"));
    }
}
