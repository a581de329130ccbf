//! `ttdb verify`: replays, compiles, verifies and times the best records of the database on
//! this machine, against the naive default schedule and the machine's FMA peak.
use super::table::{fmt_opt, io_shapes, Table};
use super::{CliError, CliResult};
use crate::ansor::{Record, WorkloadKey};
use crate::evaluate::{evaluate_default, evaluate_steps, EvalOptions, Reference};
use crate::measure::peak::measure_peak;
use crate::measure::runner::MeasureOptions;
use crate::store::measurement::store_measurements;
use crate::store::Store;
use serde::Serialize;
use std::io::IsTerminal;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// Only workloads whose signature starts with this hex prefix.
    #[arg(long)]
    pub workload: Option<String>,
    /// Every workload with a valid CPU record (otherwise --workload or --class is required).
    #[arg(long)]
    pub all: bool,
    /// Only this op class (or class prefix chain, like `workloads --class`).
    #[arg(long)]
    pub class: Option<String>,
    /// At most this many workloads (in signature order).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Verify only, do not time (no speedups).
    #[arg(long)]
    pub no_timing: bool,
    /// Skip timing the naive default schedule (no speedup column).
    #[arg(long)]
    pub no_naive: bool,
    /// Use this fp32 peak (GFLOP/s, all threads) instead of measuring it.
    #[arg(long)]
    pub peak: Option<f64>,
    /// Per-run timeout in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Do not store the measurements in the database.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
    /// Keep the layout-free weights in their original layout (by default they are pre-packed
    /// into the schedule's layout outside the timed region, as TVM measured relay tasks).
    #[arg(long)]
    pub no_prepack: bool,
}

/// One row of the verify table.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyRow {
    pub signature: String,
    pub op_class: String,
    pub shapes: String,
    pub record_id: i64,
    pub verified: bool,
    pub error: Option<String>,
    pub rel_error: Option<f64>,
    pub compile_ms: f64,
    pub tuned_ms: Option<f64>,
    pub naive_ms: Option<f64>,
    pub gflops: Option<f64>,
    pub percent_of_peak: Option<f64>,
    pub speedup: Option<f64>,
    /// What the record cost where it was tuned (its log's mean cost), for comparison.
    pub logged_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct VerifyReport {
    pub peak_gflops: f64,
    pub rows: Vec<VerifyRow>,
}

pub fn render_verify(r: &VerifyReport) -> String {
    let mut t = Table::new(&[
        "kernel",
        "class",
        "shapes",
        ">GFLOP/s",
        ">% peak",
        ">tuned ms",
        ">naive ms",
        ">speedup",
        ">compile ms",
        "verified",
    ]);
    for row in &r.rows {
        t.row(vec![
            row.signature[..12.min(row.signature.len())].to_string(),
            row.op_class.clone(),
            row.shapes.clone(),
            fmt_opt(row.gflops, 1),
            fmt_opt(row.percent_of_peak, 1),
            fmt_opt(row.tuned_ms, 3),
            fmt_opt(row.naive_ms, 3),
            row.speedup
                .map(|s| format!("{s:.1}x"))
                .unwrap_or_else(|| "-".into()),
            format!("{:.0}", row.compile_ms),
            if row.verified {
                "yes".into()
            } else {
                format!("no: {}", row.error.as_deref().unwrap_or("?"))
            },
        ]);
    }
    let mut out = t.render();
    let verified = r.rows.iter().filter(|x| x.verified).count();
    out.push_str(&format!(
        "\n{verified} of {} verified; machine peak {:.1} GFLOP/s (fp32 FMA, all threads)\n",
        r.rows.len(),
        r.peak_gflops
    ));
    let speedups: Vec<f64> = r.rows.iter().filter_map(|x| x.speedup).collect();
    if !speedups.is_empty() {
        let geo = (speedups.iter().map(|s| s.ln()).sum::<f64>() / speedups.len() as f64).exp();
        out.push_str(&format!(
            "geometric-mean speedup over the naive schedule: {geo:.1}x over {} kernels\n",
            speedups.len()
        ));
    }
    let mut compile: Vec<f64> = r.rows.iter().map(|x| x.compile_ms).collect();
    compile.sort_by(f64::total_cmp);
    if !compile.is_empty() {
        out.push_str(&format!(
            "median compile time (lower + codegen + JIT): {:.0} ms\n",
            compile[compile.len() / 2]
        ));
    }
    out
}

