//! `ttdb verify` as a library function: replay, compile, verify and time the best imported
//! records (or those ttdb measured itself) of the database on this machine, against the
//! naive default schedule and the machine's FMA peak; store the measurements.
use serde::Serialize;
use std::time::Duration;
use ttdb_backend::evaluate::{evaluate_default, evaluate_steps, EvalOptions, Reference};
use ttdb_backend::measure::peak::measure_peak;
use ttdb_backend::measure::runner::MeasureOptions;
use ttdb_format::ansor::{Record, WorkloadKey};
use ttdb_store::store::measurement::{store_measurements, NewMeasurement};
use ttdb_store::store::{lookup, Store};

/// Which workloads, and how to measure them.
#[derive(Clone, Debug)]
pub struct VerifyOptions {
    /// Only workloads whose signature starts with this hex prefix.
    pub signature_prefix: Option<String>,
    /// Only this op class (or class prefix chain).
    pub class: Option<String>,
    /// At most this many workloads (in signature order).
    pub limit: Option<usize>,
    /// Time the kernels (otherwise verify only).
    pub timing: bool,
    /// Also time the naive default schedule (the speedup column).
    pub naive: bool,
    /// The fp32 peak (GFLOP/s, all threads); measured when None.
    pub peak: Option<f64>,
    /// Per-run timeout.
    pub timeout: Duration,
    /// Pre-pack layout-free weights as TVM measured relay tasks (layout rewrite option 2).
    pub prepack: bool,
    /// Store the measurements in the database.
    pub store: bool,
    /// Exactly these records (by digest; valid ones only) instead of each selected
    /// workload's best (`bundle import --verify`).
    pub records: Option<Vec<[u8; 16]>>,
    /// Each workload's best record ttdb measured itself instead of its best imported one:
    /// a tuned kernel timed alone again.
    pub measured: bool,
    /// The machine the records are compiled for and timed on.
    pub target: ttdb_backend::target::Target,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            signature_prefix: None,
            class: None,
            limit: None,
            timing: true,
            naive: true,
            peak: None,
            timeout: Duration::from_secs(10),
            prepack: true,
            store: true,
            records: None,
            measured: false,
            target: ttdb_backend::target::Target::detect(),
        }
    }
}

/// One verified record.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyRow {
    pub signature: String,
    pub op_class: String,
    pub inputs: Vec<Vec<i64>>,
    pub output: Vec<i64>,
    pub record_id: i64,
    pub verified: bool,
    pub error: Option<String>,
    pub rel_error: Option<f64>,
    pub compile_ms: f64,
    pub tuned_ms: Option<f64>,
    pub naive_ms: Option<f64>,
    pub gflops: Option<f64>,
    pub percent_of_peak: Option<f64>,
    pub speedup: Option<f64>,
    /// What the record cost where it was tuned (its log's mean cost), for comparison.
    pub logged_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct VerifyReport {
    /// The machine's fp32 peak, when measured or given (not with timing off).
    pub peak_gflops: Option<f64>,
    pub rows: Vec<VerifyRow>,
}

/// Why verification could not run at all (a single record's failure is a row, not this).
#[derive(Debug)]
pub enum VerifyError {
    Store(ttdb_store::store::StoreError),
    /// Nothing in the database matches the selection (of records ttdb measured itself when
    /// true).
    NothingSelected {
        measured: bool,
    },
    /// A stored record no longer parses (the database was edited by hand?).
    BadRecord {
        record_id: i64,
        reason: String,
    },
    Peak(String),
}

impl std::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerifyError::Store(e) => e.fmt(f),
            VerifyError::NothingSelected { measured: false } => f.write_str(
                "no valid imported CPU record matches (records ttdb measured itself, by tune, refine or apply, were verified when they were measured; --measured times them again)",
            ),
            VerifyError::NothingSelected { measured: true } => f.write_str(
                "no valid CPU record ttdb measured itself (by tune, refine or apply) matches",
            ),
            VerifyError::BadRecord { record_id, reason } => {
                write!(f, "record {record_id}: {reason}")
            }
            VerifyError::Peak(e) => write!(f, "measuring the peak: {e}"),
        }
    }
}

