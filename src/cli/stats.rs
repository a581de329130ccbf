//! `ttdb stats`
use super::table::Table;
use super::CliResult;
use ttdb_store::store::query::{stats, Stats};
use ttdb_store::store::Store;

pub fn render_stats(s: &Stats) -> String {
    let mut out = format!(
        "schema version: {}\nsources: {}\nrecords: {} ({} valid, {} failed)\nrejected lines: {}\nworkload keys: {}\nsignatures: {}\nunknown workloads: {}\n\n",
        s.schema_version, s.sources, s.records, s.valid_records, s.failed_records, s.rejected_lines, s.workload_keys, s.signatures, s.unknown_workloads
    );
    let mut t = Table::new(&["class", ">workloads", ">records"]);
    for c in &s.classes {
        t.row(vec![
            c.op_class.clone(),
            c.workloads.to_string(),
            c.records.to_string(),
        ]);
    }
    out.push_str(&t.render());
    out.push('\n');
    let mut t = Table::new(&["target", "compat", ">records"]);
    for c in &s.targets {
        t.row(vec![
            c.target.clone(),
            c.compat.clone(),
            c.records.to_string(),
        ]);
    }
    out.push_str(&t.render());
    out
}

pub fn run(store: &Store, json: bool) -> CliResult {
    let s = stats(store)?;
    if json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        print!("{}", render_stats(&s));
    }
    Ok(())
}
