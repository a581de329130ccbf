//! `ttdb tune MODEL.onnx`: the model mode of `tune` (`ttdb_tuning::tune::model`). Parses, calls
//! the library, renders the per-kernel table, the kernel sum, the curve file and its plot,
//! then runs the tuned model end to end here (`ttdb run`'s timing, the glue included).
use super::kernels::ModelArgs;
use super::match_cmd::match_layouts;
use super::table::{fmt_opt, io_shapes, Table};
use super::{CliError, CliResult};
use std::io::Write;
use std::path::Path;
use ttdb_store::store::Store;
use ttdb_tuning::matcher::ModelMatch;
use ttdb_tuning::run::in_model::{self, InModelOptions, InModelReport};
use ttdb_tuning::run::{time_on_deterministic_inputs, ModelRun as ModelRunner, Schedule, Timing};
use ttdb_tuning::tune::model::{tune_model, ModelTuneOptions, ModelTuneReport};
use ttdb_tuning::tune::search::TuneOptions;

pub fn render_model_tune(r: &ModelTuneReport, peak_gflops: Option<f64>) -> String {
    let mut t = Table::new(&[
        "kernel",
        "class",
        "shapes",
        ">x",
        ">seeds",
        ">rounds",
        ">trials",
        ">failed",
        ">best ms",
        ">GFLOP/s",
        ">% peak",
        "best from",
        "note",
    ]);
    for k in &r.kernels {
        t.row(vec![
            k.name.clone(),
            k.class.clone(),
            io_shapes(&k.inputs, &k.output),
            k.multiplicity.to_string(),
            k.seeds.to_string(),
            k.rounds.to_string(),
            (k.trials + k.droplet_trials).to_string(),
            k.failed_trials.to_string(),
            fmt_opt(k.best_ms, 3),
            fmt_opt(k.gflops, 1),
            fmt_opt(k.gflops.zip(peak_gflops).map(|(g, p)| 100.0 * g / p), 1),
            k.best_from.clone().unwrap_or_else(|| "-".into()),
            k.note.clone().unwrap_or_default(),
        ]);
    }
    let mut out = t.render();
    out.push_str(&format!(
        "\n{} on {}: kernel sum {:.3} ms over {} kernel(s){}; {} trials in {:.1} s (stopped: {:?})\n",
        r.model,
        r.host,
        r.kernel_sum_ms,
        r.kernels.len() - r.kernels_without_schedule,
        if r.kernels_without_schedule > 0 {
            format!(", {} without a verified schedule (not in the sum)", r.kernels_without_schedule)
        } else {
            String::new()
        },
        r.trials,
        r.seconds,
        r.stop
    ));
    out.push_str(&super::table::cost_model_line(&r.cost_model));
    if r.interrupted {
        out.push_str("interrupted: every trial measured so far is stored\n");
    }
    out
}

fn write_curve(path: &Path, r: &ModelTuneReport) -> std::io::Result<()> {
    let mut f = ttdb_format::atomic_file::AtomicFile::create(path)?;
    writeln!(f, "trial,wall_s,kernel,kernel_name,kernel_best_ms,model_ms")?;
    for p in &r.curve {
        let name = r
            .kernels
            .iter()
            .filter(|k| k.sketches > 0)
            .nth(p.kernel)
            .map_or("", |k| k.name.as_str());
        writeln!(
            f,
            "{},{:.3},{},{},{:.6},{:.6}",
            p.trial, p.wall_s, p.kernel, name, p.kernel_best_ms, p.model_ms
        )?;
    }
    f.commit()
}

