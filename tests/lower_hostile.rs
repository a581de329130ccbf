//! Lowering untrusted schedules: every schedule replay accepts must lower to a kernel that
//! passes the bounds checker and computes the right values in the checked interpreter, or
//! give a clean `LowerError`: never a panic, never an out-of-bounds access.
//!
//! Sources: the real records of `tests/replay_hostile.rs` re-targeted to small workloads of
//! the same classes and perturbed at every number and list; hand-written schedules that
//! attach into odd places, split far past extents and use huge shapes; and random step
//! sequences on several small DAGs.
use crate::common::mutate;
use mutate::step_mutants;
use serde_json::Value;
use ttdb::ansor::step::*;
use ttdb::ansor::{Annotation, Step};
use ttdb::ir::eval::random_inputs;
use ttdb::ir::{DType, Dag};
use ttdb::loopnest::check_bounds;
use ttdb::loopnest::cost::CostLimits;
use ttdb::loopnest::interp::{run, InterpError, InterpOptions};
use ttdb::lower::check::{compare_outputs, interpret_with_layout, kernel_args};
use ttdb::lower::{lower, lower_steps_detailed, LowerError, LowerOptions, WeightLayoutMode};
use ttdb::ops::{
    registered, Anchor, EpilogueOp, Era, PoolAttrs, PoolKind, PoolLayout, Window2d, WorkloadSpec,
};
use ttdb::schedule::retarget_steps;
use ttdb::schedule::{stage_inits_from_dag, State};

const BUDGET: u64 = 20_000_000;

fn opts() -> LowerOptions {
    // small limits: a hostile schedule must not make the test allocate gigabytes
    LowerOptions {
        limits: CostLimits {
            max_total_steps: 2_000_000_000,
            max_temp_bytes: 64 << 20,
            max_stmt_nodes: 200_000,
            ..CostLimits::default()
        },
        ..LowerOptions::default()
    }
}

fn steps(json: &str) -> Vec<Step> {
    let v: Value = serde_json::from_str(json).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| Step::from_json(s).unwrap())
        .collect()
}

/// The verdict on one replayed state.
#[derive(Debug, PartialEq)]
enum Verdict {
    Refused(String),
    Correct,
    /// Ran out of interpreter steps before finishing (no out-of-bounds access until then).
    Budget,
}

/// Lowers `state` and runs it; panics on anything unsafe or wrong.
fn judge(dag: &Dag, state: &State, what: &str) -> Verdict {
    let k = match lower(dag, state, &opts()) {
        Ok(k) => k,
        Err(e) => {
            assert!(
                !matches!(e, LowerError::Internal(_)),
                "{what}: internal error {e}\n{}",
                state.dump()
            );
            if std::env::var("SHOW_REFUSED").is_ok() {
                println!("REFUSED {what}: {e}");
            }
            return Verdict::Refused(e.kind().to_string());
        }
    };
    let unproven = check_bounds(&k).unwrap();
    assert!(
        unproven.is_empty(),
        "{what}: lowered kernel with unproven accesses {unproven:?}"
    );
    let inputs = random_inputs(dag, 5);
    let reference = ttdb::ir::eval::evaluate(dag, &inputs).unwrap();
    let mut args = kernel_args(&k, &inputs).unwrap();
    #[allow(clippy::needless_update)]
    let o = InterpOptions {
        step_budget: Some(BUDGET),
        ..Default::default()
    };
    match run(&k, &mut args, o) {
        Ok(_) => {}
        Err(InterpError::StepBudgetExceeded(_)) => return Verdict::Budget,
        Err(e) => panic!(
            "{what}: interpreter error {e}\n{}\n{}",
            state.dump(),
            ttdb::loopnest::kernel_to_string(&k)
        ),
    }
    let (_, rel) = compare_outputs(&k, &args, &reference).unwrap();
    assert!(
        rel <= ttdb::loopnest::verify::RTOL,
        "{what}: wrong result (relative error {rel:.3e})\n{}\n{}",
        state.dump(),
        ttdb::loopnest::kernel_to_string(&k)
    );
    Verdict::Correct
}

// ---- small workloads of the classes of replay_hostile's real records ----------------------

fn conv_small() -> Dag {
    // the de7d1695 class: conv2d NHWC 1x1 stride 2 + bias + relu, TVM 0.7 names
    let spec = WorkloadSpec::new(
        Anchor::Conv2dNhwc(Window2d::simple(2, 0)),
        vec![
            EpilogueOp::Add {
                operand_first: false,
            },
            EpilogueOp::Relu,
        ],
    );
    spec.build(
        Era::V07,
        &[vec![1, 6, 6, 16], vec![1, 1, 16, 8], vec![1, 1, 1, 8]],
    )
    .unwrap()
}

