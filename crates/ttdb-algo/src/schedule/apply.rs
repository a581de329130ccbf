//! Step dispatch: `Step::apply_to(&mut State)` and `State::apply`, the replay loop.
use super::error::{InitError, ReplayError};
use super::state::{StageInit, State};
use super::validate;
use ttdb_format::ansor::Step;
use ttdb_format::each_step;

/// A transform step that knows its effect on a [`State`] (TVM's `ApplyToState`).
/// Implemented for each step struct in `schedule/steps/`.
pub trait ApplyToState {
    /// Checks the step against `state`, then applies it. Returns the reason on failure;
    /// the state is left unchanged in that case.
    fn apply_to_state(&self, state: &mut State) -> Result<(), String>;
}

/// Can this step create nested parallel loops? Those get the whole-state check after they run.
fn may_nest_parallel(step: &Step) -> bool {
    matches!(
        step,
        Step::Annotation(_) | Step::ComputeAt(_) | Step::Reorder(_)
    )
}

impl State {
    /// Applies the next step of the record. On error the state is unchanged and the step is
    /// not recorded.
    pub fn apply(&mut self, step: &Step) -> Result<(), ReplayError> {
        // Steps validate before they mutate, but restoring a copy makes "unchanged on
        // error" hold by construction.
        let backup = self.clone();
        self.apply_or_spoil(step).inspect_err(|_| *self = backup)
    }

    /// Applies a step without the per-step backup: on error the state may be partly
    /// changed and must be discarded. For whole-record replays, which copy the state once
    /// (a copy per step made re-targeting dozens of candidates cost more than everything
    /// else in matching).
    pub fn apply_or_spoil(&mut self, step: &Step) -> Result<(), ReplayError> {
        let step_index = self.transform_steps.len();
        let mut outcome = each_step!(step, s => s.apply_to_state(self));
        if outcome.is_ok() && may_nest_parallel(step) {
            outcome = validate::check_parallel_nesting(self);
        }
        match outcome {
            Ok(()) => {
                self.transform_steps.push(step.clone());
                Ok(())
            }
            Err(reason) => Err(ReplayError {
                step_index,
                step: step.to_string(),
                reason,
            }),
        }
    }

    /// Applies the steps of a record in order; stops at the first that fails, leaving the
    /// state as after the last step that applied.
    pub fn apply_all(&mut self, steps: &[Step]) -> Result<(), ReplayError> {
        steps.iter().try_for_each(|s| self.apply(s))
    }

    /// The first SP whose recorded `extent` disagrees with the replayed extent, as an error.
    pub fn verify_split_extents(&self) -> Result<(), ReplayError> {
        match self.split_report.mismatches.first() {
            None => Ok(()),
            Some(m) => Err(ReplayError {
                step_index: m.step_index,
                step: m.step.clone(),
                reason: format!(
                    "the record says the split iterator had extent {}, replay gives {} for {}",
                    m.recorded, m.simulated, m.iter_name
                ),
            }),
        }
    }
}

/// Why a whole record could not be replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayFailure {
    /// The initial stages themselves are unusable (e.g. an extent above 2^40).
    Init(InitError),
    /// A step failed, or an SP `extent` field disagrees with the replay.
    Step(ReplayError),
}

impl std::fmt::Display for ReplayFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayFailure::Init(e) => e.fmt(f),
            ReplayFailure::Step(e) => e.fmt(f),
        }
    }
}
impl std::error::Error for ReplayFailure {}

/// Replays a whole record on its initial stages and checks every SP `extent` field: the
/// state the record's schedule describes.
pub fn replay(inits: &[StageInit], steps: &[Step]) -> Result<State, ReplayFailure> {
    let mut state = State::new(inits).map_err(ReplayFailure::Init)?;
    // The state is dropped on error: no backups needed.
    steps
        .iter()
        .try_for_each(|s| state.apply_or_spoil(s))
        .map_err(ReplayFailure::Step)?;
    state.verify_split_extents().map_err(ReplayFailure::Step)?;
    Ok(state)
}
