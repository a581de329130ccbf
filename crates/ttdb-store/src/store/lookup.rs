//! The queries matching and refinement ask of the database: stored records with their
//! provenance, the workloads of a class, and what the database holds of a class when
//! nothing matches. (The ranking itself lives in `ttdb_tuning::matcher`.)
use super::db::{params, Row};
use super::target::NormalizedTarget;
use super::{Result, Store};
use serde::Serialize;
use ttdb_format::host::IsaRequirement;
use ttdb_format::signature::WorkloadSignature;

/// A stored record that may be transferred or refined.
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
    /// ISA flags of the host that measured it, when ttdb did (`hosts.isa_features`).
    pub measured_isa: Option<String>,
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

    /// The vector ISA its timing needs: the measuring host's widest, for ttdb's own
    /// measurements; else what the target's `-mcpu`/`-mattr` imply.
    pub fn isa_requirement(&self) -> IsaRequirement {
        match &self.measured_isa {
            Some(flags) => IsaRequirement::of_host_flags(flags.split_whitespace()),
            None => NormalizedTarget::parse(&self.target, None).isa_requirement(),
        }
    }
}

/// A record that arrived in a bundle names the file and line the bundle says it was first
/// read from (its first provenance entry), and the ISA of the host that measured it, so
/// matching reads the same after a bundle round trip as in the database it was exported
/// from.
const SELECT_RECORDS: &str = "SELECT r.id, w.id, w.key, w.signature, w.op_class, r.raw, r.mean_cost, t.target,
            CASE WHEN s.kind = 'bundle' THEN COALESCE((SELECT o.source FROM record_origins o
                 WHERE o.record_id = r.id ORDER BY o.source, o.line LIMIT 1), s.path) ELSE s.path END,
            CASE WHEN s.kind = 'bundle' THEN COALESCE((SELECT o.line FROM record_origins o
                 WHERE o.record_id = r.id ORDER BY o.source, o.line LIMIT 1), r.line_no) ELSE r.line_no END,
            COALESCE((SELECT h.isa_features FROM measurements m JOIN hosts h ON h.id = m.host_id WHERE m.record_id = r.id LIMIT 1),
                     (SELECT h.isa_features FROM record_origins o JOIN hosts h ON h.fingerprint = o.host
                      WHERE o.record_id = r.id LIMIT 1))
     FROM records r JOIN workloads w ON w.id = r.workload_id JOIN targets t ON t.id = r.target_id
     JOIN sources s ON s.id = r.source_id";

fn source_of(r: &Row) -> Result<SourceRecord> {
    Ok(SourceRecord {
        record_id: r.get(0)?,
        workload_id: r.get(1)?,
        key: r.get(2)?,
        signature: r.get(3)?,
        op_class: r.get(4)?,
        raw: r.get(5)?,
        // NULL for records that can never be chosen (only `unrankable_records` reads them).
        mean_cost: r.get::<Option<f64>>(6)?.unwrap_or(f64::NAN),
        target: r.get(7)?,
        source_path: r.get(8)?,
        line: r.get(9)?,
        source_flops: None,
        measured_isa: r.get(10)?,
    })
}

/// The ids of the workloads with signature `hash` (one per distinct workload key).
pub fn workloads_with_signature(store: &Store, hash: &str) -> Result<Vec<i64>> {
    store.db.query_map(
        "SELECT id FROM workloads WHERE signature = ?1",
        params![hash],
        |r| r.get(0),
    )
}

/// The best `n` valid records of one workload on targets of compat class `compat` (the
/// `records_best` index in cost order).
pub fn best_records_of(
    store: &Store,
    workload_id: i64,
    compat: &str,
    n: usize,
) -> Result<Vec<SourceRecord>> {
    let sql = format!(
        "{SELECT_RECORDS} WHERE r.workload_id = ?1 AND r.mean_cost IS NOT NULL AND t.compat = ?2 ORDER BY r.mean_cost LIMIT ?3"
    );
    store
        .db
        .query_map(&sql, params![workload_id, compat, n], source_of)
}

/// Records of one workload on targets of `compat` whose measurement succeeded (error_no 0)
/// but whose costs are not plausible times, so they can never be chosen: the first `n` in
/// file order, and how many there are.
pub fn unrankable_records(
    store: &Store,
    workload_id: i64,
    compat: &str,
    n: usize,
) -> Result<(Vec<SourceRecord>, usize)> {
    let filter = "r.workload_id = ?1 AND r.mean_cost IS NULL AND r.error_no = 0 AND t.compat = ?2";
    let sql = format!("{SELECT_RECORDS} WHERE {filter} ORDER BY r.id LIMIT ?3");
    let first = store
        .db
        .query_map(&sql, params![workload_id, compat, n], source_of)?;
    let count: i64 = store.db.query_one(
        &format!(
            "SELECT COUNT(*) FROM records r JOIN targets t ON t.id = r.target_id WHERE {filter}"
        ),
        params![workload_id, compat],
        |r| r.get(0),
    )?;
    Ok((first, count as usize))
}