impl std::error::Error for VerifyError {}

impl From<ttdb_store::store::StoreError> for VerifyError {
    fn from(e: ttdb_store::store::StoreError) -> Self {
        VerifyError::Store(e)
    }
}

/// Verifies (and times) the selected best records; `progress(done, total, class)` is called
/// before each.
pub fn verify(
    store: &mut Store,
    opts: &VerifyOptions,
    progress: &dyn Fn(usize, usize, &str),
) -> Result<VerifyReport, VerifyError> {
    let todo = match &opts.records {
        Some(digests) => ttdb_store::store::bundle::valid_records_by_digest(store, digests)?,
        None => lookup::best_records(
            store,
            if opts.measured {
                lookup::RecordOrigin::Measured
            } else {
                lookup::RecordOrigin::Imported
            },
            opts.signature_prefix.as_deref(),
            opts.class.as_deref(),
            opts.limit,
        )?,
    };
    if todo.is_empty() {
        return Err(VerifyError::NothingSelected {
            measured: opts.measured,
        });
    }
    let mopts = MeasureOptions {
        timeout: Some(opts.timeout),
        ..MeasureOptions::default()
    };
    // The peak is the denominator of "% of peak": without timing there is nothing to divide,
    // and measuring it costs seconds of all cores.
    let peak = match opts.peak {
        Some(p) => Some(p),
        None if !opts.timing => None,
        None => Some(
            measure_peak(&opts.target, &mopts)
                .map_err(|e| VerifyError::Peak(e.to_string()))?
                .gflops_all,
        ),
    };
    let eval = EvalOptions {
        measure: mopts.clone(),
        verify_only: !opts.timing,
        prepack_weights: opts.prepack,
        codegen: opts.target.codegen_options(),
        profile: opts.target.profile,
        ..EvalOptions::default()
    };
    // The naive schedule is slow by design: fewer repeats are enough for a speedup ratio.
    let naive_eval = EvalOptions {
        measure: MeasureOptions {
            repeat: 3,
            min_repeat_ms: 50,
            ..mopts
        },
        verify_only: !opts.timing,
        codegen: opts.target.codegen_options(),
        ..EvalOptions::default()
    };
    let (mut rows, mut tuned_rows, mut naive_rows) = (Vec::new(), Vec::new(), Vec::new());
    let total = todo.len();
    for (n, (record_id, raw, signature, op_class, logged)) in todo.into_iter().enumerate() {
        progress(n, total, &op_class);
        let record = Record::parse(&raw).map_err(|e| VerifyError::BadRecord {
            record_id,
            reason: e.to_string(),
        })?;
        let key = &record.task.workload_key;
        let mut row = VerifyRow {
            signature,
            op_class,
            inputs: vec![],
            output: vec![],
            record_id,
            verified: false,
            error: None,
            rel_error: None,
            compile_ms: 0.0,
            tuned_ms: None,
            naive_ms: None,
            gflops: None,
            percent_of_peak: None,
            speedup: None,
            logged_ms: logged * 1e3,
        };
        let recognized = WorkloadKey::parse(key)
            .map_err(|e| e.to_string())
            .and_then(|k| ttdb_algo::recognize::recognize(&k).map_err(|e| e.to_string()));
        let r = match recognized {
            Ok(r) => r,
            Err(e) => {
                row.error = Some(e);
                rows.push(row);
                continue;
            }
        };
        let registered = r.recognized_by == ttdb_algo::recognize::RecognizedBy::Registered;
        row.inputs = r.signature.inputs.clone();
        row.output = r.signature.output.clone();
        let reference = match Reference::new(&r.dag, 7) {
            Ok(r) => r,
            Err(e) => {
                row.error = Some(e);
                rows.push(row);
                continue;
            }
        };
        let flops = r.dag.flop_ct();
        // Measure as TVM did: weights pre-packed for layout rewrite option 2 (relay tasks;
        // records before v0.5 carry no option: relay keys meant 2, registered ones 1).
        let option = record
            .task
            .layout_rewrite_option
            .unwrap_or(if registered { 1 } else { 2 });
        let eval = EvalOptions {
            prepack_weights: eval.prepack_weights && option == 2,
            ..eval.clone()
        };
        let tuned = evaluate_steps(&r.dag, &record.steps, &reference, &eval);
        row.verified = tuned.verified();
        row.error = tuned.failure.as_ref().map(|f| f.message.clone());
        row.rel_error = tuned.rel_error;
        row.compile_ms = tuned.total_compile_time().as_secs_f64() * 1e3;
        row.tuned_ms = tuned.median().map(|s| s * 1e3);
        row.gflops = tuned.gflops(flops);
        row.percent_of_peak = row.gflops.zip(peak).map(|(g, p)| 100.0 * g / p);
        tuned_rows.push(super::record::measurement_of(
            &tuned,
            key.clone(),
            record.steps.clone(),
            flops,
            Some(record_id),
            format!("verify of record {record_id}"),
        ));
        if opts.naive && opts.timing {
            let naive = evaluate_default(&r.dag, &reference, &naive_eval);
            row.naive_ms = naive.median().map(|s| s * 1e3);
            if let (Some(n), Some(t)) = (row.naive_ms, row.tuned_ms) {
                row.speedup = Some(n / t);
            }
            naive_rows.push(super::record::measurement_of(
                &naive,
                key.clone(),
                vec![],
                flops,
                None,
                "naive default schedule".into(),
            ));
        }
        rows.push(row);
    }
    progress(total, total, "");
    if opts.store {
        store_all(store, &opts.target.host, &tuned_rows, &naive_rows)?;
    }
    Ok(VerifyReport {
        peak_gflops: peak,
        rows,
    })
}

