//! The access analysis the sketch and init rules ask questions of (TVM `compute_dag.cc`
//! `AccessAnalyzer`, `search_policy/utils.h`), computed for the stages of a *state*: cache
//! and rfactor stages included, as TVM's rules see them through the state's current DAG.
//!
//! Each state stage is traced back to the ttdb DAG op whose body it computes (a `.local`
//! cache stage computes its original's body; the original becomes an element-wise copy of
//! it). Rfactor stages read their inputs through a fused, split reduction: their accesses
//! are never simple, which is all the rules need to know about them.
use std::collections::{BTreeMap, BTreeSet};
use ttdb_algo::ir::{Body, Dag, Expr, Intrinsic, Operation};
use ttdb_algo::schedule::{ComputeAt, IterKind, OpOrigin, State};

/// How a stage reads one producer: each access as its index list, or `None` when the
/// accesses are not expressible in the op's own axes (rfactor stages).
type Accesses = Option<Vec<Vec<Expr>>>;

#[derive(Clone, Debug, Default)]
struct StageFacts {
    placeholder: bool,
    /// Names of the op's spatial axis variables and their extents.
    axes: Vec<(String, Option<i64>)>,
    has_reduce: bool,
    /// `exp` anywhere in the body (TVM's `HasExpensiveOp` looks for exactly `tir.exp`).
    expensive: bool,
    /// A `Select` or `if_then_else` in the body.
    branch: bool,
    /// `auto_scheduler_simplify_const_tensor_indices`.
    const_tensor_indices: Vec<String>,
    reads: BTreeMap<usize, Accesses>,
}

/// Facts about every stage of one state.
pub struct Analysis {
    facts: Vec<StageFacts>,
}

fn collect_loads(
    e: &Expr,
    out: &mut Vec<(ttdb_algo::ir::TensorId, Vec<Expr>)>,
    flags: &mut (bool, bool),
) {
    e.visit_post_order(&mut |x| match x {
        Expr::Load {
            tensor, indices, ..
        } => out.push((*tensor, indices.clone())),
        Expr::Select { .. } => flags.1 = true,
        Expr::Call { func, .. } => match func {
            Intrinsic::Exp => flags.0 = true,
            Intrinsic::IfThenElse => flags.1 = true,
            _ => {}
        },
        _ => {}
    });
}

/// `IsSimpleAccess`: every index is a constant or one of the op's axis variables. Returns
/// (axis missing, axis duplicated, same order) when simple.
fn simple_access(axes: &[(String, Option<i64>)], indices: &[Expr]) -> Option<(bool, bool, bool)> {
    let mut order = Vec::new();
    let mut count = vec![0usize; axes.len()];
    for e in indices {
        match e {
            Expr::IntImm { .. } => {}
            Expr::Var(v) => {
                let i = axes.iter().position(|(n, _)| n == v)?;
                order.push(i);
                count[i] += 1;
            }
            _ => return None,
        }
    }
    let missing = count.contains(&0);
    let duplicated = count.iter().any(|&c| c > 1);
    let same_order = order.windows(2).all(|w| w[0] <= w[1]);
    Some((missing, duplicated, same_order))
}