/// What `tune MODEL.onnx` was asked (parsed by `super::tune`).
pub struct ModelRun<'a> {
    /// The model and how to read it (layout, input shapes, lanes).
    pub model: ModelArgs,
    /// Per-task options from the shared flags.
    pub base: TuneOptions,
    /// `--workers`: measured on the queue's workers.
    pub remote: Option<&'a super::worker::Remote>,
    pub trials: Option<usize>,
    pub droplet: usize,
    pub seeds: usize,
    /// `--no-sharing`: kernels do not offer their bests to the others of their class.
    pub no_sharing: bool,
    pub curve: Option<&'a Path>,
    /// `--plot`: the curve as an SVG chart (`super::plot`).
    pub plot: Option<&'a Path>,
    pub dry_run: bool,
    /// `--e2e-runs`: timed runs of the tuned model here at the end (0: none).
    pub e2e_runs: usize,
    /// Unless `--no-model-choice`: each kernel's schedule chosen by its time in the model.
    pub model_choice: bool,
    pub json: bool,
}

/// What `tune MODEL` prints: the tune, then the model run end to end with what it stored.
#[derive(serde::Serialize)]
struct TuneAndRun {
    /// None with `--trials 0` (no search).
    #[serde(flatten)]
    tune: Option<ModelTuneReport>,
    model_choice: ModelChoice,
    end_to_end: EndToEnd,
    /// The whole-graph blocking the kernels were tuned under (`--layout-plan`).
    layout_plan: Option<ttdb_onnx::onnx::LayoutPlan>,
}

/// The tuned model timed here by `ttdb run`'s timing, glue included; or why not.
#[derive(serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum EndToEnd {
    Measured {
        #[serde(flatten)]
        timing: Timing,
        /// Tunable kernels that ran a stored schedule, and those that ran the default one.
        stored_kernels: usize,
        default_kernels: usize,
    },
    NotMeasured(String),
}

/// How the end-to-end run after a tune is asked for.
pub(super) struct EndToEndRun<'a> {
    /// The model, and the layout the tune chose (`--layout auto` tries both).
    pub model: &'a ModelArgs,
    pub layout: &'a str,
    /// `--e2e-runs` (0: none).
    pub runs: usize,
    pub remote: Option<&'a super::worker::Remote>,
    pub dry_run: bool,
    pub interrupted: bool,
}

/// Why the tuned model cannot run here now (a dry run stored nothing, workers of another
/// class measured it, it was interrupted); None: it can.
fn not_runnable_here(e: &EndToEndRun) -> Option<String> {
    if e.interrupted {
        return Some("interrupted".into());
    }
    if e.dry_run {
        return Some("--dry-run stored nothing to run".into());
    }
    let here = super::machine().target.host.class();
    match e.remote {
        Some(r) if r.0.host_class != here => Some(format!(
            "tuned for host class {}, and this host is {here}: run `ttdb run` on one of those workers' machines",
            r.0.host_class
        )),
        _ => None,
    }
}

/// The model as the tune left it: its layout, and the plan it pinned (a `replan` tune
/// re-planned once, at its start).
fn tuned_model_args(e: &EndToEndRun) -> ModelArgs {
    ModelArgs {
        layout: Some(e.layout.to_string()),
        layout_plan: match e.model.layout_plan.as_str() {
            "replan" => "planned".into(),
            other => other.into(),
        },
        ..e.model.clone()
    }
}

/// Each kernel's schedule chosen among its few best by its time in the model
/// (`ttdb_tuning::run::in_model`), or why not.
#[derive(serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum ModelChoice {
    Chosen(InModelReport),
    NotChosen(String),
}

