//! The work queue's own cost per job on PostgreSQL (`$TTDB_BENCH_POSTGRES`, a URL whose user
//! may create databases; benches/workers.sh starts a cluster and sets it): enqueueing a
//! batch, claiming one job, handing one in (its result, record and measurement in one
//! transaction), and the latency from an enqueue's commit to a listening session's wake-up.
//! Medians over many jobs. Run with `cargo bench --bench queue`.
use std::time::{Duration, Instant};
use ttdb::ansor::Step;
use ttdb::store::measurement::NewMeasurement;
use ttdb::store::queue::{Finished, JOBS_CHANNEL};
use ttdb::store::{OpenMode, PgUrl, Store};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn measurement(i: usize) -> NewMeasurement {
    NewMeasurement {
        workload_key: r#"["218090bc617f9a36fbabdf253ec28064", [14, 3072], [768, 3072], [14, 768]]"#
            .into(),
        steps: vec![Step::parse(r#"["SP", 2, 0, 14, [1, 1, 14], 1]"#).unwrap()],
        samples: vec![1e-3 + i as f64 * 1e-9],
        error_no: 0,
        error: None,
        verified: true,
        max_rel_error: Some(1e-6),
        median_s: Some(1e-3),
        min_s: Some(1e-3),
        max_s: Some(1e-3),
        gflops: None,
        compile_ms: Some(50.0),
        wall_s: 0.1,
        origin_record_id: None,
        provenance: "bench".into(),
    }
}

fn main() {
    let Ok(url) = std::env::var("TTDB_BENCH_POSTGRES") else {
        eprintln!("queue bench: set $TTDB_BENCH_POSTGRES (benches/workers.sh starts a cluster and sets it); skipped");
        return;
    };
    let admin = PgUrl::parse(&url).expect("a postgres:// URL");
    let location = ttdb::store::testing::new_database(&admin, "ttdb_queue_bench");
    let store = Store::open_at(&location, OpenMode::Create).unwrap();
    let listener = Store::open_at(&location, OpenMode::Write).unwrap();
    listener.listen_queue(JOBS_CHANNEL).unwrap();
    let host = ttdb::target::Target::detect().host;
    let class = host.class();
    let worker = store.register_worker("bench", &host, 1).unwrap();
    let tune = store.begin_tune(&class, "bench").unwrap();
    let workload = "x".repeat(20_000); // a DAG's JSON is ~10-30 kB
    let steps = vec![r#"[["SP", 2, 0, 56, [1, 8, 7], 1]]"#.to_string(); 32];
    let (mut enqueue, mut claim, mut hand_in, mut notify) = (vec![], vec![], vec![], vec![]);
    let mut n = 0;
    for _ in 0..20 {
        // The listener drains what is pending, then times the next enqueue's notification.
        while listener.wait_for_queue(Duration::from_millis(1)).unwrap() {}
        let t = Instant::now();
        store
            .enqueue(tune, &class, &workload, Duration::from_secs(10), &steps)
            .unwrap();
        enqueue.push(t.elapsed().as_secs_f64() / steps.len() as f64);
        let t = Instant::now();
        let woke = listener.wait_for_queue(Duration::from_secs(5)).unwrap();
        assert!(woke, "no notification within 5 s");
        notify.push(t.elapsed().as_secs_f64());
        for _ in 0..steps.len() {
            let t = Instant::now();
            let c = store
                .claim(worker, &class, 1, Duration::from_secs(60))
                .unwrap()
                .unwrap();
            claim.push(t.elapsed().as_secs_f64());
            let finished = [Finished {
                job_id: c.jobs[0].0,
                result: "{}".into(),
                measurement: measurement(n),
            }];
            n += 1;
            let t = Instant::now();
            assert_eq!(
                store
                    .complete_jobs(worker, &host, "search", 0.1, &finished)
                    .unwrap(),
                1
            );
            hand_in.push(t.elapsed().as_secs_f64());
        }
    }
    println!(
        "queue per job on PostgreSQL ({n} jobs, medians): enqueue {:.3} ms (in batches of {}), claim {:.3} ms, hand in {:.3} ms (result + record + measurement), commit-to-notification {:.3} ms",
        median(enqueue) * 1e3,
        steps.len(),
        median(claim) * 1e3,
        median(hand_in) * 1e3,
        median(notify) * 1e3,
    );
}
