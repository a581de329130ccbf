//! `ttdb bundle export | inspect | import | sign | merge`: schedule bundles (`ttdb_store::bundle`).
use super::table::Table;
use super::{CliError, CliResult};
use serde::Serialize;
use std::path::{Path, PathBuf};
use ttdb_store::bundle::format::{self, Bundle, Limits};
use ttdb_store::bundle::sign;
use ttdb_store::bundle::{self, BundleImport, Selection, Verdict, WorkloadPlan};
use ttdb_store::store::Store;
use ttdb_tuning::tune::verify::{flag_slow_records, VerifyFlag, MUCH_SLOWER};

#[derive(clap::Subcommand, Debug)]
pub enum BundleCommand {
    /// Write records of the database as a bundle (an Ansor log TVM reads, with a manifest,
    /// per-record sha256 and provenance in `#` lines).
    Export(ExportArgs),
    /// Show a bundle's manifest, integrity, signer, and what an import would do per workload.
    /// Writes nothing.
    Inspect {
        /// The bundle file (compressed or not).
        file: PathBuf,
        /// The largest bundle text read, in MiB (a cap against decompression bombs).
        #[arg(long, default_value_t = format::DEFAULT_MAX_MIB)]
        max_bundle_mib: u64,
        /// Print the result as JSON on standard output.
        #[arg(long)]
        json: bool,
    },
    /// Import bundles: each is checked whole first (any mismatch refuses it and leaves the
    /// database untouched), then imported in one transaction.
    Import(ImportArgs),
    /// Sign a bundle with an ed25519 secret key (`ttdb key generate`).
    Sign {
        /// The bundle to sign (compressed or not).
        file: PathBuf,
        /// The secret key file.
        #[arg(long)]
        key: PathBuf,
        /// Write the signed bundle here (default: replace FILE).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Print the result as JSON on standard output.
        #[arg(long)]
        json: bool,
    },
    /// The union of two bundles, deduplicated by record sha256, provenance kept (unsigned).
    Merge {
        /// The first bundle.
        a: PathBuf,
        /// The second bundle (the order does not matter: merging is commutative).
        b: PathBuf,
        /// The merged bundle to write.
        #[arg(short, long)]
        output: PathBuf,
        /// zstd-compress the result.
        #[arg(long)]
        compress: bool,
        /// Print the result as JSON on standard output.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// The bundle file to write (written whole or not at all).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Only the kernels of this ONNX model (their TVM workload keys: under TopHub's blocking
    /// and under every layout plan pinned for the model).
    #[arg(long, conflicts_with_all = ["class", "workload", "all"])]
    pub model: Option<PathBuf>,
    /// Only this op class (or class prefix chain).
    #[arg(long, conflicts_with_all = ["workload", "all"])]
    pub class: Option<String>,
    /// Only workloads whose signature starts with this hex prefix.
    #[arg(long, conflicts_with = "all")]
    pub workload: Option<String>,
    /// Every workload; the default when no --model, --class or --workload is given.
    #[arg(long)]
    pub all: bool,
    /// Only the best valid record per workload and target; the default unless
    /// --all-records is given.
    #[arg(long, conflicts_with = "all_records")]
    pub best: bool,
    /// Every record of the selected workloads, failed measurements included.
    #[arg(long)]
    pub all_records: bool,
    /// Sign with this secret key file.
    #[arg(long)]
    pub sign: Option<PathBuf>,
    /// zstd-compress the bundle.
    #[arg(long)]
    pub compress: bool,
    /// Free text stored in the manifest (what the bundle is for).
    #[arg(long)]
    pub description: Option<String>,
    /// Default: $USER.
    #[arg(long)]
    pub creator: Option<String>,
    /// Print the result as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// Bundle files (compressed or not).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The largest bundle text read, in MiB (a cap against decompression bombs).
    #[arg(long, default_value_t = format::DEFAULT_MAX_MIB)]
    pub max_bundle_mib: u64,
    /// Refuse bundles that are unsigned or signed by a key not in `ttdb trust list`.
    #[arg(long)]
    pub require_signed: bool,
    /// Re-measure the bundle's best record of each workload here and flag those much
    /// slower than their logged cost suggests.
    #[arg(long)]
    pub verify: bool,
    /// Print the result as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

fn fail(message: String) -> CliError {
    CliError { message, code: 1 }
}

/// Reads and checks a bundle file within the default limits; errors name the file, line
/// and record.
pub fn read_bundle(path: &Path) -> Result<Bundle, CliError> {
    read_bundle_within(path, &Limits::default())
}

/// [`read_bundle`] within `limits`.
pub fn read_bundle_within(path: &Path, limits: &Limits) -> Result<Bundle, CliError> {
    read_bundle_file(path, limits).map(|(b, _)| b)
}

/// [`read_bundle`], and whether the file was zstd-compressed.
fn read_bundle_file(path: &Path, limits: &Limits) -> Result<(Bundle, bool), CliError> {
    bundle::read_file(path, limits).map_err(fail)
}

pub fn run(db: &Option<PathBuf>, cmd: &BundleCommand) -> CliResult {
    match cmd {
        BundleCommand::Export(args) => export(
            &super::open_store(db, ttdb_store::store::OpenMode::ReadOnly)?,
            args,
        ),
        BundleCommand::Inspect {
            file,
            max_bundle_mib,
            json,
        } => inspect(db, file, &Limits::with_max_mib(*max_bundle_mib), *json),
        BundleCommand::Import(args) => import(db, args),
        BundleCommand::Sign {
            file,
            key,
            output,
            json,
        } => {
            // Signed as it came: a compressed bundle stays compressed.
            let (mut b, compressed) = read_bundle_file(file, &Limits::default())?;
            let key = sign::read_secret_key(key).map_err(fail)?;
            sign::sign(&mut b, &key);
            let out = output.as_ref().unwrap_or(file);
            let bytes = bundle::write_file(out, &b, compressed).map_err(fail)?;
            report_written(
                &WrittenBundle {
                    path: out,
                    records: b.records.len(),
                    bytes,
                    compressed,
                    signed_by: Some(sign::public_hex(&key)),
                    bundle_sha256: &b.sha256,
                },
                "signed",
                *json,
            )
        }
        BundleCommand::Merge {
            a,
            b,
            output,
            compress,
            json,
        } => {
            let merged = bundle::merge(&read_bundle(a)?, &read_bundle(b)?);
            let bytes = bundle::write_file(output, &merged, *compress).map_err(fail)?;
            report_written(
                &WrittenBundle {
                    path: output,
                    records: merged.records.len(),
                    bytes,
                    compressed: *compress,
                    signed_by: None,
                    bundle_sha256: &merged.sha256,
                },
                "wrote",
                *json,
            )
        }
    }
}

/// A bundle file just written (export, sign, merge), as `--json` prints it.
#[derive(Serialize)]
struct WrittenBundle<'a> {
    path: &'a Path,
    records: usize,
    bytes: usize,
    compressed: bool,
    signed_by: Option<String>,
    bundle_sha256: &'a str,
}

fn export(store: &Store, args: &ExportArgs) -> CliResult {
    let selection = if let Some(m) = &args.model {
        Selection::Keys(super::kernels::model_stored_keys(store, m)?)
    } else if let Some(c) = &args.class {
        Selection::Class(c.clone())
    } else if let Some(w) = &args.workload {
        Selection::Signature(w.clone())
    } else {
        Selection::All
    };
    // The creator defaults to the user's login name (the library reads no environment).
    let creator = args.creator.clone().or_else(|| std::env::var("USER").ok());
    let creation = bundle::creation_now(creator, args.description.clone());
    let mut b = bundle::export(store, &selection, !args.all_records, creation)?;
    let mut signed_by = None;
    if let Some(k) = &args.sign {
        let key = sign::read_secret_key(k).map_err(fail)?;
        sign::sign(&mut b, &key);
        signed_by = Some(sign::public_hex(&key));
    }
    let bytes = bundle::write_file(&args.output, &b, args.compress).map_err(fail)?;
    report_written(
        &WrittenBundle {
            path: &args.output,
            records: b.records.len(),
            bytes,
            compressed: args.compress,
            signed_by,
            bundle_sha256: &b.sha256,
        },
        "wrote",
        args.json,
    )
}

/// `ttdb: <verb> N records to F (bytes, zstd, signed by K)` on stderr, or the JSON on stdout.
fn report_written(s: &WrittenBundle, verb: &str, json: bool) -> CliResult {
    if json {
        println!("{}", serde_json::to_string_pretty(s)?);
    } else {
        eprintln!(
            "{verb} {} records to {} ({} bytes{}{})",
            s.records,
            s.path.display(),
            s.bytes,
            if s.compressed { ", zstd" } else { "" },
            s.signed_by
                .as_ref()
                .map_or(String::new(), |k| format!(", signed by {k}"))
        );
    }
    Ok(())
}

/// The signer as the trust list knows it.
pub use ttdb_store::bundle::sign::SignerView;

fn signer_view(b: &Bundle, store: Option<&Store>) -> Result<SignerView, CliError> {
    Ok(sign::signer_of(b, store)?)
}

#[derive(Serialize)]
struct InspectView<'a> {
    file: &'a Path,
    integrity: &'static str,
    bundle_sha256: &'a str,
    signature: SignerView,
    manifest: &'a format::Manifest,
    workloads: &'a [WorkloadPlan],
}

