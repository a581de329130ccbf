//! `ttdb refine`: Droplet search on this machine for stored workloads
//! (`ttdb_tuning::tune::refine`), or for the schedules `apply` chooses for a model (`--model`,
//! the same as `apply --droplet`). This file parses and renders.
use super::kernels::ModelArgs;
use super::table::{fmt_opt, io_shapes, Table};
use super::{CliError, CliResult};
use std::path::PathBuf;
use std::time::Duration;
use ttdb_store::store::Store;
use ttdb_tuning::tune::refine::{plan, refine_jobs, RefineOptions, RefineReport, Selection};

#[derive(clap::Args, Debug)]
pub struct RefineArgs {
    /// Only workloads whose signature starts with this hex prefix.
    #[arg(long)]
    pub workload: Option<String>,
    /// Only this op class (or class prefix chain, like `workloads --class`).
    #[arg(long)]
    pub class: Option<String>,
    /// The kernels of this ONNX model, from the schedules `apply` transfers to them (the same
    /// as `ttdb apply MODEL --droplet N`).
    #[arg(long, value_name = "MODEL.onnx")]
    pub model: Option<PathBuf>,
    /// With --model: the NCHWc blocking of its convs, as for `apply` (auto, planned,
    /// replan, tophub; docs/design/layout-plan.md).
    #[arg(long, value_name = "auto|planned|replan|tophub", requires = "model")]
    pub layout_plan: Option<String>,
    /// Every workload with a valid CPU record.
    #[arg(long)]
    pub all: bool,
    /// At most this many workloads (in signature order).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Droplet trials per kernel at most.
    #[arg(long, default_value_t = 100)]
    pub trials_per_kernel: usize,
    /// Candidates per batch (default: max(cores, 16)).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Significance level of the Welch t-test that accepts a move.
    #[arg(long, default_value_t = 0.05)]
    pub alpha: f64,
    /// Timings per candidate (the t-test's samples; at least 3).
    #[arg(long, default_value_t = 5)]
    pub samples: usize,
    /// Batches in a row without a significant improvement before a kernel stops.
    #[arg(long, default_value_t = 1)]
    pub patience: usize,
    /// Wall-clock budget per kernel, in seconds.
    #[arg(long)]
    pub time_budget: Option<f64>,
    /// Stored records re-timed per source (imported, ttdb's own) to pick the start.
    #[arg(long, default_value_t = 5)]
    pub starts: usize,
    /// Per-run timeout in seconds (at most).
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Candidates (for --model) measured per kernel before refining.
    #[arg(long, default_value_t = 3)]
    pub top_k: usize,
    #[command(flatten)]
    pub isolation: super::IsolationArgs,
    /// Measure on `ttdb worker` processes of this host class (default: this machine's)
    /// through the database's queue (not with --model yet: its transfer step measures here).
    #[arg(long, value_name = "HOST-CLASS", num_args = 0..=1, default_missing_value = "")]
    pub workers: Option<String>,
    /// Do not store the trials.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

impl RefineArgs {
    fn options(&self) -> Result<RefineOptions, CliError> {
        let usage = |m: &str| CliError {
            message: m.into(),
            code: 2,
        };
        if !(0.0..1.0).contains(&self.alpha) || self.alpha == 0.0 {
            return Err(usage("--alpha must be in (0, 1)"));
        }
        if self.samples < 3 {
            return Err(usage(
                "--samples must be at least 3 (the t-test needs them)",
            ));
        }
        let mut o = RefineOptions {
            samples: self.samples,
            starts: self.starts.max(1),
            isolation: self.isolation.isolation()?,
            target: super::machine().target.clone(),
            ..RefineOptions::default()
        };
        o.droplet.max_trials = self.trials_per_kernel;
        o.droplet.alpha = self.alpha;
        o.droplet.patience = self.patience.max(1);
        o.droplet.max_timeout = Duration::from_secs_f64(self.timeout.max(0.1));
        o.droplet.time_budget = self
            .time_budget
            .map(|s| Duration::from_secs_f64(s.max(0.0)));
        if let Some(b) = self.batch {
            o.droplet.batch = b.max(1);
        }
        Ok(o)
    }
}

pub fn render_refine(r: &RefineReport) -> String {
    let mut t = Table::new(&[
        "workload",
        "class",
        "shapes",
        "start",
        ">logged ms",
        ">start ms",
        ">refined ms",
        ">speedup",
        ">GFLOP/s",
        ">trials",
        ">failed",
        "stopped",
    ]);
    for k in &r.kernels {
        t.row(vec![
            k.signature[..12.min(k.signature.len())].to_string(),
            k.op_class.clone(),
            io_shapes(&k.inputs, &k.output),
            k.start_record
                .map_or("-".into(), |id| format!("record {id}")),
            fmt_opt(k.logged_ms, 3),
            fmt_opt(k.start_ms, 3),
            fmt_opt(k.refined_ms, 3),
            k.speedup.map_or("-".into(), |s| format!("{s:.2}x")),
            fmt_opt(k.gflops, 1),
            k.trials.to_string(),
            k.failed_trials.to_string(),
            match (&k.note, k.stop) {
                (Some(n), _) => format!("not refined: {n}"),
                (None, Some(s)) => s.as_str().into(),
                _ => "-".into(),
            },
        ]);
    }
    let mut out = t.render();
    let speedups: Vec<f64> = r.kernels.iter().filter_map(|k| k.speedup).collect();
    let geo = if speedups.is_empty() {
        f64::NAN
    } else {
        (speedups.iter().map(|s| s.ln()).sum::<f64>() / speedups.len() as f64).exp()
    };
    let improved = speedups.iter().filter(|&&s| s > 1.0).count();
    out.push_str(&format!(
        "\nhost {}: {} kernel(s) refined, {improved} faster, geometric-mean speedup {geo:.2}x over the start; {} trials in {:.1} s\n",
        r.host,
        speedups.len(),
        r.trials,
        r.seconds
    ));
    if r.interrupted {
        out.push_str("interrupted: every trial measured so far is stored\n");
    }
    out
}

pub fn run(store: &mut Store, args: &RefineArgs) -> CliResult {
    let chosen = [
        args.all,
        args.workload.is_some(),
        args.class.is_some(),
        args.model.is_some(),
    ];
    if !chosen.iter().any(|&c| c) {
        return Err(CliError {
            message: "say which workloads: --workload SIG, --class C, --model M.onnx or --all"
                .into(),
            code: 2,
        });
    }
    let mut opts = args.options()?;
    if args.workers.is_some() && args.dry_run {
        return Err(CliError {
            message: "--workers and --dry-run: workers store every trial they measure".into(),
            code: 2,
        });
    }
    if let Some(model) = &args.model {
        return super::apply::run(
            store,
            &super::apply::ApplyArgs {
                model: ModelArgs {
                    layout_plan: args.layout_plan.clone().unwrap_or_else(|| "auto".into()),
                    ..ModelArgs::for_model(model.clone(), "auto")
                },
                top_k: args.top_k,
                time_budget: 1e9,
                // refine --model is transfer + Droplet, run as it always was
                transfer_only: true,
                transfer_apart: false,
                e2e_runs: 0,
                no_model_choice: true,
                timeout: args.timeout,
                droplet: args.trials_per_kernel.max(1),
                tune: 0,
                isolation: args.isolation.clone(),
                workers: args.workers.clone(),
                dry_run: args.dry_run,
                json: args.json,
            },
        );
    }
    let selection = Selection {
        signature_prefix: args.workload.clone(),
        class: args.class.clone(),
        limit: args.limit,
    };
    let jobs = plan(store, &selection, &opts)?;
    if jobs.is_empty() {
        return Err(CliError {
            message: "no workload with a valid CPU record matches".into(),
            code: 1,
        });
    }
    let what = format!(
        "refine {}",
        super::worker::selection_text(args.workload.as_deref(), args.class.as_deref())
    );
    let remote = super::worker::Remote::start(store, args.workers.as_deref(), &what, "droplet")?;
    opts.remote = remote.as_ref().map(|r| r.shared());
    let report = super::progress::track(|progress| {
        super::with_sink_or_remote(store, args.dry_run, remote.as_ref(), |sink| {
            refine_jobs(&jobs, &opts, sink, progress)
        })
    });
    if let Some(r) = &remote {
        r.finish(ttdb_tuning::search::interrupt::requested())?;
    }
    let report = report?;
    super::progress::print_report(&report, report.interrupted, args.json, render_refine)
}
