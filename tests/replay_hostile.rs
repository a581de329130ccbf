//! Hostile records: every malformed step must end replay with a clean `ReplayError` naming
//! the step and the reason, never a panic, and must leave the state as it was.
use crate::common::mutate;
use mutate::step_mutants;
use proptest::prelude::*;
use serde_json::Value;
use ttdb::ansor::step::*;
use ttdb::ansor::{Annotation, Step};
use ttdb::schedule::{AxisInit, IterKind, StageInit, State};
use ttdb_testkit::stage_inits_from_dump;

/// Initial state of the spec's verbatim CPU sample record (resnet-50 `de7d1695...`,
/// conv 1x1 stride 2 + bias + relu), as the reference simulator builds it.
const CONV: &str = "0 placeholder placeholder [1,14,14,1024]
1 PaddedInput root unroll=0 : i0=1:S i1=14:S i2=14:S i3=1024:S
2 placeholder placeholder [1,1,1024,512]
3 Conv2dOutput root unroll=0 : nn=1:S yy=7:S xx=7:S ff=512:S ry=1:R rx=1:R rc=1024:R
4 placeholder placeholder [1,1,1,512]
5 T_add root unroll=0 : ax0=1:S ax1=7:S ax2=7:S ax3=512:S
6 T_relu root unroll=0 : ax0=1:S ax1=7:S ax2=7:S ax3=512:S";
const CONV_STEPS: &str = r#"[["CI", 5], ["SP", 3, 0, 1, [1, 1, 1], 1], ["SP", 3, 4, 7, [1, 1, 7], 1], ["SP", 3, 8, 7, [1, 1, 1], 1], ["SP", 3, 12, 512, [32, 1, 8], 1], ["SP", 3, 16, 1, [1], 1], ["SP", 3, 18, 1, [1], 1], ["SP", 3, 20, 1024, [8], 1], ["RE", 3, [0, 4, 8, 12, 1, 5, 9, 13, 16, 18, 20, 2, 6, 10, 14, 17, 19, 21, 3, 7, 11, 15]], ["CI", 1], ["FU", 3, [0, 1, 2, 3, 4, 5, 6, 7]], ["AN", 3, 0, 3], ["FU", 6, [0, 1, 2, 3]], ["AN", 6, 0, 3], ["PR", 3, 0, "auto_unroll_max_step$512"], ["AN", 3, 14, 2]]"#;

/// BERT dense with cache_write (spec §1 sample, `218090bc...`).
const DENSE: &str = "0 placeholder placeholder [14,3072]
1 placeholder placeholder [768,3072]
2 T_matmul_NT root unroll=0 : i=14:S j=768:S k=3072:R";
const DENSE_STEPS: &str = r#"[["CHW", 2, "local"], ["SP", 2, 0, 14, [1, 1, 14], 1], ["SP", 2, 4, 768, [32, 1, 4], 1], ["SP", 2, 8, 3072, [48], 1], ["RE", 2, [0, 4, 1, 5, 8, 2, 6, 9, 3, 7]], ["FSP", 3, 0, 1, 2], ["FSP", 3, 3, 2, 2], ["RE", 3, [0, 3, 1, 4, 2, 5]], ["CA", 2, 3, 3], ["FU", 3, [0, 1, 2, 3]], ["AN", 3, 0, 3], ["PR", 2, 0, "auto_unroll_max_step$16"], ["AN", 2, 9, 2], ["AN", 3, 2, 2]]"#;

/// resnet-50 softmax with two rfactors (`d7b65649...`).
const SOFTMAX: &str = "0 placeholder placeholder [1,1000]
1 T_softmax_maxelem root unroll=0 : i0=1:S k=1000:R
2 T_softmax_exp root unroll=0 : i0=1:S i1=1000:S
3 T_softmax_expsum root unroll=0 : i0=1:S k=1000:R
4 T_softmax_norm root unroll=0 : i0=1:S i1=1000:S";
const SOFTMAX_STEPS: &str = r#"[["SP", 3, 1, 1000, [50], 1], ["RF", 3, 2, 1], ["RE", 3, [0, 2, 1]], ["SP", 1, 1, 1000, [20], 1], ["RF", 1, 2, 1], ["RE", 1, [0, 2, 1]], ["CR", 6], ["CA", 5, 6, 1], ["CR", 4], ["CA", 2, 3, 1], ["AN", 1, 0, 3], ["FU", 3, [0, 1]], ["AN", 3, 0, 3], ["AN", 4, 0, 3], ["FU", 6, [0, 1]], ["AN", 6, 0, 3], ["PR", 1, 0, "auto_unroll_max_step$16"], ["PR", 2, 0, "auto_unroll_max_step$16"], ["PR", 4, 0, "auto_unroll_max_step$16"], ["PR", 5, 0, "auto_unroll_max_step$64"]]"#;

