//! Importing Ansor log files: one transaction per file, idempotent (records are deduplicated
//! by a digest of their raw line), never aborted by a bad line (bad lines are kept in
//! `rejected_lines` with their reason).
//!
//! Parsing runs on a second thread (and rayon within it) while this thread inserts, so the
//! two cores overlap JSON parsing with database writes. Every row that several importers may
//! create at once (a source, target, workload or record) is inserted with `ON CONFLICT DO
//! NOTHING` against its unique key, so concurrent imports into PostgreSQL neither fail nor
//! duplicate, and the counts they report add up.
use super::db::{params, Db, Dialect, ToParam};
use super::target::NormalizedTarget;
use super::{Result, Store, StoreError};
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use ttdb_format::ansor::log::lines;
#[cfg(doc)]
use ttdb_format::ansor::MeasureResult;
use ttdb_format::ansor::{parse_line, LogLine, WorkloadKey};
use ttdb_format::signature::{self, hex};

/// A line that is not a record.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Rejected {
    pub line: usize,
    pub reason: String,
}

/// What importing one file did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FileReport {
    pub path: PathBuf,
    pub sha256: String,
    /// The same bytes were imported before (then every record is a duplicate).
    pub already_imported: bool,
    pub lines: usize,
    /// Record lines read (not comments, blanks or rejected lines).
    pub records: usize,
    pub inserted: usize,
    pub duplicates: usize,
    /// Records that can never be chosen: failed measurements (error_no != 0) and records
    /// whose costs are not plausible times (see [`MeasureResult::invalid_reason`]). Kept.
    pub failed_measurements: usize,
    /// Of those, the records with error_no 0 whose costs are zero, negative, NaN, infinite
    /// or above the ceiling, with the reason: a log or bundle that claims such a time is
    /// wrong or hostile, so each is named.
    pub invalid_costs: Vec<Rejected>,
    pub rejected: Vec<Rejected>,
    /// Database ids of the workloads this file's records belong to.
    #[serde(skip)]
    pub workload_ids: Vec<i64>,
    pub new_workloads: usize,
    /// Workloads recognized by shape only whose records do not replay on the guess: stored
    /// as `unknown` (see [`super::structural`]).
    pub refuted_guesses: Vec<super::structural::RefutedGuess>,
}

/// What the parse thread hands to the insert thread for one record line. Everything that
/// can be computed without the database is computed here, off the insert thread: keys and
/// targets are interned to small indices, and their strings travel only with their first
/// record (`first_sight`), so the inserter neither hashes nor frees them.
struct ParsedRecord<'a> {
    line: usize,
    raw: &'a str,
    error_no: u8,
    mean_cost: Option<f64>,
    /// Why a record with error_no 0 cannot be chosen (its costs).
    invalid_cost: Option<String>,
    digest: [u8; 16],
    /// Index of the workload key among the keys of this import.
    key_index: usize,
    /// Index of the (target, target_host, hardware_params) triple in this import.
    target_index: usize,
    first_sight: Option<Box<FirstSight>>,
}

/// The strings behind a record's key and target indices, sent with their first record.
#[derive(Default)]
struct FirstSight {
    /// The workload key and its signature, when the key is new to this import.
    workload: Option<(
        String,
        Option<(ttdb_format::signature::WorkloadSignature, &'static str)>,
    )>,
    /// (target, target_host, hardware_params), when the target is new to this import.
    target: Option<(String, String, Option<Vec<i64>>)>,
}

/// A parsed record before interning (inside the parallel parse).
struct RecordFields {
    key: String,
    target: String,
    target_host: String,
    hardware_params: Option<Vec<i64>>,
}

enum Parsed<'a> {
    Skip,
    Record(ParsedRecord<'a>, Option<RecordFields>),
    Bad {
        line: usize,
        reason: String,
        raw: &'a [u8],
    },
}

/// Bytes of a rejected line kept in `rejected_lines`: enough to see what it was, while a
/// hostile or binary file cannot grow the database by its own size.
pub const REJECTED_PREFIX: usize = 256;

/// Lines per parse batch: large enough to amortize the channel, small enough to overlap.
const BATCH: usize = 4096;

fn parse_one(line: usize, bytes: &[u8]) -> Parsed<'_> {
    match parse_line(bytes) {
        LogLine::Blank | LogLine::Comment => Parsed::Skip,
        LogLine::Bad { raw, reason } => Parsed::Bad {
            line,
            reason: reason.0,
            raw,
        },
        LogLine::Record { raw, record } => {
            let digest = record_digest(raw);
            let r = *record;
            let invalid = r.result.invalid_reason();
            let fields = RecordFields {
                key: r.task.workload_key,
                target: r.task.target,
                target_host: r.task.target_host.unwrap_or_default(),
                hardware_params: r.task.hardware_params,
            };
            let record = ParsedRecord {
                line,
                raw,
                mean_cost: invalid.is_none().then(|| r.result.mean_cost()),
                invalid_cost: invalid.filter(|_| r.result.error_no.is_ok()),
                error_no: r.result.error_no.0,
                digest,
                key_index: 0,
                target_index: 0,
                first_sight: None,
            };
            Parsed::Record(record, Some(fields))
        }
    }
}

