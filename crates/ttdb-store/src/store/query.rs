//! Read queries: statistics, workload listings, best records, export.
use super::db::params;
use super::{Result, Store};
use serde::Serialize;
use ttdb_format::signature::WorkloadSignature;

#[derive(Clone, Debug, Serialize)]
pub struct ClassCount {
    pub op_class: String,
    pub workloads: i64,
    pub records: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TargetCount {
    pub target: String,
    pub compat: String,
    pub records: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Stats {
    pub schema_version: u32,
    pub sources: i64,
    pub records: i64,
    pub valid_records: i64,
    pub failed_records: i64,
    pub rejected_lines: i64,
    /// Distinct TVM workload keys.
    pub workload_keys: i64,
    /// Distinct normalized signatures (keys of several TVM eras may share one).
    pub signatures: i64,
    pub unknown_workloads: i64,
    pub classes: Vec<ClassCount>,
    pub targets: Vec<TargetCount>,
}

pub fn stats(store: &Store) -> Result<Stats> {
    let c = &store.db;
    let one = |sql: &str| -> Result<i64> { c.query_one(sql, params![], |r| r.get(0)) };
    let classes = c.query_map(
        "SELECT w.op_class, COUNT(DISTINCT w.id), COUNT(r.id) FROM workloads w
         LEFT JOIN records r ON r.workload_id = w.id GROUP BY w.op_class ORDER BY 3 DESC, 1",
        params![],
        |r| {
            Ok(ClassCount {
                op_class: r.get(0)?,
                workloads: r.get(1)?,
                records: r.get(2)?,
            })
        },
    )?;
    let targets = c.query_map(
        "SELECT t.target, t.num_cores, t.compat, COUNT(r.id) FROM targets t
         LEFT JOIN records r ON r.target_id = t.id GROUP BY t.id ORDER BY 4 DESC, 1",
        params![],
        |r| {
            let target: String = r.get(0)?;
            let cores: Option<i64> = r.get(1)?;
            let label = match cores {
                Some(n) => format!("{target} ({n} cores)"),
                None => target,
            };
            Ok(TargetCount {
                target: label,
                compat: r.get(2)?,
                records: r.get(3)?,
            })
        },
    )?;
    let records = one("SELECT COUNT(*) FROM records")?;
    let valid = one("SELECT COUNT(*) FROM records WHERE mean_cost IS NOT NULL")?;
    Ok(Stats {
        schema_version: store.schema_version()?,
        sources: one("SELECT COUNT(*) FROM sources")?,
        records,
        valid_records: valid,
        failed_records: records - valid,
        rejected_lines: one("SELECT COUNT(*) FROM rejected_lines")?,
        workload_keys: one("SELECT COUNT(*) FROM workloads")?,
        signatures: one("SELECT COUNT(DISTINCT signature) FROM workloads")?,
        unknown_workloads: one("SELECT COUNT(*) FROM workloads WHERE op_class = 'unknown'")?,
        classes,
        targets,
    })
}

/// One row of `ttdb workloads`: a signature on one target.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadRow {
    pub signature: String,
    pub op_class: String,
    pub inputs: Vec<Vec<i64>>,
    pub output: Vec<i64>,
    pub layout: String,
    pub target: String,
    /// TVM workload keys with this signature on this target.
    pub keys: i64,
    pub records: i64,
    pub valid_records: i64,
    /// Best mean cost in seconds among valid records.
    pub best_cost: Option<f64>,
}

pub fn workloads(store: &Store, class: Option<&str>) -> Result<Vec<WorkloadRow>> {
    // A signature determines its op class (it is a digest of the canonical form, class
    // included), so grouping by both groups by the signature.
    let rows = store.db.query_map(
        "SELECT w.signature, w.op_class, MIN(w.signature_json), t.target, t.num_cores,
                COUNT(DISTINCT w.id), COUNT(r.id), COUNT(r.mean_cost), MIN(r.mean_cost)
         FROM workloads w JOIN records r ON r.workload_id = w.id JOIN targets t ON t.id = r.target_id
         WHERE CAST(?1 AS TEXT) IS NULL OR w.op_class = ?1 OR w.op_class LIKE ?1 || '+%'
         GROUP BY w.signature, w.op_class, t.id
         ORDER BY w.op_class, w.signature, t.target",
        params![class],
        |r| {
        let sig_json: String = r.get(2)?;
        let target: String = r.get(3)?;
        let cores: Option<i64> = r.get(4)?;
        Ok((
            sig_json,
            WorkloadRow {
                signature: r.get(0)?,
                op_class: r.get(1)?,
                inputs: vec![],
                output: vec![],
                layout: String::new(),
                target: match cores {
                    Some(n) => format!("{target} ({n} cores)"),
                    None => target,
                },
                keys: r.get(5)?,
                records: r.get(6)?,
                valid_records: r.get(7)?,
                best_cost: r.get(8)?,
            },
        ))
    },
    )?;
    let mut out = Vec::new();
    for (sig_json, mut w) in rows {
        if let Ok(sig) = serde_json::from_str::<WorkloadSignature>(&sig_json) {
            w.inputs = sig.inputs;
            w.output = sig.output;
            w.layout = sig.layout;
        }
        out.push(w);
    }
    Ok(out)
}

/// The best valid record of a workload on targets of one compat class: a single range scan
/// of the `records_best` index in cost order, stopping at the first compatible target.
pub fn best_record(
    store: &Store,
    workload_id: i64,
    compat: &str,
) -> Result<Option<(i64, String, f64)>> {
    store.db.query_opt(
        "SELECT r.id, r.raw, r.mean_cost FROM records r JOIN targets t ON t.id = r.target_id
         WHERE r.workload_id = ?1 AND r.mean_cost IS NOT NULL AND t.compat = ?2
         ORDER BY r.mean_cost LIMIT 1",
        params![workload_id, compat],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
}

/// Which records `export` writes.
#[derive(Clone, Debug, Default)]
pub struct ExportFilter {
    /// Only the best valid record per (workload key, target), as TVM's `load_best_record`.
    pub best: bool,
    /// Only workloads whose signature starts with this (hex prefix).
    pub signature: Option<String>,
}

/// Whether some workload's signature starts with `prefix` (lowercase hex; anything else
/// matches nothing).
pub fn signature_prefix_exists(store: &Store, prefix: &str) -> Result<bool> {
    if !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(false);
    }
    Ok(store
        .db
        .query_opt(
            "SELECT 1 FROM workloads WHERE signature LIKE ?1 LIMIT 1",
            params![format!("{}%", prefix.to_ascii_lowercase())],
            |_| Ok(()),
        )?
        .is_some())
}

/// Calls `emit(raw_line)` for every selected record, in import order.
pub fn export(
    store: &Store,
    filter: &ExportFilter,
    mut emit: impl FnMut(&str) -> std::io::Result<()>,
) -> Result<usize> {
    let sig = filter.signature.as_deref().map(|s| format!("{s}%"));
    let sql = if filter.best {
        "SELECT raw FROM (
             SELECT r.raw, r.id, ROW_NUMBER() OVER (
                 PARTITION BY r.workload_id, r.target_id ORDER BY r.mean_cost, r.id) AS rank
             FROM records r JOIN workloads w ON w.id = r.workload_id
             WHERE r.mean_cost IS NOT NULL AND (CAST(?1 AS TEXT) IS NULL OR w.signature LIKE ?1)) ranked
         WHERE rank = 1 ORDER BY id"
    } else {
        "SELECT raw FROM records r JOIN workloads w ON w.id = r.workload_id
         WHERE CAST(?1 AS TEXT) IS NULL OR w.signature LIKE ?1 ORDER BY r.id"
    };
    let mut n = 0;
    store.db.query_each(sql, params![sig], |row| {
        let raw: String = row.get(0)?;
        emit(&raw).map_err(|error| super::StoreError::Io {
            path: "export output".into(),
            error,
        })?;
        n += 1;
        Ok(())
    })?;
    Ok(n)
}
