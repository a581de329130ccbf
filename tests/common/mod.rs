//! Helpers shared by integration tests. The real-world corpus lives beside the checkout in
//! `../shared/corpus`; tests that need it fail loudly when it is missing.
#![allow(dead_code)]
use std::path::{Path, PathBuf};

pub fn corpus_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    assert!(
        dir.is_dir(),
        "the shared corpus is missing: expected it at {} (checkout ttdb beside `shared/`)",
        dir.display()
    );
    dir
}

/// All Ansor log files of the corpus, sorted.
pub fn ansor_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let root = corpus_dir().join("ansor");
    for dir in std::fs::read_dir(&root).expect("read corpus/ansor") {
        let dir = dir.unwrap().path();
        for f in std::fs::read_dir(&dir).unwrap() {
            out.push(f.unwrap().path());
        }
    }
    out.sort();
    assert!(
        out.len() >= 20,
        "expected the corpus's Ansor logs under {}",
        root.display()
    );
    out
}

/// CUDA logs: real records, but not for this CPU.
pub fn is_cuda_log(p: &Path) -> bool {
    let name = p.file_name().unwrap().to_string_lossy();
    name.contains("cuda") || name == "conv2d.json"
}

/// Path relative to the corpus root, for readable tables.
pub fn rel(p: &Path) -> String {
    p.strip_prefix(corpus_dir().join("ansor"))
        .unwrap_or(p)
        .display()
        .to_string()
}
