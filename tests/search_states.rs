//! Property test of the search's state space: random sketches, initial-population samples
//! and chains of mutations, over every op class of ttdb's library (small shapes). Every
//! state the sampler or a mutation produces must replay, lower, run in the checked
//! interpreter (which traps any out-of-bounds access) and match the reference; a share of
//! them is also compiled, run and verified natively.
use rayon::prelude::*;
use ttdb::ansor::Step;
use ttdb::evaluate::{evaluate_steps, EvalOptions, Reference};
use ttdb::ir::{Combiner, ComputeAttrs, DType, Dag, DagBuilder, IterVar};
use ttdb::loopnest::verify::RTOL;
use ttdb::lower::check::interpret_against_reference;
use ttdb::lower::{lower_steps, LowerOptions};
use ttdb::ops::{Anchor, EpilogueOp, Era, PoolAttrs, PoolKind, PoolLayout, Window2d, WorkloadSpec};
use ttdb::schedule::{replay, stage_inits_from_dag};
use ttdb::search::cost_model::program_features;
use ttdb::search::features::STORE_FEATURES;
use ttdb::search::init::Sampler;
use ttdb::search::mutate::{mutate, pick};
use ttdb::search::rng::Rng;
use ttdb::search::sketch::{generate_sketches, HardwareParams};

const HW: HardwareParams = HardwareParams {
    num_cores: 2,
    vector_lanes: 8,
};
/// States per op class (samples, each followed by a chain of mutations).
const SAMPLES: usize = 24;
const MUTATIONS: usize = 6;
/// Every n-th state is also compiled and run natively.
const COMPILE_EVERY: usize = 10;

