//! Ansor (TVM auto-scheduler) measure records: types, parser and writer for every
//! generation of the format (v0.2 .. v0.6). Spec: `shared/spec/ansor-format.md` §1-2.
//!
//! * [`key`]: workload keys (hash-only, flat, nested, registered-function);
//! * [`step`]: the 14 transform-step records, one struct each;
//! * [`record`]: a whole line (task, steps, result) with parser and TVM-layout writer;
//! * [`log`]: line classification for whole files (comments, blanks, bad lines).
pub mod json;
pub mod key;
pub mod log;
pub mod record;
pub mod scan;
pub mod step;

pub use key::{KeyArg, KeyForm, WorkloadKey};
pub use log::{parse_line, LogLine};
pub use record::{ErrorNo, MeasureResult, Record, RecordError, Task, MAX_COST_S};
pub use step::{steps_from_json, steps_to_json, Annotation, Step, StepError};
