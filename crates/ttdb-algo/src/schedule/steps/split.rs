//! SP, FSP and FFSP: all three end in `ApplySplitToState` / `ApplySplitToSchedule` with
//! different lengths, which [`split_lengths`] derives for both the state replay and the
//! TE-level replay.
use crate::schedule::apply::ApplyToState;
use crate::schedule::error::{capped_product, ceil_div, ensure, StepResult, MAX_EXTENT};
use crate::schedule::iterator::Iterator;
use crate::schedule::state::{SplitExtentMismatch, State};
use crate::schedule::step_ids::{IdsMut, StepIds};
use crate::schedule::te::{ApplyToSchedule, TSchedule, TeError};
use ttdb_format::ansor::step::{FollowFusedSplitStep, FollowSplitStep, SplitStep};
use ttdb_format::ansor::{Annotation, Step};

/// TE names of the parts of a split of `te` (outer to inner), as TE's repeated `split`
/// (factor, from the innermost) or `split_by_nparts` (from the outermost) creates them.
fn part_te_names(te: &str, n: usize, inner_to_outer: bool) -> Vec<String> {
    (0..=n)
        .map(|k| {
            if inner_to_outer {
                // part 0 = te.outer^n; part k>0 = te.outer^(n-k).inner
                let mut s = format!("{te}{}", ".outer".repeat(n - k));
                if k > 0 {
                    s.push_str(".inner");
                }
                s
            } else {
                // part k<n = te.inner^k.outer; part n = te.inner^n
                let mut s = format!("{te}{}", ".inner".repeat(k));
                if k < n {
                    s.push_str(".outer");
                }
                s
            }
        })
        .collect()
}

/// Loop extents of the parts (outer to inner): repeated ceil-division by the lengths, from
/// the innermost (`inner_to_outer`, factors) or the outermost (nparts). All undefined when
/// the split loop's extent is.
fn part_extents(extent: Option<i64>, lengths: &[i64], inner_to_outer: bool) -> Vec<Option<i64>> {
    let Some(mut rest) = extent else {
        return vec![None; lengths.len() + 1];
    };
    if inner_to_outer {
        let mut out = vec![None; lengths.len() + 1];
        for (k, &l) in lengths.iter().enumerate().rev() {
            out[k + 1] = Some(l);
            rest = ceil_div(rest, l);
        }
        out[0] = Some(rest);
        out
    } else {
        let mut out: Vec<Option<i64>> = Vec::with_capacity(lengths.len() + 1);
        for &l in lengths {
            out.push(Some(l));
            rest = ceil_div(rest, l);
        }
        out.push(Some(rest));
        out
    }
}

/// Split loop `i` of stage `s` into `lengths.len() + 1` loops named `name.0 .. name.n`.
/// Loops after it, and stages attached to them or to it, move by n (an attach on the split
/// loop goes to the innermost part, as TE's `LegalizeInvalidAttach` does).
pub fn apply_split(
    state: &mut State,
    s: usize,
    i: usize,
    lengths: &[i64],
    inner_to_outer: bool,
) -> StepResult {
    for &l in lengths {
        ensure((1..=MAX_EXTENT).contains(&l), || {
            format!("split length {l} must be in 1..=2^40")
        })?;
    }
    // Lengths need not divide the extent, and their product may exceed it (Droplet search
    // and other tuners emit such records; TVM measures them): every part keeps its length,
    // the remaining part gets the ceil quotient, and lowering guards the excess iterations.
    // Only the cap stays, so extents (and fuses of them) never overflow.
    capped_product(lengths.iter().copied(), "product of the split lengths")?;
    let old = state.stages[s].iters[i].clone();
    let n = lengths.len();
    let te_names = part_te_names(&old.te_name, n, inner_to_outer);
    let extents = part_extents(old.extent, lengths, inner_to_outer);
    let mut parts = Vec::with_capacity(n + 1);
    for (k, (te_name, extent)) in te_names.into_iter().zip(extents).enumerate() {
        parts.push(Iterator {
            name: format!("{}.{k}", old.name),
            extent,
            kind: old.kind,
            annotation: Annotation::None,
            orig_iters: Vec::new(),
            te_name,
            source_axes: old.source_axes.clone(),
            ident: state.fresh_ident(),
        });
    }
    let innermost = parts[n].ident;
    let stage = &mut state.stages[s];
    let old_len = stage.iters.len();
    stage.iters.splice(i..=i, parts);
    stage.transformed = true;
    let from: Vec<usize> = (i..old_len).collect();
    let to: Vec<usize> = (i..old_len).map(|x| x + n).collect();
    state.attach_map.update_iters(s, &from, &to);
    state.attach_map.replace_ident(s, &[old.ident], innermost);
    Ok(())
}

