//! What `ttdb import PATH...` reads: Ansor logs and bundles, found in the files and
//! directories it is given.
//!
//! A directory is walked (sorted, hidden entries skipped) and only files that look like logs
//! or bundles are taken: by extension first, then by a sniff of their first bytes (a
//! bundle's header or zstd frame, else a first record line). Everything else is skipped
//! with its reason: models, READMEs, binaries, dangling links, symlink loops. A file named
//! on the command line is sniffed too, but one that fails is an error of that file, not a
//! silent skip. Bundles are recognized by their header, never by their name, so a bundle
//! cannot reach the database around its checks by being imported as a log.
use crate::bundle::format;
use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

/// How an input is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// An Ansor log: line by line, bad lines rejected and kept.
    Log,
    /// A ttdb bundle (maybe zstd-compressed): checked whole, then imported.
    Bundle,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    pub path: PathBuf,
    pub kind: InputKind,
}

/// A path not read, and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    pub path: PathBuf,
    pub reason: String,
}

/// What a walk found.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// The files to read, in walk order.
    pub files: Vec<Input>,
    /// Directory entries that are not logs or bundles (not an error).
    pub skipped: Vec<Skipped>,
    /// Paths named on the command line that cannot be read as a log or bundle.
    pub errors: Vec<Skipped>,
}

/// Extensions a log or bundle may have inside a directory (besides none at all).
const EXTENSIONS: [&str; 6] = ["json", "log", "jsonl", "txt", "ttdb", "zst"];

/// Bytes read to sniff a file.
const SNIFF: usize = 64 << 10;

/// Walks `paths` into the files to import.
pub fn collect(paths: &[PathBuf]) -> Inputs {
    let mut out = Inputs::default();
    let mut seen = HashSet::new();
    for p in paths {
        match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => walk(p, &mut seen, &mut out),
            Ok(_) => match sniff(p) {
                Ok(kind) => out.files.push(Input {
                    path: p.clone(),
                    kind,
                }),
                Err(reason) => out.errors.push(Skipped {
                    path: p.clone(),
                    reason,
                }),
            },
            Err(e) => out.errors.push(Skipped {
                path: p.clone(),
                reason: link_error(p, &e),
            }),
        }
    }
    out
}

fn walk(dir: &Path, seen: &mut HashSet<(u64, u64)>, out: &mut Inputs) {
    use std::os::unix::fs::MetadataExt;
    let skip = |out: &mut Inputs, path: &Path, reason: String| {
        out.skipped.push(Skipped {
            path: path.to_path_buf(),
            reason,
        })
    };
    match std::fs::metadata(dir) {
        Ok(m) if !seen.insert((m.dev(), m.ino())) => {
            return skip(
                out,
                dir,
                "a directory already walked (a symlink loop)".into(),
            )
        }
        Ok(_) => {}
        Err(e) => return skip(out, dir, link_error(dir, &e)),
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return skip(out, dir, format!("cannot list: {e}")),
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        {
            continue; // hidden: .git, editor files
        }
        let meta = match std::fs::metadata(&p) {
            Ok(m) => m,
            Err(e) => {
                skip(out, &p, link_error(&p, &e));
                continue;
            }
        };
        if meta.is_dir() {
            walk(&p, seen, out);
            continue;
        }
        if !meta.is_file() {
            skip(out, &p, "not a regular file".into());
            continue;
        }
        if let Some(ext) = p.extension().map(|e| e.to_string_lossy().to_lowercase()) {
            if !EXTENSIONS.contains(&ext.as_str()) {
                skip(
                    out,
                    &p,
                    format!(
                        "extension .{ext} is not a log's or bundle's (.{})",
                        EXTENSIONS.join(", .")
                    ),
                );
                continue;
            }
        }
        match sniff(&p) {
            Ok(kind) => out.files.push(Input { path: p, kind }),
            Err(reason) => skip(out, &p, reason),
        }
    }
}

/// How `import` reads the bundles it meets.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Refuse unsigned bundles and bundles signed by keys not trusted here.
    pub require_signed: bool,
    pub limits: format::Limits,
}

/// What importing one input did.
#[derive(Debug)]
pub enum Imported {
    Log(crate::store::FileReport),
    Bundle {
        import: crate::bundle::BundleImport,
        signer: crate::bundle::sign::SignerView,
    },
}

impl Imported {
    /// The records part of the outcome (a bundle's records import like a log's lines).
    pub fn file_report(&self) -> &crate::store::FileReport {
        match self {
            Imported::Log(r) => r,
            Imported::Bundle { import, .. } => &import.file,
        }
    }
}