/// `refine`: the options of the searches that ran here, to measure alone the candidates the
/// choice makes (`in_model`'s rows variants).
pub(super) fn choose_in_model(
    store: &mut Store,
    e: &EndToEndRun,
    enabled: bool,
    refine: &ttdb_tuning::tune::refine::RefineOptions,
) -> Result<ModelChoice, CliError> {
    if !enabled {
        return Ok(ModelChoice::NotChosen("--no-model-choice".into()));
    }
    if let Some(why) = not_runnable_here(e) {
        return Ok(ModelChoice::NotChosen(why));
    }
    let model = tuned_model_args(e);
    let opts = super::run::run_options(&model, false, super::kernels::PlanDb::Read(store))?;
    let bar = super::progress_bar(0, "{spinner} {msg} {elapsed}");
    if let Some(b) = &bar {
        b.set_message("choosing each kernel's schedule among its best by its time in the model");
        b.enable_steady_tick(std::time::Duration::from_millis(200));
    }
    // Candidates are measured here, never on the queue's workers.
    let local = ttdb_tuning::tune::refine::RefineOptions {
        remote: None,
        ..refine.clone()
    };
    let r = in_model::choose_in_model(
        store,
        &model.model,
        &opts,
        &InModelOptions::default(),
        Some(&local),
    );
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(match r {
        Ok(r) => ModelChoice::Chosen(r),
        // The tune stands on its own (its trials are stored): a model `ttdb run` cannot
        // load yet, or a database that failed the choice, is a note.
        Err(why) => ModelChoice::NotChosen(why.to_string()),
    })
}

pub(super) fn render_model_choice(c: &ModelChoice) -> String {
    match c {
        ModelChoice::NotChosen(why) => format!("schedules chosen in the model: none ({why})\n"),
        ModelChoice::Chosen(r) if r.workloads.is_empty() => {
            "schedules chosen in the model: none (no kernel has two near-best records)\n".into()
        }
        ModelChoice::Chosen(r) => {
            let weighed: Vec<String> = (r.configurations.iter())
                .map(|c| format!("{} {:.3} ms", c.name, c.model_ms))
                .collect();
            format!(
                "schedules chosen in the model: {} of {} kernels run another than their cheapest record \
                 ({:.0} s)\n  the whole model on each choice: {}; taken: {}\n",
                r.changed,
                r.workloads.len(),
                r.seconds,
                weighed.join(", "),
                r.taken
            )
        }
    }
}

/// Runs the model as `ttdb run` would, on what the tune stored, unless there is nothing to
/// run for this host (a dry run, workers of another class) or the user asked for none.
pub(super) fn end_to_end(store: &Store, e: &EndToEndRun) -> Result<EndToEnd, CliError> {
    let not = |why: String| Ok(EndToEnd::NotMeasured(why));
    if e.runs == 0 {
        return not("--e2e-runs 0".into());
    }
    if let Some(why) = not_runnable_here(e) {
        return not(why);
    }
    let model = tuned_model_args(e);
    let opts = super::run::run_options(&model, false, super::kernels::PlanDb::Read(store))?;
    let mut bar = super::run::CompileBar(None);
    let loaded = ModelRunner::load_with_progress(&model.model, &opts, Some(store), &mut bar);
    if let Some(b) = bar.0.take() {
        b.finish_and_clear();
    }
    let model = match loaded {
        Ok(m) => m,
        // The tune stands on its own: a model `ttdb run` cannot load yet is a note.
        Err(e) => return not(format!("`ttdb run` cannot load it: {e}")),
    };
    let timing = time_on_deterministic_inputs(&model, e.runs, None).map_err(super::run::fail)?;
    let tunable = model.plan.iter().filter(|p| p.anchored);
    let stored_kernels = tunable
        .clone()
        .filter(|p| matches!(p.schedule, Schedule::Stored(_)))
        .count();
    Ok(EndToEnd::Measured {
        stored_kernels,
        default_kernels: tunable.count() - stored_kernels,
        timing,
    })
}

/// `kernel_sum_ms`: the tuned kernels' sum, when a search gave one.
pub(super) fn render_end_to_end(e: &EndToEnd, kernel_sum_ms: Option<f64>) -> String {
    match e {
        EndToEnd::NotMeasured(why) => format!("end to end: not measured ({why})\n"),
        EndToEnd::Measured {
            timing: t,
            stored_kernels,
            default_kernels,
        } => format!(
            "end to end here (as `ttdb run`, {} runs on {} threads): median {:.3} ms (min {:.3}, p90 {:.3}){}\n  \
             glue between the kernels {:.3} ms ({:.1}% of the kernel time); {stored_kernels} tunable kernels \
             on a stored schedule{}\n",
            t.runs,
            t.threads,
            t.median_ms,
            t.min_ms,
            t.p90_ms,
            kernel_sum_ms.map_or(String::new(), |k| format!(" against the kernel sum {k:.3} ms")),
            t.glue_ms,
            100.0 * t.glue_share,
            if *default_kernels > 0 {
                format!(", {default_kernels} on the default one")
            } else {
                String::new()
            }
        ),
    }
}

