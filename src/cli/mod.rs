//! The `ttdb` command line: parses arguments and dispatches; each subcommand lives in its
//! own file and renders its human output through a pure function (snapshot-tested).
use clap::{Parser, Subcommand};
use std::path::PathBuf;

mod apply;
mod build;
mod bundle;
mod export;
mod import;
mod kernels;
mod match_cmd;
mod plot;
mod progress;
mod refine;
mod run;
mod stats;
mod table;
mod trust;
mod tune;
mod tune_model;
mod verify;
mod worker;
mod workloads;

pub use apply::render_apply;
pub use bundle::{render_inspect, SignerView};
pub use import::render_import_summary;
pub use kernels::render_kernels;
pub use match_cmd::{render_explain, render_match};
pub use refine::render_refine;
pub use stats::render_stats;
/// The import summary (built in `ttdb_store::bundle::summary`; re-exported beside its
/// renderer).
pub use ttdb_store::bundle::summary::ImportSummary;
pub use worker::{render_queue, render_workers};
pub use workloads::render_workloads;

#[derive(Parser, Debug)]
#[command(
    name = "ttdb",
    version,
    about = "A database of tuned tensor-kernel schedules (TVM Ansor records), with transfer-tuning"
)]
pub struct Cli {
    /// Database: a SQLite file, or a PostgreSQL database a team shares
    /// (postgres://USER[:PASSWORD]@HOST/DB, never printed with its password).
    /// Default: $TTDB_DB, else $XDG_DATA_HOME/ttdb/ttdb.db, else ~/.local/share/ttdb/ttdb.db.
    #[arg(long, global = true, env = "TTDB_DB", hide_env_values = true)]
    pub db: Option<PathBuf>,

