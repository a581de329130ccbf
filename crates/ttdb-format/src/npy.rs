//! NumPy's `.npy` format (versions 1.0, 2.0 and 3.0), the way model inputs and outputs travel
//! between ttdb, numpy and onnxruntime.
//!
//! A file is the magic `\x93NUMPY`, a version, a little-endian header length (2 bytes in 1.0,
//! 4 in 2.0 and 3.0), a Python dict literal such as
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 224, 224), }` padded with spaces to a
//! 64-byte boundary and ended by `\n`, then the raw elements in C order. Files are untrusted:
//! every length is checked before anything is allocated for it, and anything outside the subset
//! read here (big-endian, Fortran order, structured or object dtypes) is refused by name.
use std::fmt;

const MAGIC: &[u8] = b"\x93NUMPY";
/// numpy itself refuses headers over 10 000 bytes unless told otherwise; so does ttdb.
const MAX_HEADER: usize = 10_000;
const MAX_RANK: usize = 32;

/// The element types ttdb reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
    I64,
    I32,
    I8,
    U8,
    Bool,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// numpy's `descr` string (little-endian where the size is over one byte).
    pub fn descr(self) -> &'static str {
        match self {
            DType::F32 => "<f4",
            DType::F64 => "<f8",
            DType::I64 => "<i8",
            DType::I32 => "<i4",
            DType::I8 => "|i1",
            DType::U8 => "|u1",
            DType::Bool => "|b1",
        }
    }

    /// numpy's name of the type, for messages (`float32`, `int64`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::Bool => "bool",
        }
    }

    fn from_descr(d: &str) -> Result<DType, String> {
        let t = match d {
            "<f4" => DType::F32,
            "<f8" => DType::F64,
            "<i8" => DType::I64,
            "<i4" => DType::I32,
            "|i1" | "<i1" | "i1" => DType::I8,
            "|u1" | "<u1" | "u1" => DType::U8,
            "|b1" | "<b1" | "b1" | "?" | "|?" => DType::Bool,
            d if d.starts_with('>') => {
                return Err(format!(
                    "big-endian dtype '{d}' (save it with .astype('<{}'))",
                    &d[1..]
                ))
            }
            d => {
                return Err(format!(
                    "unsupported dtype '{d}' (float32/64, int8/32/64, uint8, bool are read)"
                ))
            }
        };
        Ok(t)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A dense C-order array: `data` holds `shape.product() * dtype.size()` little-endian bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

impl Array {
    /// An array from f32 values; `None` when the shape does not hold `values.len()` elements.
    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> Option<Array> {
        (element_count(&shape)? == values.len()).then(|| Array {
            dtype: DType::F32,
            shape,
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        })
    }

    /// An array from i64 values; `None` when the shape does not hold `values.len()` elements.
    pub fn from_i64(shape: Vec<usize>, values: &[i64]) -> Option<Array> {
        (element_count(&shape)? == values.len()).then(|| Array {
            dtype: DType::I64,
            shape,
            data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        })
    }

    pub fn len(&self) -> usize {
        self.data.len() / self.dtype.size()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The elements as f32, when the array is float32.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        (self.dtype == DType::F32).then(|| {
            self.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }

    /// The elements as i64, when the array is int64.
    pub fn to_i64(&self) -> Option<Vec<i64>> {
        (self.dtype == DType::I64).then(|| {
            self.data
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect()
        })
    }
}

/// Why a `.npy` file was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyError(pub String);

impl fmt::Display for NpyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NpyError {}

fn err<T>(msg: impl Into<String>) -> Result<T, NpyError> {
    Err(NpyError(msg.into()))
}

/// The element count of `shape`, or `None` when it overflows.
pub fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// Reads a whole `.npy` file.
pub fn read(bytes: &[u8]) -> Result<Array, NpyError> {
    if bytes.len() < MAGIC.len() + 2 || &bytes[..MAGIC.len()] != MAGIC {
        return err("not a .npy file (no \\x93NUMPY magic)");
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (len_bytes, utf8) = match major {
        1 => (2, false),
        2 => (4, false),
        3 => (4, true),
        _ => return err(format!("unsupported .npy version {major}.{minor}")),
    };
    let start = 8 + len_bytes;
    if bytes.len() < start {
        return err("truncated .npy header");
    }
    let mut header_len = 0usize;
    for (i, b) in bytes[8..start].iter().enumerate() {
        header_len |= (*b as usize) << (8 * i);
    }
    if header_len > MAX_HEADER {
        return err(format!("header of {header_len} bytes (over {MAX_HEADER})"));
    }
    let end = start + header_len;
    if bytes.len() < end {
        return err("truncated .npy header");
    }
    let header = &bytes[start..end];
    let header = if utf8 {
        std::str::from_utf8(header).map_err(|_| NpyError("header is not UTF-8".into()))?
    } else {
        if !header.is_ascii() {
            return err("header is not ASCII");
        }
        std::str::from_utf8(header).unwrap()
    };
    let (dtype, fortran, shape) = parse_header(header)?;
    if fortran && shape.iter().filter(|&&d| d > 1).count() > 1 {
        return err("Fortran-order array (save it with np.ascontiguousarray)");
    }
    let count = element_count(&shape).ok_or_else(|| NpyError("shape overflows".into()))?;
    let want = count
        .checked_mul(dtype.size())
        .ok_or_else(|| NpyError("shape overflows".into()))?;
    let data = &bytes[end..];
    if data.len() != want {
        return err(format!(
            "shape {shape:?} of {dtype} needs {want} bytes of data, the file has {}",
            data.len()
        ));
    }
    Ok(Array {
        dtype,
        shape,
        data: data.to_vec(),
    })
}

/// Writes `a` as a version 1.0 file (numpy's choice whenever the header fits, as here).
pub fn write(a: &Array) -> Vec<u8> {
    let shape = match a.shape.len() {
        1 => format!("({},)", a.shape[0]),
        _ => format!(
            "({})",
            a.shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        a.dtype.descr()
    );
    // Pad so that the data starts on a 64-byte boundary, the header ending in '\n'.
    let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + a.data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&a.data);
    out
}

/// The three keys of the header dict, in any order, as numpy writes them.
fn parse_header(h: &str) -> Result<(DType, bool, Vec<usize>), NpyError> {
    let body = h.trim_end_matches(['\n', ' ', '\0']).trim();
    let body = body
        .strip_prefix('{')
        .and_then(|b| b.strip_suffix('}'))
        .ok_or_else(|| NpyError(format!("header is not a dict: {}", clip(h))))?;
    let mut dtype = None;
    let mut fortran = None;
    let mut shape = None;
    let mut rest = body.trim();
    while !rest.is_empty() {
        let (key, after) =
            quoted(rest).ok_or_else(|| NpyError(format!("bad header key in {}", clip(h))))?;
        let after = after
            .trim_start()
            .strip_prefix(':')
            .ok_or_else(|| NpyError(format!("no ':' after '{key}'")))?
            .trim_start();
        let after = match key {
            "descr" => {
                let (d, a) = quoted(after).ok_or_else(|| {
                    NpyError("descr is not a string (structured dtypes are not read)".into())
                })?;
                dtype = Some(DType::from_descr(d).map_err(NpyError)?);
                a
            }
            "fortran_order" => {
                let (v, a) = if let Some(a) = after.strip_prefix("True") {
                    (true, a)
                } else if let Some(a) = after.strip_prefix("False") {
                    (false, a)
                } else {
                    return err("fortran_order is neither True nor False");
                };
                fortran = Some(v);
                a
            }
            "shape" => {
                let close = after
                    .strip_prefix('(')
                    .and_then(|a| a.find(')').map(|i| (&a[..i], &a[i + 1..])))
                    .ok_or_else(|| NpyError("shape is not a tuple".into()))?;
                let mut dims = Vec::new();
                for d in close.0.split(',').map(str::trim).filter(|d| !d.is_empty()) {
                    let d = d.trim_end_matches('L');
                    dims.push(
                        d.parse::<usize>()
                            .map_err(|_| NpyError(format!("bad dimension '{d}' in shape")))?,
                    );
                    if dims.len() > MAX_RANK {
                        return err(format!("rank over {MAX_RANK}"));
                    }
                }
                shape = Some(dims);
                close.1
            }
            k => return err(format!("unexpected header key '{k}'")),
        };
        rest = after.trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    match (dtype, fortran, shape) {
        (Some(d), Some(f), Some(s)) => Ok((d, f, s)),
        _ => err(format!(
            "header lacks descr, fortran_order or shape: {}",
            clip(h)
        )),
    }
}

/// A Python string literal at the start of `s` ('...' or "..."): its content and the rest.
fn quoted(s: &str) -> Option<(&str, &str)> {
    let q = s.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let body = &s[1..];
    let end = body.find(q)?;
    Some((&body[..end], &body[end + 1..]))
}

fn clip(h: &str) -> String {
    h.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_numpy_written_file_reads() {
        // np.save of np.arange(6, dtype=np.float32).reshape(2, 3), bytes as numpy 1.26 wrote them.
        let mut f = b"\x93NUMPY\x01\x00v\x00".to_vec();
        let mut h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".to_string();
        h.push_str(&" ".repeat(118 - h.len() - 1));
        h.push('\n');
        f.extend_from_slice(h.as_bytes());
        for v in 0..6 {
            f.extend_from_slice(&(v as f32).to_le_bytes());
        }
        let a = read(&f).unwrap();
        assert_eq!(a.shape, vec![2, 3]);
        assert_eq!(a.to_f32().unwrap(), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        // ttdb writes the same bytes numpy does.
        assert_eq!(write(&a), f);
    }

    #[test]
    fn scalars_and_one_dim_shapes_print_as_python_tuples() {
        let s = Array::from_f32(vec![], &[1.5]).unwrap();
        assert!(String::from_utf8_lossy(&write(&s)).contains("'shape': (), }"));
        let v = Array::from_f32(vec![2], &[1.0, 2.0]).unwrap();
        assert!(String::from_utf8_lossy(&write(&v)).contains("'shape': (2,), }"));
        assert_eq!(read(&write(&s)).unwrap(), s);
        assert_eq!(write(&v).len() % 64, 8);
    }

    /// `bytes` with the first `from` replaced by `to` (same length, so the header stays valid).
    fn swap(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
        let at = bytes
            .windows(from.len())
            .position(|w| w == from.as_bytes())
            .unwrap();
        let mut out = bytes[..at].to_vec();
        out.extend_from_slice(to.as_bytes());
        out.extend_from_slice(&bytes[at + from.len()..]);
        out
    }

    #[test]
    fn hostile_headers_are_refused_by_name() {
        let good = write(&Array::from_f32(vec![2, 2], &[0.0; 4]).unwrap());
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"PK\x03\x04".to_vec(), "not a .npy"),
            (good[..20].to_vec(), "truncated"),
            (good[..good.len() - 1].to_vec(), "needs 16 bytes"),
            (swap(&good, "<f4", ">f4"), "big-endian"),
            (swap(&good, "<f4", "<c8"), "unsupported dtype"),
            (swap(&good, "False", "True "), "Fortran"),
            (
                swap(&good, "(2, 2)", "(99999999999, 99999999999)"),
                "overflows",
            ),
        ];
        for (bytes, want) in cases {
            let e = read(&bytes).unwrap_err();
            assert!(e.0.contains(want), "{e} (wanted {want})");
        }
        let mut huge = b"\x93NUMPY\x02\x00".to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(read(&huge).unwrap_err().0.contains("header of"));
    }

    proptest! {
        #[test]
        fn write_then_read_is_identity(
            shape in proptest::collection::vec(0usize..5, 0..4),
            ty in 0usize..7,
            seed in any::<u64>(),
        ) {
            let dtype = [DType::F32, DType::F64, DType::I64, DType::I32, DType::I8, DType::U8, DType::Bool][ty];
            let n = element_count(&shape).unwrap() * dtype.size();
            let data: Vec<u8> = (0..n).map(|i| (seed.wrapping_mul(i as u64 + 1) >> 7) as u8 & if dtype == DType::Bool { 1 } else { 0xff }).collect();
            let a = Array { dtype, shape, data };
            let bytes = write(&a);
            prop_assert_eq!(read(&bytes).unwrap(), a);
        }

        #[test]
        fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut f = b"\x93NUMPY\x01\x00".to_vec();
            f.extend_from_slice(&tail);
            let _ = read(&f);
        }
    }
}
