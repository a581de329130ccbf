//! The 14 transform-step records of Ansor (`transform_step.h`): one struct per step that
//! knows how to read and write its own record form (`["SP", 3, 0, 1, [1, 1, 1], 1]`).
//! Applying a step to a loop state lives in `ttdb_algo::schedule`.
//!
//! Integer fields are TVM `int`s (32-bit); ids must be non-negative. A value outside those
//! ranges is an "out-of-range number" error, never a silent truncation.
use super::json::JsonWriter;
use super::scan::{Kind, ScanError, Scanner};
use std::fmt;

/// Why a step record could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepError(pub String);

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for StepError {}

fn err<T>(msg: impl Into<String>) -> Result<T, StepError> {
    Err(StepError(msg.into()))
}

/// Reads the positional arguments of one step record from the line being scanned, with
/// errors naming the field.
pub struct ArgReader<'s, 'a> {
    tag: &'static str,
    sc: &'s mut Scanner<'a>,
    first: bool,
    count: usize,
}

/// A JSON syntax error inside a step.
fn syntax(e: ScanError) -> StepError {
    StepError(format!("bad JSON at column {}: {}", e.pos + 1, e.msg))
}

pub fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Null => "null",
        Kind::Bool => "a boolean",
        Kind::Number => "a number",
        Kind::String => "a string",
        Kind::Array => "a list",
        Kind::Object => "an object",
    }
}

impl<'s, 'a> ArgReader<'s, 'a> {
    /// Moves to the next argument; `Err` if the step has no more.
    fn next(&mut self, field: &str) -> Result<(), StepError> {
        if !self.sc.next_item(&mut self.first).map_err(syntax)? {
            return err(format!(
                "{} step: missing field `{field}` (argument {})",
                self.tag,
                self.count + 1
            ));
        }
        self.count += 1;
        Ok(())
    }

    fn int_value(&mut self, field: &str) -> Result<i64, StepError> {
        let k = self.sc.kind().map_err(syntax)?;
        if k != Kind::Number {
            return err(format!(
                "{} step: `{field}` must be an integer, got {}",
                self.tag,
                kind_name(k)
            ));
        }
        let i = self
            .sc
            .int()
            .map_err(|e| StepError(format!("{} step: `{field}`: {}", self.tag, e.msg)))?;
        if i < i32::MIN as i64 || i > i32::MAX as i64 {
            return err(format!(
                "{} step: `{field}` = {i} is out of range for a 32-bit int",
                self.tag
            ));
        }
        Ok(i)
    }

    /// A TVM `int` field.
    pub fn int(&mut self, field: &str) -> Result<i64, StepError> {
        self.next(field)?;
        self.int_value(field)
    }

    /// A stage or iterator id: a non-negative int.
    pub fn id(&mut self, field: &str) -> Result<u32, StepError> {
        let i = self.int(field)?;
        u32::try_from(i).or_else(|_| {
            err(format!(
                "{} step: `{field}` = {i} must not be negative",
                self.tag
            ))
        })
    }

    /// A 0/1 flag written as an int.
    pub fn flag(&mut self, field: &str) -> Result<bool, StepError> {
        match self.int(field)? {
            0 => Ok(false),
            1 => Ok(true),
            i => err(format!(
                "{} step: `{field}` must be 0 or 1, got {i}",
                self.tag
            )),
        }
    }

    pub fn string(&mut self, field: &str) -> Result<String, StepError> {
        self.next(field)?;
        let k = self.sc.kind().map_err(syntax)?;
        if k != Kind::String {
            return err(format!(
                "{} step: `{field}` must be a string, got {}",
                self.tag,
                kind_name(k)
            ));
        }
        Ok(self.sc.string().map_err(syntax)?.into_owned())
    }

    pub fn int_list(&mut self, field: &str) -> Result<Vec<i64>, StepError> {
        self.next(field)?;
        let k = self.sc.kind().map_err(syntax)?;
        if k != Kind::Array {
            return err(format!(
                "{} step: `{field}` must be a list of integers, got {}",
                self.tag,
                kind_name(k)
            ));
        }
        self.sc.expect(b'[').map_err(syntax)?;
        let mut out = Vec::with_capacity(4); // split lengths and id lists are short
        let mut first = true;
        while self.sc.next_item(&mut first).map_err(syntax)? {
            out.push(self.int_value(field)?);
        }
        Ok(out)
    }

