//! The CI smoke of the fuzz harness (fuzz/README.md runs the long libFuzzer campaigns):
//! tens of thousands of mutants of real bundles and log lines, made by the fuzzers' own
//! structure-aware mutator (tests/common/fuzz.rs), through the same two targets. Nothing
//! may panic, and the mutants must reach past the integrity checks: a share of the bundle
//! mutants is accepted whole, and the refusals cover every kind of damage.
use crate::common;
use crate::common::fuzz;

use fuzz::Rng;
use std::collections::BTreeMap;
use ttdb::bundle::format::{
    sha256_hex, Bundle, BundleRecord, Creation, HostEntry, Provenance, RecordMeta,
};

/// A few real lines of every key form and record generation in the corpus.
fn corpus_lines() -> Vec<String> {
    let ansor = common::corpus_dir().join("ansor");
    let mut out = Vec::new();
    for (file, n) in [
        ("tvm_ansor_bench_nchwc/resnet_18.best.json", 6),
        ("tvm_ansor_bench_nhwc/mobilenet_v2.best.json", 2),
        ("bert_cpu/ansor-bert-tuning.stage1.log", 2),
        ("tvm_gallery/sparse_dense.json", 2),
        ("tvm_gallery/matmul.json", 2),
        (
            "jaspann_tt/alexnet-NCHW-B1-llvm-core-avx2.json.best.json",
            2,
        ),
    ] {
        let text = std::fs::read_to_string(ansor.join(file)).unwrap();
        out.extend(
            text.lines()
                .filter(|l| l.starts_with('{'))
                .take(n)
                .map(str::to_string),
        );
    }
    assert!(out.len() >= 14, "expected real lines from every log");
    out
}

fn host() -> HostEntry {
    let fp = ttdb::host::HostFingerprint {
        cpu_model: "AMD EPYC 9R14".into(),
        isa_flags: vec!["avx2".into(), "avx512f".into(), "fma".into()],
        llvm_cpu: "znver4".into(),
        llvm_features: String::new(),
        cores: 2,
        ttdb_version: "0.1.0".into(),
    };
    HostEntry {
        fingerprint: fp.digest(),
        cpu_model: fp.cpu_model,
        isa_features: fp.isa_flags,
        llvm_cpu: fp.llvm_cpu,
        cores: fp.cores,
        ttdb_version: fp.ttdb_version,
    }
}

fn record(line: &str, kinds: &[&str], host: &str) -> BundleRecord {
    BundleRecord {
        meta: RecordMeta {
            sha256: sha256_hex(line.as_bytes()),
            class: "conv2d_nchwc+add+relu".into(),
            signature: "ab".repeat(32),
            provenance: kinds
                .iter()
                .map(|k| Provenance {
                    kind: k.to_string(),
                    source: "resnet_18.best.json".into(),
                    line: 3,
                    host: host.into(),
                })
                .collect(),
        },
        line: line.to_string(),
    }
}

/// Bundles of one to three records (with hosts, several provenance kinds), plain, zstd
/// and signed.
fn bundle_seeds(lines: &[String]) -> Vec<Vec<u8>> {
    let h = host();
    let creation = Creation {
        created_at: "2025-01-01T00:00:00Z".into(),
        creator: "fuzz".into(),
        description: "seed".into(),
    };
    let mut out = Vec::new();
    for (i, chunk) in lines.chunks(3).enumerate() {
        let records = chunk
            .iter()
            .enumerate()
            .map(|(j, l)| match j {
                0 => record(l, &["imported"], ""),
                1 => record(l, &["search", "droplet"], &h.fingerprint),
                _ => record(l, &["transfer"], &h.fingerprint),
            })
            .collect();
        let mut b = Bundle::new(records, std::slice::from_ref(&h), creation.clone());
        if i % 3 == 2 {
            let key = ed25519_dalek::SigningKey::from_bytes(&[i as u8; 32]);
            ttdb::bundle::sign::sign(&mut b, &key);
        }
        out.push(b.to_bytes(false).unwrap());
        out.push(b.to_bytes(true).unwrap());
    }
    for s in &out {
        assert!(fuzz::exercise_bundle(s).is_ok(), "a seed bundle is refused");
    }
    out
}

