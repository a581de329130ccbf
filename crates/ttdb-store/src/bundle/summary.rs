//! The summary of one `ttdb import` run over all its inputs ([`super::inputs`]): records
//! read, inserted and refused per file, the workloads and classes they touched, the bundles
//! among them, and the records timed on an ISA this host lacks.
use super::inputs::{Imported, Input, Skipped};
use super::sign::SignerView;
use crate::store::import::FileReport;
use crate::store::lookup;
use crate::store::target::NormalizedTarget;
use crate::store::Store;
use serde::Serialize;
use std::collections::BTreeMap;
use ttdb_format::host::IsaCompat;

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
    pub signature: SignerView,
    pub new_origins: usize,
    pub new_hosts: usize,
}

impl ImportSummary {
    /// Adds the report of one file imported.
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

    /// Counts an input that could not be read at all.
    pub fn add_unreadable(&mut self, input: Skipped) {
        self.files += 1;
        self.files_failed += 1;
        self.errors
            .push((input.path.display().to_string(), input.reason));
    }

    /// Adds what importing `input` did ([`super::inputs::import_input`]'s outcome).
    pub fn add_outcome(&mut self, input: &Input, outcome: Result<Imported, String>) {
        match outcome {
            Ok(Imported::Log(r)) => self.add(r),
            Ok(Imported::Bundle { import, signer }) => {
                self.bundles.push(BundleSeen {
                    file: input.path.clone(),
                    signature: signer,
                    new_origins: import.new_origins,
                    new_hosts: import.new_hosts,
                });
                self.add(import.file);
            }
            Err(e) => {
                // Errors name the file already; the summary lists it beside.
                let path = input.path.display().to_string();
                let reason = e.strip_prefix(&format!("{path}: ")).unwrap_or(&e);
                self.add_unreadable(Skipped {
                    path: input.path.clone(),
                    reason: reason.to_string(),
                });
            }
        }
    }

    /// Fills `workloads` and `classes` from the database.
    pub fn count_workloads(&mut self, store: &Store) -> crate::store::Result<()> {
        let ids: std::collections::BTreeSet<i64> = self
            .per_file
            .iter()
            .flat_map(|f| f.workload_ids.iter().copied())
            .collect();
        self.workloads = ids.len();
        for class in lookup::workload_classes(store, ids)? {
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
        for (target, n) in lookup::record_targets_of_sources(store, &files)? {
            let need = NormalizedTarget::parse(&target, None).isa_requirement();
            if let (IsaCompat::Lacks, Some(isa)) = (need.check(host_isa), need.needs) {
                self.needs_missing_isa += n as usize;
                *self.missing_isa.entry(isa.to_string()).or_default() += n as usize;
            }
        }
        Ok(())
    }
}
