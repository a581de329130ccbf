//! The two fuzz targets (the bundle reader and the Ansor line parser) and their
//! structure-aware mutator, shared by the libFuzzer harness in `fuzz/` and by the CI smoke
//! in tests/bundle_fuzz.rs, so both run the same checks on inputs made the same way.
//!
//! Random bytes almost never get past a bundle's sha256 checks, so the mutator can
//! *reseal* a mutant: recompute the record hashes and the trailer (the checks after them
//! then see the damage), or rebuild the whole manifest (the record lines themselves, and
//! everything that reads them, see it).
#![allow(dead_code)]
use ttdb::ansor::{parse_line, LogLine, Record};
use ttdb::bundle::format::{self, Bundle, BundleRecord, Creation, Limits, Manifest, RecordMeta};

/// Small caps, so a decompression bomb or a huge line costs milliseconds, not gigabytes.
pub fn limits() -> Limits {
    Limits {
        max_bytes: 1 << 20,
        max_line: 64 << 10,
        max_records: 4096,
    }
}

/// Target (a): reads `data` as a bundle. What the reader accepts must write back to the
/// same bundle, merge with itself to the same records, and have a signature status and
/// an import plan. Returns the reader's verdict.
pub fn exercise_bundle(data: &[u8]) -> Result<(), format::FormatError> {
    let b = format::read(data, &limits())?;
    let text = b.to_bytes(false).expect("writing to memory");
    let again = format::read(&text, &Limits::default())
        .unwrap_or_else(|e| panic!("a bundle read back from its own text: {e}"));
    // The trailer hash covers the input's exact bytes (its JSON spacing, say), so it may
    // differ; everything else must not.
    assert_eq!(
        again.manifest, b.manifest,
        "manifest after a write and read"
    );
    assert_eq!(again.records, b.records, "records after a write and read");
    assert_eq!(
        again.signature, b.signature,
        "signature after a write and read"
    );
    assert_eq!(
        ttdb::bundle::merge(&b, &b).records,
        b.records,
        "merge(A, A)"
    );
    let _ = ttdb::bundle::sign::check(&b);
    EMPTY_STORE.with(|s| {
        let plans = ttdb::bundle::plan(s, &b).expect("planning against an empty database");
        assert!(
            plans.iter().all(|p| p.new_records == p.records),
            "an empty database holds nothing"
        );
    });
    Ok(())
}

thread_local! {
    /// `plan` reads a database; an empty one answers the same for every input.
    static EMPTY_STORE: ttdb::store::Store =
        ttdb::store::Store::open_in_memory().expect("an in-memory database");
}

/// Target (b): one log line. A record must write back (TVM layout) to a line that parses
/// to the same record, and that line must be a fixed point of parse + write. Returns
/// whether the line was a record.
pub fn exercise_line(data: &[u8]) -> bool {
    if let Ok(text) = std::str::from_utf8(data) {
        // Also the lines `parse_line` classifies as comments (first byte `#` or space).
        let _ = Record::parse(text);
    }
    let LogLine::Record { record, .. } = parse_line(data) else {
        return false;
    };
    let line = record.to_line();
    let again = Record::parse(&line)
        .unwrap_or_else(|e| panic!("ttdb's own line for a parsed record: {e}\n{line}"));
    assert_eq!(again, *record, "record after a write and parse:\n{line}");
    assert_eq!(again.to_line(), line, "the writer is not a fixed point");
    let t = &record.task;
    let _ = ttdb::store::target::NormalizedTarget::parse(&t.target, t.hardware_params.as_deref());
    true
}

/// splitmix64: deterministic, seedable, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Numbers at the edges of what the parsers accept: i32/i64/u64 bounds, doubles out of
/// range, JSON-invalid spellings.
const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "2",
    "3",
    "7",
    "64",
    "512",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999999",
    "1e308",
    "1e309",
    "-1e400",
    "1e-400",
    "1.5",
    "0.0",
    "1E+2",
    "1e99999999999999999999",
    "00",
    "1.",
    "-",
    "NaN",
    "Infinity",
    "0x10",
];

