//! `ttdb verify`: replays, compiles, verifies and times the best records of the database on
//! this machine (imported ones, or with `--measured` ttdb's own), against the naive default
//! schedule and the machine's FMA peak (`ttdb_tuning::tune::verify`); this file parses and
//! renders.
use super::table::{fmt_opt, io_shapes, Table};
use super::{CliError, CliResult};
use std::io::IsTerminal;
use std::time::Duration;
use ttdb_backend::measure::peak::measure_peak;
use ttdb_backend::measure::runner::MeasureOptions;
use ttdb_tuning::tune::verify::{verify, VerifyOptions, VerifyReport};

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
    /// Print the result as JSON on standard output.
    #[arg(long)]
    pub json: bool,
    /// Each workload's best record ttdb measured itself (by tune, refine or apply) instead of
    /// its best imported one: a tuned kernel timed alone again, on this machine.
    #[arg(long)]
    pub measured: bool,
    /// Keep the layout-free weights in their original layout (by default they are pre-packed
    /// into the schedule's layout outside the timed region, as TVM measured relay tasks).
    #[arg(long)]
    pub no_prepack: bool,
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
            io_shapes(&row.inputs, &row.output),
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
        "\n{verified} of {} verified; {}\n",
        r.rows.len(),
        match r.peak_gflops {
            Some(p) => format!("machine peak {p:.1} GFLOP/s (fp32 FMA, all threads)"),
            None => "not timed (--no-timing), so no peak was measured".into(),
        }
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

pub fn run(store: &mut ttdb_store::store::Store, args: &VerifyArgs) -> CliResult {
    if !args.all && args.workload.is_none() && args.class.is_none() {
        return Err(CliError {
            message: "say which workloads: --workload SIG, --class C or --all".into(),
            code: 2,
        });
    }
    let opts = VerifyOptions {
        signature_prefix: args.workload.clone(),
        class: args.class.clone(),
        limit: args.limit,
        timing: !args.no_timing,
        naive: !args.no_naive,
        peak: args.peak,
        timeout: Duration::from_secs_f64(args.timeout),
        prepack: !args.no_prepack,
        store: !args.dry_run,
        records: None,
        measured: args.measured,
        target: super::machine().target.clone(),
    };
    let bar = std::io::stderr()
        .is_terminal()
        .then(|| indicatif::ProgressBar::new(0));
    let report = verify(store, &opts, &|done, total, class| {
        if let Some(b) = &bar {
            b.set_length(total as u64);
            b.set_position(done as u64);
            b.set_message(class.to_string());
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let report = report?;
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
    let target = &super::machine().target;
    let p = measure_peak(
        target,
        &MeasureOptions {
            repeat: 7,
            ..MeasureOptions::default()
        },
    )
    .map_err(|e| CliError {
        message: e.to_string(),
        code: 1,
    })?;
    let host = &target.host;
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
