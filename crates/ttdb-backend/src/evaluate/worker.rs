//! Crash isolation: candidates measured in a long-lived child process.
//!
//! Candidate schedules are untrusted, and so is what LLVM and the hardware make of them: a
//! kernel that faults (SIGSEGV, SIGILL, SIGBUS) in ttdb's own process ends the whole `tune`,
//! `refine` or `apply`. TVM's runners measure in separate processes for this reason. Here
//! the parent sends the workload once (a [`Request::Task`]: the DAG, the reference's seed,
//! the evaluation options) and then batches of step lists; the worker (the same executable,
//! `ttdb measure-worker`, serving [`ttdb_tuning::search::worker::serve`]) builds, verifies and
//! times them and answers with [`Evaluation`]s. It says which candidate it is about to run
//! ([`Reply::Running`]), so a worker that dies costs exactly that candidate: recorded as a
//! failed trial naming the signal, and the worker is restarted for the rest. A worker that
//! dies while building in parallel, where no one candidate is to blame, gets the batch again
//! one candidate at a time.
//!
//! The protocol is one JSON object per line on the worker's stdin and stdout: the same
//! worker a team's machines will run for a shared queue.
use super::reference::ExpectedValues;
use super::{EvalOptions, Evaluation};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};
use ttdb_algo::ir::Dag;
use ttdb_format::ansor::{steps_to_json, Step};

/// Where candidates are measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub enum Isolation {
    /// In this process (the benches; and inside the worker itself).
    #[default]
    InProcess,
    /// In a worker process, restarted when a candidate kills it.
    Worker(WorkerSpec),
}

/// How to start a worker: an executable and its arguments (`ttdb measure-worker`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerSpec {
    pub exe: PathBuf,
    pub args: Vec<String>,
    /// Test hook: the worker kills itself with SIGSEGV when it is about to run the n-th
    /// candidate this client sends (counted from 0 over the client's life). Set only by
    /// tests through the library or the hidden `--fault-candidate` flag; no schedule can.
    #[doc(hidden)]
    pub fault_candidate: Option<u64>,
}

/// Parent to worker. A `Task` is sent once per workload and read once: its size is no cost.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// The workload the next requests measure: its DAG, the seed of its reference (rebuilt
    /// by the worker: `Reference::new(dag, seed)`), and how to evaluate.
    Task {
        dag: Dag,
        reference_seed: u64,
        eval: EvalOptions,
        /// The reference's values, when the parent has them (else the worker evaluates the
        /// DAG itself).
        #[serde(default)]
        expected: Option<Vec<ExpectedValues>>,
    },
    /// Build, verify and time these step lists as one batch (`KernelMeasurer`'s rounds).
    /// `ids` number them for the fault hook.
    Batch {
        schedules: Vec<String>,
        ids: Vec<u64>,
        timeout: Duration,
        fault: Option<u64>,
    },
    /// Build and run one step list (`evaluate_steps`), or the default schedule when None.
    One {
        steps: Option<String>,
        id: u64,
        fault: Option<u64>,
    },
}

/// Worker to parent.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    /// The task is set (its reference computed).
    Ready,
    /// The task cannot be measured (its reference failed): every candidate fails with this.
    TaskError(String),
    /// A batch's parallel builds start.
    Building,
    /// Work on candidate `i` of the request (its verification or a timing) starts.
    Running(usize),
    Batch(Vec<Option<Evaluation>>),
    One(Evaluation),
}

/// A worker's answers as its reader thread hands them over.
enum Event {
    Reply(Reply),
    /// Stdout closed or unreadable: the worker is gone (or speaks nonsense).
    Gone(String),
}

struct Running {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    events: Receiver<Event>,
}

/// The parent side: one worker process, started on first use and after every death.
pub struct Client {
    spec: WorkerSpec,
    worker: Option<Running>,
    /// The task the running worker holds (a digest of the Task request).
    task: Option<String>,
    /// Candidates sent so far (the fault hook's count).
    sent: u64,
    /// Deaths so far (reported in messages; a worker that cannot start is an error).
    pub restarts: usize,
}

