//! Schedule bundles: what teams share. A bundle is an Ansor log (TVM reads it as is) whose
//! manifest, per-record hashes and provenance, and optional ed25519 signature travel in `#`
//! comment lines; see [`format`] for the layout and [`sign`] for signatures.
//!
//! * [`export`]: records of this database (all, a class, a signature prefix, or a model's
//!   workload keys; the best per workload and target, or all) with their provenance and
//!   the hosts that measured them.
//! * [`plan`]: what importing a bundle would do, per workload: new, duplicate, better than
//!   ours, or not better (`bundle inspect`); it writes nothing.
//! * [`import`]: a bundle whose every hash checked, in one transaction, idempotently.
//! * [`merge`]: the union of two bundles, deduplicated by record hash with provenance
//!   joined; commutative and idempotent.
//! * [`inputs`] and [`summary`]: what `ttdb import` reads (logs and bundles found in files
//!   and directories), and what it did.
//!
//! Bundles are untrusted input: [`format::read`] refuses the whole file at the first
//! mismatch, before the database is touched. Schedules inside a well-formed bundle may
//! still be hostile; they import like any log line and fail replay cleanly later.
pub mod format;
pub mod inputs;
pub mod sign;
mod stream;
pub mod summary;

use crate::store::bundle::{self as sql, HostRow, IncomingRecord, Origin};
use crate::store::target::NormalizedTarget;
use crate::store::{Store, StoreError};
use format::{Bundle, BundleRecord, Creation, HostEntry, Provenance, RecordMeta};
use std::collections::BTreeMap;
use std::path::Path;
use ttdb_format::ansor::Record;

pub use crate::store::bundle::{BundleImport, Selection};

/// The records of `store` that `selection` takes (`best`: the best valid record per
/// workload and target; otherwise all, failed ones included), as a bundle.
pub fn export(
    store: &Store,
    selection: &Selection,
    best: bool,
    creation: Creation,
) -> Result<Bundle, StoreError> {
    let rows = sql::export_records(store, selection, best)?;
    let mut fingerprints: Vec<&str> = rows
        .iter()
        .flat_map(|r| r.origins.iter().map(|o| o.host.as_str()))
        .filter(|h| !h.is_empty())
        .collect();
    fingerprints.sort_unstable();
    fingerprints.dedup();
    let hosts: Vec<HostEntry> = sql::hosts(store, &fingerprints)?
        .into_iter()
        .map(host_entry)
        .collect();
    let records = rows
        .into_iter()
        .map(|r| {
            let line = r.raw.trim_end().to_string();
            BundleRecord {
                meta: RecordMeta {
                    sha256: format::sha256_hex(line.as_bytes()),
                    class: r.op_class,
                    signature: r.signature,
                    provenance: r.origins.into_iter().map(provenance).collect(),
                },
                line,
            }
        })
        .collect();
    Ok(Bundle::new(records, &hosts, creation))
}

fn host_entry(h: HostRow) -> HostEntry {
    HostEntry {
        fingerprint: h.fingerprint,
        cpu_model: h.cpu_model,
        isa_features: h.isa_features,
        llvm_cpu: h.llvm_cpu,
        cores: h.cores,
        ttdb_version: h.ttdb_version,
    }
}

fn provenance(o: Origin) -> Provenance {
    Provenance {
        kind: o.kind,
        source: o.source,
        line: o.line.max(0) as u64,
        host: o.host,
    }
}

