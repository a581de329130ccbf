//! `ttdb export`: stored records as Ansor log lines; `--model`: the chosen schedule of each
//! kernel of a model, for TVM's `ApplyHistoryBest`.
use super::kernels::ModelArgs;
use super::{CliError, CliResult};
use std::io::Write;
use std::path::PathBuf;
use ttdb_store::store::query::{export, ExportFilter};
use ttdb_store::store::Store;
use ttdb_tuning::tune::export::ModelExport;

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// Only the best valid record per workload and target.
    #[arg(long, conflicts_with = "model")]
    pub best: bool,
    /// Only workloads whose signature starts with this hex prefix.
    #[arg(long, conflicts_with = "model")]
    pub workload: Option<String>,
    /// The best valid record of each tunable kernel of this ONNX model, under each of the
    /// kernel's own TVM workload keys (read it with TVM's `ApplyHistoryBest`).
    #[arg(long, value_name = "M.onnx")]
    pub model: Option<PathBuf>,
    /// With --model: the layout, as for `ttdb apply` (nchwc, nhwc, nchw, auto).
    #[arg(long, default_value = "nchwc", requires = "model")]
    pub layout: String,
    /// With --model: shape of a graph input with symbolic dims: NAME=d0,d1,... (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", requires = "model")]
    pub input_shape: Vec<String>,
    /// With --model: target -mcpu (sets the NCHWc fallback blocking, as for `ttdb apply`).
    #[arg(long, requires = "model")]
    pub mcpu: Option<String>,
    /// With --model: SIMD 32-bit lanes (overrides --mcpu).
    #[arg(long, requires = "model")]
    pub lanes: Option<i64>,
    /// With a model: NCHWc blocking by conv (`tophub`, TVM's way: the keys TVM's
    /// `ApplyHistoryBest` looks up, so the default here), or as `run` blocks them (`auto`,
    /// `planned`: ttdb's layout plan, whose keys TVM does not extract); as for `ttdb kernels`.
    #[arg(
        long,
        default_value = "tophub",
        value_name = "tophub|auto|planned",
        requires = "model"
    )]
    pub layout_plan: String,
    /// With --model and -o: print the summary (kernels, written, missing with reasons) as
    /// JSON on standard output.
    #[arg(long, requires = "model", requires = "output")]
    pub json: bool,
    /// Output file (default: standard output).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// Where the lines go: a file that appears only when the export succeeds (`-o`), else
/// standard output.
enum Output {
    File(ttdb_format::atomic_file::AtomicFile, PathBuf),
    Stdout(std::io::BufWriter<std::io::StdoutLock<'static>>),
}

impl Output {
    fn open(output: &Option<PathBuf>) -> Result<Output, CliError> {
        Ok(match output {
            Some(p) => Output::File(
                ttdb_format::atomic_file::AtomicFile::create(p).map_err(|e| CliError {
                    message: format!("{}: {e}", p.display()),
                    code: 1,
                })?,
                p.clone(),
            ),
            None => Output::Stdout(std::io::BufWriter::new(std::io::stdout().lock())),
        })
    }

    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Output::File(f, _) => f,
            Output::Stdout(s) => s,
        }
    }

    /// Puts the file in place (or flushes standard output).
    fn finish(self) -> Result<(), CliError> {
        let named = |p: &PathBuf, e: std::io::Error| CliError {
            message: format!("{}: {e}", p.display()),
            code: 1,
        };
        match self {
            Output::File(f, p) => f.commit().map_err(|e| named(&p, e)),
            Output::Stdout(mut s) => Ok(s.flush()?),
        }
    }
}

/// What `export --model` says on stderr: the count, then each kernel left out with why.
pub fn render_model_export(e: &ModelExport, output: Option<&std::path::Path>) -> String {
    let mut out = format!(
        "{} record(s) for {} of {} tunable kernels of {} (layout {}){}\n",
        e.written,
        e.kernels - e.missing,
        e.kernels,
        e.model,
        e.layout,
        output.map_or(String::new(), |p| format!(" written to {}", p.display()))
    );
    for k in e.per_kernel.iter().filter(|k| k.missing.is_some()) {
        out.push_str(&format!(
            "not written: {} ({}): {}\n",
            k.name,
            k.class,
            k.missing.as_deref().unwrap_or_default()
        ));
    }
    out
}

fn run_model(store: &Store, args: &ExportArgs, model: &std::path::Path) -> CliResult {
    let margs = ModelArgs {
        input_shape: args.input_shape.clone(),
        mcpu: args.mcpu.clone(),
        lanes: args.lanes,
        layout_plan: args.layout_plan.clone(),
        ..ModelArgs::for_model(model.to_path_buf(), &args.layout)
    };
    let (graph, extract) = margs.load(super::kernels::PlanDb::Read(store))?;
    // The ISA may be pretended (`--pretend-isa`); the class is the machine's.
    let host = ttdb_tuning::tune::export::ForHost {
        isa: super::match_cmd::host_match_options().host_isa,
        class: super::machine().target.host.class(),
    };
    let e = ttdb_tuning::tune::export::export_model(
        store,
        &graph,
        &extract,
        &margs.layouts(true)?,
        &host,
        &model.display().to_string(),
    )?;
    let mut out = Output::open(&args.output)?;
    for line in e.lines() {
        out.writer().write_all(line.as_bytes())?;
        out.writer().write_all(b"\n")?;
    }
    out.finish()?;
    if args.json {
        println!("{}", serde_json::to_string(&e)?);
    } else {
        eprint!("{}", render_model_export(&e, args.output.as_deref()));
    }
    if e.missing > 0 && margs.layout_plan == "tophub" {
        // apply and tune block by a plan unless told otherwise: their records are under
        // keys TVM never extracts, which is why the kernels are missing here.
        let pinned =
            ttdb_tuning::layout_plan::pinned_plans(&graph, &extract, store).map_err(|m| {
                CliError {
                    message: format!("{}: layout plan: {m}", model.display()),
                    code: 1,
                }
            })?;
        if !pinned.is_empty() {
            eprintln!(
                "note: the model was tuned under ttdb's layout plan (pinned for {}), whose conv \
                 blockings TVM does not extract; for TVM, run `ttdb apply` or `ttdb tune` with \
                 `--layout-plan tophub`; `--layout-plan planned` exports the planned kernels",
                pinned
                    .iter()
                    .map(|(class, _)| class.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    Ok(())
}

pub fn run(store: &Store, args: &ExportArgs) -> CliResult {
    if let Some(model) = &args.model {
        return run_model(store, args, model);
    }
    let filter = ExportFilter {
        best: args.best,
        signature: args.workload.clone(),
    };
    if let Some(prefix) = &args.workload {
        if !ttdb_store::store::query::signature_prefix_exists(store, prefix)? {
            return Err(CliError {
                message: format!(
                    "no workload's signature starts with `{prefix}` (`ttdb workloads` lists them); nothing was written"
                ),
                code: 1,
            });
        }
    }
    let mut out = Output::open(&args.output)?;
    let n = export(store, &filter, |line| {
        out.writer().write_all(line.as_bytes())?;
        out.writer().write_all(b"\n")
    })?;
    out.finish()?;
    if let Some(p) = &args.output {
        eprintln!("wrote {n} records to {}", p.display());
    }
    Ok(())
}