/// Per target, the number of records of the sources with these file digests (what an
/// import of those files holds): (target string, records).
pub fn record_targets_of_sources(store: &Store, sha256s: &[&str]) -> Result<Vec<(String, i64)>> {
    let mut out = Vec::new();
    for sha in sha256s {
        out.extend(store.db.query_map(
            "SELECT t.target, COUNT(*) FROM records r JOIN targets t ON t.id = r.target_id
             WHERE r.source_id = (SELECT id FROM sources WHERE sha256 = ?1) GROUP BY t.id",
            params![sha],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?);
    }
    Ok(out)
}

/// The workloads whose key hash (`key_head`) is `head`: (id, raw key).
pub fn workloads_with_key_head(store: &Store, head: &str) -> Result<Vec<(i64, String)>> {
    store.db.query_map(
        "SELECT id, key FROM workloads WHERE key_head = ?1 ORDER BY id",
        params![head],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// The best valid record of one workload on each target of compat class `compat`, in
/// cost order (each target's best, so a caller can prefer targets over cost).
pub fn best_record_per_target(
    store: &Store,
    workload_id: i64,
    compat: &str,
) -> Result<Vec<SourceRecord>> {
    let sql = format!(
        "{SELECT_RECORDS} WHERE r.id IN (
             SELECT id FROM (
                 SELECT r.id, ROW_NUMBER() OVER (PARTITION BY r.target_id ORDER BY r.mean_cost, r.id) AS rank
                 FROM records r JOIN targets t ON t.id = r.target_id
                 WHERE r.workload_id = ?1 AND r.mean_cost IS NOT NULL AND t.compat = ?2) ranked
             WHERE rank = 1)
         ORDER BY r.mean_cost, r.id"
    );
    store
        .db
        .query_map(&sql, params![workload_id, compat], source_of)
}

/// The valid record `id`, if there is one.
pub fn valid_record(store: &Store, id: i64) -> Result<Option<SourceRecord>> {
    let sql = format!("{SELECT_RECORDS} WHERE r.id = ?1 AND r.mean_cost IS NOT NULL");
    Ok(store
        .db
        .query_map(&sql, params![id], source_of)?
        .into_iter()
        .next())
}

/// A valid record of a workload that ttdb measured and verified, and a machine it was
/// measured on.
#[derive(Clone, Debug)]
pub struct VerifiedOn {
    pub record_id: i64,
    /// Its cost (seconds): the mean of its samples, taken on that machine.
    pub mean_cost: f64,
    pub llvm_cpu: String,
    /// Space-separated, as `hosts.isa_features`.
    pub isa_features: String,
    pub cores: usize,
}

/// The valid records of one workload that ttdb verified, once per measuring machine,
/// cheapest first.
pub fn verified_records(store: &Store, workload_id: i64) -> Result<Vec<VerifiedOn>> {
    store.db.query_map(
        "SELECT DISTINCT r.id, r.mean_cost, h.llvm_cpu, h.isa_features, h.num_cores
         FROM records r JOIN measurements m ON m.record_id = r.id JOIN hosts h ON h.id = m.host_id
         WHERE r.workload_id = ?1 AND r.mean_cost IS NOT NULL AND m.verified = 1
         ORDER BY r.mean_cost, r.id",
        params![workload_id],
        |r| {
            Ok(VerifiedOn {
                record_id: r.get(0)?,
                mean_cost: r.get(1)?,
                llvm_cpu: r.get(2)?,
                isa_features: r.get(3)?,
                cores: r.get::<i64>(4)? as usize,
            })
        },
    )
}

/// How many records one workload has on targets of compat class `compat`, failed ones
/// included.
pub fn record_count(store: &Store, workload_id: i64, compat: &str) -> Result<i64> {
    store.db.query_one(
        "SELECT COUNT(*) FROM records r JOIN targets t ON t.id = r.target_id WHERE r.workload_id = ?1 AND t.compat = ?2",
        params![workload_id, compat],
        |r| r.get(0),
    )
}

/// The targets of compat class `compat`: (id, target string).
pub fn targets_of(store: &Store, compat: &str) -> Result<Vec<(i64, String)>> {
    store.db.query_map(
        "SELECT id, target FROM targets WHERE compat = ?1 ORDER BY id",
        params![compat],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// The best `n` valid records of one workload on the targets `target_ids`, in cost order.
pub fn best_records_on(
    store: &Store,
    workload_id: i64,
    target_ids: &[i64],
    n: usize,
) -> Result<Vec<SourceRecord>> {
    if target_ids.is_empty() {
        return Ok(vec![]);
    }
    let ids = target_ids
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let sql = format!(
        "{SELECT_RECORDS} WHERE r.workload_id = ?1 AND r.mean_cost IS NOT NULL AND r.target_id IN ({ids})
         ORDER BY r.mean_cost LIMIT ?2"
    );
    store.db.query_map(&sql, params![workload_id, n], source_of)
}

/// The workloads of `op_class` with a valid record on a `compat` target: (id, signature,
/// its canonical form). Workloads whose stored signature does not parse are skipped.
pub fn class_workloads(
    store: &Store,
    op_class: &str,
    compat: &str,
) -> Result<Vec<(i64, String, WorkloadSignature)>> {
    // `LIMIT 1 OFFSET 0` keeps the EXISTS a per-workload probe of `records_best` on
    // PostgreSQL: as a semi-join its planner hashed every valid record of the compat class
    // first (0.5-0.85 s per class at 1M records; 50 ms as a probe). SQLite probes either way.
    let rows = store.db.query_map(
        "SELECT w.id, w.signature, w.signature_json FROM workloads w WHERE w.op_class = ?1 AND EXISTS (
             SELECT 1 FROM records r JOIN targets t ON t.id = r.target_id
             WHERE r.workload_id = w.id AND r.mean_cost IS NOT NULL AND t.compat = ?2 LIMIT 1 OFFSET 0)",
        params![op_class, compat],
        |r| Ok((r.get::<i64>(0)?, r.get::<String>(1)?, r.get::<String>(2)?)),
    )?;
    let mut out = Vec::new();
    for (id, signature, json) in rows {
        if let Ok(sig) = serde_json::from_str::<WorkloadSignature>(&json) {
            out.push((id, signature, sig));
        }
    }
    Ok(out)
}

/// Up to three classes with the anchor `anchor` other than `except` (another fused
/// epilogue), with their workload counts, most workloads first.
pub fn sibling_classes(store: &Store, anchor: &str, except: &str) -> Result<Vec<(String, i64)>> {
    store.db.query_map(
        "SELECT op_class, COUNT(*) FROM workloads WHERE (op_class = ?1 OR op_class LIKE ?1 || '+%') AND op_class != ?2
         GROUP BY op_class ORDER BY 2 DESC, 1 LIMIT 3",
        params![anchor, except],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// Per target compat class that holds records of `op_class`: (compat, whether any of them
/// is valid). Index seeks per workload, never a scan of the class's records.
pub fn class_presence(store: &Store, op_class: &str) -> Result<Vec<(String, bool)>> {
    let compats: Vec<String> = store.db.query_map(
        "SELECT DISTINCT compat FROM targets ORDER BY compat",
        params![],
        |r| r.get(0),
    )?;
    // Per-workload probes, kept so on PostgreSQL by `LIMIT 1 OFFSET 0` (see `class_workloads`):
    // as a join its planner scanned every record of the compat class (0.84 s at 1M records
    // for a class with none; 36 ms as probes).
    let any = "SELECT EXISTS (SELECT 1 FROM workloads w WHERE w.op_class = ?1 AND EXISTS (
                   SELECT 1 FROM records r JOIN targets t ON t.id = r.target_id
                   WHERE r.workload_id = w.id AND t.compat = ?2 LIMIT 1 OFFSET 0))";
    let valid = "SELECT EXISTS (SELECT 1 FROM workloads w WHERE w.op_class = ?1 AND EXISTS (
                     SELECT 1 FROM records r JOIN targets t ON t.id = r.target_id
                     WHERE r.workload_id = w.id AND t.compat = ?2 AND r.mean_cost IS NOT NULL LIMIT 1 OFFSET 0))";
    let mut out = Vec::new();
    for compat in compats {
        if store
            .db
            .query_one(any, params![op_class, compat], |r| r.get::<bool>(0))?
        {
            let ok = store
                .db
                .query_one(valid, params![op_class, compat], |r| r.get::<bool>(0))?;
            out.push((compat, ok));
        }
    }
    Ok(out)
}

/// The op class of each workload id (in order).
pub fn workload_classes(store: &Store, ids: impl IntoIterator<Item = i64>) -> Result<Vec<String>> {
    ids.into_iter()
        .map(|id| {
            store.db.query_one(
                "SELECT op_class FROM workloads WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
        })
        .collect()
}

/// (record id, raw line, signature, op class, logged mean cost in seconds).
pub type BestRecord = (i64, String, String, String, f64);

/// Whose records [`best_records`] ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordOrigin {
    /// Imported from logs and bundles.
    Imported,
    /// Measured by ttdb itself (`tune`, `refine`, `apply`).
    Measured,
}

/// The best valid CPU record of `origin` of each workload, optionally only workloads whose
/// signature starts with `signature_prefix` or of class `class` (or a class prefix chain
/// like `conv2d_nhwc+add`), in signature order, at most `limit`: [`BestRecord`] rows.
pub fn best_records(
    store: &Store,
    origin: RecordOrigin,
    signature_prefix: Option<&str>,
    class: Option<&str>,
    limit: Option<usize>,
) -> Result<Vec<BestRecord>> {
    let sig = signature_prefix.map(|s| format!("{s}%"));
    let source = match origin {
        RecordOrigin::Imported => "s.kind != 'ttdb_measure'",
        RecordOrigin::Measured => "s.kind = 'ttdb_measure'",
    };
    let sql = format!(
        "SELECT id, raw, signature, op_class, mean_cost FROM (
             SELECT r.id, r.raw, w.signature, w.op_class, r.mean_cost, ROW_NUMBER() OVER (
                 PARTITION BY r.workload_id ORDER BY r.mean_cost, r.id) AS rank
             FROM records r JOIN workloads w ON w.id = r.workload_id JOIN targets t ON t.id = r.target_id
             JOIN sources s ON s.id = r.source_id
             WHERE r.mean_cost IS NOT NULL AND t.compat = 'llvm/cpu' AND {source}
               AND (CAST(?1 AS TEXT) IS NULL OR w.signature LIKE ?1)
               AND (CAST(?2 AS TEXT) IS NULL OR w.op_class = ?2 OR w.op_class LIKE ?2 || '+%')) ranked
         WHERE rank = 1 ORDER BY signature, id LIMIT ?3"
    );
    store
        .db
        .query_map(&sql, params![sig, class, no_limit(limit)], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
}

/// A workload with a valid CPU record: what `ttdb refine` may work on.
#[derive(Clone, Debug)]
pub struct RefinableWorkload {
    pub id: i64,
    pub key: String,
    pub signature: String,
    pub op_class: String,
}

/// Workloads with a valid record on a `compat` target, optionally only those whose signature
/// starts with `signature_prefix` or of class `class` (or a class prefix chain), in
/// signature order, at most `limit`.
pub fn refinable_workloads(
    store: &Store,
    compat: &str,
    signature_prefix: Option<&str>,
    class: Option<&str>,
    limit: Option<usize>,
) -> Result<Vec<RefinableWorkload>> {
    let sig = signature_prefix.map(|s| format!("{s}%"));
    let sql = "SELECT w.id, w.key, w.signature, w.op_class FROM workloads w
         WHERE (CAST(?2 AS TEXT) IS NULL OR w.signature LIKE ?2)
           AND (CAST(?3 AS TEXT) IS NULL OR w.op_class = ?3 OR w.op_class LIKE ?3 || '+%')
           AND EXISTS (SELECT 1 FROM records r JOIN targets t ON t.id = r.target_id
                       WHERE r.workload_id = w.id AND r.mean_cost IS NOT NULL AND t.compat = ?1)
         ORDER BY w.signature, w.id LIMIT ?4";
    store
        .db
        .query_map(sql, params![compat, sig, class, no_limit(limit)], |r| {
            Ok(RefinableWorkload {
                id: r.get(0)?,
                key: r.get(1)?,
                signature: r.get(2)?,
                op_class: r.get(3)?,
            })
        })
}

/// Where a refinement may start, in two runs: the best `n` valid records of the workload
/// imported from logs, and the best `n` that ttdb itself measured (earlier refinements,
/// verifications), each in cost order.
pub fn refine_starts(
    store: &Store,
    workload_id: i64,
    compat: &str,
    n: usize,
) -> Result<Vec<Vec<SourceRecord>>> {
    let mut out = Vec::new();
    for measured_here in [false, true] {
        let sql = format!(
            "{SELECT_RECORDS} WHERE r.workload_id = ?1 AND r.mean_cost IS NOT NULL AND t.compat = ?2
               AND (s.kind = 'ttdb_measure') = ?4 ORDER BY r.mean_cost LIMIT ?3"
        );
        out.push(store.db.query_map(
            &sql,
            params![workload_id, compat, n, measured_here],
            source_of,
        )?);
    }
    Ok(out)
}

/// A `LIMIT` for an optional count: no count, no limit (both engines take the largest
/// integer; SQLite's `-1` is an error on PostgreSQL).
fn no_limit(n: Option<usize>) -> i64 {
    n.map_or(i64::MAX, |n| n as i64)
}
