//! Matching models to the database and transfer-tuning them (the milestone's acceptance).
use crate::common;
use std::path::Path;
use std::time::Duration;
use ttdb::matcher::{match_model, MatchOptions, Matcher, ModelMatch, Tier};
use ttdb::onnx::{self, LayoutMode, Options};
use ttdb::store::import::import_file;
use ttdb::store::Store;
use ttdb::tune::{apply, ApplyOptions};

fn store_with(logs: &[&str]) -> Store {
    let mut s = Store::open_in_memory().unwrap();
    for l in logs {
        let p = common::corpus_dir()
            .join("ansor/tvm_ansor_bench_nchwc")
            .join(format!("{l}.best.json"));
        import_file(&mut s, &p, &|_| {}).unwrap();
    }
    s
}

/// NCHWc kernels as tvm_ansor_bench extracted them (no -mcpu: 4 lanes, TopHub blocking).
fn model_match(store: &Store, model: &Path) -> ModelMatch {
    let tophub = Some(std::sync::Arc::new(onnx::TopHub::builtin()));
    let opts = Options {
        layout: LayoutMode::Nchwc,
        lanes: 4,
        tophub,
        ..Options::default()
    };
    let list = onnx::kernels_for_file(model, &[], &opts).unwrap();
    match_model(&mut Matcher::new(store, MatchOptions::default()), list).unwrap()
}

fn torchvision(name: &str) -> std::path::PathBuf {
    common::corpus_dir()
        .join("onnx/torchvision_graph_only")
        .join(format!("{name}.onnx"))
}

/// (conv kernels, exact, class) of a match.
fn conv_tiers(m: &ModelMatch) -> (usize, usize, usize) {
    let convs: Vec<_> = m
        .matches
        .iter()
        .filter(|x| m.list.kernels[x.kernel].class.contains("conv2d"))
        .collect();
    let n = |t| convs.iter().filter(|x| x.tier == t).count();
    (convs.len(), n(Tier::Exact), n(Tier::Class))
}

#[test]
fn every_network_matches_its_own_log_exactly() {
    let models = [
        ("resnet50", "resnet_50"),
        ("resnet18", "resnet_18"),
        ("alexnet", "alexnet"),
        ("vgg16", "vgg_16"),
        ("googlenet", "googlenet"),
        ("mobilenet_v2", "mobilenet_v2"),
        ("densenet121", "densenet_121"),
    ];
    for (model, log) in models {
        let store = store_with(&[log]);
        let m = model_match(&store, &torchvision(model));
        let (convs, exact, _) = conv_tiers(&m);
        let misses: Vec<String> = m
            .matches
            .iter()
            .filter(|x| x.tier != Tier::Exact)
            .map(|x| {
                let k = &m.list.kernels[x.kernel];
                let why = x
                    .rejections
                    .first()
                    .map(|r| r.reason.clone())
                    .unwrap_or_else(|| format!("{} tier", x.tier.as_str()));
                format!("{} ({}): {why}", k.name, k.class)
            })
            .collect();
        eprintln!(
            "{model:<13} conv kernels {exact}/{convs} exact; not exact: {}",
            misses.len()
        );
        for miss in &misses {
            eprintln!("    {miss}");
        }
        if model == "resnet50" {
            assert_eq!(
                exact, convs,
                "resnet50: every conv kernel must match exactly"
            );
        }
        assert!(
            exact * 100 >= convs * 95,
            "{model}: {exact}/{convs} conv kernels exact"
        );
    }
}

#[test]
fn resnet18_and_googlenet_class_match_from_resnet50_and_vgg16() {
    let store = store_with(&["resnet_50", "vgg_16"]);
    for model in ["resnet18", "googlenet"] {
        let m = model_match(&store, &torchvision(model));
        let (convs, exact, class) = conv_tiers(&m);
        eprintln!("{model}: {convs} conv kernels: {exact} exact, {class} class");
        assert!(
            (exact + class) * 100 >= convs * 80,
            "{model}: only {} of {convs} conv kernels matched",
            exact + class
        );
        assert!(class > 0);
    }
}

