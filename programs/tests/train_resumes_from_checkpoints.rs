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

/// The end of training is checkpointed whatever `every` is; a checkpoint
/// whose tensor bytes changed is skipped, named, and the one before it
/// restored; another learning rate, or fewer steps than the checkpoint
/// has made, is refused.
#[test]
fn a_changed_checkpoint_is_skipped_and_other_settings_are_refused() {
    let data = load_digits(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/digits.csv.gz")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ck = |resume| CheckpointConfig { dir: dir.path().to_path_buf(), every: 20, keep: 100, resume };
    let cfg = TrainConfig { epochs: 2, checkpoint: Some(ck(false)), ..TrainConfig::new(ModelKind::Mlp) };
    let whole = train(&data, &cfg).unwrap();
    let newest = dir.path().join("ckpt-000000000090.safetensors");
    assert!(newest.is_file(), "the end of training (step 90, not a multiple of 20) is checkpointed");

    // one byte of the last tensor's data changed: the file still parses
    let mut bytes = std::fs::read(&newest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&newest, bytes).unwrap();
    let resumed = train(&data, &TrainConfig { checkpoint: Some(ck(true)), ..cfg.clone() }).unwrap();
    assert_eq!(resumed.resumed_from_step, Some(80));
    assert_eq!(resumed.skipped_checkpoints.len(), 1, "{:?}", resumed.skipped_checkpoints);
    let why = &resumed.skipped_checkpoints[0];
    assert!(why.contains("ckpt-000000000090.safetensors") && why.contains("do not match their checksum"), "{why}");
    assert_eq!((resumed.accuracy, resumed.steps), (whole.accuracy, whole.steps));

    let other_lr = TrainConfig { learning_rate: cfg.learning_rate * 2.0, checkpoint: Some(ck(true)), ..cfg.clone() };
    let e = train(&data, &other_lr).unwrap_err().to_string();
    assert!(e.contains(&format!("was written by a run with learning_rate {}, this run has learning_rate {}", cfg.learning_rate, cfg.learning_rate * 2.0)), "{e}");
    let fewer = TrainConfig { epochs: 1, checkpoint: Some(ck(true)), ..cfg };
    let e = train(&data, &fewer).unwrap_err().to_string();
    assert!(e.contains("of step 90, beyond this run's 45 steps (--epochs 1)"), "{e}");
}
