//! Workload recognition: from a workload key to ttdb's own DAG, TVM era and normalized
//! signature.
//!
//! * Relay keys (`["<md5>", shapes...]`): candidate workloads are generated from the key's
//!   shapes (op families x attributes derivable from shapes x epilogue chains, see
//!   [`candidates`]; the common chains first, the other element-wise ops in a second
//!   pass), each is built for each plausible TVM era, its PrintDAG text rendered by ttdb
//!   and hashed; a candidate whose md5 equals the key's hash is *the* DAG
//!   ([`RecognizedBy::Md5`]). There is no table of known hashes: the match comes from the
//!   rendered text.
//! * Registered-function keys map by name ([`RecognizedBy::Registered`]).
//! * Otherwise the first shape-consistent candidate with the plainest epilogue (adds only, no
//!   activation) is returned as [`RecognizedBy::Structural`], with the reason. Hash-only keys
//!   (no shapes) cannot be recognized.
//!
//! Results are cached per raw key string.
pub mod candidates;
pub mod registered;
pub mod signature;

use crate::ir::{dag_hash, Dag};
use crate::ops::{Anchor, EpilogueOp, Era, WorkloadSpec};
use candidates::{candidates, Candidate, Pass};
pub use signature::{signature_for, unknown_signature};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};
use ttdb_format::ansor::{KeyForm, WorkloadKey};
use ttdb_format::signature::WorkloadSignature;

#[derive(Clone, Debug, PartialEq)]
pub enum RecognizedBy {
    /// ttdb's PrintDAG text of the DAG hashes to the key's md5.
    Md5,
    /// A registered tutorial workload, by function name.
    Registered,
    /// Inferred from shapes only; the DAG is plausible but unverified.
    Structural { reason: String },
}

impl RecognizedBy {
    pub fn as_str(&self) -> &'static str {
        match self {
            RecognizedBy::Md5 => "md5",
            RecognizedBy::Registered => "registered",
            RecognizedBy::Structural { .. } => "structural",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Recognized {
    pub dag: Dag,
    /// The TVM era whose names the DAG uses (for md5 matches: the first era, in search order,
    /// whose text matches; several eras print some ops identically). None when the names do
    /// not depend on the era (registered matmul_add / sparse_dense).
    pub era: Option<Era>,
    pub recognized_by: RecognizedBy,
    pub signature: WorkloadSignature,
    /// The relay workload spec (anchor + epilogue), None for registered workloads.
    pub spec: Option<WorkloadSpec>,
    /// How many candidate DAGs were rendered before the answer (for diagnostics).
    pub candidates_tried: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecognizeError {
    /// `["<md5>"]` keys (before TVM #7317) carry no shapes to infer anything from.
    NoShapes(String),
    /// No op family fits the shapes.
    NoCandidate(String),
    UnknownRegistered(String),
    BadArguments(String),
}

impl fmt::Display for RecognizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecognizeError::NoShapes(h) => write!(
                f,
                "hash-only workload key {h}: no shapes to recognize a DAG from"
            ),
            RecognizeError::NoCandidate(m) => write!(f, "no op family fits the key shapes: {m}"),
            RecognizeError::UnknownRegistered(n) => {
                write!(f, "unknown registered workload function `{n}`")
            }
            RecognizeError::BadArguments(m) => write!(f, "bad registered workload arguments: {m}"),
        }
    }
}
impl std::error::Error for RecognizeError {}

fn cache() -> &'static Mutex<HashMap<String, Result<Recognized, RecognizeError>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Result<Recognized, RecognizeError>>>> =
        OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Recognizes a workload key (cached per raw key string).
pub fn recognize(key: &WorkloadKey) -> Result<Recognized, RecognizeError> {
    if let Some(r) = cache().lock().expect("recognize cache").get(&key.raw) {
        return r.clone();
    }
    let r = recognize_uncached(key);
    cache()
        .lock()
        .expect("recognize cache")
        .insert(key.raw.clone(), r.clone());
    r
}

/// Only the signature and how it was recognized (cached like [`recognize`], without cloning
/// the DAG: the importer needs nothing else).
pub fn recognize_signature(
    key: &WorkloadKey,
) -> Result<(WorkloadSignature, &'static str), RecognizeError> {
    {
        let cache = cache().lock().expect("recognize cache");
        if let Some(r) = cache.get(&key.raw) {
            return r
                .as_ref()
                .map(|r| (r.signature.clone(), r.recognized_by.as_str()))
                .map_err(Clone::clone);
        }
    }
    recognize(key).map(|r| (r.signature, r.recognized_by.as_str()))
}

