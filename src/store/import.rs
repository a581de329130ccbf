//! Importing Ansor log files: one transaction per file, idempotent (records are deduplicated
//! by a digest of their raw line), never aborted by a bad line (bad lines are kept in
//! `rejected_lines` with their reason).
//!
//! Parsing runs on a second thread (and rayon within it) while this thread inserts, so the
//! two cores overlap JSON parsing with SQLite writes.
use super::target::NormalizedTarget;
use super::{Result, Store, StoreError};
use crate::ansor::log::lines;
use crate::ansor::{parse_line, LogLine, WorkloadKey};
use crate::signature::{self, hex};
use rayon::prelude::*;
use rusqlite::{params, OptionalExtension, Transaction};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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
    /// Records whose measurement failed (error_no != 0): kept, never chosen.
    pub failed_measurements: usize,
    pub rejected: Vec<Rejected>,
    /// Database ids of the workloads this file's records belong to.
    #[serde(skip)]
    pub workload_ids: Vec<i64>,
    pub new_workloads: usize,
}

/// What the parse thread hands to the insert thread for one record line. Everything that
/// can be computed without the database is computed here, off the insert thread.
struct ParsedRecord<'a> {
    line: usize,
    raw: &'a str,
    key: String,
    target: String,
    target_host: String,
    hardware_params: Option<Vec<i64>>,
    /// `target \0 target_host \0 hardware_params JSON`: the target cache key.
    target_key: String,
    error_no: u8,
    mean_cost: Option<f64>,
    digest: [u8; 16],
    /// The workload's signature, on the first record of each key in this import.
    signature: Option<Box<(crate::signature::WorkloadSignature, &'static str)>>,
}

enum Parsed<'a> {
    Skip,
    Record(ParsedRecord<'a>),
    Bad {
        line: usize,
        reason: String,
        raw: &'a [u8],
    },
}

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
            let valid = r.result.is_valid();
            let target_host = r.task.target_host.unwrap_or_default();
            let hp = r
                .task
                .hardware_params
                .as_ref()
                .map(|h| serde_json::to_string(h).expect("ints"))
                .unwrap_or_default();
            Parsed::Record(ParsedRecord {
                line,
                raw,
                mean_cost: valid.then(|| r.result.mean_cost()),
                error_no: r.result.error_no.0,
                key: r.task.workload_key,
                target_key: format!("{}\0{target_host}\0{hp}", r.task.target),
                target: r.task.target,
                target_host,
                hardware_params: r.task.hardware_params,
                digest,
                signature: None,
            })
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

/// Caches ids of targets and workloads across the lines of one import.
struct Ids {
    targets: HashMap<String, i64>,
    workloads: HashMap<String, i64>,
}

impl Ids {
    fn target(&mut self, tx: &Transaction, r: &ParsedRecord) -> Result<i64> {
        if let Some(&id) = self.targets.get(&r.target_key) {
            return Ok(id);
        }
        let hp = r
            .hardware_params
            .as_ref()
            .map(|h| serde_json::to_string(h).unwrap())
            .unwrap_or_default();
        let k = (r.target.clone(), r.target_host.clone(), hp);
        let existing: Option<i64> = tx
            .query_row(
                "SELECT id FROM targets WHERE target = ?1 AND target_host = ?2 AND hardware_params = ?3",
                params![k.0, k.1, k.2],
                |row| row.get(0),
            )
            .optional()?;
        let id = match existing {
            Some(id) => id,
            None => {
                let t = NormalizedTarget::parse(&r.target, r.hardware_params.as_deref());
                tx.execute(
                    "INSERT INTO targets (target, target_host, hardware_params, kind, keys, mcpu, mtriple, model, num_cores, compat)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    params![k.0, k.1, k.2, t.kind, t.keys.join(","), t.mcpu, t.mtriple, t.model, t.num_cores, t.compat()],
                )?;
                tx.last_insert_rowid()
            }
        };
        self.targets.insert(r.target_key.clone(), id);
        Ok(id)
    }

    /// The workload id of a key, creating (and classifying) it on first sight.
    fn workload(&mut self, tx: &Transaction, r: &ParsedRecord, created: &mut usize) -> Result<i64> {
        if let Some(&id) = self.workloads.get(&r.key) {
            return Ok(id);
        }
        let existing: Option<i64> = tx
            .query_row("SELECT id FROM workloads WHERE key = ?1", [&r.key], |row| {
                row.get(0)
            })
            .optional()?;
        let id = match existing {
            Some(id) => id,
            None => {
                // The record parser already validated the key.
                let key =
                    WorkloadKey::parse(&r.key).map_err(|e| StoreError::Other(e.to_string()))?;
                let (sig, by) = match &r.signature {
                    Some(s) => (s.0.clone(), s.1),
                    None => signature::signature_for(&key),
                };
                tx.execute(
                    "INSERT INTO workloads (key, key_head, key_form, signature, signature_json, op_class, recognized_by, signature_version)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![
                        r.key,
                        key.head,
                        key.form.as_str(),
                        sig.sha256_hex(),
                        sig.canonical_json(),
                        sig.op_class,
                        by,
                        signature::SIGNATURE_VERSION
                    ],
                )?;
                *created += 1;
                tx.last_insert_rowid()
            }
        };
        self.workloads.insert(r.key.clone(), id);
        Ok(id)
    }
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
    let tx = store
        .conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let report = import_in(&tx, path, buf, kind, progress)?;
    tx.commit()?;
    Ok(report)
}

