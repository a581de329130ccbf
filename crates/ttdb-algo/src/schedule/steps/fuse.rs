//! FU: fuse consecutive loops into one.
use crate::schedule::apply::ApplyToState;
use crate::schedule::error::{capped_product, ensure, StepResult};
use crate::schedule::iterator::{IterKind, Iterator};
use crate::schedule::state::State;
use crate::schedule::step_ids::{IdsMut, StepIds};
use crate::schedule::te::{ApplyToSchedule, TSchedule, TeError};
use ttdb_format::ansor::step::FuseStep;
use ttdb_format::ansor::{Annotation, Step};

impl ApplyToState for FuseStep {
    fn apply_to_state(&self, state: &mut State) -> StepResult {
        let s = state.loop_stage(self.stage_id)?;
        let ids = &self.fused_ids;
        // TVM's state turns an empty list into "replace every loop" (its TE side inserts a
        // singleton loop instead): refused.
        let (&first, &last) = match (ids.first(), ids.last()) {
            (Some(f), Some(l)) => (f, l),
            _ => return Err("FU needs at least one iterator".into()),
        };
        for (k, &id) in ids.iter().enumerate() {
            ensure(id as u64 == first as u64 + k as u64, || {
                format!("FU iterators {ids:?} are not consecutive")
            })?;
        }
        let n_iters = state.stages[s].iters.len();
        ensure((last as usize) < n_iters, || {
            format!("iterator id {last} is out of range for stage {s} ({n_iters} iterators)")
        })?;
        let (b, e) = (first as usize, last as usize);
        // A stage attached to an outer fused loop would lose its position (TVM: LOG(FATAL));
        // the innermost one is fine, the stage then sits in the fused loop.
        for i in b..e {
            if let Some(&attached) = state.attach_map.attached_at(s, i).first() {
                return Err(format!(
                    "FU would fuse loop {i} of stage {s}, where stage {attached} is attached"
                ));
            }
        }
        let fused: Vec<Iterator> = state.stages[s].iters[b..=e].to_vec();
        let extent = if fused.iter().all(|it| it.extent.is_some()) {
            Some(capped_product(
                fused.iter().filter_map(|it| it.extent),
                "fused extent",
            )?)
        } else {
            None
        };
        let kind = if fused.iter().all(|it| it.kind == fused[0].kind) {
            fused[0].kind
        } else {
            IterKind::Mixed
        };
        // TE fuses pairwise: ((a.b.fused).c.fused); one loop keeps its variable.
        let te_name = fused[1..].iter().fold(fused[0].te_name.clone(), |acc, it| {
            format!("{acc}.{}.fused", it.te_name)
        });
        let new = Iterator {
            name: fused.iter().map(|it| format!("{}@", it.name)).collect(),
            extent,
            kind,
            annotation: Annotation::None,
            source_axes: fused
                .iter()
                .flat_map(|it| it.source_axes.iter().copied())
                .collect(),
            te_name,
            ident: state.fresh_ident(),
            orig_iters: Vec::new(),
        };
        let new_ident = new.ident;
        let old_idents: Vec<_> = fused.iter().map(|it| it.ident).collect();
        let new = Iterator {
            orig_iters: fused,
            ..new
        };
        let stage = &mut state.stages[s];
        stage.iters.splice(b..=e, [new]);
        stage.transformed = true;
        // Loops inside the fused range collapse onto it, later ones move up by e - b.
        let from: Vec<usize> = (b + 1..n_iters).collect();
        let to: Vec<usize> = from
            .iter()
            .map(|&i| if i > e { i - (e - b) } else { b })
            .collect();
        state.attach_map.update_iters(s, &from, &to);
        state.attach_map.replace_ident(s, &old_idents, new_ident);
        Ok(())
    }
}

impl ApplyToSchedule for FuseStep {
    fn apply_to_schedule(&self, sch: &mut TSchedule, _: &[Step]) -> Result<(), TeError> {
        sch.stage_mut(self.stage_id)?.fuse(&self.fused_ids)
    }
}