/// Recognition without the cache (for benchmarks and tests).
pub fn recognize_uncached(key: &WorkloadKey) -> Result<Recognized, RecognizeError> {
    match key.form {
        KeyForm::Registered => {
            let (dag, era, signature) = registered::recognize_registered(key)?;
            Ok(Recognized {
                dag,
                era,
                recognized_by: RecognizedBy::Registered,
                signature,
                spec: None,
                candidates_tried: 0,
            })
        }
        KeyForm::HashOnly => Err(RecognizeError::NoShapes(key.head.clone())),
        KeyForm::Flat | KeyForm::Nested => recognize_relay(key),
    }
}

/// Eras to try, most plausible first: flat keys were written Jan-Aug 2021 (TOPI names of
/// v0.7/v0.8), nested keys from v0.8 on.
fn eras_for(form: KeyForm) -> Vec<Era> {
    let preferred: Vec<Era> = match form {
        KeyForm::Flat => vec![Era::V07, Era::V08],
        _ => vec![Era::V010, Era::V015, Era::V08, Era::V09, Era::V010Early],
    };
    let rest = Era::ALL.into_iter().filter(|e| !preferred.contains(e));
    preferred.iter().copied().chain(rest).collect()
}

/// Shape lists a relay key can stand for: nested keys have one; flat keys are cut into
/// equal-rank shapes for every rank 2..=6 that divides the argument count.
pub fn shape_hypotheses(key: &WorkloadKey) -> Vec<Vec<Vec<i64>>> {
    match key.form {
        KeyForm::Nested => key.nested_shapes().into_iter().collect(),
        KeyForm::Flat => (2..=6)
            .filter_map(|r| key.shapes_with_rank(r))
            .filter(|s| s.len() >= 2)
            .collect(),
        _ => vec![],
    }
}

/// The (op class, era) that matched a hash before. One hash stands for many shapes (the same
/// conv at every layer size), so a new key with a known hash tries that reading first and
/// renders one DAG instead of dozens (a log of 10,000 keys imports in seconds, not minutes).
fn hints() -> &'static Mutex<HashMap<String, (String, Era)>> {
    static HINTS: OnceLock<Mutex<HashMap<String, (String, Era)>>> = OnceLock::new();
    HINTS.get_or_init(|| Mutex::new(HashMap::new()))
}

fn recognize_relay(key: &WorkloadKey) -> Result<Recognized, RecognizeError> {
    let mut eras = eras_for(key.form);
    let hint = hints()
        .lock()
        .expect("recognize hints")
        .get(&key.head)
        .cloned();
    if let Some((_, era)) = &hint {
        eras.retain(|e| e != era);
        eras.insert(0, *era);
    }
    let mut tried = 0usize;
    let mut first_buildable: Option<(Candidate, Era, Dag)> = None;
    let hypotheses = shape_hypotheses(key);
    // A hint knows the class: one pass over every candidate, the hinted class first.
    let passes: &[&[Pass]] = if hint.is_some() {
        &[&[Pass::Base, Pass::Extended]]
    } else {
        &[&[Pass::Base], &[Pass::Extended]]
    };
    for (shapes, pass) in passes
        .iter()
        .flat_map(|p| hypotheses.iter().map(move |h| (h, *p)))
    {
        let (out, ins) = shapes.split_last().expect("at least two shapes");
        let mut cands: Vec<Candidate> =
            pass.iter().flat_map(|&p| candidates(ins, out, p)).collect();
        if let Some((class, _)) = &hint {
            // Stable: the hinted class first, the rest in their likelihood order.
            cands.sort_by_key(|c| c.spec.op_class() != *class);
        }
        // era-major: a whole pass over the candidates per era, most plausible era first
        for &era in &eras {
            for c in &cands {
                let Ok(dag) = c.spec.build(era, &c.canonical) else {
                    continue;
                };
                if dag.io_shapes() != *shapes {
                    continue;
                }
                tried += 1;
                if dag_hash(&dag) == key.head {
                    hints()
                        .lock()
                        .expect("recognize hints")
                        .insert(key.head.clone(), (c.spec.op_class(), era));
                    let signature = signature::spec_signature(&c.spec, &c.canonical, out);
                    return Ok(Recognized {
                        dag,
                        era: Some(era),
                        recognized_by: RecognizedBy::Md5,
                        signature,
                        spec: Some(c.spec.clone()),
                        candidates_tried: tried,
                    });
                }
                if first_buildable.is_none() && is_plain(&c.spec) && era == eras[0] {
                    first_buildable = Some((c.clone(), era, dag));
                }
            }
        }
    }
    match first_buildable {
        Some((c, era, dag)) => {
            let out = dag.stage(dag.output()).shape();
            let signature = signature::spec_signature(&c.spec, &c.canonical, &out);
            let reason = format!(
                "no candidate's PrintDAG md5 equals {} ({tried} DAGs rendered); took the first shape-consistent \
                 candidate `{}` with adds only and no activation: fused activations and exact attributes are unverified",
                key.head,
                c.spec.op_class()
            );
            Ok(Recognized {
                dag,
                era: Some(era),
                recognized_by: RecognizedBy::Structural { reason },
                signature,
                spec: Some(c.spec),
                candidates_tried: tried,
            })
        }
        None => Err(RecognizeError::NoCandidate(format!(
            "{} with shapes {:?}",
            key.head, hypotheses
        ))),
    }
}

