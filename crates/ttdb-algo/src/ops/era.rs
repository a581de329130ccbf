//! TVM eras: the same TOPI operator builds DAGs whose op/axis/placeholder names (and so
//! PrintDAG text and md5) differ between TVM versions (spec §3.2 table). Each op builder
//! takes an [`Era`] and picks the names that version used.
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Era {
    /// TVM ~v0.7 (Dec 2020, after #6973 named pool axes `dh, dw`): placeholders all named
    /// `placeholder`; conv2d NHWC `PaddedInput` / `Conv2dOutput`; dense `T_dense`;
    /// pools `tensor` (2-D `pool_impl`).
    V07,
    /// TVM v0.8 (2021): dense is `T_matmul_NT(i, j)`; pools via `pool_impl_nd`, still named
    /// `tensor`, axes `rv0, rv1`; conv2d NHWC still `PaddedInput` / `Conv2dOutput`.
    V08,
    /// TVM v0.9 (2022): generic `topi.nn.conv`: `pad_temp` / `conv2d_nhwc`, `conv2d_nchw`;
    /// pools still `tensor`; placeholders still `placeholder`.
    V09,
    /// TVM v0.10.0 itself (Oct 2022): relay params are already named `p0, p1, ...`
    /// (#10516, Sep 2022) but pools are still `tensor` (#13401 came after the release).
    /// Not in the spec's table; found by checking the tag.
    V010Early,
    /// TVM v0.11 .. v0.14: `p0, p1, ...` and the pool names of #13401 (Nov 2022):
    /// `pool_max`, `pool_sum`/`pool_avg`, `adaptive_pool_sum/avg` (the spec's ">= v0.10").
    V010,
    /// TVM >= v0.15 (#16052, Nov 2023): dense is `T_matmul_NT(i0, i1)`.
    V015,
}

impl Era {
    pub const ALL: [Era; 6] = [
        Era::V07,
        Era::V08,
        Era::V09,
        Era::V010Early,
        Era::V010,
        Era::V015,
    ];

    /// Name of the `index`-th relay parameter: `placeholder` before v0.10, else `p<index>`.
    pub fn placeholder_name(self, index: usize) -> String {
        if self >= Era::V010Early {
            format!("p{index}")
        } else {
            "placeholder".to_string()
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Era::V07 => "v0.7",
            Era::V08 => "v0.8",
            Era::V09 => "v0.9",
            Era::V010Early => "v0.10.0",
            Era::V010 => "v0.11",
            Era::V015 => "v0.15",
        }
    }

    pub fn parse(s: &str) -> Option<Era> {
        Era::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

impl fmt::Display for Era {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
