//! Criterion benchmarks of the wire formats: encoding and decoding the
//! tensor a split CNN step sends most often (conv2's ReLU gradient at batch
//! 32: 32 x 14 x 14 x 64 floats, 1.6 MB in f32). f32 is the peer: a plain
//! copy to little-endian bytes, which every other format must approach.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flowlab_hw::CommFormat;
use rand::{Rng, SeedableRng};
use std::hint::black_box;

fn wire_formats(c: &mut Criterion) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let values: Vec<f32> = (0..32 * 14 * 14 * 64)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let mut g = c.benchmark_group("wire_1.6MB");
    g.throughput(Throughput::Bytes((values.len() * 4) as u64));
    for name in ["f32", "f16", "bf16", "int8", "int8:256"] {
        let Ok(format) = name.parse::<CommFormat>() else {
            return;
        };
        g.bench_function(format!("encode_{name}"), |b| {
            b.iter(|| black_box(format.encode(black_box(&values))))
        });
        let bytes = format.encode(&values);
        g.bench_function(format!("decode_{name}"), |b| {
            b.iter(|| black_box(format.decode(black_box(&bytes))))
        });
    }
    g.finish();
}

criterion_group!(benches, wire_formats);
criterion_main!(benches);