fn store_all(
    store: &mut Store,
    host: &ttdb_format::host::HostFingerprint,
    tuned: &[NewMeasurement],
    naive: &[NewMeasurement],
) -> ttdb_store::store::Result<()> {
    store_measurements(store, "verify", host, tuned)?;
    store_measurements(store, "default", host, naive)?;
    Ok(())
}

/// One record of `bundle import --verify`, re-measured here.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyFlag {
    pub class: String,
    pub record_id: i64,
    pub logged_ms: f64,
    pub here_ms: Option<f64>,
    pub verified: bool,
    pub error: Option<String>,
    /// here / logged (None when it did not run).
    pub ratio: Option<f64>,
    pub flagged: bool,
}

/// A record is flagged when it runs this many times slower here than its logged cost.
pub const MUCH_SLOWER: f64 = 2.0;

/// Re-measures the records of digests `records` on `target` (without the naive schedule),
/// flagging those that fail or run [`MUCH_SLOWER`] than their logged cost.
pub fn flag_slow_records(
    store: &mut Store,
    records: Vec<[u8; 16]>,
    target: &ttdb_backend::target::Target,
) -> Result<Vec<VerifyFlag>, VerifyError> {
    if records.is_empty() {
        return Ok(vec![]);
    }
    let opts = VerifyOptions {
        naive: false,
        records: Some(records),
        target: target.clone(),
        ..Default::default()
    };
    let report = verify(store, &opts, &|_, _, _| {})?;
    Ok(report
        .rows
        .into_iter()
        .map(|r| {
            let ratio = r.tuned_ms.map(|t| t / r.logged_ms);
            VerifyFlag {
                class: r.op_class,
                record_id: r.record_id,
                logged_ms: r.logged_ms,
                here_ms: r.tuned_ms,
                verified: r.verified,
                flagged: !r.verified || ratio.is_none_or(|x| x > MUCH_SLOWER),
                error: r.error,
                ratio,
            }
        })
        .collect())
}
