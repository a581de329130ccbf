//! CHR (cache_read) and CHW (cache_write): steps that insert a stage (spec §2.3).
use crate::schedule::apply::ApplyToState;
use crate::schedule::error::{ensure, StepResult};
use crate::schedule::state::{ComputeAt, OpAxis, OpKind, OpOrigin, StageOp, State};
use crate::schedule::step_ids::{IdsMut, StepIds};
use crate::schedule::te::{ApplyToSchedule, TSchedule, TeError};
use ttdb_format::ansor::step::{CacheReadStep, CacheWriteStep};
use ttdb_format::ansor::Step;

/// A storage scope such as `local`, `shared`, `global`, `shared.dyn`.
fn check_scope(scope: &str) -> StepResult {
    let ok = !scope.is_empty()
        && scope
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
    ensure(ok, || format!("invalid storage scope {scope:?}"))
}

impl ApplyToState for CacheReadStep {
    fn apply_to_state(&self, state: &mut State) -> StepResult {
        let s = state.any_stage(self.stage_id)?;
        check_scope(&self.scope)?;
        ensure(state.stages[s].compute_at != ComputeAt::Inlined, || {
            format!("CHR of stage {s}, which is inlined")
        })?;
        ensure(!self.reader_stage_ids.is_empty(), || {
            "CHR needs at least one reader stage".into()
        })?;
        let mut readers = Vec::new();
        for (k, &r) in self.reader_stage_ids.iter().enumerate() {
            let r = state.compute_stage(r)?;
            // Readers consume the stage, so they follow it in DAG order.
            ensure(r > s, || {
                format!("CHR reader stage {r} does not come after stage {s}")
            })?;
            ensure(!self.reader_stage_ids[..k].contains(&(r as u32)), || {
                format!("CHR reader stage {r} listed twice")
            })?;
            let reads = state.stages[r].op.inputs.as_ref().map(|i| i.contains(&s));
            ensure(reads != Some(false), || {
                format!("CHR reader stage {r} does not read stage {s}")
            })?;
            readers.push(state.stages[r].op.name.clone());
        }
        let source = &state.stages[s].op;
        // TE's cache_read appends ".d" until the name is new (w.shared, w.d.shared, ...).
        let mut base = source.name.clone();
        while state
            .stages
            .iter()
            .any(|st| st.op.name == format!("{base}.{}", self.scope))
        {
            base.push_str(".d");
        }
        let axes = source
            .output_shape()
            .into_iter()
            .enumerate()
            .map(|(i, extent)| OpAxis {
                te_name: format!("ax{i}"),
                extent,
            })
            .collect();
        let op = StageOp {
            name: format!("{base}.{}", self.scope),
            kind: OpKind::Compute {
                axes,
                reduce_axes: Vec::new(),
            },
            origin: OpOrigin::CacheRead {
                source: source.name.clone(),
                readers,
            },
            inputs: source.inputs.as_ref().map(|_| vec![s]),
        };
        let stage = state.stage_from_op(op);
        // The cache goes right after its source; later ids shift by one.
        state.stages.insert(s + 1, stage);
        state.shift_stage_ids(s + 1, 1);
        // The readers now read the cache instead of the source.
        for &r in &self.reader_stage_ids {
            for i in state.stages[r as usize + 1].op.inputs.iter_mut().flatten() {
                if *i == s {
                    *i = s + 1;
                }
            }
        }
        Ok(())
    }
}

impl ApplyToSchedule for CacheReadStep {
    fn apply_to_schedule(&self, sch: &mut TSchedule, _: &[Step]) -> Result<(), TeError> {
        sch.cache_read(self.stage_id as usize, &self.scope, &self.reader_stage_ids)
    }
}

impl StepIds for CacheReadStep {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        let mut stages = vec![&mut self.stage_id];
        stages.extend(self.reader_stage_ids.iter_mut());
        IdsMut {
            stages,
            ..IdsMut::default()
        }
    }
}

