//! The loop state (`loop_state.h`): stages with their loops, the attach map, and the steps
//! applied so far. Steps change it through [`State::apply`] (see `apply.rs`).
use super::attach::AttachMap;
use super::error::{InitError, StepResult, MAX_EXTENT};
use super::iterator::{clean_name, IterIdent, IterKind, Iterator};
use ttdb_format::ansor::{Annotation, Step};

/// One axis of an initial stage, as the compute DAG defines it.
#[derive(Clone, Debug, PartialEq)]
pub struct AxisInit {
    /// The TE variable name (`nn`, `rv0`); the state shows it through [`clean_name`].
    pub name: String,
    /// `None` when the extent is not a constant.
    pub extent: Option<i64>,
    /// Spatial (an op axis) or Reduction (a reduce axis); spatial axes come first.
    pub kind: IterKind,
}

/// One op of the initial compute DAG, in stage order (spec §2.1): the plain input of replay,
/// independent of how the DAG was obtained.
#[derive(Clone, Debug, PartialEq)]
pub struct StageInit {
    pub name: String,
    /// `Some(shape)` for a placeholder (which has no loops), `None` for a compute op.
    pub placeholder_shape: Option<Vec<i64>>,
    pub iters: Vec<AxisInit>,
    /// Ids of the stages this op reads, when the dataflow is known (all smaller than the
    /// stage's own id). With it, CA targets must be consumers and CHR readers must read the
    /// cached stage; without it only the stage order is checked.
    pub inputs: Option<Vec<usize>>,
}

/// An axis of a stage's op: TE name and extent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpAxis {
    pub te_name: String,
    pub extent: Option<i64>,
}

/// How a stage's op came to be (what lowering needs to rebuild its body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpOrigin {
    /// Op `dag_index` of the initial stage list, unchanged.
    Initial { dag_index: usize },
    /// CHR: a copy of op `source`'s output, read by `readers` instead of the source.
    CacheRead {
        source: String,
        readers: Vec<String>,
    },
    /// CHW: the computation of `original` (same body), stored in this scoped buffer.
    CacheWrite { original: String },
    /// CHW: `original`'s op, now an element-wise copy of the cache op `cache`.
    CacheWriteCopy { cache: String },
    /// RF: the partial reduction of `original` with reduce loop `factored_axis` turned into
    /// a spatial axis at position `factor_axis`.
    Rfactor {
        original: String,
        factored_axis: String,
        factor_axis: usize,
    },
    /// RF: the final reduction of `original` over the partial results of `rfactor`.
    RfactorRepl { original: String, rfactor: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpKind {
    Placeholder {
        shape: Vec<i64>,
    },
    Compute {
        axes: Vec<OpAxis>,
        reduce_axes: Vec<OpAxis>,
    },
}

/// The op of a stage (TE `Operation`, reduced to what the state needs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageOp {
    pub name: String,
    pub kind: OpKind,
    pub origin: OpOrigin,
    /// Stage ids this op reads (kept up to date as stages are inserted), if known.
    pub inputs: Option<Vec<usize>>,
}

impl StageOp {
    pub fn is_placeholder(&self) -> bool {
        matches!(self.kind, OpKind::Placeholder { .. })
    }

    /// Spatial axes (empty for a placeholder).
    pub fn axes(&self) -> &[OpAxis] {
        match &self.kind {
            OpKind::Compute { axes, .. } => axes,
            OpKind::Placeholder { .. } => &[],
        }
    }

    pub fn reduce_axes(&self) -> &[OpAxis] {
        match &self.kind {
            OpKind::Compute { reduce_axes, .. } => reduce_axes,
            OpKind::Placeholder { .. } => &[],
        }
    }

    /// Output shape: placeholder shape or extents of the spatial axes.
    pub fn output_shape(&self) -> Vec<Option<i64>> {
        match &self.kind {
            OpKind::Placeholder { shape } => shape.iter().map(|&d| Some(d)).collect(),
            OpKind::Compute { axes, .. } => axes.iter().map(|a| a.extent).collect(),
        }
    }
}

/// `ComputeAtKind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ComputeAt {
    Root,
    Inlined,
    /// At a loop of another stage; the attach map says which.
    Iter,
}

