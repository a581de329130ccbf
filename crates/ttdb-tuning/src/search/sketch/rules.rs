//! The CPU derivation rules (TVM `sketch_policy_rules.cc`), each a condition and an
//! application producing (state, next stage) children.
use super::analysis::{stage_has_reduce_iter, Analysis};
use super::{Condition, HardwareParams, Partial};
use ttdb_algo::schedule::{IterIdent, IterKind, OpOrigin, State};
use ttdb_format::ansor::step::{
    Annotation, AnnotationStep, CacheWriteStep, ComputeAtStep, ComputeInlineStep, FollowSplitStep,
    FuseStep, ReorderStep, RfactorStep, SplitStep,
};
use ttdb_format::ansor::Step;

type CondFn = fn(&Analysis, &State, usize, &HardwareParams) -> Condition;
type ApplyFn = fn(&Analysis, &Partial, usize) -> Vec<(Partial, i64)>;

pub(super) struct Rule {
    #[allow(dead_code)]
    pub name: &'static str,
    pub condition: CondFn,
    pub apply: ApplyFn,
}

/// TVM's CPU rule order (`sketch_policy.cc`).
pub(super) const CPU_RULES: &[Rule] = &[
    Rule {
        name: "AlwaysInline",
        condition: always_inline_cond,
        apply: always_inline,
    },
    Rule {
        name: "SimplifyComputeWithConstTensor",
        condition: const_tensor_cond,
        apply: const_tensor,
    },
    Rule {
        name: "AddRfactor",
        condition: rfactor_cond,
        apply: rfactor,
    },
    Rule {
        name: "AddCacheWrite",
        condition: cache_write_cond,
        apply: cache_write,
    },
    Rule {
        name: "MultiLevelTilingWithFusion",
        condition: tiling_with_fusion_cond,
        apply: tiling_with_fusion,
    },
    Rule {
        name: "MultiLevelTiling",
        condition: tiling_cond,
        apply: tiling,
    },
    Rule {
        name: "SkipStage",
        condition: |_, _, _, _| Condition::Apply,
        apply: |_, p, s| vec![(p.clone(), s as i64 - 1)],
    },
];

/// Appends steps to a partial state, naming loops by identity (positions move as loops
/// are split and fused). A step the state refuses abandons the child.
pub struct Editor {
    pub p: Partial,
}

impl Editor {
    pub fn new(p: &Partial) -> Editor {
        Editor { p: p.clone() }
    }

    pub fn pos(&self, stage: usize, ident: IterIdent) -> Option<u32> {
        self.p.state.stages()[stage]
            .iters
            .iter()
            .position(|it| it.ident() == ident)
            .map(|i| i as u32)
    }

    pub fn push(&mut self, step: Step) -> Option<()> {
        self.p.state.apply(&step).ok()
    }

    fn step_count(&self) -> usize {
        self.p.state.transform_steps().len()
    }

    /// SP of loop `ident` into `parts` parts with open lengths; returns the parts' idents
    /// (outer to inner) and the step's index.
    pub fn open_split(
        &mut self,
        stage: usize,
        ident: IterIdent,
        parts: usize,
    ) -> Option<(Vec<IterIdent>, usize)> {
        let i = self.pos(stage, ident)?;
        let extent = self.p.state.stages()[stage].iters[i as usize]
            .extent
            .unwrap_or(0);
        let index = self.step_count();
        let iters = &self.p.state.stages()[stage].iters;
        let innermost_spatial = iters[i as usize].kind == IterKind::Spatial
            && iters[i as usize + 1..]
                .iter()
                .all(|it| it.kind != IterKind::Spatial);
        self.push(Step::Split(SplitStep {
            stage_id: stage as u32,
            iter_id: i,
            extent,
            lengths: vec![1; parts - 1],
            inner_to_outer: true,
        }))?;
        self.p.open_splits.push(index);
        if innermost_spatial {
            self.p.vector_splits.push(index);
        }
        let iters = &self.p.state.stages()[stage].iters;
        Some((
            iters[i as usize..i as usize + parts]
                .iter()
                .map(|it| it.ident())
                .collect(),
            index,
        ))
    }

    pub fn reorder(&mut self, stage: usize, order: &[IterIdent]) -> Option<()> {
        let after_ids = order
            .iter()
            .map(|&id| self.pos(stage, id))
            .collect::<Option<Vec<u32>>>()?;
        self.push(Step::Reorder(ReorderStep {
            stage_id: stage as u32,
            after_ids,
        }))
    }

    pub fn idents(&self, stage: usize) -> Vec<(IterIdent, IterKind)> {
        self.p.state.stages()[stage]
            .iters
            .iter()
            .map(|it| (it.ident(), it.kind))
            .collect()
    }
}

fn always_inline_cond(a: &Analysis, st: &State, s: usize, _: &HardwareParams) -> Condition {
    if !a.is_placeholder(s)
        && !a.is_output(s)
        && !stage_has_reduce_iter(st, s)
        && a.is_strictly_inlineable(s)
    {
        Condition::ApplyAndSkipRest
    } else {
        Condition::Skip
    }
}

