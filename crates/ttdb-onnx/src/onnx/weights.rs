//! A model's stored weights: every initializer's values, inline or in ONNX external-data
//! files beside the model. Kernel extraction never needs them (it reads dims only); running a
//! model does.
//!
//! Models are untrusted: an external `location` must be a relative path that stays inside the
//! model's folder, offsets and lengths are checked against the file and the tensor, and the
//! total is capped ([`WeightLimits`]) before anything is allocated. An initializer whose
//! external file does not exist is *missing* and gets the deterministic fill of
//! `docs/design/deterministic-data.md` ([`super::fill`]); the result says which and how many.
//! A file that exists but is too short is an error, never a fill.
use super::error::{OnnxError, Result};
use super::fill::{self, Role};
use super::graph::{dtype, numel};
use super::proto;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

/// Values of one tensor, row-major. Integer and boolean types are widened to i64.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I64(Vec<i64>),
}

impl Values {
    pub fn len(&self) -> usize {
        match self {
            Values::F32(v) => v.len(),
            Values::F64(v) => v.len(),
            Values::I64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where an initializer's values came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    Inline,
    /// Read from this file (relative to the model's folder).
    External(String),
    /// Its external file (named) does not exist: deterministic fill.
    Filled {
        missing_file: String,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Weight {
    pub dims: Vec<i64>,
    /// ONNX `TensorProto.DataType` code.
    pub dtype: i32,
    pub values: Values,
    pub origin: Origin,
}

/// Every initializer of a model, by name.
#[derive(Clone, Debug)]
pub struct Weights {
    pub tensors: BTreeMap<String, Weight>,
    /// What the initializers left of the weight limit: the most bytes that constants
    /// computed at load from almost nothing (`ConstantOfShape`) may take.
    pub unspent_bytes: u64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            tensors: BTreeMap::new(),
            unspent_bytes: WeightLimits::default().max_total_bytes,
        }
    }
}

impl Weights {
    /// How many initializers got the deterministic fill, and the files they were missing.
    pub fn filled(&self) -> (usize, BTreeSet<String>) {
        let mut files = BTreeSet::new();
        let mut n = 0;
        for w in self.tensors.values() {
            if let Origin::Filled { missing_file } = &w.origin {
                n += 1;
                files.insert(missing_file.clone());
            }
        }
        (n, files)
    }

    pub fn total_bytes(&self) -> usize {
        self.tensors
            .values()
            .map(|w| w.values.len() * element_width(&w.values))
            .sum()
    }
}

fn element_width(v: &Values) -> usize {
    match v {
        Values::F32(_) => 4,
        Values::F64(_) | Values::I64(_) => 8,
    }
}

#[derive(Clone, Copy, Debug)]
pub struct WeightLimits {
    /// The most bytes all weights may take in memory together.
    pub max_total_bytes: u64,
}

impl Default for WeightLimits {
    /// 4 GiB: the largest corpus models (VGG) need about 0.55 GB.
    fn default() -> Self {
        WeightLimits {
            max_total_bytes: 4 << 30,
        }
    }
}

/// Reads the model file at `path` and every initializer's values, external files relative to
/// the model's folder.
pub fn read_model_weights(path: &Path, limits: &WeightLimits) -> Result<Weights> {
    use prost::Message;
    let bytes = std::fs::read(path).map_err(|e| OnnxError::Io {
        path: path.display().to_string(),
        msg: e.to_string(),
    })?;
    let model = proto::ModelProto::decode(bytes.as_slice())
        .map_err(|e| OnnxError::Decode(e.to_string()))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    read_weights(&model, Some(dir.unwrap_or(Path::new("."))), limits)
}

/// Reads every initializer of `model`; `dir` is the folder external locations are relative
/// to (the model file's folder; `None` for a model given as bytes: then every external
/// initializer is missing).
pub fn read_weights(
    model: &proto::ModelProto,
    dir: Option<&Path>,
    limits: &WeightLimits,
) -> Result<Weights> {
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| OnnxError::Invalid("the model has no graph".into()))?;
    let roles = first_readers(graph);
    let mut budget = limits.max_total_bytes;
    let mut out = Weights::default();
    // a Constant node's tensor is a weight under the node's output name (TVM folds it the
    // same); shape inference keeps the values of small ones only
    let constant_nodes: Vec<proto::TensorProto> = graph
        .node
        .iter()
        .filter(|n| n.op_type == "Constant" && n.domain.is_empty())
        .filter_map(|n| {
            let value = n.attribute.iter().find(|a| a.name == "value")?.t.as_ref()?;
            let name = n.output.first().filter(|o| !o.is_empty())?;
            Some(proto::TensorProto {
                name: name.clone(),
                ..value.clone()
            })
        })
        .collect();
    for t in graph.initializer.iter().chain(&constant_nodes) {
        let bad = |msg: String| OnnxError::Weight {
            tensor: t.name.clone(),
            msg,
        };
        let n = numel(&t.dims)
            .filter(|_| t.dims.iter().all(|&d| d >= 0))
            .ok_or_else(|| bad(format!("dims {:?} are negative or overflow", t.dims)))?
            as u64;
        let width = match storage_width(t.data_type) {
            Some(w) => w,
            None => {
                return Err(bad(format!(
                    "element type {} is not supported",
                    dtype::name(t.data_type)
                )))
            }
        };
        let bytes = n
            .checked_mul(width)
            .filter(|&b| b <= budget)
            .ok_or_else(|| {
                bad(format!(
                    "{n} elements exceed what is left of the {} MiB weight limit",
                    limits.max_total_bytes >> 20
                ))
            })?;
        budget -= bytes;
        let role = roles.get(t.name.as_str()).copied().unwrap_or(Role::Other);
        let w = read_one(t, n as usize, dir, role).map_err(bad)?;
        if out.tensors.insert(t.name.clone(), w).is_some() {
            return Err(OnnxError::Invalid(format!(
                "two initializers (or Constant nodes) are named `{}`",
                t.name
            )));
        }
    }
    out.unspent_bytes = budget;
    Ok(out)
}

/// Bytes per element in memory (integers widen to i64).
fn storage_width(code: i32) -> Option<u64> {
    match code {
        dtype::FLOAT => Some(4),
        dtype::DOUBLE => Some(8),
        c if dtype::is_integer(c) => Some(8),
        _ => None,
    }
}

/// The role of each tensor by its first reader (top-level nodes in order), looking through
/// `Identity` readers to the role of their output.
fn first_readers(g: &proto::GraphProto) -> HashMap<&str, Role> {
    // tensor -> (op type, position) of its first reader, or the Identity output it aliases
    enum Reader<'a> {
        Op(Role),
        Alias(&'a str),
    }
    let mut first: HashMap<&str, Reader> = HashMap::new();
    for node in &g.node {
        for (k, input) in node.input.iter().enumerate() {
            first.entry(input.as_str()).or_insert_with(|| {
                match (node.op_type.as_str(), node.output.first()) {
                    ("Identity", Some(out)) => Reader::Alias(out.as_str()),
                    _ => Reader::Op(Role::of_reader(&node.op_type, k)),
                }
            });
        }
    }
    let resolve = |name: &str| {
        let mut cur = name;
        // a chain of Identity nodes is at most as long as the graph
        for _ in 0..=g.node.len() {
            match first.get(cur) {
                Some(Reader::Op(r)) => return *r,
                Some(Reader::Alias(next)) => cur = next,
                None => return Role::Other,
            }
        }
        Role::Other
    };
    first.keys().map(|&name| (name, resolve(name))).collect()
}

fn read_one(
    t: &proto::TensorProto,
    n: usize,
    dir: Option<&Path>,
    role: Role,
) -> std::result::Result<Weight, String> {
    let external = t.data_location == proto::tensor_proto::DataLocation::External as i32;
    let (raw, origin) = if external {
        let ext = External::of(t)?;
        match dir.map(|d| d.join(&ext.location)).filter(|p| p.exists()) {
            Some(path) => (
                Some(ext.read(&path, n, t.data_type)?),
                Origin::External(ext.location),
            ),
            None => {
                let values = if dtype::is_integer(t.data_type) {
                    Values::I64(vec![0; n])
                } else if t.data_type == dtype::DOUBLE {
                    Values::F64(
                        fill::weight_values(&t.name, &t.dims, role)
                            .into_iter()
                            .map(f64::from)
                            .collect(),
                    )
                } else {
                    Values::F32(fill::weight_values(&t.name, &t.dims, role))
                };
                return Ok(Weight {
                    dims: t.dims.clone(),
                    dtype: t.data_type,
                    values,
                    origin: Origin::Filled {
                        missing_file: ext.location,
                    },
                });
            }
        }
    } else {
        (None, Origin::Inline)
    };
    let values = match raw {
        Some(bytes) => from_raw(&bytes, n, t.data_type)?,
        None if !t.raw_data.is_empty() || n == 0 => from_raw(&t.raw_data, n, t.data_type)?,
        None => from_typed_fields(t, n)?,
    };
    Ok(Weight {
        dims: t.dims.clone(),
        dtype: t.data_type,
        values,
        origin,
    })
}

/// Little-endian raw bytes of `n` elements.
fn from_raw(raw: &[u8], n: usize, code: i32) -> std::result::Result<Values, String> {
    let width = raw_width(code).ok_or_else(|| format!("no raw form for {}", dtype::name(code)))?;
    if raw.len() != n * width {
        return Err(format!(
            "raw data has {} bytes, the dims need {} ({n} x {width})",
            raw.len(),
            n * width
        ));
    }
    let le = |c: &[u8]| {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        b
    };
    Ok(match code {
        dtype::FLOAT => Values::F32(
            raw.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        dtype::DOUBLE => Values::F64(
            raw.chunks_exact(8)
                .map(|c| f64::from_le_bytes(le(c)))
                .collect(),
        ),
        dtype::INT64 => Values::I64(
            raw.chunks_exact(8)
                .map(|c| i64::from_le_bytes(le(c)))
                .collect(),
        ),
        dtype::INT32 => Values::I64(
            raw.chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                .collect(),
        ),
        dtype::INT8 => Values::I64(raw.iter().map(|&b| b as i8 as i64).collect()),
        dtype::UINT8 | dtype::BOOL => Values::I64(raw.iter().map(|&b| b as i64).collect()),
        // INT16 (5) and UINT16 (4).
        5 => Values::I64(
            raw.chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]) as i64)
                .collect(),
        ),
        4 => Values::I64(
            raw.chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]) as i64)
                .collect(),
        ),
        _ => {
            return Err(format!(
                "element type {} is not supported",
                dtype::name(code)
            ))
        }
    })
}

