//! Lowering: a replayed Ansor schedule ([`ttdb_algo::schedule::State`]) on a compute DAG
//! ([`ttdb_algo::ir::Dag`]) to a loop-nest kernel ([`crate::loopnest::Kernel`]), following TE's
//! `ScheduleOps` (TVM v0.18 `src/te/schedule/*`, `src/te/operation/compute_op.cc`).
//!
//! The pipeline, one file per concern:
//! * the record's steps replayed on a TE-level image ([`ttdb_algo::schedule::te`]: split/fuse
//!   relations between iteration variables, leaf order, annotations, compute locations, TE's
//!   `LegalizeInvalidAttach`, the stage bodies after cache_write / cache_read / rfactor and
//!   after inlining), checked against the caller's state: it lives below this crate, each
//!   step's part beside its state replay;
//! * `bound`: bound inference (`InferBound`): the region a stage computed at a loop must
//!   produce (loops outside the attach point fixed, inside it relaxed; a symbolic minimum and
//!   a constant extent), loop extents (`PassDownDomain`, with TE's tightening of a factor
//!   larger than its parent), axis values from loops (`PassUpIndex`, fused loops by div/mod
//!   in TE's order), bound checks (`MakeBoundCheck`: partial tiles, regions reaching outside
//!   the domain);
//! * `emit`: loops (kinds from annotations; an `auto_unroll_max_step` pragma becomes an
//!   [`crate::loopnest::Attr::AutoUnroll`] wrapping the loop it was put on: TE emits the
//!   pragma `AttrStmt` before that leaf's `For`), attached stages first in their loop's body
//!   inside an `Allocate` of their region, reduction init placed where TE puts it, nested
//!   `if (likely(..))` guards;
//! * `convert`: tensor expressions to loop-nest expressions, canonical index forms;
//!   `names`: buffers and parameters; [`check`]: interpreter-vs-reference comparison;
//! * `layout`: Ansor's layout rewrite option 2 ([`WeightLayoutMode::PrePacked`]): the
//!   layout-free weights packed into the layout the final state derives
//!   ([`packed_layout`], spec §4.8), every load of them rewritten, [`pack_weight`] packing a
//!   weight outside the kernel.
//!
//! Safety: the result always passes [`crate::loopnest::validate()`], the static bounds checker
//! ([`crate::loopnest::check_bounds`]: every access proven in bounds) and the cost guard
//! (which also bounds a pre-packed weight's size); anything else is a [`LowerError`].
//! Schedules are untrusted input. Where the checker cannot derive an access's safety from TE's
//! own guards (a guard on `x` protecting `floordiv(x, 8)`), or an index read from data
//! (the checker takes a loaded integer as its type's full range: a clipped one is proven), and
//! where an index depends on a window of non-constant extent, the access gets an explicit
//! in-bounds guard (a no-op for every in-bounds access). Split lengths above their loop's
//! extent are TE's business too: the inner loop is tightened to the parent's extent, the rest
//! guarded (`bound`).
//!
//! Not lowered (clean errors): GPU thread bindings and vthreads, tensorize,
//! `debug_skip_region`, splits / fuses / rfactor of reduce axes whose extent is not a
//! constant (adaptive pooling windows; unsplit ones are lowered), reduce extents that depend
//! on input data (sparse workloads), and schedules TVM itself cannot lower (a consumer outside
//! the loop its producer is computed at). `storage_align` only pads strides and is ignored.
//! Stages at root are computed over their full domain (TE uses the union of what their
//! consumers read, which is the same for every DAG ttdb builds, up to partial tiles).
//!
//! Parameters: the DAG's placeholders in stage order, then its outputs
//! ([`ttdb_algo::ir::Dag::io_shapes`] order, see [`param_tensors`]); a pre-packed weight has its
//! packed shape ([`Lowered::weight_layout`]).
mod bound;
pub mod check;
mod convert;
mod emit;
mod layout;
mod names;
#[cfg(test)]
pub(crate) mod tests;

pub use layout::{
    pack_dag, pack_values, pack_weight, PackedDim, PackedWeight, SplitAxis, WeightLayout,
    WeightLayoutMode,
};

use crate::loopnest::cost::{check_cost, CostLimits};
use crate::loopnest::{check_bounds, simplify_kernel, validate, Kernel};
use std::fmt;
use ttdb_algo::ir::{Dag, TensorId};
use ttdb_algo::schedule::te::{self, inject_inline, LOp, TSchedule, TeError};
use ttdb_algo::schedule::{stage_inits_from_dag, State};
use ttdb_format::ansor::Step;

