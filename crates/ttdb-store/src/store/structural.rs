//! Structural guesses checked against their records. A workload recognized by shape only
//! (`recognized_by = 'structural'`, see `ttdb_algo::recognize`) keeps its class only while every
//! valid record of it replays on the guessed DAG: a record that does not replay shows that
//! the real DAG has other stages, so the workload becomes `unknown`, with the reason,
//! instead of being matched and transferred under a wrong class.
use super::db::{params, Db};
use super::Result;
use serde::Serialize;
use ttdb_format::ansor::{Record, WorkloadKey};

/// A structural guess its records refuted.
#[derive(Clone, Debug, Serialize)]
pub struct RefutedGuess {
    pub key: String,
    /// The class that was guessed.
    pub guessed_class: String,
    pub reason: String,
}

/// Checks the structural guesses among `workload_ids` against their valid records and
/// demotes the refuted ones to `unknown`, in `tx`.
pub(super) fn check_guesses(tx: &Db, workload_ids: &[i64]) -> Result<Vec<RefutedGuess>> {
    let mut refuted = Vec::new();
    for &id in workload_ids {
        let guess: Option<(String, String)> = tx.query_opt(
            "SELECT key, op_class FROM workloads WHERE id = ?1 AND recognized_by = 'structural'",
            params![id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let Some((raw_key, class)) = guess else {
            continue;
        };
        let Ok(key) = WorkloadKey::parse(&raw_key) else {
            continue;
        };
        let Ok(recognized) = ttdb_algo::recognize::recognize(&key) else {
            continue;
        };
        let inits = ttdb_algo::schedule::stage_inits_from_dag(&recognized.dag);
        let rows: Vec<(String, i64, String)> = tx.query_map(
            "SELECT r.raw, r.line_no, s.path FROM records r JOIN sources s ON s.id = r.source_id
             WHERE r.workload_id = ?1 AND r.error_no = 0 AND r.mean_cost IS NOT NULL",
            params![id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let failure = rows.iter().find_map(|(raw, line, path)| {
            let why = match Record::parse(raw) {
                Ok(rec) => ttdb_algo::schedule::replay(&inits, &rec.steps).err()?.to_string(),
                Err(e) => e.to_string(),
            };
            Some(format!(
                "the structural guess {class} is refuted: the record at {path}:{line} does not replay on it ({why})"
            ))
        });
        let Some(reason) = failure else {
            continue;
        };
        let sig = ttdb_algo::recognize::unknown_signature(&key, &reason);
        tx.execute(
            "UPDATE workloads SET signature = ?2, signature_json = ?3, op_class = ?4, recognized_by = 'unknown'
             WHERE id = ?1",
            params![id, sig.sha256_hex(), sig.canonical_json(), sig.op_class],
        )?;
        refuted.push(RefutedGuess {
            key: raw_key,
            guessed_class: class,
            reason,
        });
    }
    Ok(refuted)
}
