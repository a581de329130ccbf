//! `loop_state.cc::AttachMap`: which loop each compute-at stage lives in.
//!
//! Like TVM the map is keyed by *indices* (stage id, iterator position), updated by SP/FU and
//! by stage insertions but not by RE. Each entry also remembers the identity of the loop it
//! was attached to (what TE's `attach_ivar` holds), so that an index that no longer names that
//! loop can be detected instead of silently retargeting the stage.
use super::iterator::IterIdent;
use std::collections::BTreeMap;

/// Where a stage is computed: loop `iter` of stage `stage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttachPoint {
    pub stage: usize,
    /// Position in the target's iterator list, as TVM's state keeps it.
    pub iter: usize,
    /// The loop object attached to (TE semantics).
    pub ident: IterIdent,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttachMap {
    stage_to_attach_iter: BTreeMap<usize, AttachPoint>,
    iter_to_attached_stages: BTreeMap<(usize, usize), Vec<usize>>,
}

impl AttachMap {
    /// The attach point of `stage`, if it is computed at some loop.
    pub fn attach_point(&self, stage: usize) -> Option<&AttachPoint> {
        self.stage_to_attach_iter.get(&stage)
    }

    /// Stages attached at loop `iter` of `stage`, in attach order.
    pub fn attached_at(&self, stage: usize, iter: usize) -> &[usize] {
        self.iter_to_attached_stages
            .get(&(stage, iter))
            .map_or(&[], Vec::as_slice)
    }

    /// Is any stage attached to some loop of `stage`?
    pub fn has_attached_stages(&self, stage: usize) -> bool {
        self.iter_to_attached_stages
            .range((stage, 0)..=(stage, usize::MAX))
            .next()
            .is_some()
    }

    /// All `(attached stage, attach point)` pairs, by attached stage id.
    pub fn entries(&self) -> impl std::iter::Iterator<Item = (usize, &AttachPoint)> + '_ {
        self.stage_to_attach_iter.iter().map(|(s, p)| (*s, p))
    }

    /// All `((stage, iter), attached stages)` pairs.
    pub fn attached_loops(
        &self,
    ) -> impl std::iter::Iterator<Item = ((usize, usize), &[usize])> + '_ {
        self.iter_to_attached_stages
            .iter()
            .map(|(k, v)| (*k, v.as_slice()))
    }

    pub fn set_compute_at(&mut self, stage: usize, point: AttachPoint) {
        self.delete_stage(stage);
        self.stage_to_attach_iter.insert(stage, point);
        self.iter_to_attached_stages
            .entry((point.stage, point.iter))
            .or_default()
            .push(stage);
    }

    pub fn delete_stage(&mut self, stage: usize) {
        let Some(old) = self.stage_to_attach_iter.remove(&stage) else {
            return;
        };
        let key = (old.stage, old.iter);
        if let Some(list) = self.iter_to_attached_stages.get_mut(&key) {
            list.retain(|&s| s != stage);
            if list.is_empty() {
                self.iter_to_attached_stages.remove(&key);
            }
        }
    }

    /// `AttachMap::UpdateIters`: loop `from[i]` of a stage is now at position `to[i]`.
    pub fn update_iters(&mut self, stage: usize, from: &[usize], to: &[usize]) {
        let mut moved = Vec::new();
        for (&f, &t) in from.iter().zip(to) {
            let Some(list) = self.iter_to_attached_stages.remove(&(stage, f)) else {
                continue;
            };
            for s in &list {
                if let Some(p) = self.stage_to_attach_iter.get_mut(s) {
                    p.iter = t;
                }
            }
            moved.push((t, list));
        }
        for (t, list) in moved {
            self.iter_to_attached_stages.insert((stage, t), list);
        }
    }

    /// The loops `old` of `stage` were replaced by `new` (split parent -> innermost part,
    /// fused loops -> the fused loop): what TE's `LegalizeInvalidAttach` does to `attach_ivar`.
    pub fn replace_ident(&mut self, stage: usize, old: &[IterIdent], new: IterIdent) {
        for p in self.stage_to_attach_iter.values_mut() {
            if p.stage == stage && old.contains(&p.ident) {
                p.ident = new;
            }
        }
    }

    /// `AttachMap::ApplyStageIdOffset`: every stage id `>= start` (keys and targets) moves
    /// by `offset`, after the insertion of `offset` stages at `start`.
    pub fn apply_stage_id_offset(&mut self, start: usize, offset: usize) {
        let shift = |s: usize| if s >= start { s + offset } else { s };
        self.stage_to_attach_iter = std::mem::take(&mut self.stage_to_attach_iter)
            .into_iter()
            .map(|(s, p)| {
                (
                    shift(s),
                    AttachPoint {
                        stage: shift(p.stage),
                        ..p
                    },
                )
            })
            .collect();
        self.iter_to_attached_stages = std::mem::take(&mut self.iter_to_attached_stages)
            .into_iter()
            .map(|((s, i), list)| ((shift(s), i), list.into_iter().map(shift).collect()))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(stage: usize, iter: usize) -> AttachPoint {
        AttachPoint {
            stage,
            iter,
            ident: IterIdent(iter as u64),
        }
    }

    #[test]
    fn set_update_delete_round_trip() {
        let mut m = AttachMap::default();
        m.set_compute_at(2, point(4, 3));
        m.set_compute_at(1, point(4, 3));
        assert_eq!(m.attached_at(4, 3), &[2, 1]);
        // a split of iter 1 into 3 parts: iters >= 1 move by 2
        m.update_iters(4, &[1, 2, 3, 4], &[3, 4, 5, 6]);
        assert_eq!(m.attach_point(2).unwrap().iter, 5);
        assert_eq!(m.attached_at(4, 5), &[2, 1]);
        assert!(m.attached_at(4, 3).is_empty());
        m.delete_stage(2);
        assert_eq!(m.attached_at(4, 5), &[1]);
        m.delete_stage(1);
        assert!(!m.has_attached_stages(4));
        assert_eq!(m, AttachMap::default());
    }

    #[test]
    fn re_attaching_moves_the_entry() {
        let mut m = AttachMap::default();
        m.set_compute_at(0, point(3, 1));
        m.set_compute_at(0, point(5, 2));
        assert!(!m.has_attached_stages(3));
        assert_eq!(m.attached_at(5, 2), &[0]);
    }

    #[test]
    fn stage_id_offset_shifts_keys_and_targets() {
        let mut m = AttachMap::default();
        m.set_compute_at(2, point(4, 3));
        m.set_compute_at(0, point(1, 0));
        m.apply_stage_id_offset(2, 1);
        assert_eq!(m.attach_point(3).unwrap().stage, 5);
        assert_eq!(m.attached_at(5, 3), &[3]);
        assert_eq!(m.attach_point(0).unwrap().stage, 1);
        assert!(m.attach_point(2).is_none());
    }
}