impl ApplyToState for CacheWriteStep {
    fn apply_to_state(&self, state: &mut State) -> StepResult {
        let s = state.loop_stage(self.stage_id)?;
        check_scope(&self.scope)?;
        let stage = &state.stages[s];
        let name = stage.op.name.clone();
        // TVM rebuilds both stages from their ops: earlier loop steps would be dropped, and
        // attach entries on or to this stage would be left pointing at loops that changed.
        ensure(!stage.transformed, || {
            format!("CHW of stage {s} ({name}) after loop transformations of it")
        })?;
        ensure(stage.compute_at == ComputeAt::Root, || {
            format!("CHW of stage {s} ({name}), which is not at root")
        })?;
        ensure(!state.attach_map.has_attached_stages(s), || {
            format!("CHW of stage {s} ({name}), which other stages are attached to")
        })?;
        let cache_name = format!("{name}.{}", self.scope);
        ensure(
            !state.stages.iter().any(|st| st.op.name == cache_name),
            || format!("a stage named {cache_name} exists already"),
        )?;
        // The cache computes the original body on axes renamed `.c`; the original op
        // becomes an element-wise copy with the same axes and no reduction.
        let cache = StageOp {
            name: cache_name.clone(),
            kind: OpKind::Compute {
                axes: stage
                    .op
                    .axes()
                    .iter()
                    .map(|a| OpAxis {
                        te_name: format!("{}.c", a.te_name),
                        extent: a.extent,
                    })
                    .collect(),
                reduce_axes: stage.op.reduce_axes().to_vec(),
            },
            origin: OpOrigin::CacheWrite {
                original: name.clone(),
            },
            inputs: stage.op.inputs.clone(),
        };
        let copy = StageOp {
            name,
            kind: OpKind::Compute {
                axes: stage.op.axes().to_vec(),
                reduce_axes: Vec::new(),
            },
            origin: OpOrigin::CacheWriteCopy { cache: cache_name },
            inputs: stage.op.inputs.as_ref().map(|_| vec![s]),
        };
        let cache = state.stage_from_op(cache);
        let copy = state.stage_from_op(copy);
        // The cache takes index s, the original moves to s+1, later ids shift by one.
        state.stages[s] = copy;
        state.stages.insert(s, cache);
        state.shift_stage_ids(s, 1);
        // (the shift moved the copy's input s, the cache, to s+1: put it back)
        if let Some(inputs) = &mut state.stages[s + 1].op.inputs {
            *inputs = vec![s];
        }
        Ok(())
    }
}

impl ApplyToSchedule for CacheWriteStep {
    fn apply_to_schedule(&self, sch: &mut TSchedule, _: &[Step]) -> Result<(), TeError> {
        sch.cache_write(self.stage_id as usize, &self.scope)
    }
}

impl StepIds for CacheWriteStep {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        IdsMut::stage(&mut self.stage_id)
    }
}

#[cfg(test)]
mod tests {
    use crate::schedule::test_util::{dump_of, matmul_state, stage_line, state_from_dump, step};
    use crate::schedule::OpOrigin;

