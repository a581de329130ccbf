//! ttdb tuning: matching, search (sketches, evolution, cost model, Droplet), and the tune pipelines.
//!
//! One stage of the layer order in `docs/architecture.md`.

pub mod matcher;
pub mod search;
pub mod tune;