/// Why a schedule could not be lowered.
#[derive(Clone, Debug, PartialEq)]
pub enum LowerError {
    /// The state does not describe the steps on this DAG the way lowering replays them.
    Mismatch(String),
    /// A schedule TVM itself would refuse to lower (e.g. a consumer outside the loop its
    /// producer is computed at).
    InvalidSchedule(String),
    /// A feature ttdb does not lower (GPU thread bindings, `debug_skip_region`, splits of
    /// data-dependent extents, ...).
    Unsupported(String),
    /// Extents or regions beyond the 2^40 cap.
    TooLarge(String),
    /// Accesses the bounds checker could not prove in bounds: the kernel is refused.
    Unproven(Vec<String>),
    /// The kernel's work or temporary memory exceeds the limits.
    Cost(String),
    /// A ttdb bug (an emitted kernel that does not validate, a broken invariant).
    Internal(String),
}

impl LowerError {
    /// A short class name for reports.
    pub fn kind(&self) -> &'static str {
        match self {
            LowerError::Mismatch(_) => "mismatch",
            LowerError::InvalidSchedule(_) => "invalid schedule",
            LowerError::Unsupported(_) => "unsupported",
            LowerError::TooLarge(_) => "too large",
            LowerError::Unproven(_) => "unproven access",
            LowerError::Cost(_) => "cost",
            LowerError::Internal(_) => "internal",
        }
    }
}

impl fmt::Display for LowerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LowerError::Mismatch(m) => write!(f, "the state does not match the schedule: {m}"),
            LowerError::InvalidSchedule(m) => write!(f, "invalid schedule: {m}"),
            LowerError::Unsupported(m) => write!(f, "not supported: {m}"),
            LowerError::TooLarge(m) => write!(f, "too large: {m}"),
            LowerError::Unproven(v) => {
                write!(f, "{} access(es) not provably in bounds", v.len())?;
                for a in v.iter().take(3) {
                    write!(f, "; {a}")?;
                }
                Ok(())
            }
            LowerError::Cost(m) => write!(f, "kernel refused by the cost guard: {m}"),
            LowerError::Internal(m) => write!(f, "internal lowering error: {m}"),
        }
    }
}
impl std::error::Error for LowerError {}

/// The TE image's errors keep their class and message.
impl From<TeError> for LowerError {
    fn from(e: TeError) -> LowerError {
        match e {
            TeError::Mismatch(m) => LowerError::Mismatch(m),
            TeError::InvalidSchedule(m) => LowerError::InvalidSchedule(m),
            TeError::Unsupported(m) => LowerError::Unsupported(m),
            TeError::TooLarge(m) => LowerError::TooLarge(m),
            TeError::Internal(m) => LowerError::Internal(m),
        }
    }
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LowerOptions {
    /// Kernel name.
    pub name: String,
    /// Layout of the layout-free weights in the kernel's parameters (see [`Lowered::weight_layout`]).
    pub weight_layout: WeightLayoutMode,
    /// Work / temporary-memory limits the kernel must respect.
    pub limits: CostLimits,
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions {
            name: "lowered".into(),
            weight_layout: WeightLayoutMode::Original,
            limits: CostLimits::default(),
        }
    }
}

/// DAG tensors bound to the kernel's parameters, in order: placeholders then outputs.
pub fn param_tensors(dag: &Dag) -> Vec<TensorId> {
    let mut v = dag.placeholders();
    v.extend(dag.outputs.iter().copied());
    v
}

/// A lowered kernel with facts about how it was obtained.
#[derive(Clone, Debug)]
pub struct Lowered {
    pub kernel: Kernel,
    /// Accesses the bounds checker could not prove from TE's own guards, which got an explicit
    /// in-bounds guard (a `select` for loads, an `if` for stores).
    pub explicit_guards: usize,
    /// Layout of the weights in the kernel's parameters: inputs must be packed with
    /// [`WeightLayout::pack_inputs`] before a run. [`WeightLayout::Original`] unless
    /// [`WeightLayoutMode::PrePacked`] was asked for and the DAG has layout-free weights
    /// the schedule rewrites.
    pub weight_layout: WeightLayout,
}

/// Lowers `state` (replayed from `stage_inits_from_dag(dag)` with a record's steps) to a
/// kernel whose accesses are all proven in bounds.
pub fn lower(dag: &Dag, state: &State, opts: &LowerOptions) -> Result<Kernel, LowerError> {
    lower_detailed(dag, state, opts).map(|l| l.kernel)
}

/// The schedule of `state` on `dag` with its bound inference, before emission.
struct Prepared {
    sch: TSchedule,
    /// The stages' ops before inlining (what Ansor's state holds).
    ops: Vec<LOp>,
    names: names::Naming,
    bounds: bound::Bounds,
}

fn prepare(dag: &Dag, state: &State) -> Result<Prepared, LowerError> {
    let mut sch = TSchedule::replay(dag, state.transform_steps())?;
    sch.check_against(state)?;
    let inlined: Vec<bool> = sch
        .stages
        .iter()
        .map(|s| s.loc == te::Loc::Inline)
        .collect();
    let ops: Vec<LOp> = sch.stages.iter().map(|s| s.op.clone()).collect();
    for (st, op) in sch.stages.iter_mut().zip(inject_inline(&ops, &inlined)?) {
        st.op = op;
    }
    let mut names = names::Naming::new(dag, &sch, &WeightLayout::Original)?;
    let bounds = bound::infer(&sch, &mut names)?;
    Ok(Prepared {
        sch,
        ops,
        names,
        bounds,
    })
}