impl StepIds for FuseStep {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        let stage = self.stage_id;
        IdsMut {
            stages: vec![&mut self.stage_id],
            loops: self.fused_ids.iter_mut().map(|id| (stage, id)).collect(),
            ..IdsMut::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::schedule::test_util::{matmul_state, stage_line, step};
    use crate::schedule::IterKind;
    use ttdb_format::ansor::Annotation;

    #[test]
    fn fuse_names_extent_kind_and_orig_iters() {
        let mut st = matmul_state();
        st.apply(&step(r#"["AN", 2, 0, 3]"#)).unwrap();
        st.apply(&step(r#"["FU", 2, [0, 1]]"#)).unwrap();
        assert_eq!(
            stage_line(&st, 2),
            "2 matmul root unroll=0 : i@j@=1048576:S k=1024:R"
        );
        let it = &st.stages()[2].iters[0];
        assert_eq!(it.annotation, Annotation::None, "fusing drops annotations");
        assert_eq!(it.orig_iters.len(), 2);
        assert_eq!(it.orig_iters[0].annotation, Annotation::Parallel);
        assert_eq!(it.te_name, "i.j.fused");
        st.apply(&step(r#"["FU", 2, [0, 1]]"#)).unwrap();
        let it = &st.stages()[2].iters[0];
        assert_eq!((it.name.as_str(), it.kind), ("i@j@@k@", IterKind::Mixed));
        assert_eq!(it.te_name, "i.j.fused.k.fused");
        assert_eq!(it.source_axes, [0, 1, 2]);
        assert_eq!(it.extent, Some(1 << 30));
    }

    #[test]
    fn fuse_refuses_bad_lists() {
        let mut st = matmul_state();
        for (s, want) in [
            (r#"["FU", 2, []]"#, "at least one"),
            (r#"["FU", 2, [0, 2]]"#, "not consecutive"),
            (r#"["FU", 2, [1, 0]]"#, "not consecutive"),
            (r#"["FU", 2, [1, 2, 3]]"#, "out of range"),
            (r#"["FU", 1, [0]]"#, "placeholder"),
        ] {
            let e = st.apply(&step(s)).unwrap_err();
            assert!(e.reason.contains(want), "{s}: {e}");
        }
    }

    #[test]
    fn fuse_moves_attach_points_and_refuses_outer_attach() {
        let tiled = || {
            let mut st = matmul_state();
            st.apply(&step(r#"["SP", 4, 0, 1024, [32], 1]"#)).unwrap();
            st.apply(&step(r#"["SP", 4, 2, 1024, [32], 1]"#)).unwrap();
            st.apply(&step(r#"["RE", 4, [0, 2, 1, 3]]"#)).unwrap();
            st
        };
        let mut st = tiled();
        st.apply(&step(r#"["CA", 2, 4, 2]"#)).unwrap();
        assert!(st
            .apply(&step(r#"["FU", 4, [2, 3]]"#))
            .unwrap_err()
            .reason
            .contains("stage 2 is attached"));
        st.apply(&step(r#"["FU", 4, [0, 1, 2]]"#)).unwrap();
        assert_eq!(
            stage_line(&st, 4),
            "4 out root unroll=0 : i.0@j.0@i.1@=32768:S j.1=32:S"
        );
        assert!(stage_line(&st, 2).starts_with("2 matmul at:4.0 "));
        assert!(st.apply(&step(r#"["FU", 4, [0, 1]]"#)).is_err());
        st.check_invariants().unwrap();

        let mut st = tiled();
        st.apply(&step(r#"["CA", 2, 4, 3]"#)).unwrap();
        st.apply(&step(r#"["FU", 4, [0, 1]]"#)).unwrap();
        assert!(stage_line(&st, 2).starts_with("2 matmul at:4.2 "));
        st.check_invariants().unwrap();
    }
}
