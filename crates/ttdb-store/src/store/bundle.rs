//! The SQL behind schedule bundles (`src/bundle/`): which records a bundle carries and where
//! they came from, importing a checked bundle in one transaction, what an import would do,
//! and the trusted signing keys.
use super::db::{params, Db};
use super::import::{import_in, in_import_transaction, record_digest, FileReport};
use super::{now_rfc3339, Result, Store};
use std::collections::HashMap;
use std::path::Path;

/// Which workloads' records an export takes.
#[derive(Clone, Debug)]
pub enum Selection {
    All,
    /// An op class, or a class prefix chain (`conv2d_nchwc` also takes `conv2d_nchwc+add`).
    Class(String),
    /// Workloads whose signature starts with this hex prefix.
    Signature(String),
    /// Exactly these TVM workload keys (a model's kernels).
    Keys(Vec<String>),
}

/// Where a record came from (see `schema/005_bundles.sql`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Origin {
    pub kind: String,
    pub source: String,
    /// The record's line in `source` (0: none).
    pub line: i64,
    /// Fingerprint of the measuring host, "" if none.
    pub host: String,
}

/// A record an export writes.
#[derive(Clone, Debug)]
pub struct ExportedRecord {
    pub raw: String,
    pub op_class: String,
    pub signature: String,
    pub origins: Vec<Origin>,
}

/// A row of the `hosts` table.
#[derive(Clone, Debug, PartialEq)]
pub struct HostRow {
    pub fingerprint: String,
    pub cpu_model: String,
    pub isa_features: Vec<String>,
    pub llvm_cpu: String,
    pub cores: usize,
    pub ttdb_version: String,
}

/// A measurement kind as a bundle names it (`apply` chose among transferred schedules).
fn bundle_kind(measurement_kind: &str) -> &str {
    match measurement_kind {
        "apply" => "transfer",
        k => k,
    }
}

/// A source path without the directories of the machine that imported it: the file and
/// its folder (`tvm_ansor_bench_nchwc/resnet_50.json`).
fn short_source(path: &str) -> String {
    let parts: Vec<&str> = path.rsplit(['/', '\\']).take(2).collect();
    parts.into_iter().rev().collect::<Vec<_>>().join("/")
}

/// The selected records (with `best`, only the best valid one per workload and target;
/// otherwise all, failed ones included) and their origins, in record id order.
pub fn export_records(store: &Store, sel: &Selection, best: bool) -> Result<Vec<ExportedRecord>> {
    let rank = if best {
        "r.mean_cost IS NOT NULL AND r.id = (SELECT r2.id FROM records r2 WHERE r2.workload_id = r.workload_id
             AND r2.target_id = r.target_id AND r2.mean_cost IS NOT NULL ORDER BY r2.mean_cost, r2.id LIMIT 1)"
    } else {
        "1 = 1"
    };
    let select = |filter: &str, arg: Option<&str>| {
        let sql = format!(
            "SELECT r.id, r.raw, w.op_class, w.signature, s.kind, s.path, r.line_no
             FROM records r JOIN workloads w ON w.id = r.workload_id JOIN sources s ON s.id = r.source_id
             WHERE {filter} AND {rank} ORDER BY r.id"
        );
        store.db.query_map(&sql, params![arg], |r| {
            Ok((
                r.get::<i64>(0)?,
                ExportedRecord {
                    raw: r.get(1)?,
                    op_class: r.get(2)?,
                    signature: r.get(3)?,
                    origins: Vec::new(),
                },
                r.get::<String>(4)?,
                r.get::<String>(5)?,
                r.get::<i64>(6)?,
            ))
        })
    };
    let mut out: Vec<(i64, ExportedRecord, String, String, i64)> = match sel {
        Selection::All => select("CAST(?1 AS TEXT) IS NULL", None)?,
        Selection::Class(c) => select(
            "(w.op_class = ?1 OR w.op_class LIKE ?1 || '+%')",
            Some(c.as_str()),
        )?,
        Selection::Signature(s) => select("w.signature LIKE ?1", Some(format!("{s}%").as_str()))?,
        // One query per key (a model has tens of kernels), merged back into id order.
        Selection::Keys(keys) => {
            let mut all = Vec::new();
            for key in keys {
                all.extend(select("w.key = ?1", Some(key.as_str()))?);
            }
            all.sort_by_key(|row| row.0);
            all.dedup_by_key(|row| row.0);
            all
        }
    };
    let mut measured = origins_by_record(
        store,
        "SELECT m.record_id, m.kind, s.path, r.line_no, h.fingerprint FROM measurements m
         JOIN hosts h ON h.id = m.host_id JOIN records r ON r.id = m.record_id
         JOIN sources s ON s.id = r.source_id",
    )?;
    let mut carried = origins_by_record(
        store,
        "SELECT record_id, kind, source, line, host FROM record_origins",
    )?;
    for (id, rec, source_kind, path, line) in &mut out {
        if source_kind == "ansor_log" {
            rec.origins.push(Origin {
                kind: "imported".into(),
                source: short_source(path),
                line: *line,
                host: String::new(),
            });
        }
        for o in measured.remove(id).unwrap_or_default() {
            rec.origins.push(Origin {
                kind: bundle_kind(&o.kind).to_string(),
                ..o
            });
        }
        rec.origins.extend(carried.remove(id).unwrap_or_default());
        rec.origins.sort();
        rec.origins.dedup();
    }
    Ok(out.into_iter().map(|(_, r, _, _, _)| r).collect())
}