/// `StageAttributes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageAttrs {
    pub auto_unroll_max_step: i64,
    pub storage_offset: i64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    pub op: StageOp,
    /// Loops outer to inner.
    pub iters: Vec<Iterator>,
    pub compute_at: ComputeAt,
    pub attrs: StageAttrs,
    /// Has a loop-changing step (SP/FSP/FFSP/FU/RE/AN) been applied to it? CHW must come
    /// before any (TVM rebuilds the stage from its op and would drop them).
    pub transformed: bool,
}

/// SP `extent` field vs the extent the replay computed, for one SP step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitExtentMismatch {
    pub step_index: usize,
    pub step: String,
    pub iter_name: String,
    pub simulated: i64,
    pub recorded: i64,
}

/// Outcome of the SP `extent` checks (made when both extents are known).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SplitExtentReport {
    pub checked: usize,
    pub mismatches: Vec<SplitExtentMismatch>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct State {
    pub stages: Vec<Stage>,
    pub attach_map: AttachMap,
    pub transform_steps: Vec<Step>,
    pub split_report: SplitExtentReport,
    next_ident: u64,
}

fn check_extent(e: i64, what: &str) -> Result<(), InitError> {
    if !(1..=MAX_EXTENT).contains(&e) {
        return Err(InitError(format!("{what} = {e} is outside 1..=2^40")));
    }
    Ok(())
}

impl State {
    /// The initial state of a DAG (`State(ComputeDAG)`): one root stage per op, loops = op
    /// axes then reduce axes.
    pub fn new(inits: &[StageInit]) -> Result<State, InitError> {
        let mut state = State {
            stages: Vec::with_capacity(inits.len()),
            attach_map: AttachMap::default(),
            transform_steps: Vec::new(),
            split_report: SplitExtentReport::default(),
            next_ident: 0,
        };
        for (dag_index, init) in inits.iter().enumerate() {
            let op = Self::init_op(dag_index, init)?;
            let stage = state.stage_from_op(op);
            state.stages.push(stage);
        }
        Ok(state)
    }

    fn init_op(dag_index: usize, init: &StageInit) -> Result<StageOp, InitError> {
        let origin = OpOrigin::Initial { dag_index };
        let name = init.name.clone();
        let inputs = init.inputs.clone();
        if let Some(bad) = inputs.iter().flatten().find(|&&i| i >= dag_index) {
            return Err(InitError(format!(
                "{name} (stage {dag_index}) reads stage {bad}, which does not come before it"
            )));
        }
        if let Some(shape) = &init.placeholder_shape {
            if !init.iters.is_empty() || inputs.as_ref().is_some_and(|i| !i.is_empty()) {
                return Err(InitError(format!(
                    "placeholder {name} must have no loops and no inputs"
                )));
            }
            for &d in shape {
                check_extent(d, &format!("a dimension of placeholder {name}"))?;
            }
            return Ok(StageOp {
                name,
                kind: OpKind::Placeholder {
                    shape: shape.clone(),
                },
                origin,
                inputs,
            });
        }
        let (mut axes, mut reduce_axes) = (Vec::new(), Vec::new());
        for it in &init.iters {
            if let Some(e) = it.extent {
                check_extent(e, &format!("extent of {name}.{}", it.name))?;
            }
            let axis = OpAxis {
                te_name: it.name.clone(),
                extent: it.extent,
            };
            match it.kind {
                IterKind::Spatial if reduce_axes.is_empty() => axes.push(axis),
                IterKind::Reduction => reduce_axes.push(axis),
                kind => {
                    return Err(InitError(format!(
                    "{name}: axis {} of kind {kind:?}; expected spatial axes, then reduction axes",
                    it.name
                )))
                }
            }
        }
        Ok(StageOp {
            name,
            kind: OpKind::Compute { axes, reduce_axes },
            origin,
            inputs,
        })
    }

    /// After `offset` stages were inserted at `start`: every stage id `>= start` in the
    /// attach map and in the ops' inputs moves up by `offset` (`ApplyStageIdOffset`).
    pub fn shift_stage_ids(&mut self, start: usize, offset: usize) {
        self.attach_map.apply_stage_id_offset(start, offset);
        for st in &mut self.stages {
            for i in st.op.inputs.iter_mut().flatten() {
                if *i >= start {
                    *i += offset;
                }
            }
        }
    }

    /// Does stage `consumer` read stage `producer`, directly or through other stages?
    /// `None` when the dataflow is unknown.
    pub fn consumes(&self, consumer: usize, producer: usize) -> Option<bool> {
        let mut reaches = vec![false; self.stages.len()];
        *reaches.get_mut(producer)? = true;
        for j in producer + 1..=consumer.min(self.stages.len().saturating_sub(1)) {
            let inputs = self.stages[j].op.inputs.as_ref()?;
            reaches[j] = inputs.iter().any(|&i| reaches.get(i) == Some(&true));
        }
        Some(consumer > producer && reaches.get(consumer) == Some(&true))
    }