/// JSON and bundle fragments, step tags, and bytes that break UTF-8 or lines.
const TOKENS: &[&str] = &[
    "null",
    "true",
    "false",
    "[]",
    "{}",
    "\"\"",
    "[[]]",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\"\\udc00\\ud800\"",
    "\"\\ud83d\\ude00\"",
    "\\",
    "\"",
    ",",
    ":",
    "]",
    "}",
    "[",
    "{",
    ", ",
    "\r",
    "\n",
    "\t",
    "\u{feff}",
    "\u{2028}",
    "é",
    "# record ",
    "# manifest ",
    "# ttdb-bundle 1",
    "# bundle-sha256 ",
    "# signature ed25519 ",
    "# ttdb-bundle 2",
    "\"SP\"",
    "\"FSP\"",
    "\"FFSP\"",
    "\"AN\"",
    "\"FU\"",
    "\"PR\"",
    "\"RE\"",
    "\"SA\"",
    "\"CA\"",
    "\"CI\"",
    "\"CR\"",
    "\"CHR\"",
    "\"CHW\"",
    "\"RF\"",
    "\"auto_unroll_max_step$",
    "\"llvm -keys=cpu\"",
    "\"TENSOR\"",
    "\"i\": ",
    "\"r\": ",
    "\"v\": ",
    "\"provenance\": []",
    "\"sha256\": \"\"",
    "\"records\": 18446744073709551615",
];

const BYTES: &[u8] = &[
    0, 0xff, 0xfe, 0x80, 0xc3, 0xed, b'\n', b'\r', b'#', b' ', b'"', b'\\', b'[', b']', b'{', b'}',
    b',', b':', b'-', b'0', b'9', b'e',
];

/// Bundles and lines the mutator may grow to; bigger inputs are cut.
pub const MAX_LEN: usize = 256 << 10;

/// One random edit of `data`; `donors` are other inputs to splice from.
pub fn edit(data: &mut Vec<u8>, rng: &mut Rng, donors: &[Vec<u8>]) {
    let len = data.len();
    let pos = rng.below(len + 1);
    match rng.below(13) {
        0 if len > 0 => data[pos.min(len - 1)] ^= 1 << rng.below(8),
        1 if len > 0 => data[pos.min(len - 1)] = *rng.pick(BYTES),
        2 => {
            let n = 1 + rng.below(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            data.splice(pos..pos, bytes);
        }
        3 if len > 0 => {
            let end = (pos + 1 + rng.below(64)).min(len);
            data.drain(pos.min(len - 1)..end);
        }
        4 if len > 0 => {
            // Copy a range elsewhere.
            let start = rng.below(len);
            let end = (start + 1 + rng.below(128)).min(len);
            let chunk = data[start..end].to_vec();
            data.splice(pos..pos, chunk);
        }
        5 => replace_number(data, rng),
        6 => {
            let t = rng.pick(TOKENS).as_bytes().to_vec();
            data.splice(pos..pos, t);
        }
        7 => nest(data, pos, rng),
        8 => line_edit(data, rng),
        9 => splice(data, rng, donors),
        10 if len > 0 => data.truncate(pos),
        11 if len > 0 => {
            // A long run: one byte or chunk repeated, up to past the line limit.
            let start = rng.below(len);
            let end = (start + 1 + rng.below(16)).min(len);
            let times = *rng.pick(&[2, 16, 1000, 70_000]);
            let chunk = data[start..end].repeat(times);
            data.splice(pos..pos, chunk);
        }
        12 => {
            // Invalid UTF-8 or a stray control byte in the middle of a line.
            let b = *rng.pick(&[0x80u8, 0xc0, 0xf5, 0x00, 0x1f, 0x7f]);
            data.insert(pos, b);
        }
        _ => {}
    }
    data.truncate(MAX_LEN);
}

/// Replaces one number of `data` (a run of digits with its sign, fraction, exponent) with
/// one of [`NUMBERS`], or with its neighbour.
fn replace_number(data: &mut Vec<u8>, rng: &mut Rng) {
    let starts: Vec<usize> = (0..data.len())
        .filter(|&i| {
            data[i].is_ascii_digit()
                && (i == 0 || !data[i - 1].is_ascii_alphanumeric() && data[i - 1] != b'.')
        })
        .collect();
    if starts.is_empty() {
        return;
    }
    let mut start = *rng.pick(&starts);
    if start > 0 && data[start - 1] == b'-' {
        start -= 1;
    }
    let mut end = start + 1;
    while end < data.len() && matches!(data[end], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') {
        end += 1;
    }
    let new = match rng.below(4) {
        0 => std::str::from_utf8(&data[start..end])
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
            .map(|v| {
                v.saturating_add(if rng.below(2) == 0 { 1 } else { -1 })
                    .to_string()
            })
            .unwrap_or_else(|| "1".into()),
        _ => rng.pick(NUMBERS).to_string(),
    };
    data.splice(start..end, new.into_bytes());
}

/// Deep nesting: openers (arrays, objects, or strings inside arrays), sometimes closed.
fn nest(data: &mut Vec<u8>, pos: usize, rng: &mut Rng) {
    let depth = *rng.pick(&[8, 17, 65, 129, 1000, 50_000]);
    let (open, close): (&[u8], &[u8]) = match rng.below(3) {
        0 => (b"[", b"]"),
        1 => (b"{\"a\":", b"}"),
        _ => (b"[1,", b"]"),
    };
    let mut chunk = open.repeat(depth);
    if rng.below(2) == 0 {
        chunk.extend(close.repeat(depth));
    }
    data.splice(pos..pos, chunk);
}

/// Byte ranges of the lines of `data` (without their `\n`).
fn line_ranges(data: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &b) in data.iter().enumerate() {
        if b == b'\n' {
            out.push((start, i));
            start = i + 1;
        }
    }
    if start < data.len() {
        out.push((start, data.len()));
    }
    out
}

