//! Seeded random streams: every draw in a run comes from a ChaCha8 stream
//! derived from the experiment seed and the sweep point's index.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The RNG for one sweep point. The stream number keeps points independent
/// even when seeds are consecutive.
pub fn point_rng(seed: u64, point: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(point);
    rng
}

/// One seed for sweep point `point` of an experiment seeded `seed`, for
/// `cluster::simulate(cfg, point_seed(seed, point))`: a splitmix64 mix, so
/// neighbouring points and seeds get unrelated streams.
pub fn point_seed(seed: u64, point: u64) -> u64 {
    let mut z = seed ^ point.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn same_seed_same_numbers_and_points_differ() {
        let a: Vec<u64> = (0..4).map(|_| 0).scan(point_rng(7, 0), |r, _: u64| Some(r.random())).collect();
        let b: Vec<u64> = (0..4).map(|_| 0).scan(point_rng(7, 0), |r, _: u64| Some(r.random())).collect();
        let c: Vec<u64> = (0..4).map(|_| 0).scan(point_rng(7, 1), |r, _: u64| Some(r.random())).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(point_seed(42, 3), point_seed(42, 3));
        assert_ne!(point_seed(42, 3), point_seed(42, 4));
        assert_ne!(point_seed(42, 3), point_seed(43, 3));
    }
}
