//! `ttdb workloads`
use super::table::{io_shapes, Table};
use super::CliResult;
use ttdb_format::ansor::record::format_seconds;
use ttdb_store::store::query::{workloads, WorkloadRow};
use ttdb_store::store::Store;

pub fn render_workloads(rows: &[WorkloadRow]) -> String {
    let mut t = Table::new(&[
        "signature",
        "class",
        "shapes",
        "layout",
        "target",
        ">keys",
        ">records",
        ">valid",
        ">best",
    ]);
    for w in rows {
        t.row(vec![
            w.signature[..12.min(w.signature.len())].to_string(),
            w.op_class.clone(),
            io_shapes(&w.inputs, &w.output),
            w.layout.clone(),
            w.target.clone(),
            w.keys.to_string(),
            w.records.to_string(),
            w.valid_records.to_string(),
            w.best_cost
                .map(format_seconds)
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    let mut out = t.render();
    out.push_str(&format!("{} workload rows\n", rows.len()));
    out
}

pub fn run(store: &Store, class: Option<&str>, json: bool) -> CliResult {
    let rows = workloads(store, class)?;
    if json {
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        print!("{}", render_workloads(&rows));
    }
    Ok(())
}
