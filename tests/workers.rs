//! Distributed measurement on a real PostgreSQL (scripts/test starts the cluster): `ttdb tune
//! --workers` with `ttdb worker` processes. A worker killed with SIGKILL mid-batch loses
//! nothing (its jobs are redone after their lease expires, each counted once); a worker of
//! another host class never takes a job; Ctrl-C to the coordinator cancels what is queued
//! and keeps what was measured; a role made by the README's SQL can work but not delete.
use crate::common;
use common::corpus_dir;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use ttdb::store::testing::{db_arg, fresh_postgres};
use ttdb::store::{Location, OpenMode, Store};

fn ttdb_cmd(db: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ttdb"));
    c.env_remove("TTDB_DB").arg("--db").arg(db);
    c
}

/// A database on the test cluster with resnet_18's records.
fn database() -> (Location, String) {
    with_resnet18_records(fresh_postgres())
}

/// `location` with resnet_18's records imported, and its `--db` text.
fn with_resnet18_records(location: Location) -> (Location, String) {
    let db = db_arg(&location);
    let log = corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json");
    let out = ttdb_cmd(&db).arg("import").arg(&log).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (location, db)
}

/// A child process killed when the test ends, passed or not (a failed assertion must not
/// leave a worker running).
struct Proc(Option<Child>);

impl Proc {
    fn id(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }
    fn take(mut self) -> Child {
        self.0.take().unwrap()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A worker, its messages in the test's output.
fn worker(db: &str, extra: &[&str]) -> Proc {
    let child = ttdb_cmd(db)
        .args(["worker", "--in-process", "--poll", "0.2"])
        .args(if extra.contains(&"--jobs") {
            &[][..]
        } else {
            &["--jobs", "2"][..]
        })
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    Proc(Some(child))
}

/// `ttdb tune --workers [CLASS]` on one conv workload, `trials` trials in batches of 8.
fn tune(db: &str, class: Option<&str>, trials: usize) -> Proc {
    let mut c = ttdb_cmd(db);
    c.args([
        "tune",
        "--class",
        "conv2d_nchwc+add+relu",
        "--limit",
        "1",
        "--batch",
        "8",
    ])
    .args(["--trials", &trials.to_string(), "--json"]);
    match class {
        Some(class) => c.args(["--workers", class]),
        None => c.arg("--workers"),
    };
    Proc(Some(
        c.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ))
}

fn query_i64(location: &Location, sql: &str) -> i64 {
    let s = Store::open_at(location, OpenMode::ReadOnly).unwrap();
    s.sql_for_tests().query_one(sql, &[], |r| r.get(0)).unwrap()
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(30));
    }
}

