//! Target strings (`llvm -keys=cpu -mcpu=core-avx2 -link-params=0`) normalized into the
//! fields that decide whether a schedule carries over: kind, keys, mcpu, mattr, mtriple,
//! model, and num_cores from hardware_params.

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NormalizedTarget {
    pub kind: String,
    pub keys: Vec<String>,
    pub mcpu: Option<String>,
    /// `-mattr=+avx512f,-avx2`: LLVM features added or removed, in order.
    pub mattr: Vec<String>,
    pub mtriple: Option<String>,
    pub model: Option<String>,
    pub num_cores: Option<i64>,
}

impl NormalizedTarget {
    pub fn parse(target: &str, hardware_params: Option<&[i64]>) -> NormalizedTarget {
        let mut words = target.split_whitespace();
        let kind = words.next().unwrap_or("").to_string();
        let mut t = NormalizedTarget {
            kind,
            keys: Vec::new(),
            mcpu: None,
            mattr: Vec::new(),
            mtriple: None,
            model: None,
            num_cores: hardware_params
                .and_then(|h| h.first().copied())
                .filter(|&n| n > 0),
        };
        for w in words {
            let Some((k, v)) = w.trim_start_matches('-').split_once('=') else {
                continue;
            };
            match k {
                "keys" => {
                    t.keys = v
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                }
                "mcpu" => t.mcpu = Some(v.to_string()),
                "mattr" => {
                    t.mattr = v
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                }
                "mtriple" => t.mtriple = Some(v.to_string()),
                "model" => t.model = Some(v.to_string()),
                _ => {}
            }
        }
        if t.keys.is_empty() {
            // TVM adds default keys per kind (`-keys=...` is auto-added when printing).
            t.keys = match t.kind.as_str() {
                "llvm" => vec!["cpu".into()],
                "cuda" => vec!["cuda".into(), "gpu".into()],
                _ => vec![],
            };
        }
        t
    }

    /// Targets with the same compat class share schedules (TVM matches on target keys).
    pub fn compat(&self) -> String {
        format!("{}/{}", self.kind, self.keys.join(","))
    }

    /// The vector ISA a record tuned for this target needs (from `-mcpu` and `-mattr`).
    pub fn isa_requirement(&self) -> ttdb_format::host::IsaRequirement {
        ttdb_format::host::IsaRequirement::of_target(self.mcpu.as_deref(), &self.mattr)
    }

    /// A short human label: `llvm -mcpu=core-avx2 (8 cores)`.
    pub fn label(&self) -> String {
        let mut s = self.kind.clone();
        if let Some(m) = &self.mcpu {
            s.push_str(" -mcpu=");
            s.push_str(m);
        }
        if let Some(m) = &self.model {
            s.push_str(" -model=");
            s.push_str(m);
        }
        if let Some(n) = self.num_cores {
            s.push_str(&format!(" ({n} cores)"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_real_target_strings() {
        let t = NormalizedTarget::parse(
            "llvm -keys=cpu -mcpu=core-avx2 -mtriple=x86_64-linux-gnu",
            Some(&[4, 64]),
        );
        assert_eq!(t.kind, "llvm");
        assert_eq!(t.keys, vec!["cpu"]);
        assert_eq!(t.mcpu.as_deref(), Some("core-avx2"));
        assert_eq!(t.num_cores, Some(4));
        assert_eq!(t.compat(), "llvm/cpu");
        let c = NormalizedTarget::parse(
            "cuda -keys=cuda,gpu -arch=sm_86 -max_num_threads=1024",
            Some(&[-1, 16]),
        );
        assert_eq!(c.compat(), "cuda/cuda,gpu");
        assert_eq!(c.num_cores, None);
        assert_eq!(NormalizedTarget::parse("llvm", None).compat(), "llvm/cpu");
        let a = NormalizedTarget::parse("llvm -mcpu=haswell -mattr=+avx512f,+avx512bw", None);
        assert_eq!(a.mattr, vec!["+avx512f", "+avx512bw"]);
        assert_eq!(
            a.isa_requirement().needs,
            Some(ttdb_format::host::VectorIsa::Avx512f)
        );
        assert_eq!(
            t.isa_requirement().needs,
            Some(ttdb_format::host::VectorIsa::Avx2)
        );
    }
}