/// The workload a request measures.
pub struct TaskRef<'a> {
    pub dag: &'a Dag,
    pub reference_seed: u64,
    pub eval: &'a EvalOptions,
    /// The reference's values ([`super::Reference::shippable_expected`]).
    pub expected: Option<&'a [ExpectedValues]>,
}

/// How a worker ended, as a message (`killed by SIGSEGV`).
fn death(status: Option<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match s.signal() {
            Some(sig) => format!("was killed by {}", signal_name(sig)),
            None => format!("exited ({s})"),
        },
        None => "stopped answering and was killed".into(),
    }
}

/// The name of a POSIX signal number (Linux numbering).
pub fn signal_name(sig: i32) -> String {
    match sig {
        4 => "SIGILL".into(),
        6 => "SIGABRT".into(),
        7 => "SIGBUS".into(),
        8 => "SIGFPE".into(),
        9 => "SIGKILL".into(),
        11 => "SIGSEGV".into(),
        13 => "SIGPIPE".into(),
        15 => "SIGTERM".into(),
        n => format!("signal {n}"),
    }
}

/// The failed evaluation of a candidate that killed its worker.
fn died(error_no: u8, what: &str, how: &str) -> Evaluation {
    Evaluation::failed(
        error_no,
        format!("the measuring worker {how} while {what} this candidate"),
        Duration::ZERO,
        Duration::ZERO,
    )
}

/// How long a worker may stay silent before it is taken for hung: its longest legitimate
/// silence is one build (bounded by the compile-cost guard) or one timed sample.
fn silence_limit(timeout: Duration) -> Duration {
    Duration::from_secs(300).max(timeout * 4)
}

impl Client {
    pub fn new(spec: WorkerSpec) -> Client {
        Client {
            spec,
            worker: None,
            task: None,
            sent: 0,
            restarts: 0,
        }
    }

    fn start(&mut self) -> Result<&mut Running, String> {
        if self.worker.is_none() {
            let mut child = std::process::Command::new(&self.spec.exe)
                .args(&self.spec.args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .map_err(|e| {
                    format!(
                        "cannot start the measuring worker {}: {e}",
                        self.spec.exe.display()
                    )
                })?;
            let stdin = child.stdin.take().expect("piped");
            let stdout = child.stdout.take().expect("piped");
            let (tx, events) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("ttdb-worker-reader".into())
                .spawn(move || {
                    for line in std::io::BufReader::new(stdout).lines() {
                        let event = match line {
                            Ok(l) => match serde_json::from_str::<Reply>(&l) {
                                Ok(r) => Event::Reply(r),
                                Err(e) => Event::Gone(format!("sent an unreadable reply ({e})")),
                            },
                            Err(e) => Event::Gone(format!("could not be read ({e})")),
                        };
                        let gone = matches!(event, Event::Gone(_));
                        if tx.send(event).is_err() || gone {
                            return;
                        }
                    }
                    let _ = tx.send(Event::Gone("closed its output".into()));
                })
                .map_err(|e| format!("cannot start the worker's reader: {e}"))?;
            self.worker = Some(Running {
                child,
                stdin,
                events,
            });
            self.task = None;
        }
        Ok(self.worker.as_mut().expect("started above"))
    }

    /// Ends the worker (killing it if it still runs) and says how it ended.
    fn bury(&mut self) -> String {
        let Some(mut w) = self.worker.take() else {
            return "was not running".into();
        };
        self.task = None;
        self.restarts += 1;
        drop(w.stdin);
        // A worker that closed its output is dead or dying; give it a moment, then kill.
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match w.child.try_wait() {
                Ok(Some(s)) => return death(Some(s)),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => {
                    let _ = w.child.kill();
                    let _ = w.child.wait();
                    return death(None);
                }
            }
        }
    }

