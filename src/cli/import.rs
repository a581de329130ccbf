//! `ttdb import PATH...`
use super::{CliError, CliResult};
use serde::Serialize;
use std::collections::BTreeMap;
use ttdb_format::host::IsaCompat;
use ttdb_store::bundle::inputs::{self, Imported, Skipped};
use ttdb_store::store::import::FileReport;
use ttdb_store::store::target::NormalizedTarget;
use ttdb_store::store::Store;

/// The summary of one `import` run, over all its files.
#[derive(Debug, Default, Serialize)]
pub struct ImportSummary {
    pub files: usize,
    pub files_failed: usize,
    pub records_read: usize,
    pub inserted: usize,
    pub duplicates: usize,
    pub failed_measurements: usize,
    /// Of the failed measurements, records whose costs are not plausible times.
    pub invalid_costs: usize,
    pub rejected_lines: usize,
    /// Workload keys touched by these files, and how many of them are new.
    pub workloads: usize,
    pub new_workloads: usize,
    /// Op class -> number of workloads of that class among those touched.
    pub classes: BTreeMap<String, usize>,
    /// Records of these files timed on a vector ISA this host lacks (kept, ranked after
    /// compatible records), and per ISA.
    pub needs_missing_isa: usize,
    pub missing_isa: BTreeMap<String, usize>,
    pub per_file: Vec<FileReport>,
    /// The bundles among the files (read through the bundle path, every check made).
    pub bundles: Vec<BundleSeen>,
    /// Directory entries that are not logs or bundles, with the reason.
    pub skipped: Vec<Skipped>,
    /// Files that could not be imported at all: (path, reason).
    pub errors: Vec<(String, String)>,
}

/// A bundle that `import` read: its signature, and what it added besides records.
#[derive(Debug, Serialize)]
pub struct BundleSeen {
    pub file: std::path::PathBuf,
    pub signature: super::SignerView,
    pub new_origins: usize,
    pub new_hosts: usize,
}

impl ImportSummary {
    pub fn add(&mut self, r: FileReport) {
        self.files += 1;
        self.records_read += r.records;
        self.inserted += r.inserted;
        self.duplicates += r.duplicates;
        self.failed_measurements += r.failed_measurements;
        self.invalid_costs += r.invalid_costs.len();
        self.rejected_lines += r.rejected.len();
        self.new_workloads += r.new_workloads;
        self.per_file.push(r);
    }