/// Ansor's `ApplySplitToSchedule`: TE splits by factors from the innermost part, or by
/// nparts from the outermost.
fn apply_split_to_schedule(
    sch: &mut TSchedule,
    rule: &impl SplitRule,
    earlier: &[Step],
) -> Result<(), TeError> {
    // the state replay's own rule, so both replays split alike
    let sp = rule.split_lengths(earlier).map_err(TeError::Mismatch)?;
    let st = sch.stage_mut(sp.stage_id)?;
    if sp.lengths.iter().any(|&l| l < 1) {
        return Err(TeError::Mismatch(format!("split lengths {:?}", sp.lengths)));
    }
    let mut to_split = st.leaf(sp.iter_id)?;
    if sp.inner_to_outer {
        for &l in sp.lengths.iter().rev() {
            to_split = st.split_factor(to_split, l)?.0;
        }
    } else {
        for &l in &sp.lengths {
            to_split = st.split_nparts(to_split, l)?.1;
        }
    }
    Ok(())
}

impl ApplyToState for SplitStep {
    fn apply_to_state(&self, state: &mut State) -> StepResult {
        let (s, i) = state.loop_iter(self.stage_id, self.iter_id)?;
        let it = &state.stages[s].iters[i];
        let check = match it.extent {
            Some(e) if self.extent != 0 => Some((e, it.name.clone())),
            _ => None,
        };
        apply_split(state, s, i, &self.lengths, self.inner_to_outer)?;
        // `extent` is the loop's extent when Ansor made the step: a check of the bookkeeping.
        if let Some((simulated, iter_name)) = check {
            state.split_report.checked += 1;
            if simulated != self.extent {
                state.split_report.mismatches.push(SplitExtentMismatch {
                    step_index: state.transform_steps.len(),
                    step: Step::Split(self.clone()).to_string(),
                    iter_name,
                    simulated,
                    recorded: self.extent,
                });
            }
        }
        Ok(())
    }
}

impl ApplyToSchedule for SplitStep {
    fn apply_to_schedule(&self, sch: &mut TSchedule, earlier: &[Step]) -> Result<(), TeError> {
        apply_split_to_schedule(sch, self, earlier)
    }
}

impl StepIds for SplitStep {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        IdsMut::stage_loop(&mut self.stage_id, &mut self.iter_id)
    }
}

/// What a split step splits: stage and loop ids as the record gives them, the lengths
/// `ApplySplitToState` receives and their direction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitLengths {
    pub stage_id: u32,
    pub iter_id: u32,
    pub lengths: Vec<i64>,
    pub inner_to_outer: bool,
}

/// The lengths an SP, FSP or FFSP step splits with, given the steps before it: the one rule
/// shared by the state replay and lowering's TE-level replay (TVM has one helper for both,
/// too). FSP/FFSP read their source SPs in `earlier`, which must be the record's steps up to
/// this one. Checks only what the rule itself needs (sources, `n_split`, `level`, products
/// within the cap); the lengths' range is the split's business.
pub fn split_lengths(step: &Step, earlier: &[Step]) -> StepResult<SplitLengths> {
    match step {
        Step::Split(s) => s.split_lengths(earlier),
        Step::FollowSplit(s) => s.split_lengths(earlier),
        Step::FollowFusedSplit(s) => s.split_lengths(earlier),
        other => Err(format!("{} is not a split step", other.tag())),
    }
}

