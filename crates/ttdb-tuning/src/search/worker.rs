//! The measuring worker: `ttdb measure-worker` serves [`ttdb_backend::evaluate::worker`]'s protocol
//! on its stdin and stdout. It holds one task (a DAG and its reference), measures batches
//! with [`KernelMeasurer`] and single candidates with `evaluate_steps`, and says which
//! candidate it is about to run before it runs it, so that if the candidate kills it the
//! parent knows whom to blame.
use super::measurer::{KernelMeasurer, Measurer, Phase};
use std::io::{BufRead, Write};
use std::sync::Mutex;
use ttdb_algo::ir::Dag;
use ttdb_backend::evaluate::worker::{Reply, Request};
use ttdb_backend::evaluate::{
    evaluate_default, evaluate_steps, EvalOptions, Evaluation, Reference,
};
use ttdb_format::ansor::steps_from_json;

extern "C" {
    fn raise(sig: i32) -> i32;
    fn signal(signum: i32, handler: usize) -> usize;
}

/// The test hook of `WorkerSpec::fault_candidate`: dies as a faulting kernel would.
fn fault_now() -> ! {
    const SIGSEGV: i32 = 11;
    const SIG_DFL: usize = 0;
    // SAFETY: restores the default action (Rust's runtime handles SIGSEGV to report stack
    // overflows) and raises the signal, which ends the process.
    unsafe {
        signal(SIGSEGV, SIG_DFL);
        raise(SIGSEGV);
    }
    std::process::abort()
}

/// Serves requests from `input` until it closes, writing replies to `output` (one JSON
/// object per line, flushed: a reply must reach the parent before a crash can happen).
pub fn serve(input: impl BufRead, output: impl Write + Send) -> Result<(), String> {
    let out = Mutex::new(output);
    let reply = |r: &Reply| -> Result<(), String> {
        let line = serde_json::to_string(r).map_err(|e| e.to_string())?;
        let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
        writeln!(o, "{line}")
            .and_then(|_| o.flush())
            .map_err(|e| format!("cannot answer: {e}"))
    };
    let mut task: Option<(Dag, Reference, EvalOptions)> = None;
    for line in input.lines() {
        let line = line.map_err(|e| format!("cannot read a request: {e}"))?;
        let request: Request =
            serde_json::from_str(&line).map_err(|e| format!("unreadable request: {e}"))?;
        match request {
            Request::Task {
                dag,
                reference_seed,
                eval,
                expected,
            } => match reference_of(&dag, reference_seed, expected) {
                Ok(r) => {
                    task = Some((dag, r, eval));
                    reply(&Reply::Ready)?;
                }
                Err(e) => {
                    task = None;
                    reply(&Reply::TaskError(e))?;
                }
            },
            Request::Batch {
                schedules,
                ids,
                timeout,
                fault,
            } => {
                let (dag, reference, eval) = task.as_ref().ok_or("a batch before any task")?;
                let steps = parse_all(&schedules)?;
                let on_phase = |p: Phase| {
                    let r = match p {
                        Phase::Building => Reply::Building,
                        Phase::Running(i) => Reply::Running(i),
                    };
                    // Said before it happens. (A parent that stopped listening ends the
                    // worker at its next read.)
                    let _ = reply(&r);
                    if let Phase::Running(i) = p {
                        if fault.is_some() && ids.get(i) == fault.as_ref() {
                            fault_now();
                        }
                    }
                };
                let never = || false;
                let mut m = KernelMeasurer::new(dag, reference, eval.clone(), &never);
                m.on_phase = &on_phase;
                let results = m.measure(&steps, timeout);
                reply(&Reply::Batch(results))?;
            }
            Request::One { steps, id, fault } => {
                let (dag, reference, eval) = task.as_ref().ok_or("a candidate before any task")?;
                reply(&Reply::Running(0))?;
                if fault == Some(id) {
                    fault_now();
                }
                let e: Evaluation = match steps {
                    Some(text) => match steps_from_json(&text) {
                        Ok(s) => evaluate_steps(dag, &s, reference, eval),
                        Err(e) => Evaluation::failure(1, format!("unreadable steps: {e}")),
                    },
                    None => evaluate_default(dag, reference, eval),
                };
                reply(&Reply::One(e))?;
            }
        }
    }
    Ok(())
}

fn parse_all(schedules: &[String]) -> Result<Vec<Vec<ttdb_format::ansor::Step>>, String> {
    schedules
        .iter()
        .map(|s| steps_from_json(s).map_err(|e| format!("unreadable steps: {e}")))
        .collect()
}

/// The task's reference: from the values the parent sent, else evaluated here.
fn reference_of(
    dag: &ttdb_algo::ir::Dag,
    seed: u64,
    expected: Option<Vec<ttdb_backend::evaluate::ExpectedValues>>,
) -> Result<Reference, String> {
    match expected {
        Some(values) => Reference::with_expected(dag, seed, values),
        None => Reference::new(dag, seed),
    }
}
