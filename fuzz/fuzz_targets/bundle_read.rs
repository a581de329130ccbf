//! Target (a): `ttdb::bundle::format::read` on any bytes (plain or zstd), and on what it
//! accepts, the writer, merge, signature check and import plan. Half the mutations are
//! libFuzzer's, half the structure-aware ones of tests/common/fuzz.rs (resealed hashes,
//! rebuilt manifests, compression), which the CI smoke (tests/bundle_fuzz.rs) also uses.
#![no_main]
use libfuzzer_sys::{fuzz_crossover, fuzz_mutator, fuzz_target};

#[path = "../../tests/common/fuzz.rs"]
mod fuzz;

fuzz_target!(|data: &[u8]| {
    let _ = fuzz::exercise_bundle(data);
});

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    let mut rng = fuzz::Rng::new(seed as u64);
    if rng.below(2) == 0 {
        return libfuzzer_sys::fuzzer_mutate(data, size, max_size);
    }
    let mut v = data[..size].to_vec();
    fuzz::mutate_bundle(&mut v, &mut rng, &[]);
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
