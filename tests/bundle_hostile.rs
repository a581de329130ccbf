//! Hostile bundles. A bundle from another team is untrusted input:
//! * memory stays bounded: over-long lines, huge claimed counts, too many records, huge
//!   numbers and deep JSON nesting (serde_json in the manifest and meta lines, ttdb's own
//!   scanner in the record lines) are refused with a clear error, and the reader allocates
//!   in proportion to the file it was given, never to what the file claims (a counting
//!   allocator checks this per thread); a zstd bomb stops at the decompressed-size cap;
//! * a truncated file, plain or compressed, is refused and says it is truncated;
//! * a well-formed bundle of hostile schedules (out-of-range stage and iterator ids, absurd
//!   split extents, huge unroll values) imports, its records fail replay cleanly, and
//!   `match`, `apply`, `tune --workload` and `refine --workload` on that database finish.
mod common;
#[path = "common/mutate.rs"]
mod mutate;

use serde_json::Value;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use ttdb::ansor::{parse_line, LogLine, Record, WorkloadKey};
use ttdb::bundle::format::{
    self, sha256_hex, Bundle, BundleRecord, Creation, FormatError, Limits, Provenance, RecordMeta,
};

/// The global allocator, counting the bytes live on each thread and their peak.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // `try_with`: the allocator also runs while a thread's locals are torn down.
    let _ = LIVE.try_with(|l| {
        let v = l.get() + delta;
        l.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        System.dealloc(p, layout);
        count(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, layout, new);
        if !q.is_null() {
            count(new as isize - layout.size() as isize);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// `f`'s result and the most bytes it had allocated at once (on this thread).
fn peak_bytes<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let r = f();
    (r, (PEAK.with(Cell::get) - base).max(0) as usize)
}

#[test]
fn the_allocation_counter_counts() {
    let (v, peak) = peak_bytes(|| vec![1u8; 10 << 20]);
    assert!(peak >= v.len(), "{peak}");
    let (_, peak) = peak_bytes(|| ());
    assert!(peak < 4096, "{peak}");
}

/// Reads `bytes` under `limits`, expecting a refusal whose message contains `want`, with
/// at most `budget` bytes allocated at once.
fn refused(bytes: &[u8], limits: &Limits, want: &str, budget: usize) -> FormatError {
    let (r, peak) = peak_bytes(|| format::read(bytes, limits));
    let e = r.expect_err("a hostile bundle was accepted");
    assert!(e.to_string().contains(want), "expected {want:?} in: {e}");
    assert!(
        peak <= budget,
        "{peak} bytes allocated at once for a {}-byte file (budget {budget}): {e}",
        bytes.len()
    );
    e
}

/// Real lines of the corpus (resnet-18, NCHWc).
fn corpus_lines(n: usize) -> Vec<String> {
    let path = common::corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .take(n)
        .map(str::to_string)
        .collect()
}

fn record(line: &str) -> BundleRecord {
    BundleRecord {
        meta: RecordMeta {
            sha256: sha256_hex(line.as_bytes()),
            class: "conv2d_nchwc+add+relu".into(),
            signature: String::new(),
            provenance: vec![Provenance {
                kind: "imported".into(),
                source: "hostile.json".into(),
                line: 1,
                host: String::new(),
            }],
        },
        line: line.to_string(),
    }
}

fn bundle(lines: &[String]) -> Bundle {
    Bundle::new(
        lines.iter().map(|l| record(l)).collect(),
        &[],
        Creation::default(),
    )
}

fn text(lines: &[String]) -> String {
    bundle(lines).to_text()
}

/// `text` with its trailer hash recomputed, so the edit above it is what the reader sees.
fn resealed(text: &str) -> Vec<u8> {
    let (body, _) = text
        .split_once("# bundle-sha256 ")
        .expect("a bundle has a trailer");
    format!("{body}# bundle-sha256 {}\n", sha256_hex(body.as_bytes())).into_bytes()
}

/// `text` with its manifest line replaced by `manifest` (a JSON text), resealed.
fn with_manifest(text: &str, manifest: &str) -> Vec<u8> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[1] = format!("# manifest {manifest}");
    resealed(&(lines.join("\n") + "\n"))
}

/// The manifest of `text` as JSON, for edits.
fn manifest(text: &str) -> serde_json::Map<String, Value> {
    let line = text.lines().nth(1).unwrap();
    match serde_json::from_str(line.strip_prefix("# manifest ").unwrap()).unwrap() {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

/// `line` with its steps (`i[1][1]`) replaced and its measured cost set to `cost`.
fn with_steps(line: &str, steps: &Value, cost: f64) -> String {
    let mut v: Value = serde_json::from_str(line).unwrap();
    v["i"][1][1] = steps.clone();
    v["r"][0] = serde_json::json!([cost]);
    v.to_string()
}

fn steps_of(line: &str) -> Value {
    let v: Value = serde_json::from_str(line).unwrap();
    v["i"][1][1].clone()
}

/// Small caps for the tests: a hostile file must fail within them, fast.
fn small() -> Limits {
    Limits {
        max_bytes: 1 << 20,
        max_line: 16 << 10,
        max_records: 100,
    }
}

const MB: usize = 1 << 20;

#[test]
fn a_line_over_the_line_limit_is_refused_without_being_copied() {
    let lines = corpus_lines(2);
    let t = text(&lines);
    // The record lines are the longest; a limit below them and above the rest.
    let longest = t.lines().map(str::len).max().unwrap();
    let manifest_len = t.lines().nth(1).unwrap().len();
    let limits = Limits {
        max_line: manifest_len.max(300),
        ..small()
    };
    assert!(longest > limits.max_line);
    let e = refused(
        t.as_bytes(),
        &limits,
        "over the limit of",
        2 * t.len() + (64 << 10),
    );
    assert!(e.line.is_some(), "the error names the line: {e}");

    // One 8 MiB line (in a description): refused at that line, no copy of it made.
    let huge = t.replacen(
        "\"description\":\"\"",
        &format!("\"description\":\"{}\"", "a".repeat(8 * MB)),
        1,
    );
    let bytes = resealed(&huge);
    let limits = Limits {
        max_bytes: 64 * MB as u64,
        ..small()
    };
    let e = refused(&bytes, &limits, "over the limit of 16384", bytes.len() + MB);
    assert_eq!(e.line, Some(2), "{e}");
}

#[test]
fn a_manifest_claiming_huge_counts_is_refused_without_allocating_for_them() {
    let lines = corpus_lines(2);
    let t = text(&lines);
    let budget = 4 * t.len() + MB;
    for (field, value) in [
        ("records", serde_json::json!(u64::MAX)),
        ("records", serde_json::json!(usize::MAX / 2)),
        (
            "targets",
            serde_json::json!([{"name": "llvm", "records": u64::MAX}]),
        ),
        (
            "classes",
            serde_json::json!([{"class": "x", "workloads": u64::MAX, "records": u64::MAX}]),
        ),
    ] {
        let mut m = manifest(&t);
        m.insert(field.into(), value);
        let bytes = with_manifest(&t, &Value::Object(m).to_string());
        refused(
            &bytes,
            &small(),
            &format!("manifest: `{field}` does not match the records"),
            budget,
        );
    }
    // Counts that are not counts: beyond u64, negative, fractional.
    for bad in ["1e400", "99999999999999999999999", "-1", "2.5"] {
        let m = manifest(&t);
        let json = Value::Object(m).to_string().replacen(
            "\"records\":2",
            &format!("\"records\":{bad}"),
            1,
        );
        assert!(json.contains(bad));
        refused(&with_manifest(&t, &json), &small(), "manifest: ", budget);
    }
}

#[test]
fn more_records_than_the_limit_are_refused_at_the_first_one_over() {
    let lines = corpus_lines(5);
    let b = bundle(&lines);
    let limits = Limits {
        max_records: 3,
        ..small()
    };
    let e = refused(
        b.to_text().as_bytes(),
        &limits,
        "more than 3 records",
        4 * b.to_text().len() + MB,
    );
    assert_eq!(e.record, Some(4), "{e}");
    assert!(format::read(b.to_text().as_bytes(), &small()).is_ok());
}

/// A record line whose sha256 matches (so the parser is what refuses it).
fn bundle_with_record_line(line: &str) -> Vec<u8> {
    let good = corpus_lines(1);
    let t = text(&good);
    let meta = serde_json::json!({
        "sha256": sha256_hex(line.as_bytes()),
        "class": "x",
        "signature": "",
        "provenance": [{"kind": "imported", "source": "hostile.json"}],
    });
    let mut out: Vec<String> = t.lines().take(2).map(str::to_string).collect();
    out.push(format!("# record {meta}"));
    out.push(line.to_string());
    out.push("# bundle-sha256 x".into());
    resealed(&(out.join("\n") + "\n"))
}

#[test]
fn huge_numbers_are_refused_with_the_field_named() {
    let line = &corpus_lines(1)[0];
    // (what to replace in the real line, its replacement, the error).
    let cases = [
        // A split length past a 32-bit int, past i64, past u64.
        (
            "[1, 1, 1], 1]",
            "[2147483648, 1, 1], 1]",
            "out of range for a 32-bit int",
        ),
        (
            "[1, 1, 1], 1]",
            "[9223372036854775808, 1, 1], 1]",
            "out of range",
        ),
        ("[1, 1, 1], 1]", "[1e400, 1, 1], 1]", "not an integer"),
        (
            "[\"CI\", 5]",
            "[\"CI\", 99999999999999999999999999]",
            "out of range",
        ),
        ("0.000576575", "1e400", "out of range for a double"),
        (
            "[24, 64, 64,",
            "[99999999999999999999, 64, 64,",
            "out of range",
        ),
        (", 2, []]", ", 99999999999999999999, []]", "out of range"),
        ("1754259133]", "1e99999]", "out of range for a double"),
    ];
    for (from, to, want) in cases {
        assert!(line.contains(from), "{from}");
        let hostile = line.replacen(from, to, 1);
        match parse_line(hostile.as_bytes()) {
            LogLine::Bad { reason, .. } => {
                assert!(
                    reason.0.contains(want),
                    "{to}: expected {want:?} in: {reason}"
                )
            }
            other => panic!("{to}: parsed as {other:?}"),
        }
        let bytes = bundle_with_record_line(&hostile);
        let e = refused(
            &bytes,
            &small(),
            "not an Ansor record",
            4 * bytes.len() + MB,
        );
        assert!(e.to_string().contains(want), "{e}");
        assert_eq!((e.line, e.record), (Some(4), Some(1)), "{e}");
    }
    // In a meta line: a provenance line number past u64.
    let t = text(&corpus_lines(1));
    let bytes = resealed(&t.replacen("\"line\":1", "\"line\":99999999999999999999999", 1));
    refused(&bytes, &small(), "record meta: ", 4 * bytes.len() + MB);
}

/// Runs `f` on a thread with a 256 KiB stack: deep nesting must be refused by a depth
/// limit, not by overflowing the stack.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn deep_nesting_is_refused_in_manifest_meta_and_record_lines() {
    const DEPTH: usize = 100_000;
    let nest = |open: &str, close: &str| format!("{}1{}", open.repeat(DEPTH), close.repeat(DEPTH));
    let t = text(&corpus_lines(1));
    let limits = Limits {
        max_line: 4 * MB,
        ..small()
    };

    // serde_json (manifest and meta lines): no manifest or meta field nests more than
    // three deep, so deep nesting where a field's value goes fails at once on its type.
    for (field, want) in [
        ("hosts", "manifest: invalid type"),
        ("targets", "manifest: invalid type"),
        ("description", "manifest: invalid type"),
    ] {
        let mut m = manifest(&t);
        m.insert(field.into(), Value::Null);
        let json = Value::Object(m)
            .to_string()
            .replacen("null", &nest("[", "]"), 1);
        let bytes = with_manifest(&t, &json);
        let l = limits.clone();
        let e = on_small_stack(move || format::read(&bytes, &l).unwrap_err());
        assert!(e.to_string().contains(want), "{field}: {e}");
    }
    let deep_provenance = t.replacen(
        "\"provenance\":[",
        &format!("\"provenance\":[{},", nest("[", "]")),
        1,
    );
    let bytes = resealed(&deep_provenance);
    let l = limits.clone();
    let e = on_small_stack(move || format::read(&bytes, &l).unwrap_err());
    assert!(e.to_string().contains("record meta: invalid type"), "{e}");
    // A field the reader does not know is skipped, and serde_json skips without recursion:
    // 100,000 levels cost a small stack and memory in proportion to the line (itself
    // capped by `max_line`).
    let mut m = manifest(&t);
    m.insert("x".into(), Value::Null);
    let json = Value::Object(m)
        .to_string()
        .replacen("null", &nest("{\"a\":", "}"), 1);
    let bytes = with_manifest(&t, &json);
    let l = limits.clone();
    let peak = on_small_stack(move || {
        let (r, peak) = peak_bytes(|| format::read(&bytes, &l));
        r.expect("an unknown manifest field is skipped");
        (peak, bytes.len())
    });
    assert!(
        peak.0 < 4 * peak.1 + MB,
        "{} bytes allocated for a {}-byte file",
        peak.0,
        peak.1
    );

    // ttdb's scanner (record lines): deep lists where a record has lists, where it skips
    // values, and inside the workload key (a JSON string holding JSON).
    let line = corpus_lines(1).remove(0);
    let deep_key = nest("[", "]").replace('"', "\\\"");
    let cases = [
        // The state's stage list (skipped, then refused).
        (
            line.replacen(
                "[[], [[\"CI\"",
                &format!("[[{}], [[\"CI\"", nest("[", "]")),
                1,
            ),
            "nesting too deep",
        ),
        // A surplus step argument (skipped to count it).
        (
            line.replacen(
                "[\"CI\", 5]",
                &format!("[\"CI\", 5, {}]", nest("[", "]")),
                1,
            ),
            "step 0: bad JSON at column 304: nesting too deep",
        ),
        // A surplus result element: refused where the result should end.
        (
            line.replacen(
                "1754259133]",
                &format!("1754259133, {}]", nest("[", "]")),
                1,
            ),
            "expected ']', found ','",
        ),
        // The workload key (a JSON string holding JSON).
        (
            line.replacen(
                "[\\\"094746725b17047692659df5357898d7\\\",",
                &format!("[\\\"094746725b17047692659df5357898d7\\\", {deep_key},"),
                1,
            ),
            "workload key: nesting too deep",
        ),
        // Objects in a step list.
        (
            line.replacen("[\"CI\", 5]", &nest("{\"a\": ", "}"), 1),
            "step must be a list, got an object",
        ),
    ];
    for (hostile, want) in cases {
        assert_ne!(hostile, line, "the edit applies");
        let l = hostile.clone();
        let reason = on_small_stack(move || match parse_line(l.as_bytes()) {
            LogLine::Bad { reason, .. } => reason.0,
            other => panic!("parsed: {other:?}"),
        });
        assert!(reason.contains(want), "expected {want:?} in: {reason}");
        let bytes = bundle_with_record_line(&hostile);
        let l = limits.clone();
        let e = on_small_stack(move || format::read(&bytes, &l).unwrap_err());
        assert!(e.to_string().contains("not an Ansor record"), "{e}");
        assert!(e.to_string().contains(want), "expected {want:?} in: {e}");
    }
}

#[test]
fn a_decompression_bomb_stops_at_the_cap() {
    // 256 MiB of newlines, of line-free bytes, each after a header, compress to a few KB.
    // The text streams through the checks a line at a time: each bomb is refused at its
    // first bad line, after at most one line of it was held.
    use std::io::Read;
    let bomb = |head: &str, byte: u8| {
        let text = std::io::Cursor::new(head.as_bytes().to_vec())
            .chain(std::io::repeat(byte).take(256 * MB as u64));
        let z = zstd::stream::encode_all(text, 19).unwrap();
        assert!(z.len() < 64 << 10, "{} bytes", z.len());
        z
    };
    let limits = Limits {
        max_bytes: 512 * MB as u64,
        ..small()
    };
    refused(&bomb("", b'\n'), &limits, "not a ttdb bundle", MB);
    refused(
        &bomb("# ttdb-bundle 1\n", b'\n'),
        &limits,
        "line 2: expected the `# manifest` line",
        MB,
    );
    refused(
        &bomb("# ttdb-bundle 1\n", b'x'),
        &limits,
        "line 2: a line over the limit of 16384 bytes",
        MB,
    );

    // A real bundle whose text is one byte over the cap, and exactly at it.
    let t = text(&corpus_lines(3));
    let z = zstd::stream::encode_all(t.as_bytes(), 3).unwrap();
    let at = |max_bytes: usize| Limits {
        max_bytes: max_bytes as u64,
        ..small()
    };
    refused(&z, &at(t.len() - 1), "over the limit", 3 * t.len() + MB);
    assert!(format::read(&z, &at(t.len())).is_ok());
    // The file itself over the cap, before any decompression.
    refused(
        &z,
        &at(z.len() - 1),
        &format!("the file is {} bytes, over the limit", z.len()),
        MB,
    );
}

#[test]
fn every_truncation_is_refused_as_truncated() {
    let b = bundle(&corpus_lines(2));
    let plain = b.to_bytes(false).unwrap();
    for cut in 0..plain.len() {
        let e = format::read(&plain[..cut], &small()).expect_err("a truncated bundle was accepted");
        assert!(e.reason.contains("truncated"), "cut at {cut}: {e}");
    }
    let z = b.to_bytes(true).unwrap();
    for cut in 0..z.len() {
        let e = format::read(&z[..cut], &small()).expect_err("a truncated bundle was accepted");
        assert!(
            e.reason.contains("truncated"),
            "compressed, cut at {cut}: {e}"
        );
    }
    // The CLI says so too, and names the file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cut.ttdb");
    std::fs::write(&file, &z[..z.len() / 2]).unwrap();
    let (code, _, err) = common::ttdb_on(
        &dir.path().join("t.db"),
        &["bundle", "import", file.to_str().unwrap()],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("cut.ttdb") && err.contains("truncated"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------
// Hostile schedules in a well-formed bundle.

/// The real records the hostile ones are made from: workloads of the classes
/// fixtures/models/tiny_resnet.onnx has (so `match` and `apply` consider them).
fn victims() -> Vec<String> {
    let path = common::corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json");
    let text = std::fs::read_to_string(path).unwrap();
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for line in text.lines() {
        let r = Record::parse(line).unwrap();
        let key = WorkloadKey::parse(&r.task.workload_key).unwrap();
        let class = ttdb::recognize::recognize(&key).unwrap().signature.op_class;
        let want = [
            "conv2d_nchwc+add+relu",
            "conv2d_nchwc+add+add+relu",
            "adaptive_pool_avg",
        ];
        if want.contains(&class.as_str()) && seen.insert(class) {
            out.push(line.to_string());
        }
    }
    assert_eq!(out.len(), 3, "a record of each class");
    out
}

/// `steps` with the first step of tag `tag` edited by `f` (None if there is none).
fn edit_first(steps: &Value, tag: &str, f: impl Fn(&mut Vec<Value>)) -> Option<Value> {
    let mut s = steps.clone();
    let step = s.as_array_mut()?.iter_mut().find(|x| x[0] == tag)?;
    f(step.as_array_mut()?);
    Some(s)
}

/// Step lists that must fail replay: (what, steps).
fn hostile_steps(steps: &Value) -> Vec<(&'static str, Value)> {
    let max = i32::MAX as i64;
    let mut out = Vec::new();
    let mut push = |what, s: Option<Value>| out.extend(s.map(|s| (what, s)));
    push("stage id out of range", {
        let mut s = steps.clone();
        s[0][1] = 1000.into();
        Some(s)
    });
    push("stage id i32::MAX", {
        let mut s = steps.clone();
        s[0][1] = max.into();
        Some(s)
    });
    push(
        "split iterator out of range",
        edit_first(steps, "SP", |a| a[2] = 100_000.into()),
    );
    push(
        "split extent absurd",
        edit_first(steps, "SP", |a| a[3] = max.into()),
    );
    push(
        "split lengths absurd",
        edit_first(steps, "SP", |a| {
            a[4] = serde_json::json!([max, max, max]);
        }),
    );
    push(
        "split length zero",
        edit_first(steps, "SP", |a| a[4] = serde_json::json!([0, 1, 1])),
    );
    push(
        "annotation iterator out of range",
        edit_first(steps, "AN", |a| a[2] = 5000.into()),
    );
    push(
        "fuse out of range",
        edit_first(steps, "FU", |a| a[2] = serde_json::json!([0, 70000])),
    );
    push(
        "reorder repeats",
        edit_first(steps, "RE", |a| {
            let n = a[2].as_array().unwrap().len();
            a[2] = Value::from(vec![0; n]);
        }),
    );
    push(
        "compute-at a missing stage",
        edit_first(steps, "CA", |a| {
            a[2] = 999.into();
            a[3] = max.into();
        }),
    );
    push(
        "unroll pragma not a number",
        edit_first(steps, "PR", |a| {
            a[3] = "auto_unroll_max_step$99999999999999999999".into();
        }),
    );
    out
}

/// Unroll values past any TVM's search writes (it picks 0, 16, 64 or 512): they replay,
/// and lowering and codegen must cope.
const LARGE_UNROLLS: [i64; 2] = [0, 4096];

/// (victim, unroll) pairs that unroll a 3x3x512 reduction far enough to hang codegen (see
/// the ignored test below).
const HUGE_UNROLLS: [(usize, i64); 3] = [(1, 65_536), (0, 1 << 20), (0, i32::MAX as i64)];

fn with_unroll(steps: &Value, n: i64) -> Option<Value> {
    edit_first(steps, "PR", |a| {
        a[3] = format!("auto_unroll_max_step${n}").into()
    })
}

/// Replays a record on its workload's DAG, as `verify` and the matcher do.
fn replays(line: &str) -> Result<(), String> {
    let r = Record::parse(line).unwrap();
    let key = WorkloadKey::parse(&r.task.workload_key).unwrap();
    let dag = ttdb::recognize::recognize(&key).unwrap().dag;
    let inits = ttdb::schedule::stage_inits_from_dag(&dag);
    ttdb::schedule::replay(&inits, &r.steps)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Replays a record on its workload's DAG with split lengths re-targeted, as the matcher's
/// class tier does.
fn retargets(line: &str) -> Result<(), String> {
    let r = Record::parse(line).unwrap();
    let key = WorkloadKey::parse(&r.task.workload_key).unwrap();
    let dag = ttdb::recognize::recognize(&key).unwrap().dag;
    let inits = ttdb::schedule::stage_inits_from_dag(&dag);
    ttdb::matcher::adapt::retarget(&inits, &r.steps)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Runs ttdb on `db`, failing if it panics, fails, or takes longer than `seconds`.
fn ttdb_within(db: &std::path::Path, args: &[&str], seconds: u64) -> String {
    let (ok, out, err) = ttdb_status_within(db, args, seconds);
    assert!(ok, "ttdb {args:?} failed\n{err}");
    out
}

/// Runs ttdb on `db`, failing if it panics or takes longer than `seconds`: (success,
/// stdout, stderr).
fn ttdb_status_within(db: &std::path::Path, args: &[&str], seconds: u64) -> (bool, String, String) {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .arg("--db")
        .arg(db)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drain the pipes while waiting, so a chatty child never blocks on a full pipe.
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out_pipe, &mut s).unwrap();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err_pipe, &mut s).unwrap();
        s
    });
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed().as_secs() >= seconds {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!(
                "ttdb {args:?} did not finish in {seconds} s:\n{}",
                err.join().unwrap()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(!err.contains("panicked"), "ttdb {args:?} panicked:\n{err}");
    (status.success(), out, err)
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn hostile_schedules_import_fail_replay_and_crash_nothing() {
    let mut lines = Vec::new();
    let mut must_fail = 0;
    for (k, v) in victims().iter().enumerate() {
        assert!(replays(v).is_ok(), "the real record replays");
        lines.push(v.clone());
        let steps = steps_of(v);
        // The hostile records claim the best costs, so every ranking tries them first:
        // those that must fail replay and the large unrolls (which replay), in turns by
        // workload, then every single perturbation of the record (tests/common/mutate.rs),
        // one in a few.
        let (fail_cost, unroll_cost) = if k == 1 { (1e-7, 1e-8) } else { (1e-8, 1e-7) };
        for (i, n) in LARGE_UNROLLS.into_iter().enumerate() {
            let s = with_unroll(&steps, n).expect("an unroll pragma");
            lines.push(with_steps(v, &s, unroll_cost * (1.0 + i as f64 / 100.0)));
        }
        for (i, (what, s)) in hostile_steps(&steps).into_iter().enumerate() {
            let l = with_steps(v, &s, fail_cost * (1.0 + i as f64 / 100.0));
            let e = replays(&l).expect_err(what);
            assert!(!e.is_empty(), "{what}: an empty message");
            lines.push(l);
            must_fail += 1;
        }
        let mutants = mutate::step_mutants(&steps);
        for (i, s) in mutants.into_iter().step_by(5 + k).enumerate() {
            lines.push(with_steps(v, &s, 2e-7 * (1.0 + i as f64 / 1000.0)));
        }
    }
    assert!(must_fail >= 25, "{must_fail} hostile records");
    // Only well-formed records: the bundle must import, not be refused by the parser.
    lines.retain(|l| Record::parse(l).is_ok());
    lines.sort();
    lines.dedup();

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("h.db");
    let file = dir.path().join("hostile.ttdb");
    let b = Bundle::new(
        lines.iter().map(|l| record(l)).collect(),
        &[],
        Creation::default(),
    );
    std::fs::write(&file, b.to_bytes(true).unwrap()).unwrap();
    let ttdb = |args: &[&str]| ttdb_within(&db, args, 120);

    let import = json(&ttdb(&[
        "bundle",
        "import",
        file.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(import[0]["inserted"], lines.len(), "{import}");
    assert_eq!(import[0]["rejected"], serde_json::json!([]), "{import}");

    // Matching replays the best records of the nearest workloads: the hostile ones are
    // rejected with the replay's reason, and every kernel still gets an answer.
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/models/tiny_resnet.onnx"
    );
    let m = json(&ttdb(&["match", model, "--json"]));
    let rejections = m["kernels"].to_string();
    assert!(rejections.contains("replay failed"), "{m}");
    let explain = ttdb(&["match", model, "--explain", "/layer1.conv1/Conv"]);
    assert!(explain.contains("replay failed"), "{explain}");
    let apply = json(&ttdb(&["apply", model, "--top-k", "3", "--json"]));
    for k in apply["kernels"].as_array().unwrap() {
        assert_eq!(k["verified"], true, "{k}");
    }

    // The workloads themselves: refine re-times their best stored records (the hostile
    // ones first), tune seeds its search with them.
    for v in &victims()[..2] {
        let key = WorkloadKey::parse(&Record::parse(v).unwrap().task.workload_key).unwrap();
        let sig = ttdb::recognize::recognize(&key)
            .unwrap()
            .signature
            .sha256_hex();
        let refine = json(&ttdb(&[
            "refine",
            "--workload",
            &sig[..16],
            "--trials-per-kernel",
            "8",
            "--json",
        ]));
        assert_eq!(refine["kernels"].as_array().unwrap().len(), 1, "{refine}");
        let tune = json(&ttdb(&[
            "tune",
            "--workload",
            &sig[..16],
            "--trials",
            "8",
            "--batch",
            "8",
            "--population",
            "8",
            "--json",
        ]));
        let k = &tune["kernels"][0];
        assert_eq!(k["trials"], 8, "{tune}");
        assert!(k["best_ms"].as_f64().is_some_and(|t| t > 0.0), "{tune}");
    }
}

/// A large `auto_unroll_max_step` on a real 3x3x512 conv of resnet-18 once passed the
/// unroll guard (then 2,000,000 statements), and `verify` (like `refine` and `tune`, which
/// compile the same record) ran for more than 300 s, at up to 3 GB: 65,536 on
/// `d45cd47001ab`, 2^20 and 2^31-1 on `39b63bc5efe1`. The guard is now 16,384 statements
/// (`CostLimits::max_stmt_nodes`): such records are refused, with the reason, in seconds.
#[test]
fn a_huge_unroll_pragma_is_refused_or_compiled_in_seconds() {
    let victims = victims();
    for (k, n) in HUGE_UNROLLS {
        let v = &victims[k];
        let s = with_unroll(&steps_of(v), n).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (db, log) = (dir.path().join("u.db"), dir.path().join("u.json"));
        std::fs::write(&log, with_steps(v, &s, 1e-8) + "\n").unwrap();
        ttdb_within(&db, &["import", log.to_str().unwrap()], 60);
        // Exit status 1: the kernel failed verification.
        let (_, out, _) = ttdb_status_within(&db, &["verify", "--all", "--json"], 60);
        let v = json(&out);
        let row = &v["rows"][0];
        assert!(
            row["verified"] == true
                || row["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("statements (limit 16384)")),
            "unroll {n}: {v}"
        );
    }
}

/// The candidates of every kernel of `model`: (tier, source file, line), best first.
fn match_sources(db: &std::path::Path, model: &str) -> Vec<Vec<(String, String, i64)>> {
    let m = json(&ttdb_within(db, &["match", model, "--json"], 120));
    m["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            k["candidates"]
                .as_array()
                .map(|cs| {
                    cs.iter()
                        .map(|c| {
                            let s = &c["source"];
                            let file = s["source_path"].as_str().unwrap();
                            let file = std::path::Path::new(file).file_name().unwrap();
                            (
                                c["tier"].as_str().unwrap().to_string(),
                                file.to_string_lossy().into_owned(),
                                s["line"].as_i64().unwrap(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// Records that fail replay (and re-targeting) yet claim the best costs fall through to the
/// workload's next record: matching (exact and class tiers) picks the same candidates as without them, and
/// `refine` starts from the real record.
#[test]
fn records_that_fail_replay_do_not_hide_the_valid_ones() {
    let path = common::corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json");
    let real = std::fs::read_to_string(&path).unwrap();
    let mut hostile = String::new();
    for line in real.lines() {
        let steps = steps_of(line);
        for (i, (_, s)) in hostile_steps(&steps).into_iter().enumerate() {
            let l = with_steps(line, &s, 1e-8 * (1.0 + i as f64 / 100.0));
            // Retargeting repairs split lengths (a class candidate may take such a record
            // legitimately), so only records no tier can use.
            if Record::parse(&l).is_ok() && replays(&l).is_err() && retargets(&l).is_err() {
                hostile.push_str(&l);
                hostile.push('\n');
            }
        }
    }
    assert!(
        hostile.lines().count() > 100,
        "hostile records of every workload"
    );
    let dir = tempfile::tempdir().unwrap();
    let (clean, dirty) = (dir.path().join("clean"), dir.path().join("dirty"));
    for (d, text) in [(&clean, real.clone()), (&dirty, real.clone() + &hostile)] {
        std::fs::create_dir(d).unwrap();
        std::fs::write(d.join("log.json"), text).unwrap();
        let db = d.join("t.db");
        ttdb_within(&db, &["import", d.join("log.json").to_str().unwrap()], 60);
    }
    let (clean_db, dirty_db) = (clean.join("t.db"), dirty.join("t.db"));
    for model in [
        common::corpus_dir().join("onnx/torchvision_graph_only/resnet18.onnx"),
        std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/models/tiny_resnet.onnx"
        )),
    ] {
        let model = model.to_str().unwrap();
        let want = match_sources(&clean_db, model);
        assert!(
            want.iter().flatten().any(|c| c.0 == "exact") || !model.contains("resnet18"),
            "resnet18 has exact matches: {want:?}"
        );
        assert!(want.iter().flatten().any(|c| c.0 == "class"), "{want:?}");
        assert_eq!(match_sources(&dirty_db, model), want, "{model}");
    }
    let v = &victims()[0];
    let key = WorkloadKey::parse(&Record::parse(v).unwrap().task.workload_key).unwrap();
    let sig = ttdb::recognize::recognize(&key)
        .unwrap()
        .signature
        .sha256_hex();
    let line = 1 + real.lines().position(|l| l == v).unwrap();
    let refine = json(&ttdb_within(
        &dirty_db,
        &[
            "refine",
            "--workload",
            &sig[..16],
            "--trials-per-kernel",
            "2",
            "--json",
        ],
        120,
    ));
    let start = refine["kernels"][0]["start_source"].as_str().unwrap_or("");
    assert!(
        start.contains(&format!("log.json:{line}")),
        "refine starts from the real record (line {line}): {refine}"
    );
}
