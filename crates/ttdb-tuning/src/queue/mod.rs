//! Distributed measurement through the database's work queue (`ttdb_store::store::queue`;
//! docs/design/work-queue.md). A coordinator (`ttdb tune --workers`) measures through a
//! [`QueueMeasurer`]: each batch of candidates becomes jobs for a host class, and it waits
//! for their results (woken by LISTEN/NOTIFY, and polling, since a notification sent while
//! nobody listened is lost). `ttdb worker` processes ([`worker`]) claim, build, verify and
//! time them with ttdb's own measurer, and store each result with its measurement; the
//! coordinator stores nothing of them again ([`crate::tune::record::RemoteSink`]).
pub mod coordinator;
pub mod worker;

use serde::{Deserialize, Serialize};
use ttdb_algo::ir::Dag;
use ttdb_backend::evaluate::{EvalOptions, ExpectedValues};

pub use coordinator::{QueueMeasurer, RemoteMeasuring};

/// What the jobs of one batch share, as the coordinator writes it into the queue.
#[derive(Serialize, Deserialize)]
pub struct Workload {
    /// TVM's workload key, for the records the worker stores.
    pub key: String,
    pub flops: f64,
    pub dag: Dag,
    /// The reference's seed: the worker draws the same inputs from it.
    pub reference_seed: u64,
    /// The reference's values at its checked points, as the coordinator computed them
    /// (`Reference::with_expected`), so that no worker evaluates the DAG again; absent
    /// (a value JSON cannot carry), the worker computes them (`Reference::new`).
    #[serde(default)]
    pub expected: Option<Vec<ExpectedValues>>,
    /// How to build and time (the worker keeps its own isolation).
    pub eval: EvalOptions,
    /// The kind of run the measurements are filed under (search, droplet).
    pub kind: String,
}

/// The vector lanes a host class (`llvm cpu/Nlanes/Mcores`) has.
pub fn class_lanes(class: &str) -> Option<u32> {
    class
        .split('/')
        .find_map(|p| p.strip_suffix("lanes"))
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn lanes_of_a_class() {
        assert_eq!(super::class_lanes("znver3/8lanes/2cores"), Some(8));
        assert_eq!(
            super::class_lanes("skylake-avx512/16lanes/1cores"),
            Some(16)
        );
        assert_eq!(super::class_lanes("nonsense"), None);
    }
}
