//! `ttdb run MODEL.onnx`: the whole model, in process, with its outputs written as `.npy`.
use super::kernels::{ModelArgs, PlanDb};
use super::{CliError, CliResult};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use ttdb_backend::loopnest::ir::DType;
use ttdb_backend::loopnest::BufferData;
use ttdb_format::npy;
use ttdb_onnx::onnx::LayoutMode;
use ttdb_tuning::run::{
    best_covered, deterministic_input, layout_coverage, time_runs, KernelTime, LayoutCoverage,
    ModelRun, ModelRunOptions, Port, Schedule, Timing,
};
use ttdb_tuning::tune::progress::{Progress, Work};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A graph input's values: NAME=FILE.npy (the input's shape and dtype; repeatable).
    #[arg(long = "input", value_name = "NAME=FILE")]
    pub input: Vec<String>,
    /// Give inputs without --input the deterministic values of
    /// docs/design/deterministic-data.md (what the reference outputs were computed on);
    /// without it a missing input is an error.
    #[arg(long)]
    pub deterministic_inputs: bool,
    /// Where to write each output as NAME.npy (created if missing).
    #[arg(long, short = 'o', default_value = ".")]
    pub output_dir: PathBuf,
    /// Run every kernel on the naive loop nest, without reading the database (a baseline).
    #[arg(long)]
    pub naive: bool,
    /// After the run that writes the outputs, time N more runs on the same input and print
    /// the end-to-end latency (median, min, p90) and where the time goes, kernel by kernel.
    #[arg(long, value_name = "N")]
    pub repeat: Option<usize>,
    /// Threads for the kernels' parallel loops (default: every core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print the result as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

/// The bar over the kernels compiled at load, on a terminal.
pub(super) struct CompileBar(pub(super) Option<indicatif::ProgressBar>);

impl Progress for CompileBar {
    fn start(&mut self, work: Work) {
        if let Work::Kernels(n) = work {
            self.0 = super::progress_bar(
                n as u64,
                "{spinner} compiling [{bar:30}] {pos}/{len} kernels {elapsed} (ETA {eta}) {msg}",
            );
        }
    }
    fn kernel(&mut self, index: usize, _total: usize, label: &str) {
        if let Some(b) = &self.0 {
            b.set_position(index as u64 + 1);
            b.set_message(label.to_string());
        }
    }
}

/// An input's values from `file`, which must have the port's shape and dtype.
fn read_input(port: &Port, file: &str) -> Result<BufferData, CliError> {
    let name = &port.name;
    let bytes = std::fs::read(file).map_err(|e| fail(format!("--input {name}: {file}: {e}")))?;
    let a = npy::read(&bytes).map_err(|e| fail(format!("--input {name}: {file}: {}", e.0)))?;
    let shape: Vec<i64> = a.shape.iter().map(|&d| d as i64).collect();
    if shape != port.shape {
        return Err(fail(format!(
            "--input {name}: {file} has shape {shape:?}, the model's input is {:?}",
            port.shape
        )));
    }
    let values = match port.dtype {
        DType::F32 => a.to_f32().map(BufferData::F32),
        DType::I64 => a.to_i64().map(BufferData::I64),
        _ => None,
    };
    values.ok_or_else(|| {
        fail(format!(
            "--input {name}: {file} is {}, the input is {}",
            a.dtype.name(),
            port.dtype
        ))
    })
}

