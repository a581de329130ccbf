//! Distributed measurement on the command line: `ttdb worker` (measure jobs of this host's
//! class), `ttdb workers` and `ttdb queue` (what the queue holds), and `--workers` of
//! `tune` (measure through the queue; [`Remote`]). The work is
//! `ttdb_tuning::queue`'s and `ttdb_store::store::queue`'s; this file parses and renders.
use super::table::Table;
use super::{CliError, CliResult};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use ttdb_store::store::queue::{TuneEnd, TuneRow, WorkerRow, LIVE_WITHIN};
use ttdb_store::store::{OpenMode, Store};
use ttdb_tuning::queue::worker::{run_worker, WorkerEvents, WorkerOptions};
use ttdb_tuning::queue::RemoteMeasuring;

#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// Jobs claimed at once: built in parallel, then verified and timed one at a time.
    #[arg(long, default_value_t = 8)]
    pub jobs: usize,
    /// Seconds a claim is held without a heartbeat (one comes every third of it); the jobs
    /// of a worker that died go back to the queue when it runs out.
    #[arg(long, default_value_t = 60.0)]
    pub lease: f64,
    /// Seconds between looks at the queue when no notification comes.
    #[arg(long, default_value_t = 2.0)]
    pub poll: f64,
    /// Exit after this many seconds without a job (default: run until SIGTERM or Ctrl-C).
    #[arg(long, value_name = "SECS")]
    pub exit_when_idle: Option<f64>,
    #[command(flatten)]
    pub isolation: super::IsolationArgs,
    /// Print the summary at exit as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Print the rows as JSON on standard output.
    #[arg(long)]
    pub json: bool,
}

/// Set by SIGTERM or SIGINT: the worker finishes the batch in hand, then exits.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: i32) {
    // An atomic store is async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

fn install_stop_signals() {
    extern "C" {
        fn signal(signum: i32, handler: usize) -> usize;
    }
    const SIGINT: i32 = 2;
    const SIGTERM: i32 = 15;
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        signal(SIGINT, on_stop_signal as *const () as usize);
        signal(SIGTERM, on_stop_signal as *const () as usize);
    }
}

/// Prints one line per claim to standard error.
struct Lines {
    quiet: bool,
}

impl WorkerEvents for Lines {
    fn registered(&mut self, worker: i64, class: &str) {
        if !self.quiet {
            eprintln!("ttdb worker #{worker}: host class {class}; waiting for jobs (SIGTERM or Ctrl-C: finish the batch in hand and exit)");
        }
    }
    fn claimed(&mut self, _: &ttdb_store::store::queue::Claim, what: &str) {
        if !self.quiet {
            eprintln!("  {what}");
        }
    }
    fn reference_built(&mut self, seconds: f64) {
        if !self.quiet {
            eprintln!("    reference built in {seconds:.2} s");
        }
    }
    fn finished(
        &mut self,
        claim: &ttdb_store::store::queue::Claim,
        accepted: usize,
        verified: usize,
        s: f64,
    ) {
        if self.quiet {
            return;
        }
        let lost = claim.jobs.len() - accepted;
        eprintln!(
            "    {accepted} handed in ({verified} verified) in {s:.1} s{}",
            if lost > 0 {
                format!("; {lost} dropped (their lease was lost or their tune cancelled)")
            } else {
                String::new()
            }
        );
    }
}

pub fn run_worker_command(db: &Option<PathBuf>, args: &WorkerArgs) -> CliResult {
    if args.jobs == 0 || args.lease <= 0.0 || args.poll <= 0.0 {
        return Err(CliError {
            message: "--jobs, --lease and --poll must be positive".into(),
            code: 2,
        });
    }
    // Opened once here so that a missing database is the usual clear error.
    let location = super::open_store(db, OpenMode::Write)?.location().clone();
    install_stop_signals();
    let host = super::machine().target.host.clone();
    let name = format!(
        "{}:{}",
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "host".into()),
        std::process::id()
    );
    let opts = WorkerOptions {
        batch: args.jobs,
        lease: Duration::from_secs_f64(args.lease),
        poll: Duration::from_secs_f64(args.poll),
        isolation: args.isolation.isolation()?,
        exit_when_idle: args
            .exit_when_idle
            .map(|s| Duration::from_secs_f64(s.max(0.0))),
    };
    let stop = || STOP.load(Ordering::SeqCst);
    let summary = run_worker(
        &location,
        &host,
        &name,
        &opts,
        &stop,
        &mut Lines { quiet: args.json },
    )
    .map_err(|e| CliError {
        message: format!("worker: {e}"),
        code: 1,
    })?;
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        eprintln!(
            "ttdb worker #{}: {} job(s) in {} claim(s), {} handed in, {:.1} s",
            summary.worker_id, summary.jobs, summary.claims, summary.accepted, summary.seconds
        );
    }
    Ok(())
}

fn age(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s ago")
    } else if s < 7200.0 {
        format!("{:.0} min ago", s / 60.0)
    } else {
        format!("{:.1} h ago", s / 3600.0)
    }
}