/// Runs `n` mutants through `exercise`: each walk starts from a seed and mutates its own
/// mutant four times. A panic saves the input and names the file.
fn run<T>(
    name: &str,
    seeds: &[Vec<u8>],
    n: usize,
    mutate: fn(&mut Vec<u8>, &mut Rng, &[Vec<u8>]),
    exercise: fn(&[u8]) -> T,
) -> Vec<T> {
    let mut rng = Rng::new(0x7474_6462 ^ name.len() as u64);
    let mut input = Vec::new();
    let mut outcomes = Vec::with_capacity(n);
    for i in 0..n {
        if i % 4 == 0 {
            input = rng.pick(seeds).clone();
        }
        mutate(&mut input, &mut rng, seeds);
        match std::panic::catch_unwind(|| exercise(&input)) {
            Ok(o) => outcomes.push(o),
            Err(_) => {
                let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                    .join(format!("fuzz-smoke-{name}-{i}"));
                std::fs::write(&path, &input).unwrap();
                panic!(
                    "{name}: mutant {i} panicked (above); input saved to {} \
                     (replay: cd fuzz && cargo +nightly fuzz run {name} {0})",
                    path.display()
                );
            }
        }
    }
    outcomes
}

/// The kind of a refusal, from its message (numbers and hashes left out).
fn kind(reason: &str) -> &'static str {
    // Most specific first: a zstd error says "truncated", an order error "sha256".
    const KINDS: [&str; 13] = [
        "canonical",
        "appears twice",
        "zstd",
        "sha256",
        "truncated",
        "not an Ansor record",
        "record meta",
        "manifest",
        "not UTF-8",
        "provenance",
        "signature",
        "not a ttdb bundle",
        "over the limit",
    ];
    KINDS
        .into_iter()
        .find(|k| reason.contains(k))
        .unwrap_or("other")
}

#[test]
fn bundle_reader_survives_mutants() {
    let seeds = bundle_seeds(&corpus_lines());
    let n = 25_000;
    let outcomes = run(
        "bundle_read",
        &seeds,
        n,
        fuzz::mutate_bundle,
        fuzz::exercise_bundle,
    );
    let accepted = outcomes.iter().filter(|o| o.is_ok()).count();
    let mut refusals: BTreeMap<&str, usize> = BTreeMap::new();
    for e in outcomes.iter().filter_map(|o| o.as_ref().err()) {
        *refusals.entry(kind(&e.reason)).or_default() += 1;
    }
    eprintln!("bundle_read: {n} mutants, {accepted} accepted; refused: {refusals:?}");
    // Resealing gets mutants past the hashes to the record parser and the round trip.
    assert!(
        accepted * 20 > n,
        "only {accepted} of {n} mutants were accepted"
    );
    for k in [
        "sha256",
        "truncated",
        "zstd",
        "not an Ansor record",
        "record meta",
        "manifest",
        "canonical",
        "not UTF-8",
        "over the limit",
        "not a ttdb bundle",
    ] {
        assert!(
            refusals.contains_key(k),
            "no mutant was refused for {k:?}: {refusals:?}"
        );
    }
}

#[test]
fn ansor_line_parser_survives_mutants() {
    let lines: Vec<Vec<u8>> = corpus_lines().into_iter().map(String::into_bytes).collect();
    let n = 40_000;
    let records = run(
        "ansor_line",
        &lines,
        n,
        fuzz::mutate_line,
        fuzz::exercise_line,
    )
    .into_iter()
    .filter(|&r| r)
    .count();
    eprintln!("ansor_line: {n} mutants, {records} still records");
    // Most edits break a line; enough survive to exercise the writer round trip.
    assert!(records * 50 > n, "only {records} of {n} mutants parsed");
    assert!(records < n, "no mutant was refused");
}