/// Imports one input in its own transaction: a log line by line (bad lines kept as
/// rejected), a bundle whole once every check and the signature policy passed (else
/// nothing). `progress(bytes)` follows the input. `Err` says why, naming the file.
pub fn import_input(
    store: &mut crate::store::Store,
    input: &Input,
    opts: &ImportOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Imported, String> {
    let named = |e: String| format!("{}: {e}", input.path.display());
    match input.kind {
        InputKind::Log => crate::store::import_file(store, &input.path, progress)
            .map(Imported::Log)
            .map_err(|e| e.to_string()),
        InputKind::Bundle => {
            let (bundle, _) = crate::bundle::read_file(&input.path, &opts.limits)?;
            let signer = crate::bundle::sign::signer_of(&bundle, Some(store))
                .map_err(|e| named(e.to_string()))?;
            crate::bundle::sign::check_policy(&signer, opts.require_signed)
                .map_err(|why| named(format!("{why}; nothing was imported")))?;
            let import = crate::bundle::import_with_progress(store, &input.path, &bundle, progress)
                .map_err(|e| named(e.to_string()))?;
            Ok(Imported::Bundle { import, signer })
        }
    }
}

/// Why a path cannot be followed: a dangling link, a link loop, or the plain error.
fn link_error(p: &Path, e: &std::io::Error) -> String {
    let is_link = std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink());
    if e.raw_os_error() == Some(40) {
        // ELOOP
        "a symlink loop".into()
    } else if is_link && e.kind() == std::io::ErrorKind::NotFound {
        format!(
            "a dangling symlink (to {})",
            std::fs::read_link(p).map_or("?".into(), |t| t.display().to_string())
        )
    } else {
        e.to_string()
    }
}

/// Reads the first bytes of `path` and says what it is, or why it is neither a log nor a
/// bundle.
pub fn sniff(path: &Path) -> Result<InputKind, String> {
    let mut head = Vec::with_capacity(SNIFF);
    std::fs::File::open(path)
        .and_then(|f| f.take(SNIFF as u64).read_to_end(&mut head))
        .map_err(|e| format!("cannot read: {e}"))?;
    sniff_bytes(&head)
}

/// [`sniff`] on the first bytes of a file.
pub fn sniff_bytes(head: &[u8]) -> Result<InputKind, String> {
    if format::is_zstd(head) || head.starts_with(format::MAGIC.as_bytes()) {
        return Ok(InputKind::Bundle);
    }
    if let Some(at) = head.iter().position(|&b| b == 0) {
        return Err(format!(
            "binary content (a NUL byte at offset {at}): not an Ansor log"
        ));
    }
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        // A character cut by the sniff window is fine; anything else is not text.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or("")
        }
        Err(e) => {
            return Err(format!(
                "not UTF-8 text (an invalid byte at offset {}): not an Ansor log",
                e.valid_up_to()
            ))
        }
    };
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'));
    let Some(first) = first else {
        return Ok(InputKind::Log); // empty, or comments only: a log with no records
    };
    let looks_like_record = first.strip_prefix('{').is_some_and(|rest| {
        let rest = rest.trim_start();
        ["\"i\"", "\"r\"", "\"v\""]
            .iter()
            .any(|k| rest.starts_with(k))
    });
    if looks_like_record {
        Ok(InputKind::Log)
    } else {
        let shown: String = first.chars().take(40).collect();
        Err(format!(
            "not an Ansor log: its first line is `{}{}`, not a record (`{{\"i\": ...}}`)",
            shown.escape_debug(),
            if first.chars().count() > 40 {
                "..."
            } else {
                ""
            }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_logs_bundles_and_the_rest() {
        let log =
            br#"{"i": [["[\"k\"]", "llvm", [], "", 2, []], [[], []]], "r": [[1e-3], 0, 0.1, 1]}"#;
        assert_eq!(sniff_bytes(log), Ok(InputKind::Log));
        assert_eq!(
            sniff_bytes(b"# a comment\n\n{ \"r\": []}\n"),
            Ok(InputKind::Log)
        );
        assert_eq!(sniff_bytes(b""), Ok(InputKind::Log));
        assert_eq!(
            sniff_bytes(b"# ttdb-bundle 1\n# manifest {}\n"),
            Ok(InputKind::Bundle)
        );
        assert_eq!(
            sniff_bytes(&[0x28, 0xb5, 0x2f, 0xfd, 0, 0]),
            Ok(InputKind::Bundle)
        );
        let why = sniff_bytes(b"\x08\x07\x12\x00onnx").unwrap_err();
        assert!(why.contains("NUL byte at offset 3"), "{why}");
        let why = sniff_bytes(b"# Title\n\nSome prose.\n").unwrap_err();
        assert!(why.contains("`Some prose.`"), "{why}");
        let why = sniff_bytes(b"\xff\xfe text").unwrap_err();
        assert!(why.contains("not UTF-8"), "{why}");
        // A multi-byte character cut at the window's end is still text.
        let mut cut = b"{\"i\": \"\xc3\xa9".to_vec();
        cut.pop();
        assert_eq!(sniff_bytes(&cut), Ok(InputKind::Log));
    }
}