/// The best valid record per workload key among imported (not ttdb-measured) CPU records.
fn best_records(
    store: &Store,
    args: &VerifyArgs,
) -> crate::store::Result<Vec<(i64, String, String, String, f64)>> {
    let sig = args.workload.as_deref().map(|s| format!("{s}%"));
    let mut q = store.conn.prepare(
        "SELECT id, raw, signature, op_class, mean_cost FROM (
             SELECT r.id, r.raw, w.signature, w.op_class, r.mean_cost, ROW_NUMBER() OVER (
                 PARTITION BY r.workload_id ORDER BY r.mean_cost, r.id) AS rank
             FROM records r JOIN workloads w ON w.id = r.workload_id JOIN targets t ON t.id = r.target_id
             JOIN sources s ON s.id = r.source_id
             WHERE r.mean_cost IS NOT NULL AND t.compat = 'llvm/cpu' AND s.kind != 'ttdb_measure'
               AND (?1 IS NULL OR w.signature LIKE ?1)
               AND (?2 IS NULL OR w.op_class = ?2 OR w.op_class LIKE ?2 || '+%'))
         WHERE rank = 1 ORDER BY signature, id",
    )?;
    let rows = q.query_map(rusqlite::params![sig, args.class], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
    })?;
    let mut out: Vec<_> = rows.collect::<Result<_, _>>()?;
    if let Some(n) = args.limit {
        out.truncate(n);
    }
    Ok(out)
}

