//! Measurement: timing runner, output verification, fp32 FMA peak, and the
//! GEMM fixture used as the codegen performance proof.

pub mod fixtures;
pub mod gemm;
pub mod peak;
pub mod runner;
pub mod verify;

pub use peak::{measure_peak, Peak};
pub use runner::{measure, MeasureOptions, Measurement};
pub use ttdb_format::host::HostFingerprint;
pub use verify::verify_against_interpreter;
