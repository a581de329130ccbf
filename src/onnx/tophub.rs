//! TVM's pre-tuned AutoTVM configs for x86 (TopHub `llvm_v0.04.log`), read at run time from a
//! path (ttdb ships no copy), and the AutoTVM fallback rule. On x86, Relay's AlterOpLayout
//! turns an NCHW conv into `conv2d_NCHWc` with channel blocks (ic_bn, oc_bn) = the second
//! factors of `tile_ic` / `tile_oc` of the config for that workload: the TopHub entry when one
//! matches, else the fallback (`conv2d_avx_common` / `conv2d_avx_1x1` / depthwise
//! `_fallback_schedule`): oc_bn = the largest divisor of out_channels <= SIMD lanes, ic_bn = the
//! largest divisor of in_channels <= oc_bn.
use crate::schedule::divisors::largest_divisor_at_most;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Default location of the TopHub log, relative to the crate root (beside the checkout).
pub const DEFAULT_TOPHUB: &str = "../shared/corpus/tophub/llvm_v0.04.log";

/// The default TopHub path when it exists (relative to the working directory, then to the
/// crate's source directory).
pub fn default_path() -> Option<PathBuf> {
    let here = PathBuf::from(DEFAULT_TOPHUB);
    if here.is_file() {
        return Some(here);
    }
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join(DEFAULT_TOPHUB);
    beside.is_file().then_some(beside)
}

/// An AutoTVM conv workload as TopHub keys it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConvWorkload {
    /// `conv2d_NCHWc.x86` or `depthwise_conv2d_NCHWc.x86`.
    pub template: String,
    /// NCHW data shape.
    pub data: Vec<i64>,
    /// OIHW kernel shape.
    pub kernel: Vec<i64>,
    pub strides: [i64; 2],
    /// (top, left, bottom, right).
    pub padding: [i64; 4],
    pub dilation: [i64; 2],
}

/// One best config per workload.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TopHub {
    pub source: String,
    best: HashMap<ConvWorkload, (f64, i64, i64)>,
}

fn pair(v: &serde_json::Value) -> Option<[i64; 2]> {
    let a = v.as_array()?;
    match a.as_slice() {
        [x] => Some([x.as_i64()?; 2]),
        [x, y] => Some([x.as_i64()?, y.as_i64()?]),
        _ => v.as_i64().map(|x| [x, x]),
    }
}

fn padding4(v: &serde_json::Value) -> Option<[i64; 4]> {
    let a: Vec<i64> = v
        .as_array()?
        .iter()
        .map(|x| x.as_i64())
        .collect::<Option<_>>()?;
    match a.as_slice() {
        [p] => Some([*p; 4]),
        [h, w] => Some([*h, *w, *h, *w]),
        [t, l, b, r] => Some([*t, *l, *b, *r]),
        _ => None,
    }
}

fn tensor_shape(v: &serde_json::Value) -> Option<Vec<i64>> {
    let a = v.as_array()?;
    if a.first()?.as_str()? != "TENSOR" {
        return None;
    }
    a.get(1)?.as_array()?.iter().map(|x| x.as_i64()).collect()
}

fn split_last(entity: &[serde_json::Value], name: &str) -> Option<i64> {
    entity.iter().find_map(|e| {
        let e = e.as_array()?;
        (e.first()?.as_str()? == name)
            .then(|| e.get(2)?.as_array()?.last()?.as_i64())
            .flatten()
    })
}

