//! Database side of matching: exact records by signature, the workloads of a class, the
//! nearest of them by shape, and explanations when nothing matches.
use super::{MatchOptions, Rejection};
use crate::signature::WorkloadSignature;
use crate::store::{Result, Store};
use rusqlite::params;
use serde::Serialize;

/// A stored record that may be transferred.
#[derive(Clone, Debug, Serialize)]
pub struct SourceRecord {
    pub record_id: i64,
    pub workload_id: i64,
    /// The TVM workload key the record was tuned for.
    pub key: String,
    pub signature: String,
    pub op_class: String,
    #[serde(skip)]
    pub raw: String,
    /// Mean cost (seconds) where it was measured.
    pub mean_cost: f64,
    pub target: String,
    /// Provenance: the file it was imported from and its line.
    pub source_path: String,
    pub line: i64,
    /// Output shape of the source workload (for GFLOP/s normalisation).
    #[serde(skip)]
    pub source_flops: Option<f64>,
}

impl SourceRecord {
    /// `resnet_50.best.json:12 (workload 3f2a86ddfc01)`.
    pub fn label(&self) -> String {
        let file = std::path::Path::new(&self.source_path)
            .file_name()
            .map_or_else(
                || self.source_path.clone(),
                |f| f.to_string_lossy().into_owned(),
            );
        format!(
            "{file}:{} (workload {})",
            self.line,
            &self.signature[..12.min(self.signature.len())]
        )
    }
}

const SELECT_RECORDS: &str = "SELECT r.id, w.id, w.key, w.signature, w.op_class, r.raw, r.mean_cost, t.target, s.path, r.line_no
     FROM records r JOIN workloads w ON w.id = r.workload_id JOIN targets t ON t.id = r.target_id
     JOIN sources s ON s.id = r.source_id";

fn source_of(r: &rusqlite::Row) -> rusqlite::Result<SourceRecord> {
    Ok(SourceRecord {
        record_id: r.get(0)?,
        workload_id: r.get(1)?,
        key: r.get(2)?,
        signature: r.get(3)?,
        op_class: r.get(4)?,
        raw: r.get(5)?,
        mean_cost: r.get(6)?,
        target: r.get(7)?,
        source_path: r.get(8)?,
        line: r.get(9)?,
        source_flops: None,
    })
}

/// The best `records_per_workload` valid records of every workload with signature `hash`.
pub fn exact_records(store: &Store, hash: &str, opts: &MatchOptions) -> Result<Vec<SourceRecord>> {
    let mut out = Vec::new();
    let ids: Vec<i64> = store
        .conn
        .prepare_cached("SELECT id FROM workloads WHERE signature = ?1")?
        .query_map([hash], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for id in ids {
        out.extend(best_records_of(store, id, opts, opts.records_per_workload)?);
    }
    Ok(out)
}

/// The best `n` valid records of one workload on compatible targets (the `records_best`
/// index in cost order).
pub fn best_records_of(
    store: &Store,
    workload_id: i64,
    opts: &MatchOptions,
    n: usize,
) -> Result<Vec<SourceRecord>> {
    let sql = format!(
        "{SELECT_RECORDS} WHERE r.workload_id = ?1 AND r.mean_cost IS NOT NULL AND t.compat = ?2 ORDER BY r.mean_cost LIMIT ?3"
    );
    let mut q = store.conn.prepare_cached(&sql)?;
    let rows = q.query_map(params![workload_id, opts.compat, n as i64], source_of)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// A workload of a class that has valid records on compatible targets.
#[derive(Clone, Debug)]
pub struct ClassWorkload {
    pub id: i64,
    pub signature: String,
    pub key: ShapeKey,
}

/// What the shape distance compares, precomputed once per workload: the ranks of the
/// tensors, the log of every dim, the attributes and layout.
#[derive(Clone, Debug, PartialEq)]
pub struct ShapeKey {
    ranks: Vec<usize>,
    log_dims: Vec<f64>,
    attrs: Vec<(String, String)>,
    layout: String,
    dtype: String,
}

impl ShapeKey {
    pub fn of(sig: &WorkloadSignature) -> ShapeKey {
        let tensors = sig.inputs.iter().chain([&sig.output]);
        ShapeKey {
            ranks: tensors.clone().map(Vec::len).collect(),
            log_dims: tensors.flatten().map(|&d| (d.max(1) as f64).ln()).collect(),
            attrs: sig
                .attrs
                .iter()
                .map(|(k, v)| (k.clone(), v.to_string()))
                .collect(),
            layout: sig.layout.clone(),
            dtype: sig.dtype.clone(),
        }
    }

    /// Sum of |ln(a/b)| over all dims, plus 2 per differing attribute and 1 for another
    /// layout; None when tensor ranks differ (another DAG structure).
    pub fn distance(&self, other: &ShapeKey) -> Option<f64> {
        if self.ranks != other.ranks || self.dtype != other.dtype {
            return None;
        }
        let mut d: f64 = self
            .log_dims
            .iter()
            .zip(&other.log_dims)
            .map(|(a, b)| (a - b).abs())
            .sum();
        // Both attribute lists are sorted by key (BTreeMap order).
        for (k, v) in &self.attrs {
            if other
                .attrs
                .binary_search_by(|(ok, _)| ok.cmp(k))
                .map_or(true, |i| &other.attrs[i].1 != v)
            {
                d += 2.0;
            }
        }
        if self.layout != other.layout {
            d += 1.0;
        }
        Some(d)
    }
}

pub fn class_workloads(store: &Store, op_class: &str, compat: &str) -> Result<Vec<ClassWorkload>> {
    let mut q = store.conn.prepare_cached(
        "SELECT w.id, w.signature, w.signature_json FROM workloads w WHERE w.op_class = ?1 AND EXISTS (
             SELECT 1 FROM records r JOIN targets t ON t.id = r.target_id
             WHERE r.workload_id = w.id AND r.mean_cost IS NOT NULL AND t.compat = ?2)",
    )?;
    let rows = q.query_map(params![op_class, compat], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, signature, json) = row?;
        if let Ok(sig) = serde_json::from_str::<WorkloadSignature>(&json) {
            out.push(ClassWorkload {
                id,
                signature,
                key: ShapeKey::of(&sig),
            });
        }
    }
    Ok(out)
}