fn always_inline(_: &Analysis, p: &Partial, s: usize) -> Vec<(Partial, i64)> {
    let mut e = Editor::new(p);
    e.push(Step::ComputeInline(ComputeInlineStep {
        stage_id: s as u32,
    }))
    .map(|_| (e.p, s as i64 - 1))
    .into_iter()
    .collect()
}

fn const_tensor_cond(a: &Analysis, _: &State, s: usize, _: &HardwareParams) -> Condition {
    if a.const_tensor_indices(s).is_empty() {
        Condition::Skip
    } else {
        Condition::ApplyAndSkipRest
    }
}

/// Unrolls the loops indexing constant tensors, splits the other spatial loops in two and
/// orders outer tiles, inner tiles, unrolled loops.
fn const_tensor(a: &Analysis, p: &Partial, s: usize) -> Vec<(Partial, i64)> {
    let names = a.const_tensor_indices(s);
    let mut e = Editor::new(p);
    let mut tiles: Vec<Vec<IterIdent>> = Vec::new();
    let mut unrolled = Vec::new();
    let iters: Vec<(IterIdent, String, IterKind)> = e.p.state.stages()[s]
        .iters
        .iter()
        .map(|it| (it.ident(), it.name.clone(), it.kind))
        .collect();
    for (id, name, kind) in iters {
        if names.contains(&name) {
            let Some(i) = e.pos(s, id) else { return vec![] };
            if e.push(Step::Annotation(AnnotationStep {
                stage_id: s as u32,
                iter_id: i,
                annotation: Annotation::Unroll,
            }))
            .is_none()
            {
                return vec![];
            }
            unrolled.push(id);
        } else if kind == IterKind::Spatial {
            match e.open_split(s, id, 2) {
                Some((parts, _)) => tiles.push(parts),
                None => return vec![],
            }
        } else {
            return vec![];
        }
    }
    let mut order: Vec<IterIdent> = (0..2)
        .flat_map(|l| tiles.iter().map(move |t| t[l]))
        .collect();
    order.extend(unrolled);
    match e.reorder(s, &order) {
        Some(()) => vec![(e.p, s as i64 - 1)],
        None => vec![],
    }
}

fn has_cache_write_stage(st: &State, s: usize) -> bool {
    matches!(st.stages()[s].op.origin, OpOrigin::CacheWrite { .. })
}

fn rfactor_cond(a: &Analysis, st: &State, s: usize, hw: &HardwareParams) -> Condition {
    if a.needs_rfactor(st, s, hw.num_cores) && !has_cache_write_stage(st, s) {
        Condition::Apply
    } else {
        Condition::Skip
    }
}

/// Fuses all reduce loops, splits the result once, and rfactors either part (the inner
/// one with the new spatial loop moved innermost, for vectorization).
fn rfactor(_: &Analysis, p: &Partial, s: usize) -> Vec<(Partial, i64)> {
    let mut e = Editor::new(p);
    let iters = e.idents(s);
    let n_space = iters
        .iter()
        .filter(|(_, k)| *k == IterKind::Spatial)
        .count();
    let reduce: Vec<IterIdent> = iters
        .iter()
        .filter(|(_, k)| *k == IterKind::Reduction)
        .map(|(i, _)| *i)
        .collect();
    if reduce.is_empty() {
        return vec![];
    }
    let fused = if reduce.len() > 1 {
        let Some(ids) = reduce
            .iter()
            .map(|&r| e.pos(s, r))
            .collect::<Option<Vec<_>>>()
        else {
            return vec![];
        };
        let first = ids[0];
        if e.push(Step::Fuse(FuseStep {
            stage_id: s as u32,
            fused_ids: ids,
        }))
        .is_none()
        {
            return vec![];
        }
        e.p.state.stages()[s].iters[first as usize].ident()
    } else {
        reduce[0]
    };
    let Some((parts, _)) = e.open_split(s, fused, 2) else {
        return vec![];
    };
    let mut out = Vec::new();
    for (k, &part) in parts.iter().enumerate() {
        let mut c = Editor { p: e.p.clone() };
        let Some(i) = c.pos(s, part) else { continue };
        if c.push(Step::Rfactor(RfactorStep {
            stage_id: s as u32,
            iter_id: i,
            factor_iter_id: n_space as u32,
        }))
        .is_none()
        {
            continue;
        }
        // The rfactor stage is inserted at `s`.
        if k == 1 {
            let ids = c.idents(s);
            let mut order: Vec<IterIdent> = ids
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != n_space)
                .map(|(_, (id, _))| *id)
                .collect();
            if let Some((id, _)) = ids.get(n_space) {
                order.push(*id);
            }
            if c.reorder(s, &order).is_none() {
                continue;
            }
        }
        out.push((c.p, s as i64 - 1));
    }
    out
}

fn cache_write_cond(a: &Analysis, st: &State, s: usize, _: &HardwareParams) -> Condition {
    if a.needs_multi_level_tiling(s) && a.single_elementwise_consumer(st, s).is_none() {
        Condition::Apply
    } else {
        Condition::Skip
    }
}