impl TopHub {
    /// Parses AutoTVM log lines (JSON per line; `#` comments and blank lines skipped).
    /// Lines that are not conv NCHWc records are ignored; malformed JSON is an error.
    pub fn parse(text: &str, source: &str) -> Result<TopHub, String> {
        let mut hub = TopHub {
            source: source.to_string(),
            best: HashMap::new(),
        };
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|e| format!("{source}:{}: {e}", i + 1))?;
            let Some(parsed) = Self::record(&v) else {
                continue;
            };
            let (wkl, cost, ic_bn, oc_bn) = parsed;
            let keep = hub.best.get(&wkl).is_none_or(|&(c, _, _)| cost < c);
            if keep {
                hub.best.insert(wkl, (cost, ic_bn, oc_bn));
            }
        }
        Ok(hub)
    }

    fn record(v: &serde_json::Value) -> Option<(ConvWorkload, f64, i64, i64)> {
        let input = v.get("input")?.as_array()?;
        let template = input.get(1)?.as_str()?.to_string();
        if !template.ends_with("NCHWc.x86") {
            return None;
        }
        let args = input.get(2)?.as_array()?;
        let wkl = ConvWorkload {
            template,
            data: tensor_shape(args.first()?)?,
            kernel: tensor_shape(args.get(1)?)?,
            strides: pair(args.get(2)?)?,
            padding: padding4(args.get(3)?)?,
            dilation: pair(args.get(4)?)?,
        };
        let result = v.get("result")?.as_array()?;
        if result.get(1)?.as_i64()? != 0 {
            return None;
        }
        let costs: Vec<f64> = result
            .first()?
            .as_array()?
            .iter()
            .filter_map(|c| c.as_f64())
            .collect();
        let cost = if costs.is_empty() {
            f64::INFINITY
        } else {
            costs.iter().sum::<f64>() / costs.len() as f64
        };
        let entity = v.get("config")?.get("entity")?.as_array()?;
        Some((
            wkl,
            cost,
            split_last(entity, "tile_ic")?,
            split_last(entity, "tile_oc")?,
        ))
    }

    pub fn load(path: &Path) -> Result<TopHub, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read TopHub log {}: {e}", path.display()))?;
        TopHub::parse(&text, &path.display().to_string())
    }

    pub fn len(&self) -> usize {
        self.best.len()
    }

    pub fn is_empty(&self) -> bool {
        self.best.is_empty()
    }

    /// (ic_bn, oc_bn) of the best config for this workload, if listed.
    pub fn lookup(&self, wkl: &ConvWorkload) -> Option<(i64, i64)> {
        self.best.get(wkl).map(|&(_, i, o)| (i, o))
    }
}

/// SIMD 32-bit lanes for an `-mcpu` (TVM `get_simd_32bit_lanes`): 16 with AVX-512, 8 with
/// AVX2, 4 otherwise (including no `-mcpu`).
pub fn lanes_for_mcpu(mcpu: Option<&str>) -> i64 {
    const AVX512: &[&str] = &[
        "skylake-avx512",
        "cascadelake",
        "icelake-client",
        "icelake-server",
        "cooperlake",
        "tigerlake",
        "sapphirerapids",
        "rocketlake",
        "znver4",
        "knl",
        "knm",
        "x86-64-v4",
    ];
    const AVX2: &[&str] = &[
        "core-avx2",
        "haswell",
        "broadwell",
        "skylake",
        "alderlake",
        "raptorlake",
        "znver1",
        "znver2",
        "znver3",
        "x86-64-v3",
        "coffeelake",
        "kabylake",
    ];
    match mcpu {
        Some(c) if AVX512.contains(&c) => 16,
        Some(c) if AVX2.contains(&c) => 8,
        _ => 4,
    }
}