    pub fn id_list(&mut self, field: &str) -> Result<Vec<u32>, StepError> {
        self.int_list(field)?
            .into_iter()
            .map(|i| {
                u32::try_from(i).or_else(|_| {
                    err(format!(
                        "{} step: `{field}` contains negative id {i}",
                        self.tag
                    ))
                })
            })
            .collect()
    }

    /// The step must end here; counts surplus arguments for the message.
    fn finish(mut self) -> Result<(), StepError> {
        let expected = self.count;
        while self.sc.next_item(&mut self.first).map_err(syntax)? {
            self.sc.skip_value().map_err(syntax)?;
            self.count += 1;
        }
        if self.count != expected {
            return err(format!(
                "{} step: {} arguments, expected {expected}",
                self.tag, self.count
            ));
        }
        Ok(())
    }
}

/// One step kind: its record tag, how to read its arguments, how to write them back.
pub trait StepRecord: Sized {
    const TAG: &'static str;
    fn read(r: &mut ArgReader<'_, '_>) -> Result<Self, StepError>;
    fn write_args(&self, w: &mut JsonWriter);
}

/// Loop annotation kinds (`IteratorAnnotation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Annotation {
    None = 0,
    Unroll = 1,
    Vectorize = 2,
    Parallel = 3,
    VThread = 4,
    BlockIdxX = 5,
    ThreadIdxX = 6,
    BlockIdxY = 7,
    ThreadIdxY = 8,
    BlockIdxZ = 9,
    ThreadIdxZ = 10,
    Tensorize = 11,
}

impl Annotation {
    pub const ALL: [Annotation; 12] = [
        Annotation::None,
        Annotation::Unroll,
        Annotation::Vectorize,
        Annotation::Parallel,
        Annotation::VThread,
        Annotation::BlockIdxX,
        Annotation::ThreadIdxX,
        Annotation::BlockIdxY,
        Annotation::ThreadIdxY,
        Annotation::BlockIdxZ,
        Annotation::ThreadIdxZ,
        Annotation::Tensorize,
    ];

    pub fn from_code(code: i64) -> Option<Annotation> {
        usize::try_from(code)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
    }

    /// The name used in state dumps (`for`, `unroll`, `vectorize`, ...).
    pub fn name(self) -> &'static str {
        [
            "for",
            "unroll",
            "vectorize",
            "parallel",
            "vthread",
            "blockIdx.x",
            "threadIdx.x",
            "blockIdx.y",
            "threadIdx.y",
            "blockIdx.z",
            "threadIdx.z",
            "tensorize",
        ][self as usize]
    }
}

