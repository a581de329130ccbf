//! Recognition of every distinct workload key in the real Ansor logs of
//! `../shared/corpus/ansor/` (read from the shared corpus, never copied here).
//!
//! Every CPU key must be recognized; relay keys must be md5-verified (ttdb's own PrintDAG
//! text hashes to the key) except winograd keys, which may fall back to structural
//! inference; registered keys map by name. The two CUDA files are checked too (bonus).
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;
use ttdb::ansor::WorkloadKey;
use ttdb::recognize::{recognize_uncached, RecognizedBy};

fn corpus_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus/ansor");
    assert!(
        dir.is_dir(),
        "the shared Ansor corpus is missing: expected real logs in {} (see shared/corpus/README.md)",
        dir.display()
    );
    dir
}

/// (file path relative to the corpus, is_cuda, distinct keys in first-seen order).
fn corpus_files() -> Vec<(String, bool, Vec<String>)> {
    let root = corpus_dir();
    let mut files = Vec::new();
    for sub in std::fs::read_dir(&root).unwrap() {
        let sub = sub.unwrap().path();
        if !sub.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&sub).unwrap() {
            files.push(f.unwrap().path());
        }
    }
    files.sort();
    assert!(
        files.len() >= 20,
        "expected the full corpus, found {} files",
        files.len()
    );
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let mut keys: Vec<String> = Vec::new();
            let mut cuda = false;
            for line in text.lines() {
                if line.trim().is_empty() || line.starts_with('#') || line.starts_with(' ') {
                    continue;
                }
                let v: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let task = &v["i"][0];
                let key = task[0].as_str().expect("workload key string").to_string();
                cuda |= task[1].as_str().is_some_and(|t| t.starts_with("cuda"));
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
            let rel = path.strip_prefix(&root).unwrap().display().to_string();
            (rel, cuda, keys)
        })
        .collect()
}

#[derive(Default)]
struct Counts {
    keys: usize,
    md5: usize,
    registered: usize,
    structural: usize,
}

#[test]
fn every_corpus_key_is_recognized() {
    let files = corpus_files();
    let mut md5_hashes: BTreeMap<bool, BTreeSet<String>> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut total_keys = 0usize;
    let started = Instant::now();
    println!(
        "{:<62} {:>5} {:>5} {:>5} {:>5}",
        "file", "keys", "md5", "reg", "struct"
    );
    for (file, cuda, keys) in &files {
        let mut c = Counts::default();
        for raw in keys {
            c.keys += 1;
            let key = WorkloadKey::parse(raw).unwrap_or_else(|e| panic!("{file}: {e}"));
            match recognize_uncached(&key) {
                Ok(r) => match &r.recognized_by {
                    RecognizedBy::Md5 => {
                        c.md5 += 1;
                        md5_hashes
                            .entry(*cuda)
                            .or_default()
                            .insert(key.head.clone());
                        // the DAG's key arguments are the key's shapes
                        let flat: Vec<i64> = r.dag.io_shapes().concat();
                        assert_eq!(flat, key.flat_ints(), "{file}: shapes of {raw}");
                    }
                    RecognizedBy::Registered => c.registered += 1,
                    RecognizedBy::Structural { reason } => {
                        c.structural += 1;
                        let winograd = r.signature.op_class.starts_with("conv2d_winograd");
                        if !winograd {
                            failures
                                .push(format!("{file}: structural fallback for a non-winograd key {raw}: {reason}"));
                        }
                    }
                },
                Err(e) => failures.push(format!("{file}: {raw}: {e}")),
            }
        }
        total_keys += c.keys;
        let tag = if *cuda {
            format!("{file} (cuda)")
        } else {
            file.clone()
        };
        println!(
            "{:<62} {:>5} {:>5} {:>5} {:>5}",
            tag, c.keys, c.md5, c.registered, c.structural
        );
    }
    let elapsed = started.elapsed();
    let cpu = md5_hashes.get(&false).map_or(0, BTreeSet::len);
    let all: BTreeSet<&String> = md5_hashes.values().flatten().collect();
    println!(
        "distinct md5-verified hashes: {cpu} in CPU files, {} overall; {total_keys} keys in {:.1?} ({:.2} ms/key)",
        all.len(),
        elapsed,
        elapsed.as_secs_f64() * 1e3 / total_keys as f64
    );
    assert!(
        failures.is_empty(),
        "{} keys not recognized as required:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        cpu >= 96,
        "only {cpu} distinct CPU hashes md5-verified, want >= 96"
    );
}

/// Recognition of one key stays in the millisecond range (uncached, debug build allowed a
/// generous bound).
#[test]
fn recognition_is_fast() {
    let files = corpus_files();
    let keys: Vec<&String> = files.iter().flat_map(|(_, _, k)| k).collect();
    let started = Instant::now();
    for raw in &keys {
        let _ = recognize_uncached(&WorkloadKey::parse(raw).unwrap());
    }
    let per_key = started.elapsed().as_secs_f64() * 1e3 / keys.len() as f64;
    println!("{per_key:.3} ms per key over {} keys", keys.len());
    assert!(per_key < 50.0, "recognition takes {per_key:.1} ms per key");
}

/// The same kernels occur in logs of different TVM eras (the gallery resnet-50 of ~v0.7
/// with flat keys and `placeholder` names; the >= v0.10 NHWC bench and resnet-18 logs with
/// nested keys and `p0` names): their different key hashes must give one signature.
#[test]
fn signatures_are_shared_across_tvm_eras() {
    use std::collections::BTreeMap;
    let mut groups: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    for (_, _, keys) in corpus_files() {
        for raw in keys {
            let key = WorkloadKey::parse(&raw).unwrap();
            let Ok(r) = recognize_uncached(&key) else {
                continue;
            };
            let era = r.era.map_or("-".to_string(), |e| e.to_string());
            groups
                .entry(r.signature.sha256_hex())
                .or_default()
                .insert((era, key.head.clone()));
        }
    }
    let cross: Vec<&BTreeSet<(String, String)>> = groups
        .values()
        .filter(|g| g.iter().map(|(e, _)| e).collect::<BTreeSet<_>>().len() > 1)
        .collect();
    println!(
        "{} signatures shared by keys of different TVM eras",
        cross.len()
    );
    assert!(
        cross.len() >= 10,
        "only {} cross-era signatures",
        cross.len()
    );
    // (v0.7 hash, >= v0.10 hash) of the same kernels: conv3x3+bias+relu, softmax, max pool
    // + add + relu, global average pool
    for (old, new) in [
        (
            "2350d19dc42a0665244368384c66b3a5",
            "d37380659057397544e056461ea3bad3",
        ),
        (
            "d7b65649a4dd54becea0a52aabbc5af5",
            "7d79c516e212fe1d73f5dbb90eaca2cf",
        ),
        (
            "a5612fdeb9db4d579a75ec225ea4c06a",
            "6d012ba18a086c11ee2b85c7324e16f2",
        ),
        (
            "69115f188984ae34ede37c3b8ca40b43",
            "8c53ca2904398da2889aa7508082d7bb",
        ),
    ] {
        let together = cross
            .iter()
            .any(|g| g.iter().any(|(_, h)| h == old) && g.iter().any(|(_, h)| h == new));
        assert!(
            together,
            "{old} (v0.7) and {new} (v0.10+) should share a signature"
        );
    }
}
