//! `ttdb tune MODEL.onnx`: the model mode of `tune` (`ttdb_tuning::tune::model`). Parses, calls
//! the library, renders the per-kernel table, the kernel sum, the curve file and its plot.
use super::kernels::ModelArgs;
use super::match_cmd::match_layouts;
use super::table::{fmt_opt, io_shapes, Table};
use super::{CliError, CliResult};
use std::io::Write;
use std::path::Path;
use ttdb_store::store::Store;
use ttdb_tuning::tune::model::{tune_model, ModelTuneOptions, ModelTuneReport};
use ttdb_tuning::tune::search::TuneOptions;

pub fn render_model_tune(r: &ModelTuneReport, peak_gflops: Option<f64>) -> String {
    let mut t = Table::new(&[
        "kernel", "class", "shapes", ">x", ">seeds", ">rounds", ">trials", ">failed", ">best ms",
        ">GFLOP/s", ">% peak", "note",
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
    pub curve: Option<&'a Path>,
    /// `--plot`: the curve as an SVG chart (`super::plot`).
    pub plot: Option<&'a Path>,
    pub dry_run: bool,
    pub json: bool,
}

pub fn run(store: &mut Store, args: &ModelRun) -> CliResult {
    let model = args.model.model.as_path();
    let m = match_layouts(store, &args.model, super::match_cmd::host_match_options())?;
    if m.matches.is_empty() {
        return Err(CliError {
            message: format!("{}: no tunable kernel", model.display()),
            code: 1,
        });
    }
    let base = args.base.clone();
    let opts = ModelTuneOptions {
        trials: args.trials.unwrap_or(64 * m.matches.len()),
        time_budget: base.search.time_budget,
        search: base.search,
        refine: base.refine,
        droplet_trials: args.droplet,
        seeds: args.seeds.max(1),
    };
    let report = super::progress::track(|progress| {
        super::with_sink_or_remote(store, args.dry_run, args.remote, |sink| {
            tune_model(&m, &opts, sink, progress)
        })
    })?;
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
    super::progress::print_report(&report, report.interrupted, args.json, |r| {
        render_model_tune(r, super::progress::peak_gflops())
    })
}
