//! End to end: the 64-128-10 MLP trained on the digits set reaches at least
//! 96% held-out accuracy, deterministically for a seed.

use flowlab_programs::datasets::load_digits;
use flowlab_programs::train::{ModelKind, TrainConfig, train};
use std::path::Path;

#[test]
fn mlp_reaches_96_percent_on_held_out_digits() {
    let data = load_digits(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/digits.csv.gz")).unwrap();
    assert_eq!(data.len(), 1797);
    let cfg = TrainConfig { epochs: 30, ..TrainConfig::new(ModelKind::Mlp) };
    let r = train(&data, &cfg).unwrap();
    eprintln!("{r:?}");
    assert_eq!(r.test_examples, 359);
    assert_eq!(r.train_examples, 1438);
    assert_eq!(r.steps, 30 * 1438usize.div_ceil(32));
    assert!(r.accuracy >= 0.96, "held-out accuracy {} < 0.96", r.accuracy);
    assert!(r.loss < 0.2, "held-out loss {}", r.loss);
}

#[test]
fn the_784_feature_mlp_refuses_the_64_feature_digits_naming_both() {
    let cfg = TrainConfig { epochs: 1, ..TrainConfig::new(ModelKind::Mlp784) };
    let data = load_digits(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/digits.csv.gz")).unwrap();
    let e = train(&data, &cfg).unwrap_err().to_string();
    assert!(e.contains("model") && e.contains("mlp784 takes 784 features per example; the data has 64"), "{e}");
}