/// Deletes, duplicates or swaps whole lines.
fn line_edit(data: &mut Vec<u8>, rng: &mut Rng) {
    let lines = line_ranges(data);
    if lines.is_empty() {
        return;
    }
    let mut parts: Vec<Vec<u8>> = lines.iter().map(|&(s, e)| data[s..e].to_vec()).collect();
    let i = rng.below(parts.len());
    match rng.below(3) {
        0 => {
            parts.remove(i);
        }
        1 => {
            let l = parts[i].clone();
            parts.insert(rng.below(parts.len() + 1), l);
        }
        _ => {
            let j = rng.below(parts.len());
            parts.swap(i, j);
        }
    }
    let trailing_newline = data.last() == Some(&b'\n');
    *data = parts.join(&b'\n');
    if trailing_newline {
        data.push(b'\n');
    }
}

/// A balanced `[...]` range starting at `start`, if there is one (strings skipped roughly).
fn bracket_range(data: &[u8], start: usize) -> Option<(usize, usize)> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut i = start;
    while i < data.len() {
        match data[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'[' if !in_string => depth += 1,
            b']' if !in_string => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some((start, i + 1));
                }
            }
            b'\n' => return None,
            _ => {}
        }
        i += 1;
    }
    None
}

fn random_list(data: &[u8], rng: &mut Rng) -> Option<(usize, usize)> {
    let opens: Vec<usize> = (0..data.len()).filter(|&i| data[i] == b'[').collect();
    if opens.is_empty() {
        return None;
    }
    bracket_range(data, *rng.pick(&opens))
}

/// Replaces a line or a JSON list of `data` with one from a donor (or from `data`
/// itself): real steps, keys and records mixed across inputs.
pub fn splice(data: &mut Vec<u8>, rng: &mut Rng, donors: &[Vec<u8>]) {
    let donor: Vec<u8> = if donors.is_empty() || rng.below(4) == 0 {
        data.clone()
    } else {
        rng.pick(donors).clone()
    };
    if rng.below(2) == 0 {
        let (Some(to), Some(from)) = (random_list(data, rng), random_list(&donor, rng)) else {
            return;
        };
        data.splice(to.0..to.1, donor[from.0..from.1].to_vec());
    } else {
        let (to, from) = (line_ranges(data), line_ranges(&donor));
        if to.is_empty() || from.is_empty() {
            return;
        }
        let t = *rng.pick(&to);
        let f = *rng.pick(&from);
        data.splice(t.0..t.1, donor[f.0..f.1].to_vec());
    }
}

/// Mutates a log line: one to four edits.
pub fn mutate_line(data: &mut Vec<u8>, rng: &mut Rng, donors: &[Vec<u8>]) {
    for _ in 0..1 + rng.below(4) {
        edit(data, rng, donors);
    }
}

/// Mutates a bundle (plain or zstd): edits its text, then maybe reseals the hashes or
/// rebuilds the manifest, then maybe (re)compresses it.
pub fn mutate_bundle(data: &mut Vec<u8>, rng: &mut Rng, donors: &[Vec<u8>]) {
    let compressed = ttdb::bundle::format::is_zstd(data);
    if compressed {
        // Damage to the compressed stream itself, a quarter of the time.
        let text = (rng.below(4) != 0)
            .then(|| format::decode(data, &limits()).ok())
            .flatten();
        match text {
            Some(t) => *data = t,
            None => return mutate_line(data, rng, donors),
        }
    }
    mutate_line(data, rng, donors);
    match rng.below(4) {
        0 => {}
        1 => reseal_hashes(data),
        _ => reseal_all(data, rng),
    }
    if (compressed && rng.below(4) != 0) || rng.below(16) == 0 {
        *data = zstd::stream::encode_all(&data[..], 1).expect("compressing in memory");
    }
    data.truncate(MAX_LEN);
}

