//! Criterion benchmark of the kernels of the Deep MNIST CNN training step at
//! batch 64 (the zoo's `cnn`, `flowlab bench engine`'s cnn_train_b64): both
//! convolutions forward and backward, both max pools and their gradients, and
//! the dense layer's three products, at 1 and 2 threads. Each thread count
//! runs inside a rayon pool of exactly that size. Each convolution runs
//! twice: as the engine runs it (the direct kernels on AVX-512 CPUs) and by
//! im2col + GEMM (`_im2col`), its peer. `flowlab profile --model
//! cnn --batch 64` gives the same ops' share of a whole step.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use flowlab_engine::kernels::cpu::{
    Conv2dGeom, Padding, Pool2dGeom, conv2d, conv2d_backprop_filter, conv2d_backprop_filter_by_im2col, conv2d_backprop_input,
    conv2d_backprop_input_by_im2col, conv2d_by_im2col, matmul, max_pool, max_pool_grad,
};
use std::hint::black_box;

fn data(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7 + seed * 13) % 23) as f32 * 0.05 - 0.5).collect()
}

/// Says why the remaining cases do not run (the bench itself still ends).
fn skip(why: &str) {
    eprintln!("cnn_kernels: skipped the remaining cases: {why}");
}

fn cnn_kernels(c: &mut Criterion) {
    let mut group = c.benchmark_group("cnn_b64");
    group.sample_size(10);
    for threads in [1usize, 2] {
        let pool = match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
            Ok(p) => p,
            Err(e) => return skip(&format!("a rayon pool of {threads} threads: {e}")),
        };
        let t = format!("{threads}t");
        for (name, input, filter) in [("conv1", [64, 28, 28, 1], [5, 5, 1, 32]), ("conv2", [64, 14, 14, 32], [5, 5, 32, 64])] {
            let g = match Conv2dGeom::new(input, filter, [1, 1], Padding::Same) {
                Ok(g) => g,
                Err(e) => return skip(&format!("{name}: {e}")),
            };
            let x = data(g.input_len(), 1);
            let w = data(g.filter_len(), 2);
            let dy = data(g.output_len(), 3);
            let mut y = vec![0f32; g.output_len()];
            let mut dx = vec![0f32; g.input_len()];
            let mut dw = vec![0f32; g.filter_len()];
            {
                group.bench_function(BenchmarkId::new(format!("{name}_fwd"), &t), |b| {
                    pool.install(|| b.iter(|| conv2d(black_box(&x), black_box(&w), &mut y, &g, threads)))
                });
                group.bench_function(BenchmarkId::new(format!("{name}_fwd_im2col"), &t), |b| {
                    pool.install(|| b.iter(|| conv2d_by_im2col(black_box(&x), black_box(&w), &mut y, &g, threads)))
                });
                if name != "conv1" {
                    group.bench_function(BenchmarkId::new(format!("{name}_dx"), &t), |b| {
                        pool.install(|| b.iter(|| conv2d_backprop_input(black_box(&dy), black_box(&w), &mut dx, &g, threads)))
                    });
                    group.bench_function(BenchmarkId::new(format!("{name}_dx_im2col"), &t), |b| {
                        pool.install(|| b.iter(|| conv2d_backprop_input_by_im2col(black_box(&dy), black_box(&w), &mut dx, &g, threads)))
                    });
                }
                group.bench_function(BenchmarkId::new(format!("{name}_dw"), &t), |b| {
                    pool.install(|| b.iter(|| conv2d_backprop_filter(black_box(&x), black_box(&dy), &mut dw, &g, threads)))
                });
                group.bench_function(BenchmarkId::new(format!("{name}_dw_im2col"), &t), |b| {
                    pool.install(|| b.iter(|| conv2d_backprop_filter_by_im2col(black_box(&x), black_box(&dy), &mut dw, &g, threads)))
                });
            }
        }
        for (name, input) in [("pool1", [64, 28, 28, 32]), ("pool2", [64, 14, 14, 64])] {
            let g = match Pool2dGeom::new(input, [2, 2], [2, 2], Padding::Same) {
                Ok(g) => g,
                Err(e) => return skip(&format!("{name}: {e}")),
            };
            let x = data(g.input_len(), 4);
            let dy = data(g.output_len(), 5);
            let mut y = vec![0f32; g.output_len()];
            let mut dx = vec![0f32; g.input_len()];
            {
                group.bench_function(BenchmarkId::new(format!("{name}_fwd"), &t), |b| {
                    pool.install(|| b.iter(|| max_pool(black_box(&x), &mut y, &g, threads)))
                });
                group.bench_function(BenchmarkId::new(format!("{name}_grad"), &t), |b| {
                    pool.install(|| b.iter(|| max_pool_grad(black_box(&x), black_box(&dy), &mut dx, &g, threads)))
                });
            }
        }
        // Dense 3136 -> 1024: forward x·W, input gradient dy·Wᵀ, weight gradient xᵀ·dy.
        let (m, k, n) = (64usize, 3136usize, 1024usize);
        let x = data(m * k, 6);
        let w = data(k * n, 7);
        let dy = data(m * n, 8);
        let mut y = vec![0f32; m * n];
        let mut dx = vec![0f32; m * k];
        let mut dw = vec![0f32; k * n];
        {
            group.bench_function(BenchmarkId::new("dense_fwd", &t), |b| {
                pool.install(|| b.iter(|| matmul(black_box(&x), black_box(&w), &mut y, m, n, k, false, false, threads)))
            });
            group.bench_function(BenchmarkId::new("dense_dx", &t), |b| {
                pool.install(|| b.iter(|| matmul(black_box(&dy), black_box(&w), &mut dx, m, k, n, false, true, threads)))
            });
            group.bench_function(BenchmarkId::new("dense_dw", &t), |b| {
                pool.install(|| b.iter(|| matmul(black_box(&x), black_box(&dy), &mut dw, k, n, m, true, false, threads)))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, cnn_kernels);
criterion_main!(benches);
