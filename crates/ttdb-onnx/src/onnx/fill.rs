//! The deterministic values of `docs/design/deterministic-data.md`: weights for initializers
//! whose external data was not shipped, and inputs for a model run without `--input`.
//! `tools/onnx_reference.py` implements the same rules, so onnxruntime's reference outputs
//! are computed on the very same numbers.

/// FNV-1a 64 of the name's UTF-8 bytes: one stream of values per tensor.
pub fn name_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Element `i` of the stream `seed`: uniform in [0, 1), 24 bits (exact in f32).
pub fn unit(seed: u64, i: u64) -> f64 {
    let mut z = seed.wrapping_add((i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 40) as f64 / (1u64 << 24) as f64
}

/// What an initializer is, by its first reader (the op type and the input position there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// BatchNormalization's scale or variance: must stay positive.
    BatchNormScaleOrVar,
    /// BatchNormalization's bias or mean.
    BatchNormShift,
    /// Anything else (weights by rank).
    Other,
}

impl Role {
    pub fn of_reader(op_type: &str, position: usize) -> Role {
        match (op_type, position) {
            ("BatchNormalization", 1 | 4) => Role::BatchNormScaleOrVar,
            ("BatchNormalization", 2 | 3) => Role::BatchNormShift,
            _ => Role::Other,
        }
    }
}

/// The float values of a missing initializer, row-major.
pub fn weight_values(name: &str, dims: &[i64], role: Role) -> Vec<f32> {
    let n: i64 = dims.iter().product();
    let seed = name_seed(name);
    let fan_in: i64 = dims.iter().skip(1).product::<i64>().max(1);
    let value = |u: f64| match role {
        Role::BatchNormScaleOrVar => 0.5 + u,
        Role::BatchNormShift => 0.2 * (u - 0.5),
        Role::Other if dims.len() >= 2 => (2.0 * u - 1.0) * (6.0 / fan_in as f64).sqrt(),
        Role::Other => 0.1 * (2.0 * u - 1.0),
    };
    (0..n.max(0) as u64)
        .map(|i| value(unit(seed, i)) as f32)
        .collect()
}

/// The values of a float graph input given no data.
pub fn input_floats(name: &str, n: usize) -> Vec<f32> {
    let seed = name_seed(name);
    (0..n as u64)
        .map(|i| (2.0 * unit(seed, i) - 1.0) as f32)
        .collect()
}

/// The values of an integer graph input given no data: all ones for a mask, else token ids
/// below 100.
pub fn input_ints(name: &str, n: usize) -> Vec<i64> {
    if name.to_ascii_lowercase().contains("mask") {
        return vec![1; n];
    }
    let seed = name_seed(name);
    (0..n as u64)
        .map(|i| (unit(seed, i) * 100.0).floor() as i64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_published_vectors() {
        // FNV-1a 64 test vectors (Fowler/Noll/Vo reference): "" and "a".
        assert_eq!(name_seed(""), 0xcbf29ce484222325);
        assert_eq!(name_seed("a"), 0xaf63dc4c8601ec8c);
        assert_eq!(name_seed("foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn units_are_in_range_and_spread() {
        let s = name_seed("conv1.weight");
        let us: Vec<f64> = (0..10_000).map(|i| unit(s, i)).collect();
        assert!(us.iter().all(|&u| (0.0..1.0).contains(&u)));
        let mean = us.iter().sum::<f64>() / us.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
        assert_ne!(unit(s, 0), unit(name_seed("conv2.weight"), 0));
    }

    #[test]
    fn batchnorm_variances_stay_positive_and_weights_scale_with_fan_in() {
        let var = weight_values("bn.running_var", &[64], Role::BatchNormScaleOrVar);
        assert!(var.iter().all(|&v| (0.5..1.5).contains(&v)));
        let w = weight_values("fc.weight", &[10, 600], Role::Other);
        let bound = (6.0f32 / 600.0).sqrt();
        assert!(w.iter().all(|v| v.abs() <= bound));
        assert!(w.iter().any(|v| v.abs() > bound / 2.0));
        let b = weight_values("fc.bias", &[10], Role::Other);
        assert!(b.iter().all(|v| v.abs() <= 0.1));
        assert_eq!(
            Role::of_reader("BatchNormalization", 4),
            Role::BatchNormScaleOrVar
        );
        assert_eq!(Role::of_reader("BatchNormalization", 0), Role::Other);
    }

    #[test]
    fn masks_are_ones_and_ids_are_small() {
        assert_eq!(input_ints("attention_mask", 3), [1, 1, 1]);
        let ids = input_ints("input_ids", 1000);
        assert!(ids.iter().all(|&t| (0..100).contains(&t)));
        assert!(ids.iter().any(|&t| t > 50));
    }
}
