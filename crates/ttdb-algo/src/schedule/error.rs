//! Errors of state replay, and the overflow-safe extent arithmetic every step uses.
use std::fmt;

/// Largest loop extent (and split length / fused extent) a state may hold: 2^40. Real
/// tensor loops are far below; anything above is a corrupt or hostile record, and the cap
/// keeps every product of two extents inside `i128`/`i64` without overflow.
pub const MAX_EXTENT: i64 = 1 << 40;

/// A step that cannot be applied to the state it meets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayError {
    /// Position of the step in the record's step list.
    pub step_index: usize,
    /// The step in record form, e.g. `["SP", 3, 0, 7, [1, 1, 7], 1]`.
    pub step: String,
    pub reason: String,
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "step {} {}: {}", self.step_index, self.step, self.reason)
    }
}
impl std::error::Error for ReplayError {}

/// An initial stage list that cannot start a state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitError(pub String);

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid initial stages: {}", self.0)
    }
}
impl std::error::Error for InitError {}

/// Why one step failed, before the caller attaches its position and text.
pub type StepResult<T = ()> = Result<T, String>;

/// Fails with `reason` unless `ok`.
pub fn ensure(ok: bool, reason: impl FnOnce() -> String) -> StepResult {
    if ok {
        Ok(())
    } else {
        Err(reason())
    }
}

/// `ceil(a / b)` for `a >= 0`, `b > 0`.
pub fn ceil_div(a: i64, b: i64) -> i64 {
    debug_assert!(a >= 0 && b > 0);
    a / b + i64::from(a % b != 0)
}

/// Product of extents, or an error once it passes [`MAX_EXTENT`] (checked in i128, so no
/// input can overflow).
pub fn capped_product(values: impl IntoIterator<Item = i64>, what: &str) -> StepResult<i64> {
    let mut acc: i128 = 1;
    for v in values {
        acc *= i128::from(v);
        if acc > i128::from(MAX_EXTENT) || acc < -i128::from(MAX_EXTENT) {
            return Err(format!("{what} exceeds the extent cap 2^40"));
        }
    }
    Ok(acc as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil_div_rounds_up() {
        assert_eq!(ceil_div(1024, 8), 128);
        assert_eq!(ceil_div(7, 2), 4);
        assert_eq!(ceil_div(0, 3), 0);
        assert_eq!(ceil_div(1, 64), 1);
    }

    #[test]
    fn capped_product_never_overflows() {
        assert_eq!(capped_product([2, 3, 4], "x"), Ok(24));
        assert!(capped_product([i64::MAX, i64::MAX, i64::MAX], "x").is_err());
        assert!(capped_product([MAX_EXTENT, 2], "x").is_err());
        assert_eq!(capped_product([MAX_EXTENT, 1], "x"), Ok(MAX_EXTENT));
        assert_eq!(capped_product([], "x"), Ok(1));
    }
}
