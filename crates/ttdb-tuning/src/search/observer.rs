//! What the caller sees of a running search. Droplet (`super::droplet`, through
//! `super::restarts`) and the search from scratch (`super::policy`) report through one
//! [`Observer`], generic over their trial type, so one caller-side type stores the trials of
//! both (`crate::tune::trials`).
use ttdb_backend::evaluate::Evaluation;
use ttdb_format::ansor::Step;

/// A measured candidate, as a search reports it.
pub trait MeasuredTrial {
    fn steps(&self) -> &[Step];
    fn evaluation(&self) -> &Evaluation;
    /// How the search came to it, for the provenance of the record it becomes (Droplet: the
    /// knob change; the search: its round and origin).
    fn how(&self) -> String;
}

/// What the caller sees of a running search.
pub trait Observer<T> {
    /// After each batch (Droplet) or round (the search), its trials: to store them as they
    /// come, so an interrupted run loses nothing.
    fn measured(&mut self, _trials: &[T]) {}
    /// Trials so far and the best seconds so far (Droplet: the incumbent's mean; the search:
    /// the best median, NaN before the first verified trial).
    fn progress(&mut self, _trials: usize, _best_seconds: f64) {}
    /// Stop at the next opportunity, keeping what was measured.
    fn interrupted(&self) -> bool {
        false
    }
}

/// An observer that sees nothing.
pub struct Quiet;
impl<T> Observer<T> for Quiet {}