/// Reads and checks the bundle file at `path` within `limits`, streaming it (a compressed
/// bundle is decompressed and checked a line at a time); also says whether it was
/// zstd-compressed. Errors name the file, line and record.
pub fn read_file(path: &Path, limits: &format::Limits) -> Result<(Bundle, bool), String> {
    let named = |e: String| format!("{}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(|e| named(e.to_string()))?;
    let size = file.metadata().map_err(|e| named(e.to_string()))?.len();
    if size > limits.max_bytes {
        return Err(named(format!(
            "{size} bytes, over the bundle limit of {} (--max-bundle-mib raises it)",
            limits.max_bytes
        )));
    }
    let mut file = std::io::BufReader::with_capacity(64 << 10, file);
    let compressed = std::io::BufRead::fill_buf(&mut file)
        .map(format::is_zstd)
        .map_err(|e| named(e.to_string()))?;
    let bundle = format::read_from(file, limits).map_err(|e| {
        // The byte caps (not a line's) are what --max-bundle-mib moves.
        named(if e.line.is_none() && e.reason.contains("over the limit") {
            format!("{e} (--max-bundle-mib raises it)")
        } else {
            e.to_string()
        })
    })?;
    Ok((bundle, compressed))
}

/// Writes `bundle` to `path` (zstd-compressed with `compress`) whole or not at all, so a
/// reader never sees half a bundle; returns the bytes written. Errors name the file.
pub fn write_file(path: &Path, bundle: &Bundle, compress: bool) -> Result<usize, String> {
    let named = |e: std::io::Error| format!("{}: {e}", path.display());
    let bytes = bundle.to_bytes(compress).map_err(named)?;
    ttdb_format::atomic_file::write(path, &bytes).map_err(named)?;
    Ok(bytes.len())
}

/// The digest of the fastest valid record of each workload key of `bundle`, in key order
/// (what `bundle import --verify` re-measures).
pub fn best_records(bundle: &Bundle) -> Vec<[u8; 16]> {
    let mut best: BTreeMap<String, (f64, [u8; 16])> = BTreeMap::new();
    for r in &bundle.records {
        let Ok(rec) = Record::parse(&r.line) else {
            continue;
        };
        if !rec.result.is_valid() {
            continue;
        }
        let c = rec.result.mean_cost();
        let d = crate::store::import::record_digest(&r.line);
        let e = best.entry(rec.task.workload_key).or_insert((c, d));
        if c < e.0 {
            *e = (c, d);
        }
    }
    best.into_values().map(|(_, digest)| digest).collect()
}

/// Imports a bundle read (and so checked) by [`format::read`], recording `path` as its
/// source. Signature policy is the caller's (see `sign::check`).
pub fn import(store: &mut Store, path: &Path, bundle: &Bundle) -> Result<BundleImport, StoreError> {
    import_with_progress(store, path, bundle, &|_| {})
}

/// [`import`], calling `progress(bytes)` as the records are stored: bytes of record lines
/// (each with its newline) done, out of [`record_bytes`].
pub fn import_with_progress(
    store: &mut Store,
    path: &Path,
    bundle: &Bundle,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<BundleImport, StoreError> {
    let records: Vec<IncomingRecord> = bundle
        .records
        .iter()
        .map(|r| IncomingRecord {
            line: &r.line,
            origins: r
                .meta
                .provenance
                .iter()
                .map(|p| Origin {
                    kind: p.kind.clone(),
                    source: p.source.clone(),
                    line: p.line.min(i64::MAX as u64) as i64,
                    host: p.host.clone(),
                })
                .collect(),
        })
        .collect();
    let hosts: Vec<HostRow> = bundle
        .manifest
        .hosts
        .iter()
        .map(|h| HostRow {
            fingerprint: h.fingerprint.clone(),
            cpu_model: h.cpu_model.clone(),
            isa_features: h.isa_features.clone(),
            llvm_cpu: h.llvm_cpu.clone(),
            cores: h.cores,
            ttdb_version: h.ttdb_version.clone(),
        })
        .collect();
    sql::import_bundle(store, path, &records, &hosts, progress)
}

/// Bytes of a bundle's record lines, each with its newline (the scale of
/// [`import_with_progress`]'s progress).
pub fn record_bytes(bundle: &Bundle) -> u64 {
    bundle.records.iter().map(|r| r.line.len() as u64 + 1).sum()
}

/// What an import would do with one workload's records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The workload key is new to this database.
    New,
    /// Every record is already here.
    Duplicate,
    /// A valid record faster than our best on the same target.
    Better,
    /// New records, none faster than ours.
    NotBetter,
}

/// One workload of a bundle, against this database.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WorkloadPlan {
    pub key: String,
    /// The workload's signature as this ttdb computes it from the key (what `export
    /// --workload` and `workloads` show), not the exporter's claim.
    pub signature: String,
    pub class: String,
    pub records: usize,
    pub new_records: usize,
    /// Best valid mean cost in the bundle, and ours, on one target compat class.
    pub theirs_s: Option<f64>,
    pub ours_s: Option<f64>,
    pub target_class: Option<String>,
    pub verdict: Verdict,
}