    #[command(flatten)]
    pub target: TargetArgs,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Import Ansor logs and bundles, from files or directories (recursively); one
    /// transaction per file. Creates the database if it is missing.
    Import {
        /// Log files, bundles (recognized by their header, compressed or not: imported with
        /// every check, as `bundle import` does), or directories holding them. In a
        /// directory, files that are not logs or bundles are skipped and listed.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Refuse bundles that are unsigned or signed by a key not in `ttdb trust list`.
        #[arg(long)]
        require_signed: bool,
        /// The largest bundle text read, in MiB (a cap against decompression bombs).
        #[arg(long, default_value_t = ttdb_store::bundle::format::DEFAULT_MAX_MIB)]
        max_bundle_mib: u64,
        /// Print the summary as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Database statistics.
    Stats {
        /// Print the statistics as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// List workloads: signature, class, shapes, target, records, best mean cost.
    Workloads {
        /// Only this op class (`conv2d_nhwc`) or class prefix chain (`conv2d_nhwc+add`).
        #[arg(long)]
        class: Option<String>,
        /// Print the result as JSON on standard output.
        #[arg(long)]
        json: bool,
    },
    /// List the fused kernels TVM Relay would extract from an ONNX model on x86.
    Kernels(kernels::KernelsArgs),
    /// Run a whole ONNX model in process and write its outputs as .npy files: tuned kernels
    /// on their stored schedules, the rest on default ones; models whose glue ttdb cannot
    /// build yet are refused, naming the op.
    Run(run::RunArgs),
    /// Compile a model ahead of time into DIR/libmodel.so with DIR/ttdb_model.h: the same
    /// kernels as `ttdb run`, runnable without ttdb or LLVM.
    Build(build::BuildArgs),
    /// Replay, compile, verify and time the best records on this machine: GFLOP/s, % of
    /// peak, speedup over the naive schedule.
    Verify(verify::VerifyArgs),
    /// Match a model's kernels to the database: exact / class / none, no measuring.
    Match(match_cmd::MatchArgs),
    /// Transfer-tune a model: measure the untuned default and the top-k matched schedules of
    /// every kernel, keep the fastest verified one, store the choices.
    Apply(apply::ApplyArgs),
    /// Refine stored schedules on this machine with Droplet search (coordinate descent with
    /// a significance test), starting from each workload's best schedule timed here; every
    /// trial is stored.
    Refine(refine::RefineArgs),
    /// Search schedules on this machine (Ansor-style sketches, random initial states,
    /// evolution; optionally Droplet after), seeded with the stored records; every trial
    /// is stored.
    Tune(tune::TuneArgs),
    /// Measure this machine's fp32 FMA peak (the denominator of every "% of peak").
    BenchPeak {
        /// Print the result as JSON on standard output.
        #[arg(long)]
        json: bool,
    },
    /// Schedule bundles: export, inspect, import, sign, merge.
    #[command(subcommand)]
    Bundle(bundle::BundleCommand),
    /// Signing keys for bundles.
    #[command(subcommand)]
    Key(trust::KeyCommand),
    /// The keys whose signed bundles `bundle import --require-signed` accepts.
    #[command(subcommand)]
    Trust(trust::TrustCommand),
    /// Write records as Ansor log lines (TVM reads them back); with --model, the chosen
    /// schedule of each kernel of a model, for TVM's `ApplyHistoryBest`.
    Export(export::ExportArgs),
    /// Measure jobs that `tune --workers` queued for this machine's host class, until
    /// SIGTERM or Ctrl-C (the batch in hand is finished first). Needs a shared database:
    /// --db postgres://... (or a SQLite file on this machine).
    Worker(worker::WorkerArgs),
    /// List the workers: host class, last heartbeat, jobs done and failed.
    Workers(worker::ListArgs),
    /// List the queue's jobs per tune: pending, leased, done, failed, cancelled.
    Queue(worker::ListArgs),
    /// Serve measurement requests on stdin/stdout (started by tune, refine and apply).
    #[command(hide = true)]
    MeasureWorker,
}

/// The machine the commands compile for, measure on and rank candidates for: built once from
/// these flags (each with an environment fallback) into a `Target` that options carry down.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TargetArgs {
    /// Rank candidates as for a host with these /proc/cpuinfo ISA flags (comma list, e.g.
    /// `avx2,fma`) instead of this one's; changes the ranking only, never what is compiled.
    #[arg(long, global = true, env = "TTDB_PRETEND_ISA", value_name = "FLAGS")]
    pub pretend_isa: Option<String>,
    /// Print where measuring time goes: `batches` (a line per measured batch) or `builds`
    /// (also each build).
    #[arg(long, global = true, env = "TTDB_PROFILE", value_name = "WHAT")]
    pub profile: Option<String>,
    /// LLVM pass pipeline instead of ttdb's (e.g. `default<O3>`); for experiments.
    #[arg(long, global = true, env = "TTDB_LLVM_PIPELINE", hide = true)]
    pub llvm_pipeline: Option<String>,
    /// `0`: LLVM's loop and SLP vectorizers off; for experiments.
    #[arg(long, global = true, env = "TTDB_LLVM_VECTORIZERS", hide = true)]
    pub llvm_vectorizers: Option<String>,
    /// Set (any value): the LLVM back end at O2 instead of O3; for experiments.
    #[arg(long, global = true, env = "TTDB_BACKEND_O2", hide = true)]
    pub backend_o2: Option<String>,
    /// `1`: let LLVM unroll loops on its own; for experiments.
    #[arg(long, global = true, env = "TTDB_LLVM_UNROLL", hide = true)]
    pub llvm_unroll: Option<String>,
    /// `0`: exp, sigmoid, tanh and erf as a libm call per lane instead of vector
    /// polynomials; for ablations.
    #[arg(long, global = true, env = "TTDB_VECTOR_MATH", hide = true)]
    pub vector_math: Option<String>,
    /// `0`: idle kernel threads park at once instead of spinning for the next launch (each
    /// launch wakes them through the kernel); for ablations.
    #[arg(long, global = true, env = "TTDB_POOL_SPIN", hide = true)]
    pub pool_spin: Option<String>,
    /// `0`: default schedules run every stage in parallel, however small (no one-thread
    /// threshold); for ablations.
    #[arg(long, global = true, env = "TTDB_SERIAL_SMALL_WORK", hide = true)]
    pub serial_small_work: Option<String>,
}

/// This run's machine: the `Target` options carry down, and the ISA flags candidates are
/// ranked for (`--pretend-isa`, else the host's).
pub struct Machine {
    pub target: ttdb_backend::target::Target,
    pub ranking_isa: Vec<String>,
}

impl TargetArgs {
    fn build(&self) -> Machine {
        use ttdb_backend::target::{Profile, Target};
        let mut target = Target::detect();
        let s = &mut target.codegen;
        if let Some(p) = &self.llvm_pipeline {
            s.pipeline = p.clone();
        }
        s.llvm_vectorizers = self.llvm_vectorizers.as_deref() != Some("0");
        s.aggressive_backend = self.backend_o2.is_none();
        s.llvm_unroll = self.llvm_unroll.as_deref() == Some("1");
        s.vector_math = self.vector_math.as_deref() != Some("0");
        target.profile = self.profile.as_deref().map_or(Profile::Off, Profile::parse);
        let ranking_isa = match &self.pretend_isa {
            Some(v) => {
                let mut flags: Vec<String> = v
                    .split(',')
                    .map(|f| f.trim().to_string())
                    .filter(|f| !f.is_empty())
                    .collect();
                flags.sort();
                flags.dedup();
                flags
            }
            None => target.host.isa_flags.clone(),
        };
        Machine {
            target,
            ranking_isa,
        }
    }
}

static TARGET_ARGS: std::sync::OnceLock<TargetArgs> = std::sync::OnceLock::new();

/// The machine of this run, built on first use from the flags `run` was given (detecting
/// the host once).
pub fn machine() -> &'static Machine {
    static MACHINE: std::sync::OnceLock<Machine> = std::sync::OnceLock::new();
    MACHINE.get_or_init(|| TARGET_ARGS.get().cloned().unwrap_or_default().build())
}

