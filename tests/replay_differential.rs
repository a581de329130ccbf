//! Differential test of state replay against the reference simulator
//! `shared/tools/ansor_state_sim.py`: every record of the real-world corpus is replayed by
//! ttdb and by the oracle, and the final states must agree line by line; every SP `extent`
//! field must match the replayed extent.
//!
//! Initial stages come from ttdb's own DAGs (`recognize` + `stage_inits_from_dag`, with
//! the dataflow, so CA/CHR consumer checks are exact); the oracle only supplies the final
//! states (`--dump`, one process for all files).
use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use ttdb::ansor::log::{lines, parse_line, LogLine};
use ttdb::ansor::WorkloadKey;
use ttdb::recognize::recognize;
use ttdb::schedule::{stage_inits_from_dag, StageInit, State};

fn sim_path() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/ansor_state_sim.py");
    assert!(
        p.is_file(),
        "the oracle is missing: expected {}",
        p.display()
    );
    p
}

/// Runs `python3 args...` with `stdin`, returning stdout and stderr; fails loudly when
/// python3 cannot run or the oracle exits with an error.
fn python(args: &[&str], stdin: &str) -> (String, String) {
    let mut child = Command::new("python3")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("python3 is needed to run the oracle and could not be started: {e}")
        });
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.to_string();
    let writer = std::thread::spawn(move || pipe.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("wait for python3");
    writer.join().unwrap().expect("write to python3");
    let stdout = String::from_utf8(out.stdout).expect("oracle stdout is UTF-8");
    let stderr = String::from_utf8(out.stderr).expect("oracle stderr is UTF-8");
    assert!(
        out.status.success(),
        "the oracle failed ({}):\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// Initial stages of every key from ttdb's own DAGs (`recognize`), or why there is none.
fn ttdb_initial_stages(keys: &BTreeSet<String>) -> HashMap<String, Result<Vec<StageInit>, String>> {
    keys.iter()
        .map(|key| {
            let inits = WorkloadKey::parse(key)
                .map_err(|e| e.to_string())
                .and_then(|k| recognize(&k).map_err(|e| e.to_string()))
                .map(|r| stage_inits_from_dag(&r.dag));
            (key.clone(), inits)
        })
        .collect()
}

/// One record's block of `--dump`: the final state, or the problem the oracle found.
#[derive(Default)]
struct OracleRecord {
    state: Vec<String>,
    problem: Option<String>,
    skipped: bool,
}

struct Oracle {
    records: HashMap<(String, usize), OracleRecord>,
    /// Per file: SP extent checks the oracle made.
    sp_checks: HashMap<String, usize>,
}

fn run_oracle(files: &[PathBuf]) -> Oracle {
    let mut args = vec![sim_path().display().to_string(), "--dump".to_string()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (stdout, stderr) = python(&args, "");
    let mut records = HashMap::new();
    let mut current: Option<((String, usize), OracleRecord)> = None;
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("record ") {
            if let Some((k, r)) = current.take() {
                records.insert(k, r);
            }
            let mut r = OracleRecord::default();
            // `record PATH:LINE HASH steps=N` or `record PATH:LINE SKIPPED unknown DAG KEY`
            let (loc, tail) = rest.split_once(' ').unwrap();
            r.skipped = tail.starts_with("SKIPPED");
            let (path, ln) = loc.rsplit_once(':').unwrap();
            current = Some(((path.to_string(), ln.parse().unwrap()), r));
        } else if let Some(p) = line.strip_prefix("PROBLEM ") {
            current.as_mut().unwrap().1.problem = Some(p.to_string());
        } else {
            current
                .as_mut()
                .expect("dump lines follow a record line")
                .1
                .state
                .push(line.to_string());
        }
    }
    if let Some((k, r)) = current.take() {
        records.insert(k, r);
    }
    let mut sp_checks = HashMap::new();
    for line in stderr.lines() {
        // `PATH: records R, ... | SP extent checks C, ...`
        if let (Some((path, _)), Some((_, tail))) = (
            line.split_once(": records "),
            line.split_once("SP extent checks "),
        ) {
            let n = tail.split(',').next().unwrap().trim().parse().unwrap();
            sp_checks.insert(path.to_string(), n);
        }
    }
    Oracle { records, sp_checks }
}

#[derive(Default)]
struct FileTally {
    records: usize,
    replayed: usize,
    agree: usize,
    sp_checks: usize,
    oracle_sp_checks: usize,
}

/// Replays every record of `files` with ttdb and compares with the oracle. Returns the
/// per-file tallies and the disagreements.
fn compare(files: &[PathBuf]) -> (BTreeMap<String, FileTally>, Vec<String>) {
    let texts: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let mut parsed = Vec::new();
    let mut keys = BTreeSet::new();
    for (f, text) in files.iter().zip(&texts) {
        for (ln, bytes) in lines(text) {
            match parse_line(bytes) {
                LogLine::Record { record, .. } => {
                    keys.insert(record.task.workload_key.clone());
                    parsed.push((f.display().to_string(), ln, record));
                }
                LogLine::Bad { reason, .. } => panic!(
                    "{}:{ln}: ttdb cannot parse the record: {reason}",
                    f.display()
                ),
                LogLine::Blank | LogLine::Comment => {}
            }
        }
    }
    let inits = ttdb_initial_stages(&keys);
    let oracle = run_oracle(files);
    let mut tally: BTreeMap<String, FileTally> = BTreeMap::new();
    let mut failures = Vec::new();
    for (path, ln, record) in &parsed {
        let t = tally.entry(path.clone()).or_default();
        t.records += 1;
        let Some(expected) = oracle.records.get(&(path.clone(), *ln)) else {
            failures.push(format!("{path}:{ln}: no oracle output"));
            continue;
        };
        let init = match &inits[&record.task.workload_key] {
            Ok(init) => init,
            Err(e) => {
                failures.push(format!(
                    "{path}:{ln}: ttdb has no DAG for {}: {e}",
                    record.task.workload_key
                ));
                continue;
            }
        };
        assert!(!expected.skipped);
        let mut state = State::new(init).unwrap_or_else(|e| panic!("{path}:{ln}: {e}"));
        let replayed = state.apply_all(&record.steps);
        let sp_ok = state.verify_split_extents();
        if let Err(why) = state.check_invariants() {
            failures.push(format!("{path}:{ln}: invariant broken: {why}"));
        }
        match (&expected.problem, replayed.and(sp_ok)) {
            (None, Ok(())) => {
                t.replayed += 1;
                t.sp_checks += state.split_report().checked;
                let got = state.dump();
                let want = expected.state.join("\n");
                if got == want {
                    t.agree += 1;
                } else {
                    let diff: Vec<String> = got
                        .lines()
                        .zip(want.lines().chain(std::iter::repeat("<missing>")))
                        .filter(|(g, w)| g != w)
                        .map(|(g, w)| format!("    ttdb:   {g}\n    oracle: {w}"))
                        .collect();
                    failures.push(format!(
                        "{path}:{ln}: final states differ\n{}",
                        diff.join("\n")
                    ));
                }
            }
            (Some(_), Err(_)) => t.agree += 1, // both refuse the record
            (None, Err(e)) => failures.push(format!(
                "{path}:{ln}: ttdb refuses a record the oracle replays: {e}"
            )),
            (Some(p), Ok(())) => failures.push(format!(
                "{path}:{ln}: ttdb replays a record the oracle refuses: {p}"
            )),
        }
    }
    for (path, t) in tally.iter_mut() {
        t.oracle_sp_checks = oracle.sp_checks.get(path).copied().unwrap_or(usize::MAX);
    }
    (tally, failures)
}

fn print_table(tally: &BTreeMap<String, FileTally>) -> FileTally {
    let mut total = FileTally::default();
    println!(
        "{:<62} {:>7} {:>8} {:>7} {:>15}",
        "file", "records", "replayed", "agree", "SP checks"
    );
    for (path, t) in tally {
        let name = common::rel(Path::new(path));
        let sp = format!("{}/{}", t.sp_checks, t.oracle_sp_checks);
        println!(
            "{name:<62} {:>7} {:>8} {:>7} {:>15}",
            t.records, t.replayed, t.agree, sp
        );
        total.records += t.records;
        total.replayed += t.replayed;
        total.agree += t.agree;
        total.sp_checks += t.sp_checks;
        total.oracle_sp_checks += t.oracle_sp_checks;
    }
    let sp = format!("{}/{}", total.sp_checks, total.oracle_sp_checks);
    println!(
        "{:<62} {:>7} {:>8} {:>7} {:>15}",
        "TOTAL", total.records, total.replayed, total.agree, sp
    );
    total
}

fn assert_agreement(files: &[PathBuf], expected_records: usize) {
    let (tally, failures) = compare(files);
    let total = print_table(&tally);
    for f in failures.iter().take(20) {
        println!("{f}");
    }
    assert!(
        failures.is_empty(),
        "{} records disagree with the oracle (first 20 above)",
        failures.len()
    );
    for (path, t) in &tally {
        assert_eq!(
            t.sp_checks, t.oracle_sp_checks,
            "{path}: SP extent checks differ from the oracle's"
        );
    }
    assert_eq!(
        total.records, expected_records,
        "record count of the corpus changed"
    );
    assert_eq!(total.agree, total.records);
}

#[test]
fn cpu_corpus_final_states_agree_with_the_oracle() {
    let files: Vec<PathBuf> = common::ansor_files()
        .into_iter()
        .filter(|p| !common::is_cuda_log(p))
        .collect();
    // 5,701 in the curated logs + 72,895 in the full tuning histories
    assert_agreement(&files, 78_596);
}

/// The CUDA logs exercise what CPU sketches never emit (CHR, FFSP, thread bindings, splits
/// of undefined extents after CA).
#[test]
fn cuda_corpus_final_states_agree_with_the_oracle() {
    let files: Vec<PathBuf> = common::ansor_files()
        .into_iter()
        .filter(|p| common::is_cuda_log(p))
        .collect();
    assert_agreement(&files, 25);
}
