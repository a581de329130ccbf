//! Host compatibility in matching: records timed on an ISA this host lacks (AVX-512 on an
//! AVX2 host) stay candidates but rank after those it has, and `match --explain` says why.
use crate::common;
use std::path::{Path, PathBuf};
use ttdb::ansor::Record;
use ttdb::host::IsaCompat;
use ttdb::matcher::{match_model, KernelMatch, MatchOptions, Matcher, ModelMatch, Tier};
use ttdb::onnx::{self, LayoutMode, Options};
use ttdb::store::import::import_file;
use ttdb::store::Store;

const AVX2_HOST: &[&str] = &["avx", "avx2", "fma", "sse4_2"];
const AVX512_HOST: &[&str] = &["avx", "avx2", "avx512f", "fma", "sse4_2"];

/// The first record of the resnet_18 log re-targeted: `target` and one cost.
fn variant(target: &str, cost: f64) -> String {
    let log = common::corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json");
    let text = std::fs::read_to_string(log).unwrap();
    let mut r = Record::parse(text.lines().next().unwrap()).unwrap();
    r.task.target = target.into();
    r.result.costs = vec![cost];
    r.to_line()
}

/// A log with one workload: a faster record from an AVX-512 target and a slower one from
/// an AVX2 target.
fn write_log(dir: &Path) -> PathBuf {
    let log = dir.join("isa_records.json");
    let lines = [
        variant("llvm -keys=cpu -mcpu=skylake-avx512", 1.0e-4),
        variant("llvm -keys=cpu -mcpu=core-avx2", 2.0e-4),
    ];
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    log
}

fn resnet18() -> PathBuf {
    common::corpus_dir().join("onnx/torchvision_graph_only/resnet18.onnx")
}

/// ResNet-18's NCHWc kernels (4 lanes, TopHub blocking: what `ttdb match` does by default)
/// matched for a host with `flags`.
fn matched(store: &Store, flags: &[&str]) -> ModelMatch {
    let tophub = Some(std::sync::Arc::new(onnx::TopHub::builtin()));
    let opts = Options {
        layout: LayoutMode::Nchwc,
        lanes: 4,
        tophub,
        ..Options::default()
    };
    let list = onnx::kernels_for_file(resnet18(), &[], &opts).unwrap();
    let host_isa = flags.iter().map(|f| f.to_string()).collect();
    let opts = MatchOptions {
        host_isa,
        ..MatchOptions::default()
    };
    match_model(&mut Matcher::new(store, opts), list).unwrap()
}

/// The one kernel the log's workload matches exactly.
fn exact(m: &ModelMatch) -> &KernelMatch {
    let exact: Vec<&KernelMatch> = m.matches.iter().filter(|x| x.tier == Tier::Exact).collect();
    assert_eq!(exact.len(), 1, "one kernel should match the log's workload");
    exact[0]
}

fn targets(km: &KernelMatch) -> Vec<(&str, IsaCompat)> {
    km.candidates
        .iter()
        .filter(|c| c.tier == Tier::Exact)
        .map(|c| (c.source.target.as_str(), c.compat))
        .collect()
}

#[test]
fn an_avx2_host_ranks_the_avx2_record_first_and_keeps_the_avx512_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open_in_memory().unwrap();
    import_file(&mut store, &write_log(dir.path()), &|_| {}).unwrap();

    let m = matched(&store, AVX2_HOST);
    let km = exact(&m);
    assert_eq!(
        targets(km),
        [
            ("llvm -keys=cpu -mcpu=core-avx2", IsaCompat::Compatible),
            ("llvm -keys=cpu -mcpu=skylake-avx512", IsaCompat::Lacks),
        ]
    );
    let name = &m.list.kernels[km.kernel].name;
    let text = ttdb::cli::render_explain(&m, name, 5).unwrap();
    assert!(
        text.contains("record needs avx512f (target -mcpu=skylake-avx512); this host lacks it: ranked after compatible records"),
        "{text}"
    );
    insta::assert_snapshot!("explain_on_an_avx2_host", text);

    // On an AVX-512 host both are compatible: the faster one ranks first.
    let m = matched(&store, AVX512_HOST);
    assert_eq!(
        targets(exact(&m)),
        [
            ("llvm -keys=cpu -mcpu=skylake-avx512", IsaCompat::Compatible),
            ("llvm -keys=cpu -mcpu=core-avx2", IsaCompat::Compatible),
        ]
    );
    // A host whose ISA is unknown judges nothing: cost order, and explain says nothing.
    let m = matched(&store, &[]);
    let km = exact(&m);
    assert_eq!(
        targets(km),
        [
            ("llvm -keys=cpu -mcpu=skylake-avx512", IsaCompat::Unknown),
            ("llvm -keys=cpu -mcpu=core-avx2", IsaCompat::Unknown),
        ]
    );
    let text = ttdb::cli::render_explain(&m, &m.list.kernels[km.kernel].name, 5).unwrap();
    assert!(!text.contains("avx512f"), "{text}");
}