/// [`split_lengths`] of one kind of split step.
trait SplitRule {
    fn split_lengths(&self, earlier: &[Step]) -> StepResult<SplitLengths>;
}

impl SplitRule for SplitStep {
    fn split_lengths(&self, _: &[Step]) -> StepResult<SplitLengths> {
        Ok(SplitLengths {
            stage_id: self.stage_id,
            iter_id: self.iter_id,
            lengths: self.lengths.clone(),
            inner_to_outer: self.inner_to_outer,
        })
    }
}

impl SplitRule for FollowSplitStep {
    fn split_lengths(&self, earlier: &[Step]) -> StepResult<SplitLengths> {
        Ok(SplitLengths {
            stage_id: self.stage_id,
            iter_id: self.iter_id,
            lengths: follow_split_lengths(self, earlier)?,
            inner_to_outer: true,
        })
    }
}

impl SplitRule for FollowFusedSplitStep {
    fn split_lengths(&self, earlier: &[Step]) -> StepResult<SplitLengths> {
        Ok(SplitLengths {
            stage_id: self.stage_id,
            iter_id: self.iter_id,
            lengths: vec![follow_fused_split_length(self, earlier)?],
            inner_to_outer: self.factor_or_nparts,
        })
    }
}

/// The SP step `src` among `earlier` (the steps before the current one).
fn source_split<'a>(earlier: &'a [Step], src: u32, who: &str) -> StepResult<&'a SplitStep> {
    let here = earlier.len();
    let src = src as usize;
    ensure(src < here, || {
        format!("{who} source step {src} is not an earlier step (this is step {here})")
    })?;
    match &earlier[src] {
        Step::Split(sp) => Ok(sp),
        other => Err(format!(
            "{who} source step {src} is {}, not SP",
            other.tag()
        )),
    }
}

/// FSP: the source's first `n_split - 1` lengths, then the product of the rest as one level.
fn follow_split_lengths(step: &FollowSplitStep, earlier: &[Step]) -> StepResult<Vec<i64>> {
    let src = source_split(earlier, step.src_step_id, "FSP")?;
    let max = src.lengths.len() as i64 + 1;
    ensure((1..=max).contains(&step.n_split), || {
        format!(
            "FSP n_split {} must be in 1..={max} for a source with {} lengths",
            step.n_split,
            src.lengths.len()
        )
    })?;
    let keep = (step.n_split - 1) as usize;
    let mut lengths = src.lengths[..keep].to_vec();
    lengths.push(capped_product(
        src.lengths[keep..].iter().copied(),
        "FSP merged length",
    )?);
    Ok(lengths)
}

/// FFSP: the product over the sources of their length at `level`.
fn follow_fused_split_length(step: &FollowFusedSplitStep, earlier: &[Step]) -> StepResult<i64> {
    let mut factors = Vec::with_capacity(step.src_step_ids.len());
    for &src in &step.src_step_ids {
        let sp = source_split(earlier, src, "FFSP")?;
        let level = usize::try_from(step.level)
            .ok()
            .filter(|&l| l < sp.lengths.len());
        let level = level.ok_or_else(|| {
            format!(
                "FFSP level {} is out of range for source step {src} ({} lengths)",
                step.level,
                sp.lengths.len()
            )
        })?;
        factors.push(sp.lengths[level]);
    }
    capped_product(factors, "FFSP fused length")
}

impl ApplyToState for FollowSplitStep {
    fn apply_to_state(&self, state: &mut State) -> StepResult {
        let (s, i) = state.loop_iter(self.stage_id, self.iter_id)?;
        let lengths = follow_split_lengths(self, &state.transform_steps)?;
        apply_split(state, s, i, &lengths, true)
    }
}

impl ApplyToSchedule for FollowSplitStep {
    fn apply_to_schedule(&self, sch: &mut TSchedule, earlier: &[Step]) -> Result<(), TeError> {
        apply_split_to_schedule(sch, self, earlier)
    }
}

