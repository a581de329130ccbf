//! The work queue of distributed measurement (docs/design/work-queue.md): a coordinator
//! enqueues build-and-measure jobs for a host class, workers of that class claim them under
//! a lease (PostgreSQL's `FOR UPDATE SKIP LOCKED`: claimers never wait on each other), a
//! heartbeat extends the lease, and a worker writes each job's result and its measurement
//! in one transaction that first checks it still holds the lease, so a result is counted
//! once. A lease that expires (its worker died) puts the job back, until it has been lost
//! [`MAX_ATTEMPTS`] times; then it is a failed trial with the reason. The queue lives in the
//! database and nowhere else: a coordinator, a worker or the server itself can restart and
//! nothing is lost. SQLite serves one machine's processes the same way (its writers take
//! turns, and its readers poll instead of listening).
use super::db::{params, Db, Dialect};
use super::measurement::{host_id, store_measurements_in, NewMeasurement};
use super::{Result, Store, StoreError};
use serde::Serialize;
use std::time::Duration;
use ttdb_format::host::HostFingerprint;

/// Notified (payload: the host class) when jobs are enqueued: idle workers wake.
pub const JOBS_CHANNEL: &str = "ttdb_jobs";
/// Notified (payload: the tune id) when jobs are done or failed: coordinators wake.
pub const RESULTS_CHANNEL: &str = "ttdb_results";
/// A worker whose last heartbeat is older than this is not counted as live.
pub const LIVE_WITHIN: Duration = Duration::from_secs(30);
/// Leases a job may lose (its worker died or stalled) before it is recorded as failed.
pub const MAX_ATTEMPTS: i64 = 3;

/// A job's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Pending,
    Leased,
    Done,
    Failed,
    Cancelled,
}

impl JobState {
    fn parse(s: &str) -> Result<JobState> {
        Ok(match s {
            "pending" => JobState::Pending,
            "leased" => JobState::Leased,
            "done" => JobState::Done,
            "failed" => JobState::Failed,
            "cancelled" => JobState::Cancelled,
            _ => return Err(StoreError::Other(format!("unknown job state {s:?}"))),
        })
    }
    /// Done, failed or cancelled: nothing more happens to it.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Done | JobState::Failed | JobState::Cancelled
        )
    }
}

/// Jobs a worker claimed: some of one batch, which it measures together.
#[derive(Clone, Debug)]
pub struct Claim {
    pub batch_id: i64,
    pub tune_id: i64,
    /// The batch's workload, as the coordinator wrote it (JSON).
    pub workload: String,
    pub timeout: Duration,
    /// (job id, the schedule as JSON), in the batch's order.
    pub jobs: Vec<(i64, String)>,
}

/// A job of a batch as the coordinator sees it.
#[derive(Clone, Debug)]
pub struct BatchJob {
    pub position: usize,
    pub state: JobState,
    /// The evaluation (JSON) of a done job.
    pub result: Option<String>,
    /// Why a failed job failed.
    pub error: Option<String>,
}

/// A measured job, as a worker hands it in.
pub struct Finished {
    pub job_id: i64,
    /// The evaluation, JSON (the coordinator reads it back).
    pub result: String,
    /// Its record and measurement row, stored under the worker's host.
    pub measurement: NewMeasurement,
}

/// A worker, as `ttdb workers` lists it.
#[derive(Clone, Debug, Serialize)]
pub struct WorkerRow {
    pub id: i64,
    pub name: String,
    pub host_class: String,
    pub cpu_model: String,
    pub batch: i64,
    /// Seconds since its last heartbeat (on the database's clock).
    pub heartbeat_age_s: f64,
    /// Exited cleanly.
    pub stopped: bool,
    pub jobs_done: i64,
    pub jobs_failed: i64,
    pub current: Option<String>,
}

/// One coordinator run's jobs by state, as `ttdb queue` lists them.
#[derive(Clone, Debug, Serialize)]
pub struct TuneRow {
    pub id: i64,
    pub host_class: String,
    pub what: String,
    pub state: String,
    pub age_s: f64,
    pub pending: i64,
    pub leased: i64,
    pub done: i64,
    pub failed: i64,
    pub cancelled: i64,
}

/// How a coordinator run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TuneEnd {
    Done,
    /// Interrupted: its unfinished jobs are cancelled; what was measured stays.
    Cancelled,
}