/// alexnet NCHWc max pool with FU + SP + RF of the window (`51c977fb...`).
const POOL: &str = "0 p0 placeholder [1,32,13,13,8]
1 pool_max root unroll=0 : ax0=1:S ax1=32:S ax2=6:S ax3=6:S ax4=8:S rv0=3:R rv1=3:R";
const POOL_STEPS: &str = r#"[["FU", 1, [5, 6]], ["SP", 1, 5, 9, [9], 1], ["RF", 1, 5, 5], ["CA", 1, 2, 2], ["FU", 2, [0, 1, 2]], ["AN", 2, 0, 3], ["PR", 1, 0, "auto_unroll_max_step$16"], ["PR", 2, 0, "auto_unroll_max_step$512"]]"#;

const REAL: [(&str, &str); 4] = [
    (CONV, CONV_STEPS),
    (DENSE, DENSE_STEPS),
    (SOFTMAX, SOFTMAX_STEPS),
    (POOL, POOL_STEPS),
];

/// Two branches of one input joined: D = B(A) + C(A).
const BRANCH: &str = "0 A placeholder [64,64]
1 B root unroll=0 : i=64:S j=64:S
2 C root unroll=0 : i=64:S j=64:S
3 D root unroll=0 : i=64:S j=64:S";

/// Which stages each op reads, for the DAGs above (the dumps do not say).
fn dataflow(init: &str) -> Vec<Vec<usize>> {
    let table: [(&str, Vec<Vec<usize>>); 5] = [
        (
            CONV,
            vec![
                vec![],
                vec![0],
                vec![],
                vec![1, 2],
                vec![],
                vec![3, 4],
                vec![5],
            ],
        ),
        (DENSE, vec![vec![], vec![], vec![0, 1]]),
        (
            SOFTMAX,
            vec![vec![], vec![0], vec![0, 1], vec![2], vec![2, 3]],
        ),
        (POOL, vec![vec![], vec![0]]),
        (BRANCH, vec![vec![], vec![0], vec![0], vec![1, 2]]),
    ];
    table.into_iter().find(|(i, _)| *i == init).unwrap().1
}

/// The initial state of `init`, with its dataflow.
fn state(init: &str) -> State {
    let mut inits = stage_inits_from_dump(init).unwrap();
    for (st, inputs) in inits.iter_mut().zip(dataflow(init)) {
        st.inputs = Some(inputs);
    }
    State::new(&inits).unwrap()
}

fn steps(json: &str) -> Vec<Step> {
    let v: Value = serde_json::from_str(json).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| Step::from_json(s).unwrap())
        .collect()
}

/// Applies `steps`; on the first failure checks that the state was left unchanged.
/// Returns the state and the failure, if any. Panics only on a broken invariant.
fn replay_checked(init: &str, steps: &[Step]) -> (State, Option<ttdb::schedule::ReplayError>) {
    let mut st = state(init);
    for s in steps {
        let before = st.clone();
        if let Err(e) = st.apply(s) {
            assert_eq!(st, before, "a failed step changed the state: {e}");
            return (st, Some(e));
        }
        if let Err(why) = st.check_invariants() {
            panic!("invariant broken after {s}: {why}\n{}", st.dump());
        }
    }
    (st, None)
}

#[test]
fn real_records_replay_cleanly() {
    for (init, json) in REAL {
        let (st, err) = replay_checked(init, &steps(json));
        assert!(err.is_none(), "{err:?}");
        st.verify_split_extents().unwrap();
        // the same without dataflow gives the same state
        let mut plain = State::new(&stage_inits_from_dump(init).unwrap()).unwrap();
        plain.apply_all(&steps(json)).unwrap();
        assert_eq!(plain.dump(), st.dump());
    }
    // spec §1 sample: the final conv stage
    let (st, _) = replay_checked(CONV, &steps(CONV_STEPS));
    assert_eq!(
        st.dump().lines().nth(3).unwrap(),
        "3 Conv2dOutput root unroll=512 : nn.0@yy.0@xx.0@ff.0@nn.1@yy.1@xx.1@ff.1@=448:S:parallel ry.0=1:R \
         rx.0=1:R rc.0=128:R nn.2=1:S yy.2=1:S xx.2=1:S ff.2=1:S ry.1=1:R rx.1=1:R rc.1=8:R nn.3=1:S yy.3=7:S \
         xx.3=1:S ff.3=8:S:vectorize"
    );
}

