//! Property tests for the record parser: any bytes give a record or a clean error, and
//! every record the writer produces parses back to an equal value.
use proptest::prelude::*;
use ttdb::ansor::step::*;
use ttdb::ansor::{parse_line, ErrorNo, LogLine, MeasureResult, Record, Step, Task};

const SAMPLE: &str = r#"{"i": [["[\"218090bc617f9a36fbabdf253ec28064\", [14, 3072], [768, 3072], [14, 768]]", "llvm -keys=cpu -link-params=0", [4, 64, 64, 0, 0, 0, 0, 0], "", 2, []], [[], [["CHW", 2, "local"], ["SP", 2, 0, 14, [1, 1, 14], 1], ["SP", 2, 4, 768, [32, 1, 4], 1], ["SP", 2, 8, 3072, [48], 1], ["RE", 2, [0, 4, 1, 5, 8, 2, 6, 9, 3, 7]], ["FSP", 3, 0, 1, 2], ["FSP", 3, 3, 2, 2], ["RE", 3, [0, 3, 1, 4, 2, 5]], ["CA", 2, 3, 3], ["FU", 3, [0, 1, 2, 3]], ["AN", 3, 0, 3], ["PR", 2, 0, "auto_unroll_max_step$16"], ["AN", 2, 9, 2], ["AN", 3, 2, 2]]]], "r": [[0.00126388, 0.00119469, 0.00123621, 0.00120716, 0.00120743, 0.00117807, 0.00119711, 0.00117021, 0.00121993, 0.00116418], 0, 0.496995, 1635720565], "v": "v0.6"}"#;

fn id() -> impl Strategy<Value = u32> {
    0u32..64
}

fn ids() -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(id(), 0..8)
}

fn ints() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(-5i64..2000, 0..6)
}

fn name() -> impl Strategy<Value = String> {
    "[ -~]{0,12}" // printable ASCII, including quotes and backslashes
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (id(), id(), 0usize..12).prop_map(|(s, i, a)| Step::Annotation(AnnotationStep {
            stage_id: s,
            iter_id: i,
            annotation: Annotation::ALL[a]
        })),
        (id(), ids()).prop_map(|(s, f)| Step::Fuse(FuseStep {
            stage_id: s,
            fused_ids: f
        })),
        (id(), id(), name()).prop_map(|(s, i, p)| Step::Pragma(PragmaStep {
            stage_id: s,
            iter_id: i,
            pragma: p
        })),
        (id(), ids()).prop_map(|(s, a)| Step::Reorder(ReorderStep {
            stage_id: s,
            after_ids: a
        })),
        (id(), id(), 0i64..5000, ints(), any::<bool>()).prop_map(|(s, i, e, l, d)| Step::Split(
            SplitStep {
                stage_id: s,
                iter_id: i,
                extent: e,
                lengths: l,
                inner_to_outer: d
            }
        )),
        (id(), id(), id(), 0i64..5).prop_map(|(s, i, src, n)| Step::FollowSplit(FollowSplitStep {
            stage_id: s,
            iter_id: i,
            src_step_id: src,
            n_split: n
        })),
        (id(), id(), ids(), 0i64..4, any::<bool>()).prop_map(|(s, i, src, l, f)| {
            Step::FollowFusedSplit(FollowFusedSplitStep {
                stage_id: s,
                iter_id: i,
                src_step_ids: src,
                level: l,
                factor_or_nparts: f,
            })
        }),
        (id(), id(), 0i64..64, 0i64..64).prop_map(|(s, i, f, o)| Step::StorageAlign(
            StorageAlignStep {
                stage_id: s,
                iter_id: i,
                factor: f,
                offset: o
            }
        )),
        (id(), id(), id()).prop_map(|(s, t, i)| Step::ComputeAt(ComputeAtStep {
            stage_id: s,
            target_stage_id: t,
            target_iter_id: i
        })),
        id().prop_map(|s| Step::ComputeInline(ComputeInlineStep { stage_id: s })),
        id().prop_map(|s| Step::ComputeRoot(ComputeRootStep { stage_id: s })),
        (id(), name(), ids()).prop_map(|(s, sc, r)| Step::CacheRead(CacheReadStep {
            stage_id: s,
            scope: sc,
            reader_stage_ids: r
        })),
        (id(), name()).prop_map(|(s, sc)| Step::CacheWrite(CacheWriteStep {
            stage_id: s,
            scope: sc
        })),
        (id(), id(), id()).prop_map(|(s, i, f)| Step::Rfactor(RfactorStep {
            stage_id: s,
            iter_id: i,
            factor_iter_id: f
        })),
    ]
}

fn finite() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("finite", |x| x.is_finite()),
        1e-7f64..1.0,
        Just(1e10),
    ]
}

