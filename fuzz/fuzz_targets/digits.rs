//! Any bytes (plain or gzip) as a digits data file: a data set whose every
//! row is 64 features and a label in range, or an error naming the line.
#![no_main]

use flowlab_programs::datasets::parse_digits;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = parse_digits("fuzz.csv", data) {
        assert_eq!(d.x.len(), d.len() * 64);
        assert!(d.y.iter().all(|&y| (0..10).contains(&y)));
        assert!(d.x.iter().all(|&x| (0.0..=1.0).contains(&x)));
    }
});
