//! What the database keeps of an evaluation: a ttdb-native record (an Ansor line of the
//! measured workload on this host's target) plus its measurement row.
use crate::ansor::Step;
use crate::evaluate::Evaluation;
use crate::store::measurement::NewMeasurement;

/// The record and measurement row of `e`: the schedule `steps` on the workload
/// `workload_key` (doing `flops` per run), with where it came from.
pub fn measurement_of(
    e: &Evaluation,
    workload_key: String,
    steps: Vec<Step>,
    flops: f64,
    origin_record_id: Option<i64>,
    provenance: String,
) -> NewMeasurement {
    let m = e.measurement.as_ref();
    NewMeasurement {
        workload_key,
        steps,
        samples: if e.verified() {
            m.map(|m| m.samples.clone()).unwrap_or_default()
        } else {
            vec![]
        },
        // Verified but not timed (verify-only runs): TVM's "unknown" code, never chosen.
        error_no: e
            .failure
            .as_ref()
            .map_or(if m.is_some() { 0 } else { 8 }, |f| f.error_no),
        error: e.failure.as_ref().map(|f| f.message.clone()),
        verified: e.verified(),
        max_rel_error: e.rel_error,
        median_s: m.map(|m| m.median),
        min_s: m.map(|m| m.min),
        max_s: m.map(|m| m.max),
        gflops: e.gflops(flops),
        compile_ms: Some(e.total_compile_time().as_secs_f64() * 1e3),
        wall_s: e.total_compile_time().as_secs_f64()
            + m.map_or(0.0, |m| m.samples.iter().sum::<f64>() * m.number as f64),
        origin_record_id,
        provenance,
    }
}