impl Analysis {
    pub fn new(dag: &Dag, state: &State) -> Analysis {
        // The DAG op each state stage computes, and the state stage now holding each DAG
        // op's output. Names are not unique (two `T_add`s), so this goes by position:
        // CHW and RF insert their pair of stages where the original op was.
        let mut dag_of: Vec<Option<usize>> = Vec::with_capacity(state.stages().len());
        let mut holder: Vec<Option<usize>> = vec![None; dag.stages.len()];
        let mut next = 0usize;
        for (i, st) in state.stages().iter().enumerate() {
            let d = match &st.op.origin {
                OpOrigin::Initial { dag_index } => {
                    next = dag_index + 1;
                    Some(*dag_index)
                }
                OpOrigin::CacheWrite { .. } | OpOrigin::Rfactor { .. } => Some(next),
                OpOrigin::CacheWriteCopy { .. } | OpOrigin::RfactorRepl { .. } => {
                    next += 1;
                    Some(next - 1)
                }
                OpOrigin::CacheRead { .. } => None,
            };
            if let Some(d) = d.filter(|&d| d < dag.stages.len()) {
                holder[d] = Some(i);
            }
            dag_of.push(d.filter(|&d| d < dag.stages.len()));
        }
        let facts_of_dag_op = |d: usize| -> StageFacts {
            let st = &dag.stages[d];
            let Operation::Compute(c) = &st.op else {
                return StageFacts {
                    placeholder: true,
                    ..Default::default()
                };
            };
            let mut loads = Vec::new();
            let mut flags = (false, false);
            match &c.body {
                Body::Expr(e) => collect_loads(e, &mut loads, &mut flags),
                Body::Reduce { source, .. } => collect_loads(source, &mut loads, &mut flags),
            }
            let mut reads: BTreeMap<usize, Accesses> = BTreeMap::new();
            for (t, idx) in loads {
                if let Some(p) = holder.get(t.0).copied().flatten() {
                    if let Some(v) = reads.entry(p).or_insert_with(|| Some(vec![])) {
                        v.push(idx);
                    }
                }
            }
            StageFacts {
                placeholder: false,
                axes: c
                    .axes
                    .iter()
                    .map(|a| (a.name.clone(), a.const_extent()))
                    .collect(),
                has_reduce: !c.reduce_axes.is_empty(),
                expensive: flags.0,
                branch: flags.1,
                const_tensor_indices: c.attrs.simplify_const_tensor_indices.clone(),
                reads,
            }
        };
        let facts = state
            .stages()
            .iter()
            .enumerate()
            .map(|(i, st)| match &st.op.origin {
                // The cache computes the original's body.
                OpOrigin::Initial { .. } | OpOrigin::CacheWrite { .. } => {
                    dag_of[i].map(facts_of_dag_op).unwrap_or_default()
                }
                OpOrigin::CacheWriteCopy { .. } => {
                    let axes: Vec<(String, Option<i64>)> = st
                        .op
                        .axes()
                        .iter()
                        .map(|a| (a.te_name.clone(), a.extent))
                        .collect();
                    let idx = axes.iter().map(|(n, _)| Expr::var(n.clone())).collect();
                    let mut reads = BTreeMap::new();
                    if i > 0 {
                        reads.insert(i - 1, Some(vec![idx]));
                    }
                    StageFacts {
                        axes,
                        reads,
                        ..Default::default()
                    }
                }
                OpOrigin::CacheRead { .. }
                | OpOrigin::Rfactor { .. }
                | OpOrigin::RfactorRepl { .. } => StageFacts {
                    axes: st
                        .op
                        .axes()
                        .iter()
                        .map(|a| (a.te_name.clone(), a.extent))
                        .collect(),
                    has_reduce: !st.op.reduce_axes().is_empty(),
                    reads: st.op.inputs.iter().flatten().map(|&p| (p, None)).collect(),
                    ..Default::default()
                },
            })
            .collect();
        Analysis { facts }
    }

    fn readers(&self, s: usize) -> BTreeSet<usize> {
        (0..self.facts.len())
            .filter(|&r| self.facts[r].reads.contains_key(&s))
            .collect()
    }

    pub fn is_placeholder(&self, s: usize) -> bool {
        self.facts[s].placeholder
    }

    pub fn is_output(&self, s: usize) -> bool {
        !self.facts[s].placeholder && self.readers(s).is_empty()
    }

    pub fn has_reduce(&self, s: usize) -> bool {
        self.facts[s].has_reduce
    }

    pub fn const_tensor_indices(&self, s: usize) -> &[String] {
        &self.facts[s].const_tensor_indices
    }

    /// `IsStrictlyInlineable`: simple accesses in order, no duplicated axis, no `exp`, no
    /// branch.
    pub fn is_strictly_inlineable(&self, s: usize) -> bool {
        let f = &self.facts[s];
        if f.placeholder || f.expensive || f.branch {
            return false;
        }
        f.reads.values().all(|acc| match acc {
            None => false,
            Some(list) => list
                .iter()
                .all(|idx| matches!(simple_access(&f.axes, idx), Some((_, false, true)))),
        })
    }

    /// `NeedsMultiLevelTiling`: at least two inputs miss a spatial axis of extent > 1, or
    /// one does and the op reduces.
    pub fn needs_multi_level_tiling(&self, s: usize) -> bool {
        let f = &self.facts[s];
        if f.placeholder || !f.const_tensor_indices.is_empty() {
            return false;
        }
        let mut missing = 0;
        for acc in f.reads.values() {
            let Some(list) = acc else { continue };
            let mut vars = BTreeSet::new();
            for idx in list {
                for e in idx {
                    vars.extend(e.free_vars());
                }
            }
            if f.axes
                .iter()
                .any(|(n, e)| e.unwrap_or(1) > 1 && !vars.contains(n))
            {
                missing += 1;
            }
            if missing >= 2 || missing >= 1 && f.has_reduce {
                return true;
            }
        }
        false
    }