/// Bytes per element in the file.
fn raw_width(code: i32) -> Option<usize> {
    match code {
        dtype::FLOAT | dtype::INT32 => Some(4),
        dtype::DOUBLE | dtype::INT64 => Some(8),
        dtype::INT8 | dtype::UINT8 | dtype::BOOL => Some(1),
        4 | 5 => Some(2),
        _ => None,
    }
}

/// Values in the typed repeated fields (`float_data`, `int64_data`, ...).
fn from_typed_fields(t: &proto::TensorProto, n: usize) -> std::result::Result<Values, String> {
    let values = match t.data_type {
        dtype::FLOAT => Values::F32(t.float_data.clone()),
        dtype::DOUBLE => Values::F64(t.double_data.clone()),
        dtype::INT64 => Values::I64(t.int64_data.clone()),
        c if dtype::is_integer(c) && c != 12 && c != 13 => {
            Values::I64(t.int32_data.iter().map(|&v| v as i64).collect())
        }
        c => return Err(format!("element type {} is not supported", dtype::name(c))),
    };
    if values.len() != n {
        return Err(format!(
            "holds {} values, the dims need {n} (and no external data is named)",
            values.len()
        ));
    }
    Ok(values)
}

/// An initializer's `external_data` entries.
struct External {
    location: String,
    offset: u64,
    length: Option<u64>,
}

