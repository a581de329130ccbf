//! The worked examples of the spec (`ansor-format.md` §2.5 and the §1 samples), replayed
//! end to end, and the dataflow bookkeeping through the stage-adding steps.
use super::test_util::{dump_of, matmul_state, stage_line, state_from_dump, step};
use super::State;

fn apply_all(st: &mut State, steps: &[&str]) {
    for s in steps {
        st.apply(&step(s)).unwrap_or_else(|e| panic!("{e}"));
    }
    st.check_invariants().unwrap();
    st.verify_split_extents().unwrap();
}

/// §2.5: `matmul_add` 1024, tiled, fused with its consumer at `j.1`, parallel + vectorize.
#[test]
fn worked_example_matmul_add() {
    let mut st = matmul_state();
    apply_all(
        &mut st,
        &[
            r#"["SP", 2, 0, 1024, [2, 1, 4], 1]"#,
            r#"["SP", 2, 4, 1024, [1, 1, 8], 1]"#,
            r#"["SP", 2, 8, 1024, [4], 1]"#,
            r#"["RE", 2, [0, 4, 1, 5, 8, 2, 6, 9, 3, 7]]"#,
            r#"["FSP", 4, 0, 0, 2]"#,
            r#"["FSP", 4, 3, 1, 2]"#,
            r#"["RE", 4, [0, 3, 1, 4, 2, 5]]"#,
            r#"["CA", 2, 4, 3]"#,
        ],
    );
    assert!(stage_line(&st, 2).starts_with("2 matmul at:4.3 "));
    apply_all(&mut st, &[r#"["FU", 4, [0, 1]]"#]);
    assert!(
        stage_line(&st, 2).starts_with("2 matmul at:4.2 "),
        "FU moves the attach index 3 -> 2"
    );
    apply_all(
        &mut st,
        &[
            r#"["AN", 4, 0, 3]"#,
            r#"["PR", 2, 0, "auto_unroll_max_step$8"]"#,
            r#"["AN", 2, 9, 2]"#,
            r#"["AN", 4, 4, 2]"#,
        ],
    );
    assert_eq!(
        stage_line(&st, 2),
        "2 matmul at:4.2 unroll=8 : i.0=?:S j.0=?:S i.1=?:S j.1=?:S k.0=?:R i.2=?:S j.2=?:S k.1=?:R i.3=?:S j.3=?:S:vectorize"
    );
    assert_eq!(
        stage_line(&st, 4),
        "4 out root unroll=0 : i.0@j.0@=16384:S:parallel i.1=2:S j.1=1:S i.2=4:S j.2=8:S:vectorize"
    );
    // the attach point is the loop object j.1, wherever it is
    let p = *st.attach_map().attach_point(2).unwrap();
    assert_eq!(st.iter_position(4, p.ident), Some(2));
    assert_eq!(st.stages()[4].iters[2].name, "j.1");
    assert_eq!(st.transform_steps().len(), 13);
    assert_eq!(st.split_report().checked, 3);
}

/// §1 sample (BERT dense, v0.6): CHW, tiling of the cache, FSP of the copy, CA.
#[test]
fn dense_with_cache_write() {
    let mut st = state_from_dump(
        "0 placeholder placeholder [14,3072]
1 placeholder placeholder [768,3072]
2 T_matmul_NT root unroll=0 : i=14:S j=768:S k=3072:R",
    );
    let steps = r#"[["CHW", 2, "local"], ["SP", 2, 0, 14, [1, 1, 14], 1], ["SP", 2, 4, 768, [32, 1, 4], 1], ["SP", 2, 8, 3072, [48], 1], ["RE", 2, [0, 4, 1, 5, 8, 2, 6, 9, 3, 7]], ["FSP", 3, 0, 1, 2], ["FSP", 3, 3, 2, 2], ["RE", 3, [0, 3, 1, 4, 2, 5]], ["CA", 2, 3, 3], ["FU", 3, [0, 1, 2, 3]], ["AN", 3, 0, 3], ["PR", 2, 0, "auto_unroll_max_step$16"], ["AN", 2, 9, 2], ["AN", 3, 2, 2]]"#;
    let v: serde_json::Value = serde_json::from_str(steps).unwrap();
    let list: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.to_string())
        .collect();
    apply_all(
        &mut st,
        &list.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    // the oracle's final state for this record (bert log line 7)
    assert_eq!(
        dump_of(&st),
        "0 placeholder placeholder [14,3072]
1 placeholder placeholder [768,3072]
2 T_matmul_NT.local at:3.0 unroll=16 : i_c.0=?:S j_c.0=?:S i_c.1=?:S j_c.1=?:S k.0=?:R i_c.2=?:S j_c.2=?:S k.1=?:R i_c.3=?:S j_c.3=?:S:vectorize
3 T_matmul_NT root unroll=0 : i.0@j.0@i.1@j.1@=192:S:parallel i.2=14:S j.2=4:S:vectorize"
    );
}

/// Inputs follow the stages through CHR, CHW and RF, so consumer checks stay exact.
#[test]
fn dataflow_through_stage_insertions() {
    let mut inits = super::stage_inits_from_dump(
        "0 A placeholder [64,64]
1 B root unroll=0 : i=64:S k=64:R
2 C root unroll=0 : i=64:S
3 D root unroll=0 : i=64:S",
    )
    .unwrap();
    for (st, inputs) in inits.iter_mut().zip([vec![], vec![0], vec![0], vec![1, 2]]) {
        st.inputs = Some(inputs);
    }
    let mut st = State::new(&inits).unwrap();
    let inputs = |st: &State| {
        st.stages()
            .iter()
            .map(|s| s.op.inputs.clone().unwrap())
            .collect::<Vec<_>>()
    };
    apply_all(&mut st, &[r#"["CHR", 0, "shared", [2]]"#]);
    // A, A.shared, B, C, D: C reads the cache, B still reads A
    assert_eq!(inputs(&st), [vec![], vec![0], vec![0], vec![1], vec![2, 3]]);
    apply_all(
        &mut st,
        &[r#"["SP", 2, 1, 64, [8], 1]"#, r#"["RF", 2, 2, 1]"#],
    );
    // A, A.shared, B.rf, B.repl, C, D
    assert_eq!(
        inputs(&st),
        [vec![], vec![0], vec![0], vec![2], vec![1], vec![3, 4]]
    );
    apply_all(&mut st, &[r#"["CHW", 4, "local"]"#]);
    // A, A.shared, B.rf, B.repl, C.local, C, D
    assert_eq!(
        inputs(&st),
        [
            vec![],
            vec![0],
            vec![0],
            vec![2],
            vec![1],
            vec![4],
            vec![3, 5]
        ]
    );
    assert_eq!(st.consumes(6, 2), Some(true));
    assert_eq!(st.consumes(4, 2), Some(false));
    assert!(st
        .apply(&step(r#"["CA", 2, 4, 0]"#))
        .unwrap_err()
        .reason
        .contains("does not consume"));
    assert_eq!(st.has_consumers(6), Some(false));
    assert!(st
        .apply(&step(r#"["CI", 6]"#))
        .unwrap_err()
        .reason
        .contains("an output"));
    apply_all(&mut st, &[r#"["CA", 2, 6, 0]"#, r#"["CA", 4, 5, 0]"#]);
}

#[test]
fn replay_runs_a_whole_record_and_checks_split_extents() {
    let inits = super::stage_inits_from_dump(
        "0 A placeholder [64]
1 B root unroll=0 : ax0=64:S",
    )
    .unwrap();
    let sp = |extent: i64| step(&format!(r#"["SP", 1, 0, {extent}, [8], 1]"#));
    assert_eq!(
        super::replay(&inits, &[sp(64)])
            .unwrap()
            .split_report()
            .checked,
        1
    );
    match super::replay(&inits, &[sp(63)]) {
        Err(super::ReplayFailure::Step(e)) => {
            assert!(e.reason.contains("had extent 63, replay gives 64"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    let mut huge = inits.clone();
    huge[0].placeholder_shape = Some(vec![1 << 50]);
    assert!(matches!(
        super::replay(&huge, &[]),
        Err(super::ReplayFailure::Init(_))
    ));
}
