use super::*;
use ttdb_algo::schedule::stage_inits_from_dag;
use ttdb_format::ansor::{Record, WorkloadKey};

/// resnet50's layer3 1x1 conv (1024 -> 256 channels at 14x14, +bias+relu) as tuned on the
/// Intel host of the nineteenth session: parallel over 4 channel chunks x 2 row halves.
const LAYER3_CONV1: &str = r#"{"i": [["[\"0e59a3dcf0c5ccd7968a9dd90bf1f499\", [1, 64, 14, 14, 16], [16, 64, 1, 1, 16, 16], [1, 16, 1, 1, 16], [1, 16, 14, 14, 16]]", "llvm -keys=cpu -mcpu=rocketlake", [2, 64, 64, 0, 0, 0, 0, 0], "", 2, []], [[], [["CI", 4], ["SP", 2, 0, 1, [1, 1, 1], 1], ["SP", 2, 4, 16, [2, 1, 2], 1], ["SP", 2, 8, 14, [7, 1, 1], 1], ["SP", 2, 12, 14, [1, 1, 7], 1], ["SP", 2, 16, 16, [1, 1, 16], 1], ["SP", 2, 20, 1024, [8], 1], ["SP", 2, 22, 1, [1], 1], ["SP", 2, 24, 1, [1], 1], ["RE", 2, [0, 4, 8, 12, 16, 1, 5, 9, 13, 17, 20, 22, 24, 2, 6, 10, 14, 18, 21, 23, 25, 3, 7, 11, 15, 19]], ["FSP", 5, 0, 1, 1], ["FSP", 5, 2, 2, 1], ["FSP", 5, 4, 3, 1], ["FSP", 5, 6, 4, 1], ["FSP", 5, 8, 5, 1], ["RE", 5, [0, 2, 4, 6, 8, 1, 3, 5, 7, 9]], ["CA", 2, 5, 4], ["FU", 5, [0, 1, 2]], ["AN", 5, 0, 3], ["PR", 2, 0, "auto_unroll_max_step$512"], ["AN", 2, 25, 2], ["AN", 5, 7, 2]]]], "r": [[0.00025538621739130436], 0, 0.1, 1796657550], "v": "v0.6"}"#;

fn layer3_conv1() -> (Vec<StageInit>, Vec<Step>) {
    let record = Record::parse(LAYER3_CONV1).expect("the record parses");
    let key = WorkloadKey::parse(&record.task.workload_key).expect("a workload key");
    let dag = ttdb_algo::recognize::recognize(&key)
        .expect("recognized")
        .dag;
    (stage_inits_from_dag(&dag), record.steps)
}

fn split_lengths_at(steps: &[Step], i: usize) -> Vec<i64> {
    match &steps[i] {
        Step::Split(sp) => sp.lengths.clone(),
        other => panic!("step {i} is {other}, not an SP"),
    }
}

/// Step 2 splits the channel chunks, step 3 the rows (see the record).
const CHANNEL_SP: usize = 2;
const ROW_SP: usize = 3;

#[test]
fn the_channel_chunks_outer_tile_moves_inward_and_the_rows_are_shared() {
    let (inits, steps) = layer3_conv1();
    let variant = rows_across_cores(&inits, &steps, 2).expect("a variant");
    assert_eq!(split_lengths_at(&variant, CHANNEL_SP), vec![8, 1, 2]);
    assert_eq!(split_lengths_at(&variant, ROW_SP), vec![7, 1, 1]);
    let changed: Vec<usize> = (0..steps.len())
        .filter(|&i| steps[i] != variant[i])
        .collect();
    assert_eq!(changed, vec![CHANNEL_SP]);
    // Its parallel loop is the two row halves.
    let state = replay(&inits, &variant).expect("replays");
    assert_eq!(parallel_extent(&state), Some(2));
    // Already split by rows: nothing to do.
    assert_eq!(rows_across_cores(&inits, &variant, 2), None);
    // One core: nothing to share.
    assert_eq!(rows_across_cores(&inits, &steps, 1), None);
}

fn with_row_split(steps: &[Step], lengths: Vec<i64>) -> Vec<Step> {
    let mut out = steps.to_vec();
    let Step::Split(sp) = &mut out[ROW_SP] else {
        unreachable!()
    };
    sp.lengths = lengths;
    out
}

