//! ttdb storage: the SQLite schedule database and schedule bundles.
//!
//! One stage of the layer order in `docs/architecture.md`.

pub mod bundle;
pub mod store;
