//! Bad input, crashes and concurrency: the database is never left half-written, a bad line
//! never aborts a file, readers work while a writer imports. On SQLite and on PostgreSQL.
use crate::common;
use std::path::{Path, PathBuf};
use std::process::Command;
use ttdb::store::import::import_file;
use ttdb::store::testing::{db_arg, Backend};
use ttdb::store::{OpenMode, Store};
use ttdb_store::on_both_backends;

fn corpus_file(rel: &str) -> PathBuf {
    common::corpus_dir().join("ansor").join(rel)
}

fn count(store: &Store, sql: &str) -> i64 {
    store
        .sql_for_tests()
        .query_one(sql, &[], |r| r.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

on_both_backends! {
    fn corrupted_copy_imports_its_good_lines_and_names_each_bad_one(backend) {
        let text =
            std::fs::read_to_string(corpus_file("tvm_ansor_bench_nchwc/resnet_18.best.json")).unwrap();
        let mut lines: Vec<Vec<u8>> = text.lines().map(|l| l.as_bytes().to_vec()).collect();
        assert_eq!(lines.len(), 17);
        let l3 = lines[2].len();
        lines[2].truncate(l3 / 2); // line 3: truncated mid-record
        lines[4] = b"\x00\xff\xfegarbage \x13 bytes".to_vec(); // line 5: garbage bytes
        let l7 = String::from_utf8(lines[6].clone()).unwrap();
        lines[6] = l7
            .replacen(", 2, []], [[]", ", 2, [], 9], [[]", 1)
            .into_bytes(); // line 7: 7-element task
        let l9 = String::from_utf8(lines[8].clone()).unwrap();
        lines[8] = l9.replacen("[\"CI\", ", "[\"XY\", ", 1).into_bytes(); // line 9: unknown step tag
        let l11 = String::from_utf8(lines[10].clone()).unwrap();
        lines[10] = l11
            .replacen("[\"SP\", 3, 0, 1,", "[\"SP\", 3, 0, 99999999999,", 1)
            .into_bytes(); // out of range
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corrupt.json");
        std::fs::write(&path, lines.join(&b'\n')).unwrap();

        let mut store = backend.store();
        let r = import_file(&mut store, &path, &|_| {}).unwrap();
        let bad: Vec<(usize, &str)> = r
            .rejected
            .iter()
            .map(|x| (x.line, x.reason.as_str()))
            .collect();
        assert_eq!(
            bad.iter().map(|b| b.0).collect::<Vec<_>>(),
            vec![3, 5, 7, 9, 11],
            "{bad:?}"
        );
        assert!(bad[0].1.contains("bad JSON at column"), "{}", bad[0].1);
        assert!(bad[1].1.starts_with("not UTF-8"), "{}", bad[1].1);
        assert!(bad[2].1.contains("task has 7 elements"), "{}", bad[2].1);
        assert!(bad[3].1.contains("unknown step tag"), "{}", bad[3].1);
        assert!(bad[4].1.contains("out of range"), "{}", bad[4].1);
        assert_eq!((r.records, r.inserted), (12, 12));
        // Nothing is lost: the bad lines are kept verbatim with their reasons.
        assert_eq!(count(&store, "SELECT COUNT(*) FROM rejected_lines"), 5);
        let raw: Vec<u8> = store
            .sql_for_tests()
            .query_one(
                "SELECT raw FROM rejected_lines WHERE line_no = 5",
                &[],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(raw, lines[4]);
        // Idempotent: again, nothing new.
        let again = import_file(&mut store, &path, &|_| {}).unwrap();
        assert_eq!((again.inserted, again.rejected.len()), (0, 5));
        assert_eq!(count(&store, "SELECT COUNT(*) FROM rejected_lines"), 5);
    }
}

/// A large synthetic log: corpus records made distinct (distinct digests). With
/// `new_workloads`, by the batch dim of every shape in the key: a new workload per 26 lines,
/// each recognized as it is imported, which makes the import slow. Else by the timestamp:
/// resnet-50's 26 workloads, and the import is the database's inserts.
fn big_log(path: &Path, n: usize, new_workloads: bool) {
    let src =
        std::fs::read_to_string(corpus_file("tvm_ansor_bench_nchwc/resnet_50.best.json")).unwrap();
    let base: Vec<&str> = src.lines().collect();
    let mut out = String::with_capacity(n * 1200);
    for i in 0..n {
        let l = base[i % base.len()];
        if new_workloads {
            let batch = i / base.len() + 2;
            out.push_str(&l.replace("[1, ", &format!("[{batch}, ")));
        } else {
            let mut r = ttdb::ansor::Record::parse(l).unwrap();
            r.result.timestamp += (i / base.len() + 1) as f64;
            out.push_str(&r.to_line());
        }
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

/// Which log the crash and concurrency tests import on `backend`: SQLite's inserts are
/// fast, so its log makes the import slow by its new workloads (a kill 50 ms in then lands
/// mid-import); PostgreSQL's take a round trip each, slow enough on their own, and
/// recognizing some 700 workloads would add half a minute.
fn new_workloads_on(backend: Backend) -> bool {
    backend == Backend::Sqlite
}

on_both_backends! {
    fn sigkill_mid_import_leaves_the_file_fully_in_or_absent(backend) {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("big.json");
        // big enough that a kill 50 ms in lands mid-import (see `new_workloads_on`)
        let n = 20_000;
        big_log(&log, n, new_workloads_on(backend));
        let exe = env!("CARGO_BIN_EXE_ttdb");
        let mut interrupted = 0;
        for (attempt, delay_ms) in [50u64, 150, 300].into_iter().enumerate() {
            let at = backend.location(dir.path(), &format!("kill{attempt}.db"));
            let mut child = Command::new(exe)
                .args(["--db", &db_arg(&at), "import", log.to_str().unwrap()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(delay_ms));
            if child.try_wait().unwrap().is_none() {
                interrupted += 1;
            }
            child.kill().ok(); // SIGKILL
            child.wait().unwrap();
            // (Create: the kill may have come before the database was.)
            let store = Store::open_at(&at, OpenMode::Create).unwrap();
            assert_eq!(store.integrity_check().unwrap(), "ok");
            let sources = count(&store, "SELECT COUNT(*) FROM sources");
            let records = count(&store, "SELECT COUNT(*) FROM records");
            assert!(
                (sources, records) == (0, 0) || (sources, records) == (1, n as i64),
                "half-written database after SIGKILL at {delay_ms} ms: {sources} sources, {records} records"
            );
            if attempt == 0 {
                // The import can simply be run again.
                drop(store);
                let mut store = Store::open_at(&at, OpenMode::Create).unwrap();
                let r = import_file(&mut store, &log, &|_| {}).unwrap();
                assert_eq!(r.inserted + r.duplicates, n);
                assert_eq!(count(&store, "SELECT COUNT(*) FROM records"), n as i64);
            }
        }
        assert!(
            interrupted >= 1,
            "no import was still running when killed; make the log bigger"
        );
    }
}

on_both_backends! {
    fn readers_work_while_a_writer_imports(backend) {
        let dir = tempfile::tempdir().unwrap();
        let at = backend.location(dir.path(), "wal.db");
        let log = dir.path().join("big.json");
        big_log(&log, 15_000, new_workloads_on(backend));
        let mut writer = Store::open_at(&at, OpenMode::Create).unwrap();
        import_file(
            &mut writer,
            &corpus_file("bert_cpu/ansor-bert-tuning.stage1.log"),
            &|_| {},
        )
        .unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let reader = Store::open_at(&at, OpenMode::ReadOnly).unwrap();
                let mut reads = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    // A reader sees the committed state (60 records) until the writer commits.
                    let n = count(&reader, "SELECT COUNT(*) FROM records");
                    assert!(n == 60 || n == 15_060, "reader saw a partial import: {n}");
                    reads += 1;
                }
                reads
            });
            // The reader stops also when the import fails (a full disk once made it spin and
            // the scope wait for it forever).
            let imported = import_file(&mut writer, &log, &|_| {});
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            let reads = reader.join().unwrap();
            imported.unwrap();
            assert!(reads > 0);
        });
    }
}

/// SQLite answers "the best valid record of a workload" from the `records_best` index, in
/// cost order, without a sort.
fn assert_best_record_query_uses_its_index(store: &Store) {
    let plan: Vec<String> = store
        .connection_for_tests()
        .prepare(
            "EXPLAIN QUERY PLAN SELECT r.id, r.raw, r.mean_cost FROM records r JOIN targets t ON t.id = r.target_id
             WHERE r.workload_id = 1 AND r.mean_cost IS NOT NULL AND t.compat = 'llvm/cpu' ORDER BY r.mean_cost LIMIT 1",
        )
        .unwrap()
        .query_map([], |r| r.get::<_, String>(3))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(plan.iter().any(|p| p.contains("records_best")), "{plan:?}");
    assert!(
        !plan.iter().any(|p| p.contains("TEMP B-TREE")),
        "no sort needed: {plan:?}"
    );
}

on_both_backends! {
    fn best_record_is_one_indexed_query_and_skips_failed_measurements(backend) {
        let mut store = backend.store();
        // The full alexnet log: 5,056 records, 4,487 failed (cost 1e10, error_no != 0).
        let r = import_file(
            &mut store,
            &corpus_file("jaspann_tt/alexnet-NCHW-B1-llvm-core-avx2.json"),
            &|_| {},
        )
        .unwrap();
        assert_eq!(r.failed_measurements, 4487);
        // SQLite's plan; PostgreSQL's planner chooses by its statistics, which a fresh
        // database does not have yet.
        if backend == Backend::Sqlite {
            assert_best_record_query_uses_its_index(&store);
        }
        // For every workload: the chosen record is valid and no valid record is cheaper.
        let ids: Vec<i64> = store
            .sql_for_tests()
            .query_map("SELECT id FROM workloads", &[], |r| r.get(0))
            .unwrap();
        let mut with_best = 0;
        for w in ids {
            let best = ttdb::store::query::best_record(&store, w, "llvm/cpu").unwrap();
            let min_valid: Option<f64> = store
                .sql_for_tests()
                .query_one(
                    &format!("SELECT MIN(mean_cost) FROM records WHERE workload_id = {w} AND error_no = 0"),
                    &[],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(best.as_ref().map(|b| b.2), min_valid);
            if let Some((_, raw, _)) = best {
                with_best += 1;
                assert!(ttdb::ansor::Record::parse(&raw)
                    .unwrap()
                    .result
                    .error_no
                    .is_ok());
            }
        }
        assert!(with_best > 0);
        // Only cpu-compatible targets are considered.
        assert_eq!(
            ttdb::store::query::best_record(&store, 1, "cuda/cuda,gpu").unwrap(),
            None
        );
    }
}