impl StepIds for FollowSplitStep {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        let mut ids = IdsMut::stage_loop(&mut self.stage_id, &mut self.iter_id);
        ids.steps.push(&mut self.src_step_id);
        ids
    }
}

impl ApplyToState for FollowFusedSplitStep {
    fn apply_to_state(&self, state: &mut State) -> StepResult {
        let (s, i) = state.loop_iter(self.stage_id, self.iter_id)?;
        let length = follow_fused_split_length(self, &state.transform_steps)?;
        apply_split(state, s, i, &[length], self.factor_or_nparts)
    }
}

impl ApplyToSchedule for FollowFusedSplitStep {
    fn apply_to_schedule(&self, sch: &mut TSchedule, earlier: &[Step]) -> Result<(), TeError> {
        apply_split_to_schedule(sch, self, earlier)
    }
}

impl StepIds for FollowFusedSplitStep {
    fn ids_mut(&mut self) -> IdsMut<'_> {
        let mut ids = IdsMut::stage_loop(&mut self.stage_id, &mut self.iter_id);
        ids.steps.extend(self.src_step_ids.iter_mut());
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::test_util::{matmul_state, stage_line, step};

    #[test]
    fn te_names_of_split_parts() {
        assert_eq!(part_te_names("k", 1, true), ["k.outer", "k.inner"]);
        assert_eq!(
            part_te_names("k", 2, true),
            ["k.outer.outer", "k.outer.inner", "k.inner"]
        );
        assert_eq!(
            part_te_names("k", 2, false),
            ["k.outer", "k.inner.outer", "k.inner.inner"]
        );
        assert_eq!(part_te_names("k", 0, true), ["k"]);
    }

    #[test]
    fn split_extents_innermost_first() {
        assert_eq!(
            part_extents(Some(1024), &[2, 1, 4], true),
            [Some(128), Some(2), Some(1), Some(4)]
        );
        // not divisible: ceil at every level
        assert_eq!(
            part_extents(Some(7), &[2, 3], true),
            [Some(2), Some(2), Some(3)]
        );
        assert_eq!(
            part_extents(Some(7), &[2, 3], false),
            [Some(2), Some(3), Some(2)]
        );
        assert_eq!(part_extents(None, &[2], true), [None, None]);
    }