const RECORD: &str = "# record ";
const MANIFEST: &str = "# manifest ";
const TRAILER: &str = "# bundle-sha256 ";

/// Recomputes the sha256 of every record (in its meta line, when that is a JSON object),
/// the manifest's record count and content hash, and the trailer, leaving all else as is.
fn reseal_hashes(data: &mut Vec<u8>) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Split on `\n` only: `str::lines` would also drop a `\r` the edits put there.
    let body = text.strip_suffix('\n');
    let had_newline = body.is_some();
    let mut lines: Vec<String> = body
        .unwrap_or(text)
        .split('\n')
        .map(str::to_string)
        .collect();
    let mut content = Vec::new();
    let mut count = 0usize;
    for i in 0..lines.len() {
        let Some(json) = lines[i].strip_prefix(RECORD) else {
            continue;
        };
        let Ok(serde_json::Value::Object(mut meta)) = serde_json::from_str(json) else {
            continue;
        };
        let Some(record) = lines.get(i + 1) else {
            continue;
        };
        meta.insert(
            "sha256".into(),
            format::sha256_hex(record.as_bytes()).into(),
        );
        content.extend_from_slice(record.as_bytes());
        content.push(b'\n');
        count += 1;
        lines[i] = format!("{RECORD}{}", serde_json::Value::Object(meta));
    }
    for line in lines.iter_mut() {
        let Some(json) = line.strip_prefix(MANIFEST) else {
            continue;
        };
        if let Ok(serde_json::Value::Object(mut m)) = serde_json::from_str(json) {
            m.insert("records".into(), count.into());
            m.insert("content_sha256".into(), format::sha256_hex(&content).into());
            *line = format!("{MANIFEST}{}", serde_json::Value::Object(m));
        }
    }
    let mut out = String::new();
    for line in &lines {
        if line.starts_with(TRAILER) {
            let hash = format::sha256_hex(out.as_bytes());
            out.push_str(TRAILER);
            out.push_str(&hash);
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    if !had_newline {
        out.pop();
    }
    *data = out.into_bytes();
}

/// Rebuilds the bundle from its `# record` pairs: hashes, canonical order, manifest and
/// trailer all right, so only the record lines (and a kept signature line) can be wrong.
fn reseal_all(data: &mut Vec<u8>, rng: &mut Rng) {
    let text = String::from_utf8_lossy(data).into_owned();
    let lines: Vec<&str> = text
        .strip_suffix('\n')
        .unwrap_or(&text)
        .split('\n')
        .collect();
    let manifest: Option<Manifest> = lines
        .iter()
        .find_map(|l| l.strip_prefix(MANIFEST))
        .and_then(|j| serde_json::from_str(j).ok());
    let mut records = Vec::new();
    let mut i = 0;
    while i + 1 < lines.len() {
        if let Some(json) = lines[i].strip_prefix(RECORD) {
            let mut meta: RecordMeta = serde_json::from_str(json).unwrap_or_else(|_| RecordMeta {
                sha256: String::new(),
                class: "?".into(),
                signature: String::new(),
                provenance: vec![format::Provenance {
                    kind: "imported".into(),
                    source: "fuzz".into(),
                    line: 0,
                    host: String::new(),
                }],
            });
            meta.sha256 = format::sha256_hex(lines[i + 1].as_bytes());
            records.push(BundleRecord {
                meta,
                line: lines[i + 1].to_string(),
            });
            i += 2;
        } else {
            i += 1;
        }
    }
    let (hosts, creation) = match manifest {
        Some(m) => (
            m.hosts,
            Creation {
                created_at: m.created_at,
                creator: m.creator,
                description: m.description,
            },
        ),
        None => (Vec::new(), Creation::default()),
    };
    let mut bundle = Bundle::new(records, &hosts, creation);
    if rng.below(8) == 0 {
        // A valid signature, for `sign::check`'s success path.
        let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        ttdb::bundle::sign::sign(&mut bundle, &key);
    }
    let mut out = bundle.to_text();
    // Keep what followed the trailer (a signature line, or junk), now and then.
    if rng.below(4) == 0 {
        if let Some(t) = lines.iter().position(|l| l.starts_with(TRAILER)) {
            for l in &lines[t + 1..] {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    *data = out.into_bytes();
}