/// The human view of `bundle inspect` (snapshot-tested).
pub fn render_inspect(b: &Bundle, signer: &SignerView, plans: &[WorkloadPlan]) -> String {
    let m = &b.manifest;
    let mut out = format!(
        "bundle format {} (ttdb {}, schema {}), created {} by {}\n",
        m.format_version,
        m.ttdb_version,
        m.schema_version,
        m.created_at,
        if m.creator.is_empty() {
            "?"
        } else {
            &m.creator
        }
    );
    if !m.description.is_empty() {
        out.push_str(&format!("description: {}\n", m.description));
    }
    out.push_str(&format!(
        "integrity: ok ({} records, every sha256 checked; bundle sha256 {})\n",
        m.records, b.sha256
    ));
    out.push_str(
        &match (signer.status, &signer.public_key, &signer.trusted_as) {
            ("unsigned", _, _) => "signature: none\n".to_string(),
            (s, Some(k), Some(name)) => format!("signature: {s}, key {k} (trusted as `{name}`)\n"),
            (s, Some(k), None) => format!("signature: {s}, key {k} (not trusted here)\n"),
            (s, None, _) => format!("signature: {s}\n"),
        },
    );
    out.push_str("targets:\n");
    for t in &m.targets {
        out.push_str(&format!("  {:>6}  {}\n", t.records, t.name));
    }
    out.push_str("classes:\n");
    for c in &m.classes {
        out.push_str(&format!(
            "  {:>6} records, {:>4} workloads  {}\n",
            c.records, c.workloads, c.class
        ));
    }
    out.push_str("provenance:\n");
    for k in &m.kinds {
        out.push_str(&format!("  {:>6}  {}\n", k.records, k.name));
    }
    if !m.hosts.is_empty() {
        out.push_str("measured on:\n");
        for h in &m.hosts {
            out.push_str(&format!(
                "  {}  {} ({}, {} cores; {})\n",
                &h.fingerprint[..h.fingerprint.len().min(12)],
                h.cpu_model,
                h.llvm_cpu,
                h.cores,
                h.isa_features.join(" ")
            ));
        }
    }
    let count = |v: Verdict| plans.iter().filter(|p| p.verdict == v).count();
    out.push_str(&format!(
        "import would: {} new workloads, {} better than ours, {} not better, {} duplicate\n",
        count(Verdict::New),
        count(Verdict::Better),
        count(Verdict::NotBetter),
        count(Verdict::Duplicate)
    ));
    let mut t = Table::new(&[
        "workload",
        "class",
        ">records",
        ">new",
        ">theirs ms",
        ">ours ms",
        "import",
    ]);
    let ms = |s: Option<f64>| s.map_or("-".into(), |s| format!("{:.3}", s * 1e3));
    for p in plans {
        t.row(vec![
            short_key(&p.signature, &p.key),
            p.class.clone(),
            p.records.to_string(),
            p.new_records.to_string(),
            ms(p.theirs_s),
            ms(p.ours_s),
            match p.verdict {
                Verdict::New => "new",
                Verdict::Duplicate => "duplicate",
                Verdict::Better => "better",
                Verdict::NotBetter => "not better",
            }
            .into(),
        ]);
    }
    out.push_str(&t.render());
    out
}

