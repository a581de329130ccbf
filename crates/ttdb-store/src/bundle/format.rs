//! The bundle file, version 1: an Ansor log that carries its own manifest in comment lines.
//!
//! ```text
//! # ttdb-bundle 1
//! # manifest {"format":"ttdb-bundle","format_version":1,...}
//! # record {"sha256":"...","class":"...","signature":"...","provenance":[...]}
//! {"i": [[...]], "r": [...], "v": "v0.6"}           <- the record, verbatim
//! ...                                               (a meta line before every record)
//! # bundle-sha256 <sha256 of every byte above this line>
//! # signature ed25519 <public key> <signature>      (optional, see `sign.rs`)
//! ```
//!
//! TVM's `RecordReader` skips lines that start with `#`, so a bundle is a log TVM loads as
//! it is. There are no blank lines (undefined behaviour in TVM's C++ reader). Records are
//! in canonical order (ascending sha256, no duplicates), so equal record sets give equal
//! files and `merge` is commutative. The whole file may be zstd-compressed.
//!
//! Everything read here is untrusted: sizes are capped before anything is allocated, every
//! record's hash, the manifest's counts and the trailer's hash are checked, and the first
//! mismatch refuses the whole bundle, naming the line and record.
use super::stream::{stream_error, text_stream, Lines};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::Read;
use ttdb_format::signature::hex;

pub const FORMAT: &str = "ttdb-bundle";
pub const FORMAT_VERSION: u32 = 1;
pub const MAGIC: &str = "# ttdb-bundle ";
const MANIFEST: &str = "# manifest ";
const RECORD: &str = "# record ";
const TRAILER: &str = "# bundle-sha256 ";
pub const SIGNATURE: &str = "# signature ";
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// What a bundle says about itself. Rebuilt from the records on every write, and checked
/// against them on every read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    pub ttdb_version: String,
    pub schema_version: u32,
    pub created_at: String,
    pub creator: String,
    pub description: String,
    pub records: usize,
    /// sha256 over the canonical content: every record line and its `\n`, in order.
    pub content_sha256: String,
    /// The machines that measured records (those named by a provenance entry).
    pub hosts: Vec<HostEntry>,
    pub targets: Vec<Count>,
    pub classes: Vec<ClassCount>,
    /// Records per provenance kind (a record may count under several).
    pub kinds: Vec<Count>,
}

/// A measuring machine; `fingerprint` is ttdb's digest of the other fields
/// (`HostFingerprint::digest`), checked on read.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HostEntry {
    pub fingerprint: String,
    pub cpu_model: String,
    pub isa_features: Vec<String>,
    pub llvm_cpu: String,
    pub cores: usize,
    pub ttdb_version: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Count {
    pub name: String,
    pub records: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassCount {
    pub class: String,
    pub workloads: usize,
    pub records: usize,
}

/// Where a record came from: its kind (imported, search, droplet, transfer, verify,
/// default), the file it was first read from (and its line there) or the ttdb run that
/// measured it, and the measuring host's fingerprint ("" for records ttdb did not measure).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Provenance {
    pub kind: String,
    pub source: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub line: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host: String,
}

/// The meta line before a record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordMeta {
    /// sha256 of the record line (its first 16 bytes are the database's record digest).
    pub sha256: String,
    /// The exporter's op class and workload signature (informative: an import recognizes
    /// the key itself).
    pub class: String,
    pub signature: String,
    /// Sorted, without duplicates, never empty.
    pub provenance: Vec<Provenance>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct BundleRecord {
    pub meta: RecordMeta,
    /// The Ansor log line, without its newline.
    pub line: String,
}

/// An ed25519 signature over [`signed_message`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    pub public_key: [u8; 32],
    pub signature: [u8; 64],
}

#[derive(Clone, Debug, PartialEq)]
pub struct Bundle {
    pub manifest: Manifest,
    pub records: Vec<BundleRecord>,
    pub signature: Option<Signature>,
    /// The trailer's hash (over the manifest and every record): what a signature signs.
    pub sha256: String,
}