    /// Is any stage known to read stage `s`? `None` when the dataflow is unknown.
    pub fn has_consumers(&self, s: usize) -> Option<bool> {
        let mut any = false;
        for st in self.stages.get(s + 1..)? {
            any |= st.op.inputs.as_ref()?.contains(&s);
        }
        Some(any)
    }

    pub fn fresh_ident(&mut self) -> IterIdent {
        self.next_ident += 1;
        IterIdent(self.next_ident)
    }

    /// `Stage(op)`: a root stage whose loops are the op's axes (spatial) then reduce axes.
    pub fn stage_from_op(&mut self, op: StageOp) -> Stage {
        let mut iters = Vec::new();
        let all_axes = op.axes().iter().map(|a| (a, IterKind::Spatial));
        let all_axes = all_axes.chain(op.reduce_axes().iter().map(|a| (a, IterKind::Reduction)));
        for (index, (axis, kind)) in all_axes.enumerate() {
            iters.push(Iterator {
                name: clean_name(&axis.te_name),
                extent: axis.extent,
                kind,
                annotation: Annotation::None,
                orig_iters: Vec::new(),
                te_name: axis.te_name.clone(),
                source_axes: vec![index],
                ident: IterIdent(0),
            });
        }
        for it in &mut iters {
            it.ident = self.fresh_ident();
        }
        Stage {
            op,
            iters,
            compute_at: ComputeAt::Root,
            attrs: StageAttrs::default(),
            transformed: false,
        }
    }

    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    pub fn attach_map(&self) -> &AttachMap {
        &self.attach_map
    }

    /// The steps applied so far (= the record's steps up to the current one).
    pub fn transform_steps(&self) -> &[Step] {
        &self.transform_steps
    }

    /// SP `extent` checks made so far.
    pub fn split_report(&self) -> &SplitExtentReport {
        &self.split_report
    }

    /// The extent of loop `iter_id` of stage `stage_id` (ids as a step names them), when the
    /// loop exists and its extent is known.
    pub fn loop_extent(&self, stage_id: u32, iter_id: u32) -> Option<i64> {
        self.stages
            .get(stage_id as usize)?
            .iters
            .get(iter_id as usize)?
            .extent
    }

    /// Position of the loop with identity `ident` in `stage`, if it still exists.
    pub fn iter_position(&self, stage: usize, ident: IterIdent) -> Option<usize> {
        self.stages
            .get(stage)?
            .iters
            .iter()
            .position(|it| it.ident == ident)
    }

    // ---- lookups used by the steps: every id is checked, never indexed blindly ----

    /// Any stage (placeholders included).
    pub fn any_stage(&self, id: u32) -> StepResult<usize> {
        let n = self.stages.len();
        let i = id as usize;
        if i < n {
            Ok(i)
        } else {
            Err(format!("stage id {id} is out of range ({n} stages)"))
        }
    }

    /// A compute stage that still has loops (not a placeholder, not inlined).
    pub fn loop_stage(&self, id: u32) -> StepResult<usize> {
        let s = self.compute_stage(id)?;
        if self.stages[s].compute_at == ComputeAt::Inlined {
            return Err(format!(
                "stage {s} ({}) is inlined and has no loops",
                self.stages[s].op.name
            ));
        }
        Ok(s)
    }

    /// A compute stage (not a placeholder).
    pub fn compute_stage(&self, id: u32) -> StepResult<usize> {
        let s = self.any_stage(id)?;
        if self.stages[s].op.is_placeholder() {
            return Err(format!(
                "stage {s} ({}) is a placeholder",
                self.stages[s].op.name
            ));
        }
        Ok(s)
    }

    /// A loop of a stage that has loops.
    pub fn loop_iter(&self, stage_id: u32, iter_id: u32) -> StepResult<(usize, usize)> {
        let s = self.loop_stage(stage_id)?;
        let n = self.stages[s].iters.len();
        let i = iter_id as usize;
        if i >= n {
            return Err(format!(
                "iterator id {iter_id} is out of range for stage {s} ({}, {n} iterators)",
                self.stages[s].op.name
            ));
        }
        Ok((s, i))
    }
}