fn origins_by_record(store: &Store, sql: &str) -> Result<HashMap<i64, Vec<Origin>>> {
    let mut map: HashMap<i64, Vec<Origin>> = HashMap::new();
    store.db.query_each(sql, params![], |r| {
        let o = Origin {
            kind: r.get(1)?,
            source: r.get(2)?,
            line: r.get(3)?,
            host: r.get(4)?,
        };
        map.entry(r.get(0)?).or_default().push(o);
        Ok(())
    })?;
    Ok(map)
}

/// The `hosts` rows with these fingerprints, in fingerprint order.
pub fn hosts(store: &Store, fingerprints: &[&str]) -> Result<Vec<HostRow>> {
    let mut out = Vec::new();
    for fp in fingerprints {
        out.extend(store.db.query_opt(
            "SELECT fingerprint, cpu_model, isa_features, llvm_cpu, num_cores, ttdb_version FROM hosts
             WHERE fingerprint = ?1",
            params![fp],
            |r| {
                Ok(HostRow {
                    fingerprint: r.get(0)?,
                    cpu_model: r.get(1)?,
                    isa_features: r
                        .get::<String>(2)?
                        .split_whitespace()
                        .map(str::to_string)
                        .collect(),
                    llvm_cpu: r.get(3)?,
                    cores: r.get::<i64>(4)?.max(0) as usize,
                    ttdb_version: r.get(5)?,
                })
            },
        )?);
    }
    out.sort_by(|a, b| a.fingerprint.cmp(&b.fingerprint));
    out.dedup_by(|a, b| a.fingerprint == b.fingerprint);
    Ok(out)
}

/// A record of a checked bundle, for [`import_bundle`].
pub struct IncomingRecord<'a> {
    pub line: &'a str,
    pub origins: Vec<Origin>,
}

/// What importing a bundle did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct BundleImport {
    #[serde(flatten)]
    pub file: FileReport,
    /// Provenance entries new to this database.
    pub new_origins: usize,
    pub new_hosts: usize,
}

/// Imports a bundle's records, hosts and provenance in one transaction (idempotent: records
/// are deduplicated by digest, provenance and hosts by value). `path` names the bundle in
/// the `sources` table. `progress(bytes)` follows the records' text as it is imported.
pub fn import_bundle(
    store: &mut Store,
    path: &Path,
    records: &[IncomingRecord],
    hosts: &[HostRow],
    progress: &(dyn Fn(u64) + Sync),
) -> Result<BundleImport> {
    let mut text = String::new();
    for r in records {
        text.push_str(r.line);
        text.push('\n');
    }
    in_import_transaction(store, |tx| {
        let file = import_in(tx, path, text.as_bytes(), "bundle", progress)?;
        let new_hosts = insert_hosts(tx, hosts)?;
        let mut new_origins = 0;
        for r in records {
            let digest = record_digest(r.line);
            let Some(id) = tx.query_opt(
                "SELECT id FROM records WHERE digest = ?1",
                params![digest],
                |row| row.get::<i64>(0),
            )?
            else {
                continue; // rejected by the import (kept in rejected_lines)
            };
            for o in &r.origins {
                new_origins += tx.execute(
                    "INSERT INTO record_origins (record_id, kind, source, line, host) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT DO NOTHING",
                    params![id, o.kind, o.source, o.line, o.host],
                )?;
            }
        }
        Ok(BundleImport {
            file,
            new_origins,
            new_hosts,
        })
    })
    .and_then(|b| {
        super::import::refresh_statistics(store, b.file.inserted)?;
        Ok(b)
    })
}

