//! One measure record (one log line): the task, the transform steps, the measured result.
//!
//! The generation of a record is the *length of its task array* (spec §1), not its `"v"`
//! string: 2 (v0.2), 3 (v0.3, + hardware_params), 4 (v0.4, + target_host), 5 (v0.5,
//! + layout_rewrite_option), 6 (v0.6, + task_input_names).
use super::json::JsonWriter;
use super::scan::{Kind, ScanError, Scanner};
use super::step::{kind_name, Step};
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
        self.hardware_params
            .as_ref()
            .and_then(|h| h.first().copied())
            .filter(|&n| n > 0)
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

    /// A record can be chosen only if it measured without error and every cost is a
    /// plausible time: see [`MeasureResult::invalid_reason`].
    pub fn is_valid(&self) -> bool {
        self.invalid_reason().is_none()
    }

    /// Why this result can never be chosen, or `None` when it can. Logs and bundles are
    /// untrusted: a zero, negative, NaN or infinite cost would otherwise sort first (or
    /// poison a mean), so any cost outside (0, [`MAX_COST_S`]] makes the whole record a
    /// failed measurement. The one home of this rule: import, bundles, merge and ttdb's own
    /// measurements all store `mean_cost` only when this is `None`.
    pub fn invalid_reason(&self) -> Option<String> {
        if !self.error_no.is_ok() {
            return Some(format!(
                "measurement failed (error_no {}, {})",
                self.error_no.0,
                self.error_no.name()
            ));
        }
        if self.costs.is_empty() {
            return Some("no costs".into());
        }
        for (i, &c) in self.costs.iter().enumerate() {
            let what = if c.is_nan() {
                "is NaN"
            } else if c.is_infinite() {
                "is infinite"
            } else if c <= 0.0 {
                "is not positive"
            } else if c > MAX_COST_S {
                "is above the ceiling of 3600 s"
            } else {
                continue;
            };
            return Some(format!("cost {} ({c:e} s) {what}", i + 1));
        }
        None
    }
}

/// The largest cost (seconds per run) a valid record may have: one kernel run taking an hour
/// is not a measurement but a marker (TVM writes `1e10` for failures) or a forgery.
pub const MAX_COST_S: f64 = 3600.0;

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

fn syntax(e: ScanError) -> RecordError {
    RecordError(format!("bad JSON at column {}: {}", e.pos + 1, e.msg))
}

/// Checks the kind of the next value, naming the field otherwise.
fn want(sc: &mut Scanner<'_>, kind: Kind, what: &str) -> Result<(), RecordError> {
    let k = sc.kind().map_err(syntax)?;
    if k != kind {
        return bad(format!(
            "{what} must be {}, got {}",
            kind_name(kind),
            kind_name(k)
        ));
    }
    Ok(())
}

fn string(sc: &mut Scanner<'_>, what: &str) -> Result<String, RecordError> {
    want(sc, Kind::String, what)?;
    Ok(sc.string().map_err(syntax)?.into_owned())
}

fn int(sc: &mut Scanner<'_>, what: &str) -> Result<i64, RecordError> {
    want(sc, Kind::Number, what)?;
    sc.int()
        .map_err(|e| RecordError(format!("{what}: {}", e.msg)))
}

fn float(sc: &mut Scanner<'_>, what: &str) -> Result<f64, RecordError> {
    want(sc, Kind::Number, what)?;
    sc.float()
        .map_err(|e| RecordError(format!("{what}: {}", e.msg)))
}

/// The non-finite literals that real writers put in costs: Python's `json` (`NaN`,
/// `Infinity`) and C++ streams (`nan`, `inf`).
const NON_FINITE_COSTS: [(&str, f64); 6] = [
    ("NaN", f64::NAN),
    ("Infinity", f64::INFINITY),
    ("-Infinity", f64::NEG_INFINITY),
    ("nan", f64::NAN),
    ("inf", f64::INFINITY),
    ("-inf", f64::NEG_INFINITY),
];

/// One cost. Besides JSON numbers it reads the non-finite literals, so that such a record
/// is kept as a failed measurement whose reason names the cost
/// (`MeasureResult::invalid_reason`), rather than rejected with a syntax error that hides
/// it. (A number too large for a double is still refused: that is a malformed line.)
fn cost(sc: &mut Scanner<'_>) -> Result<f64, RecordError> {
    for (word, x) in NON_FINITE_COSTS {
        if sc.eat_word(word) {
            return Ok(x);
        }
    }
    float(sc, "cost")
}