macro_rules! step_struct {
    ($(#[$doc:meta])* $name:ident, $tag:literal { $($field:ident : $ty:ty => $read:ident),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $name { $(pub $field: $ty),* }

        impl StepRecord for $name {
            const TAG: &'static str = $tag;
            fn read(r: &mut ArgReader<'_, '_>) -> Result<Self, StepError> {
                Ok($name { $($field: r.$read(stringify!($field))?),* })
            }
            fn write_args(&self, w: &mut JsonWriter) {
                $( w.item(&self.$field); )*
            }
        }
    };
}

/// `AN stage_id iter_id ann`: annotate an iterator (unroll, vectorize, parallel, ...).
#[derive(Clone, Debug, PartialEq)]
pub struct AnnotationStep {
    pub stage_id: u32,
    pub iter_id: u32,
    pub annotation: Annotation,
}

impl StepRecord for AnnotationStep {
    const TAG: &'static str = "AN";
    fn read(r: &mut ArgReader<'_, '_>) -> Result<Self, StepError> {
        let stage_id = r.id("stage_id")?;
        let iter_id = r.id("iter_id")?;
        let code = r.int("annotation")?;
        let annotation = Annotation::from_code(code)
            .ok_or_else(|| StepError(format!("AN step: annotation {code} is not in 0..=11")))?;
        Ok(AnnotationStep {
            stage_id,
            iter_id,
            annotation,
        })
    }
    fn write_args(&self, w: &mut JsonWriter) {
        w.item(&self.stage_id);
        w.item(&self.iter_id);
        w.item(&(self.annotation as u8));
    }
}

step_struct!(
    /// `FU stage_id [iter_ids]`: fuse consecutive iterators into one.
    FuseStep, "FU" { stage_id: u32 => id, fused_ids: Vec<u32> => id_list }
);
step_struct!(
    /// `PR stage_id iter_id "pragma"`: only `auto_unroll_max_step$N` and
    /// `debug_skip_region` have a state effect.
    PragmaStep, "PR" { stage_id: u32 => id, iter_id: u32 => id, pragma: String => string }
);
step_struct!(
    /// `RE stage_id [after_ids]`: reorder iterators (a full permutation).
    ReorderStep, "RE" { stage_id: u32 => id, after_ids: Vec<u32> => id_list }
);
step_struct!(
    /// `SP stage_id iter_id extent [lengths] inner_to_outer`: split an iterator.
    /// `extent` is the iterator's extent when the step was made (0 = unknown).
    SplitStep, "SP" {
        stage_id: u32 => id, iter_id: u32 => id, extent: i64 => int,
        lengths: Vec<i64> => int_list, inner_to_outer: bool => flag,
    }
);
step_struct!(
    /// `FSP stage_id iter_id src_step_id n_split`: split like an earlier SP step.
    FollowSplitStep, "FSP" { stage_id: u32 => id, iter_id: u32 => id, src_step_id: u32 => id, n_split: i64 => int }
);
step_struct!(
    /// `FFSP stage_id iter_id [src_step_ids] level factor_or_nparts`: split by the product of
    /// one level of several earlier SP steps.
    FollowFusedSplitStep, "FFSP" {
        stage_id: u32 => id, iter_id: u32 => id, src_step_ids: Vec<u32> => id_list,
        level: i64 => int, factor_or_nparts: bool => flag,
    }
);
step_struct!(
    /// `SA stage_id iter_id factor offset`: storage alignment.
    StorageAlignStep, "SA" { stage_id: u32 => id, iter_id: u32 => id, factor: i64 => int, offset: i64 => int }
);
step_struct!(
    /// `CA stage_id target_stage_id target_iter_id`: compute at a consumer's loop.
    ComputeAtStep, "CA" { stage_id: u32 => id, target_stage_id: u32 => id, target_iter_id: u32 => id }
);
step_struct!(
    /// `CI stage_id`: inline into consumers.
    ComputeInlineStep, "CI" { stage_id: u32 => id }
);
step_struct!(
    /// `CR stage_id`: compute at root.
    ComputeRootStep, "CR" { stage_id: u32 => id }
);
step_struct!(
    /// `CHR stage_id "scope" [reader_stage_ids]`: cache_read; inserts a stage.
    CacheReadStep, "CHR" { stage_id: u32 => id, scope: String => string, reader_stage_ids: Vec<u32> => id_list }
);
step_struct!(
    /// `CHW stage_id "scope"`: cache_write; inserts a stage.
    CacheWriteStep, "CHW" { stage_id: u32 => id, scope: String => string }
);
step_struct!(
    /// `RF stage_id iter_id factor_iter_id`: rfactor; inserts a stage.
    RfactorStep, "RF" { stage_id: u32 => id, iter_id: u32 => id, factor_iter_id: u32 => id }
);

/// One transform step of a record.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Annotation(AnnotationStep),
    Fuse(FuseStep),
    Pragma(PragmaStep),
    Reorder(ReorderStep),
    Split(SplitStep),
    FollowSplit(FollowSplitStep),
    FollowFusedSplit(FollowFusedSplitStep),
    StorageAlign(StorageAlignStep),
    ComputeAt(ComputeAtStep),
    ComputeInline(ComputeInlineStep),
    ComputeRoot(ComputeRootStep),
    CacheRead(CacheReadStep),
    CacheWrite(CacheWriteStep),
    Rfactor(RfactorStep),
}