/// Where `tune`, `refine` and `apply` measure candidates.
#[derive(clap::Args, Debug, Clone)]
pub struct IsolationArgs {
    /// Measure candidates in this process instead of a worker process. Faster to start, but
    /// a candidate that crashes (SIGSEGV, SIGILL) ends the whole run.
    #[arg(long)]
    pub in_process: bool,
    /// Test hook: the worker kills itself on the N-th candidate (counted from 0).
    #[arg(long, hide = true, value_name = "N")]
    pub fault_candidate: Option<u64>,
}

impl IsolationArgs {
    /// The isolation these flags ask for: a worker process running this executable's
    /// `measure-worker`, unless --in-process.
    pub fn isolation(&self) -> Result<ttdb_backend::evaluate::Isolation, CliError> {
        use ttdb_backend::evaluate::{Isolation, WorkerSpec};
        if self.in_process {
            return Ok(Isolation::InProcess);
        }
        let exe = std::env::current_exe().map_err(|e| CliError {
            message: format!(
                "cannot find ttdb's own executable to start a measuring worker ({e}); use --in-process"
            ),
            code: 1,
        })?;
        Ok(Isolation::Worker(WorkerSpec {
            exe,
            args: vec!["measure-worker".into()],
            fault_candidate: self.fault_candidate,
        }))
    }
}

/// A command failure: a message for the user and the exit code.
#[derive(Debug)]
pub struct CliError {
    pub message: String,
    pub code: i32,
}

impl<E: std::error::Error> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError {
            message: e.to_string(),
            code: 1,
        }
    }
}

pub type CliResult = Result<(), CliError>;

/// The progress bar of long work, on a terminal only: `len` steps shown with `template`
/// (indicatif's syntax).
fn progress_bar(len: u64, template: &str) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(len);
        b.set_style(
            indicatif::ProgressStyle::with_template(template)
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    })
}

