//! `ttdb export`
use super::CliResult;
use crate::store::query::{export, ExportFilter};
use crate::store::Store;
use std::io::Write;
use std::path::PathBuf;

pub fn run(
    store: &Store,
    best: bool,
    workload: Option<String>,
    output: Option<PathBuf>,
) -> CliResult {
    let filter = ExportFilter {
        best,
        signature: workload,
    };
    let mut out: Box<dyn Write> = match &output {
        Some(p) => Box::new(std::io::BufWriter::new(std::fs::File::create(p).map_err(
            |e| super::CliError {
                message: format!("{}: {e}", p.display()),
                code: 1,
            },
        )?)),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let n = export(store, &filter, |line| {
        out.write_all(line.as_bytes())?;
        out.write_all(b"\n")
    })?;
    out.flush()?;
    if let Some(p) = output {
        eprintln!("wrote {n} records to {}", p.display());
    }
    Ok(())
}