/// Calls `$body` with `$s` bound to the inner step struct, whatever the variant (also
/// `schedule`'s replay dispatch, in the next layer: hence exported).
#[macro_export]
macro_rules! each_step {
    ($step:expr, $s:ident => $body:expr) => {
        match $step {
            $crate::ansor::Step::Annotation($s) => $body,
            $crate::ansor::Step::Fuse($s) => $body,
            $crate::ansor::Step::Pragma($s) => $body,
            $crate::ansor::Step::Reorder($s) => $body,
            $crate::ansor::Step::Split($s) => $body,
            $crate::ansor::Step::FollowSplit($s) => $body,
            $crate::ansor::Step::FollowFusedSplit($s) => $body,
            $crate::ansor::Step::StorageAlign($s) => $body,
            $crate::ansor::Step::ComputeAt($s) => $body,
            $crate::ansor::Step::ComputeInline($s) => $body,
            $crate::ansor::Step::ComputeRoot($s) => $body,
            $crate::ansor::Step::CacheRead($s) => $body,
            $crate::ansor::Step::CacheWrite($s) => $body,
            $crate::ansor::Step::Rfactor($s) => $body,
        }
    };
}
pub use each_step;

fn read_as<T: StepRecord>(
    tag: &'static str,
    sc: &mut Scanner<'_>,
    wrap: fn(T) -> Step,
) -> Result<Step, StepError> {
    let mut r = ArgReader {
        tag,
        sc,
        first: false,
        count: 0,
    };
    let step = T::read(&mut r)?;
    r.finish()?;
    Ok(wrap(step))
}

fn tag_of<T: StepRecord>(_: &T) -> &'static str {
    T::TAG
}

/// A step list as a record holds it: the JSON array `[["SP", ...], ...]`.
pub fn steps_to_json(steps: &[Step]) -> String {
    let mut w = JsonWriter::new();
    w.begin_array();
    for s in steps {
        s.write(&mut w);
    }
    w.end_array();
    w.finish()
}

/// Reads a step list written by [`steps_to_json`] (or taken from a record).
pub fn steps_from_json(text: &str) -> Result<Vec<Step>, String> {
    let mut sc = Scanner::new(text);
    sc.expect(b'[').map_err(|e| e.msg)?;
    let mut steps = Vec::new();
    let mut first = true;
    while sc.next_item(&mut first).map_err(|e| e.msg)? {
        steps.push(Step::read(&mut sc).map_err(|e| format!("step {}: {e}", steps.len()))?);
    }
    if !sc.at_end() {
        return Err(format!("trailing characters at column {}", sc.pos + 1));
    }
    Ok(steps)
}

impl Step {
    /// All record tags, in `transform_step.h` order.
    pub const TAGS: [&'static str; 14] = [
        "AN", "FU", "PR", "RE", "SP", "FSP", "FFSP", "SA", "CA", "CI", "CR", "CHR", "CHW", "RF",
    ];

    /// Reads one step record `["TAG", args...]` at the scanner's position.
    pub fn read(sc: &mut Scanner<'_>) -> Result<Step, StepError> {
        let k = sc.kind().map_err(syntax)?;
        if k != Kind::Array {
            return err(format!("step must be a list, got {}", kind_name(k)));
        }
        sc.expect(b'[').map_err(syntax)?;
        if sc.kind().map_err(syntax)? != Kind::String {
            return err("step must start with its tag string");
        }
        let tag = sc.string().map_err(syntax)?;
        match &*tag {
            "AN" => read_as("AN", sc, Step::Annotation),
            "FU" => read_as("FU", sc, Step::Fuse),
            "PR" => read_as("PR", sc, Step::Pragma),
            "RE" => read_as("RE", sc, Step::Reorder),
            "SP" => read_as("SP", sc, Step::Split),
            "FSP" => read_as("FSP", sc, Step::FollowSplit),
            "FFSP" => read_as("FFSP", sc, Step::FollowFusedSplit),
            "SA" => read_as("SA", sc, Step::StorageAlign),
            "CA" => read_as("CA", sc, Step::ComputeAt),
            "CI" => read_as("CI", sc, Step::ComputeInline),
            "CR" => read_as("CR", sc, Step::ComputeRoot),
            "CHR" => read_as("CHR", sc, Step::CacheRead),
            "CHW" => read_as("CHW", sc, Step::CacheWrite),
            "RF" => read_as("RF", sc, Step::Rfactor),
            other => {
                let shown: String = other.chars().take(20).collect();
                err(format!("unknown step tag {shown:?}"))
            }
        }
    }

