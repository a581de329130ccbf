//! One measure record (one log line): the task, the transform steps, the measured result.
//!
//! The generation of a record is the *length of its task array* (spec §1), not its `"v"`
//! string: 2 (v0.2), 3 (v0.3, + hardware_params), 4 (v0.4, + target_host), 5 (v0.5,
//! + layout_rewrite_option), 6 (v0.6, + task_input_names).
use super::json::JsonWriter;
use super::step::Step;
use serde_json::Value;
use std::fmt;

#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    /// The workload key, a JSON string itself; kept verbatim.
    pub workload_key: String,
    /// `Target::str()`, e.g. `llvm -keys=cpu -mcpu=core-avx2`.
    pub target: String,
    /// v0.3+: `num_cores, vector_unit_bytes, cache_line_bytes, max_shared_memory_per_block,
    /// max_local_memory_per_block, max_threads_per_block, max_vthread_extent, warp_size`.
    pub hardware_params: Option<Vec<i64>>,
    /// v0.4+ (`""` when none).
    pub target_host: Option<String>,
    /// v0.5+: 0 NoRewrite, 1 InsertTransformStage, 2 RewriteForPreTransformed.
    pub layout_rewrite_option: Option<i64>,
    /// v0.6: names of special inputs (sparse tensors).
    pub task_input_names: Option<Vec<String>>,
}

impl Task {
    /// Number of elements of the task array, i.e. the record generation.
    pub fn arity(&self) -> usize {
        if self.task_input_names.is_some() {
            6
        } else if self.layout_rewrite_option.is_some() {
            5
        } else if self.target_host.is_some() {
            4
        } else if self.hardware_params.is_some() {
            3
        } else {
            2
        }
    }

    /// `num_cores` from hardware_params, when present and positive.
    pub fn num_cores(&self) -> Option<i64> {
        self.hardware_params.as_ref().and_then(|h| h.first().copied()).filter(|&n| n > 0)
    }
}

/// `MeasureErrorNO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ErrorNo(pub u8);

impl ErrorNo {
    pub const NAMES: [&'static str; 9] = [
        "none",
        "instantiation",
        "compile_host",
        "compile_device",
        "runtime_device",
        "wrong_answer",
        "build_timeout",
        "run_timeout",
        "unknown",
    ];

