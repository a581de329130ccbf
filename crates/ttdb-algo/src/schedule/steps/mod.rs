//! One `ApplyToState` impl per transform step (`transform_step.cc::*::ApplyToState`),
//! grouped by concern. Each validates every id and number before it changes the state.
mod annotate;
mod cache;
mod compute_location;
mod fuse;
mod reorder;
mod rfactor;
mod split;

pub use split::split_lengths;