/// A class candidate taken from a workload whose fastest record needs AVX-512: the
/// workload's best AVX2 record is asked for too, and ranks first on an AVX2 host.
#[test]
fn class_candidates_of_an_avx2_host_include_the_best_avx2_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open_in_memory().unwrap();
    import_file(&mut store, &write_log(dir.path()), &|_| {}).unwrap();
    let m = matched(&store, AVX2_HOST);
    let class = m
        .matches
        .iter()
        .find(|x| x.tier == Tier::Class)
        .expect("a kernel of the same class matches the workload by class");
    let got: Vec<(&str, IsaCompat)> = class
        .candidates
        .iter()
        .map(|c| (c.source.target.as_str(), c.compat))
        .collect();
    assert_eq!(
        got,
        [
            ("llvm -keys=cpu -mcpu=core-avx2", IsaCompat::Compatible),
            ("llvm -keys=cpu -mcpu=skylake-avx512", IsaCompat::Lacks),
        ]
    );
}

/// The CLI plays an AVX2 host with `TTDB_PRETEND_ISA`: `import` counts the records this
/// host cannot run as timed, `match --json` and `--explain` rank and say so.
#[test]
fn the_cli_ranks_for_the_host_it_is_told_it_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ttdb.db");
    let log = write_log(dir.path());
    let run = |isa: &str, args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
            .env("TTDB_PRETEND_ISA", isa)
            .arg("--db")
            .arg(&db)
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{args:?}: {stderr}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let imported: serde_json::Value = serde_json::from_str(&run(
        "avx2,fma",
        &["import", log.to_str().unwrap(), "--json"],
    ))
    .unwrap();
    assert_eq!(imported["needs_missing_isa"], 1, "{imported}");
    assert_eq!(imported["missing_isa"]["avx512f"], 1, "{imported}");
    let text = run("avx2,fma", &["import", log.to_str().unwrap()]);
    assert!(
        text.contains("records needing an ISA this host lacks: 1 (avx512f: 1;"),
        "{text}"
    );
    let text = run("avx2,avx512f", &["import", log.to_str().unwrap()]);
    assert!(
        text.contains("records needing an ISA this host lacks: 0\n"),
        "{text}"
    );

    let model = resnet18();
    let first_exact = |isa: &str| {
        let v: serde_json::Value = serde_json::from_str(&run(
            isa,
            // TVM's records are keyed under TopHub's blocking.
            &[
                "match",
                model.to_str().unwrap(),
                "--layout-plan",
                "tophub",
                "--json",
            ],
        ))
        .unwrap();
        let k = v["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["tier"] == "exact")
            .cloned()
            .unwrap();
        let c = &k["candidates"][0];
        (
            k["name"].as_str().unwrap().to_string(),
            c["source"]["target"].as_str().unwrap().to_string(),
            c["compat"].as_str().unwrap().to_string(),
        )
    };
    let (name, target, compat) = first_exact("avx2,fma");
    assert_eq!(
        (target.as_str(), compat.as_str()),
        ("llvm -keys=cpu -mcpu=core-avx2", "compatible")
    );
    let (_, target, _) = first_exact("avx2,avx512f,fma");
    assert_eq!(target, "llvm -keys=cpu -mcpu=skylake-avx512");
    let text = run(
        "avx2,fma",
        &[
            "match",
            model.to_str().unwrap(),
            "--layout-plan",
            "tophub",
            "--explain",
            &name,
        ],
    );
    assert!(
        text.contains("record needs avx512f (target -mcpu=skylake-avx512); this host lacks it: ranked after compatible records"),
        "{text}"
    );
}
