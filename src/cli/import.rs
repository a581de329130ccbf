//! `ttdb import PATH...`
use super::{CliError, CliResult};
use ttdb_store::bundle::inputs;
use ttdb_store::bundle::summary::ImportSummary;
use ttdb_store::store::Store;

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
        summary.add_unreadable(e);
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
        summary.add_outcome(f, outcome);
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(())
}
