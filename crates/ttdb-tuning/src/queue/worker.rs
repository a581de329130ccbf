//! `ttdb worker`: claims jobs of this host's class, builds, verifies and times each claim
//! as one batch with ttdb's own measurer (crash-isolated in a child process by default),
//! and hands the results in. A heartbeat thread, on a connection of its own, extends the
//! leases while a batch runs, so a long batch keeps its jobs and a dead worker's jobs
//! return to the queue when their lease expires. Asked to stop, it finishes the batch in
//! hand, returns nothing unmeasured to anyone else, and exits.
use super::Workload;
use crate::search::measurer::{KernelMeasurer, Measurer};
use crate::tune::record::measurement_of;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ttdb_backend::evaluate::{Evaluation, Isolation, Reference};
use ttdb_format::ansor::steps_from_json;
use ttdb_format::host::HostFingerprint;
use ttdb_store::store::queue::{Claim, Finished, JOBS_CHANNEL};
use ttdb_store::store::{Location, OpenMode, Store, StoreError};

#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// Jobs claimed and measured at once (built in parallel, timed one at a time).
    pub batch: usize,
    /// How long a claim is held without a heartbeat; the heartbeat comes every third of it.
    pub lease: Duration,
    /// How often an idle worker looks at the queue without a notification.
    pub poll: Duration,
    /// Where candidates run (a child process, so that a faulting kernel costs one trial).
    pub isolation: Isolation,
    /// Exit after this long with nothing to do (tests, batch jobs); None: run until asked
    /// to stop.
    pub exit_when_idle: Option<Duration>,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            batch: 8,
            lease: Duration::from_secs(60),
            poll: Duration::from_secs(2),
            isolation: Isolation::InProcess,
            exit_when_idle: None,
        }
    }
}

/// References a worker keeps: more than the tunable kernels of the models tuned here
/// (ResNet-50 has 26 in NCHWc), so a model's tune builds each once per worker.
const KEPT_REFERENCES: usize = 64;

/// What a worker tells whoever runs it.
pub trait WorkerEvents {
    fn registered(&mut self, _worker: i64, _class: &str) {}
    fn claimed(&mut self, _claim: &Claim, _what: &str) {}
    /// The reference of a workload was built (it is kept for the next claims of it).
    fn reference_built(&mut self, _seconds: f64) {}
    /// A claim was measured: `accepted` of its jobs counted (the others' leases were lost),
    /// in `seconds`.
    fn finished(&mut self, _claim: &Claim, _accepted: usize, _verified: usize, _seconds: f64) {}
}

/// What a worker did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct WorkerSummary {
    pub worker_id: i64,
    pub claims: usize,
    pub jobs: usize,
    pub accepted: usize,
    pub seconds: f64,
}

/// References of the last workloads (a tune's kernels take turns, so the same ones come
/// back, and building one runs the workload in the interpreter; each holds the workload's
/// inputs, a few MB for a CNN's layer).
struct References {
    /// (the batch's workload text, its reference), oldest first.
    kept: VecDeque<(String, Arc<Reference>)>,
    /// Seconds the last `get` spent building one, if it did.
    built: Option<f64>,
}

impl References {
    /// The reference of `w`, whose text as the batch carried it is `text` (it holds the
    /// DAG and the seed: equal texts, equal references).
    fn get(&mut self, text: &str, w: &Workload) -> Result<Arc<Reference>, String> {
        self.built = None;
        if let Some((_, r)) = self.kept.iter().find(|(k, _)| k == text) {
            return Ok(r.clone());
        }
        let r = Arc::new(match &w.expected {
            Some(values) => Reference::with_expected(&w.dag, w.reference_seed, values.clone())?,
            None => Reference::new(&w.dag, w.reference_seed)?,
        });
        self.built = Some(r.eval_time.as_secs_f64());
        if self.kept.len() >= KEPT_REFERENCES {
            self.kept.pop_front();
        }
        self.kept.push_back((text.to_string(), r.clone()));
        Ok(r)
    }
}