    #[test]
    fn split_names_extents_and_check() {
        let mut st = matmul_state();
        st.apply(&step(r#"["SP", 2, 0, 1024, [2, 1, 4], 1]"#))
            .unwrap();
        assert_eq!(
            stage_line(&st, 2),
            "2 matmul root unroll=0 : i.0=128:S i.1=2:S i.2=1:S i.3=4:S j=1024:S k=1024:R"
        );
        st.apply(&step(r#"["SP", 2, 5, 1000, [8], 0]"#)).unwrap();
        assert_eq!(
            stage_line(&st, 2),
            "2 matmul root unroll=0 : i.0=128:S i.1=2:S i.2=1:S i.3=4:S j=1024:S k.0=8:R k.1=128:R"
        );
        assert_eq!(st.split_report().checked, 2);
        assert_eq!(st.split_report().mismatches.len(), 1);
        let e = st.verify_split_extents().unwrap_err();
        assert_eq!(e.step_index, 1);
        assert!(
            e.reason
                .contains("had extent 1000, replay gives 1024 for k"),
            "{e}"
        );
    }

    #[test]
    fn split_refuses_bad_lengths() {
        let mut st = matmul_state();
        // Refused: lengths outside 1..=2^40, products above the 2^40 extent cap (whatever
        // the loop's extent), ids out of range. A product above the extent is no longer
        // refused (TVM accepts and measures such records): see `over_long_split_extents`.
        for (s, want) in [
            (r#"["SP", 2, 0, 1024, [0], 1]"#, "must be in 1..=2^40"),
            (r#"["SP", 2, 0, 1024, [-4], 1]"#, "must be in 1..=2^40"),
            (
                r#"["SP", 2, 0, 1024, [2147483647, 2147483647, 2147483647], 1]"#,
                "exceeds the extent cap",
            ),
            (
                r#"["SP", 2, 0, 1024, [1048576, 1048576, 2], 1]"#,
                "exceeds the extent cap",
            ),
            (r#"["SP", 2, 3, 1024, [2], 1]"#, "out of range"),
        ] {
            let e = st.apply(&step(s)).unwrap_err();
            assert!(e.reason.contains(want), "{s}: {e}");
        }
        assert_eq!(
            stage_line(&st, 2),
            "2 matmul root unroll=0 : i=1024:S j=1024:S k=1024:R",
            "a refused step changes nothing"
        );
        // a product of exactly the cap is accepted: its parts keep their lengths
        st.apply(&step(r#"["SP", 2, 0, 1024, [1048576, 1048576], 1]"#))
            .unwrap();
        assert_eq!(
            stage_line(&st, 2),
            "2 matmul root unroll=0 : i.0=1:S i.1=1048576:S i.2=1048576:S j=1024:S k=1024:R"
        );
    }

    #[test]
    fn over_long_split_extents() {
        // TVM's ApplySplitToState: each part has its length, the rest is a ceil quotient.
        for (s, want) in [
            // one length above the whole extent
            (r#"["SP", 2, 0, 1024, [2048], 1]"#, "i.0=1:S i.1=2048:S"),
            // Droplet-style lengths, product 3x the extent, factors: ceil(ceil(1024/64)/48)
            (
                r#"["SP", 2, 0, 1024, [48, 64], 1]"#,
                "i.0=1:S i.1=48:S i.2=64:S",
            ),
            // the same as nparts: outer parts 48 and 64, the innermost ceil(ceil(1024/48)/64)
            (
                r#"["SP", 2, 0, 1024, [48, 64], 0]"#,
                "i.0=48:S i.1=64:S i.2=1:S",
            ),
            // non-dividing lengths with a product below the extent: 1024/24 -> 43 -> 15
            (
                r#"["SP", 2, 0, 1024, [3, 24], 1]"#,
                "i.0=15:S i.1=3:S i.2=24:S",
            ),
            // nparts: 1024/3 -> 342, 342/24 -> 15
            (
                r#"["SP", 2, 0, 1024, [3, 24], 0]"#,
                "i.0=3:S i.1=24:S i.2=15:S",
            ),
        ] {
            let mut st = matmul_state();
            st.apply(&step(s)).unwrap();
            assert_eq!(
                stage_line(&st, 2),
                format!("2 matmul root unroll=0 : {want} j=1024:S k=1024:R"),
                "{s}"
            );
            // the recorded extent is the loop's: no mismatch
            assert!(st.verify_split_extents().is_ok(), "{s}");
        }
        // FSP/FFSP follow over-long sources alike (their merged lengths too)
        let mut st = matmul_state();
        st.apply(&step(r#"["SP", 2, 0, 1024, [16, 48, 64], 1]"#))
            .unwrap();
        st.apply(&step(r#"["FSP", 4, 0, 0, 2]"#)).unwrap();
        st.apply(&step(r#"["FFSP", 4, 3, [0], 2, 0]"#)).unwrap();
        assert_eq!(
            stage_line(&st, 4),
            "4 out root unroll=0 : i.0=1:S i.1=16:S i.2=3072:S j.0=64:S j.1=16:S"
        );
    }

    #[test]
    fn follow_split_lengths() {
        let mut st = matmul_state();
        st.apply(&step(r#"["SP", 2, 0, 1024, [2, 1, 4], 1]"#))
            .unwrap();
        // n_split 2 -> [l0, l1*l2]
        st.apply(&step(r#"["FSP", 4, 0, 0, 2]"#)).unwrap();
        assert_eq!(
            stage_line(&st, 4),
            "4 out root unroll=0 : i.0=128:S i.1=2:S i.2=4:S j=1024:S"
        );
        // n_split 4 = all lengths + [1]
        st.apply(&step(r#"["FSP", 4, 3, 0, 4]"#)).unwrap();
        assert_eq!(stage_line(&st, 4), "4 out root unroll=0 : i.0=128:S i.1=2:S i.2=4:S j.0=128:S j.1=2:S j.2=1:S j.3=4:S j.4=1:S");
        for (s, want) in [
            (r#"["FSP", 4, 0, 0, 5]"#, "n_split 5 must be in 1..=4"),
            (r#"["FSP", 4, 0, 0, 0]"#, "n_split 0"),
            (r#"["FSP", 4, 0, 1, 1]"#, "source step 1 is FSP, not SP"),
            (r#"["FSP", 4, 0, 3, 1]"#, "not an earlier step"),
        ] {
            let e = st.apply(&step(s)).unwrap_err();
            assert!(e.reason.contains(want), "{s}: {e}");
        }
    }

    #[test]
    fn one_rule_for_follow_split_lengths() {
        let earlier = vec![
            step(r#"["SP", 2, 0, 1024, [2, 1, 4], 1]"#),
            step(r#"["SP", 2, 4, 1024, [1, 8, 2], 0]"#),
            step(r#"["RE", 2, [0, 1]]"#),
        ];
        let lengths = |s: &str| split_lengths(&step(s), &earlier);
        let got = lengths(r#"["FSP", 4, 3, 0, 2]"#).unwrap();
        assert_eq!(
            got,
            SplitLengths {
                stage_id: 4,
                iter_id: 3,
                lengths: vec![2, 4],
                inner_to_outer: true
            }
        );
        assert_eq!(lengths(r#"["FSP", 4, 0, 0, 1]"#).unwrap().lengths, [8]);
        assert_eq!(
            lengths(r#"["FSP", 4, 0, 0, 4]"#).unwrap().lengths,
            [2, 1, 4, 1]
        );
        // FFSP: product of the sources' lengths at `level`; the direction is its own flag
        let got = lengths(r#"["FFSP", 4, 0, [0, 1], 2, 0]"#).unwrap();
        assert_eq!((got.lengths, got.inner_to_outer), (vec![8], false));
        // SP: its own lengths
        let got = lengths(r#"["SP", 4, 1, 5, [3, 3], 0]"#).unwrap();
        assert_eq!((got.lengths, got.inner_to_outer), (vec![3, 3], false));
        for (s, want) in [
            (r#"["FSP", 4, 0, 2, 1]"#, "FSP source step 2 is RE, not SP"),
            (
                r#"["FSP", 4, 0, 3, 1]"#,
                "not an earlier step (this is step 3)",
            ),
            (
                r#"["FFSP", 4, 0, [0, 2], 0, 1]"#,
                "FFSP source step 2 is RE",
            ),
            (
                r#"["FFSP", 4, 0, [0], -1, 1]"#,
                "FFSP level -1 is out of range",
            ),
            (r#"["CI", 4]"#, "CI is not a split step"),
        ] {
            let e = lengths(s).unwrap_err();
            assert!(e.contains(want), "{s}: {e}");
        }
    }

    #[test]
    fn follow_fused_split() {
        let mut st = matmul_state();
        st.apply(&step(r#"["SP", 2, 0, 1024, [2, 4, 4], 1]"#))
            .unwrap();
        st.apply(&step(r#"["SP", 2, 4, 1024, [1, 8, 2], 1]"#))
            .unwrap();
        st.apply(&step(r#"["FFSP", 4, 0, [0, 1], 1, 1]"#)).unwrap();
        assert_eq!(
            stage_line(&st, 4),
            "4 out root unroll=0 : i.0=32:S i.1=32:S j=1024:S"
        );
        st.apply(&step(r#"["FFSP", 4, 2, [0, 1], 0, 0]"#)).unwrap();
        assert_eq!(
            stage_line(&st, 4),
            "4 out root unroll=0 : i.0=32:S i.1=32:S j.0=2:S j.1=512:S"
        );
        assert!(st
            .apply(&step(r#"["FFSP", 4, 0, [0], 3, 1]"#))
            .unwrap_err()
            .reason
            .contains("level 3"));
        assert!(st
            .apply(&step(r#"["FFSP", 4, 0, [2], 0, 1]"#))
            .unwrap_err()
            .reason
            .contains("not SP"));
    }
}
