//! `ttdb apply MODEL.onnx`: fast, verified kernels for a model from the database.
use super::kernels::ModelArgs;
use super::match_cmd::match_layouts;
use super::table::{fmt_opt, io_shapes, Table};
use super::{CliError, CliResult};
use std::time::{Duration, Instant};
use ttdb_store::store::Store;
use ttdb_tuning::matcher::ModelMatch;
use ttdb_tuning::tune::model::{ModelTuneOptions, ModelTuneReport};
use ttdb_tuning::tune::refine::RefineOptions;
use ttdb_tuning::tune::{apply, ApplyOptions, ApplyReport};

#[derive(clap::Args, Debug)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Transferred candidates measured per kernel (besides the untuned default).
    #[arg(long, default_value_t = 3)]
    pub top_k: usize,
    /// Wall-clock budget in seconds for the whole apply: a search of the model's kernels
    /// whose first round per kernel is its transferred candidates and its default (with
    /// `--transfer-only`: the transfer alone; kernels past the budget keep their default).
    #[arg(
        long,
        visible_alias = "budget-seconds",
        default_value_t = 300.0,
        value_name = "S"
    )]
    pub time_budget: f64,
    /// Only the transfer: measure each kernel's candidates and keep the fastest, no search.
    #[arg(long)]
    pub transfer_only: bool,
    /// Measure the transfer on its own, then search with what is left (apply before the
    /// transferred schedules became the search's first round; for `benches/apply_vs.sh`).
    #[arg(long, hide = true)]
    pub transfer_apart: bool,
    /// At the end, time this many runs of the model here, end to end as `ttdb run --repeat`
    /// does (the glue between kernels included); 0: none.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub e2e_runs: usize,
    /// Keep each kernel's cheapest record by tuned cost, instead of timing its few best
    /// inside the model at the end and pinning the fastest there (as `tune MODEL` does;
    /// never with `--transfer-only`).
    #[arg(long)]
    pub no_model_choice: bool,
    /// Per-run timeout in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Refine each kernel's chosen transferred schedule on this machine with up to N Droplet
    /// trials (TT + Droplet; 0: no refinement). The transfer is then measured on its own,
    /// before the search.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub droplet: usize,
    /// Search the kernels no transferred schedule sped up (no candidate, or none faster than
    /// the default) with N trials each (0: no search). The transfer is then measured on its
    /// own, before the search.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub tune: usize,
    #[command(flatten)]
    pub isolation: super::IsolationArgs,
    /// Measure on `ttdb worker` processes of this host class (default: this machine's)
    /// through the database's queue instead of here; they store every trial.
    #[arg(long, value_name = "HOST-CLASS", num_args = 0..=1, default_missing_value = "")]
    pub workers: Option<String>,
    /// Do not store the measured choices in the database.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the result as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

