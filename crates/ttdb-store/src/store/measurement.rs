//! ttdb's own measurements: stored as ttdb-native records (Ansor lines for the measured
//! workload on this host's target, imported like any log, so `export` and best-record
//! queries treat them like TVM's) plus a `measurements` row each, in one transaction.
use super::db::{params, Db};
use super::import::import_in;
use super::{now_rfc3339, Result, Store, StoreError};
use ttdb_format::ansor::{ErrorNo, MeasureResult, Record, Step, Task};
use ttdb_format::host::HostFingerprint;

/// The id of `host` in the `hosts` table, inserting it on first use.
pub fn host_id(tx: &Db, host: &HostFingerprint) -> Result<i64> {
    let fp = host.digest();
    let (id, _) = tx.insert_or_select(
        "INSERT INTO hosts (fingerprint, cpu_model, isa_features, llvm_cpu, num_cores, ttdb_version) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (fingerprint) DO NOTHING RETURNING id",
        params![fp, host.cpu_model, host.isa_flags.join(" "), host.llvm_cpu, host.cores, host.ttdb_version],
        "SELECT id FROM hosts WHERE fingerprint = ?1",
        params![fp],
    )?;
    Ok(id)
}

/// One measured schedule, ready to store.
#[derive(Clone, Debug)]
pub struct NewMeasurement {
    /// Workload key of the measured workload (as TVM would write it).
    pub workload_key: String,
    pub steps: Vec<Step>,
    /// Seconds per run (the record's costs); empty on failure.
    pub samples: Vec<f64>,
    /// Ansor error code for the record: 0 ok, 1 instantiation (lowering), 2 compile,
    /// 5 wrong answer, 7 run timeout.
    pub error_no: u8,
    pub error: Option<String>,
    pub verified: bool,
    pub max_rel_error: Option<f64>,
    pub median_s: Option<f64>,
    pub min_s: Option<f64>,
    pub max_s: Option<f64>,
    pub gflops: Option<f64>,
    pub compile_ms: Option<f64>,
    /// Build + run wall seconds (the record's all_cost).
    pub wall_s: f64,
    pub origin_record_id: Option<i64>,
    pub provenance: String,
}

impl NewMeasurement {
    fn record(&self, host: &HostFingerprint) -> Record {
        let (target, hardware_params) = host.ansor_target();
        let ok = self.error_no == 0 && !self.samples.is_empty();
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as f64)
            .unwrap_or(0.0);
        Record {
            task: Task {
                workload_key: self.workload_key.clone(),
                target,
                hardware_params: Some(hardware_params),
                target_host: Some(String::new()),
                layout_rewrite_option: Some(2),
                task_input_names: Some(vec![]),
            },
            steps: self.steps.clone(),
            result: MeasureResult {
                // TVM's failure cost, so TVM never picks a failed record either.
                costs: if ok { self.samples.clone() } else { vec![1e10] },
                error_no: ErrorNo(self.error_no),
                all_cost: self.wall_s,
                timestamp,
            },
            version: Some("v0.6".into()),
        }
    }
}

/// Stores measurements taken by one ttdb run (`kind`: verify, apply, search, default) as a
/// source of kind `ttdb_measure`, in one transaction. Returns the record ids, in order.
pub fn store_measurements(
    store: &mut Store,
    kind: &str,
    host: &HostFingerprint,
    items: &[NewMeasurement],
) -> Result<Vec<i64>> {
    if items.is_empty() {
        return Ok(vec![]);
    }
    store
        .db
        .transaction(|tx| store_measurements_in(tx, kind, host, items, &[]))
}

