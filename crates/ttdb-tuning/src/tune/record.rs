//! What the database keeps of an evaluation: a ttdb-native record (an Ansor line of the
//! measured workload on this host's target) plus its measurement row.
use super::refine::RefineOptions;
use crate::search::cost_model::{starting_model, CostModel};
use crate::search::policy::SearchOptions;
use ttdb_backend::evaluate::Evaluation;
use ttdb_format::ansor::Step;
use ttdb_format::host::HostFingerprint;
use ttdb_store::store::measurement::{store_measurements, NewMeasurement};
use ttdb_store::store::{Store, StoreError};

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

/// Where measurements go as they are taken (so an interrupted run keeps them).
pub trait Sink {
    /// Keeps `items`, taken by a run of kind `kind` (verify, apply, default, droplet).
    fn keep(&mut self, kind: &str, items: &[NewMeasurement]) -> Result<(), StoreError>;
    /// The search's cost model of this host class, as last kept (cold when none, or when
    /// it was written by a ttdb with other features).
    fn load_cost_model(&mut self) -> CostModel {
        CostModel::new()
    }
    /// Keeps the cost model for the next search on a like machine.
    fn keep_cost_model(&mut self, _model: &CostModel) -> Result<(), StoreError> {
        Ok(())
    }
}

/// How a run uses the cost model stored for this host class: whether it starts from it, and
/// whether it keeps what the run taught it (once, at the end of the run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostModelUse {
    pub load: bool,
    pub keep: bool,
}

impl CostModelUse {
    /// The search's: a cold start neither loads the stored model nor replaces it (a cold
    /// model would replace a warmer one), and a search without the model teaches none.
    pub fn of_search(opts: &SearchOptions) -> CostModelUse {
        CostModelUse {
            load: opts.warm_start,
            keep: opts.warm_start && opts.learned_model,
        }
    }

    /// Droplet's: only a refinement that ranks by the model uses or teaches it.
    pub fn of_refine(opts: &RefineOptions) -> CostModelUse {
        CostModelUse {
            load: opts.rank_by_model,
            keep: opts.rank_by_model,
        }
    }

    /// The model the run starts from: the stored one, or a cold one.
    pub fn start(self, sink: &mut dyn Sink) -> CostModel {
        starting_model(self.load, || sink.load_cost_model())
    }

    /// Trains `model` on what it has not been trained on yet and keeps it for the next run.
    pub fn finish(self, sink: &mut dyn Sink, model: &mut CostModel) -> Result<(), StoreError> {
        if self.keep {
            model.maybe_retrain();
            sink.keep_cost_model(model)?;
        }
        Ok(())
    }
}

/// Stores measurements in the database, one transaction per call, as this host's records.
pub struct StoreSink<'a> {
    pub store: &'a mut Store,
    pub host: HostFingerprint,
}

impl Sink for StoreSink<'_> {
    fn keep(&mut self, kind: &str, items: &[NewMeasurement]) -> Result<(), StoreError> {
        store_measurements(self.store, kind, &self.host, items).map(|_| ())
    }
    fn load_cost_model(&mut self) -> CostModel {
        stored_cost_model(self.store, &self.host)
    }
    fn keep_cost_model(&mut self, model: &CostModel) -> Result<(), StoreError> {
        if model.programs() == 0 {
            return Ok(());
        }
        self.store
            .save_cost_model(&self.host.class(), &model.encode(), model.programs() as i64)
    }
}

/// A run measured by the queue's workers (`crate::queue`): each worker stored its trials
/// with their jobs, under its own host, so this keeps none of them again; the cost model is
/// the workers' host class's.
pub struct RemoteSink<'a> {
    pub store: &'a mut Store,
    pub host_class: String,
}

impl Sink for RemoteSink<'_> {
    fn keep(&mut self, _: &str, _: &[NewMeasurement]) -> Result<(), StoreError> {
        Ok(())
    }
    fn load_cost_model(&mut self) -> CostModel {
        match self.store.cost_model(&self.host_class) {
            Ok(Some(m)) => CostModel::decode(&m.bytes).unwrap_or_default(),
            _ => CostModel::new(),
        }
    }
    fn keep_cost_model(&mut self, model: &CostModel) -> Result<(), StoreError> {
        if model.programs() == 0 {
            return Ok(());
        }
        self.store
            .save_cost_model(&self.host_class, &model.encode(), model.programs() as i64)
    }
}

/// Keeps nothing, but a search starts from the stored cost model (dry runs).
pub struct DryRun<'a> {
    pub store: &'a Store,
    pub host: HostFingerprint,
}

impl Sink for DryRun<'_> {
    fn keep(&mut self, _: &str, _: &[NewMeasurement]) -> Result<(), StoreError> {
        Ok(())
    }
    fn load_cost_model(&mut self) -> CostModel {
        stored_cost_model(self.store, &self.host)
    }
}

/// The cost model stored for `host`'s class, cold when there is none or it does not decode.
fn stored_cost_model(store: &Store, host: &HostFingerprint) -> CostModel {
    match store.cost_model(&host.class()) {
        Ok(Some(m)) => CostModel::decode(&m.bytes).unwrap_or_default(),
        _ => CostModel::new(),
    }
}

/// Keeps nothing (dry runs).
pub struct Discard;

impl Sink for Discard {
    fn keep(&mut self, _: &str, _: &[NewMeasurement]) -> Result<(), StoreError> {
        Ok(())
    }
}