/// Reads a list, calling `item` for each element.
fn list<'a>(
    sc: &mut Scanner<'a>,
    what: &str,
    mut item: impl FnMut(&mut Scanner<'a>) -> Result<(), RecordError>,
) -> Result<(), RecordError> {
    want(sc, Kind::Array, what)?;
    sc.expect(b'[').map_err(syntax)?;
    let mut first = true;
    while sc.next_item(&mut first).map_err(syntax)? {
        item(sc)?;
    }
    Ok(())
}

/// Counts the elements of the list at byte `start` of `line` (for arity messages on the
/// small fixed-size lists: task and result); `None` when the list does not scan to its
/// end, so that its count would be a guess.
fn arity(start: usize, line: &str) -> Option<usize> {
    let mut probe = Scanner::new(line);
    probe.pos = start;
    probe.expect(b'[').ok()?;
    let mut first = true;
    let mut n = 0;
    while probe.next_item(&mut first).ok()? {
        probe.skip_value().ok()?;
        n += 1;
    }
    Some(n)
}

/// Validates a workload key. Logs repeat one key for many consecutive records, so the
/// last key validated on this thread is remembered.
fn validate_key(key: &str) -> Result<(), RecordError> {
    thread_local! {
        static LAST_VALID: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    if LAST_VALID.with(|k| *k.borrow() == key) {
        return Ok(());
    }
    super::key::WorkloadKey::parse(key).map_err(|e| RecordError(e.to_string()))?;
    LAST_VALID.with(|k| key.clone_into(&mut k.borrow_mut()));
    Ok(())
}

/// Parses a fixed-size list with `read`; on failure, a wrong element count (counted only
/// then, so valid lines are scanned once) is reported in place of the element's error.
fn with_arity<'a, T>(
    sc: &mut Scanner<'a>,
    line: &str,
    what: &str,
    allowed: std::ops::RangeInclusive<usize>,
    expected: &str,
    read: impl FnOnce(&mut Scanner<'a>) -> Result<T, RecordError>,
) -> Result<T, RecordError> {
    want(sc, Kind::Array, what)?;
    let start = sc.pos;
    read(sc).map_err(|e| match arity(start, line) {
        Some(n) if !allowed.contains(&n) => {
            RecordError(format!("{what} has {n} elements; expected {expected}"))
        }
        _ => e,
    })
}

/// Whether another element follows in the list being read (consuming its comma).
fn more(sc: &mut Scanner<'_>) -> Result<bool, RecordError> {
    if sc.peek() == Some(b']') {
        return Ok(false);
    }
    sc.expect(b',').map_err(syntax)?;
    Ok(true)
}

fn parse_task(sc: &mut Scanner<'_>, line: &str) -> Result<Task, RecordError> {
    with_arity(
        sc,
        line,
        "task",
        2..=6,
        "2 (v0.2), 3 (v0.3), 4 (v0.4), 5 (v0.5) or 6 (v0.6)",
        parse_task_elements,
    )
}

fn parse_task_elements(sc: &mut Scanner<'_>) -> Result<Task, RecordError> {
    sc.expect(b'[').map_err(syntax)?;
    let workload_key = string(sc, "workload key")?;
    validate_key(&workload_key)?;
    sc.expect(b',').map_err(syntax)?;
    let mut task = Task {
        workload_key,
        target: string(sc, "target")?,
        hardware_params: None,
        target_host: None,
        layout_rewrite_option: None,
        task_input_names: None,
    };
    if more(sc)? {
        let mut hp = Vec::new();
        list(sc, "hardware_params", |sc| {
            hp.push(int(sc, "hardware_params entry")?);
            Ok(())
        })?;
        if hp.is_empty() || hp.len() > 8 {
            return bad(format!(
                "hardware_params has {} entries; expected 1..=8",
                hp.len()
            ));
        }
        task.hardware_params = Some(hp);
    }
    if more(sc)? {
        task.target_host = Some(string(sc, "target_host")?);
    }
    if more(sc)? {
        let o = int(sc, "layout_rewrite_option")?;
        if !(0..=2).contains(&o) {
            return bad(format!("layout_rewrite_option {o} is not 0, 1 or 2"));
        }
        task.layout_rewrite_option = Some(o);
    }
    if more(sc)? {
        let mut names = Vec::new();
        list(sc, "task_input_names", |sc| {
            names.push(string(sc, "task input name")?);
            Ok(())
        })?;
        task.task_input_names = Some(names);
    }
    sc.expect(b']').map_err(syntax)?;
    Ok(task)
}

fn parse_state(sc: &mut Scanner<'_>) -> Result<Vec<Step>, RecordError> {
    want(sc, Kind::Array, "state")?;
    sc.expect(b'[').map_err(syntax)?;
    if sc.peek() == Some(b']') {
        return bad("state has 0 elements; expected [stages, steps]");
    }
    let mut stages = 0;
    list(sc, "state stages", |sc| {
        stages += 1;
        sc.skip_value().map_err(syntax)
    })?;
    if stages != 0 {
        return bad("state stages must be written as [] (TVM rebuilds them by replay)");
    }
    if sc.peek() != Some(b',') {
        return bad("state has 1 element; expected [stages, steps]");
    }
    sc.expect(b',').map_err(syntax)?;
    let mut steps = Vec::with_capacity(32); // real records hold ~10-60 steps
    list(sc, "steps", |sc| {
        let i = steps.len();
        steps.push(Step::read(sc).map_err(|e| RecordError(format!("step {i}: {e}")))?);
        Ok(())
    })?;
    if sc.peek() != Some(b']') {
        return bad("state has more than 2 elements; expected [stages, steps]");
    }
    sc.expect(b']').map_err(syntax)?;
    Ok(steps)
}

fn parse_result(sc: &mut Scanner<'_>, line: &str) -> Result<MeasureResult, RecordError> {
    with_arity(
        sc,
        line,
        "result",
        4..=4,
        "[costs, error_no, all_cost, timestamp]",
        parse_result_elements,
    )
}

fn parse_result_elements(sc: &mut Scanner<'_>) -> Result<MeasureResult, RecordError> {
    sc.expect(b'[').map_err(syntax)?;
    let mut costs = Vec::with_capacity(10); // Ansor's default repeat count
    list(sc, "costs", |sc| {
        costs.push(cost(sc)?);
        Ok(())
    })?;
    sc.expect(b',').map_err(syntax)?;
    let e = int(sc, "error_no")?;
    if !(0..=8).contains(&e) {
        return bad(format!("error_no {e} is out of range 0..=8"));
    }
    sc.expect(b',').map_err(syntax)?;
    let all_cost = float(sc, "all_cost")?;
    sc.expect(b',').map_err(syntax)?;
    let timestamp = float(sc, "timestamp")?;
    sc.expect(b']').map_err(syntax)?;
    Ok(MeasureResult {
        costs,
        error_no: ErrorNo(e as u8),
        all_cost,
        timestamp,
    })
}

impl Record {
    /// Parses one record line (the caller has already skipped comments and blank lines).
    pub fn parse(line: &str) -> Result<Record, RecordError> {
        let mut sc = Scanner::new(line);
        if sc.kind().map_err(syntax)? != Kind::Object {
            return bad("record must be a JSON object");
        }
        sc.expect(b'{').map_err(syntax)?;
        let (mut input, mut result, mut version) = (None, None, None);
        let mut first = true;
        while let Some(key) = sc.next_key(&mut first).map_err(syntax)? {
            match &*key {
                "i" if input.is_none() => {
                    want(&mut sc, Kind::Array, "\"i\"")?;
                    sc.expect(b'[').map_err(syntax)?;
                    if sc.peek() == Some(b']') {
                        return bad("\"i\" has 0 elements; expected [task, state]");
                    }
                    let task = parse_task(&mut sc, line)?;
                    if sc.peek() != Some(b',') {
                        return bad("\"i\" has 1 element; expected [task, state]");
                    }
                    sc.expect(b',').map_err(syntax)?;
                    let steps = parse_state(&mut sc)?;
                    if sc.peek() != Some(b']') {
                        return bad("\"i\" has more than 2 elements; expected [task, state]");
                    }
                    sc.expect(b']').map_err(syntax)?;
                    input = Some((task, steps));
                }
                "r" if result.is_none() => result = Some(parse_result(&mut sc, line)?),
                "v" if version.is_none() => version = Some(string(&mut sc, "\"v\"")?),
                "i" | "r" | "v" => return bad(format!("duplicate top-level key {key:?}")),
                other => {
                    return bad(format!(
                        "unknown top-level key {other:?} (expected \"i\", \"r\", \"v\")"
                    ))
                }
            }
        }
        if !sc.at_end() {
            return bad(format!("trailing characters at column {}", sc.pos + 1));
        }
        let (task, steps) =
            input.ok_or_else(|| RecordError("missing \"i\" (task and state)".into()))?;
        let result = result.ok_or_else(|| RecordError("missing \"r\" (result)".into()))?;
        Ok(Record {
            task,
            steps,
            result,
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