    /// Spec §2.3 CHW example (resnet-50 `f4380bb1...`).
    #[test]
    fn cache_write_inserts_before_and_renames() {
        let mut st = state_from_dump(
            "0 placeholder placeholder [1,56,56,64]
1 PaddedInput root unroll=0 : i0=1:S i1=56:S i2=56:S i3=64:S
2 placeholder placeholder [1,1,64,256]
3 Conv2dOutput root unroll=0 : nn=1:S yy=56:S xx=56:S ff=256:S ry=1:R rx=1:R rc=64:R",
        );
        st.apply(&step(r#"["CHW", 3, "local"]"#)).unwrap();
        assert_eq!(
            dump_of(&st),
            "0 placeholder placeholder [1,56,56,64]
1 PaddedInput root unroll=0 : i0=1:S i1=56:S i2=56:S i3=64:S
2 placeholder placeholder [1,1,64,256]
3 Conv2dOutput.local root unroll=0 : nn_c=1:S yy_c=56:S xx_c=56:S ff_c=256:S ry=1:R rx=1:R rc=64:R
4 Conv2dOutput root unroll=0 : nn=1:S yy=56:S xx=56:S ff=256:S"
        );
        assert_eq!(st.stages()[3].iters[0].te_name, "nn.c");
        assert_eq!(
            st.stages()[4].op.origin,
            OpOrigin::CacheWriteCopy {
                cache: "Conv2dOutput.local".into()
            }
        );
        // then the tiles of the copy are followed and the cache attached to it
        st.apply(&step(r#"["SP", 4, 3, 256, [16], 1]"#)).unwrap();
        st.apply(&step(r#"["CA", 3, 4, 3]"#)).unwrap();
        assert!(stage_line(&st, 3).starts_with("3 Conv2dOutput.local at:4.3 "));
        assert!(st
            .apply(&step(r#"["CHW", 4, "local"]"#))
            .unwrap_err()
            .reason
            .contains("after loop transformations"));
        st.check_invariants().unwrap();
    }

    #[test]
    fn cache_write_refusals() {
        let mut st = matmul_state();
        assert!(st
            .apply(&step(r#"["CHW", 1, "local"]"#))
            .unwrap_err()
            .reason
            .contains("placeholder"));
        assert!(st
            .apply(&step(r#"["CHW", 2, ""]"#))
            .unwrap_err()
            .reason
            .contains("scope"));
        st.apply(&step(r#"["CA", 2, 4, 0]"#)).unwrap();
        assert!(st
            .apply(&step(r#"["CHW", 2, "local"]"#))
            .unwrap_err()
            .reason
            .contains("not at root"));
        assert!(st
            .apply(&step(r#"["CHW", 4, "local"]"#))
            .unwrap_err()
            .reason
            .contains("attached"));
        st.apply(&step(r#"["CR", 2]"#)).unwrap();
        st.apply(&step(r#"["CHW", 2, "local"]"#)).unwrap();
        // the copy at 3 is fresh again, but a second cache of the same name is refused
        assert!(st
            .apply(&step(r#"["CHW", 3, "local"]"#))
            .unwrap_err()
            .reason
            .contains("exists already"));
    }

    /// Spec §2.3 CHR example (`conv2d.json`, cuda): kernel.shared = 3, conv moves 3 -> 4.
    #[test]
    fn cache_read_inserts_after_source() {
        let mut st = state_from_dump(
            "0 data placeholder [1,512,7,7]
1 pad_temp root unroll=0 : i0=1:S i1=512:S i2=9:S i3=9:S
2 kernel placeholder [512,512,3,3]
3 compute root unroll=0 : nn=1:S ff=512:S yy=7:S xx=7:S rc=512:R ry=3:R rx=3:R
4 bias placeholder [1,512,1,1]
5 T_add root unroll=0 : ax0=1:S ax1=512:S ax2=7:S ax3=7:S",
        );
        st.apply(&step(r#"["CA", 1, 3, 6]"#)).unwrap();
        st.apply(&step(r#"["CHR", 2, "shared", [3]]"#)).unwrap();
        assert_eq!(
            stage_line(&st, 3),
            "3 kernel.shared root unroll=0 : ax0=512:S ax1=512:S ax2=3:S ax3=3:S"
        );
        assert!(stage_line(&st, 4).starts_with("4 compute root"));
        assert!(
            stage_line(&st, 1).starts_with("1 pad_temp at:4.6 "),
            "attach targets shift too"
        );
        st.apply(&step(r#"["CA", 3, 4, 6]"#)).unwrap();
        // a second cache of the same tensor gets ".d"
        st.apply(&step(r#"["CHR", 2, "shared", [4]]"#)).unwrap();
        assert!(stage_line(&st, 3).starts_with("3 kernel.d.shared root"));
        assert!(stage_line(&st, 4).starts_with("4 kernel.shared at:5.6 "));
        // and a cache of a compute stage copies its output shape
        st.apply(&step(r#"["CHR", 5, "local", [7]]"#)).unwrap();
        assert_eq!(
            stage_line(&st, 6),
            "6 compute.local root unroll=0 : ax0=1:S ax1=512:S ax2=7:S ax3=7:S"
        );
        st.check_invariants().unwrap();
        for (s, want) in [
            (r#"["CHR", 2, "shared", []]"#, "at least one reader"),
            (r#"["CHR", 2, "shared", [1]]"#, "does not come after"),
            (r#"["CHR", 2, "shared", [0]]"#, "placeholder"),
            (r#"["CHR", 2, "shared", [5, 5]]"#, "listed twice"),
            (r#"["CHR", 2, "shared", [99]]"#, "out of range"),
            (r#"["CHR", 2, "sh ared", [5]]"#, "scope"),
        ] {
            let e = st.apply(&step(s)).unwrap_err();
            assert!(e.reason.contains(want), "{s}: {e}");
        }
    }
}