/// AutoTVM's fallback blocking: (ic_bn, oc_bn).
pub fn fallback_blocking(in_channels: i64, out_channels: i64, lanes: i64) -> (i64, i64) {
    let oc_bn = largest_divisor_at_most(out_channels, lanes);
    let ic_bn = largest_divisor_at_most(in_channels, oc_bn);
    (ic_bn, oc_bn)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"input": ["llvm -mcpu=skylake-avx512", "conv2d_NCHWc.x86", [["TENSOR", [1, 512, 7, 7], "float32"], ["TENSOR", [512, 512, 3, 3], "float32"], [1, 1], [1, 1, 1, 1], [1, 1], "NCHW", "NCHW", "float32"], {}], "config": {"index": 1, "code_hash": null, "entity": [["tile_ic", "sp", [1, 512]], ["tile_oc", "sp", [16, 32]], ["tile_ow", "sp", [7, 1]], ["unroll_kw", "ot", true]]}, "result": [[0.0005], 0, 1.0, 1539980000.0], "version": 0.2, "tvm_version": "0.7.dev0"}"#;

    fn wkl(data: [i64; 4], kernel: [i64; 4], stride: i64, pad: i64) -> ConvWorkload {
        ConvWorkload {
            template: "conv2d_NCHWc.x86".into(),
            data: data.to_vec(),
            kernel: kernel.to_vec(),
            strides: [stride; 2],
            padding: [pad; 4],
            dilation: [1, 1],
        }
    }

    /// README fact: resnet_18 `[1,1,7,7,512],[16,1,3,3,512,32]` = TopHub tile_ic [1,512], tile_oc [16,32].
    #[test]
    fn parses_tile_ic_and_tile_oc() {
        let hub = TopHub::parse(&format!("# comment\n\n{LINE}\n"), "inline").unwrap();
        assert_eq!(hub.len(), 1);
        assert_eq!(
            hub.lookup(&wkl([1, 512, 7, 7], [512, 512, 3, 3], 1, 1)),
            Some((512, 32))
        );
        assert_eq!(
            hub.lookup(&wkl([1, 512, 7, 7], [512, 512, 3, 3], 2, 1)),
            None
        );
        assert!(TopHub::parse("{not json", "x").is_err());
    }

    #[test]
    fn the_faster_record_wins() {
        let slow = LINE
            .replace("[1, 512]]", "[2, 256]]")
            .replace("0.0005", "0.9");
        let hub = TopHub::parse(&format!("{slow}\n{LINE}\n"), "inline").unwrap();
        assert_eq!(
            hub.lookup(&wkl([1, 512, 7, 7], [512, 512, 3, 3], 1, 1)),
            Some((512, 32))
        );
    }

    /// README facts: mobilenet_v2 (no TopHub entry, no -mcpu) blocks by 4; core-avx2 by 8.
    #[test]
    fn fallback_rule() {
        assert_eq!(fallback_blocking(3, 32, 4), (3, 4));
        assert_eq!(fallback_blocking(32, 32, 4), (4, 4));
        assert_eq!(fallback_blocking(96, 24, 4), (4, 4));
        assert_eq!(fallback_blocking(3, 64, 8), (3, 8));
        assert_eq!(fallback_blocking(192, 64, 16), (16, 16));
        assert_eq!(fallback_blocking(6, 10, 8), (3, 5));
        assert_eq!(fallback_blocking(7, 7, 4), (1, 1));
        assert_eq!(lanes_for_mcpu(None), 4);
        assert_eq!(lanes_for_mcpu(Some("core-avx2")), 8);
        assert_eq!(lanes_for_mcpu(Some("skylake-avx512")), 16);
    }

    #[test]
    fn corpus_tophub_has_the_resnet_18_entries() {
        let Some(path) = default_path() else {
            panic!(
                "TopHub log missing: expected {DEFAULT_TOPHUB} beside the checkout (shared corpus)"
            );
        };
        let hub = TopHub::load(&path).unwrap();
        assert_eq!(hub.len(), 35);
        assert_eq!(
            hub.lookup(&wkl([1, 512, 7, 7], [512, 512, 3, 3], 1, 1)),
            Some((512, 32))
        );
        assert_eq!(
            hub.lookup(&wkl([1, 64, 56, 56], [64, 64, 3, 3], 1, 1)),
            Some((64, 32))
        );
        assert_eq!(
            hub.lookup(&wkl([1, 3, 224, 224], [64, 3, 7, 7], 2, 3)),
            Some((3, 32))
        );
        assert_eq!(
            hub.lookup(&wkl([1, 64, 56, 56], [128, 64, 1, 1], 2, 0)),
            Some((8, 32))
        );
    }
}
