//! Graph-level NCHWc blocking (`--layout-plan planned`, docs/design/layout-plan.md): on real
//! models it removes transforms TopHub's per-conv choice forces, never raises its own
//! estimate above TopHub's, and gives blockings extraction accepts. (Outputs against
//! onnxruntime under planned blockings: `run_model::*_planned`.)
use crate::common;
use std::path::PathBuf;
use std::sync::Arc;
use ttdb::onnx::{
    self, HostEstimates, Kernel, KernelCosts, KernelList, LayoutMode, LayoutPlanning, Options,
};

fn model(path: &str) -> PathBuf {
    common::corpus_dir().join("onnx").join(path)
}

/// The CLI's defaults: NCHWc, 4 lanes, TopHub.
fn cli_defaults() -> Options {
    Options {
        layout: LayoutMode::Nchwc,
        lanes: 4,
        tophub: Some(Arc::new(onnx::TopHub::builtin())),
        ..Options::default()
    }
}

/// The CLI's defaults, planned on the estimate for a 16-lane 2-core host or not.
fn kernels(path: &str, planned: bool) -> KernelList {
    let opts = Options {
        layout_plan: planned.then(|| LayoutPlanning::Estimate(HostEstimates::typical(16, 2))),
        ..cli_defaults()
    };
    onnx::kernels_for_file(model(path), &[], &opts).unwrap()
}

#[test]
fn resnet50_planned_removes_the_transforms_tophub_forces() {
    let planned = kernels("torchvision_graph_only/resnet50.onnx", true);
    let tophub = kernels("torchvision_graph_only/resnet50.onnx", false);
    let p = planned.layout_plan.as_ref().unwrap();
    println!("{p:?}");
    assert!(tophub.layout_plan.is_none());
    assert!(p.estimated_ms <= p.estimated_ms_tophub, "{p:?}");
    assert!(p.transforms < p.transforms_tophub, "{p:?}");
    assert_eq!(p.convs, 53, "{p:?}");
    // What extraction inserted agrees with what the plan counted.
    assert!(
        planned.layout_transforms() < tophub.layout_transforms(),
        "{} planned against {} with TopHub",
        planned.layout_transforms(),
        tophub.layout_transforms()
    );
    // The same convs, the same kernel count (only blockings change).
    assert_eq!(
        planned.tuned().map(|k| k.multiplicity()).sum::<usize>(),
        tophub.tuned().map(|k| k.multiplicity()).sum::<usize>()
    );
}

/// mobilenet_v3_small's convs are not in TopHub: the fallback rule blocks them by 4 lanes
/// on a 16-lane host. The plan fills wider vectors where the channels allow.
#[test]
fn mobilenet_v3_small_planned_fills_the_hosts_vectors() {
    let planned = kernels("torchvision_more/mobilenet_v3_small.onnx", true);
    let tophub = kernels("torchvision_more/mobilenet_v3_small.onnx", false);
    let p = planned.layout_plan.as_ref().unwrap();
    println!("{p:?}");
    assert!(p.estimated_ms < p.estimated_ms_tophub, "{p:?}");
    assert!(p.changed > p.convs / 2, "{p:?}");
    let mean_oc = |l: &KernelList| {
        let blocks: Vec<i64> = l
            .kernels
            .iter()
            .filter_map(|k| Some(k.blocking?.oc_bn))
            .collect();
        blocks.iter().sum::<i64>() as f64 / blocks.len() as f64
    };
    assert!(
        mean_oc(&planned) > 2.0 * mean_oc(&tophub),
        "mean oc_bn {} planned, {} TopHub",
        mean_oc(&planned),
        mean_oc(&tophub)
    );
    // Deterministic: the same plan twice.
    let again = kernels("torchvision_more/mobilenet_v3_small.onnx", true);
    assert_eq!(signatures(&planned), signatures(&again));
}