/// Who made a bundle and why (the manifest fields a writer chooses).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Creation {
    pub created_at: String,
    pub creator: String,
    pub description: String,
}

/// The default cap on a bundle's text, compressed or not: 512 MiB holds about half a million
/// records, the whole public corpus; `--max-bundle-mib` raises it.
pub const DEFAULT_MAX_BYTES: u64 = 512 << 20;

/// [`DEFAULT_MAX_BYTES`] in MiB, the unit `--max-bundle-mib` counts in.
pub const DEFAULT_MAX_MIB: u64 = DEFAULT_MAX_BYTES >> 20;

/// Caps that keep a hostile file from exhausting memory.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Bytes of the file, and of its decompressed text.
    pub max_bytes: u64,
    /// Bytes of one line (record, meta or manifest).
    pub max_line: usize,
    pub max_records: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: DEFAULT_MAX_BYTES,
            max_line: 4 << 20,
            max_records: 20_000_000,
        }
    }
}

impl Limits {
    /// The default limits with the cap on a bundle's text at `mib` MiB.
    pub fn with_max_mib(mib: u64) -> Limits {
        Limits {
            max_bytes: mib.saturating_mul(1 << 20),
            ..Limits::default()
        }
    }
}

/// Why a bundle was refused: the line (1-based, in the decompressed text) and record
/// (1-based) where it went wrong, when there is one.
#[derive(Clone, Debug, PartialEq)]
pub struct FormatError {
    pub line: Option<usize>,
    pub record: Option<usize>,
    pub reason: String,
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.record) {
            (Some(l), Some(r)) => write!(f, "line {l} (record {r}): {}", self.reason),
            (Some(l), None) => write!(f, "line {l}: {}", self.reason),
            _ => f.write_str(&self.reason),
        }
    }
}

impl std::error::Error for FormatError {}

pub(super) fn whole(reason: impl Into<String>) -> FormatError {
    FormatError {
        line: None,
        record: None,
        reason: reason.into(),
    }
}