fn cache_write(_: &Analysis, p: &Partial, s: usize) -> Vec<(Partial, i64)> {
    let mut e = Editor::new(p);
    e.push(Step::CacheWrite(CacheWriteStep {
        stage_id: s as u32,
        scope: "local".into(),
    }))
    .map(|_| (e.p, s as i64))
    .into_iter()
    .collect()
}

fn tiling_with_fusion_cond(a: &Analysis, st: &State, s: usize, _: &HardwareParams) -> Condition {
    if a.needs_multi_level_tiling(s) && a.single_elementwise_consumer(st, s).is_some() {
        if has_cache_write_stage(st, s) {
            Condition::ApplyAndSkipRest
        } else {
            Condition::Apply
        }
    } else {
        Condition::Skip
    }
}

fn tiling_cond(a: &Analysis, _: &State, s: usize, _: &HardwareParams) -> Condition {
    if a.needs_multi_level_tiling(s) {
        Condition::ApplyAndSkipRest
    } else {
        Condition::Skip
    }
}

/// `DoMultiLevelTiling(state, stage, "SSRSRS")`: every spatial loop in 4 parts, every
/// reduce loop in 2, ordered S0 S1 R0 S2 R1 S3. Returns the spatial SP step indices.
pub fn multi_level_tile(e: &mut Editor, s: usize) -> Option<Vec<usize>> {
    let mut space: [Vec<IterIdent>; 4] = Default::default();
    let mut reduce: [Vec<IterIdent>; 2] = Default::default();
    let mut spatial_steps = Vec::new();
    for (id, kind) in e.idents(s) {
        match kind {
            IterKind::Spatial => {
                let (parts, step) = e.open_split(s, id, 4)?;
                for (l, p) in parts.into_iter().enumerate() {
                    space[l].push(p);
                }
                spatial_steps.push(step);
            }
            IterKind::Reduction => {
                let (parts, _) = e.open_split(s, id, 2)?;
                for (l, p) in parts.into_iter().enumerate() {
                    reduce[l].push(p);
                }
            }
            _ => return None,
        }
    }
    let [s0, s1, s2, s3] = space;
    let [r0, r1] = reduce;
    let order: Vec<IterIdent> = [s0, s1, r0, s2, r1, s3].concat();
    e.reorder(s, &order)?;
    Some(spatial_steps)
}

fn tiling(_: &Analysis, p: &Partial, s: usize) -> Vec<(Partial, i64)> {
    let mut e = Editor::new(p);
    match multi_level_tile(&mut e, s) {
        Some(_) => vec![(e.p, s as i64 - 1)],
        None => vec![],
    }
}

/// Tiles the stage, then splits its one element-wise consumer like it (`FollowTiling`,
/// levels 1 and 2) and computes the stage at the consumer's last loop of that level.
fn tiling_with_fusion(a: &Analysis, p: &Partial, s: usize) -> Vec<(Partial, i64)> {
    let Some(target) = a.single_elementwise_consumer(&p.state, s) else {
        return vec![];
    };
    let mut base = Editor::new(p);
    let Some(split_steps) = multi_level_tile(&mut base, s) else {
        return vec![];
    };
    let mut out = Vec::new();
    for level in [1usize, 2] {
        let mut e = Editor { p: base.p.clone() };
        if follow_tiling(&mut e, target, &split_steps, level).is_none() {
            continue;
        }
        let at = level * split_steps.len() - 1;
        if e.push(Step::ComputeAt(ComputeAtStep {
            stage_id: s as u32,
            target_stage_id: target as u32,
            target_iter_id: at as u32,
        }))
        .is_none()
        {
            continue;
        }
        out.push((e.p, s as i64 - 1));
    }
    out
}

/// `FollowTiling`: FSP of every spatial loop of `stage` after the matching SP, then the
/// parts ordered level by level.
fn follow_tiling(
    e: &mut Editor,
    stage: usize,
    split_steps: &[usize],
    n_split: usize,
) -> Option<()> {
    let iters = e.idents(stage);
    if iters.len() != split_steps.len() || iters.iter().any(|(_, k)| *k != IterKind::Spatial) {
        return None;
    }
    let mut levels: [Vec<IterIdent>; 4] = Default::default();
    for ((id, _), &src) in iters.iter().zip(split_steps) {
        let i = e.pos(stage, *id)?;
        e.push(Step::FollowSplit(FollowSplitStep {
            stage_id: stage as u32,
            iter_id: i,
            src_step_id: src as u32,
            n_split: n_split as i64,
        }))?;
        let parts: Vec<IterIdent> = e.p.state.stages()[stage].iters
            [i as usize..=i as usize + n_split]
            .iter()
            .map(|it| it.ident())
            .collect();
        // n_split 1 fills levels 1-2, 2 fills 0-2, 3 fills 0-3 (TVM's space_0..space_3).
        let first = if n_split == 1 { 1 } else { 0 };
        for (l, p) in parts.into_iter().enumerate() {
            levels[first + l].push(p);
        }
    }
    let order: Vec<IterIdent> = levels.concat();
    e.reorder(stage, &order)
}
