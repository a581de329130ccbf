//! Importing the real corpus: counts, idempotence, export round trip (on SQLite, and on
//! PostgreSQL for the curated logs), classification.
use crate::common;
use std::collections::BTreeMap;
use std::path::PathBuf;
use ttdb::store::import::import_file;
use ttdb::store::query::{export, ExportFilter};
use ttdb::store::testing::Backend;
use ttdb::store::Store;
use ttdb_store::on_both_backends;

fn content_lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#') && !l.starts_with(' '))
        .count()
}

/// The logs a backend's test imports: the whole corpus into SQLite; into PostgreSQL, whose
/// import is about 3x slower, the curated logs without the full tuning histories (5,726
/// of the 78,621 records: the whole would add over a minute to CI).
fn corpus_logs(backend: Backend) -> Vec<PathBuf> {
    let all = common::ansor_files();
    match backend {
        Backend::Sqlite => all,
        Backend::Postgres => all
            .into_iter()
            .filter(|f| !common::is_full_history(f))
            .collect(),
    }
}

fn import_corpus(store: &mut Store, logs: &[PathBuf]) -> Vec<ttdb::store::FileReport> {
    logs.iter()
        .map(|f| import_file(store, f, &|_| {}).unwrap())
        .collect()
}

/// (workload key, target) -> (mean cost, raw line) of the best valid record (of equal
/// costs, the first stored, as `export --best` picks it).
fn best_records(store: &Store) -> Bests {
    store
        .sql_for_tests()
        .query_map(
            "SELECT key, target, target_host, hardware_params, mean_cost, raw FROM (
                 SELECT w.key, t.target, t.target_host, t.hardware_params, r.mean_cost, r.raw,
                        ROW_NUMBER() OVER (PARTITION BY w.id, t.id ORDER BY r.mean_cost, r.id) AS rank
                 FROM records r JOIN workloads w ON w.id = r.workload_id JOIN targets t ON t.id = r.target_id
                 WHERE r.mean_cost IS NOT NULL) ranked
             WHERE rank = 1",
            &[],
            |r| {
                Ok((
                    (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?),
                    (r.get(4)?, r.get(5)?),
                ))
            },
        )
        .unwrap()
        .into_iter()
        .collect()
}

/// Asserts two best-record maps are equal, naming only the entries that differ.
fn assert_same_bests(a: &Bests, b: &Bests, what: &str) {
    let mut diffs = Vec::new();
    for (k, v) in a {
        if b.get(k) != Some(v) {
            diffs.push(format!("{k:?}: {} vs {:?}", v.0, b.get(k).map(|x| x.0)));
        }
    }
    diffs.extend(
        b.keys()
            .filter(|k| !a.contains_key(*k))
            .map(|k| format!("{k:?}: only after {what}")),
    );
    assert!(
        diffs.is_empty(),
        "{what}: {} best records differ:\n{}",
        diffs.len(),
        diffs[..diffs.len().min(5)].join("\n")
    );
}

type Bests = BTreeMap<(String, String, String, String), (f64, String)>;

on_both_backends! {
    fn corpus_imports_cleanly_idempotently_and_round_trips_through_export(backend) {
        let logs = corpus_logs(backend);
        let mut store = backend.store();
        let reports = import_corpus(&mut store, &logs);
        let mut total = 0;
        for (r, f) in reports.iter().zip(&logs) {
            assert!(
                r.rejected.is_empty(),
                "{}: rejected {:?}",
                f.display(),
                r.rejected
            );
            assert_eq!(
                r.records,
                content_lines(f),
                "{}: records vs content lines",
                f.display()
            );
            assert_eq!(r.inserted + r.duplicates, r.records);
            total += r.records;
        }
        let expected = match backend {
            Backend::Sqlite => 78_621,
            Backend::Postgres => 5_726,
        };
        assert_eq!(
            total, expected,
            "5,726 in the curated logs + 72,895 in the full histories"
        );

        // A second import of the same files inserts nothing.
        let again = import_corpus(&mut store, &logs);
        assert!(again
            .iter()
            .all(|r| r.already_imported && r.inserted == 0 && r.duplicates == r.records));
        let n: i64 = store
            .sql_for_tests()
            .query_one("SELECT COUNT(*) FROM records", &[], |r| r.get(0))
            .unwrap();
        assert_eq!(
            n as usize,
            reports.iter().map(|r| r.inserted).sum::<usize>()
        );

        // Export everything, re-import into a fresh database: the same best records.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("all.json");
        let mut text = String::new();
        let exported = export(&store, &ExportFilter::default(), |l| {
            text.push_str(l);
            text.push('\n');
            Ok(())
        })
        .unwrap();
        assert_eq!(exported as i64, n);
        std::fs::write(&path, &text).unwrap();
        let mut fresh = backend.store();
        let r = import_file(&mut fresh, &path, &|_| {}).unwrap();
        assert_eq!((r.inserted, r.rejected.len()), (exported, 0));
        assert_same_bests(
            &best_records(&store),
            &best_records(&fresh),
            "export + re-import",
        );

        // --best export: one line per (workload, target) with a valid record, same bests again.
        let best_path = dir.path().join("best.json");
        let mut best_text = String::new();
        export(
            &store,
            &ExportFilter {
                best: true,
                signature: None,
            },
            |l| {
                best_text.push_str(l);
                best_text.push('\n');
                Ok(())
            },
        )
        .unwrap();
        std::fs::write(&best_path, &best_text).unwrap();
        let mut fresh_best = backend.store();
        import_file(&mut fresh_best, &best_path, &|_| {}).unwrap();
        assert_same_bests(
            &best_records(&store),
            &best_records(&fresh_best),
            "export --best + re-import",
        );
    }
}

#[test]
fn every_cpu_workload_gets_a_class() {
    let mut store = Store::open_in_memory().unwrap();
    let reports = import_corpus(&mut store, &common::ansor_files());
    let mut unknown = Vec::new();
    eprintln!(
        "{:<58} {:>8} {:>9} {:>8}  classes",
        "file", "records", "workloads", "unknown"
    );
    for (r, f) in reports.iter().zip(common::ansor_files()) {
        let mut classes = BTreeMap::new();
        let mut n_unknown = 0;
        for id in &r.workload_ids {
            let (class, key): (String, String) = store
                .connection_for_tests()
                .query_row(
                    "SELECT op_class, key FROM workloads WHERE id = ?1",
                    [id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap();
            if class == "unknown" {
                n_unknown += 1;
                if !common::is_cuda_log(&f) {
                    unknown.push(format!("{}: {key}", common::rel(&f)));
                }
            }
            *classes.entry(class).or_insert(0) += 1;
        }
        eprintln!(
            "{:<58} {:>8} {:>9} {:>8}  {}",
            common::rel(&f),
            r.records,
            r.workload_ids.len(),
            n_unknown,
            classes.len()
        );
    }
    assert!(
        unknown.is_empty(),
        "CPU workloads left unknown:\n{}",
        unknown.join("\n")
    );
}
