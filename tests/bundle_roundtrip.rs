//! The whole corpus database through a bundle: export every record, import into an empty
//! database; the best records are identical and `ttdb match` reads the same for the seven
//! corpus networks (snapshot). On SQLite; on PostgreSQL, whose import is slower, the curated
//! logs (without the full tuning histories) and two of the networks.
use crate::common;
use common::{corpus_dir, new_db};
use std::path::Path;
use ttdb::store::testing::Backend;
use ttdb_store::on_both_backends;

/// ttdb on `db`, ranking as an AVX2 host whatever this machine is (match output depends
/// on the host's ISA).
fn ttdb(db: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .env("TTDB_PRETEND_ISA", "avx,avx2,fma")
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ttdb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn sorted_lines(text: &str) -> Vec<&str> {
    let mut v: Vec<&str> = text.lines().collect();
    v.sort_unstable();
    v
}

/// What a backend's round trip imports (folders of the corpus's Ansor logs) and matches,
/// and the fewest records it must hold.
fn sample(backend: Backend) -> (Vec<String>, &'static [&'static str], usize) {
    let ansor = corpus_dir().join("ansor");
    match backend {
        Backend::Sqlite => (
            vec![ansor.display().to_string()],
            &[
                "resnet50",
                "resnet18",
                "alexnet",
                "vgg16",
                "googlenet",
                "mobilenet_v2",
                "densenet121",
            ],
            70_000,
        ),
        Backend::Postgres => {
            let mut folders: Vec<String> = std::fs::read_dir(&ansor)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| !p.ends_with(common::FULL_HISTORY_DIR))
                .map(|p| p.display().to_string())
                .collect();
            folders.sort();
            (folders, &["resnet18", "mobilenet_v2"], 5_000)
        }
    }
}

on_both_backends! {
    fn the_corpus_database_survives_a_bundle_round_trip(backend) {
        let dir = tempfile::tempdir().unwrap();
        let original = new_db(backend, dir.path(), "corpus.db");
        let copy = new_db(backend, dir.path(), "copy.db");
        let bundle = dir.path().join("corpus.ttdb");
        let p = |x: &Path| x.to_str().unwrap().to_string();
        let (folders, models, at_least) = sample(backend);
        let mut import = vec!["import"];
        import.extend(folders.iter().map(String::as_str));
        ttdb(&original, &import);
        ttdb(
            &original,
            &[
                "bundle",
                "export",
                "-o",
                &p(&bundle),
                "--all-records",
                "--compress",
            ],
        );
        ttdb(&copy, &["bundle", "import", &p(&bundle)]);

        let all = |db: &Path| ttdb(db, &["export"]);
        let (a, b) = (all(&original), all(&copy));
        assert!(a.lines().count() > at_least, "the sample of the corpus");
        assert!(sorted_lines(&a) == sorted_lines(&b), "the records differ");
        let best = |db: &Path| ttdb(db, &["export", "--best"]);
        let (a, b) = (best(&original), best(&copy));
        assert!(
            sorted_lines(&a) == sorted_lines(&b),
            "the best records differ"
        );

        let mut snapshot = String::new();
        for model in models {
            let path = corpus_dir().join(format!("onnx/torchvision_graph_only/{model}.onnx"));
            let m = |db: &Path| ttdb(db, &["match", path.to_str().unwrap()]);
            let (a, b) = (m(&original), m(&copy));
            assert_eq!(a, b, "match {model} differs after the round trip");
            snapshot.push_str(&format!("== {model}\n{b}"));
        }
        // The snapshot is the whole corpus's.
        if backend == Backend::Sqlite {
            insta::assert_snapshot!("matches", snapshot);
        }
    }
}
