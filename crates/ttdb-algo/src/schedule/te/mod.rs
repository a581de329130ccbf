//! A TE-level image of a replayed schedule (TVM `te::Schedule`): per stage its op (after the
//! dataflow rewrites), its iteration variables with the split/fuse relations between them,
//! the leaf order, loop annotations, compute location and unroll pragma.
//!
//! The state ([`State`]) keeps only the loops; lowering needs how every op axis is computed
//! from the loops (TE `PassUpIndex`), so the record's steps are replayed again here, each as
//! its `ApplyToSchedule` does (`transform_step.cc`), and the result is checked against the
//! state the caller replayed. It sits below the backend: it needs the DAG and the steps,
//! nothing of loop nests or codegen.
//!
//! Here are TE's primitives (split, fuse, and the dataflow rewrites in `dataflow`); what a
//! step does with them is its [`ApplyToSchedule`] impl, in `schedule/steps/` beside its
//! `ApplyToState`.
mod dataflow;
mod error;
pub mod op;

pub use error::TeError;
pub use op::{inject_inline, LAxis, LBody, LKind, LOp};

use crate::ir::Dag;
use crate::schedule::{ComputeAt, State};
use ttdb_format::ansor::{Annotation, Step};
use ttdb_format::each_step;

/// A transform step that knows its effect on a [`TSchedule`] (TVM's `ApplyToSchedule`).
/// Implemented for each step struct in `schedule/steps/`, next to its `ApplyToState`.
pub trait ApplyToSchedule {
    /// Applies the step to `sch`. `earlier` are the record's steps before this one (FSP and
    /// FFSP read their source SPs there).
    fn apply_to_schedule(&self, sch: &mut TSchedule, earlier: &[Step]) -> Result<(), TeError>;
}

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

    /// The variable of loop `i` (outer to inner).
    pub(crate) fn leaf(&self, i: u32) -> Result<usize, TeError> {
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
    pub(crate) fn split_factor(
        &mut self,
        var: usize,
        factor: i64,
    ) -> Result<(usize, usize), TeError> {
        self.split(var, Some(factor), None)
    }

    /// TE `split(var, nparts=n)`.
    pub(crate) fn split_nparts(
        &mut self,
        var: usize,
        nparts: i64,
    ) -> Result<(usize, usize), TeError> {
        self.split(var, None, Some(nparts))
    }

    /// `var` into `<name>.outer` and `<name>.inner`, by exactly one of factor and nparts.
    fn split(
        &mut self,
        var: usize,
        factor: Option<i64>,
        nparts: Option<i64>,
    ) -> Result<(usize, usize), TeError> {
        let (name, kind) = (self.vars[var].name.clone(), self.vars[var].kind);
        let outer = self.new_var(format!("{name}.outer"), kind);
        let inner = self.new_var(format!("{name}.inner"), kind);
        self.rels.push(Rel::Split {
            parent: var,
            outer,
            inner,
            factor,
            nparts,
        });
        self.replace_leaf(var, &[outer, inner])?;
        Ok((outer, inner))
    }

    /// TE `fuse(axes)`: pairwise from the left, `a.b.fused`.
    pub(crate) fn fuse(&mut self, ids: &[u32]) -> Result<(), TeError> {
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
    /// Stage `id`, or a mismatch when the image has no such stage.
    pub(crate) fn stage_mut(&mut self, id: u32) -> Result<&mut TStage, TeError> {
        let n = self.stages.len();
        self.stages
            .get_mut(id as usize)
            .ok_or_else(|| TeError::Mismatch(format!("stage {id} out of range ({n} stages)")))
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
            each_step!(step, s => s.apply_to_schedule(&mut sch, &steps[..k]))
                .map_err(|e| e.in_step(k, step))?;
        }
        sch.legalize_attach()?;
        Ok(sch)
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