/// Interns keys and targets in file order (on the parse thread): fills each record's
/// indices, and attaches the strings (and the key's signature) to the first record of
/// each. Returns nothing to free on the insert thread.
#[derive(Default)]
struct Interner {
    keys: HashMap<String, usize>,
    targets: HashMap<(String, String, Option<Vec<i64>>), usize>,
}

impl Interner {
    fn intern(&mut self, r: &mut ParsedRecord, fields: RecordFields) {
        let mut first = FirstSight::default();
        let n = self.keys.len();
        r.key_index = match self.keys.get(&fields.key) {
            Some(&i) => i,
            None => {
                // The record parser accepted the key, so it parses; if it did not, the
                // inserter reports it.
                let signature = WorkloadKey::parse(&fields.key)
                    .ok()
                    .map(|k| ttdb_algo::recognize::signature_for(&k));
                self.keys.insert(fields.key.clone(), n);
                first.workload = Some((fields.key, signature));
                n
            }
        };
        let target = (fields.target, fields.target_host, fields.hardware_params);
        let n = self.targets.len();
        r.target_index = match self.targets.get(&target) {
            Some(&i) => i,
            None => {
                self.targets.insert(target.clone(), n);
                first.target = Some(target);
                n
            }
        };
        if first.workload.is_some() || first.target.is_some() {
            r.first_sight = Some(Box::new(first));
        }
    }
}

/// Identity of a record for deduplication: the first 16 bytes of sha256 of its line
/// (trailing whitespace, e.g. a CR, ignored).
pub fn record_digest(raw: &str) -> [u8; 16] {
    let d = Sha256::digest(raw.trim_end().as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&d[..16]);
    out
}

/// Database ids of the interned keys and targets of one import, resolved on first sight.
#[derive(Default)]
struct Ids {
    targets: Vec<i64>,
    workloads: Vec<i64>,
}

impl Ids {
    fn target(&mut self, tx: &Db, r: &ParsedRecord) -> Result<i64> {
        if let Some(&id) = self.targets.get(r.target_index) {
            return Ok(id);
        }
        let Some((target, host, hw)) = r.first_sight.as_ref().and_then(|f| f.target.as_ref())
        else {
            return Err(StoreError::Other(format!(
                "line {}: target interned out of order",
                r.line
            )));
        };
        let hp = hw
            .as_ref()
            .map(|h| serde_json::to_string(h).expect("ints"))
            .unwrap_or_default();
        let t = NormalizedTarget::parse(target, hw.as_deref());
        let (id, _) = tx.insert_or_select(
            "INSERT INTO targets (target, target_host, hardware_params, kind, keys, mcpu, mtriple, model, num_cores, compat)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
             ON CONFLICT (target, target_host, hardware_params) DO NOTHING RETURNING id",
            params![target, host, hp, t.kind, t.keys.join(","), t.mcpu, t.mtriple, t.model, t.num_cores, t.compat()],
            "SELECT id FROM targets WHERE target = ?1 AND target_host = ?2 AND hardware_params = ?3",
            params![target, host, hp],
        )?;
        self.targets.push(id);
        Ok(id)
    }

    /// The workload id of a key, creating (and classifying) it on first sight. Returns
    /// whether this import saw the key for the first time, and whether it was created.
    fn workload(&mut self, tx: &Db, r: &ParsedRecord) -> Result<(i64, bool, bool)> {
        if let Some(&id) = self.workloads.get(r.key_index) {
            return Ok((id, false, false));
        }
        let Some((key_text, signature)) = r.first_sight.as_ref().and_then(|f| f.workload.as_ref())
        else {
            return Err(StoreError::Other(format!(
                "line {}: workload key interned out of order",
                r.line
            )));
        };
        // The record parser already validated the key.
        let key = WorkloadKey::parse(key_text).map_err(|e| StoreError::Other(e.to_string()))?;
        let (sig, by) = match signature {
            Some((sig, by)) => (sig.clone(), *by),
            None => ttdb_algo::recognize::signature_for(&key),
        };
        let (id, created) = tx.insert_or_select(
            "INSERT INTO workloads (key, key_head, key_form, signature, signature_json, op_class, recognized_by, signature_version)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (key) DO NOTHING RETURNING id",
            params![
                key_text,
                key.head,
                key.form.as_str(),
                sig.sha256_hex(),
                sig.canonical_json(),
                sig.op_class,
                by,
                signature::SIGNATURE_VERSION
            ],
            "SELECT id FROM workloads WHERE key = ?1",
            params![key_text],
        )?;
        self.workloads.push(id);
        Ok((id, true, created))
    }
}

