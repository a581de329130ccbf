//! Workload keys: the first element of a record's task, itself a JSON string.
//!
//! Four forms occur in real logs (spec §1, §3):
//! * hash-only `["<md5>"]` (before TVM #7317, Jan 2021; the hash covered the shapes too);
//! * flat `["<md5>", 1, 14, 14, 1024, 1, 1, 1024, 512, ...]` (#7317 .. #8862);
//! * nested `["<md5>", [1, 14, 14, 1024], [1, 1, 1024, 512], ...]` (TVM >= v0.8);
//! * registered function `["matmul_add", 1024, 1024, 1024, "float32"]`, tensors as
//!   `["TENSOR", [shape], "dtype"]`.
use super::scan::{Kind, ScanError, Scanner};
use serde_json::Value;
use std::fmt;

/// One argument of a workload key, typed but lossless enough to rebuild the JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum KeyArg {
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
    Null,
    /// `["TENSOR", [shape], dtype]` in registered-function keys.
    Tensor {
        shape: Vec<i64>,
        dtype: String,
    },
    List(Vec<KeyArg>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyForm {
    HashOnly,
    Flat,
    Nested,
    Registered,
}

impl KeyForm {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyForm::HashOnly => "hash_only",
            KeyForm::Flat => "flat",
            KeyForm::Nested => "nested",
            KeyForm::Registered => "registered",
        }
    }
}

/// A parsed workload key. `raw` is the exact string from the record, so nothing is lost.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadKey {
    pub raw: String,
    /// The md5 hex hash (relay keys) or the registered function name.
    pub head: String,
    pub args: Vec<KeyArg>,
    pub form: KeyForm,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyError(pub String);

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "workload key: {}", self.0)
    }
}
impl std::error::Error for KeyError {}

