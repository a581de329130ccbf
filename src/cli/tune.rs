//! `ttdb tune`: Ansor-style search on this machine for stored workloads
//! (`ttdb_tuning::tune::search`), each seeded with its stored records, then optionally Droplet.
//! This file parses and renders.
use super::table::{fmt_opt, io_shapes, Table};
use super::{CliError, CliResult};
use std::path::PathBuf;
use std::time::Duration;
use ttdb_backend::measure::runner::Caches;
use ttdb_store::store::Store;
use ttdb_tuning::tune::refine::{plan, Selection};
use ttdb_tuning::tune::search::{tune_jobs, TuneOptions, TuneReport};

#[derive(clap::Args, Debug)]
pub struct TuneArgs {
    /// An ONNX model: tune every tunable kernel, the task scheduler sharing `--trials`
    /// among them (seeded with the schedules `apply` would transfer).
    #[arg(value_name = "MODEL.onnx")]
    pub model: Option<PathBuf>,
    /// Layout of the model's kernels (nchwc, nhwc, auto).
    #[arg(long, default_value = "auto")]
    pub layout: String,
    /// With MODEL: shape of a graph input with symbolic dims, NAME=d0,d1,... (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", requires = "model")]
    pub input_shape: Vec<String>,
    /// With MODEL: target -mcpu, which sets the SIMD lanes of the NCHWc fallback blocking
    /// (16 AVX-512, 8 AVX2, 4 without -mcpu, as TVM's `llvm` target does).
    #[arg(long, requires = "model")]
    pub mcpu: Option<String>,
    /// With MODEL: SIMD 32-bit lanes of the NCHWc blocking (overrides --mcpu).
    #[arg(long, requires = "model")]
    pub lanes: Option<i64>,
    /// With MODEL: N-D MatMul as a batch_matmul of the right operand as it is ([B, K, N],
    /// transpose_b=False), as TVM's ONNX frontend with `use_nt_batch_matmul=False` emits
    /// (default: of the transposed operand, [B, N, K]); as for `ttdb kernels`.
    #[arg(long, requires = "model")]
    pub no_nt_batch_matmul: bool,
    /// With a model: NCHWc blocking planned for the whole graph (`planned`, pinned; `replan`
    /// plans again), by conv as TVM does (`tophub`), or `auto`: the pinned plan, else
    /// TopHub's where the database holds more of the model under it, else planned; as for
    /// `ttdb kernels`.
    #[arg(
        long,
        default_value = "auto",
        value_name = "auto|planned|replan|tophub",
        requires = "model"
    )]
    pub layout_plan: String,
    /// With MODEL: write the tuning curve (trial, wall time, kernel, its best ms, model ms).
    #[arg(long, value_name = "out.csv")]
    pub curve: Option<PathBuf>,
    /// With MODEL: draw the tuning curve as an SVG chart (best model latency against trials
    /// and against wall time).
    #[arg(long, value_name = "out.svg", requires = "model")]
    pub plot: Option<PathBuf>,
    /// Only workloads whose signature starts with this hex prefix.
    #[arg(long)]
    pub workload: Option<String>,
    /// Only this op class (or class prefix chain).
    #[arg(long)]
    pub class: Option<String>,
    /// Every workload with a valid CPU record.
    #[arg(long)]
    pub all: bool,
    /// At most this many workloads.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Measured search trials: per workload with --workload/--class/--all (default 200),
    /// for the whole model with MODEL (default 64 per kernel; 0: no search, only the choice
    /// in the model among the stored records, and the end-to-end run).
    #[arg(long)]
    pub trials: Option<usize>,
    /// Candidates measured per round.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Random states sampled in the first round.
    #[arg(long, default_value_t = 128)]
    pub population: usize,
    /// Wall-clock budget in seconds: per workload, or for the whole model.
    #[arg(long)]
    pub time_budget: Option<f64>,
    /// Droplet trials after the search (0: none).
    #[arg(long, default_value_t = 0)]
    pub droplet: usize,
    /// Stored records per source that seed the search, which also starts from the default
    /// schedule `ttdb run` would use; with MODEL, 0 starts from random states only.
    #[arg(long, default_value_t = 5)]
    pub seeds: usize,
    /// With MODEL: kernels keep their bests to themselves (by default each new best is
    /// offered to the model's other kernels of its class, adapted to their shapes, and
    /// measured in their next round).
    #[arg(long, requires = "model")]
    pub no_sharing: bool,
    /// Per-run timeout in seconds (at most).
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Time candidates with every argument but the first evicted from the caches before
    /// each run (TVM's `enable_cpu_cache_flush`). Cold timings are longer than warm ones and
    /// rank with them: tune into a database without records of the same kernels timed
    /// otherwise.
    #[arg(long, conflicts_with = "cold_weights")]
    pub flush_cache: bool,
    /// Time candidates with their weights evicted from the caches before each run when they
    /// fill a core's L2, as a kernel meets them inside a model whose weights exceed the
    /// caches; the input and output stay warm. The same caveat as `--flush-cache`.
    #[arg(long)]
    pub cold_weights: bool,
    /// Seed of the search's random choices.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
    /// Rank candidates without the CPU draft filter (for comparisons).
    #[arg(long)]
    pub no_draft_filter: bool,
    /// Rank candidates without the learned cost model (for comparisons).
    #[arg(long)]
    pub no_cost_model: bool,
    /// Draw every initial tile size uniformly, as TVM does, instead of half of a vector
    /// split's from those that fill whole vectors (for ablations).
    #[arg(long, hide = true)]
    pub uniform_draws: bool,
    /// Start the cost model cold, ignoring (and not replacing) the one stored for this
    /// host class.
    #[arg(long)]
    pub cold_model: bool,
    #[command(flatten)]
    pub isolation: super::IsolationArgs,
    /// Measure on `ttdb worker` processes of this host class (default: this machine's)
    /// through the database's queue instead of here; they store every trial.
    #[arg(long, value_name = "HOST-CLASS", num_args = 0..=1, default_missing_value = "")]
    pub workers: Option<String>,
    /// Do not store the trials (nor the cost model).
    #[arg(long)]
    pub dry_run: bool,
    /// With MODEL: at the end, time this many runs of the tuned model here, end to end as
    /// `ttdb run --repeat` does (the glue between kernels included); 0: none.
    #[arg(long, default_value_t = 20, value_name = "N", requires = "model")]
    pub e2e_runs: usize,
    /// With MODEL: keep each kernel's cheapest record by tuned cost, instead of timing its
    /// few best inside the model after the search and pinning the fastest there.
    #[arg(long, requires = "model")]
    pub no_model_choice: bool,
    /// Print the result as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