impl Store {
    /// Registers a worker of `host` claiming up to `batch` jobs at once; returns its id.
    pub fn register_worker(&self, name: &str, host: &HostFingerprint, batch: usize) -> Result<i64> {
        self.db.transaction(|tx| {
            let host_row = host_id(tx, host)?;
            let now = tx.now_epoch()?;
            tx.query_one(
                "INSERT INTO workers (name, host_id, host_class, batch, started_at, heartbeat_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5) RETURNING id",
                params![name, host_row, host.class(), batch, now],
                |r| r.get(0),
            )
        })
    }

    /// The worker is alive: its heartbeat, what it does now, and a lease of `lease` from now
    /// on each job it holds.
    pub fn worker_heartbeat(
        &self,
        worker: i64,
        lease: Duration,
        current: Option<&str>,
    ) -> Result<()> {
        self.db.transaction(|tx| {
            let now = tx.now_epoch()?;
            tx.execute(
                "UPDATE jobs SET lease_until = ?2 WHERE worker_id = ?1 AND state = 'leased'",
                params![worker, now + lease.as_secs_f64()],
            )?;
            tx.execute(
                "UPDATE workers SET heartbeat_at = ?2, current = ?3 WHERE id = ?1",
                params![worker, now, current],
            )?;
            Ok(())
        })
    }

    /// The worker exits cleanly; jobs it still holds go back to the queue at once (no
    /// attempt counted: nothing went wrong with them).
    pub fn worker_stopped(&self, worker: i64) -> Result<()> {
        self.db.transaction(|tx| {
            let now = tx.now_epoch()?;
            tx.execute(
                "UPDATE jobs SET state = 'pending', worker_id = NULL, lease_until = NULL, attempts = attempts - 1
                 WHERE worker_id = ?1 AND state = 'leased'",
                params![worker],
            )?;
            tx.execute(
                "UPDATE workers SET stopped_at = ?2, current = NULL WHERE id = ?1",
                params![worker, now],
            )?;
            tx.notify(JOBS_CHANNEL, "")
        })
    }

    /// A coordinator run measuring on `host_class`'s workers; returns its id.
    pub fn begin_tune(&self, host_class: &str, what: &str) -> Result<i64> {
        self.db.transaction(|tx| {
            let now = tx.now_epoch()?;
            tx.query_one(
                "INSERT INTO tunes (host_class, what, state, created_at) VALUES (?1, ?2, 'running', ?3) RETURNING id",
                params![host_class, what, now],
                |r| r.get(0),
            )
        })
    }

    /// Ends a coordinator run. Cancelling drops its jobs not yet done (a worker measuring
    /// one finds its lease gone and discards the result); returns how many were cancelled.
    pub fn end_tune(&self, tune: i64, end: TuneEnd) -> Result<usize> {
        self.db.transaction(|tx| {
            let now = tx.now_epoch()?;
            let cancelled = tx.execute(
                "UPDATE jobs SET state = 'cancelled', finished_at = ?2, lease_until = NULL
                 WHERE tune_id = ?1 AND state IN ('pending', 'leased')",
                params![tune, now],
            )?;
            let state = match end {
                TuneEnd::Done => "done",
                TuneEnd::Cancelled => "cancelled",
            };
            tx.execute(
                "UPDATE tunes SET state = ?2, ended_at = ?3 WHERE id = ?1",
                params![tune, state, now],
            )?;
            Ok(cancelled)
        })
    }

    /// Enqueues one batch: `schedules` (JSON each) on `workload` (JSON), for `host_class`'s
    /// workers, each run timed out after `timeout`. Returns the batch id.
    pub fn enqueue(
        &self,
        tune: i64,
        host_class: &str,
        workload: &str,
        timeout: Duration,
        schedules: &[String],
    ) -> Result<i64> {
        self.db.transaction(|tx| {
            let now = tx.now_epoch()?;
            let batch: i64 = tx.query_one(
                "INSERT INTO job_batches (tune_id, workload, timeout_s) VALUES (?1, ?2, ?3) RETURNING id",
                params![tune, workload, timeout.as_secs_f64()],
                |r| r.get(0),
            )?;
            for (i, steps) in schedules.iter().enumerate() {
                tx.execute(
                    "INSERT INTO jobs (batch_id, tune_id, host_class, position, steps, state, enqueued_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, 'pending', ?6)",
                    params![batch, tune, host_class, i, steps, now],
                )?;
            }
            tx.notify(JOBS_CHANNEL, host_class)?;
            Ok(batch)
        })
    }