#[test]
fn transfer_tuning_resnet18_gives_a_verified_speedup() {
    let store = store_with(&["resnet_50", "vgg_16"]);
    let m = model_match(&store, &torchvision("resnet18"));
    let mut opts = ApplyOptions {
        top_k: 2,
        budget: Duration::from_secs(900),
        // 4-lane defaults (TVM's llvm target without -mcpu): against the host's 16-lane ones
        // the transferred schedules were within noise (1.02x), and whether a class one won
        // was a coin toss under load.
        lanes: 4,
        ..ApplyOptions::default()
    };
    // Fewer repeats than the CLI: the chooser's choice, not 5% differences.
    opts.eval.measure.repeat = 2;
    opts.eval.measure.min_repeat_ms = 20;
    opts.default_eval.measure.repeat = 1;
    opts.default_eval.measure.min_repeat_ms = 1;
    opts.default_eval.measure.warmup = 0;
    let r = apply(
        &m,
        &opts,
        &mut ttdb::tune::record::Discard,
        &mut ttdb::tune::progress::Silent,
    )
    .unwrap();
    eprint!("{}", ttdb::cli::render_apply(&r));
    for k in &r.kernels {
        assert!(k.verified, "{}: not verified ({:?})", k.name, k.trials);
        let (u, t) = (k.untuned_ms.unwrap(), k.tuned_ms.unwrap());
        assert!(
            t <= u,
            "{}: tuned {t} ms slower than untuned {u} ms",
            k.name
        );
    }
    assert!(
        r.kernels.iter().any(|k| k.chosen_tier == Some(Tier::Class)),
        "no transferred (class) schedule was chosen"
    );
    // The baseline is ttdb's own default schedule (register-tiled convs), not the naive
    // loop nest: on an AVX-512 host the schedules transferred from resnet_50 and vgg_16
    // (tuned elsewhere) were 1.02x of it with 16-lane defaults, 2.57x with 4-lane ones.
    // Never slower is what the chooser promises.
    assert!(r.speedup >= 1.0, "model-level speedup {:.2}x", r.speedup);
    assert!(r.search_seconds > 0.0);
}

#[test]
fn match_output_of_a_zoo_model() {
    let store = store_with(&["resnet_50"]);
    let m = model_match(
        &store,
        &common::corpus_dir().join("onnx/zoo_light/light_squeezenet.onnx"),
    );
    insta::assert_snapshot!(ttdb::cli::render_match(&m));
    let conv = m.list.kernels[m
        .matches
        .iter()
        .find(|x| x.tier == Tier::Class)
        .unwrap()
        .kernel]
        .name
        .clone();
    insta::assert_snapshot!(
        "explain_class_kernel",
        ttdb::cli::render_explain(&m, &conv, 3).unwrap()
    );
}

/// A record transferred from another model keeps the kernel's own workload key: regnet_y's
/// residual adds read the block's output second (`add(proj(x), f(x))`), resnet_50's log has
/// it first, so the two DAGs order their stages differently. The candidate's steps are
/// carried over to the kernel's own stage order; before, the candidate kept the source's
/// order, `apply` stored it under a key `run` never looks up, and run kept the default
/// schedule (a 1x1 conv 17x slower).
#[test]
fn transferred_candidates_keep_the_kernels_own_workload_key() {
    use ttdb::ops::era::Era;
    use ttdb::tune::apply::workload_key_of;
    let store = store_with(&["resnet_50"]);
    let model = common::corpus_dir().join("onnx/torchvision_more/regnet_y_400mf.onnx");
    let m = model_match(&store, &model);
    let mut residual = 0;
    for km in &m.matches {
        let k = &m.list.kernels[km.kernel];
        let spec = k.spec.as_ref().unwrap();
        for c in &km.candidates {
            // the source's era: the DAG the candidate was built in
            let own: Vec<String> = Era::ALL
                .iter()
                .filter_map(|&e| spec.build(e, &k.inputs).ok())
                .map(|d| workload_key_of(&d))
                .collect();
            assert!(
                own.contains(&workload_key_of(&c.dag)),
                "{}: candidate from {} has key {} (the kernel's: {own:?})",
                k.name,
                c.source.label(),
                workload_key_of(&c.dag)
            );
            if k.class == "conv2d_nchwc+add+add+relu" {
                residual += 1;
            }
        }
    }
    assert!(residual > 0, "no residual-add kernel got a candidate");
}