pub fn run_workers(store: &Store, args: &ListArgs) -> CliResult {
    let rows = store.workers()?;
    if args.json {
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        print!("{}", render_workers(&rows));
    }
    Ok(())
}

/// The table of `ttdb workers`.
pub fn render_workers(rows: &[WorkerRow]) -> String {
    let mut t = Table::new(&[
        ">id",
        "name",
        "host class",
        "state",
        "heartbeat",
        ">jobs",
        ">done",
        ">failed",
        "doing",
    ]);
    for w in rows {
        let live = !w.stopped && w.heartbeat_age_s <= LIVE_WITHIN.as_secs_f64();
        t.row(vec![
            w.id.to_string(),
            w.name.clone(),
            w.host_class.clone(),
            if w.stopped {
                "stopped"
            } else if live {
                "live"
            } else {
                "silent"
            }
            .into(),
            age(w.heartbeat_age_s),
            w.batch.to_string(),
            w.jobs_done.to_string(),
            w.jobs_failed.to_string(),
            w.current.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    format!("{}{} worker(s)\n", t.render(), rows.len())
}

pub fn run_queue(store: &Store, args: &ListArgs) -> CliResult {
    let rows = store.queue()?;
    if args.json {
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        print!("{}", render_queue(&rows));
    }
    Ok(())
}

/// The table of `ttdb queue`.
pub fn render_queue(rows: &[TuneRow]) -> String {
    let mut t = Table::new(&[
        ">tune",
        "what",
        "host class",
        "state",
        "started",
        ">pending",
        ">leased",
        ">done",
        ">failed",
        ">cancelled",
    ]);
    for r in rows {
        t.row(vec![
            r.id.to_string(),
            r.what.clone(),
            r.host_class.clone(),
            r.state.clone(),
            age(r.age_s),
            r.pending.to_string(),
            r.leased.to_string(),
            r.done.to_string(),
            r.failed.to_string(),
            r.cancelled.to_string(),
        ]);
    }
    format!("{}{} tune(s)\n", t.render(), rows.len())
}

/// How `ttdb queue` names a run over stored workloads: its selection flags.
pub fn selection_text(workload: Option<&str>, class: Option<&str>) -> String {
    workload
        .map(|w| format!("--workload {w}"))
        .or(class.map(|c| format!("--class {c}")))
        .unwrap_or_else(|| "--all".into())
}

/// A run's measuring on the queue (`--workers [HOST-CLASS]`): started before the run, ended
/// after it (cancelling what is unfinished when Ctrl-C stopped it).
pub struct Remote(pub RemoteMeasuring);

impl Remote {
    /// The queue for `--workers CLASS` (empty: this host's class), for a run described as
    /// `what`, its measurements filed as `kind` (search, droplet); None without `--workers`.
    pub fn start(
        store: &Store,
        workers: Option<&str>,
        what: &str,
        kind: &str,
    ) -> Result<Option<Remote>, CliError> {
        let Some(class) = workers else {
            return Ok(None);
        };
        let machine = super::machine();
        let class = if class.is_empty() {
            machine.target.host.class()
        } else {
            class.to_string()
        };
        let here = machine.target.host.f32_lanes();
        match ttdb_tuning::queue::class_lanes(&class) {
            None => {
                return Err(CliError {
                    message: format!("--workers {class}: not a host class (CPU/LANESlanes/CORES, as `ttdb workers` lists them)"),
                    code: 2,
                })
            }
            Some(l) if l != here => {
                return Err(CliError {
                    message: format!("--workers {class}: its workers have {l} vector lanes and this machine {here}; the search's sketches follow this machine's, so run the tune on a machine with {l} lanes"),
                    code: 2,
                })
            }
            Some(_) => {}
        }
        let on_wait: Arc<dyn Fn(&str) + Send + Sync> = Arc::new(|m: &str| eprintln!("ttdb: {m}"));
        let remote = RemoteMeasuring::start(store.location(), &class, what, kind, on_wait)
            .map_err(|e| CliError {
                message: format!("--workers: {e}"),
                code: 1,
            })?;
        eprintln!(
            "ttdb: measuring on the workers of host class {class} (tune {} in `ttdb queue`)",
            remote.tune_id
        );
        Ok(Some(Remote(remote)))
    }

    /// The queue as the pipelines' option (`RefineOptions::remote`).
    pub fn shared(&self) -> Arc<dyn ttdb_tuning::search::measurer::MeasureElsewhere> {
        Arc::new(self.0.clone())
    }

    /// Ends the run on the queue; a queue error during the run is the run's error.
    pub fn finish(&self, interrupted: bool) -> CliResult {
        let end = if interrupted {
            TuneEnd::Cancelled
        } else {
            TuneEnd::Done
        };
        match self.0.finish(end) {
            Ok(0) => Ok(()),
            Ok(n) => {
                eprintln!("ttdb: {n} queued job(s) of tune {} cancelled; every result handed in is stored", self.0.tune_id);
                Ok(())
            }
            Err(message) => Err(CliError { message, code: 1 }),
        }
    }
}