    /// Claims pending jobs of one batch for `host_class` (the oldest batch with any), leased
    /// for `lease`; None when there are none. It takes its share: the batch's jobs divided
    /// among the live workers of the class (itself included), at most `max`, so
    /// that two workers split a batch of ten five and five rather than eight and two. Busy
    /// workers count too: a worker that claims while another measures leaves that one's
    /// share pending, for whichever is free first (with the coordinator queuing the next
    /// round while one is measured, an idle worker that took all would leave the other
    /// waiting for the round to end).
    /// Jobs another worker is claiming at this moment are skipped, not waited for.
    pub fn claim(
        &self,
        worker: i64,
        host_class: &str,
        max: usize,
        lease: Duration,
    ) -> Result<Option<Claim>> {
        let lock = match self.db.dialect() {
            Dialect::Postgres => " FOR UPDATE SKIP LOCKED",
            // SQLite: the transaction holds the only write lock.
            Dialect::Sqlite => "",
        };
        let claim_sql = format!(
            "UPDATE jobs SET state = 'leased', worker_id = ?1, lease_until = ?2, started_at = ?3, attempts = attempts + 1
             WHERE id IN (SELECT id FROM jobs WHERE state = 'pending' AND batch_id = ?4
                          ORDER BY id LIMIT ?5{lock})
             RETURNING id, batch_id, position, steps"
        );
        self.db.transaction(|tx| {
            let now = tx.now_epoch()?;
            let oldest: Option<(i64, i64)> = tx.query_opt(
                "SELECT batch_id, (SELECT COUNT(*) FROM jobs p WHERE p.batch_id = j.batch_id)
                 FROM jobs j WHERE j.state = 'pending' AND j.host_class = ?1 ORDER BY j.id LIMIT 1",
                params![host_class],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let Some((batch_id, size)) = oldest else {
                return Ok(None);
            };
            let live: i64 = tx.query_one(
                "SELECT COUNT(*) FROM workers w WHERE w.host_class = ?1 AND w.stopped_at IS NULL
                   AND (w.heartbeat_at >= ?2 OR w.id = ?3)",
                params![host_class, now - LIVE_WITHIN.as_secs_f64(), worker],
                |r| r.get(0),
            )?;
            let share = (size as usize)
                .div_ceil(live.max(1) as usize)
                .clamp(1, max.max(1));
            let mut jobs: Vec<(i64, i64, i64, String)> = tx.query_map(
                &claim_sql,
                params![worker, now + lease.as_secs_f64(), now, batch_id, share],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )?;
            if jobs.is_empty() {
                // Another worker took them meanwhile; the caller looks again.
                return Ok(None);
            }
            jobs.sort_by_key(|j| j.2);
            let (tune_id, workload, timeout_s): (i64, String, f64) = tx.query_one(
                "SELECT tune_id, workload, timeout_s FROM job_batches WHERE id = ?1",
                params![batch_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            tx.execute(
                "UPDATE workers SET heartbeat_at = ?2 WHERE id = ?1",
                params![worker, now],
            )?;
            Ok(Some(Claim {
                batch_id,
                tune_id,
                workload,
                timeout: Duration::from_secs_f64(timeout_s.max(0.0)),
                jobs: jobs.into_iter().map(|(id, _, _, s)| (id, s)).collect(),
            }))
        })
    }

    /// Hands in measured jobs of `worker` (on `host`), each taking `run_s` of the batch's
    /// time: in one transaction, every job still leased by this worker becomes done with
    /// its result, and its record and measurement are stored (kind `kind`); a job whose
    /// lease was lost (expired and taken by another worker, or its tune cancelled) is
    /// skipped, so no result is counted twice. Returns how many were accepted.
    pub fn complete_jobs(
        &self,
        worker: i64,
        host: &HostFingerprint,
        kind: &str,
        run_s: f64,
        finished: &[Finished],
    ) -> Result<usize> {
        self.db.transaction(|tx| {
            let now = tx.now_epoch()?;
            let mut accepted_ids = Vec::new();
            let mut accepted = Vec::new();
            for f in finished {
                let n = tx.execute(
                    "UPDATE jobs SET state = 'done', result = ?3, finished_at = ?4, run_s = ?5, lease_until = NULL
                     WHERE id = ?1 AND worker_id = ?2 AND state = 'leased'",
                    params![f.job_id, worker, f.result, now, run_s],
                )?;
                if n == 1 {
                    accepted_ids.push(f.job_id);
                    accepted.push(f.measurement.clone());
                }
            }
            store_measurements_in(tx, kind, host, &accepted, &accepted_ids)?;
            tx.execute(
                "UPDATE workers SET jobs_done = jobs_done + ?2, heartbeat_at = ?3 WHERE id = ?1",
                params![worker, accepted.len(), now],
            )?;
            notify_results(tx, worker, now)?;
            Ok(accepted.len())
        })
    }

    /// Fails jobs of `worker` that cannot be measured at all (their workload cannot be
    /// read), with the reason; returns how many it still held.
    pub fn fail_jobs(&self, worker: i64, jobs: &[i64], reason: &str) -> Result<usize> {
        self.db.transaction(|tx| {
            let now = tx.now_epoch()?;
            let mut n = 0;
            for id in jobs {
                n += tx.execute(
                    "UPDATE jobs SET state = 'failed', error = ?3, finished_at = ?4, lease_until = NULL
                     WHERE id = ?1 AND worker_id = ?2 AND state = 'leased'",
                    params![id, worker, reason, now],
                )?;
            }
            tx.execute(
                "UPDATE workers SET jobs_failed = jobs_failed + ?2 WHERE id = ?1",
                params![worker, n],
            )?;
            notify_results(tx, worker, now)?;
            Ok(n)
        })
    }

    /// Puts jobs whose lease expired back in the queue, or records them as failed once they
    /// have lost [`MAX_ATTEMPTS`] leases. Anyone may call it (workers before claiming,
    /// coordinators while they wait). Returns (requeued, failed).
    pub fn reap_expired_leases(&self) -> Result<(usize, usize)> {
        self.db.transaction(|tx| {
            let now = tx.now_epoch()?;
            let failed_ids: Vec<(i64, i64, Option<i64>)> = tx.query_map(
                "SELECT id, tune_id, worker_id FROM jobs WHERE state = 'leased' AND lease_until < ?1 AND attempts >= ?2",
                params![now, MAX_ATTEMPTS],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            for (id, _, worker) in &failed_ids {
                tx.execute(
                    "UPDATE jobs SET state = 'failed', finished_at = ?2, lease_until = NULL,
                       error = ?3 WHERE id = ?1",
                    params![
                        id,
                        now,
                        format!(
                            "its worker's lease expired {MAX_ATTEMPTS} times (the last worker: {}): each worker that took it died or stalled",
                            worker.map_or("unknown".into(), |w| format!("#{w}"))
                        )
                    ],
                )?;
                if let Some(w) = worker {
                    tx.execute(
                        "UPDATE workers SET jobs_failed = jobs_failed + 1 WHERE id = ?1",
                        params![w],
                    )?;
                }
            }
            let requeued = tx.execute(
                "UPDATE jobs SET state = 'pending', worker_id = NULL, lease_until = NULL
                 WHERE state = 'leased' AND lease_until < ?1",
                params![now],
            )?;
            if requeued > 0 {
                tx.notify(JOBS_CHANNEL, "")?;
            }
            let mut tunes: Vec<i64> = failed_ids.iter().map(|f| f.1).collect();
            tunes.dedup();
            for t in tunes {
                tx.notify(RESULTS_CHANNEL, &t.to_string())?;
            }
            Ok((requeued, failed_ids.len()))
        })
    }

    /// The jobs of batch `batch`, in order.
    pub fn batch_jobs(&self, batch: i64) -> Result<Vec<BatchJob>> {
        self.db.retrying(|db| {
            db.query_map(
                "SELECT position, state, result, error FROM jobs WHERE batch_id = ?1 ORDER BY position",
                params![batch],
                |r| {
                    Ok(BatchJob {
                        position: r.get::<i64>(0)? as usize,
                        state: JobState::parse(&r.get::<String>(1)?)?,
                        result: r.get(2)?,
                        error: r.get(3)?,
                    })
                },
            )
        })
    }

    /// Live workers of `host_class`: a heartbeat within `within`, not stopped.
    pub fn live_workers(&self, host_class: &str, within: Duration) -> Result<usize> {
        self.db.retrying(|db| {
            let now = db.now_epoch()?;
            db.query_one(
                "SELECT COUNT(*) FROM workers WHERE host_class = ?1 AND stopped_at IS NULL AND heartbeat_at >= ?2",
                params![host_class, now - within.as_secs_f64()],
                |r| r.get::<i64>(0),
            )
            .map(|n| n as usize)
        })
    }

    /// Every worker, newest first.
    pub fn workers(&self) -> Result<Vec<WorkerRow>> {
        let now = self.db.now_epoch()?;
        self.db.query_map(
            "SELECT w.id, w.name, w.host_class, h.cpu_model, w.batch, w.heartbeat_at, w.stopped_at IS NOT NULL,
                    w.jobs_done, w.jobs_failed, w.current
             FROM workers w JOIN hosts h ON h.id = w.host_id ORDER BY w.id DESC",
            params![],
            |r| {
                Ok(WorkerRow {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    host_class: r.get(2)?,
                    cpu_model: r.get(3)?,
                    batch: r.get(4)?,
                    heartbeat_age_s: (now - r.get::<f64>(5)?).max(0.0),
                    stopped: r.get(6)?,
                    jobs_done: r.get(7)?,
                    jobs_failed: r.get(8)?,
                    current: r.get(9)?,
                })
            },
        )
    }

    /// Every coordinator run with its jobs by state, newest first.
    pub fn queue(&self) -> Result<Vec<TuneRow>> {
        let now = self.db.now_epoch()?;
        self.db.query_map(
            "SELECT t.id, t.host_class, t.what, t.state, t.created_at,
                    SUM(CASE WHEN j.state = 'pending' THEN 1 ELSE 0 END),
                    SUM(CASE WHEN j.state = 'leased' THEN 1 ELSE 0 END),
                    SUM(CASE WHEN j.state = 'done' THEN 1 ELSE 0 END),
                    SUM(CASE WHEN j.state = 'failed' THEN 1 ELSE 0 END),
                    SUM(CASE WHEN j.state = 'cancelled' THEN 1 ELSE 0 END)
             FROM tunes t LEFT JOIN jobs j ON j.tune_id = t.id
             GROUP BY t.id, t.host_class, t.what, t.state, t.created_at ORDER BY t.id DESC",
            params![],
            |r| {
                let n = |i| r.get::<Option<i64>>(i).map(|v| v.unwrap_or(0));
                Ok(TuneRow {
                    id: r.get(0)?,
                    host_class: r.get(1)?,
                    what: r.get(2)?,
                    state: r.get(3)?,
                    age_s: (now - r.get::<f64>(4)?).max(0.0),
                    pending: n(5)?,
                    leased: n(6)?,
                    done: n(7)?,
                    failed: n(8)?,
                    cancelled: n(9)?,
                })
            },
        )
    }

    /// Listens for enqueued jobs (workers) or results (coordinators); see
    /// [`Store::wait_for_queue`].
    pub fn listen_queue(&self, channel: &'static str) -> Result<()> {
        self.db.retrying(|db| db.listen(channel))
    }

    /// Waits up to `timeout` for a notification on a channel [`Store::listen_queue`]
    /// listens on (a lost server is connected to again); true when one came. Callers poll
    /// as well: a notification sent while nobody listened is lost.
    pub fn wait_for_queue(&self, timeout: Duration) -> Result<bool> {
        self.db.retrying(|db| db.wait_notification(timeout))
    }
}

/// Wakes the coordinators whose jobs `worker` has just finished (at `now`, in this
/// transaction): one notification per tune, sent when the transaction commits.
fn notify_results(tx: &Db, worker: i64, now: f64) -> Result<()> {
    let tunes: Vec<i64> = tx.query_map(
        "SELECT DISTINCT tune_id FROM jobs WHERE worker_id = ?1 AND finished_at = ?2",
        params![worker, now],
        |r| r.get(0),
    )?;
    for t in tunes {
        tx.notify(RESULTS_CHANNEL, &t.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
