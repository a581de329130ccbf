//! Target (b): `ttdb::ansor::parse_line` and `Record::parse` on any bytes; a parsed record
//! must write back to a line that parses to the same record. Half the mutations are
//! libFuzzer's, half those of tests/common/fuzz.rs (edge numbers, deep nesting, step and
//! line splices), which the CI smoke (tests/bundle_fuzz.rs) also uses.
#![no_main]
use libfuzzer_sys::{fuzz_crossover, fuzz_mutator, fuzz_target};

#[path = "../../tests/common/fuzz.rs"]
mod fuzz;

fuzz_target!(|data: &[u8]| {
    fuzz::exercise_line(data);
});

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    let mut rng = fuzz::Rng::new(seed as u64);
    if rng.below(2) == 0 {
        return libfuzzer_sys::fuzzer_mutate(data, size, max_size);
    }
    let mut v = data[..size].to_vec();
    fuzz::mutate_line(&mut v, &mut rng, &[]);
    let n = v.len().min(max_size);
    data[..n].copy_from_slice(&v[..n]);
    n
});

fuzz_crossover!(|a: &[u8], b: &[u8], out: &mut [u8], seed: u32| {
    let mut rng = fuzz::Rng::new(seed as u64);
    let mut v = a.to_vec();
    fuzz::splice(&mut v, &mut rng, &[b.to_vec()]);
    let n = v.len().min(out.len());
    out[..n].copy_from_slice(&v[..n]);
    n
});