/// A workload as its signature prefix (what `export --workload` takes) and output shape
/// (`1f1aea4f3b33 -> 1x16x56x56x4`), or the key's first 40 characters when it has no
/// output shape.
fn short_key(signature: &str, key: &str) -> String {
    let sig = &signature[..signature.len().min(12)];
    if let Ok(serde_json::Value::Array(items)) = serde_json::from_str(key) {
        if let Some(serde_json::Value::Array(out)) = items.last() {
            let dims: Vec<String> = out.iter().map(|d| d.to_string()).collect();
            return format!("{sig} -> {}", dims.join("x"));
        }
    }
    format!("{sig} {}", key.chars().take(40).collect::<String>())
}

fn inspect(db: &Option<PathBuf>, file: &Path, limits: &Limits, json: bool) -> CliResult {
    let b = read_bundle_within(file, limits)?;
    // Inspecting needs no database: without one, every workload is new.
    let store = match super::open_store_if_any(db, ttdb_store::store::OpenMode::ReadOnly)? {
        Some(s) => s,
        None => Store::open_in_memory()?,
    };
    let signer = signer_view(&b, Some(&store))?;
    let plans = bundle::plan(&store, &b)?;
    if json {
        let v = InspectView {
            file,
            integrity: "ok",
            bundle_sha256: &b.sha256,
            signature: signer,
            manifest: &b.manifest,
            workloads: &plans,
        };
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", render_inspect(&b, &signer, &plans));
    }
    Ok(())
}