/// Per workload key of `bundle` (in key order), what importing it into `store` would do.
pub fn plan(store: &Store, bundle: &Bundle) -> Result<Vec<WorkloadPlan>, StoreError> {
    struct Group<'a> {
        class: &'a str,
        digests: Vec<[u8; 16]>,
        /// Best valid cost per target compat class.
        best: BTreeMap<String, f64>,
    }
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    for r in &bundle.records {
        // `format::read` parsed every record already; a bundle built in memory may not.
        let Ok(rec) = Record::parse(&r.line) else {
            continue;
        };
        let g = groups
            .entry(rec.task.workload_key.clone())
            .or_insert_with(|| Group {
                class: &r.meta.class,
                digests: Vec::new(),
                best: BTreeMap::new(),
            });
        g.digests.push(crate::store::import::record_digest(&r.line));
        if rec.result.is_valid() {
            let c = rec.result.mean_cost();
            let compat = NormalizedTarget::parse(&rec.task.target, None).compat();
            let e = g.best.entry(compat).or_insert(c);
            *e = e.min(c);
        }
    }
    let mut out = Vec::with_capacity(groups.len());
    for (key, g) in groups {
        let ours = sql::key_holdings(store, &key, &g.digests)?;
        // The target class where the bundle gains the most over us (costs on one class
        // compare, as TVM's ApplyHistoryBest compares them).
        let mut pick: Option<(String, f64, Option<f64>)> = None;
        for (t, &c) in &g.best {
            let o = ours.best_by_compat.get(t).copied();
            let gain = o.map_or(f64::INFINITY, |o| o / c);
            let better = pick
                .as_ref()
                .is_none_or(|(_, pc, po)| gain > po.map_or(f64::INFINITY, |po| po / pc));
            if better {
                pick = Some((t.clone(), c, o));
            }
        }
        let new_records = g.digests.len() - ours.present.min(g.digests.len());
        let verdict = if !ours.known {
            Verdict::New
        } else if new_records == 0 {
            Verdict::Duplicate
        } else if pick
            .as_ref()
            .is_some_and(|(_, c, o)| o.is_none_or(|o| *c < o))
        {
            Verdict::Better
        } else {
            Verdict::NotBetter
        };
        let signature = ttdb_format::ansor::WorkloadKey::parse(&key)
            .map(|k| ttdb_algo::recognize::signature_for(&k).0.sha256_hex())
            .unwrap_or_default();
        out.push(WorkloadPlan {
            signature,
            key,
            class: g.class.to_string(),
            records: g.digests.len(),
            new_records,
            theirs_s: pick.as_ref().map(|p| p.1),
            ours_s: pick.as_ref().and_then(|p| p.2),
            target_class: pick.map(|p| p.0),
            verdict,
        });
    }
    Ok(out)
}

/// The union of two bundles: records deduplicated by hash, provenance and hosts joined, free
/// text fields joined as sets. Commutative and idempotent; the result is unsigned.
pub fn merge(a: &Bundle, b: &Bundle) -> Bundle {
    let join = |x: &str, y: &str| {
        let mut v = vec![x, y];
        v.sort_unstable();
        v.dedup();
        v.retain(|s| !s.is_empty());
        v.join(" + ")
    };
    let (ma, mb) = (&a.manifest, &b.manifest);
    let creation = Creation {
        created_at: ma.created_at.clone().max(mb.created_at.clone()),
        creator: join(&ma.creator, &mb.creator),
        description: join(&ma.description, &mb.description),
    };
    let mut hosts = ma.hosts.clone();
    hosts.extend(mb.hosts.iter().cloned());
    let mut records = a.records.clone();
    records.extend(b.records.iter().cloned());
    Bundle::new(records, &hosts, creation)
}

/// The creation fields of a bundle written now by `creator` (the CLI gives `$USER`).
pub fn creation_now(creator: Option<String>, description: Option<String>) -> Creation {
    Creation {
        created_at: crate::store::now_rfc3339(),
        creator: creator.unwrap_or_default(),
        description: description.unwrap_or_default(),
    }
}
