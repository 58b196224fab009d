//! A training run resumed from a checkpoint taken in the middle of an
//! epoch ends with exactly the numbers of a run that was never stopped.

use flowlab_programs::datasets::load_digits;
use flowlab_programs::train::{CheckpointConfig, ModelKind, TrainConfig, train};
use std::path::Path;

#[test]
fn resuming_mid_epoch_gives_the_uninterrupted_result_bit_for_bit() {
    let data = load_digits(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/digits.csv.gz")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ck = |resume| CheckpointConfig { dir: dir.path().to_path_buf(), every: 7, keep: 100, resume };
    let cfg = TrainConfig { epochs: 2, checkpoint: Some(ck(false)), ..TrainConfig::new(ModelKind::Mlp) };
    let whole = train(&data, &cfg).unwrap();
    assert_eq!(whole.steps, 90, "45 steps per epoch");

    // Forget everything after step 49 (4 steps into the second epoch).
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        let step: u64 = p.file_stem().unwrap().to_str().unwrap().trim_start_matches("ckpt-").parse().unwrap();
        if step > 49 {
            std::fs::remove_file(p).unwrap();
        }
    }
    let resumed = train(&data, &TrainConfig { checkpoint: Some(ck(true)), ..cfg.clone() }).unwrap();
    assert_eq!(resumed.resumed_from_step, Some(49));
    assert_eq!(
        (resumed.accuracy, resumed.loss, resumed.train_loss, resumed.steps),
        (whole.accuracy, whole.loss, whole.train_loss, whole.steps)
    );

    // A different seed must not silently continue someone else's run.
    let other = TrainConfig { seed: 2, checkpoint: Some(ck(true)), ..cfg };
    let e = train(&data, &other).unwrap_err().to_string();
    assert!(e.contains("was written by a run with seed 1, this run has seed 2"), "{e}");
}