/// Runs a worker of `host` named `name` on the database at `location` until `stop()` says
/// so (checked between claims) or it has been idle for `opts.exit_when_idle`.
pub fn run_worker(
    location: &Location,
    host: &HostFingerprint,
    name: &str,
    opts: &WorkerOptions,
    stop: &dyn Fn() -> bool,
    events: &mut dyn WorkerEvents,
) -> Result<WorkerSummary, StoreError> {
    let t0 = Instant::now();
    let store = Store::open_at(location, OpenMode::Write)?;
    let class = host.class();
    let worker = store.register_worker(name, host, opts.batch.max(1))?;
    events.registered(worker, &class);
    store.listen_queue(JOBS_CHANNEL)?;
    let heartbeat = Heartbeat::start(location, worker, opts.lease)?;
    let mut summary = WorkerSummary {
        worker_id: worker,
        ..WorkerSummary::default()
    };
    let mut references = References {
        kept: VecDeque::new(),
        built: None,
    };
    let mut idle_since = Instant::now();
    let outcome = loop {
        if stop() {
            break Ok(());
        }
        if let Err(e) = store.reap_expired_leases() {
            break Err(e);
        }
        let claim = match store.claim(worker, &class, opts.batch.max(1), opts.lease) {
            Ok(c) => c,
            Err(e) => break Err(e),
        };
        let Some(claim) = claim else {
            if opts
                .exit_when_idle
                .is_some_and(|d| idle_since.elapsed() >= d)
            {
                break Ok(());
            }
            heartbeat.doing(None);
            if let Err(e) = store.wait_for_queue(opts.poll) {
                break Err(e);
            }
            continue;
        };
        let started = Instant::now();
        let measured = measure_claim(&claim, opts, name, &mut references, &heartbeat, events);
        let run_s = started.elapsed().as_secs_f64() / claim.jobs.len().max(1) as f64;
        let handed_in = match &measured {
            Ok((finished, _, kind)) => store.complete_jobs(worker, host, kind, run_s, finished),
            Err(why) => {
                let ids: Vec<i64> = claim.jobs.iter().map(|j| j.0).collect();
                store.fail_jobs(worker, &ids, why)
            }
        };
        let accepted = match handed_in {
            Ok(n) => n,
            Err(e) => break Err(e),
        };
        let verified = measured.as_ref().map_or(0, |m| m.1);
        events.finished(&claim, accepted, verified, started.elapsed().as_secs_f64());
        summary.claims += 1;
        summary.jobs += claim.jobs.len();
        summary.accepted += accepted;
        idle_since = Instant::now();
    };
    heartbeat.stop();
    // Jobs still held go back at once; a worker that cannot say so leaves them to expire.
    let stopped = store.worker_stopped(worker);
    summary.seconds = t0.elapsed().as_secs_f64();
    outcome.and(stopped).map(|()| summary)
}

/// Measures a claim: its jobs' results (a failure for a schedule that cannot be read), how
/// many verified, and the kind of run to file them under; Err when the batch's workload
/// cannot be read (its jobs fail with the reason).
fn measure_claim(
    claim: &Claim,
    opts: &WorkerOptions,
    name: &str,
    references: &mut References,
    heartbeat: &Heartbeat,
    events: &mut dyn WorkerEvents,
) -> Result<(Vec<Finished>, usize, String), String> {
    let w: Workload = serde_json::from_str(&claim.workload)
        .map_err(|e| format!("the job's workload cannot be read: {e}"))?;
    let what = format!(
        "tune {}: {} job(s) of {} ({} stages)",
        claim.tune_id,
        claim.jobs.len(),
        w.key.trim_start_matches("[\"").get(..12).unwrap_or(&w.key),
        w.dag.stages.len()
    );
    events.claimed(claim, &what);
    heartbeat.doing(Some(what));
    let schedules: Vec<Result<Vec<_>, String>> =
        claim.jobs.iter().map(|(_, s)| steps_from_json(s)).collect();
    let runnable: Vec<Vec<_>> = schedules.iter().filter_map(|s| s.clone().ok()).collect();
    let reference = references.get(&claim.workload, &w);
    if let Some(s) = references.built {
        events.reference_built(s);
    }
    let evaluations: Vec<Evaluation> = match reference {
        Err(e) => vec![Evaluation::failure(1, format!("no reference: {e}")); runnable.len()],
        Ok(reference) => {
            let mut eval = w.eval.clone();
            eval.isolation = opts.isolation.clone();
            let never = || false;
            let mut m = KernelMeasurer::new(&w.dag, &reference, eval, &never);
            m.measure(&runnable, claim.timeout)
                .into_iter()
                .map(|e| e.unwrap_or_else(|| Evaluation::failure(8, "not run".into())))
                .collect()
        }
    };
    let mut evaluations = evaluations.into_iter();
    let mut verified = 0;
    let finished = claim
        .jobs
        .iter()
        .zip(schedules)
        .map(|((id, _), steps)| {
            let (e, steps) = match steps {
                Ok(steps) => (evaluations.next().expect("one per schedule"), steps),
                Err(why) => (
                    Evaluation::failure(1, format!("unreadable schedule: {why}")),
                    vec![],
                ),
            };
            verified += e.verified() as usize;
            let measurement = measurement_of(
                &e,
                w.key.clone(),
                steps,
                w.flops,
                None,
                format!("job {id} of tune {} on worker {name}", claim.tune_id),
            );
            Finished {
                job_id: *id,
                result: serde_json::to_string(&e).unwrap_or_default(),
                measurement,
            }
        })
        .collect();
    Ok((finished, verified, w.kind))
}

/// The heartbeat thread: every third of the lease, the worker's heartbeat and its leases
/// extended, on a connection of its own (the main one is busy while a batch runs).
struct Heartbeat {
    stop: Arc<AtomicBool>,
    current: Arc<Mutex<Option<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    fn start(location: &Location, worker: i64, lease: Duration) -> Result<Heartbeat, StoreError> {
        let store = Store::open_at(location, OpenMode::Write)?;
        let stop = Arc::new(AtomicBool::new(false));
        let current = Arc::new(Mutex::new(None::<String>));
        let (s, c) = (stop.clone(), current.clone());
        let every = (lease / 3).max(Duration::from_millis(100));
        let thread = std::thread::spawn(move || {
            let mut last = Instant::now() - every;
            while !s.load(Ordering::SeqCst) {
                if last.elapsed() >= every {
                    let doing = c.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    // A failed heartbeat is tried again next time; leases outlast a few.
                    let _ = store.worker_heartbeat(worker, lease, doing.as_deref());
                    last = Instant::now();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Ok(Heartbeat {
            stop,
            current,
            thread: Some(thread),
        })
    }

    fn doing(&self, what: Option<String>) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = what;
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
