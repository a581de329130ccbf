//! Divisor helpers for split lengths and channel blockings.

/// The divisors of `n` (>= 1), ascending.
pub fn divisors(n: i64) -> Vec<i64> {
    let mut small = Vec::new();
    let mut large = Vec::new();
    let mut d = 1;
    while d * d <= n {
        if n % d == 0 {
            small.push(d);
            if d * d != n {
                large.push(n / d);
            }
        }
        d += 1;
    }
    small.extend(large.into_iter().rev());
    small
}

/// The distinct prime factors of `n` (>= 1), ascending.
pub fn prime_factors(mut n: i64) -> Vec<i64> {
    let mut out = Vec::new();
    let mut d = 2;
    while d * d <= n {
        if n % d == 0 {
            out.push(d);
            while n % d == 0 {
                n /= d;
            }
        }
        d += 1;
    }
    if n > 1 {
        out.push(n);
    }
    out
}

/// Largest divisor of `n` that is at most `cap` (1 when `n` or `cap` is below 1).
pub fn largest_divisor_at_most(n: i64, cap: i64) -> i64 {
    if n < 1 || cap < 1 {
        return 1;
    }
    if cap >= n {
        return n;
    }
    let mut best = 1;
    let mut d = 1i64;
    while d.saturating_mul(d) <= n {
        if n % d == 0 {
            for x in [d, n / d] {
                if x <= cap && x > best {
                    best = x;
                }
            }
        }
        d += 1;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divisors_ascending() {
        assert_eq!(divisors(12), [1, 2, 3, 4, 6, 12]);
        assert_eq!(divisors(1), [1]);
        assert_eq!(divisors(49), [1, 7, 49]);
    }

    #[test]
    fn distinct_prime_factors_ascending() {
        assert_eq!(prime_factors(1), [0i64; 0]);
        assert_eq!(prime_factors(28), [2, 7]);
        assert_eq!(prime_factors(64), [2]);
        assert_eq!(prime_factors(97), [97]);
    }

    #[test]
    fn largest_divisor_below_a_cap() {
        assert_eq!(largest_divisor_at_most(64, 16), 16);
        assert_eq!(largest_divisor_at_most(96, 10), 8);
        assert_eq!(largest_divisor_at_most(7, 4), 1);
        assert_eq!(largest_divisor_at_most(12, 100), 12);
        assert_eq!(largest_divisor_at_most(0, 4), 1);
        assert_eq!(largest_divisor_at_most(1 << 40, 3), 2);
    }
}
