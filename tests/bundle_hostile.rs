//! Hostile bundles. A bundle from another team is untrusted input:
//! * memory stays bounded: over-long lines, huge claimed counts, too many records, huge
//!   numbers and deep JSON nesting (serde_json in the manifest and meta lines, ttdb's own
//!   scanner in the record lines) are refused with a clear error, and the reader allocates
//!   in proportion to the file it was given, never to what the file claims (a counting
//!   allocator checks this per thread); a zstd bomb stops at the decompressed-size cap;
//! * a truncated file, plain or compressed, is refused and says it is truncated;
//! * a well-formed bundle of hostile schedules (out-of-range stage and iterator ids, absurd
//!   split extents, huge unroll values) imports, its records fail replay cleanly, and
//!   `match`, `apply`, `tune --workload` and `refine --workload` on that database finish
//!   (`schedules`; what is stored and ranked on SQLite and on PostgreSQL).
use crate::common;
use crate::common::mutate;
#[path = "bundle_hostile/schedules.rs"]
mod schedules;

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