fn record() -> impl Strategy<Value = Record> {
    let key = prop_oneof![
        Just(r#"["de7d1695278cf52778b038e6573d7626"]"#.to_string()),
        prop::collection::vec(prop::collection::vec(1i64..600, 1..6), 1..5).prop_map(|shapes| {
            serde_json::to_string(
                &(std::iter::once(serde_json::json!("218090bc617f9a36fbabdf253ec28064"))
                    .chain(shapes.into_iter().map(|s| serde_json::json!(s)))
                    .collect::<Vec<_>>()),
            )
            .unwrap()
        }),
        (1i64..2048, 1i64..2048)
            .prop_map(|(n, m)| format!(r#"["matmul_add", {n}, {m}, {n}, "float32"]"#)),
    ];
    (
        key,
        name(),
        2usize..=6,
        prop::collection::vec(-1i64..100, 8),
        name(),
        0i64..3,
        prop::collection::vec(name(), 0..3),
        prop::collection::vec(step(), 0..20),
        (
            prop::collection::vec(finite(), 0..11),
            0u8..9,
            finite(),
            prop_oneof![(0i64..2_000_000_000).prop_map(|t| t as f64), finite()],
        ),
        prop::option::of("v0\\.[2-6]"),
    )
        .prop_map(
            |(
                key,
                target,
                arity,
                hp,
                host,
                lro,
                names,
                steps,
                (costs, err, all_cost, ts),
                version,
            )| Record {
                task: Task {
                    workload_key: key,
                    target,
                    hardware_params: (arity >= 3).then_some(hp),
                    target_host: (arity >= 4).then_some(host),
                    layout_rewrite_option: (arity >= 5).then_some(lro),
                    task_input_names: (arity >= 6).then_some(names),
                },
                steps,
                result: MeasureResult {
                    costs,
                    error_no: ErrorNo(err),
                    all_cost,
                    timestamp: ts,
                },
                version,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_bytes_give_a_record_or_a_clean_error(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse_line(&bytes);
    }

    #[test]
    fn mutated_real_lines_never_panic(cut in 0usize..SAMPLE.len(), pos in 0usize..SAMPLE.len(), byte in any::<u8>()) {
        let mut b = SAMPLE.as_bytes().to_vec();
        b[pos] = byte;
        // Never accept what is not JSON.
        if let LogLine::Record { .. } = parse_line(&b) {
            let text = String::from_utf8_lossy(&b).into_owned();
            prop_assert!(serde_json::from_slice::<serde_json::Value>(&b).is_ok(), "accepted non-JSON: {}", text);
        }
        let truncated_is_record = matches!(parse_line(&SAMPLE.as_bytes()[..cut]), LogLine::Record { .. });
        prop_assert!(!truncated_is_record);
    }

    #[test]
    fn written_records_parse_back_equal(r in record()) {
        let line = r.to_line();
        match parse_line(line.as_bytes()) {
            LogLine::Record { record, .. } => prop_assert_eq!(*record, r),
            other => prop_assert!(false, "{:?} for {}", other, line),
        }
    }
}

#[test]
fn sample_is_valid() {
    assert!(matches!(
        parse_line(SAMPLE.as_bytes()),
        LogLine::Record { .. }
    ));
}

#[test]
fn bad_records_are_named() {
    let cases = [
        (
            SAMPLE.replacen(r#""v": "v0.6""#, r#""v": "v0.6", "x": 1"#, 1),
            "unknown top-level key",
        ),
        (
            SAMPLE.replacen(r#""", 2, []]"#, r#""", 2, [], 7]"#, 1),
            "task has 7 elements",
        ),
        (
            SAMPLE.replacen(r#"["CHW", 2, "local"]"#, r#"["ZZ", 2]"#, 1),
            "step 0: unknown step tag",
        ),
        (
            SAMPLE.replacen("], 0, 0.496995", "], 9, 0.496995", 1),
            "error_no 9 is out of range",
        ),
        (
            SAMPLE.replacen("[[], [[", "[[1], [[", 1),
            "state stages must be written as []",
        ),
        (
            SAMPLE.replacen(r#""r": [["#, r#""r": [1, ["#, 1),
            "result has 5 elements",
        ),
        (
            SAMPLE.replacen(", 0.496995, 1635720565]", ", 0.496995]", 1),
            "result has 3 elements",
        ),
        // elements are read before they are counted: short lists still name their count
        (
            SAMPLE.replacen(r#"", "llvm -keys=cpu -link-params=0", [4, 64, 64, 0, 0, 0, 0, 0], "", 2, []]"#, r#""]"#, 1),
            "task has 1 elements",
        ),
        (
            SAMPLE.replacen(r#"{"i": [["[\"218090bc617f9a36fbabdf253ec28064\", [14, 3072], [768, 3072], [14, 768]]", "llvm -keys=cpu -link-params=0", [4, 64, 64, 0, 0, 0, 0, 0], "", 2, []]"#, r#"{"i": [[]"#, 1),
            "task has 0 elements",
        ),
        // a count in range: the element's own error
        (
            SAMPLE.replacen(r#""", 2, []]"#, r#""", 3, []]"#, 1),
            "layout_rewrite_option 3 is not 0, 1 or 2",
        ),
        (SAMPLE[..SAMPLE.len() - 10].to_string(), "bad JSON"),
        (
            SAMPLE.replacen(r#"["SP", 2, 0, 14"#, r#"["SP", 2, 0, 99999999999"#, 1),
            "out of range for a 32-bit int",
        ),
    ];
    for (line, want) in cases {
        match parse_line(line.as_bytes()) {
            LogLine::Bad { reason, .. } => {
                assert!(reason.0.contains(want), "want {want:?}, got {reason}")
            }
            other => panic!("want {want:?}, got {other:?}"),
        }
    }
}