/// The model's kernels searched within `opts`, with the progress bar and Ctrl-C, storing
/// every trial (or queueing them with `remote`) unless `dry_run`.
pub(super) fn search_model(
    store: &mut Store,
    m: &ModelMatch,
    opts: &ModelTuneOptions,
    remote: Option<&super::worker::Remote>,
    dry_run: bool,
) -> Result<ModelTuneReport, CliError> {
    Ok(super::progress::track(|progress| {
        super::with_sink_or_remote(store, dry_run, remote, |sink| {
            tune_model(m, opts, sink, progress)
        })
    })?)
}

pub fn run(store: &mut Store, args: &ModelRun) -> CliResult {
    let model = args.model.model.as_path();
    let m = match_layouts(
        store,
        &args.model,
        super::match_cmd::host_match_options(),
        !args.dry_run,
    )?;
    if m.matches.is_empty() {
        return Err(CliError {
            message: format!("{}: no tunable kernel", model.display()),
            code: 1,
        });
    }
    let base = args.base.clone();
    let opts = ModelTuneOptions {
        trials: Some(args.trials.unwrap_or(64 * m.matches.len())),
        time_budget: base.search.time_budget,
        search: base.search,
        refine: base.refine,
        droplet_trials: args.droplet,
        seeds: args.seeds.max(1),
        share_bests: !args.no_sharing,
    };
    if args.trials == Some(0) {
        return choose_and_run(store, args, &m, &opts, None);
    }
    let report = search_model(store, &m, &opts, args.remote, args.dry_run)?;
    if let Some(path) = args.curve {
        write_curve(path, &report).map_err(|e| CliError {
            message: format!("{}: {e}", path.display()),
            code: 1,
        })?;
    }
    if let Some(path) = args.plot {
        let title = format!("ttdb tune {} on {}", report.model, report.host);
        super::plot::write_tune_plot(path, &title, &report.curve)
            .map_err(|message| CliError { message, code: 1 })?;
    }
    choose_and_run(store, args, &m, &opts, Some(report))
}

/// After the search (`report`; None: `--trials 0`, none): the choice in the model, the
/// end-to-end run, and the report.
fn choose_and_run(
    store: &mut Store,
    args: &ModelRun,
    m: &ModelMatch,
    opts: &ModelTuneOptions,
    report: Option<ModelTuneReport>,
) -> CliResult {
    let interrupted = report.as_ref().is_some_and(|r| r.interrupted);
    let tuned = EndToEndRun {
        model: &args.model,
        layout: &m.list.layout,
        runs: args.e2e_runs,
        remote: args.remote,
        dry_run: args.dry_run,
        interrupted,
    };
    let model_choice = choose_in_model(store, &tuned, args.model_choice, &opts.refine)?;
    let end_to_end = end_to_end(store, &tuned)?;
    let out = TuneAndRun {
        tune: report,
        model_choice,
        end_to_end,
        layout_plan: m.list.layout_plan.clone(),
    };
    super::progress::print_report(&out, interrupted, args.json, |r| {
        let mut s = match &r.tune {
            Some(t) => render_model_tune(t, super::progress::peak_gflops()),
            None => "no search (--trials 0): the stored records as they are\n".into(),
        };
        s.push_str(&super::kernels::render_layout_plan(&m.list));
        s.push_str(&render_model_choice(&r.model_choice));
        let kernel_sum = r.tune.as_ref().map(|t| t.kernel_sum_ms);
        s.push_str(&render_end_to_end(&r.end_to_end, kernel_sum));
        s
    })
}
