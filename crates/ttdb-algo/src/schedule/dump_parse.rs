//! Reading a dump back: test support only (`stage_inits_from_dump`), compiled for this
//! crate's unit tests and for `ttdb-testkit` (the `testkit` feature), never into the product.
use super::iterator::IterKind;
use super::state::{AxisInit, StageInit};

/// Reads the dump of an *initial* state (every compute stage at root, no annotations, as
/// `ansor_state_sim.py --dag KEY` prints it) back into the stage list that starts replay.
/// Loop names are taken as the TE axis names (true for TOPI's plain axis names); the
/// dataflow is unknown.
pub fn stage_inits_from_dump(text: &str) -> Result<Vec<StageInit>, String> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let bad = |why: &str| format!("{why} in initial-state line {line:?}");
        let mut words = line.splitn(3, ' ');
        let (Some(id), Some(name), Some(rest)) = (words.next(), words.next(), words.next()) else {
            return Err(bad("too few fields"));
        };
        if id.parse::<usize>().ok() != Some(out.len()) {
            return Err(bad("stage ids must count from 0"));
        }
        let name = name.to_string();
        if let Some(shape) = rest
            .strip_prefix("placeholder [")
            .and_then(|r| r.strip_suffix(']'))
        {
            let dims = shape
                .split(',')
                .map(|d| d.parse::<i64>().map_err(|_| bad("bad dimension")));
            let shape = dims.collect::<Result<_, _>>()?;
            out.push(StageInit {
                name,
                placeholder_shape: Some(shape),
                iters: Vec::new(),
                inputs: None,
            });
            continue;
        }
        let Some(iters) = rest
            .strip_prefix("root unroll=0 : ")
            .or(rest.strip_prefix("root unroll=0 :"))
        else {
            return Err(bad("expected a placeholder or a root stage"));
        };
        let mut axes = Vec::new();
        for word in iters.split_whitespace() {
            let (axis, ext_kind) = word
                .rsplit_once('=')
                .ok_or_else(|| bad("iterator without '='"))?;
            let (ext, kind) = match ext_kind.split_once(':') {
                Some((e, "S")) => (e, IterKind::Spatial),
                Some((e, "R")) => (e, IterKind::Reduction),
                _ => return Err(bad("iterator kind must be S or R")),
            };
            let extent = match ext {
                "?" => None,
                e => Some(e.parse::<i64>().map_err(|_| bad("bad extent"))?),
            };
            axes.push(AxisInit {
                name: axis.to_string(),
                extent,
                kind,
            });
        }
        out.push(StageInit {
            name,
            placeholder_shape: None,
            iters: axes,
            inputs: None,
        });
    }
    Ok(out)
}