pub fn render_apply(r: &ApplyReport) -> String {
    let droplet = r.transferred_total_ms.is_some();
    let mut cols = vec![
        "kernel",
        "class",
        "shapes",
        ">count",
        "tier",
        "source",
        ">untuned ms",
    ];
    if droplet {
        cols.extend([">transferred ms", ">droplet trials"]);
    }
    cols.extend([">tuned ms", ">speedup", "verified"]);
    let mut t = Table::new(&cols);
    for k in &r.kernels {
        let mut row = vec![
            k.name.clone(),
            k.class.clone(),
            io_shapes(&k.inputs, &k.output),
            k.multiplicity.to_string(),
            k.tier.as_str().into(),
            match k.chosen_tier {
                Some(tier) => format!("{} {}", tier.as_str(), k.chosen),
                None if k.chosen.starts_with("search") => k.chosen.clone(),
                None => "default".into(),
            },
            fmt_opt(k.untuned_ms, 3),
        ];
        if droplet {
            row.push(fmt_opt(k.transferred_ms, 3));
            row.push(
                k.droplet
                    .as_ref()
                    .map_or("-".into(), |d| d.trials.to_string()),
            );
        }
        row.extend([
            fmt_opt(k.tuned_ms, 3),
            k.speedup
                .map(|s| format!("{s:.1}x"))
                .unwrap_or_else(|| "-".into()),
            if k.verified {
                "yes".into()
            } else {
                "no".into()
            },
        ]);
        t.row(row);
    }
    let mut out = t.render();
    let tried: usize = r.kernels.iter().map(|k| k.trials.len()).sum();
    let failed: Vec<String> = r
        .kernels
        .iter()
        .flat_map(|k| {
            k.trials.iter().filter(|t| !t.verified).map(move |t| {
                format!(
                    "  {} <- {}: {}",
                    k.name,
                    t.source,
                    t.error.as_deref().unwrap_or("?")
                )
            })
        })
        .collect();
    out.push_str(&format!(
        "\nmodel {} ({}): {} tuned kernels, {} candidates measured ({} failed)\n",
        r.model,
        r.layout,
        r.kernels.len(),
        tried,
        failed.len()
    ));
    out.push_str(&format!(
        "latency of the tuned kernels (sum of latency x count): untuned {:.3} ms, tuned {:.3} ms, speedup {:.2}x\n",
        r.untuned_total_ms, r.tuned_total_ms, r.speedup
    ));
    if let Some(tt) = r.transferred_total_ms {
        out.push_str(&format!(
            "droplet: {} trials in {:.1} s; transferred schedules {tt:.3} ms -> refined {:.3} ms ({:.2}x)\n",
            r.droplet_trials,
            r.droplet_seconds,
            r.tuned_total_ms,
            tt / r.tuned_total_ms
        ));
        let notes: Vec<String> = r
            .kernels
            .iter()
            .filter_map(|k| {
                Some(format!(
                    "  {}: {}",
                    k.name,
                    k.droplet.as_ref()?.note.as_ref()?
                ))
            })
            .collect();
        if !notes.is_empty() {
            out.push_str("not refined:\n");
            out.push_str(&notes.join("\n"));
            out.push('\n');
        }
    }
    if r.interrupted {
        out.push_str("interrupted: later kernels keep their default schedule; everything measured is stored\n");
    }
    out.push_str(&format!(
        "search time {:.1} s{}; {} simple kernels (layout transforms, concat, element-wise) not timed\n",
        r.search_seconds,
        if r.budget_exhausted { " (budget exhausted)" } else { "" },
        r.untimed_kernels
    ));
    let none = r
        .kernels
        .iter()
        .filter(|k| k.tier == ttdb_tuning::matcher::Tier::None && k.search.is_none())
        .count();
    if none > 0 {
        out.push_str(&format!(
            "{none} kernel(s) had no candidate in the database: the transfer leaves them on the \
             untuned default (the search after it, or `--tune N` within it, searches them)\n"
        ));
    }
    let searched: Vec<_> = r.kernels.iter().filter_map(|k| k.search.as_ref()).collect();
    if !searched.is_empty() {
        out.push_str(&format!(
            "searched {} kernel(s) nothing transferred sped up: {} trials in {:.1} s\n",
            searched.len(),
            searched.iter().map(|s| s.trials).sum::<usize>(),
            searched.iter().map(|s| s.seconds).sum::<f64>()
        ));
    }
    if !failed.is_empty() {
        out.push_str("candidates that failed:\n");
        out.push_str(&failed.join("\n"));
        out.push('\n');
    }
    out
}

/// What `apply` prints: the transfer (when measured on its own), the search after it, and
/// the model run end to end.
#[derive(serde::Serialize)]
struct Applied {
    #[serde(flatten)]
    transfer: Option<ApplyReport>,
    search: Search,
    model_choice: super::tune_model::ModelChoice,
    end_to_end: super::tune_model::EndToEnd,
    /// The whole-graph blocking the kernels were matched and tuned under (`--layout-plan`).
    layout_plan: Option<ttdb_onnx::onnx::LayoutPlan>,
}

/// Ctrl-C stopped the transfer or the search.
fn interrupted(transfer: Option<&ApplyReport>, search: &Search) -> bool {
    transfer.is_some_and(|t| t.interrupted) || matches!(search, Search::Ran(r) if r.interrupted)
}

/// The search after the transfer, or why there was none.
#[derive(serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum Search {
    Ran(ModelTuneReport),
    NotRun(String),
}

/// The search options of `--tune N` and of the search after the transfer: this machine's
/// target, the isolation and timeout asked for, and the queue with `--workers`.
fn search_options(
    args: &ApplyArgs,
    remote: Option<&super::worker::Remote>,
) -> Result<ttdb_tuning::tune::search::TuneOptions, CliError> {
    let mut t = ttdb_tuning::tune::search::TuneOptions::default();
    t.refine.isolation = args.isolation.isolation()?;
    t.refine.target = super::machine().target.clone();
    t.refine.remote = remote.map(|r| r.shared());
    t.search.max_timeout = Duration::from_secs_f64(args.timeout);
    Ok(t)
}

/// Less than this left of the time budget after a transfer measured on its own: no search
/// (every kernel would not even get its first round).
const MIN_SEARCH: Duration = Duration::from_secs(5);

/// The transfer is measured on its own, before any search: with `--transfer-only`, and with
/// `--droplet` or `--tune` (which refine or search within it). Otherwise the transferred
/// schedules are the search's seeds, measured in each kernel's first round: measured on its
/// own, the transfer took 54 of resnet34's 600 s at 1.2 candidates/s, where the search
/// measures 7.5 trials/s, and the search measured the same candidates again.
fn transfer_first(args: &ApplyArgs) -> bool {
    args.transfer_only || args.transfer_apart || args.droplet > 0 || args.tune > 0
}