    /// `GetConsumers`: the stages reading `s`, looking through inlined stages.
    pub fn consumers(&self, state: &State, s: usize) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        let mut todo: Vec<usize> = self.readers(s).into_iter().collect();
        let mut seen = BTreeSet::new();
        while let Some(r) = todo.pop() {
            if !seen.insert(r) {
                continue;
            }
            if state.stages()[r].compute_at == ComputeAt::Inlined {
                todo.extend(self.readers(r));
            } else {
                out.insert(r);
            }
        }
        out
    }

    /// `ElementWiseMatch`, widened: every op between `s` and `target` (read, directly or
    /// through others, from `s`) has the output shape of `s`, reads its producers there
    /// element-wise (simple, complete, in order), and is read only by such ops or by `target`.
    ///
    /// TVM asks for a chain, each op with exactly one reader, so an epilogue that reads a
    /// value twice (SiLU `x * sigmoid(x)`, hardswish, GELU) does not match, and the conv's
    /// whole output goes through memory before the epilogue reads it back: twice the
    /// traffic of a memory-bound depthwise kernel. A DAG of element-wise ops that all end in
    /// `target` inlines into it just as a chain does, and the steps stay Ansor steps that
    /// TVM replays.
    fn elementwise_match(&self, s: usize, target: usize) -> bool {
        let shape = |f: &StageFacts| f.axes.iter().map(|a| a.1).collect::<Vec<_>>();
        let mut todo = vec![s];
        let mut seen = BTreeSet::new();
        while let Some(cur) = todo.pop() {
            if cur == target || !seen.insert(cur) {
                continue;
            }
            let readers = self.readers(cur);
            let fc = &self.facts[cur];
            if readers.is_empty() || fc.placeholder {
                return false; // another output, or an input
            }
            for next in readers {
                let fnx = &self.facts[next];
                if fnx.placeholder || shape(fc) != shape(fnx) {
                    return false;
                }
                let elementwise = fnx.reads[&cur].as_ref().is_some_and(|list| {
                    list.iter().all(|idx| {
                        matches!(simple_access(&fnx.axes, idx), Some((false, false, true)))
                    })
                });
                if !elementwise {
                    return false;
                }
                todo.push(next);
            }
        }
        true
    }

    /// `HasSingleElementwiseMatchedConsumer`: the one consumer, if it matches element-wise,
    /// not both reduce, and it is not a `.shared` stage.
    pub fn single_elementwise_consumer(&self, state: &State, s: usize) -> Option<usize> {
        let consumers = self.consumers(state, s);
        if consumers.len() != 1 {
            return None;
        }
        let t = *consumers.iter().next().unwrap();
        let both_reduce = self.has_reduce(s) && stage_has_reduce_iter(state, t);
        (self.elementwise_match(s, t)
            && !both_reduce
            && !state.stages()[t].op.name.ends_with(".shared"))
        .then_some(t)
    }

    /// `NeedsRfactor`: a tiled op with little spatial parallelism, or any other reduction
    /// longer than the core count.
    pub fn needs_rfactor(&self, state: &State, s: usize, num_cores: usize) -> bool {
        if self.facts[s].placeholder {
            return false;
        }
        let (mut space, mut reduce) = (1i64, 1i64);
        for it in &state.stages()[s].iters {
            let e = it.extent.unwrap_or(1);
            match it.kind {
                IterKind::Spatial => space = space.saturating_mul(e),
                IterKind::Reduction => reduce = reduce.saturating_mul(e),
                _ => {}
            }
        }
        if self.needs_multi_level_tiling(s) {
            !(space > reduce || space > num_cores as i64 * 16)
        } else {
            reduce > 1 && reduce > num_cores as i64
        }
    }
}

/// `HasReduceIter`.
pub fn stage_has_reduce_iter(state: &State, s: usize) -> bool {
    state.stages()[s]
        .iters
        .iter()
        .any(|it| it.kind != IterKind::Spatial)
}

/// `IsTiled`: some loop of the stage is a split part (TVM looks for `.0` in the names).
pub fn is_tiled(state: &State, s: usize) -> bool {
    state.stages()[s]
        .iters
        .iter()
        .any(|it| it.name.contains(".0"))
}
