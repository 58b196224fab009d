//! Criterion benchmarks of the systolic-array models: the closed-form fast
//! path over all ResNet-50 layers, and the cycle-by-cycle model on a 32x32
//! array.

use criterion::{criterion_group, criterion_main, Criterion};
use flowlab_hw::systolic::{resnet50, simulate_layer, simulate_layer_cycles, ArrayConfig, Dataflow, Layer};
use std::hint::black_box;

fn fast_path(c: &mut Criterion) {
    let net = resnet50();
    for df in [Dataflow::Os, Dataflow::Ws, Dataflow::Is] {
        let Ok(cfg) = ArrayConfig::new(128, 128, df) else { return };
        c.bench_function(&format!("fast_resnet50_128x128_{df}"), |b| {
            b.iter(|| {
                for l in &net {
                    let _ = black_box(simulate_layer(&cfg, l));
                }
            })
        });
    }
}

fn cycle_model(c: &mut Criterion) {
    let Ok(layer) = Layer::gemm("gemm64", 64, 64, 64) else { return };
    for df in [Dataflow::Os, Dataflow::Ws, Dataflow::Is] {
        let Ok(cfg) = ArrayConfig::new(32, 32, df) else { return };
        c.bench_function(&format!("cycle_gemm64_32x32_{df}"), |b| b.iter(|| black_box(simulate_layer_cycles(&cfg, &layer))));
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = fast_path, cycle_model
}
criterion_main!(benches);
