//! A TE-level image of a replayed schedule (TVM `te::Schedule`): per stage its op (after the
//! dataflow rewrites), its iteration variables with the split/fuse relations between them,
//! the leaf order, loop annotations, compute location and unroll pragma.
//!
//! The state ([`State`]) keeps only the loops; lowering needs how every op axis is computed
//! from the loops (TE `PassUpIndex`), so the record's steps are replayed again here, each as
//! its `ApplyToSchedule` does (`transform_step.cc`), and the result is checked against the
//! state the caller replayed. It sits below the backend: it needs the DAG and the steps,
//! nothing of loop nests or codegen.
mod error;
pub mod op;

pub use error::TeError;
pub use op::{inject_inline, LAxis, LBody, LKind, LOp};

use crate::ir::{self, Dag, Expr, TensorId};
use crate::schedule::{split_lengths, ComputeAt, State};
use std::collections::HashMap;
use ttdb_format::ansor::{Annotation, Step};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VKind {
    Spatial,
    Reduce,
    Mixed,
}

#[derive(Clone, Debug)]
pub struct TVar {
    /// TE variable name (`ff`, `k.outer`, `i.j.fused`).
    pub name: String,
    pub kind: VKind,
    pub ann: Annotation,
}

#[derive(Clone, Debug)]
pub enum Rel {
    /// `parent = outer * extent(inner) + inner`; either a factor or an nparts split.
    Split {
        parent: usize,
        outer: usize,
        inner: usize,
        factor: Option<i64>,
        nparts: Option<i64>,
    },
    /// `fused = outer * extent(inner) + inner`.
    Fuse {
        outer: usize,
        inner: usize,
        fused: usize,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    Root,
    Inline,
    /// Computed inside the loop of variable `var` of stage `stage`.
    At {
        stage: usize,
        var: usize,
    },
}

#[derive(Clone, Debug)]
pub struct TStage {
    pub op: LOp,
    /// Root variables first (op axes, then reduce axes), then the ones relations created.
    pub vars: Vec<TVar>,
    pub n_axes: usize,
    pub n_root: usize,
    pub rels: Vec<Rel>,
    /// Loops, outer to inner.
    pub leaves: Vec<usize>,
    pub loc: Loc,
    /// `auto_unroll_max_step` pragma: (variable it was put on, max step).
    pub pragma: Option<(usize, i64)>,
}

impl TStage {
    pub fn from_op(op: LOp) -> TStage {
        let mut vars = Vec::new();
        for a in op.axes() {
            vars.push(TVar {
                name: a.name.clone(),
                kind: VKind::Spatial,
                ann: Annotation::None,
            });
        }
        for a in op.reduce_axes() {
            vars.push(TVar {
                name: a.name.clone(),
                kind: VKind::Reduce,
                ann: Annotation::None,
            });
        }
        let n_axes = op.axes().len();
        let n_root = vars.len();
        TStage {
            op,
            vars,
            n_axes,
            n_root,
            rels: Vec::new(),
            leaves: (0..n_root).collect(),
            loc: Loc::Root,
            pragma: None,
        }
    }

    fn new_var(&mut self, name: String, kind: VKind) -> usize {
        self.vars.push(TVar {
            name,
            kind,
            ann: Annotation::None,
        });
        self.vars.len() - 1
    }

    fn leaf(&self, i: u32) -> Result<usize, TeError> {
        self.leaves.get(i as usize).copied().ok_or_else(|| {
            TeError::Mismatch(format!(
                "iterator {i} out of range for {} ({} loops)",
                self.op.name,
                self.leaves.len()
            ))
        })
    }

    fn replace_leaf(&mut self, var: usize, with: &[usize]) -> Result<(), TeError> {
        let pos = self
            .leaves
            .iter()
            .position(|&v| v == var)
            .ok_or_else(|| TeError::Internal("split of a non-leaf".into()))?;
        self.leaves.splice(pos..=pos, with.iter().copied());
        Ok(())
    }

