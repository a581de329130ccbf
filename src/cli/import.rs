//! `ttdb import PATH...`
use super::{CliError, CliResult};
use crate::host::IsaCompat;
use crate::store::import::{collect_files, import_file, FileReport};
use crate::store::target::NormalizedTarget;
use crate::store::Store;
use serde::Serialize;
use std::collections::BTreeMap;

/// The summary of one `import` run, over all its files.
#[derive(Debug, Default, Serialize)]
pub struct ImportSummary {
    pub files: usize,
    pub files_failed: usize,
    pub records_read: usize,
    pub inserted: usize,
    pub duplicates: usize,
    pub failed_measurements: usize,
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
    /// Files that could not be read at all: (path, reason).
    pub errors: Vec<(String, String)>,
}

impl ImportSummary {
    pub fn add(&mut self, r: FileReport) {
        self.files += 1;
        self.records_read += r.records;
        self.inserted += r.inserted;
        self.duplicates += r.duplicates;
        self.failed_measurements += r.failed_measurements;
        self.rejected_lines += r.rejected.len();
        self.new_workloads += r.new_workloads;
        self.per_file.push(r);
    }

    /// Fills `workloads` and `classes` from the database.
    pub fn count_workloads(&mut self, store: &Store) -> crate::store::Result<()> {
        let ids: std::collections::BTreeSet<i64> = self
            .per_file
            .iter()
            .flat_map(|f| f.workload_ids.iter().copied())
            .collect();
        self.workloads = ids.len();
        for class in crate::store::lookup::workload_classes(store, ids)? {
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
    ) -> crate::store::Result<()> {
        // A file named twice is one source.
        let files: Vec<&str> = self
            .per_file
            .iter()
            .map(|f| f.sha256.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for (target, n) in crate::store::lookup::record_targets_of_sources(store, &files)? {
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
        "files: {} ({} unreadable)\nrecords read: {}\ninserted: {}\nduplicates: {}\nfailed measurements: {} (kept, never chosen)\nrejected lines: {}\nworkloads: {} ({} new)\n",
        s.files, s.files_failed, s.records_read, s.inserted, s.duplicates, s.failed_measurements, s.rejected_lines, s.workloads, s.new_workloads
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
        for r in &f.rejected {
            out.push_str(&format!(
                "rejected {}:{}: {}\n",
                f.path.display(),
                r.line,
                r.reason
            ));
        }
    }
    for (path, reason) in &s.errors {
        out.push_str(&format!("error {path}: {reason}\n"));
    }
    out
}

pub fn run(store: &mut Store, paths: &[std::path::PathBuf], json: bool) -> CliResult {
    let files = collect_files(paths)?;
    let total: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    let bar = super::progress_bar(
        total,
        "{spinner} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} {msg}",
    );
    let mut summary = ImportSummary::default();
    let mut done = 0u64;
    for f in &files {
        if let Some(b) = &bar {
            b.set_message(
                f.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            );
        }
        let report = import_file(store, f, &|bytes| {
            if let Some(b) = &bar {
                b.set_position(done + bytes);
            }
        });
        done += std::fs::metadata(f).map(|m| m.len()).unwrap_or(0);
        match report {
            Ok(r) => summary.add(r),
            Err(e) => {
                summary.files += 1;
                summary.files_failed += 1;
                summary
                    .errors
                    .push((f.display().to_string(), e.to_string()));
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    summary.count_workloads(store)?;
    summary.count_missing_isa(store, &super::match_cmd::host_match_options().host_isa)?;
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
    Ok(())
}