/// [`store_measurements`] inside the caller's transaction `tx`; the i-th item was measured
/// for job `jobs[i]` when `jobs` is not empty (a job has one measurement: a second is
/// refused by the database).
pub(super) fn store_measurements_in(
    tx: &Db,
    kind: &str,
    host: &HostFingerprint,
    items: &[NewMeasurement],
    jobs: &[i64],
) -> Result<Vec<i64>> {
    if items.is_empty() {
        return Ok(vec![]);
    }
    let lines: Vec<String> = items.iter().map(|m| m.record(host).to_line()).collect();
    let mut buf = lines.join("\n");
    buf.push('\n');
    {
        let host_id = host_id(tx, host)?;
        let when = now_rfc3339();
        let path = std::path::PathBuf::from(format!("ttdb:{kind}@{when}"));
        let report = import_in(tx, &path, buf.as_bytes(), "ttdb_measure", &|_| {})?;
        if !report.rejected.is_empty() {
            return Err(StoreError::Other(format!(
                "ttdb wrote a record it cannot read back: {:?}",
                report.rejected[0]
            )));
        }
        let mut ids = Vec::with_capacity(items.len());
        for (i, (m, line)) in items.iter().zip(&lines).enumerate() {
            let digest = super::import::record_digest(line);
            let record_id: i64 = tx.query_one(
                "SELECT id FROM records WHERE digest = ?1",
                params![digest],
                |r| r.get(0),
            )?;
            tx.execute(
                "INSERT INTO measurements (record_id, host_id, kind, verified, max_rel_error, median_s, min_s, max_s, repeats,
                                           gflops, compile_ms, error, origin_record_id, provenance, measured_at, job_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
                params![
                    record_id,
                    host_id,
                    kind,
                    m.verified,
                    m.max_rel_error,
                    m.median_s,
                    m.min_s,
                    m.max_s,
                    m.samples.len(),
                    m.gflops,
                    m.compile_ms,
                    m.error,
                    m.origin_record_id,
                    m.provenance,
                    when,
                    jobs.get(i)
                ],
            )?;
            ids.push(record_id);
        }
        Ok(ids)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn host() -> HostFingerprint {
        HostFingerprint {
            cpu_model: "Test CPU".into(),
            isa_flags: vec!["avx2".into(), "fma".into()],
            llvm_cpu: "znver3".into(),
            llvm_features: "+avx2".into(),
            cores: 2,
            ttdb_version: "0.1.0".into(),
        }
    }

    /// A dense workload's measurement: verified with `cost`, or failed without one.
    pub(crate) fn item(cost: Option<f64>) -> NewMeasurement {
        NewMeasurement {
            workload_key:
                r#"["218090bc617f9a36fbabdf253ec28064", [14, 3072], [768, 3072], [14, 768]]"#.into(),
            steps: vec![Step::parse(r#"["SP", 2, 0, 14, [1, 1, 14], 1]"#).unwrap()],
            samples: cost.into_iter().collect(),
            error_no: if cost.is_some() { 0 } else { 5 },
            error: cost.is_none().then(|| "wrong answer".into()),
            verified: cost.is_some(),
            max_rel_error: Some(1e-6),
            median_s: cost,
            min_s: cost,
            max_s: cost,
            gflops: None,
            compile_ms: Some(12.0),
            wall_s: 0.5,
            origin_record_id: None,
            provenance: "test".into(),
        }
    }

    crate::on_both_backends! {
    fn measurements_become_records_of_this_host(backend) {
        let mut s = backend.store();
        let ids =
            store_measurements(&mut s, "verify", &host(), &[item(Some(1e-3)), item(None)]).unwrap();
        assert_eq!(ids.len(), 2);
        let (target, cost): (String, Option<f64>) = s
            .db
            .query_one("SELECT t.target, r.mean_cost FROM records r JOIN targets t ON t.id = r.target_id WHERE r.id = ?1", params![ids[0]], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!(
            (target.as_str(), cost),
            ("llvm -keys=cpu -mcpu=znver3", Some(1e-3))
        );
        // The failed one is kept, never chosen.
        let failed: Option<f64> = s
            .db
            .query_one(
                "SELECT mean_cost FROM records WHERE id = ?1",
                params![ids[1]],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(failed, None);
        let n: i64 = s
            .db
            .query_one(
                "SELECT COUNT(*) FROM measurements WHERE verified = 1",
                params![],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1);
        let kind: String = s
            .db
            .query_one("SELECT kind FROM sources", params![], |r| r.get(0))
            .unwrap();
        assert_eq!(kind, "ttdb_measure");
    }
    }

    crate::on_both_backends! {
        /// Four connections store measurements of the same schedules and cost models at
        /// once (as parallel tunes do): each record and host is stored once, every
        /// measurement row is kept, and the cost model is one of those written.
        fn concurrent_tunes_lose_nothing(backend) {
            let dir = tempfile::tempdir().unwrap();
            let at = backend.location(dir.path(), "tunes.db");
            drop(crate::store::Store::open_at(&at, crate::store::OpenMode::Create).unwrap());
            std::thread::scope(|scope| {
                for t in 0..4 {
                    let at = &at;
                    scope.spawn(move || {
                        let mut s =
                            crate::store::Store::open_at(at, crate::store::OpenMode::Write).unwrap();
                        for round in 0..5 {
                            let costs = [Some(1e-3), Some(2e-3 + round as f64 * 1e-4), None];
                            let items: Vec<_> = costs.into_iter().map(item).collect();
                            store_measurements(&mut s, "search", &host(), &items).unwrap();
                            s.save_cost_model("znver3-2", format!("{t}").as_bytes(), t).unwrap();
                        }
                    });
                }
            });
            let s = crate::store::Store::open_at(&at, crate::store::OpenMode::ReadOnly).unwrap();
            let count = |sql: &str| -> i64 { s.db.query_one(sql, params![], |r| r.get(0)).unwrap() };
            // A record line carries the second it was measured in, so how many distinct
            // lines there are depends on timing: at least the 1 ms, five 2.x ms and the
            // failed one. Every measurement is kept and points at a stored record.
            assert!(count("SELECT COUNT(*) FROM records") >= 7);
            assert_eq!(
                count("SELECT COUNT(*) FROM measurements m JOIN records r ON r.id = m.record_id"),
                4 * 5 * 3
            );
            assert_eq!(count("SELECT COUNT(*) FROM hosts"), 1);
            let model = s.cost_model("znver3-2").unwrap().unwrap();
            assert_eq!(model.bytes, model.programs.to_string().into_bytes());
        }
    }
}
