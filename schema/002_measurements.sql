-- ttdb schema v2: ttdb's own measurements. A measured schedule is stored twice over:
-- as a ttdb-native record (an Ansor log line for the measured workload and this host's
-- target, so `export` gives TVM-readable logs) and as a row of `measurements` with what
-- an Ansor line cannot hold: the host fingerprint, verification, spread, provenance.

CREATE TABLE hosts (
    id           INTEGER PRIMARY KEY,
    fingerprint  TEXT    NOT NULL UNIQUE,  -- sha256 of the canonical JSON of the fields below
    cpu_model    TEXT    NOT NULL,
    isa_features TEXT    NOT NULL,         -- sorted, space-separated
    llvm_cpu     TEXT    NOT NULL,
    num_cores    INTEGER NOT NULL,
    ttdb_version TEXT    NOT NULL
);

CREATE TABLE measurements (
    id               INTEGER PRIMARY KEY,
    record_id        INTEGER NOT NULL REFERENCES records(id),  -- the ttdb-native record
    host_id          INTEGER NOT NULL REFERENCES hosts(id),
    kind             TEXT    NOT NULL,        -- verify | apply | search | default
    verified         INTEGER NOT NULL,        -- 1: output matched the reference within tolerance
    max_rel_error    REAL,
    median_s         REAL,
    min_s            REAL,
    max_s            REAL,
    repeats          INTEGER,
    gflops           REAL,
    compile_ms       REAL,
    error            TEXT,                    -- why it failed: lowering, verification, timeout
    origin_record_id INTEGER REFERENCES records(id),  -- whose steps were replayed
    provenance       TEXT    NOT NULL,        -- e.g. "transferred from workload W of file F"
    measured_at      TEXT    NOT NULL
);
CREATE INDEX measurements_record ON measurements(record_id);
CREATE INDEX measurements_origin ON measurements(origin_record_id);