/// The model's kernels searched until `left` is spent. Each kernel's first round is its
/// transferred schedules (the top `--top-k` matches) and its default; the task scheduler
/// gives the rest of the time to the kernels where it pays.
fn seeded_search(
    store: &mut Store,
    args: &ApplyArgs,
    m: &ModelMatch,
    left: Duration,
    remote: Option<&super::worker::Remote>,
) -> Result<ModelTuneReport, CliError> {
    let mut t = search_options(args, remote)?;
    t.search.time_budget = Some(left);
    t.search.seeds_alone_first = true;
    let opts = ModelTuneOptions {
        trials: None,
        time_budget: Some(left),
        search: t.search,
        refine: t.refine,
        droplet_trials: 0,
        seeds: args.top_k,
        share_bests: true,
    };
    super::tune_model::search_model(store, m, &opts, remote, args.dry_run)
}

/// Without a transfer of its own: the seeded search with the whole budget left.
fn search_with_seeds(
    store: &mut Store,
    args: &ApplyArgs,
    m: &ModelMatch,
    left: Duration,
    remote: Option<&super::worker::Remote>,
) -> Result<(Option<ApplyReport>, Search), CliError> {
    if m.matches.is_empty() {
        return Ok((None, Search::NotRun("no tunable kernel".into())));
    }
    if left.is_zero() {
        return Ok((
            None,
            Search::NotRun("the time budget was spent matching".into()),
        ));
    }
    let r = seeded_search(store, args, m, left, remote)?;
    Ok((None, Search::Ran(r)))
}

/// The transfer measured on its own (`transfer_first`), then, unless `--transfer-only`, the
/// seeded search with what is left of the budget.
fn transfer_then_search(
    store: &mut Store,
    args: &ApplyArgs,
    m: &ModelMatch,
    started: Instant,
    time_budget: Duration,
    remote: Option<&super::worker::Remote>,
) -> Result<(Option<ApplyReport>, Search), CliError> {
    let mut opts = ApplyOptions {
        top_k: args.top_k,
        budget: time_budget.saturating_sub(started.elapsed()),
        lanes: super::machine().target.lanes() as i64,
        ..ApplyOptions::default()
    };
    let timeout = Some(Duration::from_secs_f64(args.timeout));
    let isolation = args.isolation.isolation()?;
    opts.eval.measure.timeout = timeout;
    opts.default_eval.measure.timeout = timeout;
    opts.eval.isolation = isolation.clone();
    opts.default_eval.isolation = isolation.clone();
    let target = &super::machine().target;
    for e in [&mut opts.eval, &mut opts.default_eval] {
        e.codegen = target.codegen_options();
        e.profile = target.profile;
    }
    if !args.transfer_only {
        // The search that follows times the transferred choices again (they seed it): time
        // the candidates as the search times its own, so that a short budget is not all
        // spent on precise timings (mnasnet1_0's transfer took 62 of 60 s, 0.5 s a candidate).
        let quick = ttdb_tuning::tune::search::TuneOptions::default().refine;
        for e in [&mut opts.eval, &mut opts.default_eval] {
            e.measure.repeat = quick.samples;
            e.measure.min_repeat_ms = quick.min_repeat_ms;
        }
    }
    if args.droplet > 0 {
        let mut r = RefineOptions {
            isolation: isolation.clone(),
            target: target.clone(),
            ..RefineOptions::default()
        };
        r.droplet.max_trials = args.droplet;
        r.droplet.max_timeout = Duration::from_secs_f64(args.timeout);
        opts.droplet = Some(r);
    }
    if args.tune > 0 {
        let mut t = search_options(args, remote)?;
        t.search.trials = args.tune;
        opts.tune = Some(t);
    }
    if let Some(r) = remote {
        opts.remote = Some(r.shared());
        if let Some(d) = opts.droplet.as_mut() {
            d.remote = Some(r.shared());
        }
    }
    let report = super::progress::track(|progress| {
        super::with_sink_or_remote(store, args.dry_run, remote, |sink| {
            apply(m, &opts, sink, progress)
        })
    })?;
    let not = |why: &str| Search::NotRun(why.to_string());
    let left = time_budget.saturating_sub(started.elapsed());
    let search = if args.transfer_only {
        not("--transfer-only")
    } else if report.interrupted {
        not("interrupted")
    } else if m.matches.is_empty() {
        not("no tunable kernel")
    } else if left < MIN_SEARCH {
        Search::NotRun(format!(
            "{:.1} s of the {:.0} s time budget left (raise --time-budget)",
            left.as_secs_f64(),
            time_budget.as_secs_f64()
        ))
    } else {
        Search::Ran(seeded_search(store, args, m, left, remote)?)
    };
    Ok((Some(report), search))
}