/// Runs `f` with the database as the sink of what it measures (records of this host), or,
/// for `--dry-run`, a sink that keeps nothing.
fn with_sink<R>(
    store: &mut ttdb_store::store::Store,
    dry_run: bool,
    f: impl FnOnce(&mut dyn ttdb_tuning::tune::record::Sink) -> R,
) -> R {
    let host = machine().target.host.clone();
    if dry_run {
        f(&mut ttdb_tuning::tune::record::DryRun { store, host })
    } else {
        f(&mut ttdb_tuning::tune::record::StoreSink { store, host })
    }
}

/// [`with_sink`] for a run measured on the queue's workers (`remote`), which store what
/// they measure themselves.
fn with_sink_or_remote<R>(
    store: &mut ttdb_store::store::Store,
    dry_run: bool,
    remote: Option<&worker::Remote>,
    f: impl FnOnce(&mut dyn ttdb_tuning::tune::record::Sink) -> R,
) -> R {
    match remote {
        Some(r) => f(&mut ttdb_tuning::tune::record::RemoteSink {
            store,
            host_class: r.0.host_class.clone(),
        }),
        None => with_sink(store, dry_run, f),
    }
}

/// The default database location: `$TTDB_DB` if set (handled by the CLI), else
/// `$XDG_DATA_HOME/ttdb/ttdb.db`, else `~/.local/share/ttdb/ttdb.db`, else `./ttdb.db`.
fn default_db_path() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("ttdb/ttdb.db");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h).join(".local/share/ttdb/ttdb.db");
    }
    PathBuf::from("ttdb.db")
}

/// Where `--db` (or $TTDB_DB, or the default file) puts the database.
fn db_location(db: &Option<PathBuf>) -> ttdb_store::store::Location {
    ttdb_store::store::Location::parse(&db.clone().unwrap_or_else(default_db_path))
}

/// Opens the database as `mode` says (`ttdb_store::store::OpenMode`): only the commands that
/// store create it, so a mistyped `--db` in a reading command is an error, not an empty
/// database. Messages name a PostgreSQL database without its password.
fn open_store(
    db: &Option<PathBuf>,
    mode: ttdb_store::store::OpenMode,
) -> Result<ttdb_store::store::Store, CliError> {
    let location = db_location(db);
    ttdb_store::store::Store::open_at(&location, mode).map_err(|e| open_error(&location, e))
}

/// [`open_store`] for a command that works without a database too: `None` when there is
/// no ttdb database (no file, an empty one, or a PostgreSQL database ttdb has not written
/// to yet, as an administrator's `CREATE DATABASE` leaves it).
fn open_store_if_any(
    db: &Option<PathBuf>,
    mode: ttdb_store::store::OpenMode,
) -> Result<Option<ttdb_store::store::Store>, CliError> {
    let location = db_location(db);
    match ttdb_store::store::Store::open_at(&location, mode) {
        Ok(store) => Ok(Some(store)),
        Err(ttdb_store::store::StoreError::Missing { .. }) => Ok(None),
        Err(e) => Err(open_error(&location, e)),
    }
}

/// Why the database at `location` did not open, naming it once (without its password).
fn open_error(
    location: &ttdb_store::store::Location,
    e: ttdb_store::store::StoreError,
) -> CliError {
    CliError {
        message: match e {
            // These name the location themselves.
            ttdb_store::store::StoreError::Missing { .. }
            | ttdb_store::store::StoreError::Foreign { .. } => e.to_string(),
            e => {
                let shown = e.to_string();
                if shown.starts_with(&location.to_string()) {
                    shown
                } else {
                    format!("{location}: {shown}")
                }
            }
        },
        code: 1,
    }
}