fn insert_hosts(tx: &Db, hosts: &[HostRow]) -> Result<usize> {
    let mut n = 0;
    for h in hosts {
        n += tx.execute(
            "INSERT INTO hosts (fingerprint, cpu_model, isa_features, llvm_cpu, num_cores, ttdb_version)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
            params![
                h.fingerprint,
                h.cpu_model,
                h.isa_features.join(" "),
                h.llvm_cpu,
                h.cores,
                h.ttdb_version
            ],
        )?;
    }
    Ok(n)
}

/// What this database holds of one workload key: whether the key is known, how many of the
/// given record digests are present, and the best valid cost per target compat class.
#[derive(Clone, Debug, Default)]
pub struct KeyHoldings {
    pub known: bool,
    pub present: usize,
    /// Best valid mean cost per target compat class (`llvm/cpu`).
    pub best_by_compat: HashMap<String, f64>,
}

pub fn key_holdings(store: &Store, key: &str, digests: &[[u8; 16]]) -> Result<KeyHoldings> {
    let id: Option<i64> = store.db.query_opt(
        "SELECT id FROM workloads WHERE key = ?1",
        params![key],
        |r| r.get(0),
    )?;
    let mut out = KeyHoldings::default();
    for d in digests {
        out.present += store
            .db
            .query_opt(
                "SELECT 1 FROM records WHERE digest = ?1",
                params![d],
                |_| Ok(()),
            )?
            .is_some() as usize;
    }
    let Some(id) = id else { return Ok(out) };
    out.known = true;
    out.best_by_compat = store
        .db
        .query_map(
            "SELECT t.compat, MIN(r.mean_cost) FROM records r JOIN targets t ON t.id = r.target_id
             WHERE r.workload_id = ?1 AND r.mean_cost IS NOT NULL GROUP BY t.compat",
            params![id],
            |r| Ok((r.get::<String>(0)?, r.get::<f64>(1)?)),
        )?
        .into_iter()
        .collect();
    Ok(out)
}

/// A trusted signing key.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TrustedKey {
    pub name: String,
    pub public_key: String,
    pub added_at: String,
}

/// Trusts `public_key` (64 hex digits, already validated) under `name`. Fails when the name
/// or the key is already trusted.
pub fn trust_key(store: &mut Store, name: &str, public_key: &str) -> Result<()> {
    let n = store.db.execute(
        "INSERT INTO trusted_keys (public_key, name, added_at) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
        params![public_key, name, now_rfc3339()],
    )?;
    if n == 0 {
        return Err(super::StoreError::Other(format!(
            "a trusted key already has the name `{name}` or is {public_key}"
        )));
    }
    Ok(())
}

pub fn trusted_keys(store: &Store) -> Result<Vec<TrustedKey>> {
    store.db.query_map(
        "SELECT name, public_key, added_at FROM trusted_keys ORDER BY name",
        params![],
        |r| {
            Ok(TrustedKey {
                name: r.get(0)?,
                public_key: r.get(1)?,
                added_at: r.get(2)?,
            })
        },
    )
}

/// Removes the trusted key named `name_or_key` (a name or the key's hex). Returns whether
/// one was removed.
pub fn untrust_key(store: &mut Store, name_or_key: &str) -> Result<bool> {
    Ok(store.db.execute(
        "DELETE FROM trusted_keys WHERE name = ?1 OR public_key = ?1",
        params![name_or_key],
    )? > 0)
}

/// The valid records with these digests, as `lookup::best_records` gives them
/// (id, raw line, signature, op class, mean cost), for `bundle import --verify`.
pub fn valid_records_by_digest(
    store: &Store,
    digests: &[[u8; 16]],
) -> Result<Vec<super::lookup::BestRecord>> {
    let mut out = Vec::new();
    for d in digests {
        out.extend(store.db.query_opt(
            "SELECT r.id, r.raw, w.signature, w.op_class, r.mean_cost FROM records r
             JOIN workloads w ON w.id = r.workload_id WHERE r.digest = ?1 AND r.mean_cost IS NOT NULL",
            params![d],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )?);
    }
    Ok(out)
}
