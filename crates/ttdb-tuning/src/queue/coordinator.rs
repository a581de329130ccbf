//! The coordinator's side: [`RemoteMeasuring`] is one run's connection to the queue (its
//! `tunes` row, the host class it measures on), and [`QueueMeasurer`] a [`Measurer`] that
//! enqueues a batch and waits for it.
use super::Workload;
use crate::search::interrupt;
use crate::search::measurer::{MeasureElsewhere, Measurer};
use crate::tune::apply::workload_key_of;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ttdb_algo::ir::Dag;
use ttdb_backend::evaluate::{EvalOptions, Evaluation, Reference};
use ttdb_format::ansor::{steps_to_json, Step};
use ttdb_store::store::queue::{JobState, TuneEnd, LIVE_WITHIN, RESULTS_CHANNEL};
use ttdb_store::store::{Location, OpenMode, Store, StoreError};

/// How often a waiting coordinator looks at its batch even without a notification, and
/// puts back jobs whose workers' leases expired.
const POLL: Duration = Duration::from_secs(1);
/// How long a batch waits without a live worker before the coordinator says so.
const LONELY: Duration = Duration::from_secs(10);

/// One coordinator run's use of the queue: its own connection (the run's other connection
/// stores nothing while it waits), its `tunes` row, and the host class it measures on.
#[derive(Clone)]
pub struct RemoteMeasuring {
    store: Arc<Mutex<Store>>,
    pub host_class: String,
    pub tune_id: i64,
    /// Kind of the measurements the workers store (search, droplet).
    pub kind: String,
    /// Hears what the run waits for (no live worker of the class).
    on_wait: Arc<dyn Fn(&str) + Send + Sync>,
    /// The first error talking to the queue; the run stops and reports it.
    error: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for RemoteMeasuring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteMeasuring")
            .field("host_class", &self.host_class)
            .field("tune_id", &self.tune_id)
            .finish()
    }
}

impl MeasureElsewhere for RemoteMeasuring {
    /// A measurer of `dag` whose candidates go to the queue.
    fn measurer<'a>(
        &'a self,
        dag: &'a Dag,
        reference: &'a Reference,
        eval: EvalOptions,
        interrupted: &'a (dyn Fn() -> bool + Sync),
    ) -> Box<dyn Measurer + 'a> {
        Box::new(QueueMeasurer {
            remote: self,
            dag,
            reference,
            eval,
            interrupted,
            sent: Sent::Unrun(0),
        })
    }
}

impl RemoteMeasuring {
    /// Starts a run described as `what` measuring on `host_class`'s workers through the
    /// database at `location`.
    pub fn start(
        location: &Location,
        host_class: &str,
        what: &str,
        kind: &str,
        on_wait: Arc<dyn Fn(&str) + Send + Sync>,
    ) -> Result<RemoteMeasuring, StoreError> {
        let store = Store::open_at(location, OpenMode::Write)?;
        let tune_id = store.begin_tune(host_class, what)?;
        store.listen_queue(RESULTS_CHANNEL)?;
        Ok(RemoteMeasuring {
            store: Arc::new(Mutex::new(store)),
            host_class: host_class.to_string(),
            tune_id,
            kind: kind.to_string(),
            on_wait,
            error: Arc::new(Mutex::new(None)),
        })
    }

    /// Ends the run: done, or cancelled (its unfinished jobs dropped; every stored result
    /// stays). Returns how many jobs were cancelled, or the first queue error of the run.
    pub fn finish(&self, end: TuneEnd) -> Result<usize, String> {
        let cancelled = self
            .lock()
            .end_tune(self.tune_id, end)
            .map_err(|e| e.to_string());
        match self.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(e),
            None => cancelled,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the run's first queue error and stops the run (as Ctrl-C does: what was
    /// measured is kept).
    fn fail(&self, e: String) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
        interrupt::request();
    }
}

/// Measures a batch on the workers: enqueues it, waits for every job to be done or failed,
/// and returns their evaluations in order. Interrupted (Ctrl-C), it returns the batch
/// unrun; the run's end cancels its jobs.
pub struct QueueMeasurer<'a> {
    remote: &'a RemoteMeasuring,
    dag: &'a Dag,
    reference: &'a Reference,
    eval: EvalOptions,
    interrupted: &'a (dyn Fn() -> bool + Sync),
    /// The batch `send` handed over.
    sent: Sent,
}

