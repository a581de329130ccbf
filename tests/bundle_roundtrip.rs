//! The whole corpus database through a bundle: export every record, import into an empty
//! database; the best records are identical and `ttdb match` reads the same for the seven
//! corpus networks (snapshot).
mod common;
use common::corpus_dir;
use std::path::Path;

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

#[test]
fn the_corpus_database_survives_a_bundle_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let original = dir.path().join("corpus.db");
    let copy = dir.path().join("copy.db");
    let bundle = dir.path().join("corpus.ttdb");
    let p = |x: &Path| x.to_str().unwrap().to_string();
    ttdb(
        &original,
        &["import", corpus_dir().join("ansor").to_str().unwrap()],
    );
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
    assert!(a.lines().count() > 70_000, "the whole corpus");
    assert!(sorted_lines(&a) == sorted_lines(&b), "the records differ");
    let best = |db: &Path| ttdb(db, &["export", "--best"]);
    let (a, b) = (best(&original), best(&copy));
    assert!(
        sorted_lines(&a) == sorted_lines(&b),
        "the best records differ"
    );

    let mut snapshot = String::new();
    for model in [
        "resnet50",
        "resnet18",
        "alexnet",
        "vgg16",
        "googlenet",
        "mobilenet_v2",
        "densenet121",
    ] {
        let path = corpus_dir().join(format!("onnx/torchvision_graph_only/{model}.onnx"));
        let m = |db: &Path| ttdb(db, &["match", path.to_str().unwrap()]);
        let (a, b) = (m(&original), m(&copy));
        assert_eq!(a, b, "match {model} differs after the round trip");
        snapshot.push_str(&format!("== {model}\n{b}"));
    }
    insta::assert_snapshot!(snapshot);
}