pub fn run(cli: Cli) -> CliResult {
    use ttdb_store::store::OpenMode::{Create, ReadOnly, Write};
    let _ = TARGET_ARGS.set(cli.target.clone());
    if cli.target.pool_spin.as_deref() == Some("0") {
        ttdb_backend::codegen::set_idle_spin(false);
    }
    if cli.target.serial_small_work.as_deref() == Some("0") {
        ttdb_tuning::search::default_schedule::set_serial_small_work(false);
    }
    let db = &cli.db;
    match cli.command {
        Command::Import {
            paths,
            require_signed,
            max_bundle_mib,
            json,
        } => import::run(
            db,
            &paths,
            require_signed,
            &ttdb_store::bundle::format::Limits::with_max_mib(max_bundle_mib),
            json,
        ),
        Command::Stats { json } => stats::run(&open_store(db, ReadOnly)?, json),
        Command::Workloads { class, json } => {
            workloads::run(&open_store(db, ReadOnly)?, class.as_deref(), json)
        }
        Command::Export(args) => export::run(&open_store(db, ReadOnly)?, &args),
        Command::Kernels(args) => kernels::run(db, &args),
        Command::Run(args) => run::run(db, &args),
        Command::Build(args) => build::build(db, &args),
        Command::Verify(args) => verify::run(&mut open_store(db, Write)?, &args),
        Command::Match(args) => match_cmd::run(&open_store(db, ReadOnly)?, &args),
        Command::Apply(args) => apply::run(&mut open_store(db, Create)?, &args),
        Command::Refine(args) => refine::run(&mut open_store(db, Create)?, &args),
        Command::Tune(args) => tune::run(&mut open_store(db, Create)?, &args),
        Command::BenchPeak { json } => verify::bench_peak(json),
        Command::Bundle(cmd) => bundle::run(db, &cmd),
        Command::Key(cmd) => trust::run_key(&cmd),
        Command::Trust(cmd) => trust::run_trust(db, &cmd),
        Command::Worker(args) => worker::run_worker_command(db, &args),
        Command::Workers(args) => worker::run_workers(&open_store(db, ReadOnly)?, &args),
        Command::Queue(args) => worker::run_queue(&open_store(db, ReadOnly)?, &args),
        Command::MeasureWorker => measure_worker(),
    }
}

/// `ttdb measure-worker`: the protocol on the original stdout; anything else written to
/// stdout (by any code in this process) goes to stderr instead, so it cannot corrupt a
/// reply. SIGINT is ignored: the parent decides what a Ctrl-C stops.
fn measure_worker() -> CliResult {
    use std::os::fd::FromRawFd;
    extern "C" {
        fn dup(fd: i32) -> i32;
        fn dup2(old: i32, new: i32) -> i32;
        fn signal(signum: i32, handler: usize) -> usize;
    }
    const SIGINT: i32 = 2;
    const SIG_IGN: usize = 1;
    // SAFETY: plain descriptor and signal calls before any other thread of this process
    // uses stdout; the duplicated descriptor is owned by the File below alone.
    let protocol = unsafe {
        signal(SIGINT, SIG_IGN);
        let fd = dup(1);
        if fd < 0 || dup2(2, 1) < 0 {
            return Err(CliError {
                message: "measure-worker: cannot set up its output".into(),
                code: 1,
            });
        }
        std::fs::File::from_raw_fd(fd)
    };
    ttdb_tuning::search::worker::serve(std::io::stdin().lock(), std::io::BufWriter::new(protocol))
        .map_err(|message| CliError { message, code: 1 })
}

/// Output piped into a reader that stops early (`ttdb workloads | head`) ends the process
/// quietly, as for any Unix tool, instead of a panic in `println!` (Rust starts programs
/// with SIGPIPE ignored). An import killed this way loses nothing: its transaction is
/// rolled back.
#[cfg(target_os = "linux")]
fn default_sigpipe() {
    extern "C" {
        fn signal(signum: i32, handler: usize) -> usize;
    }
    const SIGPIPE: i32 = 13;
    const SIG_DFL: usize = 0;
    // SAFETY: restores the default disposition of one signal before any thread starts.
    unsafe {
        signal(SIGPIPE, SIG_DFL);
    }
}

#[cfg(not(target_os = "linux"))]
fn default_sigpipe() {}

/// Entry point of the binary; returns the process exit code.
pub fn main() -> i32 {
    default_sigpipe();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ttdb: {}", e.message);
            e.code
        }
    }
}