    pub fn is_ok(self) -> bool {
        self.0 == 0
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[self.0 as usize]
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct MeasureResult {
    /// Seconds, one per runner repeat. `[1e10]` on failure.
    pub costs: Vec<f64>,
    pub error_no: ErrorNo,
    /// Build + run wall seconds.
    pub all_cost: f64,
    /// Unix seconds (a double in TVM, written as an int).
    pub timestamp: f64,
}

impl MeasureResult {
    /// TVM's selection cost: the mean of `costs` (`ApplyHistoryBest.load`).
    pub fn mean_cost(&self) -> f64 {
        if self.costs.is_empty() {
            return f64::INFINITY;
        }
        self.costs.iter().sum::<f64>() / self.costs.len() as f64
    }

    /// A record can be chosen only if it measured without error.
    pub fn is_valid(&self) -> bool {
        self.error_no.is_ok() && !self.costs.is_empty() && self.mean_cost().is_finite()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub task: Task,
    pub steps: Vec<Step>,
    pub result: MeasureResult,
    /// The `"v"` string; informational only (not used for parsing, as in TVM).
    pub version: Option<String>,
}

/// Why one line is not a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordError(pub String);

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for RecordError {}

fn bad<T>(msg: impl Into<String>) -> Result<T, RecordError> {
    Err(RecordError(msg.into()))
}

fn as_array<'a>(v: &'a Value, what: &str) -> Result<&'a [Value], RecordError> {
    v.as_array().map(Vec::as_slice).ok_or_else(|| RecordError(format!("{what} must be a list")))
}

fn as_str(v: &Value, what: &str) -> Result<String, RecordError> {
    v.as_str().map(str::to_string).ok_or_else(|| RecordError(format!("{what} must be a string")))
}

fn as_f64(v: &Value, what: &str) -> Result<f64, RecordError> {
    v.as_f64().ok_or_else(|| RecordError(format!("{what} must be a number")))
}

fn as_i64(v: &Value, what: &str) -> Result<i64, RecordError> {
    v.as_i64().ok_or_else(|| RecordError(format!("{what} must be an integer")))
}

fn parse_task(v: &Value) -> Result<Task, RecordError> {
    let t = as_array(v, "task")?;
    if !(2..=6).contains(&t.len()) {
        return bad(format!(
            "task has {} elements; expected 2 (v0.2), 3 (v0.3), 4 (v0.4), 5 (v0.5) or 6 (v0.6)",
            t.len()
        ));
    }
    let workload_key = as_str(&t[0], "workload key")?;
    super::key::WorkloadKey::parse(&workload_key).map_err(|e| RecordError(e.to_string()))?;
    let mut task = Task {
        workload_key,
        target: as_str(&t[1], "target")?,
        hardware_params: None,
        target_host: None,
        layout_rewrite_option: None,
        task_input_names: None,
    };
    if let Some(h) = t.get(2) {
        let hp = as_array(h, "hardware_params")?
            .iter()
            .map(|x| as_i64(x, "hardware_params entry"))
            .collect::<Result<Vec<_>, _>>()?;
        if hp.is_empty() || hp.len() > 8 {
            return bad(format!("hardware_params has {} entries; expected 1..=8", hp.len()));
        }
        task.hardware_params = Some(hp);
    }
    if let Some(h) = t.get(3) {
        task.target_host = Some(as_str(h, "target_host")?);
    }
    if let Some(o) = t.get(4) {
        let o = as_i64(o, "layout_rewrite_option")?;
        if !(0..=2).contains(&o) {
            return bad(format!("layout_rewrite_option {o} is not 0, 1 or 2"));
        }
        task.layout_rewrite_option = Some(o);
    }
    if let Some(n) = t.get(5) {
        let names = as_array(n, "task_input_names")?
            .iter()
            .map(|x| as_str(x, "task input name"))
            .collect::<Result<Vec<_>, _>>()?;
        task.task_input_names = Some(names);
    }
    Ok(task)
}

fn parse_steps(v: &Value) -> Result<Vec<Step>, RecordError> {
    let state = as_array(v, "state")?;
    let [stages, steps] = state else {
        return bad(format!("state has {} elements; expected [stages, steps]", state.len()));
    };
    if !as_array(stages, "state stages")?.is_empty() {
        return bad("state stages must be written as [] (TVM rebuilds them by replay)");
    }
    as_array(steps, "steps")?
        .iter()
        .enumerate()
        .map(|(i, s)| Step::from_json(s).map_err(|e| RecordError(format!("step {i}: {e}"))))
        .collect()
}

fn parse_result(v: &Value) -> Result<MeasureResult, RecordError> {
    let r = as_array(v, "result")?;
    let [costs, error_no, all_cost, timestamp] = r else {
        return bad(format!("result has {} elements; expected [costs, error_no, all_cost, timestamp]", r.len()));
    };
    let costs = as_array(costs, "costs")?
        .iter()
        .map(|c| as_f64(c, "cost"))
        .collect::<Result<Vec<_>, _>>()?;
    let e = as_i64(error_no, "error_no")?;
    if !(0..=8).contains(&e) {
        return bad(format!("error_no {e} is out of range 0..=8"));
    }
    Ok(MeasureResult {
        costs,
        error_no: ErrorNo(e as u8),
        all_cost: as_f64(all_cost, "all_cost")?,
        timestamp: as_f64(timestamp, "timestamp")?,
    })
}

impl Record {
    /// Parses one record line (the caller has already skipped comments and blank lines).
    pub fn parse(line: &str) -> Result<Record, RecordError> {
        let v: Value = serde_json::from_str(line).map_err(|e| RecordError(format!("bad JSON: {e}")))?;
        let obj = v.as_object().ok_or_else(|| RecordError("record must be a JSON object".into()))?;
        if let Some(k) = obj.keys().find(|k| !matches!(k.as_str(), "i" | "r" | "v")) {
            return bad(format!("unknown top-level key {k:?} (expected \"i\", \"r\", \"v\")"));
        }
        let input = obj.get("i").ok_or_else(|| RecordError("missing \"i\" (task and state)".into()))?;
        let result = obj.get("r").ok_or_else(|| RecordError("missing \"r\" (result)".into()))?;
        let i = as_array(input, "\"i\"")?;
        let [task, state] = i else {
            return bad(format!("\"i\" has {} elements; expected [task, state]", i.len()));
        };
        let version = match obj.get("v") {
            Some(v) => Some(as_str(v, "\"v\"")?),
            None => None,
        };
        Ok(Record {
            task: parse_task(task)?,
            steps: parse_steps(state)?,
            result: parse_result(result)?,
            version,
        })
    }

    /// Writes the record as one line (no newline) in TVM's layout; TVM's reader accepts it.
    pub fn to_line(&self) -> String {
        let mut w = JsonWriter::new();
        w.begin_object();
        w.key("i");
        w.begin_array();
        self.write_task(&mut w);
        w.begin_array();
        w.raw("[]");
        w.begin_array();
        for s in &self.steps {
            s.write(&mut w);
        }
        w.end_array();
        w.end_array();
        w.end_array();
        w.key("r");
        w.begin_array();
        w.item(&self.result.costs);
        w.item(&(self.result.error_no.0 as i64));
        w.item(&self.result.all_cost);
        let ts = self.result.timestamp;
        if ts.fract() == 0.0 && ts.abs() < 1e15 {
            w.item(&(ts as i64));
        } else {
            w.item(&ts);
        }
        w.end_array();
        if let Some(v) = &self.version {
            w.key("v");
            w.item(v);
        }
        w.end_object();
        w.finish()
    }

    fn write_task(&self, w: &mut JsonWriter) {
        let t = &self.task;
        w.begin_array();
        w.item(&t.workload_key);
        w.item(&t.target);
        if let Some(h) = &t.hardware_params {
            w.item(h);
        }
        if let Some(h) = &t.target_host {
            w.item(h);
        }
        if let Some(o) = t.layout_rewrite_option {
            w.item(&o);
        }
        if let Some(n) = &t.task_input_names {
            w.item(n);
        }
        w.end_array();
    }
}

/// Format a cost in seconds for humans (`1.23 ms`).
pub fn format_seconds(s: f64) -> String {
    if !s.is_finite() {
        return "-".into();
    }
    let (v, unit) = if s >= 1.0 {
        (s, "s")
    } else if s >= 1e-3 {
        (s * 1e3, "ms")
    } else {
        (s * 1e6, "us")
    };
    let mut out = format!("{v:.3}");
    out.push(' ');
    out.push_str(unit);
    out
}