/// mobilenet_v2's depthwise convs are blocked in whole 16-lane vectors (not 24-channel
/// blocks of a 16- and an 8-lane load), and the project convs that read them agree on the
/// block: no transform between ops but the flatten's.
#[test]
fn mobilenet_v2_planned_blocks_depthwise_convs_in_whole_vectors() {
    let planned = kernels("torchvision_graph_only/mobilenet_v2.onnx", true);
    let p = planned.layout_plan.as_ref().unwrap();
    println!("{p:?}");
    assert!(p.transforms <= 1, "{p:?}");
    let depthwise: Vec<i64> = planned
        .kernels
        .iter()
        .filter(|k| k.class.starts_with("depthwise"))
        .filter_map(|k| Some(k.blocking?.oc_bn))
        .collect();
    assert!(depthwise.len() >= 10, "{depthwise:?}");
    assert!(depthwise.iter().all(|b| b % 16 == 0), "{depthwise:?}");
}

/// regnet_y_400mf's grouped 3x3 convs (8 channels a group) stay NCHW under TopHub, as
/// TVM's AlterOpLayout leaves them: each is wrapped in transforms out of and back into
/// its neighbours' blocks. The plan blocks them too (TVM's grouped conv2d_NCHWc, blocks
/// dividing a group's channels), so the transforms around them go.
#[test]
fn regnet_y_planned_blocks_its_grouped_convs() {
    let planned = kernels("torchvision_more/regnet_y_400mf.onnx", true);
    let tophub = kernels("torchvision_more/regnet_y_400mf.onnx", false);
    let p = planned.layout_plan.as_ref().unwrap();
    println!("{p:?}");
    let grouped = |l: &KernelList| -> Vec<(String, Option<i64>)> {
        l.kernels
            .iter()
            .filter(|k| !k.class.contains("layout_transform"))
            .filter(|k| {
                k.occurrences
                    .iter()
                    .flatten()
                    .any(|n| n.ends_with("/f/b/b.0/Conv"))
            })
            .map(|k| (k.class.clone(), k.blocking.map(|b| b.oc_bn)))
            .collect()
    };
    let (g_planned, g_tophub) = (grouped(&planned), grouped(&tophub));
    assert!(
        !g_tophub.is_empty()
            && g_tophub
                .iter()
                .all(|(c, b)| c.starts_with("group_conv2d_nchw_spatial_pack") && b.is_none()),
        "{g_tophub:?}"
    );
    assert!(
        !g_planned.is_empty()
            && g_planned
                .iter()
                .all(|(c, b)| c.starts_with("conv2d_nchwc") && b.is_some_and(|b| 8 % b == 0)),
        "{g_planned:?}"
    );
    assert!(p.transforms * 2 < p.transforms_tophub, "{p:?}");
    assert!(planned.layout_transforms() * 2 < tophub.layout_transforms());
}

/// A blocking named for a grouped conv must divide a group's channels, not just the conv's.
#[test]
fn a_grouped_conv_blocking_must_divide_its_groups_channels() {
    let path = model("torchvision_more/regnet_y_400mf.onnx");
    let node = "/trunk_output/block1/block1-0/f/b/b.0/Conv"; // 48 channels, 8 a group
    let with = |ic: i64, oc: i64| {
        let mut opts = cli_defaults();
        opts.blocking.insert(node.to_string(), (ic, oc));
        onnx::kernels_for_file(&path, &[], &opts)
    };
    let err = with(16, 16).expect_err("16 does not divide 8").to_string();
    assert!(err.contains(node) && err.contains("per group"), "{err}");
    let l = with(4, 8).unwrap();
    let k = l
        .kernels
        .iter()
        .find(|k| !k.class.contains("layout_transform") && k.occurrences[0][0] == node)
        .unwrap();
    assert!(k.class.starts_with("conv2d_nchwc"), "{}", k.class);
    // kernel [O/oc_bn, (C/groups)/ic_bn, KH, KW, ic_bn, oc_bn]
    assert_eq!(k.inputs[1], vec![6, 2, 3, 3, 4, 8], "{k:?}");
}

fn signatures(l: &KernelList) -> Vec<Option<String>> {
    l.kernels.iter().map(|k| k.signature_hash.clone()).collect()
}

