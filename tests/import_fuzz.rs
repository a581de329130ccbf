//! The CI smoke of directory imports: random folders of mutated logs, mutated bundles (plain
//! and zstd), models, binaries, empty files and symlinks (dangling, looping) go through the
//! import path `ttdb import DIR` takes (`bundle::inputs`), for a bounded time. Nothing may
//! panic, the database stays consistent, nothing but records and bounded rejected-line
//! prefixes is stored, and a second import of the same folder adds nothing. On SQLite and,
//! for a shorter time, on PostgreSQL.
use crate::common;
use crate::common::fuzz;

use fuzz::Rng;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use ttdb::bundle::inputs::{self, ImportOptions, Imported};
use ttdb::store::testing::Backend;
use ttdb::store::{OpenMode, Store};
use ttdb_store::on_both_backends;

/// Real material to mutate: a few log lines and bundles of them.
struct Seeds {
    lines: Vec<Vec<u8>>,
    bundles: Vec<Vec<u8>>,
    model: Vec<u8>,
}

fn seeds() -> Seeds {
    let corpus = common::corpus_dir();
    let text =
        std::fs::read_to_string(corpus.join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json"))
            .unwrap();
    let lines: Vec<Vec<u8>> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| l.as_bytes().to_vec())
        .collect();
    // Bundles exported from a database of those lines: all of them, and the best few.
    let mut store = Store::open_in_memory().unwrap();
    ttdb::store::import::import_bytes(
        &mut store,
        Path::new("resnet_18.best.json"),
        text.as_bytes(),
        "ansor_log",
        &|_| {},
    )
    .unwrap();
    let creation = ttdb::bundle::format::Creation::default();
    let b = ttdb::bundle::export(&store, &ttdb::bundle::Selection::All, false, creation).unwrap();
    let bundles = vec![b.to_bytes(false).unwrap(), b.to_bytes(true).unwrap()];
    let model = std::fs::read(corpus.join("onnx/torchvision_graph_only/resnet18.onnx")).unwrap()
        [..4096]
        .to_vec();
    Seeds {
        lines,
        bundles,
        model,
    }
}

/// Fills `dir` with 1-8 entries of random kinds.
fn random_folder(dir: &Path, seeds: &Seeds, rng: &mut Rng) {
    use std::os::unix::fs::symlink;
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let n = 1 + rng.below(8);
    for i in 0..n {
        let sub = if rng.below(3) == 0 { "sub/" } else { "" };
        let ext = *rng.pick(&["json", "log", "txt", "ttdb", "zst", "", "onnx", "md"]);
        let name = if ext.is_empty() {
            format!("{sub}f{i}")
        } else {
            format!("{sub}f{i}.{ext}")
        };
        let path = dir.join(&name);
        let bytes: Vec<u8> = match rng.below(8) {
            0 | 1 => {
                // A log: real lines, some mutated.
                let mut text = Vec::new();
                for _ in 0..1 + rng.below(6) {
                    let mut l = rng.pick(&seeds.lines).clone();
                    if rng.below(2) == 0 {
                        fuzz::mutate_line(&mut l, rng, &seeds.lines);
                    }
                    text.extend(l);
                    text.push(b'\n');
                }
                text
            }
            2 | 3 => {
                let mut b = rng.pick(&seeds.bundles).clone();
                if rng.below(2) == 0 {
                    fuzz::mutate_bundle(&mut b, rng, &seeds.bundles);
                }
                b
            }
            4 => seeds.model.clone(),
            5 => (0..rng.below(5000)).map(|_| rng.next() as u8).collect(),
            6 => Vec::new(),
            _ => {
                let target = *rng.pick(&["nowhere", "..", ".", "f0.json", "loop"]);
                let _ = symlink(target, &path);
                if target == "loop" {
                    let _ = symlink(&name, dir.join("loop"));
                }
                continue;
            }
        };
        std::fs::write(&path, bytes).unwrap();
    }
}

/// Imports every input of `dir`; returns the records the imports say they inserted.
fn import_folder(store: &mut Store, dir: &Path) -> usize {
    let found = inputs::collect(&[dir.to_path_buf()]);
    let opts = ImportOptions::default();
    let mut inserted = 0;
    for input in &found.files {
        if let Ok(done) = inputs::import_input(store, input, &opts, &|_| {}) {
            inserted += done.file_report().inserted;
            if let Imported::Bundle { import, .. } = &done {
                assert_eq!(
                    import.file.rejected.len(),
                    0,
                    "a checked bundle had a bad line"
                );
            }
        }
    }
    inserted
}

on_both_backends! {
    fn mixed_folders_import_without_harm(backend) {
        let seeds = seeds();
        let mut rng = Rng::new(0x6469_7273);
        // The same folders on both; PostgreSQL gets a new database per folder (a CREATE DATABASE
        // and the migrations each), so a shorter run of their first ones.
        let budget = match backend {
            Backend::Sqlite => 20,
            Backend::Postgres => 5,
        };
        let deadline = Instant::now() + Duration::from_secs(budget);
        let mut rounds = 0;
        let mut total = 0;
        while rounds < 10 || (Instant::now() < deadline && rounds < 300) {
            let tmp = tempfile::tempdir().unwrap();
            let dir: PathBuf = tmp.path().join("logs");
            random_folder(&dir, &seeds, &mut rng);
            let at = backend.location(tmp.path(), "t.db");
            let mut store = Store::open_at(&at, OpenMode::Create).unwrap();
            let inserted = import_folder(&mut store, &dir);
            assert_eq!(
                import_folder(&mut store, &dir),
                0,
                "a second import added records"
            );
            assert_eq!(store.integrity_check().unwrap(), "ok");
            let c = store.sql_for_tests();
            let records: i64 = c
                .query_one("SELECT COUNT(*) FROM records", &[], |r| r.get(0))
                .unwrap();
            assert_eq!(records as usize, inserted);
            let longest: Option<i64> = c
                .query_one("SELECT MAX(length(raw)) FROM rejected_lines", &[], |r| {
                    r.get(0)
                })
                .unwrap();
            assert!(
                longest.unwrap_or(0) <= 256,
                "a rejected line kept {longest:?} bytes"
            );
            total += inserted;
            rounds += 1;
        }
        assert!(
            total > 0,
            "no round imported a record: the mutants never reach the store"
        );
        eprintln!("{rounds} folders, {total} records imported");
    }
}