#[test]
fn rows_in_one_outer_tile_are_split_from_the_outer_levels_but_never_unevenly() {
    let (inits, steps) = layer3_conv1();
    // All 14 rows in the first level: two halves of 7 from it.
    let steps_14 = with_row_split(&steps, vec![14, 1, 1]);
    let variant = rows_across_cores(&inits, &steps_14, 2).expect("a variant");
    assert_eq!(split_lengths_at(&variant, ROW_SP), vec![7, 1, 1]);
    assert_eq!(split_lengths_at(&variant, CHANNEL_SP), vec![8, 1, 2]);
    // 7 x 2: the only outer-level factor is 7, and 7 rows do not share evenly among 2
    // cores (nor are they 4 per core).
    assert_eq!(
        rows_across_cores(&inits, &with_row_split(&steps, vec![7, 1, 2]), 2),
        None
    );
    // The innermost level (the register tile) is never taken apart.
    assert_eq!(
        rows_across_cores(&inits, &with_row_split(&steps, vec![1, 1, 14]), 2),
        None
    );
}

#[test]
fn schedules_of_other_ops_have_no_variant() {
    // A dense layer's axes are neither channel chunks nor rows.
    let line = r#"{"i": [["[\"817107844ff3a9e513e2b591bc12641a\", [1, 2048], [1000, 2048], [1000], [1, 1000]]", "llvm -keys=cpu -mcpu=rocketlake", [2, 64, 64, 0, 0, 0, 0, 0], "", 2, []], [[], [["SP", 2, 0, 1, [1, 1, 1], 1], ["SP", 2, 4, 1000, [1, 8, 1], 1], ["SP", 2, 8, 2048, [16], 1], ["RE", 2, [0, 4, 1, 5, 8, 2, 6, 9, 3, 7]], ["FU", 2, [0, 1]], ["AN", 2, 0, 3]]]], "r": [[0.0001], 0, 0.1, 1796657550], "v": "v0.6"}"#;
    let record = Record::parse(line).expect("the record parses");
    let key = WorkloadKey::parse(&record.task.workload_key).expect("a workload key");
    let dag = ttdb_algo::recognize::recognize(&key)
        .expect("recognized")
        .dag;
    assert_eq!(
        rows_across_cores(&stage_inits_from_dag(&dag), &record.steps, 2),
        None
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn with_splits(steps: &[Step], channel: Vec<i64>, row: Vec<i64>) -> Vec<Step> {
        let mut out = steps.to_vec();
        for (i, lengths) in [(CHANNEL_SP, channel), (ROW_SP, row)] {
            let Step::Split(sp) = &mut out[i] else {
                unreachable!()
            };
            sp.lengths = lengths;
        }
        out
    }

    /// What a variant must be: it replays, its channel chunks form one outer tile and its
    /// rows at least `threads`, and the channel split still tiles its whole extent.
    fn check(inits: &[StageInit], v: &[Step], threads: usize) -> Result<(), TestCaseError> {
        prop_assert!(replay(inits, v).is_ok());
        let (Step::Split(c), Step::Split(r)) = (&v[CHANNEL_SP], &v[ROW_SP]) else {
            unreachable!()
        };
        prop_assert_eq!(exact_outer(c), Some(1));
        prop_assert!(exact_outer(r).is_some_and(|o| o >= threads as i64));
        prop_assert_eq!(c.lengths.iter().product::<i64>(), c.extent);
        Ok(())
    }

    proptest! {
        // Any lengths a record may carry (zero, negative, not dividing): no panic, and a
        // variant is sound.
        #[test]
        fn any_split_lengths_give_a_sound_variant_or_none(
            channel in proptest::collection::vec(-3i64..40, 3),
            row in proptest::collection::vec(-3i64..40, 3),
            threads in 0usize..5,
        ) {
            let (inits, steps) = layer3_conv1();
            let steps = with_splits(&steps, channel, row);
            if let Some(v) = rows_across_cores(&inits, &steps, threads) {
                check(&inits, &v, threads)?;
            }
        }
    }

    /// Every exact tiling of the channel chunks (16) and rows (14) on 2 and 4 cores.
    #[test]
    fn every_exact_tiling_gives_a_sound_variant_or_none() {
        let (inits, steps) = layer3_conv1();
        let triples = |divisors: &[i64], extent: i64| -> Vec<Vec<i64>> {
            let mut out = Vec::new();
            for &a in divisors {
                for &b in divisors {
                    for &c in divisors {
                        if extent % (a * b * c) == 0 {
                            out.push(vec![a, b, c]);
                        }
                    }
                }
            }
            out
        };
        let mut variants = 0;
        for threads in [2, 4] {
            for channel in triples(&[1, 2, 4, 8, 16], 16) {
                for row in triples(&[1, 2, 7, 14], 14) {
                    let steps = with_splits(&steps, channel.clone(), row);
                    if let Some(v) = rows_across_cores(&inits, &steps, threads) {
                        check(&inits, &v, threads).unwrap();
                        variants += 1;
                    }
                }
            }
        }
        assert!(variants > 100, "{variants} variants");
    }
}