    /// Fills `workloads` and `classes` from the database.
    pub fn count_workloads(&mut self, store: &Store) -> ttdb_store::store::Result<()> {
        let ids: std::collections::BTreeSet<i64> = self
            .per_file
            .iter()
            .flat_map(|f| f.workload_ids.iter().copied())
            .collect();
        self.workloads = ids.len();
        for class in ttdb_store::store::lookup::workload_classes(store, ids)? {
            *self.classes.entry(class).or_default() += 1;
        }
        Ok(())
    }
    /// Fills `needs_missing_isa` from the records of the files read, judged against the
    /// ISA flags `host_isa` of this host.
    pub fn count_missing_isa(
        &mut self,
        store: &Store,
        host_isa: &[String],
    ) -> ttdb_store::store::Result<()> {
        // A file named twice is one source.
        let files: Vec<&str> = self
            .per_file
            .iter()
            .map(|f| f.sha256.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for (target, n) in ttdb_store::store::lookup::record_targets_of_sources(store, &files)? {
            let need = NormalizedTarget::parse(&target, None).isa_requirement();
            if let (IsaCompat::Lacks, Some(isa)) = (need.check(host_isa), need.needs) {
                self.needs_missing_isa += n as usize;
                *self.missing_isa.entry(isa.to_string()).or_default() += n as usize;
            }
        }
        Ok(())
    }
}

/// The human-readable summary (snapshot-tested).
pub fn render_import_summary(s: &ImportSummary) -> String {
    let mut out = String::new();
    let mut t = super::table::Table::new(&[
        "file",
        ">records",
        ">inserted",
        ">duplicates",
        ">failed",
        ">rejected",
    ]);
    for f in &s.per_file {
        t.row(vec![
            f.path.display().to_string(),
            f.records.to_string(),
            f.inserted.to_string(),
            f.duplicates.to_string(),
            f.failed_measurements.to_string(),
            f.rejected.len().to_string(),
        ]);
    }
    out.push_str(&t.render());
    out.push('\n');
    out.push_str(&format!(
        "files: {} ({} unreadable{})\nrecords read: {}\ninserted: {}\nduplicates: {}\nfailed measurements: {} (kept, never chosen{})\nrejected lines: {}\nworkloads: {} ({} new)\n",
        s.files,
        s.files_failed,
        if s.skipped.is_empty() { String::new() } else { format!("; {} skipped, not logs", s.skipped.len()) },
        s.records_read,
        s.inserted,
        s.duplicates,
        s.failed_measurements,
        if s.invalid_costs == 0 { String::new() } else { format!("; {} with costs that are not plausible times", s.invalid_costs) },
        s.rejected_lines,
        s.workloads,
        s.new_workloads
    ));
    out.push_str(&format!(
        "records needing an ISA this host lacks: {}",
        s.needs_missing_isa
    ));
    if !s.missing_isa.is_empty() {
        let per: Vec<String> = s
            .missing_isa
            .iter()
            .map(|(isa, n)| format!("{isa}: {n}"))
            .collect();
        out.push_str(&format!(
            " ({}; kept, ranked after compatible records)",
            per.join(", ")
        ));
    }
    out.push('\n');
    out.push_str(&format!("classes: {}\n", s.classes.len()));
    for (class, n) in &s.classes {
        out.push_str(&format!("  {n:>4}  {class}\n"));
    }
    for f in &s.per_file {
        for g in &f.refuted_guesses {
            out.push_str(&format!(
                "unrecognized {}: {}\n",
                f.path.display(),
                g.reason
            ));
        }
        listed(&mut out, "failed", &f.path, &f.invalid_costs);
        listed(&mut out, "rejected", &f.path, &f.rejected);
    }
    for b in &s.bundles {
        out.push_str(&format!(
            "bundle {}: signature {}{}; {} provenance entries and {} hosts new\n",
            b.file.display(),
            b.signature.status,
            b.signature
                .trusted_as
                .as_ref()
                .map_or(String::new(), |n| format!(" (`{n}`)")),
            b.new_origins,
            b.new_hosts
        ));
    }
    for k in &s.skipped {
        out.push_str(&format!("skipped {}: {}\n", k.path.display(), k.reason));
    }
    for (path, reason) in &s.errors {
        out.push_str(&format!("error {path}: {reason}\n"));
    }
    out
}

/// Lines of one file listed under `verb`, at most [`LISTED`] (the JSON has them all).
fn listed(
    out: &mut String,
    verb: &str,
    path: &std::path::Path,
    lines: &[ttdb_store::store::Rejected],
) {
    for r in lines.iter().take(LISTED) {
        out.push_str(&format!(
            "{verb} {}:{}: {}\n",
            path.display(),
            r.line,
            r.reason
        ));
    }
    if lines.len() > LISTED {
        out.push_str(&format!(
            "{verb} {}: {} more lines (all in --json)\n",
            path.display(),
            lines.len() - LISTED
        ));
    }
}

/// Lines listed per file and kind in the human summary.
const LISTED: usize = 20;

pub fn run(
    db: &Option<std::path::PathBuf>,
    paths: &[std::path::PathBuf],
    require_signed: bool,
    limits: &ttdb_store::bundle::format::Limits,
    json: bool,
) -> CliResult {
    let found = inputs::collect(paths);
    let mut summary = ImportSummary {
        skipped: found.skipped,
        ..Default::default()
    };
    for e in found.errors {
        summary.files += 1;
        summary.files_failed += 1;
        summary
            .errors
            .push((e.path.display().to_string(), e.reason));
    }
    // Nothing to read (a mistyped path): no database is created.
    let mut store = if found.files.is_empty() {
        None
    } else {
        Some(super::open_store(db, ttdb_store::store::OpenMode::Create)?)
    };
    if let Some(store) = &mut store {
        import_all(store, &found.files, require_signed, limits, &mut summary)?;
        summary.count_workloads(store)?;
        summary.count_missing_isa(store, &super::match_cmd::host_match_options().host_isa)?;
    }
    if json {
        println!(
            "{}",
            serde_json::to_string(&summary).map_err(|e| CliError {
                message: e.to_string(),
                code: 1
            })?
        );
    } else {
        print!("{}", render_import_summary(&summary));
    }
    if summary.files_failed > 0 {
        return Err(CliError {
            message: format!("{} file(s) could not be imported", summary.files_failed),
            code: 1,
        });
    }
    if summary.files == 0 {
        return Err(CliError {
            message: "no Ansor logs or bundles found (see the skipped files above)".into(),
            code: 1,
        });
    }
    Ok(())
}

/// Imports each file in its own transaction (`inputs::import_input`). A file that fails is
/// reported and the rest go on.
fn import_all(
    store: &mut Store,
    files: &[inputs::Input],
    require_signed: bool,
    limits: &ttdb_store::bundle::format::Limits,
    summary: &mut ImportSummary,
) -> CliResult {
    let opts = inputs::ImportOptions {
        require_signed,
        limits: limits.clone(),
    };
    let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let total: u64 = files.iter().map(|f| size(&f.path)).sum();
    let bar = super::progress_bar(
        total,
        "{spinner} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} {msg}",
    );
    let mut done = 0u64;
    for f in files {
        if let Some(b) = &bar {
            b.set_message(
                f.path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            );
        }
        let outcome = inputs::import_input(store, f, &opts, &|bytes| {
            if let Some(b) = &bar {
                b.set_position(done + bytes);
            }
        });
        done += size(&f.path);
        match outcome {
            Ok(Imported::Log(r)) => summary.add(r),
            Ok(Imported::Bundle { import, signer }) => {
                summary.bundles.push(BundleSeen {
                    file: f.path.clone(),
                    signature: signer,
                    new_origins: import.new_origins,
                    new_hosts: import.new_hosts,
                });
                summary.add(import.file);
            }
            Err(e) => {
                summary.files += 1;
                summary.files_failed += 1;
                // Errors name the file already; the summary lists it beside.
                let path = f.path.display().to_string();
                let e = e
                    .strip_prefix(&format!("{path}: "))
                    .unwrap_or(&e)
                    .to_string();
                summary.errors.push((path, e));
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(())
}