#[derive(Serialize)]
pub(super) struct ImportView {
    pub file: PathBuf,
    pub signature: SignerView,
    #[serde(flatten)]
    pub report: BundleImport,
    /// With --verify: records measured here much slower than their logged cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<Vec<VerifyFlag>>,
}

fn import(db: &Option<PathBuf>, args: &ImportArgs) -> CliResult {
    // Every bundle is read and checked before the database is opened for writing.
    let bundles: Vec<(PathBuf, Bundle)> = args
        .files
        .iter()
        .map(|f| {
            read_bundle_within(f, &Limits::with_max_mib(args.max_bundle_mib))
                .map(|b| (f.clone(), b))
        })
        .collect::<Result<_, _>>()?;
    let mut store = super::open_store(db, ttdb_store::store::OpenMode::Create)?;
    let mut views = Vec::new();
    for (path, b) in &bundles {
        views.push(import_checked(
            &mut store,
            path,
            b,
            args.require_signed,
            args.verify,
        )?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&views)?);
    } else {
        for v in &views {
            print!("{}", render_bundle_import(v));
        }
    }
    Ok(())
}

/// Imports one bundle that [`read_bundle`] checked, under the signature policy (also what
/// `ttdb import` does with a bundle it finds).
pub(super) fn import_checked(
    store: &mut Store,
    path: &Path,
    b: &Bundle,
    require_signed: bool,
    verify: bool,
) -> Result<ImportView, CliError> {
    let signer = signer_view(b, Some(store))?;
    check_signature(path, &signer, require_signed)?;
    let bar = super::progress_bar(
        bundle::record_bytes(b),
        "{spinner} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} {msg}",
    );
    if let Some(bar) = &bar {
        bar.set_message(format!("{} records", b.records.len()));
    }
    let report = bundle::import_with_progress(store, path, b, &|done| {
        if let Some(bar) = &bar {
            bar.set_position(done);
        }
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let report = report?;
    let verify = if verify {
        Some(verify_imported(store, b)?)
    } else {
        None
    };
    Ok(ImportView {
        file: path.to_path_buf(),
        signature: signer,
        report,
        verify,
    })
}

/// Refuses an invalid signature always, and under `--require-signed` an unsigned bundle or
/// one signed by a key that is not trusted here (`sign::check_policy`).
fn check_signature(path: &Path, s: &SignerView, require_signed: bool) -> CliResult {
    sign::check_policy(s, require_signed)
        .map_err(|why| fail(format!("{}: {why}; nothing was imported", path.display())))
}

pub(super) fn render_bundle_import(v: &ImportView) -> String {
    let r = &v.report.file;
    let mut out = format!(
        "{}: {} records, {} inserted, {} duplicates{}; {} workloads ({} new); {} provenance entries and {} hosts new; signature: {}{}\n",
        v.file.display(),
        r.records,
        r.inserted,
        r.duplicates,
        if r.already_imported {
            " (this bundle's records were imported before)"
        } else {
            ""
        },
        r.workload_ids.len(),
        r.new_workloads,
        v.report.new_origins,
        v.report.new_hosts,
        v.signature.status,
        v.signature
            .trusted_as
            .as_ref()
            .map_or(String::new(), |n| format!(" (`{n}`)"))
    );
    for rej in &r.rejected {
        out.push_str(&format!(
            "  rejected record line {}: {}\n",
            rej.line, rej.reason
        ));
    }
    if let Some(flags) = &v.verify {
        let bad = flags.iter().filter(|f| f.flagged).count();
        out.push_str(&format!(
            "verify: {} records re-measured here, {bad} flagged (>{MUCH_SLOWER}x their logged cost, or failed)\n",
            flags.len()
        ));
        for f in flags.iter().filter(|f| f.flagged) {
            out.push_str(&format!(
                "  record {} ({}): logged {:.3} ms, here {}{}\n",
                f.record_id,
                f.class,
                f.logged_ms,
                f.here_ms.map_or("-".into(), |m| format!("{m:.3} ms")),
                f.error
                    .as_ref()
                    .map_or(String::new(), |e| format!(" ({e})"))
            ));
        }
    }
    out
}

/// Re-measures the bundle's best valid record of each workload key on this host.
fn verify_imported(store: &mut Store, b: &Bundle) -> Result<Vec<VerifyFlag>, CliError> {
    flag_slow_records(store, bundle::best_records(b), &super::machine().target)
        .map_err(|e| fail(format!("--verify: {e}")))
}