pub(super) fn at(line: usize, record: Option<usize>, reason: impl Into<String>) -> FormatError {
    FormatError {
        line: Some(line),
        record,
        reason: reason.into(),
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The bytes a signature signs: the format and the bundle's trailer hash, which covers the
/// manifest and every record.
pub fn signed_message(bundle_sha256: &str) -> Vec<u8> {
    format!("{FORMAT} {FORMAT_VERSION} {bundle_sha256}").into_bytes()
}

impl Bundle {
    /// A bundle of `records` (any order, duplicates merged with their provenance joined),
    /// with a manifest built from them. `hosts` must describe every host a provenance
    /// entry names; others are dropped.
    pub fn new(records: Vec<BundleRecord>, hosts: &[HostEntry], creation: Creation) -> Bundle {
        let mut by_sha: BTreeMap<String, BundleRecord> = BTreeMap::new();
        for r in records {
            match by_sha.get_mut(&r.meta.sha256) {
                Some(kept) => kept.meta.provenance.extend(r.meta.provenance),
                None => {
                    by_sha.insert(r.meta.sha256.clone(), r);
                }
            }
        }
        let records: Vec<BundleRecord> = by_sha
            .into_values()
            .map(|mut r| {
                r.meta.provenance.sort();
                r.meta.provenance.dedup();
                r
            })
            .collect();
        let targets: Vec<String> = records.iter().map(|r| target_of(&r.line)).collect();
        let manifest = describe(&records, &targets, hosts, creation);
        let mut b = Bundle {
            manifest,
            records,
            signature: None,
            sha256: String::new(),
        };
        b.sha256 = b.body().1;
        b
    }

    /// The file's text (uncompressed), signature line included when there is one.
    pub fn to_text(&self) -> String {
        let mut s = self.body().0;
        if let Some(sig) = &self.signature {
            s.push_str(&format!(
                "{SIGNATURE}ed25519 {} {}\n",
                hex(&sig.public_key),
                hex(&sig.signature)
            ));
        }
        s
    }

    /// Everything up to and including the trailer, and the trailer's hash.
    fn body(&self) -> (String, String) {
        let mut s = format!("{MAGIC}{FORMAT_VERSION}\n");
        s.push_str(MANIFEST);
        s.push_str(&json(&self.manifest));
        s.push('\n');
        for r in &self.records {
            s.push_str(RECORD);
            s.push_str(&json(&r.meta));
            s.push('\n');
            s.push_str(&r.line);
            s.push('\n');
        }
        let digest = sha256_hex(s.as_bytes());
        s.push_str(TRAILER);
        s.push_str(&digest);
        s.push('\n');
        (s, digest)
    }

    /// The file's bytes, zstd-compressed when `compress`.
    pub fn to_bytes(&self, compress: bool) -> std::io::Result<Vec<u8>> {
        let text = self.to_text();
        if compress {
            // One frame that declares its content size (`text_stream` checks against it).
            zstd::bulk::compress(text.as_bytes(), 9)
        } else {
            Ok(text.into_bytes())
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("manifest types serialize")
}

/// The manifest of `records` (already canonical: sorted, unique, provenance sorted), whose
/// target strings are `targets`.
fn describe(
    records: &[BundleRecord],
    targets_of_records: &[String],
    hosts: &[HostEntry],
    creation: Creation,
) -> Manifest {
    let mut content = Sha256::new();
    let mut targets: BTreeMap<String, usize> = BTreeMap::new();
    let mut classes: BTreeMap<String, (BTreeSet<&str>, usize)> = BTreeMap::new();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut named: BTreeSet<&str> = BTreeSet::new();
    for (r, t) in records.iter().zip(targets_of_records) {
        content.update(r.line.as_bytes());
        content.update(b"\n");
        *targets.entry(t.clone()).or_default() += 1;
        let c = classes.entry(r.meta.class.clone()).or_default();
        c.0.insert(&r.meta.signature);
        c.1 += 1;
        let mut seen = BTreeSet::new();
        for p in &r.meta.provenance {
            if seen.insert(&p.kind) {
                *kinds.entry(p.kind.clone()).or_default() += 1;
            }
            if !p.host.is_empty() {
                named.insert(&p.host);
            }
        }
    }
    let mut hosts: Vec<HostEntry> = hosts
        .iter()
        .filter(|h| named.contains(h.fingerprint.as_str()))
        .cloned()
        .collect();
    hosts.sort();
    hosts.dedup_by(|a, b| a.fingerprint == b.fingerprint);
    let counts = |m: BTreeMap<String, usize>| {
        m.into_iter()
            .map(|(name, records)| Count { name, records })
            .collect()
    };
    Manifest {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
        ttdb_version: ttdb_format::version().into(),
        schema_version: crate::store::SCHEMA_VERSION,
        created_at: creation.created_at,
        creator: creation.creator,
        description: creation.description,
        records: records.len(),
        content_sha256: hex(&content.finalize()),
        hosts,
        targets: counts(targets),
        classes: classes
            .into_iter()
            .map(|(class, (w, n))| ClassCount {
                class,
                workloads: w.len(),
                records: n,
            })
            .collect(),
        kinds: counts(kinds),
    }
}

/// The record's target string ("?" if the line does not parse; `read` refuses those).
fn target_of(line: &str) -> String {
    ttdb_format::ansor::Record::parse(line)
        .map(|r| r.task.target)
        .unwrap_or_else(|_| "?".into())
}

/// Whether a bundle file's bytes are zstd-compressed (its frame magic).
pub fn is_zstd(bytes: &[u8]) -> bool {
    bytes.starts_with(&ZSTD_MAGIC)
}

/// The text of a bundle file, decompressed if it is zstd, within `limits` (for tests and
/// tools; reading a bundle streams instead, see [`read_from`]).
pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Vec<u8>, FormatError> {
    if bytes.len() as u64 > limits.max_bytes {
        return Err(whole(format!(
            "the file is {} bytes, over the limit of {}",
            bytes.len(),
            limits.max_bytes
        )));
    }
    let mut out = Vec::new();
    text_stream(bytes, limits)?
        .read_to_end(&mut out)
        .map_err(stream_error)?;
    Ok(out)
}

/// Reads and checks a bundle file (compressed or not). The signature, if any, is parsed
/// but not checked here (see `sign::check`).
pub fn read(bytes: &[u8], limits: &Limits) -> Result<Bundle, FormatError> {
    if bytes.len() as u64 > limits.max_bytes {
        return Err(whole(format!(
            "the file is {} bytes, over the limit of {}",
            bytes.len(),
            limits.max_bytes
        )));
    }
    read_from(bytes, limits)
}

/// [`read`] from a stream: the text is decompressed and checked a line at a time, so memory
/// holds the records read so far and one line, never the whole text.
pub fn read_from(file: impl std::io::BufRead, limits: &Limits) -> Result<Bundle, FormatError> {
    parse(text_stream(file, limits)?, limits)
}

fn parse(text: impl std::io::BufRead, limits: &Limits) -> Result<Bundle, FormatError> {
    let mut lines = Lines::new(text);
    let mut next = |what: &str| -> Result<(usize, String), FormatError> {
        lines.next(limits).unwrap_or_else(|| {
            Err(whole(format!(
                "the file ends before {what}: it is truncated"
            )))
        })
    };
    let (_, first) = next("the format line")?;
    let Some(version) = first.strip_prefix(MAGIC) else {
        return Err(at(
            1,
            None,
            "not a ttdb bundle (it must start with `# ttdb-bundle 1`)",
        ));
    };
    match version.parse::<u32>() {
        Ok(FORMAT_VERSION) => {}
        Ok(v) if v > FORMAT_VERSION => {
            return Err(at(
                1,
                None,
                format!(
                "bundle format {v} is newer than this ttdb reads ({FORMAT_VERSION}); upgrade ttdb"
            ),
            ))
        }
        _ => return Err(at(1, None, format!("unknown bundle format `{version}`"))),
    }
    let (n, line) = next("the manifest")?;
    let manifest: Manifest = line
        .strip_prefix(MANIFEST)
        .ok_or_else(|| at(n, None, "expected the `# manifest` line"))
        .and_then(|j| serde_json::from_str(j).map_err(|e| at(n, None, format!("manifest: {e}"))))?;
    let mut records: Vec<BundleRecord> = Vec::new();
    let mut targets: Vec<String> = Vec::new();
    let trailer_hash = loop {
        let (n, line) = next("the `# bundle-sha256` line")?;
        if let Some(h) = line.strip_prefix(TRAILER) {
            let actual = lines.hash_before();
            if h != actual {
                return Err(at(
                    n,
                    None,
                    "the bundle's sha256 does not match its content: the manifest or a meta line was altered, or a line was added or removed",
                ));
            }
            break actual;
        }
        let i = records.len() + 1;
        if i > limits.max_records {
            return Err(at(
                n,
                Some(i),
                format!("more than {} records", limits.max_records),
            ));
        }
        let meta: RecordMeta = line
            .strip_prefix(RECORD)
            .ok_or_else(|| at(n, Some(i), "expected a `# record` meta line"))
            .and_then(|j| {
                serde_json::from_str(j).map_err(|e| at(n, Some(i), format!("record meta: {e}")))
            })?;
        let (n, line) = next("the record after its meta line")?;
        if sha256_hex(line.as_bytes()) != meta.sha256 {
            return Err(at(
                n,
                Some(i),
                format!(
                    "the record's sha256 is not {}: the record was altered",
                    meta.sha256
                ),
            ));
        }
        match ttdb_format::ansor::Record::parse(&line) {
            Ok(r) => targets.push(r.task.target),
            Err(e) => return Err(at(n, Some(i), format!("not an Ansor record: {e}"))),
        }
        check_meta(&meta, records.last().map(|r| &r.meta)).map_err(|e| at(n, Some(i), e))?;
        records.push(BundleRecord { meta, line });
    };
    let signature = match lines.next(limits) {
        None => None,
        Some(line) => {
            let (n, line) = line?;
            let sig = line
                .strip_prefix(SIGNATURE)
                .ok_or_else(|| at(n, None, "content after the bundle's end"))
                .and_then(|s| parse_signature(s).map_err(|e| at(n, None, e)))?;
            if let Some(more) = lines.next(limits) {
                let (n, _) = more?;
                return Err(at(n, None, "content after the signature"));
            }
            Some(sig)
        }
    };
    let rebuilt = describe(
        &records,
        &targets,
        &manifest.hosts,
        Creation {
            created_at: manifest.created_at.clone(),
            creator: manifest.creator.clone(),
            description: manifest.description.clone(),
        },
    );
    check_manifest(&manifest, &rebuilt)?;
    Ok(Bundle {
        manifest,
        records,
        signature,
        sha256: trailer_hash,
    })
}

/// A meta line's own rules, and canonical order against the previous record's.
fn check_meta(meta: &RecordMeta, previous: Option<&RecordMeta>) -> Result<(), String> {
    if meta.provenance.is_empty() {
        return Err("the record has no provenance".into());
    }
    if meta.provenance.windows(2).any(|w| w[0] >= w[1]) {
        return Err("the record's provenance is not sorted and unique".into());
    }
    if let Some(p) = previous {
        if p.sha256 >= meta.sha256 {
            return Err(if p.sha256 == meta.sha256 {
                "the record appears twice".into()
            } else {
                "records are out of canonical (sha256) order".into()
            });
        }
    }
    Ok(())
}

/// The manifest must be the one its records give (only its free-text fields and versions
/// are the writer's to choose).
fn check_manifest(found: &Manifest, rebuilt: &Manifest) -> Result<(), FormatError> {
    if found.format != FORMAT || found.format_version != FORMAT_VERSION {
        return Err(whole("manifest: wrong format name or version"));
    }
    let field = |name: &str, ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(whole(format!(
                "manifest: `{name}` does not match the records (altered or inconsistent)"
            )))
        }
    };
    field("records", found.records == rebuilt.records)?;
    field(
        "content_sha256",
        found.content_sha256 == rebuilt.content_sha256,
    )?;
    field("hosts", found.hosts == rebuilt.hosts)?;
    field("targets", found.targets == rebuilt.targets)?;
    field("classes", found.classes == rebuilt.classes)?;
    field("kinds", found.kinds == rebuilt.kinds)?;
    for h in &found.hosts {
        let fp = ttdb_format::host::HostFingerprint {
            cpu_model: h.cpu_model.clone(),
            isa_flags: h.isa_features.clone(),
            llvm_cpu: h.llvm_cpu.clone(),
            llvm_features: String::new(),
            cores: h.cores,
            ttdb_version: h.ttdb_version.clone(),
        };
        if fp.digest() != h.fingerprint {
            return Err(whole(format!(
                "manifest: host {} has a fingerprint that is not the digest of its fields",
                h.fingerprint
            )));
        }
    }
    Ok(())
}

fn parse_signature(s: &str) -> Result<Signature, String> {
    let mut words = s.split(' ');
    let (Some("ed25519"), Some(pk), Some(sig), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err("expected `# signature ed25519 <public key> <signature>`".into());
    };
    Ok(Signature {
        public_key: unhex(pk).ok_or("the signature's public key is not 64 hex digits")?,
        signature: unhex(sig).ok_or("the signature is not 128 hex digits")?,
    })
}

/// `N` bytes from exactly `2N` lowercase hex digits (one spelling per value, so an altered
/// digit is always a different value).
pub fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}