/// (what, initial state, steps, index of the failing step, part of the reason)
const CASES: &[(&str, &str, &str, usize, &str)] = &[
    (
        "stage id out of range",
        CONV,
        r#"[["SP", 9, 0, 1, [1], 1]]"#,
        0,
        "stage id 9 is out of range (7 stages)",
    ),
    (
        "iterator id out of range",
        CONV,
        r#"[["AN", 3, 7, 2]]"#,
        0,
        "iterator id 7 is out of range for stage 3",
    ),
    (
        "step on a placeholder",
        CONV,
        r#"[["SP", 2, 0, 1, [1], 1]]"#,
        0,
        "stage 2 (placeholder) is a placeholder",
    ),
    (
        "RE with a repeated id",
        CONV,
        r#"[["RE", 3, [0, 1, 2, 3, 4, 5, 5]]]"#,
        0,
        "not a permutation of the 7 iterators",
    ),
    (
        "RE with missing ids",
        CONV,
        r#"[["RE", 3, [1, 0]]]"#,
        0,
        "not a permutation",
    ),
    (
        "FU of non-consecutive loops",
        CONV,
        r#"[["FU", 3, [0, 2]]]"#,
        0,
        "are not consecutive",
    ),
    (
        "FU of reversed loops",
        CONV,
        r#"[["FU", 3, [2, 1]]]"#,
        0,
        "are not consecutive",
    ),
    (
        "FU of nothing",
        CONV,
        r#"[["FU", 3, []]]"#,
        0,
        "at least one iterator",
    ),
    (
        "FU over an attach point",
        CONV,
        r#"[["CA", 1, 3, 1], ["FU", 3, [1, 2]]]"#,
        1,
        "where stage 1 is attached",
    ),
    (
        "CI of a stage others are attached to",
        CONV,
        r#"[["CA", 3, 5, 0], ["CI", 5]]"#,
        1,
        "other stages are attached",
    ),
    (
        "CI of a reduction",
        CONV,
        r#"[["CI", 3]]"#,
        0,
        "a reduction",
    ),
    ("CI of the output", CONV, r#"[["CI", 6]]"#, 0, "an output"),
    (
        "CA onto a stage that does not consume it",
        BRANCH,
        r#"[["CA", 1, 2, 0]]"#,
        0,
        "stage 2 does not consume stage 1",
    ),
    (
        "CHR read by a stage that does not read it",
        BRANCH,
        r#"[["CHR", 1, "local", [2]]]"#,
        0,
        "reader stage 2 does not read stage 1",
    ),
    (
        "CA onto itself",
        CONV,
        r#"[["CA", 3, 3, 0]]"#,
        0,
        "onto itself",
    ),
    (
        "CA onto a producer",
        CONV,
        r#"[["CA", 5, 3, 0]]"#,
        0,
        "target stage 3 comes before stage 5",
    ),
    (
        "CA closing a cycle",
        CONV,
        r#"[["CA", 3, 5, 0], ["CA", 5, 3, 0]]"#,
        1,
        "comes before stage 5",
    ),
    (
        "CA onto a placeholder",
        CONV,
        r#"[["CA", 3, 4, 0]]"#,
        0,
        "stage 4 (placeholder) is a placeholder",
    ),
    (
        "CA onto an inlined stage",
        CONV,
        r#"[["CI", 5], ["CA", 3, 5, 0]]"#,
        1,
        "is inlined and has no loops",
    ),
    (
        "CA onto a loop out of range",
        CONV,
        r#"[["CA", 3, 6, 4]]"#,
        0,
        "iterator id 4 is out of range for stage 6",
    ),
    (
        "split length 0",
        CONV,
        r#"[["SP", 3, 3, 512, [0, 8], 1]]"#,
        0,
        "split length 0 must be in 1..=2^40",
    ),
    (
        "negative split length",
        CONV,
        r#"[["SP", 3, 3, 512, [-8], 1]]"#,
        0,
        "split length -8",
    ),
    (
        "split product above the extent cap",
        CONV,
        r#"[["SP", 3, 3, 512, [1048576, 1048576, 2], 1]]"#,
        0,
        "product of the split lengths exceeds the extent cap 2^40",
    ),
    (
        "over-long split parts fused past the cap",
        CONV,
        r#"[["SP", 3, 3, 512, [1048576, 1048576], 1], ["FU", 3, [2, 3, 4, 5]]]"#,
        1,
        "fused extent exceeds the extent cap",
    ),
    (
        "split product overflowing",
        CONV,
        r#"[["SP", 3, 3, 512, [2147483647, 2147483647, 2147483647], 1]]"#,
        0,
        "exceeds the extent cap 2^40",
    ),
    (
        "huge split of an undefined extent",
        CONV,
        r#"[["CA", 3, 6, 0], ["SP", 3, 3, 0, [2147483647, 2147483647], 1]]"#,
        1,
        "exceeds the extent cap",
    ),
    (
        "FSP following a non-SP step",
        CONV,
        r#"[["SP", 3, 3, 512, [8], 1], ["RE", 3, [0, 1, 2, 4, 3, 5, 6, 7]], ["FSP", 6, 3, 1, 1]]"#,
        2,
        "source step 1 is RE, not SP",
    ),
    (
        "FSP following a future step",
        CONV,
        r#"[["FSP", 6, 3, 4, 1]]"#,
        0,
        "source step 4 is not an earlier step (this is step 0)",
    ),
    (
        "FSP following itself",
        CONV,
        r#"[["SP", 3, 3, 512, [8], 1], ["FSP", 6, 3, 1, 1]]"#,
        1,
        "source step 1 is not an earlier step",
    ),
    (
        "FSP with n_split 0",
        CONV,
        r#"[["SP", 3, 3, 512, [8], 1], ["FSP", 6, 3, 0, 0]]"#,
        1,
        "n_split 0 must be in 1..=2",
    ),
    (
        "FSP with n_split too large",
        CONV,
        r#"[["SP", 3, 3, 512, [8], 1], ["FSP", 6, 3, 0, 3]]"#,
        1,
        "n_split 3 must be in 1..=2",
    ),
    (
        "FFSP level out of range",
        CONV,
        r#"[["SP", 3, 3, 512, [8], 1], ["FFSP", 6, 3, [0], 1, 1]]"#,
        1,
        "level 1 is out of range",
    ),
    (
        "FFSP following a non-SP step",
        CONV,
        r#"[["CI", 5], ["FFSP", 6, 3, [0], 0, 1]]"#,
        1,
        "source step 0 is CI, not SP",
    ),
    (
        "RF without a split",
        SOFTMAX,
        r#"[["RF", 3, 1, 1]]"#,
        0,
        "right after an SP of stage 3",
    ),
    (
        "RF after a split of another stage",
        SOFTMAX,
        r#"[["SP", 1, 1, 1000, [50], 1], ["RF", 3, 1, 1]]"#,
        1,
        "right after an SP",
    ),
    (
        "RF of a loop the split did not make",
        SOFTMAX,
        r#"[["SP", 3, 1, 1000, [50], 1], ["RF", 3, 0, 1]]"#,
        1,
        "not one of the loops",
    ),
    (
        "RF of a spatial loop",
        SOFTMAX,
        r#"[["SP", 2, 1, 1000, [50], 1], ["RF", 2, 1, 1]]"#,
        1,
        "not a reduction loop",
    ),
    (
        "RF factor axis past the axes",
        SOFTMAX,
        r#"[["SP", 3, 1, 1000, [50], 1], ["RF", 3, 2, 2]]"#,
        1,
        "above the 1 spatial axes",
    ),
    (
        "annotation of an annotated loop",
        CONV,
        r#"[["AN", 6, 0, 3], ["AN", 6, 0, 2]]"#,
        1,
        "already annotated `parallel`",
    ),
    (
        "two parallel loops in a stage",
        CONV,
        r#"[["AN", 6, 0, 3], ["AN", 6, 1, 3]]"#,
        1,
        "2 nested parallel loops",
    ),
    (
        "parallel inside an attach parallel loop",
        CONV,
        r#"[["AN", 6, 0, 3], ["CA", 3, 6, 1], ["AN", 3, 0, 3]]"#,
        2,
        "inside a parallel loop of stage 6",
    ),
    (
        "CA of a parallel stage into a parallel loop",
        CONV,
        r#"[["AN", 6, 0, 3], ["AN", 3, 0, 3], ["CA", 3, 6, 1]]"#,
        2,
        "nested parallel",
    ),
    ("tensorize", CONV, r#"[["AN", 3, 0, 11]]"#, 0, "tensorize"),
    (
        "unknown pragma",
        CONV,
        r#"[["PR", 3, 0, "unroll_explicit"]]"#,
        0,
        "unsupported pragma",
    ),
    (
        "malformed unroll pragma",
        CONV,
        r#"[["PR", 3, 0, "auto_unroll_max_step$1e3"]]"#,
        0,
        "unsupported pragma",
    ),
    (
        "debug_skip_region of an attached stage",
        CONV,
        r#"[["CA", 3, 6, 1], ["PR", 3, 0, "debug_skip_region"]]"#,
        1,
        "lose its attach point",
    ),
    (
        "storage_align with factor 0",
        CONV,
        r#"[["SA", 3, 0, 0, 0]]"#,
        0,
        "factor >= 1",
    ),
    (
        "CHW of a placeholder",
        CONV,
        r#"[["CHW", 2, "local"]]"#,
        0,
        "is a placeholder",
    ),
    (
        "CHW after loop steps",
        CONV,
        r#"[["SP", 3, 3, 512, [8], 1], ["CHW", 3, "local"]]"#,
        1,
        "after loop transformations",
    ),
    (
        "CHW with an empty scope",
        CONV,
        r#"[["CHW", 3, ""]]"#,
        0,
        "invalid storage scope",
    ),
    (
        "CHR read by a producer",
        CONV,
        r#"[["CHR", 2, "shared", [1]]]"#,
        0,
        "reader stage 1 does not come after stage 2",
    ),
    (
        "CHR without readers",
        CONV,
        r#"[["CHR", 2, "shared", []]]"#,
        0,
        "at least one reader",
    ),
    (
        "RE moving an attach loop",
        CONV,
        r#"[["CA", 3, 6, 1], ["RE", 6, [1, 0, 2, 3]]]"#,
        1,
        "RE moves loop ax1 of stage 6, where stage 3 is attached",
    ),
];

#[test]
fn hostile_steps_give_clean_errors() {
    assert!(CASES.len() >= 20);
    for &(what, init, json, index, want) in CASES {
        let (st, err) = replay_checked(init, &steps(json));
        let err = err.unwrap_or_else(|| panic!("{what}: replay accepted it:\n{}", st.dump()));
        assert_eq!(err.step_index, index, "{what}: {err}");
        assert!(
            err.reason.contains(want),
            "{what}: reason {:?} lacks {want:?}",
            err.reason
        );
        let failing: Value = serde_json::from_str::<Value>(json).unwrap()[index].clone();
        assert_eq!(
            err.step,
            Step::from_json(&failing).unwrap().to_string(),
            "{what}: step text"
        );
        assert!(
            err.to_string().starts_with(&format!("step {index} [")),
            "{what}: {err}"
        );
    }
}

#[test]
fn fused_extent_cap() {
    // 2^21 x 2^21 > 2^40: a fuse of two legal loops whose product is above the cap
    let init = vec![
        StageInit {
            name: "A".into(),
            placeholder_shape: Some(vec![1 << 21, 1 << 21]),
            iters: vec![],
            inputs: None,
        },
        StageInit {
            name: "B".into(),
            placeholder_shape: None,
            inputs: Some(vec![0]),
            iters: vec![
                AxisInit {
                    name: "i".into(),
                    extent: Some(1 << 21),
                    kind: IterKind::Spatial,
                },
                AxisInit {
                    name: "j".into(),
                    extent: Some(1 << 21),
                    kind: IterKind::Spatial,
                },
            ],
        },
    ];
    let mut st = State::new(&init).unwrap();
    let e = st.apply(&steps(r#"[["FU", 1, [0, 1]]]"#)[0]).unwrap_err();
    assert!(
        e.reason.contains("fused extent exceeds the extent cap"),
        "{e}"
    );
}

/// Split lengths above the extent are TVM's semantics, not an error (Droplet search emits
/// them): replay accepts them up to the 2^40 cap, parts keep their lengths.
#[test]
fn over_long_split_lengths_replay() {
    for (json, want) in [
        // formerly refused as "far above the extent"
        (
            r#"[["SP", 3, 3, 512, [64, 64], 1]]"#,
            "ff.0=1:S ff.1=64:S ff.2=64:S",
        ),
        // hostile: 2^20 x 2^20 on a loop of 512, exactly the cap
        (
            r#"[["SP", 3, 3, 512, [1048576, 1048576], 1]]"#,
            "ff.0=1:S ff.1=1048576:S ff.2=1048576:S",
        ),
        (
            r#"[["SP", 3, 3, 512, [1048576, 1048576], 0]]"#,
            "ff.0=1048576:S ff.1=1048576:S ff.2=1:S",
        ),
    ] {
        let (st, err) = replay_checked(CONV, &steps(json));
        assert!(err.is_none(), "{json}: {err:?}");
        let line = st.dump().lines().nth(3).unwrap().to_string();
        assert!(line.contains(want), "{json}: {line}");
        assert!(st.verify_split_extents().is_ok(), "{json}");
    }
    // the parts fuse up to the cap
    let (st, err) = replay_checked(
        CONV,
        &steps(r#"[["SP", 3, 3, 512, [1048576, 1048576], 1], ["FU", 3, [3, 4, 5]]]"#),
    );
    assert!(err.is_none(), "{err:?}");
    assert!(
        st.dump().contains("ff.0@ff.1@ff.2@=1099511627776:S"),
        "{}",
        st.dump()
    );
}

#[test]
fn recorded_split_extent_mismatch_is_reported() {
    let (st, err) = replay_checked(CONV, &steps(r#"[["CI", 5], ["SP", 3, 3, 500, [8], 1]]"#));
    assert!(err.is_none());
    assert_eq!(st.split_report().checked, 1);
    let e = st.verify_split_extents().unwrap_err();
    assert_eq!(e.step_index, 1);
    assert!(
        e.reason.contains("had extent 500, replay gives 512 for ff"),
        "{e}"
    );
}

#[test]
fn bad_initial_stages_are_refused() {
    let axis = |name: &str, extent, kind| AxisInit {
        name: name.into(),
        extent,
        kind,
    };
    let compute = |iters| StageInit {
        name: "C".into(),
        placeholder_shape: None,
        iters,
        inputs: None,
    };
    for (init, want) in [
        (
            compute(vec![axis("i", Some(1 << 41), IterKind::Spatial)]),
            "outside 1..=2^40",
        ),
        (
            compute(vec![axis("i", Some(0), IterKind::Spatial)]),
            "outside 1..=2^40",
        ),
        (
            compute(vec![
                axis("k", Some(4), IterKind::Reduction),
                axis("i", Some(4), IterKind::Spatial),
            ]),
            "expected spatial axes, then reduction",
        ),
        (
            compute(vec![axis("i", Some(4), IterKind::Mixed)]),
            "kind Mixed",
        ),
        (
            StageInit {
                name: "P".into(),
                placeholder_shape: Some(vec![4, -1]),
                iters: vec![],
                inputs: None,
            },
            "placeholder P",
        ),
        (
            StageInit {
                name: "Q".into(),
                placeholder_shape: None,
                iters: vec![],
                inputs: Some(vec![0]),
            },
            "does not come before",
        ),
    ] {
        let e = State::new(&[init]).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
    }
}

/// Every record above with one number changed (±1, 0, huge) or one list shortened or
/// lengthened, at every position: replay must end cleanly, either way.
#[test]
fn perturbed_real_records_never_panic() {
    let (mut variants, mut refused) = (0, 0);
    for (init, json) in REAL {
        let base: Value = serde_json::from_str(json).unwrap();
        let mutants = step_mutants(&base);
        for m in mutants {
            // the record parser refuses some mutants (negative ids, bad flags): fine
            let Ok(parsed) = m
                .as_array()
                .unwrap()
                .iter()
                .map(Step::from_json)
                .collect::<Result<Vec<_>, _>>()
            else {
                continue;
            };
            variants += 1;
            let (st, err) = replay_checked(init, &parsed);
            refused += err.is_some() as usize;
            let _ = st.verify_split_extents();
            let _ = st.dump();
        }
    }
    println!("{variants} perturbed records replayed, {refused} refused");
    assert!(variants > 1000 && refused > 100, "{variants} / {refused}");
}

fn arb_annotation() -> impl Strategy<Value = Annotation> {
    (0i64..12).prop_map(|c| Annotation::from_code(c).unwrap())
}

fn arb_length() -> impl Strategy<Value = i64> {
    prop_oneof![8 => -2i64..70, 1 => Just(i32::MAX as i64), 1 => Just(1 << 20)]
}

/// Steps with ids around the size of real states, so that many of them apply.
fn arb_step() -> impl Strategy<Value = Step> {
    let id = || 0u32..9;
    let scope = || {
        prop::sample::select(vec!["local", "shared", "global", "", "a b"]).prop_map(String::from)
    };
    prop_oneof![
        (id(), id(), arb_annotation()).prop_map(
            |(stage_id, iter_id, annotation)| Step::Annotation(AnnotationStep {
                stage_id,
                iter_id,
                annotation
            })
        ),
        (id(), 0u32..10, 0u32..4).prop_map(|(stage_id, b, n)| Step::Fuse(FuseStep {
            stage_id,
            fused_ids: (b..b + n).collect()
        })),
        (id(), prop::collection::vec(id(), 0..4)).prop_map(|(stage_id, fused_ids)| Step::Fuse(
            FuseStep {
                stage_id,
                fused_ids
            }
        )),
        (
            id(),
            id(),
            prop::sample::select(vec![
                "auto_unroll_max_step$16",
                "auto_unroll_max_step$",
                "debug_skip_region",
                "x"
            ])
        )
            .prop_map(|(stage_id, iter_id, p)| Step::Pragma(PragmaStep {
                stage_id,
                iter_id,
                pragma: p.into()
            })),
        (id(), 0usize..12)
            .prop_flat_map(|(s, n)| (
                Just(s),
                Just((0..n as u32).collect::<Vec<_>>()).prop_shuffle()
            ))
            .prop_map(|(stage_id, after_ids)| Step::Reorder(ReorderStep {
                stage_id,
                after_ids
            })),
        (
            id(),
            id(),
            -1i64..2000,
            prop::collection::vec(arb_length(), 0..4),
            any::<bool>()
        )
            .prop_map(
                |(stage_id, iter_id, extent, lengths, inner_to_outer)| Step::Split(SplitStep {
                    stage_id,
                    iter_id,
                    extent,
                    lengths,
                    inner_to_outer
                })
            ),
        (
            id(),
            id(),
            0u32..24,
            prop_oneof![4 => 1i64..4, 1 => -1i64..6]
        )
            .prop_map(
                |(stage_id, iter_id, src_step_id, n_split)| Step::FollowSplit(FollowSplitStep {
                    stage_id,
                    iter_id,
                    src_step_id,
                    n_split
                })
            ),
        (
            id(),
            id(),
            prop::collection::vec(0u32..24, 0..3),
            -1i64..4,
            any::<bool>()
        )
            .prop_map(
                |(stage_id, iter_id, src_step_ids, level, factor_or_nparts)| {
                    Step::FollowFusedSplit(FollowFusedSplitStep {
                        stage_id,
                        iter_id,
                        src_step_ids,
                        level,
                        factor_or_nparts,
                    })
                }
            ),
        (id(), id(), -1i64..40, -1i64..40).prop_map(|(stage_id, iter_id, factor, offset)| {
            Step::StorageAlign(StorageAlignStep {
                stage_id,
                iter_id,
                factor,
                offset,
            })
        }),
        (id(), id(), id()).prop_map(|(stage_id, target_stage_id, target_iter_id)| {
            Step::ComputeAt(ComputeAtStep {
                stage_id,
                target_stage_id,
                target_iter_id,
            })
        }),
        id().prop_map(|stage_id| Step::ComputeInline(ComputeInlineStep { stage_id })),
        id().prop_map(|stage_id| Step::ComputeRoot(ComputeRootStep { stage_id })),
        (id(), scope(), prop::collection::vec(id(), 0..3)).prop_map(
            |(stage_id, scope, reader_stage_ids)| Step::CacheRead(CacheReadStep {
                stage_id,
                scope,
                reader_stage_ids
            })
        ),
        (id(), scope())
            .prop_map(|(stage_id, scope)| Step::CacheWrite(CacheWriteStep { stage_id, scope })),
        (id(), id(), id()).prop_map(|(stage_id, iter_id, factor_iter_id)| Step::Rfactor(
            RfactorStep {
                stage_id,
                iter_id,
                factor_iter_id
            }
        )),
    ]
}

/// A random step, or an SP immediately followed by an RF of one of its parts (the only
/// way an RF can apply).
fn arb_unit() -> impl Strategy<Value = Vec<Step>> {
    prop_oneof![
        6 => arb_step().prop_map(|s| vec![s]),
        1 => (0u32..9, 0u32..9, 1i64..40, 0u32..3, 0u32..6).prop_map(|(stage_id, iter_id, l, part, factor_iter_id)| {
            vec![
                Step::Split(SplitStep { stage_id, iter_id, extent: 0, lengths: vec![l], inner_to_outer: true }),
                Step::Rfactor(RfactorStep { stage_id, iter_id: iter_id + part, factor_iter_id }),
            ]
        }),
    ]
}

fn arb_steps(max_units: usize) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(arb_unit(), 1..max_units).prop_map(|u| u.concat())
}

/// Brings the ids of a random step near the current state (modulo its size plus one, so
/// that out-of-range ids still occur), and turns a long enough random order into a true
/// permutation of the stage's loops.
fn fit(step: &Step, st: &State) -> Step {
    let mut v: Value = serde_json::from_str(&step.to_string()).unwrap();
    let n = st.stages().len() as u64;
    let n_iters = |s: u64| {
        st.stages()
            .get(s as usize)
            .map_or(1, |x| x.iters.len() as u64)
    };
    let a = v.as_array_mut().unwrap();
    let tag = a[0].as_str().unwrap().to_string();
    let stage = a[1].as_u64().unwrap() % (n + 1);
    a[1] = stage.into();
    match tag.as_str() {
        "AN" | "PR" | "SA" | "SP" | "FSP" | "FFSP" | "RF" => {
            a[2] = (a[2].as_u64().unwrap() % (n_iters(stage) + 1)).into()
        }
        "CA" => {
            let t = a[2].as_u64().unwrap() % (n + 1);
            a[2] = t.into();
            a[3] = (a[3].as_u64().unwrap() % (n_iters(t) + 1)).into();
        }
        "RE" => {
            let m = n_iters(stage);
            let order: Vec<u64> = a[2]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            if order.len() as u64 >= m {
                a[2] = order
                    .into_iter()
                    .filter(|&x| x < m)
                    .collect::<Vec<_>>()
                    .into();
            }
        }
        "CHR" => {
            let readers: Vec<u64> = a[3]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() % (n + 1))
                .collect();
            a[3] = readers.into();
        }
        _ => {}
    }
    Step::from_json(&v).unwrap()
}

/// Applies random steps, skipping the ones refused (as a search would); the state must
/// stay consistent throughout and a refused step must change nothing.
fn fuzz(init: &str, prefix: &[Step], random: &[Step]) -> usize {
    let (mut st, err) = replay_checked(init, prefix);
    assert!(err.is_none());
    let mut applied = 0;
    for s in random {
        let s = &fit(s, &st);
        let before = st.clone();
        match st.apply(s) {
            Ok(()) => {
                applied += 1;
                if let Err(why) = st.check_invariants() {
                    panic!("invariant broken after {s}: {why}\n{}", st.dump());
                }
            }
            Err(e) => {
                assert_eq!(st, before, "a failed step changed the state: {e}");
                assert!(!e.reason.is_empty());
            }
        }
        let _ = st.dump();
    }
    let _ = st.verify_split_extents();
    applied
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_steps_on_an_initial_state_never_panic(random in arb_steps(40), which in 0usize..4) {
        fuzz(REAL[which].0, &[], &random);
    }

    #[test]
    fn random_steps_after_a_real_record_never_panic(random in arb_steps(25), which in 0usize..4) {
        let (init, json) = REAL[which];
        fuzz(init, &steps(json), &random);
    }

    #[test]
    fn random_steps_on_a_branching_dag_never_panic(random in arb_steps(40)) {
        fuzz(BRANCH, &[], &random);
    }
}

/// The fuzzing above is only worth something if many random steps apply: count them on a
/// fixed sample, per step kind.
#[test]
fn random_steps_often_apply() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::BTreeMap;
    let mut runner = TestRunner::deterministic();
    let strategy = arb_unit();
    let mut applied: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for round in 0..300 {
        let (init, json) = REAL[round % 4];
        let (mut st, _) = replay_checked(
            init,
            if round % 2 == 0 { "[]" } else { json }
                .pipe(steps)
                .as_slice(),
        );
        for _ in 0..30 {
            for s in strategy.new_tree(&mut runner).unwrap().current() {
                let s = fit(&s, &st);
                let e = applied.entry(s.tag()).or_default();
                e.1 += 1;
                if st.apply(&s).is_ok() {
                    e.0 += 1;
                }
            }
        }
    }
    println!("{applied:?}");
    for (tag, (ok, all)) in &applied {
        assert!(*ok > 0, "no random {tag} step ever applied ({all} tried)");
    }
    let (ok, all) = applied.values().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert!(ok * 10 > all, "only {ok} of {all} random steps applied");
}

trait Pipe: Sized {
    fn pipe<T>(self, f: impl FnOnce(Self) -> T) -> T {
        f(self)
    }
}
impl Pipe for &str {}
