//! What each transform step does, one file per concern (`docs/design/steps.md`), three impls
//! side by side: `ApplyToState` (`transform_step.cc::*::ApplyToState`), which validates
//! every id and number before it changes the state; `ApplyToSchedule`, the step on the TE
//! image; `StepIds`, which of its fields are stage, loop and step ids. The record form
//! (fields, parse, print) is the format layer's.
mod annotate;
mod cache;
mod compute_location;
mod fuse;
mod reorder;
mod rfactor;
mod split;

pub use split::split_lengths;