/// Records per INSERT statement on PostgreSQL. One statement per record cost a round trip
/// each (7,100 records/s against SQLite's 89,600 on one machine; 24,200 with this); 8
/// parameters a row stays far below the parameter limit. SQLite has no round trip, and its
/// multi-row VALUES was slower than one cached single-row statement (65,700 records/s).
fn rows_per_insert(dialect: Dialect) -> usize {
    match dialect {
        Dialect::Sqlite => 1,
        Dialect::Postgres => 256,
    }
}

/// Records waiting for their INSERT (their workload and target ids interned).
struct RecordRows<'a> {
    rows: Vec<(i64, i64, ParsedRecord<'a>)>,
    /// Rows per statement, and the statement for that many.
    capacity: usize,
    full: String,
}

impl<'a> RecordRows<'a> {
    fn new(dialect: Dialect) -> Self {
        let capacity = rows_per_insert(dialect);
        RecordRows {
            rows: Vec::with_capacity(capacity),
            capacity,
            full: insert_records_sql(capacity),
        }
    }

    /// Adds a record; inserts the waiting ones when they fill a statement.
    fn push(
        &mut self,
        tx: &Db,
        workload_id: i64,
        target_id: i64,
        r: ParsedRecord<'a>,
        source_id: i64,
        report: &mut FileReport,
    ) -> Result<()> {
        self.rows.push((workload_id, target_id, r));
        if self.rows.len() == self.capacity {
            self.insert(tx, source_id, report)?;
        }
        Ok(())
    }

    /// Inserts the waiting records; a digest already stored (or twice in the statement) is
    /// a duplicate, which the statement skips.
    fn insert(&mut self, tx: &Db, source_id: i64, report: &mut FileReport) -> Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let partial;
        let sql = if self.rows.len() == self.capacity {
            &self.full
        } else {
            partial = insert_records_sql(self.rows.len());
            &partial
        };
        let mut values: Vec<&dyn ToParam> = Vec::with_capacity(8 * self.rows.len());
        for (w, t, r) in &self.rows {
            values.extend([
                w as &dyn ToParam,
                t,
                &source_id,
                &r.line,
                &r.error_no,
                &r.mean_cost,
                &r.digest,
                &r.raw,
            ]);
        }
        let inserted = tx.execute(sql, &values)?;
        report.inserted += inserted;
        report.duplicates += self.rows.len() - inserted;
        self.rows.clear();
        Ok(())
    }
}

/// `INSERT INTO records ... VALUES (?1, ..., ?8), (?9, ...), ...` for `rows` records.
fn insert_records_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO records (workload_id, target_id, source_id, line_no, error_no, mean_cost, digest, raw) VALUES ",
    );
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        let p: Vec<String> = (1..=8).map(|k| format!("?{}", 8 * i + k)).collect();
        sql.push_str(&format!("({})", p.join(", ")));
    }
    sql.push_str(" ON CONFLICT (digest) DO NOTHING");
    sql
}