    /// TE `split(var, factor)`.
    fn split_factor(&mut self, var: usize, factor: i64) -> Result<(usize, usize), TeError> {
        let (name, kind) = (self.vars[var].name.clone(), self.vars[var].kind);
        let outer = self.new_var(format!("{name}.outer"), kind);
        let inner = self.new_var(format!("{name}.inner"), kind);
        self.rels.push(Rel::Split {
            parent: var,
            outer,
            inner,
            factor: Some(factor),
            nparts: None,
        });
        self.replace_leaf(var, &[outer, inner])?;
        Ok((outer, inner))
    }

    /// TE `split(var, nparts=n)`.
    fn split_nparts(&mut self, var: usize, nparts: i64) -> Result<(usize, usize), TeError> {
        let (name, kind) = (self.vars[var].name.clone(), self.vars[var].kind);
        let outer = self.new_var(format!("{name}.outer"), kind);
        let inner = self.new_var(format!("{name}.inner"), kind);
        self.rels.push(Rel::Split {
            parent: var,
            outer,
            inner,
            factor: None,
            nparts: Some(nparts),
        });
        self.replace_leaf(var, &[outer, inner])?;
        Ok((outer, inner))
    }

    /// Ansor's `ApplySplitToSchedule`: factors from the innermost, or nparts from the outermost.
    fn split(&mut self, iter: u32, lengths: &[i64], inner_to_outer: bool) -> Result<(), TeError> {
        if lengths.iter().any(|&l| l < 1) {
            return Err(TeError::Mismatch(format!("split lengths {lengths:?}")));
        }
        let mut to_split = self.leaf(iter)?;
        if inner_to_outer {
            for &l in lengths.iter().rev() {
                to_split = self.split_factor(to_split, l)?.0;
            }
        } else {
            for &l in lengths {
                to_split = self.split_nparts(to_split, l)?.1;
            }
        }
        Ok(())
    }