/// Models without an NCHWc conv have no blocking to plan, but a plan is ttdb's own
/// partition: distilbert's denses take their bias adds and GELUs across the reshape back to
/// 3-D (docs/design/layout-plan.md), and the rest of its kernels are TopHub's.
#[test]
fn a_model_without_convs_is_planned_only_in_its_dense_tails() {
    let planned = kernels("transformers/distilbert_like.onnx", true);
    let tophub = kernels("transformers/distilbert_like.onnx", false);
    let p = planned.layout_plan.as_ref().unwrap();
    assert_eq!((p.convs, p.changed, p.transforms), (0, 0, 0), "{p:?}");
    let classes = |l: &KernelList| -> Vec<String> {
        let mut v: Vec<String> = l.kernels.iter().map(|k| k.class.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    let (planned_classes, tophub_classes) = (classes(&planned), classes(&tophub));
    let gelu = "dense+add+divide_scalar+erf+add_scalar+multiply@1+multiply_scalar";
    assert!(
        planned_classes.iter().any(|c| c == gelu),
        "{planned_classes:?}"
    );
    assert!(
        planned_classes.iter().any(|c| c == "dense+add"),
        "{planned_classes:?}"
    );
    assert!(
        !tophub_classes.iter().any(|c| c.starts_with("dense+")),
        "{tophub_classes:?}"
    );
    // the kernels that are not denses or their tails are the same in both
    let untouched = |l: &KernelList| -> Vec<Option<String>> {
        l.kernels
            .iter()
            .filter(|k| !k.class.contains("dense") && !k.class.contains("erf"))
            .filter(|k| !k.class.starts_with("reshape"))
            .map(|k| k.signature_hash.clone())
            .collect()
    };
    assert_eq!(untouched(&planned), untouched(&tophub));
}

/// Timings that say every conv runs twice as fast in 8-channel blocks as in any other.
struct EightIsFaster;

impl KernelCosts for EightIsFaster {
    fn seconds(&self, k: &Kernel) -> Option<f64> {
        let b = k.blocking?;
        Some(if b.oc_bn == 8 { 1e-4 } else { 2e-4 })
    }
}

/// Where the caller has measured times they replace the estimate: the estimate alone fills
/// a 16-lane host's vectors with 16-blocks or wider, the measured times say 8-blocks are
/// faster, and the plan follows the measurements.
#[test]
fn measured_costs_replace_the_estimate() {
    let g = onnx::load(model("torchvision_graph_only/resnet18.onnx"), &[]).unwrap();
    let host = HostEstimates::typical(16, 2);
    let estimated = onnx::plan_layout(&g, &cli_defaults(), &host, None).unwrap();
    let measured = onnx::plan_layout(&g, &cli_defaults(), &host, Some(&EightIsFaster)).unwrap();
    println!("{estimated:?}\n{measured:?}");
    let eights = |p: &onnx::LayoutPlan| p.blocking.values().filter(|b| b.1 == 8).count();
    assert_eq!(estimated.measured_convs, 0);
    assert_eq!(estimated.estimate_scale, 1.0);
    assert_eq!(eights(&estimated), 0, "{estimated:?}");
    assert_eq!(measured.measured_convs, measured.convs, "{measured:?}");
    // The first conv (3 input channels) and the rest: every conv whose channels allow.
    assert!(eights(&measured) >= measured.convs - 1, "{measured:?}");
    // Its cost is the measured convs' (1e-4 s each) plus the scaled transforms.
    assert!(
        measured.estimated_ms >= measured.convs as f64 * 0.1,
        "{measured:?}"
    );
}

fn ttdb(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .args(args)
        .output()
        .unwrap()
}

/// [`ttdb`], which must succeed.
fn ttdb_ok(args: &[&str]) -> std::process::Output {
    let out = ttdb(args);
    assert!(
        out.status.success(),
        "ttdb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn kernels_shows_the_plan_and_refuses_an_unknown_one() {
    let m = model("torchvision_graph_only/resnet18.onnx");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db");
    let db = db.to_str().unwrap();
    let out = ttdb(&[
        "--db",
        db,
        "kernels",
        m.to_str().unwrap(),
        "--layout-plan",
        "planned",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("layout plan (planned now on the estimate (no database)): "),
        "{text}"
    );
    assert!(text.contains("layout transforms between ops"), "{text}");
    let out = ttdb(&["kernels", m.to_str().unwrap(), "--layout-plan", "neocpu"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown --layout-plan `neocpu` (auto, planned, replan, tophub)"),
        "{err}"
    );
}

/// `ttdb kernels MODEL --json`'s layout plan, under `--layout-plan <plan>`.
fn plan_json(db: &str, m: &str, plan: &str) -> Result<serde_json::Value, String> {
    plan_json_with(db, m, plan, &[])
}

fn plan_json_with(
    db: &str,
    m: &str,
    plan: &str,
    extra: &[&str],
) -> Result<serde_json::Value, String> {
    let mut args = vec!["--db", db, "kernels", m, "--layout-plan", plan, "--json"];
    args.extend_from_slice(extra);
    let out = ttdb(&args);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Ok(v["layout_plan"].clone())
}

/// Overwrites the plan pinned in SQLite database `db` (its one row).
fn set_pinned(db: &str, plan_json: &str) {
    let s = ttdb::store::Store::open(std::path::Path::new(db)).unwrap();
    let n = s
        .connection_for_tests()
        .execute("UPDATE layout_plans SET plan_json = ?1", [plan_json])
        .unwrap();
    assert_eq!(n, 1);
}

/// The first command that stores pins the plan and the others read the pin instead of
/// planning again (the workload keys `tune` measured under stay the ones `run` looks up);
/// `replan` plans again, weighing the timings the tune stored; a pin that does not parse or
/// does not fit the model is an error that says how to re-plan.
#[test]
fn the_first_storing_command_pins_the_plan_and_the_others_read_it() {
    let m = model("torchvision_graph_only/resnet18.onnx");
    let m = m.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    let out = ttdb(&[
        "--db",
        db,
        "tune",
        m,
        "--layout-plan",
        "planned",
        "--trials",
        "4",
        "--e2e-runs",
        "0",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("layout plan (planned and pinned "), "{text}");

    let pinned = plan_json(db, m, "planned").unwrap();
    let origin = pinned["origin"].as_str().unwrap();
    assert!(origin.starts_with("pinned "), "{pinned}");
    // A bundle of the model holds the planned kernels' records (the tune stored only those).
    let keys_of = |args: &[&str]| -> std::collections::BTreeSet<String> {
        let file = dir.path().join("k.ttdb");
        let f = file.to_str().unwrap();
        let out = ttdb(&[&["--db", db, "bundle", "export", "-o", f], args].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        common::workload_keys(&std::fs::read_to_string(&file).unwrap())
    };
    let all = keys_of(&["--all"]);
    assert!(!all.is_empty());
    assert_eq!(keys_of(&["--model", m]), all);
    // `export --model` writes TVM's keys (TopHub's blocking), which the tune did not measure
    // under: the kernels it misses are explained.
    let log = dir.path().join("m.json");
    let out = ttdb_ok(&[
        "--db",
        db,
        "export",
        "--model",
        m,
        "-o",
        log.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tuned under ttdb's layout plan") && err.contains("--layout-plan tophub"),
        "{err}"
    );
    // A re-plan reads the tune's timings (measured on this host class).
    let replan = plan_json(db, m, "replan").unwrap();
    assert!(replan["measured_convs"].as_u64().unwrap() > 0, "{replan}");
    assert!(
        replan["origin"].as_str().unwrap().contains("not pinned"),
        "{replan}"
    );
    // A plan for another vector width weighs none of them (with this host's, half of its
    // convs' kernels are ones the tune measured).
    let lanes = ttdb::target::Target::detect().host.f32_lanes();
    let other_lanes = if lanes == 16 { "8" } else { "16" };
    let other = plan_json_with(db, m, "replan", &["--lanes", other_lanes]).unwrap();
    assert_eq!(other["measured_convs"], 0, "{other}");
    // `kernels` does not store: the pin is unchanged.
    assert_eq!(plan_json(db, m, "planned").unwrap()["origin"], origin);

    // The pin is what is read: a blocking changed in it shows in the kernels.
    let mut tampered = pinned.clone();
    let (node, _) = pinned["blocking"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, b)| b[0] == 64 || b[1] == 64 || b[0] == 16)
        .unwrap_or_else(|| panic!("no 16- or 64-blocked conv in {pinned}"));
    tampered["blocking"][node] = serde_json::json!([4, 4]);
    set_pinned(db, &tampered.to_string());
    let read = plan_json(db, m, "planned").unwrap();
    assert_eq!(read["blocking"][node], serde_json::json!([4, 4]), "{read}");
    assert_ne!(
        plan_json(db, m, "replan").unwrap()["blocking"][node],
        serde_json::json!([4, 4])
    );

    // Hostile pins: an error naming the cause and the way out.
    set_pinned(db, "{\"blocking\": 5}");
    let err = plan_json(db, m, "planned").unwrap_err();
    assert!(
        err.contains("does not parse") && err.contains("--layout-plan replan"),
        "{err}"
    );
    tampered["blocking"][node] = serde_json::json!([7, 7]);
    set_pinned(db, &tampered.to_string());
    let err = plan_json(db, m, "planned").unwrap_err();
    assert!(
        err.contains("does not fit it") && err.contains("does not divide"),
        "{err}"
    );
    assert!(plan_json(db, m, "replan").is_ok());
}

/// `ttdb kernels MODEL --json` with the default `--layout-plan` (auto): its layout plan
/// (null under TopHub's blocking) and standard error.
fn auto_plan(db: &str, m: &str) -> (serde_json::Value, String) {
    let out = ttdb_ok(&["--db", db, "kernels", m, "--json"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (v["layout_plan"].clone(), err)
}

/// The default blocking (`--layout-plan auto`): a plan where the database has nothing for
/// the model; TopHub's where it holds TVM's log of the model (whose keys are TopHub's, so
/// that its exact matches stay exact); a pinned plan above all.
#[test]
fn auto_plans_unless_the_database_holds_the_model_under_tophubs_blocking() {
    let m = model("torchvision_graph_only/resnet18.onnx");
    let m = m.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    let (plan, _) = auto_plan(db, m);
    assert_eq!(
        plan["origin"], "planned now on the estimate (no database)",
        "{plan}"
    );
    assert!(plan["changed"].as_u64().unwrap() > 0, "{plan}");

    let import = |name: &str| {
        let log = common::corpus_dir().join(format!("ansor/tvm_ansor_bench_nchwc/{name}"));
        ttdb_ok(&["--db", db, "import", log.to_str().unwrap()]);
    };
    // resnet50's log holds resnet18's stem conv under TopHub's key, and little else of it.
    import("resnet_50.best.json");
    let (plan, err) = auto_plan(db, m);
    assert!(
        plan["origin"].as_str().unwrap().contains("not pinned"),
        "{plan}"
    );
    assert!(!err.contains("TopHub's NCHWc blocking"), "{err}");
    let tiers = |extra: &[&str]| -> Vec<String> {
        let out = ttdb_ok(&[&["--db", db, "match", m, "--json"], extra].concat());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["tier"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        tiers(&["--layout-plan", "tophub"]).contains(&"exact".to_string()),
        "resnet50's log should hold resnet18's stem conv under TopHub's blocking"
    );

    import("resnet_18.best.json");
    let (plan, err) = auto_plan(db, m);
    assert!(plan.is_null(), "{plan}");
    assert!(
        err.contains("TopHub's NCHWc blocking (--layout-plan auto)") && err.contains("100%"),
        "{err}"
    );
    // What match finds under it: the log's schedules, exactly.
    let tiers = tiers(&[]);
    assert!(
        tiers.iter().filter(|t| *t == "exact").count() >= tiers.len() - 1,
        "{tiers:?}"
    );
    // Asked for, a plan is still made (and this reading command pins nothing).
    let planned = plan_json(db, m, "planned").unwrap();
    assert!(
        planned["origin"].as_str().unwrap().contains("not pinned"),
        "{planned}"
    );
    assert!(auto_plan(db, m).0.is_null());

    // A pinned plan wins: the tune measured under it, so `run` must look there.
    ttdb_ok(&[
        "--db",
        db,
        "tune",
        m,
        "--layout-plan",
        "planned",
        "--trials",
        "2",
        "--e2e-runs",
        "0",
    ]);
    let (plan, _) = auto_plan(db, m);
    assert!(
        plan["origin"].as_str().unwrap().starts_with("pinned "),
        "{plan}"
    );
}
