//! `ttdb build MODEL.onnx -o DIR`: the model compiled ahead of time into DIR/libmodel.so and
//! DIR/ttdb_model.h (docs/design/run.md).
use super::kernels::{ModelArgs, PlanDb};
use super::run::{fail, run_options, store_for, CompileBar};
use super::CliResult;
use std::path::PathBuf;
use std::time::Instant;
use ttdb_tuning::run::{build_library, BuildOptions, ModelPlan, Schedule};

#[derive(clap::Args, Debug)]
pub struct BuildArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The folder for libmodel.so and ttdb_model.h (created if missing).
    #[arg(long, short = 'o')]
    pub output_dir: PathBuf,
    /// Compile every kernel on the naive loop nest, without reading the database.
    #[arg(long)]
    pub naive: bool,
    /// The C compiler that links the library (default: $CC, else `cc`).
    #[arg(long)]
    pub cc: Option<PathBuf>,
    /// Print the result as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

pub fn build(db: &Option<PathBuf>, args: &BuildArgs) -> CliResult {
    let (store, note) = store_for(db, args.naive)?;
    if let Some(n) = &note {
        eprintln!("note: {n}");
    }
    let plans = store.as_ref().map_or(PlanDb::None, PlanDb::Read);
    let opts = run_options(&args.model, args.naive, plans)?;
    let t0 = Instant::now();
    let plan = ModelPlan::new(&args.model.model, &opts, store.as_ref())
        .map_err(|e| fail(format!("{}: {e}", args.model.model.display())))?;
    let cc = args
        .cc
        .clone()
        .or_else(|| std::env::var_os("CC").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("cc"));
    let build_opts = BuildOptions {
        cc,
        codegen: opts.target.codegen_options(),
    };
    let mut bar = CompileBar(None);
    let built = build_library(&plan, &args.output_dir, &build_opts, &mut bar);
    if let Some(b) = bar.0.take() {
        b.finish_and_clear();
    }
    let built = built.map_err(|e| fail(format!("{}: {e}", args.model.model.display())))?;
    let stored = plan
        .plan
        .iter()
        .filter(|p| matches!(p.schedule, Schedule::Stored(_)))
        .count();
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "model": args.model.model,
                "layout": opts.layout.as_str(),
                "built": built,
                "stored_schedules": stored,
                "memory": plan.memory,
                "build_ms": t0.elapsed().as_secs_f64() * 1e3,
            })
        );
        return Ok(());
    }
    println!(
        "{}: {} kernels ({stored} on stored schedules), layout {}, built in {:.1} s",
        args.model.model.display(),
        built.kernels,
        opts.layout.as_str(),
        t0.elapsed().as_secs_f64()
    );
    println!(
        "{} (weights {:.1} MiB inside, arena {:.1} MiB at open)\n{}\ncompiled for {}",
        built.library.display(),
        built.weights_bytes as f64 / (1 << 20) as f64,
        built.arena_bytes as f64 / (1 << 20) as f64,
        built.header.display(),
        built.isa
    );
    Ok(())
}
