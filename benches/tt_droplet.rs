//! Transfer-tuning alone against transfer-tuning + Droplet, side by side in one run: with only
//! the resnet_50 and vgg_16 logs (tuned on a 24-core machine) in the database, ResNet-18's
//! kernels get their transferred schedules (`apply`, top-k 2), then the same with every
//! chosen schedule refined by up to `TTDB_TT_DROPLET` (50) Droplet trials (`apply
//! --droplet`). Reports the kernel sums (latency x count of the tuned kernels), the search
//! times, and the sum of the transferred schedules as Droplet re-timed them just before
//! refining (the same measurement conditions as the refined sum), next to onnxruntime's
//! latency for the whole model when `pip install onnx onnxruntime` has been done.
//!
//! `cargo bench --bench tt_droplet` (env: TTDB_TT_DROPLET, TTDB_TT_MODEL=resnet18).
#[path = "common/onnxruntime.rs"]
mod onnxruntime;
use std::path::Path;
use std::time::Duration;
use ttdb::matcher::{match_layouts, MatchOptions};
use ttdb::onnx::{self, LayoutMode};
use ttdb::store::import::import_file;
use ttdb::store::Store;
use ttdb::tune::progress::Silent;
use ttdb::tune::record::Discard;
use ttdb::tune::refine::RefineOptions;
use ttdb::tune::{apply, ApplyOptions, ApplyReport};

fn main() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    assert!(
        corpus.is_dir(),
        "the shared corpus is missing at {}",
        corpus.display()
    );
    let trials: usize = std::env::var("TTDB_TT_DROPLET")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let model = std::env::var("TTDB_TT_MODEL").unwrap_or_else(|_| "resnet18".into());
    let host = ttdb::target::Target::detect().host;
    println!(
        "host: {} ({}, {} cores, {} fp32 lanes)",
        host.cpu_model,
        host.llvm_cpu,
        host.cores,
        host.f32_lanes()
    );
    let mut store = Store::open_in_memory().unwrap();
    for log in ["resnet_50", "vgg_16"] {
        let p = corpus.join(format!("ansor/tvm_ansor_bench_nchwc/{log}.best.json"));
        import_file(&mut store, &p, &|_| {}).unwrap();
    }
    let path = corpus.join(format!("onnx/torchvision_graph_only/{model}.onnx"));
    let graph = onnx::load(&path, &[]).unwrap();
    // As the logs' own extraction: NCHWc with TopHub's blocking, 4 lanes (no -mcpu).
    let extract = onnx::Options {
        lanes: 4,
        tophub: Some(std::sync::Arc::new(onnx::TopHub::builtin())),
        ..onnx::Options::default()
    };
    let m = match_layouts(
        &store,
        &graph,
        &extract,
        &[LayoutMode::Nchwc],
        MatchOptions::default(),
    )
    .unwrap();
    let base = ApplyOptions {
        top_k: 2,
        budget: Duration::from_secs(3600),
        lanes: host.f32_lanes() as i64,
        ..ApplyOptions::default()
    };
    let mut refine = RefineOptions::default();
    refine.droplet.max_trials = trials;
    let with = ApplyOptions {
        droplet: Some(refine),
        ..base.clone()
    };
    let run = |opts: &ApplyOptions| -> ApplyReport {
        apply(&m, opts, &mut Discard, &mut Silent).unwrap()
    };
    let tt = run(&base);
    let ttd = run(&with);
    println!(
        "\n{model}, {} tuned kernels, only resnet_50 + vgg_16 in the database",
        tt.kernels.len()
    );
    println!(
        "{:<28} {:>12} {:>12} {:>10}",
        "", "kernel sum ms", "search s", "droplet trials"
    );
    println!(
        "{:<28} {:>12.3} {:>12.1} {:>10}",
        "untuned (naive default)", tt.untuned_total_ms, 0.0, 0
    );
    println!(
        "{:<28} {:>12.3} {:>12.1} {:>10}",
        "transfer-tuning", tt.tuned_total_ms, tt.search_seconds, 0
    );
    println!(
        "{:<28} {:>12.3} {:>12.1} {:>10}",
        "transfer-tuning + Droplet", ttd.tuned_total_ms, ttd.search_seconds, ttd.droplet_trials
    );
    let before = ttd.transferred_total_ms.unwrap_or(f64::NAN);
    println!(
        "\nkernel sum, TT+Droplet vs TT (separate runs): {:.2}x ({:+.1}%); within the Droplet run, transferred {before:.3} ms -> refined {:.3} ms: {:.2}x ({:+.1}%); Droplet time {:.1} s",
        tt.tuned_total_ms / ttd.tuned_total_ms,
        100.0 * (ttd.tuned_total_ms / tt.tuned_total_ms - 1.0),
        ttd.tuned_total_ms,
        before / ttd.tuned_total_ms,
        100.0 * (ttd.tuned_total_ms / before - 1.0),
        ttd.droplet_seconds
    );
    match onnxruntime_ms(&path, host.cores) {
        Some(ort) => println!(
            "onnxruntime, whole model ({} threads): {ort:.3} ms; ttdb's tuned-kernel sum is {:.2}x that (it leaves out layout transforms and element-wise kernels)",
            host.cores,
            ttd.tuned_total_ms / ort
        ),
        None => println!("onnxruntime unavailable (pip install onnx onnxruntime to compare)"),
    }
    println!("\nper kernel (TT+Droplet run):");
    println!(
        "{:<22} {:>6} {:>13} {:>11} {:>7} {:>7}  stop",
        "kernel", "count", "transferred ms", "refined ms", "gain", "trials"
    );
    for k in &ttd.kernels {
        let d = k.droplet.as_ref();
        println!(
            "{:<22} {:>6} {:>13} {:>11} {:>7} {:>7}  {}",
            k.name.chars().take(22).collect::<String>(),
            k.multiplicity,
            k.transferred_ms.map_or("-".into(), |v| format!("{v:.3}")),
            k.tuned_ms.map_or("-".into(), |v| format!("{v:.3}")),
            match (k.transferred_ms, k.tuned_ms) {
                (Some(a), Some(b)) => format!("{:.2}x", a / b),
                _ => "-".into(),
            },
            d.map_or(0, |d| d.trials),
            d.map_or("-".to_string(), |d| d.note.clone().unwrap_or_else(|| d
                .stop
                .map_or("-", |s| s.as_str())
                .to_string()))
        );
    }
}

/// onnxruntime's median latency for the whole model (`benches/ort_model.py`), if it runs.
fn onnxruntime_ms(model: &Path, threads: usize) -> Option<f64> {
    onnxruntime::script_ms("ort_model.py", &[model.to_str()?, &threads.to_string()])
}
