//! State-level replay of Ansor transform steps (TVM `loop_state.cc` / `transform_step.cc`;
//! spec `shared/spec/ansor-format.md` §2).
//!
//! The algorithm (a compute DAG, given as its initial stages) and the schedule (the steps
//! of a record) stay apart: [`State::new`] builds the initial loop state from
//! [`StageInit`]s (from ttdb's DAGs: [`stage_inits_from_dag`]), and each step applies itself to a state through [`ApplyToState`]
//! (one impl per step struct, in `steps/`), dispatched by [`Step::apply_to`] /
//! [`State::apply`]. Every id, length and extent is checked: a bad step is a
//! [`ReplayError`], never a panic, and leaves the state unchanged.
//!
//! [`State::dump`] prints the state in the text format of the reference simulator
//! (`shared/tools/ansor_state_sim.py --dump`) for differential testing.
//!
//! [`Step::apply_to`]: crate::ansor::Step::apply_to
mod apply;
mod attach;
mod dump;
mod error;
mod from_dag;
mod iterator;
#[cfg(test)]
mod spec_examples;
mod state;
mod steps;
#[cfg(test)]
mod test_util;
mod validate;

pub use apply::ApplyToState;
pub use attach::{AttachMap, AttachPoint};
pub use dump::stage_inits_from_dump;
pub use error::{InitError, ReplayError, MAX_EXTENT};
pub use from_dag::stage_inits_from_dag;
pub use iterator::{clean_name, IterIdent, IterKind, Iterator};
pub use state::{
    AxisInit, ComputeAt, OpAxis, OpKind, OpOrigin, SplitExtentMismatch, SplitExtentReport, Stage, StageAttrs,
    StageInit, StageOp, State,
};