impl External {
    fn of(t: &proto::TensorProto) -> std::result::Result<External, String> {
        let get = |key: &str| {
            t.external_data
                .iter()
                .find(|e| e.key == key)
                .map(|e| e.value.as_str())
        };
        let location = get("location")
            .ok_or("external data without a `location`")?
            .to_string();
        let number = |key: &str| -> std::result::Result<Option<u64>, String> {
            get(key)
                .map(|v| {
                    v.parse::<u64>()
                        .map_err(|_| format!("external data `{key}` {v:?} is not a byte count"))
                })
                .transpose()
        };
        let ext = External {
            offset: number("offset")?.unwrap_or(0),
            length: number("length")?,
            location,
        };
        confined(&ext.location)?;
        Ok(ext)
    }

    /// Reads exactly the tensor's bytes from `path`.
    fn read(&self, path: &Path, n: usize, code: i32) -> std::result::Result<Vec<u8>, String> {
        let width =
            raw_width(code).ok_or_else(|| format!("no raw form for {}", dtype::name(code)))?;
        let need = (n * width) as u64;
        if let Some(len) = self.length.filter(|&l| l != need) {
            return Err(format!(
                "external data length {len} does not match the dims ({need} bytes)"
            ));
        }
        let mut f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let size = f
            .metadata()
            .map_err(|e| format!("{}: {e}", path.display()))?
            .len();
        if !f.metadata().map(|m| m.is_file()).unwrap_or(false) {
            return Err(format!("{} is not a regular file", path.display()));
        }
        if self.offset.checked_add(need).is_none_or(|end| end > size) {
            return Err(format!(
                "{} has {size} bytes; the tensor needs bytes {}..{} (the file is truncated)",
                path.display(),
                self.offset,
                self.offset.saturating_add(need)
            ));
        }
        f.seek(SeekFrom::Start(self.offset))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let mut buf = vec![0u8; need as usize];
        f.read_exact(&mut buf)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(buf)
    }
}

/// A location must name a file inside the model's folder: relative, no `..`, no root.
fn confined(location: &str) -> std::result::Result<PathBuf, String> {
    let p = PathBuf::from(location);
    let inside = !location.is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !inside {
        return Err(format!(
            "external data location {location:?} leaves the model's folder"
        ));
    }
    Ok(p)
}

#[cfg(test)]
#[path = "weights_tests.rs"]
mod tests;