fn spec(anchor: Anchor, epilogue: Vec<EpilogueOp>, inputs: &[Vec<i64>]) -> Dag {
    WorkloadSpec::new(anchor, epilogue)
        .build(Era::V010, inputs)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn matmul(n: i64, m: i64, k: i64) -> Dag {
    let mut b = DagBuilder::new();
    let a = b.placeholder("A", &[n, k], DType::F32);
    let w = b.placeholder("B", &[k, m], DType::F32);
    let c = b.reduce(
        "C",
        "",
        vec![IterVar::new("i", n), IterVar::new("j", m)],
        vec![IterVar::new("k", k)],
        Combiner::Sum,
        ComputeAttrs::default(),
        |v, r| a.at(vec![v[0].clone(), r[0].clone()]) * w.at(vec![r[0].clone(), v[1].clone()]),
    );
    b.finish(&[&c])
}

fn classes() -> Vec<(&'static str, Dag)> {
    let add = EpilogueOp::Add {
        operand_first: false,
    };
    let pool = |kind, layout| {
        Anchor::Pool(PoolAttrs {
            kind,
            kernel: [3, 3],
            stride: [2, 2],
            dilation: [1, 1],
            padding: [1, 1, 1, 1],
            ceil_mode: false,
            layout,
        })
    };
    vec![
        ("matmul", matmul(24, 20, 36)),
        ("small matmul (rfactor)", matmul(2, 2, 96)),
        (
            "conv2d_nchw+add+relu",
            spec(
                Anchor::Conv2dNchw {
                    window: Window2d::simple(1, 1),
                    groups: 1,
                },
                vec![add, EpilogueOp::Relu],
                &[vec![1, 6, 9, 9], vec![8, 6, 3, 3], vec![1, 8, 1, 1]],
            ),
        ),
        (
            "group conv2d_nchw",
            spec(
                Anchor::Conv2dNchw {
                    window: Window2d::simple(2, 1),
                    groups: 2,
                },
                vec![],
                &[vec![1, 4, 8, 8], vec![6, 2, 3, 3]],
            ),
        ),
        (
            "conv2d_nhwc",
            spec(
                Anchor::Conv2dNhwc(Window2d::simple(1, 1)),
                vec![EpilogueOp::Relu],
                &[vec![1, 7, 7, 5], vec![3, 3, 5, 6]],
            ),
        ),
        (
            "conv2d_nchwc+add+relu",
            spec(
                Anchor::Conv2dNchwc(Window2d::simple(1, 1)),
                vec![add, EpilogueOp::Relu],
                &[
                    vec![1, 2, 7, 7, 4],
                    vec![2, 2, 3, 3, 4, 4],
                    vec![1, 2, 1, 1, 4],
                ],
            ),
        ),
        (
            "depthwise_nhwc",
            spec(
                Anchor::DepthwiseNhwc(Window2d::simple(1, 1)),
                vec![],
                &[vec![1, 8, 8, 6], vec![3, 3, 6, 1]],
            ),
        ),
        (
            "depthwise_nchwc",
            spec(
                Anchor::DepthwiseNchwc(Window2d::simple(2, 1)),
                vec![],
                &[vec![1, 2, 9, 9, 4], vec![2, 1, 3, 3, 1, 4]],
            ),
        ),
        (
            "dense+add",
            spec(
                Anchor::Dense,
                vec![add],
                &[vec![3, 40], vec![12, 40], vec![1, 12]],
            ),
        ),
        (
            "batch_matmul",
            spec(
                Anchor::BatchMatmul { transpose_b: true },
                vec![],
                &[vec![2, 6, 10], vec![2, 7, 10]],
            ),
        ),
        (
            "max_pool nchw",
            spec(
                pool(PoolKind::Max, PoolLayout::Nchw),
                vec![],
                &[vec![1, 3, 9, 9]],
            ),
        ),
        (
            "avg_pool nhwc",
            spec(
                pool(
                    PoolKind::Avg {
                        count_include_pad: false,
                    },
                    PoolLayout::Nhwc,
                ),
                vec![],
                &[vec![1, 9, 9, 3]],
            ),
        ),
        (
            "adaptive avg pool",
            spec(
                Anchor::AdaptivePool {
                    kind: PoolKind::Avg {
                        count_include_pad: false,
                    },
                    layout: PoolLayout::Nchw,
                    out_hw: [1, 1],
                },
                vec![],
                &[vec![1, 6, 5, 5]],
            ),
        ),
        (
            "softmax",
            spec(Anchor::Softmax { axis: 1 }, vec![], &[vec![3, 40]]),
        ),
        (
            "mean",
            spec(
                Anchor::Mean {
                    axes: vec![2, 3],
                    keepdims: true,
                },
                vec![],
                &[vec![1, 4, 6, 6]],
            ),
        ),
        (
            // LayerNorm's variance: a power prologue (and its constant stage) before the sum
            "power+mean",
            WorkloadSpec::new(
                Anchor::Mean {
                    axes: vec![2],
                    keepdims: true,
                },
                vec![],
            )
            .with_prologue(vec![EpilogueOp::Scalar {
                op: ttdb::ops::ScalarOp::Power,
                value: 2.0,
                operand_first: false,
            }])
            .build(Era::V010, &[vec![2, 3, 40]])
            .unwrap(),
        ),
        (
            "winograd_nhwc",
            spec(
                Anchor::WinogradNhwc {
                    padding: [1, 1, 1, 1],
                },
                vec![],
                &[vec![1, 6, 6, 4], vec![4, 4, 5, 4]],
            ),
        ),
    ]
}

/// The states of one class: samples and their mutation chains, as step lists.
fn states_of(dag: &Dag, seed: u64) -> (Vec<Vec<Step>>, usize, usize) {
    let sketches = generate_sketches(dag, &HW).expect("every op class has sketches");
    let inits = stage_inits_from_dag(dag);
    let mut sampler = Sampler::new(dag, HW);
    let mut rng = Rng::new(seed);
    let mut states = Vec::new();
    let mut invalid_samples = 0;
    for i in 0..SAMPLES {
        let sk = &sketches[i % sketches.len()];
        let Ok(st) = sampler.sample(sk, &mut rng) else {
            invalid_samples += 1;
            continue;
        };
        let mut steps = st.transform_steps().to_vec();
        states.push(steps.clone());
        for _ in 0..MUTATIONS {
            let m = pick(&mut rng);
            if let Some(next) = mutate(m, dag, &inits, &steps, HW.vector_lanes as i64, &mut rng) {
                // A mutation that does not replay is dropped by the search, as in TVM.
                if replay(&inits, &next).is_ok() {
                    steps = next;
                    states.push(steps.clone());
                }
            }
        }
    }
    (states, invalid_samples, sketches.len())
}

#[test]
fn every_sampled_and_mutated_state_lowers_and_verifies() {
    let classes = classes();
    #[allow(clippy::type_complexity)]
    let results: Vec<(String, usize, usize, Vec<String>, Vec<Vec<Step>>)> = classes
        .par_iter()
        .enumerate()
        .map(|(ci, (name, dag))| {
            let (states, invalid, n_sketches) = states_of(dag, 17 + ci as u64);
            let mut failures = Vec::new();
            for steps in &states {
                let shown = || steps.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(" ");
                let kernel = match lower_steps(dag, steps, &LowerOptions::default()) {
                    Ok(k) => k,
                    Err(e) => {
                        failures.push(format!("{name}: does not lower: {e}\n  {}", shown()));
                        continue;
                    }
                };
                // The cost model's features and the draft estimate exist for every state.
                let f = program_features(&kernel, &HW);
                if f.rows.is_empty()
                    || f.rows.iter().any(|r| r.len() != STORE_FEATURES || r.iter().any(|v| !v.is_finite()))
                    || !(f.draft_seconds.is_finite() && f.draft_seconds > 0.0)
                {
                    failures.push(format!("{name}: bad features (draft {})\n  {}", f.draft_seconds, shown()));
                }
                match interpret_against_reference(dag, &kernel, 5, Some(50_000_000)) {
                    Ok(c) if c.rel_err <= RTOL => {}
                    Ok(c) => failures.push(format!("{name}: wrong result (rel {})\n  {}", c.rel_err, shown())),
                    Err(e) => failures.push(format!("{name}: interpreter: {e}\n  {}", shown())),
                }
            }
            println!(
                "{name}: {n_sketches} sketches, {} states checked, {invalid} of {SAMPLES} samples invalid",
                states.len()
            );
            (name.to_string(), states.len(), invalid, failures, states)
        })
        .collect();
    // Native runs one at a time, after the parallel phase: kernels use every core, and a
    // loaded machine must not turn a correctness check into a timeout.
    let mut opts = EvalOptions {
        verify_only: true,
        ..EvalOptions::default()
    };
    opts.measure.timeout = Some(std::time::Duration::from_secs(60));
    let mut native_failures = Vec::new();
    let mut native = 0;
    for ((name, dag), r) in classes.iter().zip(&results) {
        let reference = Reference::new(dag, 3).expect("reference");
        for steps in r.4.iter().step_by(COMPILE_EVERY) {
            native += 1;
            let e = evaluate_steps(dag, steps, &reference, &opts);
            if !e.verified() {
                let shown = steps
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(" ");
                native_failures.push(format!("{name}: native run: {:?}\n  {shown}", e.failure));
            }
        }
    }
    println!("{native} states compiled and verified natively");
    let total: usize = results.iter().map(|r| r.1).sum();
    let failures: Vec<&String> = results
        .iter()
        .flat_map(|r| &r.3)
        .chain(&native_failures)
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {total} states failed:\n{}",
        failures.len(),
        failures
            .iter()
            .take(12)
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    for (name, n, invalid, _, _) in &results {
        assert!(
            *n >= SAMPLES / 2,
            "{name}: only {n} states ({invalid} invalid samples)"
        );
    }
    assert!(total >= 1000, "only {total} states checked");
}