impl TuneArgs {
    fn options(&self) -> Result<TuneOptions, CliError> {
        let mut o = TuneOptions::default();
        o.refine.isolation = self.isolation.isolation()?;
        o.refine.target = super::machine().target.clone();
        o.search.trials = self.trials.unwrap_or(200);
        o.search.batch = self.batch.max(1);
        o.search.population = self.population.max(1);
        o.search.seed = self.seed;
        o.search.draft_filter = !self.no_draft_filter;
        o.search.learned_model = !self.no_cost_model;
        o.search.vector_filling_draws = !self.uniform_draws;
        o.search.warm_start = !self.cold_model;
        o.search.max_timeout = Duration::from_secs_f64(self.timeout.max(0.1));
        o.search.time_budget = self
            .time_budget
            .map(|s| Duration::from_secs_f64(s.max(0.0)));
        o.droplet_trials = self.droplet;
        o.refine.starts = self.seeds.max(1);
        o.refine.caches = if self.flush_cache {
            Caches::ColdButFirst
        } else if self.cold_weights {
            Caches::cold_weights(&super::machine().target)
        } else {
            Caches::Warm
        };
        o.refine.droplet.max_timeout = o.search.max_timeout;
        Ok(o)
    }
}

pub fn render_tune(r: &TuneReport, peak_gflops: Option<f64>) -> String {
    let mut t = Table::new(&[
        "workload",
        "class",
        "shapes",
        ">sketches",
        ">seeds",
        ">trials",
        ">failed",
        ">seed ms",
        ">searched ms",
        ">best ms",
        ">GFLOP/s",
        ">% peak",
        "stopped",
    ]);
    for k in &r.kernels {
        t.row(vec![
            k.signature[..12.min(k.signature.len())].to_string(),
            k.op_class.clone(),
            io_shapes(&k.inputs, &k.output),
            k.sketches.to_string(),
            k.seeds.to_string(),
            (k.trials + k.droplet_trials).to_string(),
            k.failed_trials.to_string(),
            fmt_opt(k.seed_ms, 3),
            fmt_opt(k.searched_ms, 3),
            fmt_opt(k.best_ms, 3),
            fmt_opt(k.gflops, 1),
            fmt_opt(k.gflops.zip(peak_gflops).map(|(g, p)| 100.0 * g / p), 1),
            match (&k.note, k.stop) {
                (Some(n), _) => n.clone(),
                (None, Some(s)) => s.as_str().into(),
                _ => "-".into(),
            },
        ]);
    }
    let mut out = t.render();
    let sum: f64 = r.kernels.iter().filter_map(|k| k.best_ms).sum();
    out.push_str(&format!(
        "\nhost {}: {} kernel(s), kernel sum {sum:.3} ms; {} trials in {:.1} s\n",
        r.host,
        r.kernels.len(),
        r.trials,
        r.seconds
    ));
    out.push_str(&super::table::cost_model_line(&r.cost_model));
    if r.interrupted {
        out.push_str("interrupted: every trial measured so far is stored\n");
    }
    out
}

