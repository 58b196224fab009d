//! What identifies a run of one sweep point: its seed (derived from the
//! experiment seed and the run's index, so it does not depend on which thread
//! or shard runs it) and its key (a hash of its parameters and seed, so a
//! resumed run recognises the points already done).

use std::collections::BTreeMap;

use serde_json::Value;

/// SplitMix64's finaliser: a bijective mix of 64 bits, so distinct inputs
/// give distinct, well-spread outputs.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed of run `index` of an experiment seeded with `experiment_seed`.
pub(crate) fn run_seed(experiment_seed: u64, index: u64) -> u64 {
    mix64(experiment_seed ^ mix64(index.wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// 64-bit FNV-1a: fixed by its definition, unlike std's hasher, so keys stay
/// the same across Rust versions and machines.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The resume key of a run: a hex hash of its dotted parameters (in sorted
/// key order), its repeat number and its seed.
pub(crate) fn run_key(params: &BTreeMap<String, Value>, repeat: u32, seed: u64) -> String {
    let canonical = serde_json::json!({"params": params, "repeat": repeat, "seed": seed}).to_string();
    format!("{:016x}", fnv1a(canonical.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_its_reference_values() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn seeds_differ_per_index_and_experiment_seed() {
        let a: Vec<u64> = (0..100).map(|i| run_seed(42, i)).collect();
        let mut unique = a.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 100);
        assert_ne!(run_seed(42, 0), run_seed(43, 0));
        assert_eq!(run_seed(42, 7), run_seed(42, 7));
    }

    #[test]
    fn key_depends_on_params_repeat_and_seed_only() {
        let mut p = BTreeMap::new();
        p.insert("workers".to_string(), serde_json::json!(50));
        let k = run_key(&p, 0, 1);
        assert_eq!(k.len(), 16);
        assert_eq!(k, run_key(&p.clone(), 0, 1));
        assert_ne!(k, run_key(&p, 1, 1));
        assert_ne!(k, run_key(&p, 0, 2));
        p.insert("workers".to_string(), serde_json::json!(51));
        assert_ne!(k, run_key(&p, 0, 1));
    }
}