    fn send(&mut self, r: &Request) -> Result<(), String> {
        let line = serde_json::to_string(r).map_err(|e| format!("request: {e}"))?;
        let w = self.start()?;
        writeln!(w.stdin, "{line}")
            .and_then(|_| w.stdin.flush())
            .map_err(|e| format!("the measuring worker stopped reading ({e})"))
    }

    /// The next reply, or why there is none: the worker died, went silent past `limit`, or
    /// the caller was interrupted (`Err(None)`).
    fn next(
        &mut self,
        limit: Duration,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Reply, Option<String>> {
        let since = Instant::now();
        loop {
            let w = self
                .worker
                .as_mut()
                .ok_or(Some("not running".to_string()))?;
            match w.events.recv_timeout(Duration::from_millis(100)) {
                Ok(Event::Reply(r)) => return Ok(r),
                Ok(Event::Gone(why)) => {
                    let how = self.bury();
                    // A signal says it all; otherwise say what the parent saw.
                    return Err(Some(if how.contains("killed by") {
                        how
                    } else {
                        format!("{how}: it {why}")
                    }));
                }
                Err(RecvTimeoutError::Disconnected) => return Err(Some(self.bury())),
                Err(RecvTimeoutError::Timeout) => {
                    if interrupted() {
                        self.bury();
                        return Err(None);
                    }
                    if since.elapsed() > limit {
                        let how = self.bury();
                        return Err(Some(format!("{how} after {limit:?} of silence")));
                    }
                }
            }
        }
    }

    /// Makes the worker hold `task`; Err(reason) when the task itself cannot be measured.
    fn set_task(
        &mut self,
        task: &TaskRef,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<(), Option<String>> {
        let mut eval = task.eval.clone();
        eval.isolation = Isolation::InProcess;
        let request = Request::Task {
            dag: task.dag.clone(),
            reference_seed: task.reference_seed,
            eval,
            expected: task.expected.map(<[_]>::to_vec),
        };
        let text = serde_json::to_string(&request).map_err(|e| Some(e.to_string()))?;
        let digest = ttdb_format::signature::hex(&<sha2::Sha256 as sha2::Digest>::digest(&text));
        if self.worker.is_some() && self.task.as_deref() == Some(&digest) {
            return Ok(());
        }
        self.send(&request).map_err(Some)?;
        match self.next(silence_limit(Duration::ZERO), interrupted)? {
            Reply::Ready => {
                self.task = Some(digest);
                Ok(())
            }
            Reply::TaskError(e) => Err(Some(e)),
            other => Err(Some(format!("unexpected reply {other:?}"))),
        }
    }

    /// Measures `schedules` as one batch in the worker. None for every candidate when
    /// `interrupted` (nothing half-measured is reported, as in-process).
    pub fn batch(
        &mut self,
        task: &TaskRef,
        schedules: &[Vec<Step>],
        timeout: Duration,
        interrupted: &dyn Fn() -> bool,
    ) -> Vec<Option<Evaluation>> {
        let n = schedules.len();
        let mut out: Vec<Option<Evaluation>> = vec![None; n];
        let ids: Vec<u64> = (0..n as u64).map(|i| self.sent + i).collect();
        self.sent += n as u64;
        // Runs of candidates still to measure; after a death during the parallel builds,
        // one candidate per run.
        let mut queue: Vec<Vec<usize>> = vec![(0..n).collect()];
        while let Some(pending) = queue.pop() {
            if pending.is_empty() {
                continue;
            }
            if let Err(e) = self.set_task(task, interrupted) {
                let Some(e) = e else { return vec![None; n] };
                for &i in &pending {
                    out[i] = Some(Evaluation::failed(
                        1,
                        e.clone(),
                        Duration::ZERO,
                        Duration::ZERO,
                    ));
                }
                continue;
            }
            let request = Request::Batch {
                schedules: pending
                    .iter()
                    .map(|&i| steps_to_json(&schedules[i]))
                    .collect(),
                ids: pending.iter().map(|&i| ids[i]).collect(),
                timeout,
                fault: self.spec.fault_candidate,
            };
            if let Err(e) = self.send(&request) {
                let how = self.bury();
                for &i in &pending {
                    out[i] = Some(died(2, "sent", &format!("{how} ({e})")));
                }
                continue;
            }
            let mut running: Option<usize> = None;
            let limit = silence_limit(timeout);
            loop {
                match self.next(limit, interrupted) {
                    Ok(Reply::Building) => running = None,
                    Ok(Reply::Running(j)) => running = Some(j),
                    Ok(Reply::Batch(results)) if results.len() == pending.len() => {
                        for (&i, r) in pending.iter().zip(results) {
                            out[i] = r;
                        }
                        break;
                    }
                    Ok(other) => {
                        let how = self.bury();
                        for &i in &pending {
                            out[i] = Some(died(
                                2,
                                "measuring",
                                &format!("{how}: it replied {other:?}"),
                            ));
                        }
                        break;
                    }
                    Err(None) => return vec![None; n],
                    Err(Some(how)) => {
                        match running {
                            // It died running this one: it fails, the rest go again.
                            Some(j) => {
                                out[pending[j]] = Some(died(4, "running", &how));
                                let rest: Vec<usize> = pending
                                    .iter()
                                    .enumerate()
                                    .filter(|&(k, _)| k != j)
                                    .map(|(_, &i)| i)
                                    .collect();
                                queue.push(rest);
                            }
                            // It died building one of several: each goes again alone.
                            None if pending.len() > 1 => {
                                queue.extend(pending.iter().rev().map(|&i| vec![i]));
                            }
                            None => out[pending[0]] = Some(died(2, "building", &how)),
                        }
                        break;
                    }
                }
            }
        }
        out
    }

    /// Builds and runs one step list (or, with None, the default schedule) in the worker.
    /// None when `interrupted`.
    pub fn one(
        &mut self,
        task: &TaskRef,
        steps: Option<&[Step]>,
        interrupted: &dyn Fn() -> bool,
    ) -> Option<Evaluation> {
        let id = self.sent;
        self.sent += 1;
        if let Err(e) = self.set_task(task, interrupted) {
            return e.map(|e| Evaluation::failed(1, e, Duration::ZERO, Duration::ZERO));
        }
        let request = Request::One {
            steps: steps.map(steps_to_json),
            id,
            fault: self.spec.fault_candidate,
        };
        if let Err(e) = self.send(&request) {
            let how = self.bury();
            return Some(died(2, "sent", &format!("{how} ({e})")));
        }
        let limit = silence_limit(task.eval.measure.timeout.unwrap_or_default());
        loop {
            match self.next(limit, interrupted) {
                Ok(Reply::Building) | Ok(Reply::Running(_)) => {}
                Ok(Reply::One(e)) => return Some(e),
                Ok(other) => {
                    let how = self.bury();
                    return Some(died(
                        2,
                        "measuring",
                        &format!("{how}: it replied {other:?}"),
                    ));
                }
                Err(None) => return None,
                Err(Some(how)) => return Some(died(4, "running", &how)),
            }
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.bury();
    }
}

/// The process-wide client of a worker spec: one long-lived worker per executable, kept
/// across tasks, batches and the commands of one run (as the thread pools are).
pub fn with_client<R>(spec: &WorkerSpec, f: impl FnOnce(&mut Client) -> R) -> R {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CLIENTS: OnceLock<Mutex<HashMap<String, Client>>> = OnceLock::new();
    let key = serde_json::to_string(spec).expect("a worker spec serializes");
    let mut clients = CLIENTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let client = clients
        .entry(key)
        .or_insert_with(|| Client::new(spec.clone()));
    f(client)
}