/// A batch handed over: queued as batch id with n jobs, or n schedules left unrun.
enum Sent {
    Queued(i64, usize),
    Unrun(usize),
}

impl QueueMeasurer<'_> {
    fn enqueue(&self, schedules: &[Vec<Step>], timeout: Duration) -> Result<i64, String> {
        let workload = Workload {
            key: workload_key_of(self.dag),
            flops: self.dag.flop_ct(),
            dag: self.dag.clone(),
            reference_seed: self.reference.seed,
            expected: self.reference.shippable_expected().map(<[_]>::to_vec),
            eval: self.eval.clone(),
            kind: self.remote.kind.clone(),
        };
        let workload = serde_json::to_string(&workload).map_err(|e| e.to_string())?;
        let steps: Vec<String> = schedules.iter().map(|s| steps_to_json(s)).collect();
        self.remote
            .lock()
            .enqueue(
                self.remote.tune_id,
                &self.remote.host_class,
                &workload,
                timeout,
                &steps,
            )
            .map_err(|e| format!("cannot enqueue jobs: {e}"))
    }

    /// Waits for batch `batch` of `n` jobs; None when interrupted.
    fn wait(&self, batch: i64, n: usize) -> Result<Option<Vec<Option<Evaluation>>>, String> {
        let t0 = Instant::now();
        let mut told = false;
        loop {
            if (self.interrupted)() {
                return Ok(None);
            }
            let store = self.remote.lock();
            store
                .reap_expired_leases()
                .map_err(|e| format!("queue: {e}"))?;
            let jobs = store.batch_jobs(batch).map_err(|e| format!("queue: {e}"))?;
            if jobs.len() == n && jobs.iter().all(|j| j.state.is_final()) {
                return Ok(Some(jobs.into_iter().map(evaluation_of).collect()));
            }
            if !told && t0.elapsed() >= LONELY {
                let live = store
                    .live_workers(&self.remote.host_class, LIVE_WITHIN)
                    .map_err(|e| format!("queue: {e}"))?;
                if live == 0 {
                    told = true;
                    (self.remote.on_wait)(&format!(
                        "waiting for a worker of host class {} (none has a heartbeat in the last {} s): start `ttdb worker --db ...` on such a machine",
                        self.remote.host_class,
                        LIVE_WITHIN.as_secs()
                    ));
                }
            }
            store
                .wait_for_queue(POLL)
                .map_err(|e| format!("queue: {e}"))?;
        }
    }
}

/// A finished job's evaluation; a job failed by the queue (its leases lost) is a failed
/// trial with the reason (Ansor's "unknown" error); a cancelled one is unrun.
fn evaluation_of(job: ttdb_store::store::queue::BatchJob) -> Option<Evaluation> {
    match job.state {
        JobState::Done => Some(
            job.result
                .as_deref()
                .and_then(|r| serde_json::from_str(r).ok())
                .unwrap_or_else(|| {
                    Evaluation::failure(8, "the worker's result could not be read".into())
                }),
        ),
        JobState::Failed => Some(Evaluation::failure(
            8,
            job.error.unwrap_or_else(|| "failed in the queue".into()),
        )),
        _ => None,
    }
}

impl Measurer for QueueMeasurer<'_> {
    fn measure(&mut self, schedules: &[Vec<Step>], timeout: Duration) -> Vec<Option<Evaluation>> {
        self.send(schedules, timeout);
        self.receive()
    }

    fn send(&mut self, schedules: &[Vec<Step>], timeout: Duration) -> bool {
        self.sent = if schedules.is_empty() || (self.interrupted)() {
            Sent::Unrun(schedules.len())
        } else {
            match self.enqueue(schedules, timeout) {
                Ok(batch) => Sent::Queued(batch, schedules.len()),
                Err(e) => {
                    self.remote.fail(e);
                    Sent::Unrun(schedules.len())
                }
            }
        };
        true
    }

    fn receive(&mut self) -> Vec<Option<Evaluation>> {
        match std::mem::replace(&mut self.sent, Sent::Unrun(0)) {
            Sent::Unrun(n) => vec![None; n],
            Sent::Queued(batch, n) => match self.wait(batch, n) {
                Ok(Some(evaluations)) => evaluations,
                Ok(None) => vec![None; n],
                Err(e) => {
                    self.remote.fail(e);
                    vec![None; n]
                }
            },
        }
    }
}