fn conv3x3_small() -> Dag {
    let spec = WorkloadSpec::new(
        Anchor::Conv2dNhwc(Window2d::simple(1, 1)),
        vec![
            EpilogueOp::Add {
                operand_first: false,
            },
            EpilogueOp::Relu,
        ],
    );
    spec.build(
        Era::V010,
        &[vec![1, 5, 5, 4], vec![3, 3, 4, 6], vec![1, 1, 1, 6]],
    )
    .unwrap()
}

fn dense_small() -> Dag {
    WorkloadSpec::new(Anchor::Dense, vec![])
        .build(Era::V08, &[vec![6, 24], vec![16, 24]])
        .unwrap()
}

fn softmax_small() -> Dag {
    WorkloadSpec::new(Anchor::Softmax { axis: 1 }, vec![])
        .build(Era::V07, &[vec![1, 60]])
        .unwrap()
}

fn pool_small() -> Dag {
    let attrs = PoolAttrs {
        kind: PoolKind::Max,
        kernel: [3, 3],
        stride: [2, 2],
        dilation: [1, 1],
        padding: [0; 4],
        ceil_mode: false,
        layout: PoolLayout::Nchwc,
    };
    WorkloadSpec::new(Anchor::Pool(attrs), vec![])
        .build(Era::V010, &[vec![1, 2, 7, 7, 4]])
        .unwrap()
}

fn adaptive_small() -> Dag {
    let a = Anchor::AdaptivePool {
        kind: PoolKind::Avg {
            count_include_pad: true,
        },
        layout: PoolLayout::Nchw,
        out_hw: [3, 2],
    };
    WorkloadSpec::new(a, vec![])
        .build(Era::V010, &[vec![1, 3, 7, 5]])
        .unwrap()
}

const CONV_STEPS: &str = r#"[["CI", 5], ["SP", 3, 0, 1, [1, 1, 1], 1], ["SP", 3, 4, 7, [1, 1, 7], 1], ["SP", 3, 8, 7, [1, 1, 1], 1], ["SP", 3, 12, 512, [32, 1, 8], 1], ["SP", 3, 16, 1, [1], 1], ["SP", 3, 18, 1, [1], 1], ["SP", 3, 20, 1024, [8], 1], ["RE", 3, [0, 4, 8, 12, 1, 5, 9, 13, 16, 18, 20, 2, 6, 10, 14, 17, 19, 21, 3, 7, 11, 15]], ["CI", 1], ["FU", 3, [0, 1, 2, 3, 4, 5, 6, 7]], ["AN", 3, 0, 3], ["FU", 6, [0, 1, 2, 3]], ["AN", 6, 0, 3], ["PR", 3, 0, "auto_unroll_max_step$512"], ["AN", 3, 14, 2]]"#;
const DENSE_STEPS: &str = r#"[["CHW", 2, "local"], ["SP", 2, 0, 14, [1, 1, 14], 1], ["SP", 2, 4, 768, [32, 1, 4], 1], ["SP", 2, 8, 3072, [48], 1], ["RE", 2, [0, 4, 1, 5, 8, 2, 6, 9, 3, 7]], ["FSP", 3, 0, 1, 2], ["FSP", 3, 3, 2, 2], ["RE", 3, [0, 3, 1, 4, 2, 5]], ["CA", 2, 3, 3], ["FU", 3, [0, 1, 2, 3]], ["AN", 3, 0, 3], ["PR", 2, 0, "auto_unroll_max_step$16"], ["AN", 2, 9, 2], ["AN", 3, 2, 2]]"#;
const SOFTMAX_STEPS: &str = r#"[["SP", 3, 1, 1000, [50], 1], ["RF", 3, 2, 1], ["RE", 3, [0, 2, 1]], ["SP", 1, 1, 1000, [20], 1], ["RF", 1, 2, 1], ["RE", 1, [0, 2, 1]], ["CR", 6], ["CA", 5, 6, 1], ["CR", 4], ["CA", 2, 3, 1], ["AN", 1, 0, 3], ["FU", 3, [0, 1]], ["AN", 3, 0, 3], ["AN", 4, 0, 3], ["FU", 6, [0, 1]], ["AN", 6, 0, 3], ["PR", 1, 0, "auto_unroll_max_step$16"], ["PR", 2, 0, "auto_unroll_max_step$16"], ["PR", 4, 0, "auto_unroll_max_step$16"], ["PR", 5, 0, "auto_unroll_max_step$64"]]"#;
const POOL_STEPS: &str = r#"[["FU", 1, [5, 6]], ["SP", 1, 5, 9, [9], 1], ["RF", 1, 5, 5], ["CA", 1, 2, 2], ["FU", 2, [0, 1, 2]], ["AN", 2, 0, 3], ["PR", 1, 0, "auto_unroll_max_step$16"], ["PR", 2, 0, "auto_unroll_max_step$512"]]"#;