    /// Reads a step from an already-parsed JSON value (convenience for tools and tests).
    pub fn from_json(v: &serde_json::Value) -> Result<Step, StepError> {
        Step::parse(&v.to_string())
    }

    /// Parses one step from its JSON text, e.g. `["SP", 3, 0, 1, [1, 1, 1], 1]`.
    pub fn parse(text: &str) -> Result<Step, StepError> {
        let mut sc = Scanner::new(text);
        let step = Step::read(&mut sc)?;
        if !sc.at_end() {
            return err("trailing characters after the step");
        }
        Ok(step)
    }

    pub fn tag(&self) -> &'static str {
        each_step!(self, s => tag_of(s))
    }

    /// The stage the step applies to.
    pub fn stage_id(&self) -> u32 {
        each_step!(self, s => s.stage_id)
    }

    /// Writes `["TAG", args...]` in TVM's record form.
    pub fn write(&self, w: &mut JsonWriter) {
        w.begin_array();
        w.item(self.tag());
        each_step!(self, s => s.write_args(w));
        w.end_array();
    }

    /// Does this step add a stage (and shift the ids of later ones)?
    pub fn adds_stage(&self) -> bool {
        matches!(
            self,
            Step::CacheRead(_) | Step::CacheWrite(_) | Step::Rfactor(_)
        )
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut w = JsonWriter::new();
        self.write(&mut w);
        f.write_str(&w.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Step, StepError> {
        Step::parse(s)
    }

    #[test]
    fn every_tag_round_trips() {
        let samples = [
            r#"["AN", 3, 0, 3]"#,
            r#"["FU", 3, [0, 1, 2, 3]]"#,
            r#"["PR", 3, 0, "auto_unroll_max_step$512"]"#,
            r#"["RE", 2, [0, 4, 1, 5, 8, 2, 6, 9, 3, 7]]"#,
            r#"["SP", 3, 0, 1, [1, 1, 1], 1]"#,
            r#"["FSP", 3, 0, 1, 2]"#,
            r#"["FFSP", 5, 0, [1, 2], 1, 1]"#,
            r#"["SA", 2, 1, 32, 8]"#,
            r#"["CA", 2, 3, 3]"#,
            r#"["CI", 5]"#,
            r#"["CR", 6]"#,
            r#"["CHR", 2, "shared", [3]]"#,
            r#"["CHW", 2, "local"]"#,
            r#"["RF", 3, 2, 1]"#,
        ];
        for (s, tag) in samples.iter().zip(Step::TAGS) {
            let step = parse(s).unwrap();
            assert_eq!(step.tag(), tag);
            assert_eq!(step.to_string(), *s, "writer must reproduce TVM's form");
            assert_eq!(parse(&step.to_string()).unwrap(), step);
        }
    }

    #[test]
    fn malformed_steps_name_the_problem() {
        let cases = [
            (r#"["XX", 1]"#, "unknown step tag"),
            (r#"["CI"]"#, "missing field `stage_id`"),
            (r#"["CI", 1, 2]"#, "2 arguments, expected 1"),
            (r#"["CI", -1]"#, "must not be negative"),
            (r#"["CI", 4294967296]"#, "out of range"),
            (r#"["AN", 1, 0, 12]"#, "not in 0..=11"),
            (
                r#"["SP", 3, 0, 1, [1, "x"], 1]"#,
                "`lengths` must be an integer",
            ),
            (r#"["SP", 3, 0, 1, [1], 2]"#, "must be 0 or 1"),
            (r#"["CHW", 2, 7]"#, "`scope` must be a string"),
            (r#"{"a": 1}"#, "step must be a list"),
            (r#"[1, 2]"#, "must start with its tag"),
        ];
        for (s, want) in cases {
            let e = parse(s).unwrap_err().0;
            assert!(e.contains(want), "{s}: {e}");
        }
    }
}
