//! Scalar data types, spelled the way TVM prints them (`float32`, `int32`, `bool`).
use std::fmt;

/// A TVM scalar type. `Bool` is TVM's `uint1`, which prints as `bool`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum DType {
    Bool,
    Int(u8),
    UInt(u8),
    Float(u8),
}

impl DType {
    pub const F32: DType = DType::Float(32);
    pub const F64: DType = DType::Float(64);
    pub const I32: DType = DType::Int(32);
    pub const I64: DType = DType::Int(64);

    pub fn is_float(self) -> bool {
        matches!(self, DType::Float(_))
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::Int(_) | DType::UInt(_))
    }

    pub fn bits(self) -> u8 {
        match self {
            DType::Bool => 1,
            DType::Int(b) | DType::UInt(b) | DType::Float(b) => b,
        }
    }

    /// TVM's type code (kDLInt 0, kDLUInt 1, kDLFloat 2); bool is uint. The FLOP
    /// estimator compares codes, not full types.
    pub fn code(self) -> u8 {
        match self {
            DType::Int(_) => 0,
            DType::Bool | DType::UInt(_) => 1,
            DType::Float(_) => 2,
        }
    }

    pub fn parse(s: &str) -> Option<DType> {
        if s == "bool" {
            return Some(DType::Bool);
        }
        let (ctor, rest): (fn(u8) -> DType, &str) = if let Some(r) = s.strip_prefix("float") {
            (DType::Float, r)
        } else if let Some(r) = s.strip_prefix("uint") {
            (DType::UInt, r)
        } else if let Some(r) = s.strip_prefix("int") {
            (DType::Int, r)
        } else {
            return None;
        };
        let bits: u8 = rest.parse().ok()?;
        matches!(bits, 8 | 16 | 32 | 64).then(|| ctor(bits))
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DType::Bool => write!(f, "bool"),
            DType::Int(b) => write!(f, "int{b}"),
            DType::UInt(b) => write!(f, "uint{b}"),
            DType::Float(b) => write!(f, "float{b}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print_round_trip() {
        for s in [
            "float32", "float16", "float64", "int32", "int64", "uint8", "bool",
        ] {
            assert_eq!(DType::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(DType::parse("float33"), None);
        assert_eq!(DType::parse("handle"), None);
    }
}
