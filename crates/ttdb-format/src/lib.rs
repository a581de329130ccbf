//! ttdb leaves: the Ansor record format, workload signatures, host fingerprints, atomic output files.
//!
//! One stage of the layer order in `docs/architecture.md`.

pub mod ansor;
pub mod atomic_file;
pub mod host;
pub mod npy;
pub mod signature;

/// ttdb's own version, recorded in provenance and host fingerprints.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
