//! The queue's rules, on both backends: claims by host class and batch, results counted
//! once, leases that expire put jobs back and, after MAX_ATTEMPTS, fail them with the
//! reason; cancelling drops what is not done.
use super::*;
use crate::store::db::params;
use ttdb_format::ansor::Step;

fn host(cpu: &str) -> HostFingerprint {
    HostFingerprint {
        cpu_model: format!("Test CPU {cpu}"),
        isa_flags: vec!["avx2".into(), "fma".into()],
        llvm_cpu: cpu.into(),
        llvm_features: "+avx2".into(),
        cores: 2,
        ttdb_version: "0.1.0".into(),
    }
}

fn measurement(cost: f64) -> NewMeasurement {
    NewMeasurement {
        workload_key: r#"["218090bc617f9a36fbabdf253ec28064", [14, 3072], [768, 3072], [14, 768]]"#
            .into(),
        steps: vec![Step::parse(r#"["SP", 2, 0, 14, [1, 1, 14], 1]"#).unwrap()],
        samples: vec![cost],
        error_no: 0,
        error: None,
        verified: true,
        max_rel_error: Some(1e-6),
        median_s: Some(cost),
        min_s: Some(cost),
        max_s: Some(cost),
        gflops: None,
        compile_ms: Some(1.0),
        wall_s: 0.1,
        origin_record_id: None,
        provenance: "test job".into(),
    }
}

fn finished(jobs: &[(i64, String)], cost: f64) -> Vec<Finished> {
    jobs.iter()
        .enumerate()
        .map(|(i, (id, _))| Finished {
            job_id: *id,
            result: format!("{{\"job\": {id}}}"),
            // Distinct costs: distinct record lines.
            measurement: measurement(cost + i as f64 * 1e-6),
        })
        .collect()
}

fn schedules(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("[\"schedule {i}\"]")).collect()
}

fn count(s: &Store, sql: &str) -> i64 {
    s.sql_for_tests()
        .query_one(sql, params![], |r| r.get(0))
        .unwrap()
}

const LEASE: Duration = Duration::from_secs(60);

crate::on_both_backends! {
    fn jobs_are_claimed_by_class_and_batch_and_counted_once(backend) {
        let s = backend.store();
        let zen = host("znver3");
        let other = host("skylake-avx512");
        let w = s.register_worker("a:1", &zen, 4).unwrap();
        let w_other = s.register_worker("b:1", &other, 4).unwrap();
        let tune = s.begin_tune(&zen.class(), "test").unwrap();
        let b1 = s.enqueue(tune, &zen.class(), "{}", Duration::from_secs(5), &schedules(6)).unwrap();
        let b2 = s.enqueue(tune, &zen.class(), "{}", Duration::from_secs(5), &schedules(2)).unwrap();
        // Another class never takes them.
        assert!(s.claim(w_other, &other.class(), 8, LEASE).unwrap().is_none());
        // The oldest batch first, at most `max` of it, in order.
        let c = s.claim(w, &zen.class(), 4, LEASE).unwrap().unwrap();
        assert_eq!((c.batch_id, c.tune_id, c.jobs.len()), (b1, tune, 4));
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert_eq!(c.jobs[0].1, "[\"schedule 0\"]");
        let c2 = s.claim(w, &zen.class(), 4, LEASE).unwrap().unwrap();
        assert_eq!((c2.batch_id, c2.jobs.len()), (b1, 2));
        let c3 = s.claim(w, &zen.class(), 4, LEASE).unwrap().unwrap();
        assert_eq!(c3.batch_id, b2);
        assert!(s.claim(w, &zen.class(), 4, LEASE).unwrap().is_none());
        assert_eq!(s.complete_jobs(w, &zen, "search", 0.5, &finished(&c.jobs, 1e-3)).unwrap(), 4);
        // Handing the same jobs in again counts nothing.
        assert_eq!(s.complete_jobs(w, &zen, "search", 0.5, &finished(&c.jobs, 2e-3)).unwrap(), 0);
        let jobs = s.batch_jobs(b1).unwrap();
        let states: Vec<JobState> = jobs.iter().map(|j| j.state).collect();
        assert_eq!(states[..4], [JobState::Done; 4]);
        assert_eq!(states[4..], [JobState::Leased; 2]);
        assert_eq!(jobs[0].result.as_deref(), Some(format!("{{\"job\": {}}}", c.jobs[0].0).as_str()));
        assert_eq!(count(&s, "SELECT COUNT(*) FROM measurements WHERE job_id IS NOT NULL"), 4);
        // The records are the worker's host's.
        assert_eq!(
            count(&s, "SELECT COUNT(DISTINCT host_id) FROM measurements"),
            1
        );
        let rows = s.workers().unwrap();
        let mine = rows.iter().find(|r| r.id == w).unwrap();
        assert_eq!((mine.jobs_done, mine.host_class.as_str()), (4, zen.class().as_str()));
        let q = s.queue().unwrap();
        assert_eq!((q[0].done, q[0].leased, q[0].pending), (4, 4, 0));
    }
}

crate::on_both_backends! {
    fn an_expired_lease_puts_the_job_back_then_fails_it(backend) {
        let s = backend.store();
        let zen = host("znver3");
        let dead = s.register_worker("dead:1", &zen, 1).unwrap();
        let alive = s.register_worker("alive:1", &zen, 1).unwrap();
        let tune = s.begin_tune(&zen.class(), "test").unwrap();
        let batch = s.enqueue(tune, &zen.class(), "{}", Duration::from_secs(5), &schedules(1)).unwrap();
        // The dead worker's lease runs out at once; the job goes back and is taken again.
        let c = s.claim(dead, &zen.class(), 1, Duration::ZERO).unwrap().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(s.reap_expired_leases().unwrap(), (1, 0));
        let c2 = s.claim(alive, &zen.class(), 1, LEASE).unwrap().unwrap();
        assert_eq!(c2.jobs[0].0, c.jobs[0].0);
        // The dead worker's late result is refused; the live one's is counted.
        assert_eq!(s.complete_jobs(dead, &zen, "search", 0.1, &finished(&c.jobs, 1e-3)).unwrap(), 0);
        assert_eq!(s.complete_jobs(alive, &zen, "search", 0.1, &finished(&c2.jobs, 2e-3)).unwrap(), 1);
        assert_eq!(count(&s, "SELECT COUNT(*) FROM measurements"), 1);
        assert_eq!(s.batch_jobs(batch).unwrap()[0].state, JobState::Done);

        // A job whose every worker dies: failed after MAX_ATTEMPTS leases, with the reason.
        let batch = s.enqueue(tune, &zen.class(), "{}", Duration::from_secs(5), &schedules(1)).unwrap();
        for attempt in 1..=MAX_ATTEMPTS {
            s.claim(dead, &zen.class(), 1, Duration::ZERO).unwrap().unwrap();
            std::thread::sleep(Duration::from_millis(20));
            let reaped = s.reap_expired_leases().unwrap();
            let expect = if attempt < MAX_ATTEMPTS { (1, 0) } else { (0, 1) };
            assert_eq!(reaped, expect, "attempt {attempt}");
        }
        let job = &s.batch_jobs(batch).unwrap()[0];
        assert_eq!(job.state, JobState::Failed);
        assert!(job.error.as_deref().unwrap().contains("lease expired 3 times"), "{:?}", job.error);
        assert!(s.claim(alive, &zen.class(), 1, LEASE).unwrap().is_none());
        let failed = s.workers().unwrap().into_iter().find(|w| w.id == dead).unwrap().jobs_failed;
        assert_eq!(failed, 1);
    }
}

crate::on_both_backends! {
    fn a_heartbeat_keeps_the_lease(backend) {
        let s = backend.store();
        let zen = host("znver3");
        let w = s.register_worker("a:1", &zen, 1).unwrap();
        let tune = s.begin_tune(&zen.class(), "test").unwrap();
        s.enqueue(tune, &zen.class(), "{}", Duration::from_secs(5), &schedules(1)).unwrap();
        s.claim(w, &zen.class(), 1, Duration::ZERO).unwrap().unwrap();
        s.worker_heartbeat(w, LEASE, Some("measuring")).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(s.reap_expired_leases().unwrap(), (0, 0));
        assert_eq!(s.workers().unwrap()[0].current.as_deref(), Some("measuring"));
    }
}

crate::on_both_backends! {
    fn cancelling_a_tune_drops_its_unfinished_jobs_and_keeps_results(backend) {
        let s = backend.store();
        let zen = host("znver3");
        let w = s.register_worker("a:1", &zen, 2).unwrap();
        let tune = s.begin_tune(&zen.class(), "test").unwrap();
        let batch = s.enqueue(tune, &zen.class(), "{}", Duration::from_secs(5), &schedules(5)).unwrap();
        let first = s.claim(w, &zen.class(), 2, LEASE).unwrap().unwrap();
        s.complete_jobs(w, &zen, "search", 0.1, &finished(&first.jobs, 1e-3)).unwrap();
        let second = s.claim(w, &zen.class(), 2, LEASE).unwrap().unwrap();
        assert_eq!(s.end_tune(tune, TuneEnd::Cancelled).unwrap(), 3);
        // The worker measuring the second claim finds its jobs gone.
        assert_eq!(s.complete_jobs(w, &zen, "search", 0.1, &finished(&second.jobs, 2e-3)).unwrap(), 0);
        let states: Vec<JobState> = s.batch_jobs(batch).unwrap().iter().map(|j| j.state).collect();
        assert_eq!(states, [JobState::Done, JobState::Done, JobState::Cancelled, JobState::Cancelled, JobState::Cancelled]);
        assert_eq!(count(&s, "SELECT COUNT(*) FROM measurements"), 2);
        assert_eq!(s.queue().unwrap()[0].state, "cancelled");
    }
}

crate::on_both_backends! {
    fn a_stopping_worker_returns_its_jobs(backend) {
        let s = backend.store();
        let zen = host("znver3");
        let w = s.register_worker("a:1", &zen, 2).unwrap();
        let tune = s.begin_tune(&zen.class(), "test").unwrap();
        let batch = s.enqueue(tune, &zen.class(), "{}", Duration::from_secs(5), &schedules(2)).unwrap();
        s.claim(w, &zen.class(), 2, LEASE).unwrap().unwrap();
        s.worker_stopped(w).unwrap();
        assert!(s.batch_jobs(batch).unwrap().iter().all(|j| j.state == JobState::Pending));
        assert_eq!(count(&s, "SELECT MAX(attempts) FROM jobs"), 0);
        assert!(s.workers().unwrap()[0].stopped);
        assert_eq!(s.live_workers(&zen.class(), LEASE).unwrap(), 0);
    }
}

crate::on_both_backends! {
    fn live_workers_split_a_batch(backend) {
        let s = backend.store();
        let zen = host("znver3");
        let a = s.register_worker("a:1", &zen, 8).unwrap();
        let b = s.register_worker("b:1", &zen, 8).unwrap();
        let tune = s.begin_tune(&zen.class(), "test").unwrap();
        s.enqueue(tune, &zen.class(), "{}", Duration::from_secs(5), &schedules(10)).unwrap();
        // Two live workers: five each, not eight and two.
        assert_eq!(s.claim(a, &zen.class(), 8, LEASE).unwrap().unwrap().jobs.len(), 5);
        assert_eq!(s.claim(b, &zen.class(), 8, LEASE).unwrap().unwrap().jobs.len(), 5);
        // The next batch while both are busy: A, free first, takes its share and leaves
        // B's pending, for whichever of them is free next.
        s.enqueue(tune, &zen.class(), "{}", Duration::from_secs(5), &schedules(8)).unwrap();
        assert_eq!(s.claim(a, &zen.class(), 8, LEASE).unwrap().unwrap().jobs.len(), 4);
        assert_eq!(s.claim(b, &zen.class(), 8, LEASE).unwrap().unwrap().jobs.len(), 4);
        // Stopped workers do not count.
        let d = s.register_worker("d:1", &zen, 8).unwrap();
        s.worker_stopped(d).unwrap();
        s.enqueue(tune, &zen.class(), "{}", Duration::from_secs(5), &schedules(3)).unwrap();
        let c = s.register_worker("c:1", &zen, 8).unwrap();
        // a, b and c are live: a share of three jobs is one.
        assert_eq!(s.claim(c, &zen.class(), 8, LEASE).unwrap().unwrap().jobs.len(), 1);
    }
}
