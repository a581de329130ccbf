//! Helpers for the unit tests of the steps.
use super::dump_parse::stage_inits_from_dump;
use super::State;
use ttdb_format::ansor::Step;

/// A step from its record form.
pub fn step(json: &str) -> Step {
    Step::from_json(&serde_json::from_str(json).unwrap()).unwrap()
}

pub fn state_from_dump(text: &str) -> State {
    State::new(&stage_inits_from_dump(text).unwrap()).unwrap()
}

pub fn dump_of(st: &State) -> String {
    st.dump()
}

pub fn stage_line(st: &State, stage: usize) -> String {
    st.dump().lines().nth(stage).unwrap().to_string()
}

/// `["matmul_add", 1024, 1024, 1024, "float32"]` (spec §2.5).
pub fn matmul_state() -> State {
    state_from_dump(
        "0 A placeholder [1024,1024]
1 B placeholder [1024,1024]
2 matmul root unroll=0 : i=1024:S j=1024:S k=1024:R
3 C placeholder [1024,1024]
4 out root unroll=0 : i=1024:S j=1024:S",
    )
}

/// A -> B -> C -> D, element-wise.
pub fn elementwise_chain_state() -> State {
    state_from_dump(
        "0 A placeholder [64]
1 B root unroll=0 : ax0=64:S
2 C root unroll=0 : ax0=64:S
3 D root unroll=0 : ax0=64:S",
    )
}