fn real() -> Vec<(&'static str, Dag, &'static str)> {
    vec![
        ("conv", conv_small(), CONV_STEPS),
        ("dense", dense_small(), DENSE_STEPS),
        ("softmax", softmax_small(), SOFTMAX_STEPS),
        ("pool", pool_small(), POOL_STEPS),
    ]
}

#[test]
fn real_records_retargeted_lower_correctly() {
    for (what, dag, json) in real() {
        let r = retarget_steps(&stage_inits_from_dag(&dag), &steps(json))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(judge(&dag, &r.state, what), Verdict::Correct, "{what}");
    }
}

/// Every number of the re-targeted real records changed (±1, 0, 2, huge), every list made
/// shorter and longer, every step dropped: whatever replay accepts must lower safely and
/// correctly, or be refused cleanly.
#[test]
fn perturbed_records_lower_safely() {
    let (mut replayed, mut correct, mut refused, mut budget) = (0, 0, 0, 0);
    for (what, dag, json) in real() {
        let inits = stage_inits_from_dag(&dag);
        let adapted = retarget_steps(&inits, &steps(json)).unwrap().steps;
        let base: Value = serde_json::from_str(&format!(
            "[{}]",
            adapted
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ))
        .unwrap();
        let mutants = step_mutants(&base);
        for (n, m) in mutants.iter().enumerate() {
            let Ok(parsed) = m
                .as_array()
                .unwrap()
                .iter()
                .map(Step::from_json)
                .collect::<Result<Vec<_>, _>>()
            else {
                continue;
            };
            let mut st = State::new(&inits).unwrap();
            if st.apply_all(&parsed).is_err() {
                continue;
            }
            replayed += 1;
            match judge(&dag, &st, &format!("{what} mutant {n}: {m}")) {
                Verdict::Correct => correct += 1,
                Verdict::Refused(_) => refused += 1,
                Verdict::Budget => budget += 1,
            }
        }
    }
    println!("{replayed} perturbed records replayed: {correct} lowered and correct, {refused} refused cleanly, {budget} out of interpreter budget");
    assert!(
        replayed > 300 && correct > replayed / 2,
        "{replayed} / {correct}"
    );
}

