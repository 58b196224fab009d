//! Criterion benchmark of the f32 GEMM kernel: 1024^3 and 2048^3 at 1 and 2
//! threads, the same cases `flowlab bench engine` reports. Each thread count
//! runs inside a rayon pool of exactly that size.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use flowlab_engine::kernels::cpu::{Product, matmul};
use std::hint::black_box;

fn gemm(c: &mut Criterion) {
    let mut group = c.benchmark_group("gemm_f32");
    group.sample_size(10);
    for n in [1024usize, 2048] {
        let a: Vec<f32> = (0..n * n).map(|i| ((i * 7) % 13) as f32 * 0.1 - 0.6).collect();
        let b: Vec<f32> = (0..n * n).map(|i| ((i * 5) % 11) as f32 * 0.1 - 0.5).collect();
        let mut out = vec![0f32; n * n];
        group.throughput(Throughput::Elements(2 * (n as u64).pow(3)));
        for threads in [1usize, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("rayon pool");
            group.bench_with_input(BenchmarkId::new(format!("{threads}t"), n), &n, |bench, &n| {
                pool.install(|| {
                    bench.iter(|| matmul(black_box(&a), black_box(&b), &mut out, Product::new(n, n, n), threads))
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, gemm);
criterion_main!(benches);