fn to_npy(port: &Port, values: &BufferData) -> Result<npy::Array, CliError> {
    let shape: Vec<usize> = port.shape.iter().map(|&d| d as usize).collect();
    match values {
        BufferData::F32(x) => npy::Array::from_f32(shape, x),
        BufferData::I64(x) => npy::Array::from_i64(shape, x),
        _ => None,
    }
    .ok_or_else(|| {
        fail(format!(
            "output `{}` is {}: ttdb run writes float32 and int64 outputs",
            port.name,
            values.dtype()
        ))
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn render_timing(t: &Timing) -> String {
    let mut s = format!(
        "{} runs on {} threads: median {:.3} ms, min {:.3} ms, p90 {:.3} ms\n\
         kernel medians: anchored {:.3} ms, glue {:.3} ms ({:.1}% of the kernel time)\n",
        t.runs,
        t.threads,
        t.median_ms,
        t.min_ms,
        t.p90_ms,
        t.anchored_ms,
        t.glue_ms,
        100.0 * t.glue_share
    );
    let mut by_time: Vec<&KernelTime> = t.kernels.iter().collect();
    by_time.sort_by(|a, b| b.median_ms.total_cmp(&a.median_ms));
    let total = (t.anchored_ms + t.glue_ms).max(1e-12);
    s.push_str("  median ms   share  kind  kernel\n");
    for k in by_time.iter().take(15) {
        s.push_str(&format!(
            "  {:>9.3}  {:>5.1}%  {}  {} ({})\n",
            k.median_ms,
            100.0 * k.median_ms / total,
            if k.anchored { "tuned" } else { "glue " },
            k.name,
            k.class
        ));
    }
    if by_time.len() > 15 {
        s.push_str(&format!(
            "  ... {} more (all with --json)\n",
            by_time.len() - 15
        ));
    }
    s
}

pub(super) fn fail(message: impl Into<String>) -> CliError {
    CliError {
        message: message.into(),
        code: 1,
    }
}

/// A file name for an output: its tensor name with anything but [A-Za-z0-9_.-] as '_'.
fn file_name(tensor: &str) -> String {
    let s: String = tensor
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{}.npy", s.trim_start_matches('.'))
}

/// The database whose schedules the run uses: none with --naive, or when no --db was given
/// and the default one does not exist (said in the note); a --db that cannot be opened is an
/// error, as for every reading command.
pub(super) fn store_for(
    db: &Option<PathBuf>,
    naive: bool,
) -> Result<(Option<ttdb_store::store::Store>, Option<String>), CliError> {
    if naive {
        return Ok((None, None));
    }
    if db.is_none() {
        let path = super::default_db_path();
        if !path.exists() {
            return Ok((
                None,
                Some(format!(
                    "no database at {} (the default): every kernel runs its default schedule",
                    path.display()
                )),
            ));
        }
    }
    let store = super::open_store(db, ttdb_store::store::OpenMode::ReadOnly)?;
    Ok((Some(store), None))
}

/// What `run` and `build` load a model with. Without `--layout` (or with `auto`), the
/// layout whose kernels the database has schedules for (`ttdb_tuning::run::layout_coverage`).
pub(super) fn run_options(
    model: &ModelArgs,
    naive: bool,
    plans: PlanDb,
) -> Result<ModelRunOptions, CliError> {
    // `auto` loads as nchwc does (its layout plan included), once for the choice and the run
    let (graph, extract) = model.load(plans)?;
    let layout = match model.layout.as_deref() {
        None | Some("auto") => auto_layout(model, &graph, &extract, plans)?,
        Some(_) => model.layouts(false)?[0],
    };
    let input_shapes = model
        .input_shape
        .iter()
        .map(|s| ttdb_onnx::onnx::InputShape::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ModelRunOptions {
        layout,
        input_shapes,
        extract,
        target: super::machine().target.clone(),
        weight_limits: Default::default(),
        naive,
        records: Default::default(),
    })
}

/// `--layout auto` for `run` and `build`: NCHWc or NHWC, the one whose tuned kernels'
/// FLOPs the database covers more (NCHWc without a database or on a tie); says so on
/// standard error when the database decided.
fn auto_layout(
    model: &ModelArgs,
    graph: &ttdb_onnx::onnx::Graph,
    extract: &ttdb_onnx::onnx::Options,
    plans: PlanDb,
) -> Result<LayoutMode, CliError> {
    let store = match plans {
        PlanDb::Read(s) | PlanDb::Pin(s) => s,
        PlanDb::None => return Ok(LayoutMode::Nchwc),
    };
    let coverage = layout_coverage(
        store,
        graph,
        extract,
        &[LayoutMode::Nchwc, LayoutMode::Nhwc],
        &super::machine().target,
    )
    .map_err(|e| fail(format!("{}: --layout auto: {e}", model.model.display())))?;
    let best = best_covered(&coverage).ok_or_else(|| fail("--layout auto: no layout to choose"))?;
    if best.stored_flops > 0.0 {
        let share = |c: &LayoutCoverage| 100.0 * c.stored_flops / c.tuned_flops.max(1e-300);
        let others: Vec<String> = coverage
            .iter()
            .filter(|c| c.layout != best.layout)
            .map(|c| format!("{} {:.0}%", c.layout.as_str(), share(c)))
            .collect();
        eprintln!(
            "note: layout {} (auto): the database has schedules for {:.0}% of its tuned kernels' FLOPs ({})",
            best.layout.as_str(),
            share(best),
            others.join(", ")
        );
    }
    Ok(best.layout)
}

pub fn run(db: &Option<PathBuf>, args: &RunArgs) -> CliResult {
    if args.repeat == Some(0) {
        return Err(fail("--repeat 0: give at least one run to time"));
    }
    if args.threads == Some(0) {
        return Err(fail("--threads 0: give at least one thread"));
    }
    let (store, note) = store_for(db, args.naive)?;
    if let Some(n) = &note {
        eprintln!("note: {n}");
    }
    let plans = store.as_ref().map_or(PlanDb::None, PlanDb::Read);
    let opts = run_options(&args.model, args.naive, plans)?;
    let layout = opts.layout;
    let t0 = Instant::now();
    let mut bar = CompileBar(None);
    let loaded = ModelRun::load_with_progress(&args.model.model, &opts, store.as_ref(), &mut bar);
    if let Some(b) = bar.0.take() {
        b.finish_and_clear();
    }
    let model = loaded.map_err(|e| fail(format!("{}: {e}", args.model.model.display())))?;
    let load_time = t0.elapsed();
    let mut given: HashMap<String, BufferData> = HashMap::new();
    for spec in &args.input {
        let (name, file) = spec
            .split_once('=')
            .ok_or_else(|| fail(format!("--input {spec}: expected NAME=FILE.npy")))?;
        let port = model
            .inputs
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = model.inputs.iter().map(|p| p.name.as_str()).collect();
                fail(format!(
                    "--input {name}: the model has no input `{name}` (inputs: {})",
                    names.join(", ")
                ))
            })?;
        given.insert(name.to_string(), read_input(port, file)?);
    }
    for p in &model.inputs {
        if !given.contains_key(&p.name) {
            if !args.deterministic_inputs {
                return Err(fail(format!(
                    "input `{}` ({} {:?}) has no values: give --input {}=FILE.npy, or --deterministic-inputs",
                    p.name, p.dtype, p.shape, p.name
                )));
            }
            given.insert(p.name.clone(), deterministic_input(p).map_err(fail)?);
        }
    }
    let inputs: Vec<&BufferData> = model.inputs.iter().map(|p| &given[&p.name]).collect();
    let mut ws = model.workspace().map_err(fail)?;
    let t1 = Instant::now();
    let step_times = model.run_in(&mut ws, &inputs, args.threads).map_err(fail)?;
    let run_time = t1.elapsed();
    let steps = model.step_times(&step_times);
    std::fs::create_dir_all(&args.output_dir)
        .map_err(|e| fail(format!("{}: {e}", args.output_dir.display())))?;
    let mut written = Vec::new();
    for (port, values) in model.outputs.iter().zip(&ws.outputs) {
        let path = args.output_dir.join(file_name(&port.name));
        ttdb_format::atomic_file::write(&path, &npy::write(&to_npy(port, values)?))
            .map_err(|e| fail(format!("{}: {e}", path.display())))?;
        written.push((port, path));
    }
    let timing = match args.repeat {
        Some(n) => Some(time_runs(&model, &inputs, n, args.threads).map_err(fail)?),
        None => None,
    };
    let plan: Vec<serde_json::Value> = model
        .plan
        .iter()
        .map(|p| {
            let (schedule, why) = match &p.schedule {
                Schedule::Stored(source) => (format!("stored: {source}"), None),
                Schedule::Default(why) => ("default".to_string(), why.clone()),
                Schedule::Naive(why) => ("naive".to_string(), Some(why.clone())),
            };
            serde_json::json!({"name": p.name, "class": p.class, "anchored": p.anchored, "schedule": schedule, "because": why})
        })
        .collect();
    let stored = model
        .plan
        .iter()
        .filter(|p| matches!(p.schedule, Schedule::Stored(_)))
        .count();
    let tuned_naive = model
        .plan
        .iter()
        .filter(|p| p.anchored && !matches!(&p.schedule, Schedule::Stored(_)))
        .count();
    let anchored_ms: f64 = steps
        .iter()
        .filter(|s| s.anchored)
        .map(|s| ms(s.time))
        .sum();
    let glue_ms: f64 = steps
        .iter()
        .filter(|s| !s.anchored)
        .map(|s| ms(s.time))
        .sum();
    if args.json {
        let outs: Vec<serde_json::Value> = written
            .iter()
            .map(|(p, path)| serde_json::json!({"name": p.name, "shape": p.shape, "dtype": p.dtype.name(), "file": path}))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "model": args.model.model,
                "layout": layout.as_str(),
                "kernels_planned": plan,
                "filled_initializers": model.filled_initializers,
                "memory": model.memory,
                "packed_weights": model.packed_weights,
                "reshape_views": model.reshape_views,
                "load_ms": ms(load_time),
                "run_ms": ms(run_time),
                "kernels": steps.len(),
                "anchored_ms": anchored_ms,
                "glue_ms": glue_ms,
                "repeat": timing,
                "outputs": outs,
            })
        );
        return Ok(());
    }
    if model.filled_initializers > 0 {
        eprintln!(
            "note: {} initializers had no data (their external-data file is missing) and got the deterministic fill",
            model.filled_initializers
        );
    }
    println!(
        "{}: {} kernels, layout {}; {stored} with a stored schedule, {tuned_naive} tunable kernels without one, the rest glue",
        args.model.model.display(),
        steps.len(),
        layout.as_str()
    );
    for p in &model.plan {
        match &p.schedule {
            Schedule::Default(Some(why)) if store.is_some() => {
                println!("  default: {} ({}): {why}", p.name, p.class)
            }
            Schedule::Naive(why) if !args.naive => {
                println!("  naive: {} ({}): {why}", p.name, p.class)
            }
            _ => {}
        }
    }
    let mb = |b: usize| b as f64 / (1 << 20) as f64;
    println!(
        "memory: arena {:.1} MiB for {} intermediate tensors of {:.1} MiB ({} reshapes read in place); weights {:.1} MiB ({} packed at load for their kernels' schedules)",
        mb(model.memory.arena_bytes),
        model.memory.intermediates,
        mb(model.memory.intermediates_bytes),
        model.reshape_views,
        mb(model.memory.weights_bytes),
        model.packed_weights
    );
    println!(
        "loaded and compiled in {:.1} s; first run {:.1} ms (anchored kernels {:.1} ms, glue {:.1} ms)",
        load_time.as_secs_f64(),
        ms(run_time),
        anchored_ms,
        glue_ms
    );
    if let Some(t) = &timing {
        print!("{}", render_timing(t));
    }
    for (p, path) in written {
        println!("{} {:?} -> {}", p.name, p.shape, path.display());
    }
    Ok(())
}
