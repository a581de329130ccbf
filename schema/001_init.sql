-- ttdb schema v1. Applied by `store::open` when PRAGMA user_version < 1.
-- Every imported line is kept verbatim (records.raw, rejected_lines.raw): nothing is lost.

-- One row per imported file content (sha256 of its bytes), with provenance.
CREATE TABLE sources (
    id           INTEGER PRIMARY KEY,
    kind         TEXT    NOT NULL,            -- 'ansor_log' | 'ttdb_measure' | 'bundle'
    path         TEXT    NOT NULL,            -- as given to the first import
    sha256       TEXT    NOT NULL UNIQUE,     -- hex, of the file bytes
    size         INTEGER NOT NULL,
    imported_at  TEXT    NOT NULL,            -- RFC 3339, UTC
    tool_version TEXT    NOT NULL,            -- ttdb version that imported it
    lines        INTEGER NOT NULL,
    records      INTEGER NOT NULL,            -- record lines read
    inserted     INTEGER NOT NULL,            -- new records (others were duplicates)
    rejected     INTEGER NOT NULL             -- lines that are not records
);

-- Normalized targets. `compat` groups targets whose schedules TVM would share
-- (target kind + keys); finer checks (mcpu, ISA) are made by the matcher.
CREATE TABLE targets (
    id              INTEGER PRIMARY KEY,
    target          TEXT    NOT NULL,         -- raw Target::str()
    target_host     TEXT    NOT NULL,         -- raw, '' if none
    hardware_params TEXT    NOT NULL,         -- raw JSON list, '' if absent (v0.2)
    kind            TEXT    NOT NULL,         -- llvm | cuda | ...
    keys            TEXT    NOT NULL,         -- comma-separated, e.g. 'cpu' or 'cuda,gpu'
    mcpu            TEXT,
    mtriple         TEXT,
    model           TEXT,
    num_cores       INTEGER,
    compat          TEXT    NOT NULL,         -- kind/keys, e.g. 'llvm/cpu'
    UNIQUE (target, target_host, hardware_params)
);
CREATE INDEX targets_compat ON targets(compat);

-- Workloads, keyed by the raw TVM workload key; `signature` is ttdb's normalized,
-- TVM-version-independent identity (several keys may share one signature).
CREATE TABLE workloads (
    id                INTEGER PRIMARY KEY,
    key               TEXT    NOT NULL UNIQUE,  -- raw TVM workload key
    key_head          TEXT    NOT NULL,         -- md5 hex or registered function name
    key_form          TEXT    NOT NULL,         -- hash_only | flat | nested | registered
    signature         TEXT    NOT NULL,         -- sha256 hex of signature_json
    signature_json    TEXT    NOT NULL,         -- canonical JSON (see signature/mod.rs)
    op_class          TEXT    NOT NULL,
    recognized_by     TEXT    NOT NULL,         -- md5 | registered | structural | unknown
    signature_version INTEGER NOT NULL
);
CREATE INDEX workloads_signature ON workloads(signature);
CREATE INDEX workloads_class ON workloads(op_class);

-- Measure records. `mean_cost` is NULL unless the measurement succeeded (error_no = 0 and
-- costs present): failed records are kept but can never be chosen.
CREATE TABLE records (
    id          INTEGER PRIMARY KEY,
    workload_id INTEGER NOT NULL REFERENCES workloads(id),
    target_id   INTEGER NOT NULL REFERENCES targets(id),
    source_id   INTEGER NOT NULL REFERENCES sources(id),
    line_no     INTEGER NOT NULL,
    error_no    INTEGER NOT NULL,
    mean_cost   REAL,
    digest      BLOB    NOT NULL,               -- first 16 bytes of sha256(raw): dedupe
    raw         TEXT    NOT NULL                -- the line, verbatim
);
CREATE UNIQUE INDEX records_digest ON records(digest);
-- "Best valid record for workload W": one range scan in cost order.
CREATE INDEX records_best ON records(workload_id, mean_cost) WHERE mean_cost IS NOT NULL;

-- Lines that are not records, kept with their reason.
CREATE TABLE rejected_lines (
    source_id INTEGER NOT NULL REFERENCES sources(id),
    line_no   INTEGER NOT NULL,
    reason    TEXT    NOT NULL,
    raw       BLOB    NOT NULL,
    PRIMARY KEY (source_id, line_no)
) WITHOUT ROWID;