/// The plainest reading of an epilogue: operands added after the anchor, no activation.
fn is_plain(spec: &WorkloadSpec) -> bool {
    !matches!(spec.anchor, Anchor::Variance { unbiased: true, .. })
        && spec.epilogue.iter().all(|op| {
            matches!(
                op,
                EpilogueOp::Add {
                    operand_first: false
                } | EpilogueOp::ExpandAdd
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Window2d;

    fn key_for(dag: &Dag, form_flat: bool) -> WorkloadKey {
        let shapes = dag.io_shapes();
        let raw = if form_flat {
            let flat: Vec<i64> = shapes.iter().flatten().copied().collect();
            serde_json::to_string(
                &(std::iter::once(serde_json::json!(dag_hash(dag)))
                    .chain(flat.iter().map(|v| serde_json::json!(v))))
                .collect::<Vec<_>>(),
            )
            .unwrap()
        } else {
            serde_json::to_string(
                &(std::iter::once(serde_json::json!(dag_hash(dag)))
                    .chain(shapes.iter().map(|s| serde_json::json!(s))))
                .collect::<Vec<_>>(),
            )
            .unwrap()
        };
        WorkloadKey::parse(&raw).unwrap()
    }

    /// The same conv kernel tuned by TVM 0.7 (flat key, `placeholder` names) and by TVM
    /// >= 0.10 (nested key, `p0` names, residual-first argument order) gets one signature.
    #[test]
    fn signature_is_identical_across_eras_and_operand_order() {
        let canonical = vec![
            vec![1, 14, 14, 256],
            vec![1, 1, 256, 1024],
            vec![1, 1, 1, 1024],
            vec![1, 14, 14, 1024],
        ];
        let anchor = Anchor::Conv2dNhwc(Window2d::simple(1, 0));
        let bias = EpilogueOp::Add {
            operand_first: false,
        };
        let old = WorkloadSpec::new(
            anchor.clone(),
            vec![
                bias,
                EpilogueOp::Add {
                    operand_first: false,
                },
                EpilogueOp::Relu,
            ],
        );
        let new = WorkloadSpec::new(
            anchor,
            vec![
                bias,
                EpilogueOp::Add {
                    operand_first: true,
                },
                EpilogueOp::Relu,
            ],
        );
        let old_dag = old.build(Era::V07, &canonical).unwrap();
        let new_dag = new.build(Era::V010, &canonical).unwrap();
        assert_ne!(dag_hash(&old_dag), dag_hash(&new_dag));
        let a = recognize_uncached(&key_for(&old_dag, true)).unwrap();
        let b = recognize_uncached(&key_for(&new_dag, false)).unwrap();
        assert_eq!(a.recognized_by, RecognizedBy::Md5);
        assert_eq!(b.recognized_by, RecognizedBy::Md5);
        assert_eq!(a.era, Some(Era::V07));
        assert_eq!(b.era, Some(Era::V010));
        assert_eq!(a.signature, b.signature);
        assert_eq!(a.signature.sha256_hex(), b.signature.sha256_hex());
        assert_eq!(a.signature.op_class, "conv2d_nhwc+add+add+relu");
        assert_eq!(b.signature.inputs, canonical);
    }

    #[test]
    fn unknown_hash_falls_back_to_structure_with_a_reason() {
        let key = WorkloadKey::parse(
            r#"["00000000000000000000000000000000", [1, 8, 8, 16], [3, 3, 16, 32], [1, 1, 1, 32], [1, 8, 8, 32]]"#,
        )
        .unwrap();
        let r = recognize_uncached(&key).unwrap();
        match &r.recognized_by {
            RecognizedBy::Structural { reason } => {
                assert!(reason.contains("no candidate"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.signature.op_class, "conv2d_nhwc+add");
        assert_eq!(
            r.signature.attrs["padding"],
            serde_json::json!([1, 1, 1, 1])
        );
    }

    /// A 1-D bias through expand_dims (BERT, TVM 0.8) and a `[1, N]` broadcast bias (TVM
    /// 0.15) of the same dense kernel normalize to one signature.
    #[test]
    fn bias_rank_does_not_change_the_signature() {
        let old = WorkloadSpec::new(Anchor::Dense, vec![EpilogueOp::ExpandAdd]);
        let new = WorkloadSpec::new(
            Anchor::Dense,
            vec![EpilogueOp::Add {
                operand_first: false,
            }],
        );
        let a = old
            .build(Era::V08, &[vec![1, 64], vec![32, 64], vec![32]])
            .unwrap();
        let b = new
            .build(Era::V015, &[vec![1, 64], vec![32, 64], vec![1, 32]])
            .unwrap();
        let ra = recognize_uncached(&key_for(&a, false)).unwrap();
        let rb = recognize_uncached(&key_for(&b, false)).unwrap();
        assert_eq!(
            (ra.recognized_by.as_str(), rb.recognized_by.as_str()),
            ("md5", "md5")
        );
        assert_eq!(
            ra.spec.as_ref().unwrap().epilogue,
            vec![EpilogueOp::ExpandAdd]
        );
        assert_eq!(ra.signature.sha256_hex(), rb.signature.sha256_hex());
        assert_eq!(ra.signature.inputs[2], vec![1, 32]);
    }

    #[test]
    fn hash_only_keys_are_an_error() {
        let key = WorkloadKey::parse(r#"["de7d1695278cf52778b038e6573d7626"]"#).unwrap();
        assert!(matches!(recognize(&key), Err(RecognizeError::NoShapes(_))));
    }

    #[test]
    fn registered_workloads_map_by_name() {
        let key = WorkloadKey::parse(r#"["matmul_add", 128, 64, 32, "float32"]"#).unwrap();
        let r = recognize(&key).unwrap();
        assert_eq!(r.recognized_by, RecognizedBy::Registered);
        let names: Vec<&str> = r.dag.stages.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["A", "B", "matmul", "C", "out"]);
        let key = WorkloadKey::parse(r#"["nope", 1]"#).unwrap();
        assert!(matches!(
            recognize(&key),
            Err(RecognizeError::UnknownRegistered(_))
        ));
    }

    #[test]
    fn recognized_conv_dag_gives_the_oracle_initial_state_and_its_dataflow() {
        let key = WorkloadKey::parse(
            r#"["de7d1695278cf52778b038e6573d7626", 1, 14, 14, 1024, 1, 1, 1024, 512, 1, 1, 1, 512, 1, 7, 7, 512]"#,
        )
        .unwrap();
        let dag = recognize(&key).unwrap().dag;
        let inits = crate::schedule::stage_inits_from_dag(&dag);
        let st = crate::schedule::State::new(&inits).unwrap();
        // `ansor_state_sim.py --dag KEY`
        assert_eq!(
            st.dump(),
            "0 placeholder placeholder [1,14,14,1024]
1 PaddedInput root unroll=0 : i0=1:S i1=14:S i2=14:S i3=1024:S
2 placeholder placeholder [1,1,1024,512]
3 Conv2dOutput root unroll=0 : nn=1:S yy=7:S xx=7:S ff=512:S ry=1:R rx=1:R rc=1024:R
4 placeholder placeholder [1,1,1,512]
5 T_add root unroll=0 : ax0=1:S ax1=7:S ax2=7:S ax3=512:S
6 T_relu root unroll=0 : ax0=1:S ax1=7:S ax2=7:S ax3=512:S"
        );
        let inputs: Vec<_> = inits.iter().map(|i| i.inputs.clone().unwrap()).collect();
        assert_eq!(
            inputs,
            [
                vec![],
                vec![0],
                vec![],
                vec![1, 2],
                vec![],
                vec![3, 4],
                vec![5]
            ]
        );
        assert_eq!(st.consumes(6, 1), Some(true));
        assert_eq!(st.consumes(5, 4), Some(true));
        assert_eq!(st.consumes(3, 4), Some(false));
    }
}