/// Imports one Ansor log file in a single transaction. `progress(bytes_done)` is called
/// as batches are inserted.
pub fn import_file(
    store: &mut Store,
    path: &Path,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<FileReport> {
    let buf = std::fs::read(path).map_err(|error| StoreError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    import_bytes(store, path, &buf, "ansor_log", progress)
}

/// Imports the bytes of a log (`kind` names the source kind in provenance) in one
/// transaction.
pub fn import_bytes(
    store: &mut Store,
    path: &Path,
    buf: &[u8],
    kind: &str,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<FileReport> {
    let report = in_import_transaction(store, |tx| import_in(tx, path, buf, kind, progress))?;
    refresh_statistics(store, report.inserted)?;
    Ok(report)
}

/// Records inserted at once past which PostgreSQL's planner statistics are refreshed. Until
/// autovacuum gets to a table (a minute or more after a bulk load), its plans follow the
/// statistics of the table before the load: `match` right after importing 1M records took
/// 0.98 s against 0.5 s once analyzed. SQLite plans from its indexes alone.
const ANALYZE_AFTER: usize = 10_000;

/// `ANALYZE` of the tables an import grows, on PostgreSQL after a bulk import.
pub(super) fn refresh_statistics(store: &Store, inserted: usize) -> Result<()> {
    if store.db.dialect() == Dialect::Postgres && inserted >= ANALYZE_AFTER {
        store
            .db
            .execute_batch("ANALYZE records; ANALYZE workloads; ANALYZE targets")?;
    }
    Ok(())
}

/// Runs `f` in one write transaction (see [`Db::transaction`]), committed if `f` succeeds.
/// On SQLite, with foreign-key checks off: every id an imported row refers to was just read
/// or inserted in this transaction, so per-row foreign-key probes (a third of the insert
/// cost) would only re-check that. PostgreSQL checks them, as it cannot turn them off.
pub(super) fn in_import_transaction<T>(
    store: &mut Store,
    f: impl FnMut(&Db) -> Result<T>,
) -> Result<T> {
    let sqlite = store.db.dialect() == Dialect::Sqlite;
    if sqlite {
        store.db.execute_batch("PRAGMA foreign_keys = OFF")?;
    }
    let outcome = store.db.transaction(f);
    if sqlite {
        store.db.execute_batch("PRAGMA foreign_keys = ON")?;
    }
    outcome
}

/// Imports the bytes of a log inside the caller's transaction (so that a caller can add
/// rows that refer to the new records and commit both at once).
pub fn import_in(
    tx: &Db,
    path: &Path,
    buf: &[u8],
    kind: &str,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<FileReport> {
    let sha256 = hex(&Sha256::digest(buf));
    let mut report = FileReport {
        path: path.to_path_buf(),
        sha256: sha256.clone(),
        ..Default::default()
    };
    let (source_id, created) = tx.insert_or_select(
        "INSERT INTO sources (kind, path, sha256, size, imported_at, tool_version, lines, records, inserted, rejected)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, 0, 0, 0) ON CONFLICT (sha256) DO NOTHING RETURNING id",
        params![kind, path.display().to_string(), sha256, buf.len(), super::now_rfc3339(), ttdb_format::version()],
        "SELECT id FROM sources WHERE sha256 = ?1",
        params![sha256],
    )?;
    report.already_imported = !created;

    let all_lines: Vec<(usize, &[u8])> = lines(buf).collect();
    report.lines = all_lines.len();
    let mut ids = Ids::default();
    let result: Result<()> = std::thread::scope(|scope| {
        let (send, recv) = std::sync::mpsc::sync_channel::<(u64, Vec<Parsed>)>(2);
        let batches = &all_lines;
        scope.spawn(move || {
            let mut interner = Interner::default();
            for batch in batches.chunks(BATCH) {
                let mut parsed: Vec<Parsed> =
                    batch.par_iter().map(|&(n, b)| parse_one(n, b)).collect();
                // Intern (and recognize each new key) here, so the insert thread only inserts.
                for p in &mut parsed {
                    if let Parsed::Record(r, fields) = p {
                        if let Some(fields) = fields.take() {
                            interner.intern(r, fields);
                        }
                    }
                }
                let end = batch
                    .last()
                    .map_or(0, |&(_, b)| b.as_ptr() as u64 + b.len() as u64);
                if send.send((end, parsed)).is_err() {
                    return; // the inserter failed; stop parsing
                }
            }
        });
        let base = buf.as_ptr() as u64;
        let reject =
            "INSERT INTO rejected_lines (source_id, line_no, reason, raw) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT DO NOTHING";
        let mut rows = RecordRows::new(tx.dialect());
        for (end, parsed) in recv {
            for p in parsed {
                match p {
                    Parsed::Skip => {}
                    Parsed::Bad { line, reason, raw } => {
                        let kept = &raw[..raw.len().min(REJECTED_PREFIX)];
                        tx.execute(reject, params![source_id, line, reason, kept])?;
                        report.rejected.push(Rejected { line, reason });
                    }
                    Parsed::Record(mut r, _) => {
                        report.records += 1;
                        report.failed_measurements += r.mean_cost.is_none() as usize;
                        if let Some(reason) = r.invalid_cost.take() {
                            report.invalid_costs.push(Rejected {
                                line: r.line,
                                reason,
                            });
                        }
                        let t = ids.target(tx, &r)?;
                        let (w, first_sight, created) = ids.workload(tx, &r)?;
                        if first_sight {
                            report.workload_ids.push(w);
                            report.new_workloads += created as usize;
                        }
                        rows.push(tx, w, t, r, source_id, &mut report)?;
                    }
                }
            }
            rows.insert(tx, source_id, &mut report)?;
            progress(end.saturating_sub(base));
        }
        Ok(())
    });
    result?;
    if created {
        tx.execute(
            "UPDATE sources SET lines = ?1, records = ?2, inserted = ?3, rejected = ?4 WHERE id = ?5",
            params![report.lines, report.records, report.inserted, report.rejected.len(), source_id],
        )?;
    }
    report.workload_ids.sort_unstable();
    report.refuted_guesses = super::structural::check_guesses(tx, &report.workload_ids)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POOL: &str = r#"{"i": [["[\"c92b8fc43923b1c0edeb2d4534314534\", [1, 112, 112, 128], [1, 56, 56, 128]]", "llvm -keys=cpu -mtriple=x86_64-conda-linux-gnu", [24, 64, 64, 0, 0, 0, 0, 0], "", 2, []], [[], [["FU", 1, [0, 1, 2]], ["AN", 1, 0, 3], ["PR", 1, 0, "auto_unroll_max_step$512"]]]], "r": [[1.7519e-05], 0, 0.113804, 1730467399], "v": "v0.6"}"#;

    crate::on_both_backends! {
    /// Three keys over two targets, interleaved, with one bad line: every record must land
    /// on its own key's workload and its own target, whatever order they first appear in.
    fn interned_keys_and_targets_map_to_their_rows(backend) {
        let key_b = POOL.replace(
            "[1, 112, 112, 128], [1, 56, 56, 128]",
            "[1, 56, 56, 64], [1, 28, 28, 64]",
        );
        let key_c = POOL.replace(
            "[1, 112, 112, 128], [1, 56, 56, 128]",
            "[1, 28, 28, 32], [1, 14, 14, 32]",
        );
        let other_target =
            |l: &str| l.replace("-mtriple=x86_64-conda-linux-gnu", "-mcpu=skylake-avx512");
        let costs = |l: &str, c: &str| l.replace("1.7519e-05", c);
        let lines = [
            costs(POOL, "1e-5"),
            other_target(&costs(&key_b, "2e-5")),
            "{not json".to_string(),
            costs(&key_c, "3e-5"),
            other_target(&costs(POOL, "4e-5")),
            costs(&key_b, "5e-5"),
        ];
        let mut store = backend.store();
        let text = lines.join("\n");
        let report = import_bytes(
            &mut store,
            Path::new("mixed.json"),
            text.as_bytes(),
            "ansor_log",
            &|_| {},
        )
        .unwrap();
        assert_eq!(
            (
                report.records,
                report.inserted,
                report.rejected.len(),
                report.new_workloads
            ),
            (5, 5, 1, 3)
        );
        assert_eq!(report.workload_ids.len(), 3);
        let rows: Vec<(i64, String, String, f64)> = store
            .db
            .query_map(
                "SELECT r.line_no, w.key, t.target, r.mean_cost FROM records r
                 JOIN workloads w ON w.id = r.workload_id JOIN targets t ON t.id = r.target_id ORDER BY r.line_no",
                params![],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        let has = |s: &str, what: &str| s.contains(what);
        let expect = [
            (1, "112, 112", "conda"),
            (2, "56, 56", "skylake"),
            (4, "28, 28", "conda"),
            (5, "112, 112", "skylake"),
            (6, "56, 56", "conda"),
        ];
        assert_eq!(rows.len(), expect.len());
        for ((line, key, target, _), (want_line, want_key, want_target)) in rows.iter().zip(expect)
        {
            assert_eq!(*line, want_line);
            assert!(
                has(key, want_key) && has(target, want_target),
                "line {line}: {key} on {target}"
            );
        }
        // A failed import leaves nothing behind; on SQLite, foreign-key checks, off during
        // the import, are back on, also after a failed one.
        let fk = |s: &Store| match &s.db {
            Db::Sqlite(c) => c
                .pragma_query_value(None, "foreign_keys", |r| r.get::<_, i64>(0))
                .unwrap(),
            Db::Postgres(_) => 1,
        };
        assert_eq!(fk(&store), 1);
        store.db.execute_batch("DROP TABLE rejected_lines").unwrap();
        assert!(import_bytes(
            &mut store,
            Path::new("bad.json"),
            b"{not json",
            "ansor_log",
            &|_| {}
        )
        .is_err());
        assert_eq!(fk(&store), 1);
        let sources: i64 = store
            .db
            .query_one("SELECT COUNT(*) FROM sources", params![], |r| r.get(0))
            .unwrap();
        assert_eq!(sources, 1, "the failed import's source was rolled back");
    }
    }
}
