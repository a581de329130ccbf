//! Replay of Ansor transform steps on a loop state and on a TE-level image of the schedule
//! (TVM `loop_state.cc` / `transform_step.cc`; spec `shared/spec/ansor-format.md` §2).
//!
//! The algorithm (a compute DAG, given as its initial stages) and the schedule (the steps
//! of a record) stay apart: [`State::new`] builds the initial loop state from
//! [`StageInit`]s (from ttdb's DAGs: [`stage_inits_from_dag`]), and each step applies
//! itself to a state through [`ApplyToState`] (one impl per step struct, in `steps/`),
//! dispatched by [`State::apply`]; [`replay`] does a whole record. Every id, length and
//! extent is checked: a bad step is a [`ReplayError`], never a panic, and leaves the state
//! unchanged.
//!
//! Compute-at follows TVM's index bookkeeping (RE does not update the attach map) but also
//! remembers the loop *object* attached to (TE's `attach_ivar`, spec §2.4.1). The two can
//! only part ways through an RE of the target that moves the attach loop; such an RE is
//! refused with a [`ReplayError`] naming both loops, instead of silently retargeting the
//! stage. (Ansor always reorders before it attaches, so real records never do this.)
//!
//! Split lengths need not divide the loop's extent, and their product may exceed it, as in
//! TVM, which measures such records (tuners such as Droplet search emit them): each part
//! keeps its length, the remaining part gets the ceil quotient, and lowering guards the
//! iterations past the extent.
//!
//! Beyond TVM's own checks, replay refuses what TE or codegen would reject later or what
//! no Ansor search produces: split lengths < 1, extents (split lengths and their products
//! included) above 2^40, CA onto a non-consumer (or, without dataflow, an earlier
//! stage), CI of a reduction or an output, nested parallel loops, tensorize, CHW/RF of a
//! stage others are attached to, and steps on the loops of an inlined stage.
//!
//! [`te`] is the same replay on a TE-level image of the schedule (stage ops, iteration
//! variables and the split/fuse relations between them), which lowering needs and the state
//! does not keep: each step applies itself there through [`te::ApplyToSchedule`], in the
//! same file of `steps/` as its `ApplyToState` (as in TVM's `transform_step.cc`).
//!
//! [`retarget`] adapts a record's steps to another workload of the same class (the split
//! lengths move to the nearest exact factorization of the new extents): it works on steps and
//! states only, so it lives here, not in lowering.
//!
//! [`State::dump`] prints the state in the text format of the reference simulator
//! (`shared/tools/ansor_state_sim.py --dump`) for differential testing.
mod apply;
mod attach;
pub mod divisors;
mod dump;
#[cfg(any(test, feature = "testkit"))]
mod dump_parse;
mod error;
mod from_dag;
mod iterator;
pub mod retarget;
#[cfg(test)]
mod spec_examples;
mod state;
mod step_ids;
mod steps;
pub mod te;
#[cfg(test)]
mod test_util;
mod validate;

pub use apply::{replay, ApplyToState, ReplayFailure};
pub use attach::{AttachMap, AttachPoint};
#[cfg(any(test, feature = "testkit"))]
pub use dump_parse::stage_inits_from_dump;
pub use error::{InitError, ReplayError, MAX_EXTENT};
pub use from_dag::stage_inits_from_dag;
pub use iterator::{clean_name, IterIdent, IterKind, Iterator};
pub use retarget::{adapt_split_lengths, retarget_steps, Retargeted};
pub use state::{
    AxisInit, ComputeAt, OpAxis, OpKind, OpOrigin, SplitExtentMismatch, SplitExtentReport, Stage,
    StageAttrs, StageInit, StageOp, State,
};
pub use step_ids::{insert_step, remove_step, IdsMut, StepIds};
pub use steps::split_lengths;