/// What the seeds did, for the seeded search's report: how many kernels had transferred
/// schedules, and how many ended on one.
fn render_seeds(m: &ModelMatch, r: &ModelTuneReport, top_k: usize) -> String {
    use ttdb_tuning::matcher::Tier;
    let count = |t: Tier| m.matches.iter().filter(|k| k.tier == t).count();
    let from = |f: &dyn Fn(&str) -> bool| {
        r.kernels
            .iter()
            .filter(|k| k.best_from.as_deref().is_some_and(f))
            .count()
    };
    format!(
        "transfer: {} of {} kernels matched stored schedules ({} exact, {} class); their top {} \
         and the default were each kernel's first round\nbest schedules: {} transferred, {} \
         the default, {} found by the search\n",
        m.matches.len() - count(Tier::None),
        m.matches.len(),
        count(Tier::Exact),
        count(Tier::Class),
        top_k,
        from(&|f| f.starts_with("exact") || f.starts_with("class")),
        from(&|f| f == "default"),
        from(&|f| f == "search"),
    )
}

pub fn run(store: &mut Store, args: &ApplyArgs) -> CliResult {
    if args.workers.is_some() && args.dry_run {
        return Err(CliError {
            message: "--workers and --dry-run: workers store every trial they measure".into(),
            code: 2,
        });
    }
    let started = Instant::now();
    let time_budget = Duration::from_secs_f64(args.time_budget.max(0.0));
    let m = match_layouts(
        store,
        &args.model,
        super::match_cmd::host_match_options(),
        !args.dry_run,
    )?;
    let what = format!("apply {}", args.model.model.display());
    let remote = super::worker::Remote::start(store, args.workers.as_deref(), &what, "apply")?;
    let phases = if transfer_first(args) {
        transfer_then_search(store, args, &m, started, time_budget, remote.as_ref())
    } else {
        let left = time_budget.saturating_sub(started.elapsed());
        search_with_seeds(store, args, &m, left, remote.as_ref())
    };
    let outcome = phases.and_then(|(transfer, search)| {
        let applied = super::tune_model::EndToEndRun {
            model: &args.model,
            layout: &m.list.layout,
            runs: args.e2e_runs,
            remote: remote.as_ref(),
            dry_run: args.dry_run,
            interrupted: interrupted(transfer.as_ref(), &search),
        };
        let model_choice = if args.transfer_only {
            super::tune_model::ModelChoice::NotChosen("--transfer-only".into())
        } else {
            let refine = search_options(args, None)?.refine;
            super::tune_model::choose_in_model(store, &applied, !args.no_model_choice, &refine)?
        };
        let end_to_end = super::tune_model::end_to_end(store, &applied)?;
        Ok(Applied {
            transfer,
            search,
            model_choice,
            end_to_end,
            layout_plan: m.list.layout_plan.clone(),
        })
    });
    let out = match &remote {
        Some(r) => {
            let ended = r.finish(ttdb_tuning::search::interrupt::requested());
            let out = outcome?;
            ended?;
            out
        }
        None => outcome?,
    };
    super::progress::print_report(
        &out,
        interrupted(out.transfer.as_ref(), &out.search),
        args.json,
        |a| {
            let mut s = String::new();
            if let Some(t) = &a.transfer {
                s.push_str(&render_apply(t));
            }
            match &a.search {
                Search::Ran(r) => {
                    if a.transfer.is_some() {
                        s.push_str("\nthen searched with the rest of the time budget:\n");
                    } else {
                        s.push_str(&render_seeds(&m, r, args.top_k));
                        s.push('\n');
                    }
                    s.push_str(&super::tune_model::render_model_tune(
                        r,
                        super::progress::peak_gflops(),
                    ));
                }
                Search::NotRun(why) => {
                    s.push_str(&format!("no search after the transfer: {why}\n"))
                }
            }
            let kernel_sum = match (&a.search, &a.transfer) {
                (Search::Ran(r), _) => Some(r.kernel_sum_ms),
                (Search::NotRun(_), Some(t)) => Some(t.tuned_total_ms),
                (Search::NotRun(_), None) => None,
            };
            s.push_str(&super::kernels::render_layout_plan(&m.list));
            s.push_str(&super::tune_model::render_model_choice(&a.model_choice));
            s.push_str(&super::tune_model::render_end_to_end(
                &a.end_to_end,
                kernel_sum,
            ));
            s
        },
    )?;
    if out
        .transfer
        .as_ref()
        .is_some_and(|t| t.kernels.iter().any(|k| !k.verified))
    {
        return Err(CliError {
            message: "some kernels could not be verified (see the table)".into(),
            code: 1,
        });
    }
    Ok(())
}
