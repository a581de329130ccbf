-- ttdb schema v7: the work queue of distributed measurement (docs/design/work-queue.md).
-- A coordinator (`ttdb tune --workers`) enqueues build-and-measure jobs for a host class;
-- `ttdb worker` processes of that class claim them under a lease that their heartbeat
-- extends, and write each job's result and its measurement in one transaction. Times are
-- seconds since the epoch on the database's clock (PostgreSQL's, so machines whose clocks
-- differ agree on when a lease expires).

CREATE TABLE workers (
    id           INTEGER PRIMARY KEY,
    name         TEXT    NOT NULL,        -- hostname:pid, for people
    host_id      INTEGER NOT NULL REFERENCES hosts(id),
    host_class   TEXT    NOT NULL,        -- HostFingerprint::class: llvm cpu, lanes, cores
    batch        INTEGER NOT NULL,        -- jobs it claims at once (--jobs)
    started_at   REAL    NOT NULL,
    heartbeat_at REAL    NOT NULL,
    stopped_at   REAL,                    -- set when it exits cleanly
    jobs_done    INTEGER NOT NULL DEFAULT 0,
    jobs_failed  INTEGER NOT NULL DEFAULT 0,
    current      TEXT                     -- what it is doing now
);

-- One coordinator run: its jobs are shown and cancelled together.
CREATE TABLE tunes (
    id         INTEGER PRIMARY KEY,
    host_class TEXT    NOT NULL,
    what       TEXT    NOT NULL,          -- e.g. "tune resnet18.onnx --trials 2000"
    state      TEXT    NOT NULL,          -- running | done | cancelled
    created_at REAL    NOT NULL,
    ended_at   REAL
);

-- What the jobs of one batch share: the workload (DAG, reference seed, evaluation options,
-- TVM key, flops) as JSON, and each run's timeout.
CREATE TABLE job_batches (
    id        INTEGER PRIMARY KEY,
    tune_id   INTEGER NOT NULL REFERENCES tunes(id),
    workload  TEXT    NOT NULL,
    timeout_s REAL    NOT NULL
);

CREATE TABLE jobs (
    id          INTEGER PRIMARY KEY,
    batch_id    INTEGER NOT NULL REFERENCES job_batches(id),
    tune_id     INTEGER NOT NULL REFERENCES tunes(id),
    host_class  TEXT    NOT NULL,
    position    INTEGER NOT NULL,         -- in its batch
    steps       TEXT    NOT NULL,         -- the schedule, JSON
    state       TEXT    NOT NULL,         -- pending | leased | done | failed | cancelled
    attempts    INTEGER NOT NULL DEFAULT 0,
    worker_id   INTEGER REFERENCES workers(id),
    lease_until REAL,
    enqueued_at REAL    NOT NULL,
    started_at  REAL,                     -- when the current or last lease began
    finished_at REAL,
    run_s       REAL,                     -- the measuring time of its batch on the worker
    result      TEXT,                     -- the evaluation, JSON
    error       TEXT                      -- why it failed (lost leases)
);
CREATE INDEX jobs_claim ON jobs(host_class, state, id);
CREATE INDEX jobs_batch ON jobs(batch_id, position);
CREATE INDEX jobs_tune ON jobs(tune_id, state);

-- A measurement taken for a job names it; one per job, so a result is never counted twice.
ALTER TABLE measurements ADD COLUMN job_id INTEGER REFERENCES jobs(id);
CREATE UNIQUE INDEX measurements_job ON measurements(job_id);