pub fn run(store: &mut Store, args: &TuneArgs) -> CliResult {
    if args.trials == Some(0) {
        // With a model, no search: the choice in the model on the stored records, and the
        // end-to-end run.
        let clash = [
            (args.model.is_none(), "without MODEL"),
            (args.workers.is_some(), "with --workers"),
            (args.dry_run, "with --dry-run"),
            (args.curve.is_some(), "with --curve"),
            (args.plot.is_some(), "with --plot"),
        ];
        if let Some((_, what)) = clash.iter().find(|c| c.0) {
            return Err(CliError {
                message: format!(
                    "--trials 0 {what}: --trials 0 searches nothing, and only re-chooses a model's \
                     stored schedules in the model (`tune MODEL --trials 0`)"
                ),
                code: 2,
            });
        }
    }
    if args.workers.is_some() && args.dry_run {
        return Err(CliError {
            message: "--workers and --dry-run: workers store every trial they measure".into(),
            code: 2,
        });
    }
    let what = match &args.model {
        Some(m) => format!("tune {}", m.display()),
        None => format!(
            "tune {}",
            super::worker::selection_text(args.workload.as_deref(), args.class.as_deref())
        ),
    };
    let what = format!(
        "{what} --trials {}",
        args.trials.map_or("default".into(), |t| t.to_string())
    );
    let remote = super::worker::Remote::start(store, args.workers.as_deref(), &what, "search")?;
    let mut base = args.options()?;
    base.refine.remote = remote.as_ref().map(|r| r.shared());
    let outcome = tune(store, args, base, remote.as_ref());
    match &remote {
        Some(r) => {
            let interrupted = ttdb_tuning::search::interrupt::requested();
            let ended = r.finish(interrupted);
            outcome.and(ended)
        }
        None => outcome,
    }
}

fn tune(
    store: &mut Store,
    args: &TuneArgs,
    base: TuneOptions,
    remote: Option<&super::worker::Remote>,
) -> CliResult {
    if let Some(m) = &args.model {
        return super::tune_model::run(
            store,
            &super::tune_model::ModelRun {
                model: super::kernels::ModelArgs {
                    input_shape: args.input_shape.clone(),
                    mcpu: args.mcpu.clone(),
                    lanes: args.lanes,
                    no_nt_batch_matmul: args.no_nt_batch_matmul,
                    layout_plan: args.layout_plan.clone(),
                    ..super::kernels::ModelArgs::for_model(m.clone(), &args.layout)
                },
                base,
                remote,
                trials: args.trials,
                droplet: args.droplet,
                seeds: args.seeds,
                no_sharing: args.no_sharing,
                curve: args.curve.as_deref(),
                plot: args.plot.as_deref(),
                dry_run: args.dry_run,
                e2e_runs: args.e2e_runs,
                model_choice: !args.no_model_choice,
                json: args.json,
            },
        );
    }
    if !(args.all || args.workload.is_some() || args.class.is_some()) {
        return Err(CliError {
            message: "say which workloads: --workload SIG, --class C or --all".into(),
            code: 2,
        });
    }
    let opts = base;
    let selection = Selection {
        signature_prefix: args.workload.clone(),
        class: args.class.clone(),
        limit: args.limit,
    };
    let jobs = plan(store, &selection, &opts.refine)?;
    if jobs.is_empty() {
        return Err(CliError {
            message: "no workload with a valid CPU record matches".into(),
            code: 1,
        });
    }
    let report = super::progress::track(|progress| {
        super::with_sink_or_remote(store, args.dry_run, remote, |sink| {
            tune_jobs(&jobs, &opts, sink, progress)
        })
    })?;
    super::progress::print_report(&report, report.interrupted, args.json, |r| {
        render_tune(r, super::progress::peak_gflops())
    })
}