/// Waits for `proc` (at most 5 minutes) and returns its exit code, stdout and stderr.
fn finish(proc: Proc, what: &str) -> (i32, String, String) {
    let pid = proc.id();
    let child = proc.take();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watched = done.clone();
    std::thread::spawn(move || {
        let t0 = Instant::now();
        while !watched.load(std::sync::atomic::Ordering::SeqCst) {
            if t0.elapsed() > Duration::from_secs(300) {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let out = child.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    let code = out.status.code().unwrap_or(-1);
    eprintln!("{what}: exit {code}\n{stderr}");
    (code, stdout, stderr)
}

fn stop(proc: Proc) {
    let mut child = proc.take();
    // SIGTERM: the worker finishes its batch and exits.
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("a worker did not exit within 60 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Each job of the tune is done once, with one measurement; returns (jobs, most attempts).
fn every_job_counted_once(location: &Location, trials: i64) -> (i64, i64) {
    let jobs = query_i64(location, "SELECT COUNT(*) FROM jobs");
    let done = query_i64(location, "SELECT COUNT(*) FROM jobs WHERE state = 'done'");
    let measured = query_i64(
        location,
        "SELECT COUNT(*) FROM measurements WHERE job_id IS NOT NULL",
    );
    let distinct = query_i64(location, "SELECT COUNT(DISTINCT job_id) FROM measurements");
    assert_eq!(
        (jobs, done, measured, distinct),
        (trials, trials, trials, trials)
    );
    (jobs, query_i64(location, "SELECT MAX(attempts) FROM jobs"))
}

#[test]
fn a_killed_worker_loses_nothing() {
    let (location, db) = database();
    // A short lease, so that the dead worker's jobs come back within the test.
    let a = worker(&db, &["--lease", "2"]);
    let a_pid = a.id();
    let b = worker(&db, &["--lease", "2"]);
    let coordinator = tune(&db, None, 24);
    // Kill A while it holds leased jobs, after it handed some in: freeze it (SIGSTOP), look,
    // and kill it (SIGKILL) only if it holds some; else let it go on and look again.
    let a_id = || {
        query_i64(
            &location,
            &format!("SELECT COALESCE(MAX(id), 0) FROM workers WHERE name LIKE '%:{a_pid}'"),
        )
    };
    let held = |id: i64| {
        query_i64(
            &location,
            &format!("SELECT COUNT(*) FROM jobs WHERE worker_id = {id} AND state = 'leased'"),
        )
    };
    let held_ids = |id: i64| -> Vec<i64> {
        let s = Store::open_at(&location, OpenMode::ReadOnly).unwrap();
        s.sql_for_tests()
            .query_map(
                &format!("SELECT id FROM jobs WHERE worker_id = {id} AND state = 'leased'"),
                &[],
                |r| r.get(0),
            )
            .unwrap()
    };
    let signal = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &a_pid.to_string()])
            .status()
            .unwrap()
            .success());
    };
    let t0 = Instant::now();
    let held_at_death = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "worker A never held jobs"
        );
        let id = a_id();
        if id > 0
            && query_i64(
                &location,
                &format!("SELECT jobs_done FROM workers WHERE id = {id}"),
            ) > 0
        {
            signal("-STOP");
            let n = held(id);
            if n > 0 {
                signal("-KILL");
                break held_ids(id);
            }
            signal("-CONT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    a.take().wait().unwrap();
    let (code, out, err) = finish(coordinator, "tune");
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["trials"], 24, "{out}");
    let (_, attempts) = every_job_counted_once(&location, 24);
    assert!(
        attempts >= 2,
        "no job was redone after the kill (max attempts {attempts})"
    );
    for job in held_at_death {
        let attempts = query_i64(
            &location,
            &format!("SELECT attempts FROM jobs WHERE id = {job}"),
        );
        assert!(
            attempts >= 2,
            "job {job}, held by the killed worker, was not redone"
        );
    }
    stop(b);
    assert_eq!(
        query_i64(&location, "SELECT COUNT(*) FROM tunes WHERE state = 'done'"),
        1
    );
}

#[test]
fn another_host_class_never_takes_the_job_and_ctrl_c_cancels_it() {
    let (location, db) = database();
    let w = worker(&db, &[]);
    wait_until("the worker to register", Duration::from_secs(30), || {
        query_i64(&location, "SELECT COUNT(*) FROM workers") == 1
    });
    let s = Store::open_at(&location, OpenMode::ReadOnly).unwrap();
    let class: String = s
        .sql_for_tests()
        .query_one("SELECT host_class FROM workers", &[], |r| r.get(0))
        .unwrap();
    drop(s);
    // The same vector width (the tune refuses another), another CPU.
    let other = format!("other-{class}");
    let coordinator = tune(&db, Some(&other), 8);
    wait_until("the jobs to be queued", Duration::from_secs(60), || {
        query_i64(&location, "SELECT COUNT(*) FROM jobs") == 8
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        query_i64(
            &location,
            "SELECT COUNT(*) FROM jobs WHERE state <> 'pending'"
        ),
        0
    );
    assert_eq!(
        query_i64(
            &location,
            "SELECT COUNT(*) FROM jobs WHERE worker_id IS NOT NULL"
        ),
        0
    );
    let _ = Command::new("kill")
        .args(["-INT", &coordinator.id().to_string()])
        .status();
    let (code, _, err) = finish(coordinator, "tune");
    assert_eq!(code, 130, "{err}");
    assert!(err.contains("8 queued job(s) of tune"), "{err}");
    assert_eq!(
        query_i64(
            &location,
            "SELECT COUNT(*) FROM jobs WHERE state = 'cancelled'"
        ),
        8
    );
    assert_eq!(query_i64(&location, "SELECT COUNT(*) FROM measurements"), 0);
    stop(w);
}

#[test]
fn ctrl_c_keeps_every_result_handed_in() {
    let (location, db) = database();
    let w = worker(&db, &[]);
    let coordinator = tune(&db, None, 64);
    wait_until("some results", Duration::from_secs(120), || {
        query_i64(&location, "SELECT COUNT(*) FROM jobs WHERE state = 'done'") >= 4
    });
    let _ = Command::new("kill")
        .args(["-INT", &coordinator.id().to_string()])
        .status();
    let (code, _, err) = finish(coordinator, "tune");
    assert_eq!(code, 130, "{err}");
    stop(w);
    let done = query_i64(&location, "SELECT COUNT(*) FROM jobs WHERE state = 'done'");
    assert!(done >= 4);
    assert_eq!(
        query_i64(
            &location,
            "SELECT COUNT(*) FROM jobs WHERE state IN ('pending', 'leased')"
        ),
        0
    );
    assert!(
        query_i64(
            &location,
            "SELECT COUNT(*) FROM jobs WHERE state = 'cancelled'"
        ) > 0
    );
    assert_eq!(
        query_i64(
            &location,
            "SELECT COUNT(*) FROM measurements WHERE job_id IS NOT NULL"
        ),
        done
    );
    assert_eq!(
        query_i64(
            &location,
            "SELECT COUNT(*) FROM tunes WHERE state = 'cancelled'"
        ),
        1
    );
}

use crate::common::pg_cluster;

#[test]
fn a_server_restart_mid_tune_loses_nothing() {
    let cluster = pg_cluster::Cluster::start();
    let admin = ttdb::store::PgUrl::parse(&cluster.url("postgres")).unwrap();
    let (location, db) = with_resnet18_records(ttdb::store::testing::new_database(&admin, "ttdb"));
    let w = worker(&db, &["--lease", "10"]);
    let coordinator = tune(&db, None, 32);
    wait_until("some results", Duration::from_secs(120), || {
        query_i64(&location, "SELECT COUNT(*) FROM jobs WHERE state = 'done'") >= 4
    });
    cluster.restart();
    let (code, out, err) = finish(coordinator, "tune");
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["trials"], 32, "{out}");
    every_job_counted_once(&location, 32);
    stop(w);
}

/// The worker role of the README, as written there.
fn readme_worker_role() -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let after = readme
        .split_once("<!-- worker-role -->\n```sql\n")
        .expect("README.md has the worker role's SQL after <!-- worker-role -->")
        .1;
    after.split_once("```").unwrap().0.to_string()
}

#[test]
fn the_readme_worker_role_measures_but_cannot_delete_or_rewrite() {
    let (location, db) = database();
    let role = format!("ttdb_worker_{}", std::process::id());
    let admin = Store::open_at(&location, OpenMode::Write).unwrap();
    admin
        .sql_for_tests()
        .execute_batch(&readme_worker_role().replace("ttdb_worker", &role))
        .unwrap();
    let as_worker = db.replacen("postgres://ttdb@", &format!("postgres://{role}@"), 1);
    let w = worker(&as_worker, &[]);
    let coordinator = tune(&db, None, 8);
    let (code, _, err) = finish(coordinator, "tune");
    assert_eq!(code, 0, "{err}");
    every_job_counted_once(&location, 8);
    stop(w);
    let worker_store = Store::open_at(
        &Location::Postgres(ttdb::store::PgUrl::parse(&as_worker).unwrap()),
        OpenMode::Write,
    )
    .unwrap();
    for statement in [
        "DELETE FROM records",
        "UPDATE records SET mean_cost = 0",
        "DELETE FROM measurements",
        "UPDATE measurements SET median_s = 0",
        "DELETE FROM jobs",
        "DELETE FROM workloads",
        "TRUNCATE records",
    ] {
        let e = worker_store
            .sql_for_tests()
            .execute_batch(statement)
            .expect_err(statement);
        assert!(
            e.to_string().contains("permission denied"),
            "{statement}: {e}"
        );
    }
    drop(worker_store);
    admin
        .sql_for_tests()
        .execute_batch(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .unwrap();
}

/// 4 imports of different logs, 2 tunes on the workers and a match, all at once on one
/// database: every command succeeds, the records are the logs' (as imported one after
/// another into SQLite) plus one per measured job, and no record or job is counted twice.
#[test]
fn imports_tunes_and_a_match_at_once_lose_and_duplicate_nothing() {
    let (location, db) = database();
    let logs: Vec<String> = ["alexnet", "vgg_16", "googlenet", "mobilenet_v2"]
        .iter()
        .map(|n| {
            corpus_dir()
                .join(format!("ansor/tvm_ansor_bench_nchwc/{n}.best.json"))
                .display()
                .to_string()
        })
        .collect();
    // What the same logs give imported one at a time into SQLite.
    let dir = tempfile::tempdir().unwrap();
    let sqlite = dir.path().join("serial.db").display().to_string();
    let resnet = corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json");
    for log in logs
        .iter()
        .map(String::as_str)
        .chain([resnet.to_str().unwrap()])
    {
        let out = ttdb_cmd(&sqlite).args(["import", log]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let serial = query_i64(
        &Location::File(sqlite.into()),
        "SELECT COUNT(*) FROM records",
    );

    let w = worker(&db, &["--jobs", "4"]);
    let spawn = |args: Vec<String>| {
        Proc(Some(
            ttdb_cmd(&db)
                .args(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        ))
    };
    let mut running: Vec<(String, Proc)> = logs
        .iter()
        .map(|l| {
            (
                format!("import {l}"),
                spawn(vec!["import".into(), l.clone()]),
            )
        })
        .collect();
    running.push(("tune 1".into(), tune(&db, None, 8)));
    running.push(("tune 2".into(), tune(&db, None, 8)));
    let model = corpus_dir().join("onnx/torchvision_graph_only/resnet18.onnx");
    running.push((
        "match".into(),
        spawn(vec!["match".into(), model.display().to_string()]),
    ));
    for (what, p) in running {
        let (code, _, err) = finish(p, &what);
        assert_eq!(code, 0, "{what}: {err}");
    }
    stop(w);
    assert_eq!(
        query_i64(&location, "SELECT COUNT(*) FROM jobs WHERE state = 'done'"),
        16
    );
    assert_eq!(
        query_i64(
            &location,
            "SELECT COUNT(*) FROM measurements WHERE job_id IS NOT NULL"
        ),
        16
    );
    assert_eq!(
        query_i64(&location, "SELECT COUNT(*) FROM records"),
        serial + 16
    );
    assert_eq!(
        query_i64(&location, "SELECT COUNT(*) FROM (SELECT digest FROM records GROUP BY digest HAVING COUNT(*) > 1) AS d"),
        0
    );
}

/// `apply --workers`: the default schedule and the transferred candidates of every kernel are
/// measured by the worker, which stores them (each once, with its job); the coordinator
/// stores no measurement of its own, and its report is the workers' figures.
#[test]
fn apply_measures_the_defaults_and_candidates_on_the_workers() {
    let (location, db) = database();
    let w = worker(&db, &["--jobs", "4"]);
    let model =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/models/tiny_resnet.onnx");
    let apply = Proc(Some(
        ttdb_cmd(&db)
            .args([
                "apply",
                model.to_str().unwrap(),
                "--top-k",
                "2",
                "--transfer-only",
                "--json",
                "--workers",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let (code, out, err) = finish(apply, "apply --workers");
    stop(w);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let kernels = report["kernels"].as_array().unwrap();
    let candidates: usize = kernels
        .iter()
        .map(|k| k["trials"].as_array().unwrap().len())
        .sum();
    assert!(
        candidates >= 3,
        "the resnet_18 records give class candidates: {out}"
    );
    assert!(kernels.iter().all(|k| k["verified"] == true), "{out}");
    // One job per kernel's default and per candidate, each done and measured once.
    let jobs = (kernels.len() + candidates) as i64;
    every_job_counted_once(&location, jobs);
    assert_eq!(
        query_i64(
            &location,
            "SELECT COUNT(*) FROM measurements WHERE job_id IS NULL"
        ),
        0,
        "the coordinator stores nothing itself"
    );
}