/// The layout Ansor's layout rewrite option 2 (`RewriteForPreTransformed`) gives the
/// layout-free weights of `dag` under the final `state` (spec §4.8, see the `layout`
/// module): [`WeightLayout::Original`] when the DAG has none or the schedule reads them
/// through a cache_read / rfactor stage.
pub fn packed_layout(dag: &Dag, state: &State) -> Result<WeightLayout, LowerError> {
    let p = prepare(dag, state)?;
    layout::derive(dag, state, &p.ops, &p.sch, &p.bounds)
}

/// [`lower`], with details.
pub fn lower_detailed(
    dag: &Dag,
    state: &State,
    opts: &LowerOptions,
) -> Result<Lowered, LowerError> {
    let Prepared {
        sch,
        ops,
        mut names,
        bounds,
    } = prepare(dag, state)?;
    let weight_layout = match opts.weight_layout {
        WeightLayoutMode::Original => WeightLayout::Original,
        WeightLayoutMode::PrePacked => layout::derive(dag, state, &ops, &sch, &bounds)?,
    };
    check_packed_size(dag, &weight_layout, &opts.limits)?;
    names.reshape_inputs(dag, &sch, &weight_layout)?;
    let names = names;
    // TE's code is safe by construction (accesses sit under its bound checks), but the static
    // checker cannot carry every guard through `floordiv`/`floormod` (a non-divisible split of
    // a channel-blocked reduction): the accesses it cannot prove get an explicit in-bounds
    // guard in a second emission, which must then prove everything.
    let mut guarded = std::collections::HashSet::new();
    for attempt in 0..2 {
        let mut names = names.clone();
        let emitter = emit::Emitter::new(
            dag,
            &sch,
            &bounds,
            &mut names,
            &weight_layout,
            guarded.clone(),
        )?;
        let kernel = simplify_kernel(&emitter.kernel(&opts.name)?);
        validate(&kernel).map_err(|e| {
            LowerError::Internal(format!(
                "{e}\n{}",
                crate::loopnest::kernel_to_string(&kernel)
            ))
        })?;
        check_cost(&kernel, &opts.limits).map_err(LowerError::Cost)?;
        let unproven = check_bounds(&kernel).map_err(|e| LowerError::Internal(e.to_string()))?;
        if unproven.is_empty() {
            return Ok(Lowered {
                kernel,
                explicit_guards: guarded.len(),
                weight_layout,
            });
        }
        if attempt == 1 {
            return Err(LowerError::Unproven(
                unproven.iter().map(|u| u.to_string()).collect(),
            ));
        }
        guarded = unproven
            .iter()
            .map(|u| emit::access_key(&u.buffer, &u.index, u.is_store))
            .collect();
    }
    unreachable!("two attempts")
}

/// A packed weight is a copy the run allocates, and its shape comes from the schedule: fused
/// split parts keep their state extents (TVM's rule), so a split length far above its loop's
/// extent pads the weight as much. It counts against the temporary-memory limit.
fn check_packed_size(
    dag: &Dag,
    layout: &WeightLayout,
    limits: &CostLimits,
) -> Result<(), LowerError> {
    for p in layout.packed() {
        let elem = i128::from(dag.stage(p.tensor).dtype.bits().div_ceil(8));
        let bytes = p
            .shape()
            .iter()
            .fold(elem, |a, &d| a.saturating_mul(i128::from(d.max(0))));
        if bytes > i128::from(limits.max_temp_bytes) {
            return Err(LowerError::Cost(format!(
                "packed weight {} needs {bytes} bytes (limit {})",
                p.new_layout(),
                limits.max_temp_bytes
            )));
        }
    }
    Ok(())
}

/// Replays `steps` on `dag` (SP extents checked) and lowers the result.
pub fn lower_steps(dag: &Dag, steps: &[Step], opts: &LowerOptions) -> Result<Kernel, LowerError> {
    lower_steps_detailed(dag, steps, opts).map(|l| l.kernel)
}

/// [`lower_steps`], with details (the weight layout among them).
pub fn lower_steps_detailed(
    dag: &Dag,
    steps: &[Step],
    opts: &LowerOptions,
) -> Result<Lowered, LowerError> {
    let state = ttdb_algo::schedule::replay(&stage_inits_from_dag(dag), steps)
        .map_err(|e| LowerError::Mismatch(format!("replay: {e}")))?;
    lower_detailed(dag, &state, opts)
}

/// The untuned baseline ("speedup over naive"): every stage at root in its own loop nest
/// over its axes then its reduce axes, no annotation, nothing inlined (element-wise stages
/// get their own temporaries).
pub fn lower_default(dag: &Dag) -> Result<Kernel, LowerError> {
    lower_steps(
        dag,
        &[],
        &LowerOptions {
            name: "naive".into(),
            ..LowerOptions::default()
        },
    )
}