pub fn is_md5_hex(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl KeyArg {
    fn read(sc: &mut Scanner<'_>, depth: usize) -> Result<KeyArg, KeyError> {
        let bad = |e: ScanError| KeyError(format!("bad JSON at column {}: {}", e.pos + 1, e.msg));
        if depth > 16 {
            return Err(KeyError("nesting too deep".into()));
        }
        Ok(match sc.kind().map_err(bad)? {
            Kind::Null => {
                sc.null().map_err(bad)?;
                KeyArg::Null
            }
            Kind::Bool => KeyArg::Bool(sc.boolean().map_err(bad)?),
            Kind::Number => {
                let text = sc.number_text().map_err(bad)?;
                match text.parse::<i64>() {
                    Ok(i) => KeyArg::Int(i),
                    Err(_) => match text.parse::<f64>() {
                        Ok(x) if x.is_finite() => KeyArg::Float(x),
                        _ => return Err(KeyError(format!("number {text} out of range"))),
                    },
                }
            }
            Kind::String => KeyArg::Str(sc.string().map_err(bad)?.into_owned()),
            Kind::Object => {
                return Err(KeyError("objects are not allowed in workload keys".into()))
            }
            Kind::Array => {
                sc.expect(b'[').map_err(bad)?;
                let mut items = Vec::new();
                let mut first = true;
                while sc.next_item(&mut first).map_err(bad)? {
                    items.push(KeyArg::read(sc, depth + 1)?);
                }
                if let [KeyArg::Str(tag), KeyArg::List(shape), KeyArg::Str(dtype)] =
                    items.as_slice()
                {
                    if tag == "TENSOR" {
                        let shape = shape
                            .iter()
                            .map(|d| {
                                d.as_int()
                                    .ok_or_else(|| KeyError(format!("bad TENSOR dim {d:?}")))
                            })
                            .collect::<Result<_, _>>()?;
                        return Ok(KeyArg::Tensor {
                            shape,
                            dtype: dtype.clone(),
                        });
                    }
                }
                KeyArg::List(items)
            }
        })
    }

    pub fn to_json(&self) -> Value {
        match self {
            KeyArg::Int(i) => Value::from(*i),
            KeyArg::Float(x) => Value::from(*x),
            KeyArg::Str(s) => Value::from(s.as_str()),
            KeyArg::Bool(b) => Value::from(*b),
            KeyArg::Null => Value::Null,
            KeyArg::Tensor { shape, dtype } => {
                serde_json::json!(["TENSOR", shape, dtype])
            }
            KeyArg::List(items) => Value::Array(items.iter().map(KeyArg::to_json).collect()),
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            KeyArg::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// An all-int list, e.g. a nested shape `[1, 14, 14, 1024]`.
    pub fn as_int_list(&self) -> Option<Vec<i64>> {
        match self {
            KeyArg::List(items) => items.iter().map(KeyArg::as_int).collect(),
            _ => None,
        }
    }
}

impl WorkloadKey {
    pub fn parse(raw: &str) -> Result<WorkloadKey, KeyError> {
        let mut sc = Scanner::new(raw);
        let items = match KeyArg::read(&mut sc, 0)? {
            KeyArg::List(items) => items,
            _ => return Err(KeyError("not a JSON array".into())),
        };
        if !sc.at_end() {
            return Err(KeyError("trailing characters after the key".into()));
        }
        let mut items = items.into_iter();
        let head = match items.next() {
            Some(KeyArg::Str(h)) => h,
            _ => {
                return Err(KeyError(
                    "first element must be a string (hash or function name)".into(),
                ))
            }
        };
        let args: Vec<KeyArg> = items.collect();
        let form = if !is_md5_hex(&head) {
            KeyForm::Registered
        } else if args.is_empty() {
            KeyForm::HashOnly
        } else if args.iter().all(|a| matches!(a, KeyArg::Int(_))) {
            KeyForm::Flat
        } else if args.iter().all(|a| a.as_int_list().is_some()) {
            KeyForm::Nested
        } else {
            return Err(KeyError(
                "relay key args must be all ints or all int lists".into(),
            ));
        };
        Ok(WorkloadKey {
            raw: raw.to_string(),
            head,
            args,
            form,
        })
    }

    /// The md5 hash of a relay key, None for registered-function keys.
    pub fn hash(&self) -> Option<&str> {
        (self.form != KeyForm::Registered).then_some(self.head.as_str())
    }

    /// Tensor shapes of a nested relay key; None for flat keys (their rank is unknown
    /// until the DAG is known, see [`WorkloadKey::shapes_with_rank`]) and other forms.
    pub fn nested_shapes(&self) -> Option<Vec<Vec<i64>>> {
        if self.form != KeyForm::Nested {
            return None;
        }
        self.args.iter().map(KeyArg::as_int_list).collect()
    }

    /// All ints of a relay key in order (what TVM's `decode_workload_key` compares).
    pub fn flat_ints(&self) -> Vec<i64> {
        fn walk(a: &KeyArg, out: &mut Vec<i64>) {
            match a {
                KeyArg::Int(i) => out.push(*i),
                KeyArg::List(items) => items.iter().for_each(|x| walk(x, out)),
                KeyArg::Tensor { shape, .. } => out.extend_from_slice(shape),
                _ => {}
            }
        }
        let mut out = Vec::new();
        self.args.iter().for_each(|a| walk(a, &mut out));
        out
    }

    /// Shapes of a relay key, cutting a flat key into `rank`-D shapes.
    pub fn shapes_with_rank(&self, rank: usize) -> Option<Vec<Vec<i64>>> {
        match self.form {
            KeyForm::Nested => self.nested_shapes(),
            KeyForm::Flat if rank > 0 && self.args.len().is_multiple_of(rank) => {
                Some(self.flat_ints().chunks(rank).map(<[i64]>::to_vec).collect())
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_four_forms() {
        let k = WorkloadKey::parse(r#"["de7d1695278cf52778b038e6573d7626"]"#).unwrap();
        assert_eq!(k.form, KeyForm::HashOnly);
        let k =
            WorkloadKey::parse(r#"["de7d1695278cf52778b038e6573d7626", 1, 7, 7, 512]"#).unwrap();
        assert_eq!(k.form, KeyForm::Flat);
        assert_eq!(k.shapes_with_rank(4), Some(vec![vec![1, 7, 7, 512]]));
        let k = WorkloadKey::parse(
            r#"["218090bc617f9a36fbabdf253ec28064", [14, 3072], [768, 3072], [14, 768]]"#,
        )
        .unwrap();
        assert_eq!(k.form, KeyForm::Nested);
        assert_eq!(k.nested_shapes().unwrap().len(), 3);
        let k = WorkloadKey::parse(
            r#"["sparse_dense", 512, 512, ["TENSOR", [4, 2, 2], "float32"], [1, 1]]"#,
        )
        .unwrap();
        assert_eq!(k.form, KeyForm::Registered);
        assert_eq!(
            k.args[2],
            KeyArg::Tensor {
                shape: vec![4, 2, 2],
                dtype: "float32".into()
            }
        );
        assert_eq!(k.hash(), None);
    }

    #[test]
    fn rejects_garbage() {
        assert!(WorkloadKey::parse("[").is_err());
        assert!(WorkloadKey::parse("{}").is_err());
        assert!(WorkloadKey::parse("[1, 2]").is_err());
        assert!(WorkloadKey::parse(r#"["de7d1695278cf52778b038e6573d7626", 1, [2]]"#).is_err());
    }
}