pub fn run(store: &mut Store, args: &VerifyArgs) -> CliResult {
    if !args.all && args.workload.is_none() && args.class.is_none() {
        return Err(CliError {
            message: "say which workloads: --workload SIG, --class C or --all".into(),
            code: 2,
        });
    }
    let todo = best_records(store, args)?;
    if todo.is_empty() {
        return Err(CliError {
            message: "no valid CPU record matches".into(),
            code: 1,
        });
    }
    let mopts = MeasureOptions {
        timeout: Some(Duration::from_secs_f64(args.timeout)),
        ..MeasureOptions::default()
    };
    let peak = match args.peak {
        Some(p) => p,
        None => {
            measure_peak(&mopts)
                .map_err(|e| CliError {
                    message: format!("measuring the peak: {e}"),
                    code: 1,
                })?
                .gflops_all
        }
    };
    let opts = EvalOptions {
        measure: mopts.clone(),
        verify_only: args.no_timing,
        prepack_weights: !args.no_prepack,
        ..EvalOptions::default()
    };
    // The naive schedule is slow by design: fewer repeats are enough for a speedup ratio.
    let naive_opts = EvalOptions {
        measure: MeasureOptions {
            repeat: 3,
            min_repeat_ms: 50,
            ..mopts
        },
        verify_only: args.no_timing,
        ..EvalOptions::default()
    };
    let host = crate::measure::detect_host();
    let bar = std::io::stderr()
        .is_terminal()
        .then(|| indicatif::ProgressBar::new(todo.len() as u64));
    let mut rows = Vec::new();
    let mut stored = Vec::new();
    for (record_id, raw, signature, op_class, logged) in todo {
        if let Some(b) = &bar {
            b.set_message(op_class.clone());
        }
        let record = Record::parse(&raw).map_err(|e| CliError {
            message: format!("record {record_id}: {e}"),
            code: 1,
        })?;
        let key = &record.task.workload_key;
        let mut row = VerifyRow {
            signature,
            op_class,
            shapes: String::new(),
            record_id,
            verified: false,
            error: None,
            rel_error: None,
            compile_ms: 0.0,
            tuned_ms: None,
            naive_ms: None,
            gflops: None,
            percent_of_peak: None,
            speedup: None,
            logged_ms: logged * 1e3,
        };
        let recognized = WorkloadKey::parse(key)
            .map_err(|e| e.to_string())
            .and_then(|k| crate::recognize::recognize(&k).map_err(|e| e.to_string()));
        let (dag, signature, registered) = match recognized {
            Ok(r) => (
                r.dag,
                r.signature,
                r.recognized_by == crate::recognize::RecognizedBy::Registered,
            ),
            Err(e) => {
                row.error = Some(e);
                rows.push(row);
                continue;
            }
        };
        row.shapes = io_shapes(&signature.inputs, &signature.output);
        let reference = match Reference::new(&dag, 7) {
            Ok(r) => r,
            Err(e) => {
                row.error = Some(e);
                rows.push(row);
                continue;
            }
        };
        let flops = dag.flop_ct();
        // Measure as TVM did: weights pre-packed for layout rewrite option 2 (relay tasks;
        // records before v0.5 carry no option: relay keys meant 2, registered ones 1).
        let option = record
            .task
            .layout_rewrite_option
            .unwrap_or(if registered { 1 } else { 2 });
        let opts = EvalOptions {
            prepack_weights: opts.prepack_weights && option == 2,
            ..opts.clone()
        };
        let tuned = evaluate_steps(&dag, &record.steps, &reference, &opts);
        row.verified = tuned.verified();
        row.error = tuned.failure.as_ref().map(|f| f.message.clone());
        row.rel_error = tuned.rel_error;
        row.compile_ms = tuned.total_compile_time().as_secs_f64() * 1e3;
        row.tuned_ms = tuned.median().map(|s| s * 1e3);
        row.gflops = tuned.gflops(flops);
        row.percent_of_peak = row.gflops.map(|g| 100.0 * g / peak);
        stored.push(crate::tune::record::measurement_of(
            &tuned,
            key.clone(),
            record.steps.clone(),
            flops,
            Some(record_id),
            format!("verify of record {record_id}"),
        ));
        if !args.no_naive && !args.no_timing {
            let naive = evaluate_default(&dag, &reference, &naive_opts);
            row.naive_ms = naive.median().map(|s| s * 1e3);
            if let (Some(n), Some(t)) = (row.naive_ms, row.tuned_ms) {
                row.speedup = Some(n / t);
            }
            stored.push(crate::tune::record::measurement_of(
                &naive,
                key.clone(),
                vec![],
                flops,
                None,
                "naive default schedule".into(),
            ));
        }
        rows.push(row);
        if let Some(b) = &bar {
            b.inc(1);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if !args.dry_run {
        let tuned: Vec<_> = stored
            .iter()
            .filter(|m| m.origin_record_id.is_some())
            .cloned()
            .collect();
        let naive: Vec<_> = stored
            .iter()
            .filter(|m| m.origin_record_id.is_none())
            .cloned()
            .collect();
        store_measurements(store, "verify", &host, &tuned)?;
        store_measurements(store, "default", &host, &naive)?;
    }
    let report = VerifyReport {
        peak_gflops: peak,
        rows,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", render_verify(&report));
    }
    let failed = report.rows.iter().filter(|r| !r.verified).count();
    if failed > 0 {
        return Err(CliError {
            message: format!("{failed} kernel(s) failed verification"),
            code: 1,
        });
    }
    Ok(())
}

/// `ttdb bench-peak`: this machine's fp32 FMA peak, one thread and all threads.
pub fn bench_peak(json: bool) -> CliResult {
    let p = measure_peak(&MeasureOptions {
        repeat: 7,
        ..MeasureOptions::default()
    })
    .map_err(|e| CliError {
        message: e.to_string(),
        code: 1,
    })?;
    let host = crate::measure::detect_host();
    if json {
        println!(
            "{}",
            serde_json::json!({"cpu": host.cpu_model, "llvm_cpu": host.llvm_cpu, "lanes": p.lanes,
                "gflops_1_thread": p.gflops_1t, "threads": p.threads, "gflops_all_threads": p.gflops_all})
        );
    } else {
        println!(
            "cpu: {} ({}, {} fp32 lanes)",
            host.cpu_model, host.llvm_cpu, p.lanes
        );
        println!(
            "fp32 FMA peak, 1 thread: {:.1} GFLOP/s (median of 7)",
            p.gflops_1t
        );
        println!(
            "fp32 FMA peak, {} threads: {:.1} GFLOP/s (median of 7)",
            p.threads, p.gflops_all
        );
    }
    Ok(())
}
