//! Why a record's steps do not replay on the TE image. Lowering turns these into its own
//! `LowerError`s, variant for variant.
use std::fmt;
use ttdb_format::ansor::Step;

#[derive(Clone, Debug, PartialEq)]
pub enum TeError {
    /// The steps do not describe the schedule the state replay made of them (or ids out of
    /// range for the TE image).
    Mismatch(String),
    /// A schedule TVM itself would refuse (an attach to a loop that no longer exists).
    InvalidSchedule(String),
    /// A feature ttdb does not lower (`debug_skip_region`, other pragmas, rfactor of a
    /// non-constant reduce axis).
    Unsupported(String),
    /// Extents beyond what the arithmetic holds.
    TooLarge(String),
    /// A ttdb bug (a broken invariant of the image).
    Internal(String),
}

impl TeError {
    /// The error with the position and text of the step that caused it.
    pub fn in_step(self, index: usize, step: &Step) -> TeError {
        let wrap = |m: String| format!("step {index} {step}: {m}");
        match self {
            TeError::Mismatch(m) => TeError::Mismatch(wrap(m)),
            TeError::InvalidSchedule(m) => TeError::InvalidSchedule(wrap(m)),
            TeError::Unsupported(m) => TeError::Unsupported(wrap(m)),
            TeError::TooLarge(m) => TeError::TooLarge(wrap(m)),
            TeError::Internal(m) => TeError::Internal(wrap(m)),
        }
    }
}

impl fmt::Display for TeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TeError::Mismatch(m) => write!(f, "the state does not match the schedule: {m}"),
            TeError::InvalidSchedule(m) => write!(f, "invalid schedule: {m}"),
            TeError::Unsupported(m) => write!(f, "not supported: {m}"),
            TeError::TooLarge(m) => write!(f, "too large: {m}"),
            TeError::Internal(m) => write!(f, "internal error in the TE image: {m}"),
        }
    }
}
impl std::error::Error for TeError {}