    /// TE `fuse(axes)`: pairwise from the left, `a.b.fused`.
    fn fuse(&mut self, ids: &[u32]) -> Result<(), TeError> {
        let vars: Vec<usize> = ids
            .iter()
            .map(|&i| self.leaf(i))
            .collect::<Result<_, _>>()?;
        let Some(&first) = vars.first() else {
            return Err(TeError::Mismatch("FU of nothing".into()));
        };
        let mut fused = first;
        for &next in &vars[1..] {
            let kind = if self.vars[fused].kind == self.vars[next].kind {
                self.vars[fused].kind
            } else {
                VKind::Mixed
            };
            let name = format!("{}.{}.fused", self.vars[fused].name, self.vars[next].name);
            let f = self.new_var(name, kind);
            self.rels.push(Rel::Fuse {
                outer: fused,
                inner: next,
                fused: f,
            });
            let pos = self
                .leaves
                .iter()
                .position(|&v| v == fused)
                .ok_or_else(|| TeError::Internal("fuse of a non-leaf".into()))?;
            if self.leaves.get(pos + 1) != Some(&next) {
                return Err(TeError::Mismatch(
                    "FU of loops that are not adjacent".into(),
                ));
            }
            self.leaves.splice(pos..=pos + 1, [f]);
            fused = f;
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
pub struct TSchedule {
    pub stages: Vec<TStage>,
}

impl TSchedule {
    fn stage_mut(&mut self, id: u32) -> Result<&mut TStage, TeError> {
        let n = self.stages.len();
        self.stages
            .get_mut(id as usize)
            .ok_or_else(|| TeError::Mismatch(format!("stage {id} out of range ({n} stages)")))
    }

    /// After `count` stages were inserted at `at`: loads and attach targets move.
    fn shift(&mut self, at: usize, count: usize) {
        for st in &mut self.stages {
            st.op.shift_tensors(at, count);
            if let Loc::At { stage, .. } = &mut st.loc {
                if *stage >= at {
                    *stage += count;
                }
            }
        }
    }

    /// Replays a record's steps on the DAG's initial schedule.
    pub fn replay(dag: &Dag, steps: &[Step]) -> Result<TSchedule, TeError> {
        let mut sch = TSchedule {
            stages: op::ops_from_dag(dag)
                .into_iter()
                .map(TStage::from_op)
                .collect(),
        };
        for (k, step) in steps.iter().enumerate() {
            sch.apply(step, &steps[..k])
                .map_err(|e| e.in_step(k, step))?;
        }
        sch.legalize_attach()?;
        Ok(sch)
    }

    fn apply(&mut self, step: &Step, before: &[Step]) -> Result<(), TeError> {
        match step {
            Step::Annotation(s) => {
                let st = self.stage_mut(s.stage_id)?;
                let v = st.leaf(s.iter_id)?;
                st.vars[v].ann = s.annotation;
            }
            Step::Fuse(s) => self.stage_mut(s.stage_id)?.fuse(&s.fused_ids)?,
            Step::Pragma(s) => {
                let st = self.stage_mut(s.stage_id)?;
                let v = st.leaf(s.iter_id)?;
                if s.pragma == "debug_skip_region" {
                    return Err(TeError::Unsupported(
                        "pragma debug_skip_region (skips the stage's computation)".into(),
                    ));
                }
                let n = s
                    .pragma
                    .strip_prefix("auto_unroll_max_step$")
                    .and_then(|d| d.parse::<i64>().ok());
                let n = n.ok_or_else(|| TeError::Unsupported(format!("pragma {:?}", s.pragma)))?;
                st.pragma = Some((v, n));
            }
            Step::Reorder(s) => {
                let st = self.stage_mut(s.stage_id)?;
                let new: Vec<usize> = s
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
            }
            Step::Split(_) | Step::FollowSplit(_) | Step::FollowFusedSplit(_) => {
                // the state replay's own rule, so both replays split alike
                let sp = split_lengths(step, before).map_err(TeError::Mismatch)?;
                self.stage_mut(sp.stage_id)?
                    .split(sp.iter_id, &sp.lengths, sp.inner_to_outer)?;
            }
            // storage_align only pads the allocation's row stride: no effect on values.
            Step::StorageAlign(_) => {}
            Step::ComputeAt(s) => {
                let target = s.target_stage_id as usize;
                let var = self.stage_mut(s.target_stage_id)?.leaf(s.target_iter_id)?;
                self.stage_mut(s.stage_id)?.loc = Loc::At { stage: target, var };
            }
            Step::ComputeInline(s) => self.stage_mut(s.stage_id)?.loc = Loc::Inline,
            Step::ComputeRoot(s) => self.stage_mut(s.stage_id)?.loc = Loc::Root,
            Step::CacheRead(s) => {
                self.cache_read(s.stage_id as usize, &s.scope, &s.reader_stage_ids)?
            }
            Step::CacheWrite(s) => self.cache_write(s.stage_id as usize, &s.scope)?,
            Step::Rfactor(s) => {
                self.rfactor(s.stage_id as usize, s.iter_id, s.factor_iter_id as usize)?
            }
        }
        Ok(())
    }

    fn cache_read(&mut self, s: usize, scope: &str, readers: &[u32]) -> Result<(), TeError> {
        let src = self
            .stages
            .get(s)
            .ok_or_else(|| TeError::Mismatch(format!("CHR of stage {s}")))?;
        let mut base = src.op.name.clone();
        while self
            .stages
            .iter()
            .any(|st| st.op.name == format!("{base}.{scope}"))
        {
            base.push_str(".d");
        }
        let cache = op::cache_read(&src.op, s, format!("{base}.{scope}"))?;
        self.shift(s + 1, 1);
        self.stages.insert(s + 1, TStage::from_op(cache));
        for &r in readers {
            let reader = self.stage_mut(r + 1)?;
            reader
                .op
                .map_exprs(&|e| e.remap_tensors(&|t| if t.0 == s { TensorId(s + 1) } else { t }));
        }
        Ok(())
    }

    fn cache_write(&mut self, s: usize, scope: &str) -> Result<(), TeError> {
        let st = self
            .stages
            .get(s)
            .ok_or_else(|| TeError::Mismatch(format!("CHW of stage {s}")))?;
        if !st.rels.is_empty() || st.loc != Loc::Root {
            return Err(TeError::Mismatch(format!(
                "CHW of {} after loop steps",
                st.op.name
            )));
        }
        let original = st.op.clone();
        self.shift(s, 1);
        let (cache, copy) = op::cache_write(&original, scope, s)?;
        self.stages[s] = TStage::from_op(copy);
        self.stages.insert(s, TStage::from_op(cache));
        Ok(())
    }

    /// TE `Schedule::rfactor` (spec §2.3): the partial reduction `<op>.rf` at `s`, the final
    /// `<op>.repl` at `s + 1` in the original's place.
    fn rfactor(&mut self, s: usize, iter: u32, factor_pos: usize) -> Result<(), TeError> {
        let st = self
            .stages
            .get(s)
            .ok_or_else(|| TeError::Mismatch(format!("RF of stage {s}")))?;
        let (rf, repl) = rfactor_ops(st, iter, factor_pos, s)?;
        let loc = match st.loc {
            Loc::At { stage, var } if stage >= s => Loc::At {
                stage: stage + 1,
                var,
            },
            other => other,
        };
        self.shift(s, 1);
        let mut repl = TStage::from_op(repl);
        repl.loc = loc;
        self.stages[s] = repl;
        self.stages.insert(s, TStage::from_op(rf));
        Ok(())
    }

    /// TE `LegalizeInvalidAttach`: an attach on a split loop moves to its inner part, on the
    /// inner operand of a fuse to the fused loop.
    fn legalize_attach(&mut self) -> Result<(), TeError> {
        for i in 0..self.stages.len() {
            let Loc::At { stage, mut var } = self.stages[i].loc else {
                continue;
            };
            let t = self
                .stages
                .get(stage)
                .ok_or_else(|| TeError::Internal("attach target out of range".into()))?;
            let mut guard = 0;
            while !t.leaves.contains(&var) {
                let next = t.rels.iter().find_map(|r| match *r {
                    Rel::Fuse { inner, fused, .. } if inner == var => Some(fused),
                    Rel::Split { parent, inner, .. } if parent == var => Some(inner),
                    _ => None,
                });
                var = next.ok_or_else(|| {
                    TeError::InvalidSchedule(format!(
                        "{} is attached to a loop of {} that no longer exists",
                        self.stages[i].op.name, t.op.name
                    ))
                })?;
                guard += 1;
                if guard > t.vars.len() {
                    return Err(TeError::Internal("attach legalization loops".into()));
                }
            }
            self.stages[i].loc = Loc::At { stage, var };
        }
        Ok(())
    }

    /// The replayed state must describe the same loops: stage names, loop counts,
    /// annotations, compute locations and attach points.
    pub fn check_against(&self, state: &State) -> Result<(), TeError> {
        let ss = state.stages();
        if ss.len() != self.stages.len() {
            return Err(TeError::Mismatch(format!(
                "the state has {} stages, the schedule {}",
                ss.len(),
                self.stages.len()
            )));
        }
        for (i, (a, b)) in self.stages.iter().zip(ss).enumerate() {
            let fail = |what: String| {
                Err(TeError::Mismatch(format!(
                    "stage {i} ({}): {what}",
                    a.op.name
                )))
            };
            if a.op.name != b.op.name || a.op.is_placeholder() != b.op.is_placeholder() {
                return fail(format!("the state's stage is {}", b.op.name));
            }
            if a.op.is_placeholder() {
                continue;
            }
            let loc_ok = matches!(
                (a.loc, b.compute_at),
                (Loc::Root, ComputeAt::Root)
                    | (Loc::Inline, ComputeAt::Inlined)
                    | (Loc::At { .. }, ComputeAt::Iter)
            );
            if !loc_ok {
                return fail(format!(
                    "compute location {:?} vs the state's {:?}",
                    a.loc, b.compute_at
                ));
            }
            if a.loc == Loc::Inline {
                continue;
            }
            if a.leaves.len() != b.iters.len() {
                return fail(format!(
                    "{} loops, the state has {}",
                    a.leaves.len(),
                    b.iters.len()
                ));
            }
            for (k, (&v, it)) in a.leaves.iter().zip(&b.iters).enumerate() {
                // a one-loop FU: TE keeps the loop and its annotation, the state makes a new,
                // unannotated iterator; TE's loop is what gets compiled
                let single_fuse = it.orig_iters.len() == 1 && it.annotation == Annotation::None;
                if a.vars[v].ann != it.annotation && !single_fuse {
                    return fail(format!(
                        "loop {k} is `{}`, the state's `{}`",
                        a.vars[v].ann.name(),
                        it.annotation.name()
                    ));
                }
            }
            if let Loc::At { stage, var } = a.loc {
                let p = state
                    .attach_map()
                    .attach_point(i)
                    .ok_or_else(|| TeError::Mismatch(format!("stage {i} has no attach entry")))?;
                let pos = self.stages[stage].leaves.iter().position(|&x| x == var);
                if p.stage != stage || pos != Some(p.iter) {
                    return fail(format!(
                        "attached at {stage}.{pos:?}, the state says {}.{}",
                        p.stage, p.iter
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Variables connected to `start` through relations (TE's PassUp/PassDownBitMaskOr).
fn component(st: &TStage, start: usize) -> Vec<bool> {
    let mut touched = vec![false; st.vars.len()];
    touched[start] = true;
    loop {
        let mut changed = false;
        for r in &st.rels {
            let group: [usize; 3] = match *r {
                Rel::Split {
                    parent,
                    outer,
                    inner,
                    ..
                } => [parent, outer, inner],
                Rel::Fuse {
                    outer,
                    inner,
                    fused,
                } => [outer, inner, fused],
            };
            if group.iter().any(|&v| touched[v]) && !group.iter().all(|&v| touched[v]) {
                for v in group {
                    touched[v] = true;
                }
                changed = true;
            }
        }
        if !changed {
            return touched;
        }
    }
}

fn ceil_div(a: i64, b: i64) -> i64 {
    a / b + i64::from(a % b != 0)
}

/// The ops TE's rfactor builds from stage `st` (at index `s`) and its loop `iter`.
fn rfactor_ops(st: &TStage, iter: u32, factor_pos: usize, s: usize) -> Result<(LOp, LOp), TeError> {
    let LKind::Compute {
        axes,
        reduce_axes,
        body:
            LBody::Reduce {
                combiner,
                source,
                init,
                cond,
            },
    } = &st.op.kind
    else {
        return Err(TeError::Mismatch(format!(
            "RF of {}, which is not a reduction",
            st.op.name
        )));
    };
    let axis = st.leaf(iter)?;
    if factor_pos > axes.len() {
        return Err(TeError::Mismatch(format!(
            "RF factor position {factor_pos}"
        )));
    }
    let touched = component(st, axis);
    if (0..st.n_axes).any(|v| touched[v]) {
        return Err(TeError::Mismatch("RF axis touches a spatial axis".into()));
    }
    // domains of the touched variables (PassDownDomain with allow_missing: no tightening)
    let mut dom: Vec<Option<i64>> = vec![None; st.vars.len()];
    for (k, r) in reduce_axes.iter().enumerate() {
        if touched[st.n_axes + k] {
            let e = r.const_extent().ok_or_else(|| {
                TeError::Unsupported(format!("RF of the non-constant reduce axis {}", r.name))
            })?;
            dom[st.n_axes + k] = Some(e);
        }
    }
    for r in &st.rels {
        match *r {
            Rel::Split {
                parent,
                outer,
                inner,
                factor,
                nparts,
            } => {
                let Some(p) = dom[parent] else { continue };
                if let Some(f) = factor {
                    dom[inner] = Some(f);
                    dom[outer] = Some(ceil_div(p, f));
                } else if let Some(n) = nparts {
                    dom[outer] = Some(n);
                    dom[inner] = Some(ceil_div(p, n));
                }
            }
            Rel::Fuse {
                outer,
                inner,
                fused,
            } => {
                if let (Some(a), Some(b)) = (dom[outer], dom[inner]) {
                    dom[fused] = Some(
                        a.checked_mul(b)
                            .ok_or_else(|| TeError::TooLarge("fused extent".into()))?,
                    );
                }
            }
        }
    }
    // values of the touched variables from the touched leaves (PassUpIndex)
    let mut value: Vec<Option<Expr>> = vec![None; st.vars.len()];
    let mut ranges = HashMap::new();
    for &l in &st.leaves {
        if touched[l] {
            let e =
                dom[l].ok_or_else(|| TeError::Internal("rfactor leaf without a domain".into()))?;
            value[l] = Some(if e == 1 {
                Expr::int(0)
            } else {
                Expr::var(st.vars[l].name.clone())
            });
            ranges.insert(st.vars[l].name.clone(), ir::bounds::Interval::range(e));
        }
    }
    let mut flag = vec![false; st.vars.len()];
    for r in st.rels.iter().rev() {
        match *r {
            Rel::Split {
                parent,
                outer,
                inner,
                ..
            } => {
                if let (Some(o), Some(i), Some(ie)) =
                    (value[outer].clone(), value[inner].clone(), dom[inner])
                {
                    value[parent] = Some(i + o * ie);
                }
                flag[parent] = flag[outer]
                    || flag[inner]
                    || dom[outer]
                        .zip(dom[inner])
                        .map(|(a, b)| a as i128 * b as i128)
                        != dom[parent].map(i128::from);
            }
            Rel::Fuse {
                outer,
                inner,
                fused,
            } => {
                if let (Some(f), Some(ie)) = (value[fused].clone(), dom[inner]) {
                    value[outer] = Some(Expr::floordiv(f.clone(), ie));
                    value[inner] = Some(Expr::floormod(f, ie));
                }
                flag[outer] = flag[fused];
                flag[inner] = flag[fused];
            }
        }
    }
    // MakeBoundCheck over the touched variables
    let mut preds: Vec<Expr> = Vec::new();
    for v in 0..st.vars.len() {
        if !touched[v] || !flag[v] {
            continue;
        }
        let (Some(val), Some(e)) = (&value[v], dom[v]) else {
            continue;
        };
        let provable = ir::bounds::int_bounds(val, &ranges).is_some_and(|iv| iv.hi < e);
        if !provable {
            preds.push(Expr::lt(val.clone(), e));
        }
    }
    let mut vsub = HashMap::new();
    let mut rf_reduce = Vec::new();
    for (k, r) in reduce_axes.iter().enumerate() {
        let v = st.n_axes + k;
        if touched[v] {
            let val = value[v]
                .clone()
                .ok_or_else(|| TeError::Internal(format!("rfactor: no value for {}", r.name)))?;
            vsub.insert(r.name.clone(), val);
        } else {
            rf_reduce.push(r.clone());
        }
    }
    for &l in &st.leaves {
        if touched[l] && l != axis {
            rf_reduce.push(LAxis::new(st.vars[l].name.clone(), dom[l].unwrap_or(1)));
        }
    }
    let axis_ext =
        dom[axis].ok_or_else(|| TeError::Internal("rfactor axis without a domain".into()))?;
    let mut rf_axes = axes.clone();
    rf_axes.insert(factor_pos, LAxis::new(st.vars[axis].name.clone(), axis_ext));
    // the existing condition too: an rfactor of an rf stage meets the first one's predicates
    let mut conds: Vec<Expr> = cond.iter().map(|c| c.substitute(&vsub)).collect();
    conds.extend(preds.into_iter().map(|p| p.substitute(&vsub)));
    let rf = LOp {
        name: format!("{}.rf", st.op.name),
        dtype: st.op.dtype,
        kind: LKind::Compute {
            axes: rf_axes,
            reduce_axes: rf_reduce,
            body: LBody::Reduce {
                combiner: *combiner,
                source: source.substitute(&vsub),
                init: init.clone(),
                cond: Expr::all(conds),
            },
        },
        dag_tensor: None,
        attrs_of: None,
    };
    let repl_axes: Vec<LAxis> = axes
        .iter()
        .enumerate()
        .map(|(k, a)| LAxis {
            name: format!("ax{k}"),
            extent: a.extent.clone(),
        })
        .collect();
    let v_name = format!("{}.v", st.vars[axis].name);
    let mut idx: Vec<Expr> = repl_axes
        .iter()
        .map(|a| Expr::var(a.name.clone()))
        .collect();
    idx.insert(factor_pos, Expr::var(v_name.clone()));
    let repl = LOp {
        name: format!("{}.repl", st.op.name),
        dtype: st.op.dtype,
        kind: LKind::Compute {
            axes: repl_axes,
            reduce_axes: vec![LAxis::new(v_name, axis_ext)],
            body: LBody::Reduce {
                combiner: *combiner,
                source: Expr::Load {
                    tensor: TensorId(s),
                    indices: idx,
                    dtype: st.op.dtype,
                },
                init: init.clone(),
                cond: None,
            },
        },
        dag_tensor: st.op.dag_tensor,
        attrs_of: None,
    };
    Ok((rf, repl))
}
