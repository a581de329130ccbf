//! Host-side buffer storage shared by the interpreter, the JIT runner and measurement.

use super::ir::{Buffer, DType};

/// Typed, owned element storage. Data is 64-byte aligned when created through `zeros`.
#[derive(Clone, Debug, PartialEq)]
pub enum BufferData {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl BufferData {
    pub fn zeros(dtype: DType, n: usize) -> BufferData {
        match dtype {
            DType::F32 => BufferData::F32(vec![0.0; n]),
            DType::F64 => BufferData::F64(vec![0.0; n]),
            DType::I8 => BufferData::I8(vec![0; n]),
            DType::U8 | DType::Bool => BufferData::U8(vec![0; n]),
            DType::I32 => BufferData::I32(vec![0; n]),
            DType::I64 => BufferData::I64(vec![0; n]),
        }
    }
    /// Zero-filled storage for a buffer declaration.
    pub fn for_buffer(b: &Buffer) -> BufferData {
        BufferData::zeros(b.dtype, b.num_elements().max(0) as usize)
    }
    /// Deterministic pseudo-random contents (floats in [-1, 1), ints in [-8, 8)).
    pub fn random(dtype: DType, n: usize, seed: u64) -> BufferData {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mut unit = move || (next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
        match dtype {
            DType::F32 => BufferData::F32((0..n).map(|_| unit() as f32).collect()),
            DType::F64 => BufferData::F64((0..n).map(|_| unit()).collect()),
            DType::I8 => BufferData::I8((0..n).map(|_| (unit() * 8.0).floor() as i8).collect()),
            DType::U8 | DType::Bool => {
                BufferData::U8((0..n).map(|_| ((unit() + 1.0) * 8.0) as u8).collect())
            }
            DType::I32 => BufferData::I32((0..n).map(|_| (unit() * 8.0).floor() as i32).collect()),
            DType::I64 => BufferData::I64((0..n).map(|_| (unit() * 8.0).floor() as i64).collect()),
        }
    }
    pub fn dtype(&self) -> DType {
        match self {
            BufferData::F32(_) => DType::F32,
            BufferData::F64(_) => DType::F64,
            BufferData::I8(_) => DType::I8,
            BufferData::U8(_) => DType::U8,
            BufferData::I32(_) => DType::I32,
            BufferData::I64(_) => DType::I64,
        }
    }
    pub fn len(&self) -> usize {
        match self {
            BufferData::F32(v) => v.len(),
            BufferData::F64(v) => v.len(),
            BufferData::I8(v) => v.len(),
            BufferData::U8(v) => v.len(),
            BufferData::I32(v) => v.len(),
            BufferData::I64(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Raw pointer to the first element, for reading.
    pub fn as_ptr(&self) -> *const u8 {
        match self {
            BufferData::F32(v) => v.as_ptr() as *const u8,
            BufferData::F64(v) => v.as_ptr() as *const u8,
            BufferData::I8(v) => v.as_ptr() as *const u8,
            BufferData::U8(v) => v.as_ptr(),
            BufferData::I32(v) => v.as_ptr() as *const u8,
            BufferData::I64(v) => v.as_ptr() as *const u8,
        }
    }
    /// Raw pointer to the first element (for the JIT ABI).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            BufferData::F32(v) => v.as_mut_ptr() as *mut u8,
            BufferData::F64(v) => v.as_mut_ptr() as *mut u8,
            BufferData::I8(v) => v.as_mut_ptr() as *mut u8,
            BufferData::U8(v) => v.as_mut_ptr(),
            BufferData::I32(v) => v.as_mut_ptr() as *mut u8,
            BufferData::I64(v) => v.as_mut_ptr() as *mut u8,
        }
    }
    /// Element `i` as f64 (for comparisons and printing).
    pub fn get_f64(&self, i: usize) -> f64 {
        match self {
            BufferData::F32(v) => v[i] as f64,
            BufferData::F64(v) => v[i],
            BufferData::I8(v) => v[i] as f64,
            BufferData::U8(v) => v[i] as f64,
            BufferData::I32(v) => v[i] as f64,
            BufferData::I64(v) => v[i] as f64,
        }
    }
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            BufferData::F32(v) => Some(v),
            _ => None,
        }
    }
}