/// Imports the bytes of a log inside the caller's transaction (so that a caller can add
/// rows that refer to the new records and commit both at once).
pub fn import_in(
    tx: &Transaction,
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
    let existing: Option<i64> = tx
        .query_row("SELECT id FROM sources WHERE sha256 = ?1", [&sha256], |r| {
            r.get(0)
        })
        .optional()?;
    report.already_imported = existing.is_some();
    let source_id = match existing {
        Some(id) => id,
        None => {
            tx.execute(
                "INSERT INTO sources (kind, path, sha256, size, imported_at, tool_version, lines, records, inserted, rejected)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, 0, 0, 0)",
                params![kind, path.display().to_string(), sha256, buf.len() as i64, super::now_rfc3339(), crate::version()],
            )?;
            tx.last_insert_rowid()
        }
    };

    let all_lines: Vec<(usize, &[u8])> = lines(buf).collect();
    report.lines = all_lines.len();
    let mut ids = Ids {
        targets: HashMap::new(),
        workloads: HashMap::new(),
    };
    let mut touched = std::collections::BTreeSet::new();
    let result: Result<()> = std::thread::scope(|scope| {
        let (send, recv) = std::sync::mpsc::sync_channel::<(u64, Vec<Parsed>)>(2);
        let batches = &all_lines;
        scope.spawn(move || {
            let mut seen = std::collections::HashSet::new();
            for batch in batches.chunks(BATCH) {
                let mut parsed: Vec<Parsed> =
                    batch.par_iter().map(|&(n, b)| parse_one(n, b)).collect();
                // Recognize each new key here, so the insert thread only inserts.
                for p in &mut parsed {
                    if let Parsed::Record(r) = p {
                        if !seen.contains(&r.key) {
                            seen.insert(r.key.clone());
                            r.signature = WorkloadKey::parse(&r.key)
                                .ok()
                                .map(|k| Box::new(signature::signature_for(&k)));
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
        let mut insert = tx.prepare_cached(
            "INSERT INTO records (workload_id, target_id, source_id, line_no, error_no, mean_cost, digest, raw)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT(digest) DO NOTHING",
        )?;
        let mut reject = tx.prepare_cached(
            "INSERT OR IGNORE INTO rejected_lines (source_id, line_no, reason, raw) VALUES (?1, ?2, ?3, ?4)",
        )?;
        for (end, parsed) in recv {
            for p in parsed {
                match p {
                    Parsed::Skip => {}
                    Parsed::Bad { line, reason, raw } => {
                        reject.execute(params![source_id, line as i64, reason, raw])?;
                        report.rejected.push(Rejected { line, reason });
                    }
                    Parsed::Record(r) => {
                        report.records += 1;
                        report.failed_measurements += (r.error_no != 0) as usize;
                        let t = ids.target(tx, &r)?;
                        let w = ids.workload(tx, &r, &mut report.new_workloads)?;
                        touched.insert(w);
                        let n = insert.execute(params![
                            w,
                            t,
                            source_id,
                            r.line as i64,
                            r.error_no as i64,
                            r.mean_cost,
                            &r.digest[..],
                            r.raw
                        ])?;
                        if n == 1 {
                            report.inserted += 1;
                        } else {
                            report.duplicates += 1;
                        }
                    }
                }
            }
            progress(end.saturating_sub(base));
        }
        Ok(())
    });
    result?;
    if existing.is_none() {
        tx.execute(
            "UPDATE sources SET lines = ?1, records = ?2, inserted = ?3, rejected = ?4 WHERE id = ?5",
            params![report.lines as i64, report.records as i64, report.inserted as i64, report.rejected.len() as i64, source_id],
        )?;
    }
    report.workload_ids = touched.into_iter().collect();
    Ok(report)
}

/// Expands files and directories (recursively, sorted) into the files to import.
pub fn collect_files(paths: &[PathBuf]) -> std::result::Result<Vec<PathBuf>, StoreError> {
    fn walk(p: &Path, out: &mut Vec<PathBuf>) -> std::result::Result<(), StoreError> {
        let meta = std::fs::metadata(p).map_err(|error| StoreError::Io {
            path: p.to_path_buf(),
            error,
        })?;
        if meta.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|error| StoreError::Io {
                    path: p.to_path_buf(),
                    error,
                })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|e| {
                    !e.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect();
            entries.sort();
            for e in entries {
                walk(&e, out)?;
            }
        } else {
            out.push(p.to_path_buf());
        }
        Ok(())
    }
    let mut out = Vec::new();
    for p in paths {
        walk(p, &mut out)?;
    }
    Ok(out)
}