/// The `n` workloads of `list` nearest to `key` (its own signature excluded: that is the
/// exact tier).
pub fn nearest<'l>(
    list: &'l [ClassWorkload],
    key: &ShapeKey,
    hash: &str,
    n: usize,
) -> Vec<&'l ClassWorkload> {
    let mut scored: Vec<(f64, &ClassWorkload)> = list
        .iter()
        .filter(|w| w.signature != hash)
        .filter_map(|w| key.distance(&w.key).map(|d| (d, w)))
        .collect();
    scored.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.id.cmp(&b.1.id)));
    scored.into_iter().take(n).map(|(_, w)| w).collect()
}

/// Why a kernel has no candidate: the closest things the database does hold.
pub fn explain_none(
    store: &Store,
    sig: &WorkloadSignature,
    opts: &MatchOptions,
) -> Result<Vec<Rejection>> {
    let mut out = Vec::new();
    let anchor = sig.op_class.split('+').next().unwrap_or("");
    // Same anchor, another epilogue: a different DAG structure.
    let mut q = store.conn.prepare_cached(
        "SELECT op_class, COUNT(*) FROM workloads WHERE (op_class = ?1 OR op_class LIKE ?1 || '+%') AND op_class != ?2
         GROUP BY op_class ORDER BY 2 DESC LIMIT 3",
    )?;
    for row in q.query_map(params![anchor, sig.op_class], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
    })? {
        let (class, n) = row?;
        out.push(Rejection {
            source: format!("{n} workload(s) of class {class}"),
            reason: format!(
                "wrong class: {class} is not {} (another fused epilogue, another DAG)",
                sig.op_class
            ),
        });
    }
    // Same class, but only on incompatible targets or only failed measurements: per target
    // class, does any workload of the class have a record there, and a valid one? (Index
    // seeks per workload, never a scan of the class's records.)
    let compats: Vec<String> = store
        .conn
        .prepare_cached("SELECT DISTINCT compat FROM targets")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut any = store.conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM workloads w JOIN records r ON r.workload_id = w.id JOIN targets t ON t.id = r.target_id
                        WHERE w.op_class = ?1 AND t.compat = ?2)",
    )?;
    let mut valid = store.conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM workloads w JOIN records r ON r.workload_id = w.id JOIN targets t ON t.id = r.target_id
                        WHERE w.op_class = ?1 AND t.compat = ?2 AND r.mean_cost IS NOT NULL)",
    )?;
    for compat in compats {
        if !any.query_row(params![sig.op_class, compat], |r| r.get::<_, bool>(0))? {
            continue;
        }
        if compat != opts.compat {
            out.push(Rejection {
                source: format!("records of class {} on {compat}", sig.op_class),
                reason: format!("incompatible target: {compat}, not {}", opts.compat),
            });
        } else if !valid.query_row(params![sig.op_class, compat], |r| r.get::<_, bool>(0))? {
            out.push(Rejection {
                source: format!("records of class {} on {compat}", sig.op_class),
                reason:
                    "every measurement of this class failed (error_no != 0): none can be chosen"
                        .into(),
            });
        }
    }
    if out.is_empty() {
        out.push(Rejection {
            source: "-".into(),
            reason: format!("the database holds no workload of class {}", sig.op_class),
        });
    }
    Ok(out)
}
