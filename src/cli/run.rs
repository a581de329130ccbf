//! `ttdb run MODEL.onnx`: the whole model, in process, with its outputs written as `.npy`.
use super::kernels::ModelArgs;
use super::{CliError, CliResult};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;
use ttdb_format::npy;
use ttdb_onnx::onnx::fill;
use ttdb_tuning::run::{ModelRun, ModelRunOptions, Schedule};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A graph input's values: NAME=FILE.npy (float32, the input's shape; repeatable).
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
    /// Run every kernel with its naive default schedule, without reading the database.
    #[arg(long)]
    pub naive: bool,
    /// Print the result as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

fn fail(message: impl Into<String>) -> CliError {
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
fn store_for(
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
                    "no database at {} (the default): every kernel runs its naive schedule",
                    path.display()
                )),
            ));
        }
    }
    let store = super::open_store(db, ttdb_store::store::OpenMode::ReadOnly)?;
    Ok((Some(store), None))
}

pub fn run(db: &Option<PathBuf>, args: &RunArgs) -> CliResult {
    let (store, note) = store_for(db, args.naive)?;
    if let Some(n) = &note {
        eprintln!("note: {n}");
    }
    let layout = args.model.layouts(false)?[0];
    let (_, extract) = args.model.load()?;
    let input_shapes = args
        .model
        .input_shape
        .iter()
        .map(|s| ttdb_onnx::onnx::InputShape::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let opts = ModelRunOptions {
        layout,
        input_shapes,
        extract,
        target: super::machine().target.clone(),
        weight_limits: Default::default(),
    };
    let t0 = Instant::now();
    let model = ModelRun::load(&args.model.model, &opts, store.as_ref())
        .map_err(|e| fail(format!("{}: {e}", args.model.model.display())))?;
    let load_time = t0.elapsed();
    let mut given: HashMap<String, Vec<f32>> = HashMap::new();
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
        let bytes =
            std::fs::read(file).map_err(|e| fail(format!("--input {name}: {file}: {e}")))?;
        let a = npy::read(&bytes).map_err(|e| fail(format!("--input {name}: {file}: {}", e.0)))?;
        let shape: Vec<i64> = a.shape.iter().map(|&d| d as i64).collect();
        if shape != port.shape {
            return Err(fail(format!(
                "--input {name}: {file} has shape {shape:?}, the model's input is {:?}",
                port.shape
            )));
        }
        let values = a.to_f32().ok_or_else(|| {
            fail(format!(
                "--input {name}: {file} is {}, the input is float32",
                a.dtype.name()
            ))
        })?;
        given.insert(name.to_string(), values);
    }
    for p in &model.inputs {
        if !given.contains_key(&p.name) {
            if !args.deterministic_inputs {
                return Err(fail(format!(
                    "input `{}` ({:?}) has no values: give --input {}=FILE.npy, or --deterministic-inputs",
                    p.name, p.shape, p.name
                )));
            }
            let n = p.shape.iter().product::<i64>() as usize;
            given.insert(p.name.clone(), fill::input_floats(&p.name, n));
        }
    }
    let t1 = Instant::now();
    let (outputs, steps) = model.run(&given, None).map_err(fail)?;
    let run_time = t1.elapsed();
    std::fs::create_dir_all(&args.output_dir)
        .map_err(|e| fail(format!("{}: {e}", args.output_dir.display())))?;
    let mut written = Vec::new();
    for (port, values) in model.outputs.iter().zip(&outputs) {
        let shape: Vec<usize> = port.shape.iter().map(|&d| d as usize).collect();
        let a = npy::Array::from_f32(shape, values)
            .ok_or_else(|| fail("an output's shape does not hold its values"))?;
        let path = args.output_dir.join(file_name(&port.name));
        ttdb_format::atomic_file::write(&path, &npy::write(&a))
            .map_err(|e| fail(format!("{}: {e}", path.display())))?;
        written.push((port, path));
    }
    let plan: Vec<serde_json::Value> = model
        .plan
        .iter()
        .map(|p| {
            let (schedule, why) = match &p.schedule {
                Schedule::Stored(source) => (format!("stored: {source}"), None),
                Schedule::Naive(why) => ("naive".to_string(), why.clone()),
            };
            serde_json::json!({"name": p.name, "class": p.class, "anchored": p.anchored, "schedule": schedule, "naive_because": why})
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
        .filter(|p| matches!(&p.schedule, Schedule::Naive(Some(_))))
        .count();
    let anchored_ms: f64 = steps
        .iter()
        .filter(|s| s.anchored)
        .map(|s| s.time.as_secs_f64() * 1e3)
        .sum();
    let glue_ms: f64 = steps
        .iter()
        .filter(|s| !s.anchored)
        .map(|s| s.time.as_secs_f64() * 1e3)
        .sum();
    if args.json {
        let outs: Vec<serde_json::Value> = written
            .iter()
            .map(|(p, path)| serde_json::json!({"name": p.name, "shape": p.shape, "file": path}))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "model": args.model.model,
                "layout": layout.as_str(),
                "kernels_planned": plan,
                "filled_initializers": model.filled_initializers,
                "load_ms": load_time.as_secs_f64() * 1e3,
                "run_ms": run_time.as_secs_f64() * 1e3,
                "kernels": steps.len(),
                "anchored_ms": anchored_ms,
                "glue_ms": glue_ms,
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
        "{}: {} kernels, layout {}; {stored} with a stored schedule, {tuned_naive} tuned kernels on the naive schedule, the rest glue (naive)",
        args.model.model.display(),
        steps.len(),
        layout.as_str()
    );
    for p in &model.plan {
        if let Schedule::Naive(Some(why)) = &p.schedule {
            if store.is_some() {
                println!("  naive: {} ({}): {why}", p.name, p.class);
            }
        }
    }
    println!(
        "loaded and compiled in {:.1} s; one run {:.1} ms (anchored kernels {:.1} ms, glue {:.1} ms)",
        load_time.as_secs_f64(),
        run_time.as_secs_f64() * 1e3,
        anchored_ms,
        glue_ms
    );
    for (p, path) in written {
        println!("{} {:?} -> {}", p.name, p.shape, path.display());
    }
    Ok(())
}
