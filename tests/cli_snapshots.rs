//! Snapshots of the human-readable outputs (review changes with `cargo insta review`).
mod common;
use std::path::Path;
use ttdb::cli::{render_import_summary, render_stats, render_workloads, ImportSummary};
use ttdb::store::import::import_file;
use ttdb::store::Store;

const FILE: &str = "../shared/corpus/ansor/tvm_gallery/resnet-50-NHWC-B1-llvm.json";

fn imported() -> (Store, ImportSummary) {
    common::corpus_dir();
    let mut store = Store::open_in_memory().unwrap();
    let mut summary = ImportSummary::default();
    summary.add(import_file(&mut store, Path::new(FILE), &|_| {}).unwrap());
    summary.count_workloads(&store).unwrap();
    (store, summary)
}

#[test]
fn import_summary_of_the_gallery_resnet50_log() {
    let (_, summary) = imported();
    insta::assert_snapshot!(render_import_summary(&summary));
}

#[test]
fn stats_after_importing_the_gallery_resnet50_log() {
    let (store, _) = imported();
    insta::assert_snapshot!(render_stats(&ttdb::store::query::stats(&store).unwrap()));
}

#[test]
fn workloads_of_the_gallery_resnet50_log() {
    let (store, _) = imported();
    insta::assert_snapshot!(render_workloads(
        &ttdb::store::query::workloads(&store, None).unwrap()
    ));
}