/// The hostile cases of `tests/replay_hostile.rs` (same DAG classes, small sizes): replay
/// refuses each at some step, so `lower_steps` must fail cleanly; the valid prefix before
/// the refused step must lower safely.
const REPLAY_HOSTILE: &[(&str, &str, &str)] = &[
    (
        "stage id out of range",
        "CONV",
        r#"[["SP", 9, 0, 1, [1], 1]]"#,
    ),
    ("iterator id out of range", "CONV", r#"[["AN", 3, 7, 2]]"#),
    (
        "step on a placeholder",
        "CONV",
        r#"[["SP", 2, 0, 1, [1], 1]]"#,
    ),
    (
        "RE with a repeated id",
        "CONV",
        r#"[["RE", 3, [0, 1, 2, 3, 4, 5, 5]]]"#,
    ),
    ("RE with missing ids", "CONV", r#"[["RE", 3, [1, 0]]]"#),
    (
        "FU of non-consecutive loops",
        "CONV",
        r#"[["FU", 3, [0, 2]]]"#,
    ),
    ("FU of reversed loops", "CONV", r#"[["FU", 3, [2, 1]]]"#),
    ("FU of nothing", "CONV", r#"[["FU", 3, []]]"#),
    (
        "FU over an attach point",
        "CONV",
        r#"[["CA", 1, 3, 1], ["FU", 3, [1, 2]]]"#,
    ),
    (
        "CI of a stage others are attached to",
        "CONV",
        r#"[["CA", 3, 5, 0], ["CI", 5]]"#,
    ),
    ("CI of a reduction", "CONV", r#"[["CI", 3]]"#),
    ("CI of the output", "CONV", r#"[["CI", 6]]"#),
    (
        "CA onto a stage that does not consume it",
        "BRANCH",
        r#"[["CA", 1, 2, 0]]"#,
    ),
    (
        "CHR read by a stage that does not read it",
        "BRANCH",
        r#"[["CHR", 1, "local", [2]]]"#,
    ),
    ("CA onto itself", "CONV", r#"[["CA", 3, 3, 0]]"#),
    ("CA onto a producer", "CONV", r#"[["CA", 5, 3, 0]]"#),
    (
        "CA closing a cycle",
        "CONV",
        r#"[["CA", 3, 5, 0], ["CA", 5, 3, 0]]"#,
    ),
    ("CA onto a placeholder", "CONV", r#"[["CA", 3, 4, 0]]"#),
    (
        "CA onto an inlined stage",
        "CONV",
        r#"[["CI", 5], ["CA", 3, 5, 0]]"#,
    ),
    (
        "CA onto a loop out of range",
        "CONV",
        r#"[["CA", 3, 6, 4]]"#,
    ),
    (
        "split length 0",
        "CONV",
        r#"[["SP", 3, 3, 512, [0, 8], 1]]"#,
    ),
    (
        "negative split length",
        "CONV",
        r#"[["SP", 3, 3, 512, [-8], 1]]"#,
    ),
    (
        "split product above the extent cap",
        "CONV",
        r#"[["SP", 3, 3, 512, [1048576, 1048576, 2], 1]]"#,
    ),
    (
        "over-long split parts fused past the cap",
        "CONV",
        r#"[["SP", 3, 3, 512, [1048576, 1048576], 1], ["FU", 3, [2, 3, 4, 5]]]"#,
    ),
    (
        "split product overflowing",
        "CONV",
        r#"[["SP", 3, 3, 512, [2147483647, 2147483647, 2147483647], 1]]"#,
    ),
    (
        "huge split of an undefined extent",
        "CONV",
        r#"[["CA", 3, 6, 0], ["SP", 3, 3, 0, [2147483647, 2147483647], 1]]"#,
    ),
    (
        "FSP following a non-SP step",
        "CONV",
        r#"[["SP", 3, 3, 512, [8], 1], ["RE", 3, [0, 1, 2, 4, 3, 5, 6, 7]], ["FSP", 6, 3, 1, 1]]"#,
    ),
    (
        "FSP following a future step",
        "CONV",
        r#"[["FSP", 6, 3, 4, 1]]"#,
    ),
    (
        "FSP following itself",
        "CONV",
        r#"[["SP", 3, 3, 512, [8], 1], ["FSP", 6, 3, 1, 1]]"#,
    ),
    (
        "FSP with n_split 0",
        "CONV",
        r#"[["SP", 3, 3, 512, [8], 1], ["FSP", 6, 3, 0, 0]]"#,
    ),
    (
        "FSP with n_split too large",
        "CONV",
        r#"[["SP", 3, 3, 512, [8], 1], ["FSP", 6, 3, 0, 3]]"#,
    ),
    (
        "FFSP level out of range",
        "CONV",
        r#"[["SP", 3, 3, 512, [8], 1], ["FFSP", 6, 3, [0], 1, 1]]"#,
    ),
    (
        "FFSP following a non-SP step",
        "CONV",
        r#"[["CI", 5], ["FFSP", 6, 3, [0], 0, 1]]"#,
    ),
    ("RF without a split", "SOFTMAX", r#"[["RF", 3, 1, 1]]"#),
    (
        "RF after a split of another stage",
        "SOFTMAX",
        r#"[["SP", 1, 1, 1000, [50], 1], ["RF", 3, 1, 1]]"#,
    ),
    (
        "RF of a loop the split did not make",
        "SOFTMAX",
        r#"[["SP", 3, 1, 1000, [50], 1], ["RF", 3, 0, 1]]"#,
    ),
    (
        "RF of a spatial loop",
        "SOFTMAX",
        r#"[["SP", 2, 1, 1000, [50], 1], ["RF", 2, 1, 1]]"#,
    ),
    (
        "RF factor axis past the axes",
        "SOFTMAX",
        r#"[["SP", 3, 1, 1000, [50], 1], ["RF", 3, 2, 2]]"#,
    ),
    (
        "annotation of an annotated loop",
        "CONV",
        r#"[["AN", 6, 0, 3], ["AN", 6, 0, 2]]"#,
    ),
    (
        "two parallel loops in a stage",
        "CONV",
        r#"[["AN", 6, 0, 3], ["AN", 6, 1, 3]]"#,
    ),
    (
        "parallel inside an attach parallel loop",
        "CONV",
        r#"[["AN", 6, 0, 3], ["CA", 3, 6, 1], ["AN", 3, 0, 3]]"#,
    ),
    (
        "CA of a parallel stage into a parallel loop",
        "CONV",
        r#"[["AN", 6, 0, 3], ["AN", 3, 0, 3], ["CA", 3, 6, 1]]"#,
    ),
    ("tensorize", "CONV", r#"[["AN", 3, 0, 11]]"#),
    (
        "unknown pragma",
        "CONV",
        r#"[["PR", 3, 0, "unroll_explicit"]]"#,
    ),
    (
        "malformed unroll pragma",
        "CONV",
        r#"[["PR", 3, 0, "auto_unroll_max_step$1e3"]]"#,
    ),
    (
        "debug_skip_region of an attached stage",
        "CONV",
        r#"[["CA", 3, 6, 1], ["PR", 3, 0, "debug_skip_region"]]"#,
    ),
    (
        "storage_align with factor 0",
        "CONV",
        r#"[["SA", 3, 0, 0, 0]]"#,
    ),
    ("CHW of a placeholder", "CONV", r#"[["CHW", 2, "local"]]"#),
    (
        "CHW after loop steps",
        "CONV",
        r#"[["SP", 3, 3, 512, [8], 1], ["CHW", 3, "local"]]"#,
    ),
    ("CHW with an empty scope", "CONV", r#"[["CHW", 3, ""]]"#),
    (
        "CHR read by a producer",
        "CONV",
        r#"[["CHR", 2, "shared", [1]]]"#,
    ),
    (
        "CHR without readers",
        "CONV",
        r#"[["CHR", 2, "shared", []]]"#,
    ),
    (
        "RE moving an attach loop",
        "CONV",
        r#"[["CA", 3, 6, 1], ["RE", 6, [1, 0, 2, 3]]]"#,
    ),
];

fn branch_small() -> Dag {
    // D = B(A) + C(A), two branches of one input
    use ttdb::ir::{DagBuilder, Expr, IterVar};
    let mut b = DagBuilder::new();
    let a = b.placeholder("A", &[6, 5], DType::F32);
    let axes = || vec![IterVar::new("i", 6), IterVar::new("j", 5)];
    let x = b.elementwise("B", "", axes(), |v| a.at(v.to_vec()) * Expr::f32(2.0));
    let y = b.elementwise("C", "", axes(), |v| {
        a.at(vec![v[0].clone(), Expr::int(4) - v[1].clone()])
    });
    let d = b.elementwise("D", "", axes(), |v| x.at(v.to_vec()) + y.at(v.to_vec()));
    b.finish(&[&d])
}

#[test]
fn replay_hostile_cases_are_refused_and_their_prefixes_lower() {
    assert!(REPLAY_HOSTILE.len() >= 50);
    let (mut prefixes, mut correct) = (0, 0);
    for &(what, init, json) in REPLAY_HOSTILE {
        let dag = match init {
            "CONV" => conv_small(),
            "SOFTMAX" => softmax_small(),
            "BRANCH" => branch_small(),
            other => panic!("{other}"),
        };
        let all = steps(json);
        let e = ttdb::lower::lower_steps(&dag, &all, &opts()).unwrap_err();
        assert!(
            matches!(e, LowerError::Mismatch(ref m) if m.contains("replay")),
            "{what}: {e}"
        );
        // the longest prefix replay accepts (re-targeted to the small workload)
        let inits = stage_inits_from_dag(&dag);
        let mut st = State::new(&inits).unwrap();
        let mut ok = Vec::new();
        for s in &all {
            if st.apply(s).is_err() {
                break;
            }
            ok.push(s.clone());
        }
        let Ok(r) = retarget_steps(&inits, &ok) else {
            continue;
        };
        prefixes += 1;
        correct += (judge(&dag, &r.state, what) == Verdict::Correct) as usize;
    }
    println!(
        "{} hostile records refused; {prefixes} valid prefixes lowered, {correct} correct",
        REPLAY_HOSTILE.len()
    );
    assert!(correct > 40, "{correct}");
}

/// Hand-written schedules: (what, dag, steps, expected: Ok = correct, Err(kind) = refused).
fn odd_cases() -> Vec<(&'static str, Dag, &'static str, Result<(), &'static str>)> {
    let mm = || registered::matmul_add(7, 6, 5, DType::F32).unwrap();
    vec![
        (
            "split product just under twice the extent",
            mm(),
            r#"[["SP", 2, 0, 7, [13], 1], ["SP", 2, 2, 5, [3, 3], 1], ["SP", 2, 5, 6, [11], 0]]"#,
            Ok(()),
        ),
        (
            "split product 3x the extent, factors and nparts",
            mm(),
            r#"[["SP", 2, 0, 7, [3, 7], 1], ["SP", 2, 3, 5, [15], 1], ["SP", 2, 5, 6, [3, 6], 0]]"#,
            Ok(()),
        ),
        (
            "hostile over-long split: 2^20 x 2^20 on loops of 7 and 5",
            mm(),
            r#"[["SP", 2, 0, 7, [1048576, 1048576], 1], ["SP", 2, 3, 5, [1048576, 1048576], 0]]"#,
            Ok(()),
        ),
        (
            "hostile over-long parts fused, parallel, vectorized, with a producer attached",
            mm(),
            r#"[["SP", 4, 0, 7, [1048576, 1048576], 1], ["FU", 4, [0, 1, 2]], ["AN", 4, 0, 3],
                ["SP", 4, 1, 5, [1048576], 1], ["AN", 4, 2, 2], ["CA", 2, 4, 1]]"#,
            Ok(()),
        ),
        (
            // rfactor keeps the part's full length (TE does not tighten there): a 2^20 axis
            "hostile rfactor of an over-long part",
            mm(),
            r#"[["SP", 2, 2, 6, [1048576, 1048576], 1], ["RF", 2, 3, 2]]"#,
            Err("cost"),
        ),
        (
            "every split level non-divisible",
            mm(),
            r#"[["SP", 4, 0, 7, [2, 2], 1], ["SP", 4, 3, 5, [2, 2], 0], ["FU", 4, [0, 1, 2]], ["AN", 4, 0, 3]]"#,
            Ok(()),
        ),
        (
            "attach at the innermost loop of the consumer",
            mm(),
            r#"[["CA", 2, 4, 1]]"#,
            Ok(()),
        ),
        (
            "attach at the outermost loop",
            mm(),
            r#"[["CA", 2, 4, 0]]"#,
            Ok(()),
        ),
        (
            "attach into a non-divisible tile (region beyond the domain)",
            mm(),
            r#"[["SP", 4, 0, 7, [3], 1], ["SP", 4, 2, 5, [4], 1], ["RE", 4, [0, 2, 1, 3]], ["CA", 2, 4, 1]]"#,
            Ok(()),
        ),
        (
            "attach into a fused parallel loop, then split the attached stage",
            mm(),
            r#"[["SP", 4, 0, 7, [2], 1], ["FU", 4, [0, 1]], ["AN", 4, 0, 3], ["CA", 2, 4, 0], ["SP", 2, 0, 0, [3], 1], ["AN", 2, 1, 2]]"#,
            Ok(()),
        ),
        (
            "attach at a vectorized loop",
            mm(),
            r#"[["AN", 4, 1, 2], ["CA", 2, 4, 1]]"#,
            Ok(()),
        ),
        (
            "unrolled and vectorized reduction loops",
            mm(),
            r#"[["SP", 2, 2, 6, [4], 1], ["AN", 2, 3, 1], ["AN", 2, 2, 2], ["PR", 2, 0, "auto_unroll_max_step$64"]]"#,
            Ok(()),
        ),
        (
            "reduction loop outermost, spatial loops inside (init nest)",
            mm(),
            r#"[["RE", 2, [2, 0, 1]], ["SP", 2, 1, 7, [2], 1]]"#,
            Ok(()),
        ),
        (
            "fuse of spatial and reduce loops",
            mm(),
            r#"[["RE", 2, [0, 2, 1]], ["FU", 2, [1, 2]], ["SP", 2, 1, 30, [4], 1]]"#,
            Ok(()),
        ),
        (
            "cache_write + reorder + attach",
            mm(),
            r#"[["CHW", 2, "local"], ["SP", 2, 0, 7, [2], 1], ["RE", 2, [0, 2, 3, 1]], ["SP", 3, 0, 7, [2], 1], ["CA", 2, 3, 1]]"#,
            Ok(()),
        ),
        (
            "cache_write attached in its copy's tile",
            mm(),
            r#"[["CHW", 2, "local"], ["SP", 3, 0, 7, [3], 1], ["SP", 3, 2, 5, [2], 1], ["RE", 3, [0, 2, 1, 3]], ["CA", 2, 3, 1]]"#,
            Ok(()),
        ),
        (
            "cache_read of an input, attached in the reduction",
            mm(),
            r#"[["CHR", 0, "local", [2]], ["SP", 3, 2, 6, [2], 1], ["CA", 1, 3, 2]]"#,
            Ok(()),
        ),
        (
            "cache_read of an intermediate read by the output",
            mm(),
            r#"[["CHR", 2, "global", [4]], ["CA", 3, 5, 1]]"#,
            Ok(()),
        ),
        (
            "rfactor of a non-divisible split, inner part",
            mm(),
            r#"[["SP", 2, 2, 6, [4], 1], ["RF", 2, 3, 2], ["CA", 2, 3, 1]]"#,
            Ok(()),
        ),
        (
            "rfactor of an nparts split, outer part",
            mm(),
            r#"[["SP", 2, 2, 6, [4], 0], ["RF", 2, 2, 0]]"#,
            Ok(()),
        ),
        (
            // the second rfactor must carry the first one's guard (k 5 by 2) over
            "rfactor of an rfactor stage, attached",
            registered::matmul_add(6, 5, 7, DType::F32).unwrap(),
            r#"[["SP", 4, 0, 0, [1], 1], ["CA", 2, 4, 2], ["SP", 2, 2, 0, [2], 1], ["RF", 2, 3, 1],
                ["CA", 3, 5, 1], ["FU", 5, [2]], ["CA", 2, 5, 0], ["SP", 2, 3, 0, [5], 0], ["RF", 2, 4, 2]]"#,
            Ok(()),
        ),
        (
            "producer attached where another consumer cannot see it",
            conv3x3_small(),
            r#"[["CA", 3, 6, 2]]"#,
            Err("invalid schedule"),
        ),
        (
            "padding stage attached inside the conv's reduction",
            conv3x3_small(),
            r#"[["CI", 5], ["SP", 3, 4, 3, [2], 1], ["CA", 1, 3, 5]]"#,
            Ok(()),
        ),
        (
            "padding attached at the relu, conv inlined nowhere",
            conv3x3_small(),
            r#"[["CA", 1, 6, 1]]"#,
            Err("invalid schedule"),
        ),
        (
            "chain of attaches",
            conv3x3_small(),
            r#"[["CI", 5], ["SP", 6, 1, 5, [2], 1], ["CA", 3, 6, 1], ["CA", 1, 3, 2]]"#,
            Ok(()),
        ),
        (
            "adaptive windows split and attached",
            adaptive_small(),
            r#"[["SP", 2, 2, 3, [2], 1], ["CA", 1, 2, 2]]"#,
            Ok(()),
        ),
        (
            "split of a data-independent but non-constant window",
            adaptive_small(),
            r#"[["SP", 1, 4, 0, [2], 1]]"#,
            Err("unsupported"),
        ),
    ]
}

#[test]
fn odd_schedules_lower_correctly_or_are_refused() {
    for (what, dag, json, want) in odd_cases() {
        let mut st = State::new(&stage_inits_from_dag(&dag)).unwrap();
        st.apply_all(&steps(json))
            .unwrap_or_else(|e| panic!("{what}: replay refused it: {e}"));
        let got = judge(&dag, &st, what);
        match want {
            Ok(()) => assert_eq!(got, Verdict::Correct, "{what}"),
            Err(kind) => assert_eq!(got, Verdict::Refused(kind.to_string()), "{what}"),
        }
    }
}

#[test]
fn huge_workloads_are_refused_by_the_cost_guard() {
    let dag = registered::matmul_add(1 << 16, 1 << 16, 1 << 16, DType::F32).unwrap();
    let st = State::new(&stage_inits_from_dag(&dag)).unwrap();
    let e = lower(&dag, &st, &opts()).unwrap_err();
    assert!(matches!(e, LowerError::Cost(_)), "{e}");
    // a split of a 2^40 loop into parts whose product is nearly twice as large
    let dag = registered::matmul_add(1 << 20, 1, 1 << 20, DType::F32).unwrap();
    let mut st = State::new(&stage_inits_from_dag(&dag)).unwrap();
    st.apply_all(&steps(
        r#"[["FU", 4, [0, 1]], ["SP", 4, 0, 0, [2147483647], 1]]"#,
    ))
    .unwrap();
    assert!(matches!(
        lower(&dag, &st, &opts()).unwrap_err(),
        LowerError::Cost(_)
    ));
}

/// Fused split parts keep their state extents in a pre-packed weight's layout (TVM's rule),
/// so an over-long length pads the packed weight: a moderate one lowers and computes the right
/// values, a hostile one would need terabytes and is refused before anything is allocated.
#[test]
fn over_long_splits_in_a_packed_weight_layout() {
    let dag = dense_small();
    let packed = |limits: CostLimits| LowerOptions {
        weight_layout: WeightLayoutMode::PrePacked,
        limits,
        ..LowerOptions::default()
    };
    // j 16 by [48, 64] (Droplet-style), the outer parts fused: the weight is padded 48x
    let l = lower_steps_detailed(
        &dag,
        &steps(r#"[["SP", 2, 1, 16, [48, 64], 1], ["FU", 2, [1, 2]], ["AN", 2, 2, 2]]"#),
        &packed(opts().limits),
    )
    .unwrap();
    assert_eq!(l.weight_layout.packed()[0].new_layout(), "1j48j16j24k");
    let cmp = interpret_with_layout(&dag, &l.kernel, &l.weight_layout, 3, Some(BUDGET)).unwrap();
    assert!(
        cmp.rel_err <= ttdb::loopnest::verify::RTOL,
        "{}",
        cmp.rel_err
    );
    // 2^17 x 2^17: 2^34 x 24 floats; under the default limits too
    let hostile = steps(r#"[["SP", 2, 1, 16, [131072, 131072], 1], ["FU", 2, [1, 2, 3]]]"#);
    for limits in [opts().limits, CostLimits::default()] {
        let e = lower_steps_detailed(&dag, &hostile, &packed(limits)).unwrap_err();
        assert!(
            matches!(e, LowerError::Cost(ref m) if m.contains("packed weight")),
            "{e}"
        );
    }
    // the original layout does not depend on the lengths: the same schedule lowers
    let mut st = State::new(&stage_inits_from_dag(&dag)).unwrap();
    st.apply_all(&hostile).unwrap();
    assert_eq!(
        judge(&dag, &st, "hostile split, original layout"),
        Verdict::Correct
    );
}

// ---- random schedules ------------------------------------------------------------------------

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A random step with ids drawn from the current state (so that many apply).
fn random_step(r: &mut Rng, st: &State, history: &[Step]) -> Vec<Step> {
    let n = st.stages().len();
    let s = r.below(n) as u32;
    let iters = st.stages()[s as usize].iters.len();
    let it = r.below(iters) as u32;
    let lengths = |r: &mut Rng| {
        (0..1 + r.below(3))
            .map(|_| 1 + r.below(6) as i64)
            .collect::<Vec<_>>()
    };
    let sps: Vec<u32> = history
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, Step::Split(_)))
        .map(|(i, _)| i as u32)
        .collect();
    match r.below(14) {
        0 | 1 => vec![Step::Split(SplitStep {
            stage_id: s,
            iter_id: it,
            extent: 0,
            lengths: lengths(r),
            inner_to_outer: r.below(4) != 0,
        })],
        2 if !sps.is_empty() => vec![Step::FollowSplit(FollowSplitStep {
            stage_id: s,
            iter_id: it,
            src_step_id: sps[r.below(sps.len())],
            n_split: 1 + r.below(3) as i64,
        })],
        3 => {
            let b = r.below(iters);
            let e = (b + r.below(3)).min(iters.saturating_sub(1));
            vec![Step::Fuse(FuseStep {
                stage_id: s,
                fused_ids: (b as u32..=e as u32).collect(),
            })]
        }
        4 => {
            let mut order: Vec<u32> = (0..iters as u32).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, r.below(i + 1));
            }
            vec![Step::Reorder(ReorderStep {
                stage_id: s,
                after_ids: order,
            })]
        }
        5 => {
            let ann = [
                Annotation::Unroll,
                Annotation::Vectorize,
                Annotation::Parallel,
            ][r.below(3)];
            vec![Step::Annotation(AnnotationStep {
                stage_id: s,
                iter_id: it,
                annotation: ann,
            })]
        }
        6 => vec![Step::Pragma(PragmaStep {
            stage_id: s,
            iter_id: 0,
            pragma: format!("auto_unroll_max_step${}", [0, 16, 64, 512][r.below(4)]),
        })],
        7 | 8 => {
            let t = (s as usize + 1 + r.below(n)).min(n - 1);
            let ti = r.below(st.stages()[t].iters.len());
            vec![Step::ComputeAt(ComputeAtStep {
                stage_id: s,
                target_stage_id: t as u32,
                target_iter_id: ti as u32,
            })]
        }
        9 => vec![Step::ComputeInline(ComputeInlineStep { stage_id: s })],
        10 => vec![Step::ComputeRoot(ComputeRootStep { stage_id: s })],
        11 => vec![Step::CacheWrite(CacheWriteStep {
            stage_id: s,
            scope: "local".into(),
        })],
        12 => {
            let readers: Vec<u32> = (s + 1..n as u32)
                .filter(|_| r.below(2) == 0)
                .take(2)
                .collect();
            vec![Step::CacheRead(CacheReadStep {
                stage_id: s,
                scope: "local".into(),
                reader_stage_ids: readers,
            })]
        }
        _ => {
            let l = 1 + r.below(5) as i64;
            vec![
                Step::Split(SplitStep {
                    stage_id: s,
                    iter_id: it,
                    extent: 0,
                    lengths: vec![l],
                    inner_to_outer: r.below(3) != 0,
                }),
                Step::Rfactor(RfactorStep {
                    stage_id: s,
                    iter_id: it + r.below(2) as u32,
                    factor_iter_id: r.below(3) as u32,
                }),
            ]
        }
    }
}

#[test]
fn random_schedules_lower_safely_and_correctly() {
    let dags = [
        (
            "matmul",
            registered::matmul_add(6, 5, 7, DType::F32).unwrap(),
        ),
        ("conv3x3", conv3x3_small()),
        ("conv1x1", conv_small()),
        ("dense", dense_small()),
        ("softmax", softmax_small()),
        ("pool", pool_small()),
        ("adaptive", adaptive_small()),
    ];
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut total, mut correct, mut refused, mut budget, mut applied) = (0, 0, 0, 0, 0);
    let mut kinds = std::collections::BTreeMap::new();
    for round in 0..1400 {
        let (name, dag) = &dags[round % dags.len()];
        let mut st = State::new(&stage_inits_from_dag(dag)).unwrap();
        let n_steps = 1 + r.below(14);
        let mut history: Vec<Step> = Vec::new();
        for _ in 0..n_steps {
            let unit = random_step(&mut r, &st, &history);
            let before = st.clone();
            if st.apply_all(&unit).is_ok() {
                history.extend(unit);
                applied += 1;
            } else {
                st = before;
            }
        }
        total += 1;
        let what = format!(
            "{name} round {round}: {}",
            history
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        );
        match judge(dag, &st, &what) {
            Verdict::Correct => correct += 1,
            Verdict::Budget => budget += 1,
            Verdict::Refused(k) => {
                refused += 1;
                *kinds.entry(k).or_insert(0) += 1;
            }
        }
    }
    println!("{total} random schedules ({applied} steps applied): {correct} correct, {refused} refused {kinds:?}, {budget} out of budget");
    assert!(
        correct * 10 > total * 7,
        "too few random schedules lowered: {correct} of {total}"
    );
    // valid schedules whose kernel lowering cannot prove safe would be a lowering weakness
    assert!(!kinds.contains_key("unproven access"), "{kinds:?}");
}
