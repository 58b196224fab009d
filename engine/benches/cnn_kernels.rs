//! Criterion benchmark of the kernels of the Deep MNIST CNN training step at
//! batch 64 (the zoo's `cnn`, `flowlab bench engine`'s cnn_train_b64): both
//! convolutions forward and backward, both max pools and their gradients, and
//! the dense layer's three products, at 1 and 2 threads. Each thread count
//! runs inside a rayon pool of exactly that size. Each convolution runs
//! twice: as the engine runs it (the direct kernels on AVX-512 CPUs) and by
//! im2col + GEMM (`_im2col`), its peer. `cnn_b64_fusions` times the
//! executor's fusions on these shapes against the same ops unfused.
//! `flowlab profile --model cnn --batch 64` gives the same ops' share of a
//! whole step.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use flowlab_engine::kernels::cpu::{Product, 
    Conv2dGeom, Padding, Pool2dGeom, conv2d, conv2d_backprop_filter, conv2d_backprop_filter_by_im2col, conv2d_backprop_input,
    conv2d_backprop_input_by_im2col, conv2d_by_im2col, matmul, max_pool, max_pool_grad, max_pool_grad_with_workspace, max_pool_relu_grad,
    max_pool_with_workspace,
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
                // As the step runs them: the gradient with its ReluGrad,
                // reading the input or the pool's workspace.
                group.bench_function(BenchmarkId::new(format!("{name}_relu_grad"), &t), |b| {
                    pool.install(|| b.iter(|| max_pool_relu_grad(black_box(&x), black_box(&dy), &mut dx, &g, threads)))
                });
                let mut ws = vec![0i8; g.output_len()];
                group.bench_function(BenchmarkId::new(format!("{name}_fwd_ws"), &t), |b| {
                    pool.install(|| b.iter(|| max_pool_with_workspace(black_box(&x), &mut y, &mut ws, &g, threads)))
                });
                group.bench_function(BenchmarkId::new(format!("{name}_relu_grad_ws"), &t), |b| {
                    pool.install(|| b.iter(|| max_pool_grad_with_workspace(black_box(&ws), black_box(&dy), &mut dx, &g, threads, true)))
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
                pool.install(|| b.iter(|| matmul(black_box(&x), black_box(&w), &mut y, Product::new(m, n, k), threads)))
            });
            group.bench_function(BenchmarkId::new("dense_dx", &t), |b| {
                pool.install(|| b.iter(|| matmul(black_box(&dy), black_box(&w), &mut dx, Product::new(m, k, n).transposed(false, true), threads)))
            });
            group.bench_function(BenchmarkId::new("dense_dw", &t), |b| {
                pool.install(|| b.iter(|| matmul(black_box(&x), black_box(&dy), &mut dw, Product::new(k, n, m).transposed(true, false), threads)))
            });
        }
    }
    group.finish();
}

/// The executor's fusions on this step's shapes, one thread: a session runs
/// `Relu(BiasAdd(Conv2D(x, w), b))` fetching the Relu (fused into one
/// `_FusedConv2D`) and fetching the Conv2D's output too (which keeps the
/// three kernels apart); likewise `ReluGrad(MaxPoolGrad(y, g), y)` alone
/// (`_FusedMaxPoolGrad`) and with the MaxPoolGrad's output fetched. The
/// pairs differ only in the fusion: fetching an output hands back a handle,
/// not a copy.
fn cnn_fusions(c: &mut Criterion) {
    use flowlab_engine::{AttrValue, DType, Graph, Output, Session, Tensor};
    let mut group = c.benchmark_group("cnn_b64_fusions");
    group.sample_size(10);
    // (name, graph, feeds, fused output, inner output that keeps the ops apart)
    type Case = (String, Graph, Vec<(Output, Tensor)>, Output, Output);
    let built = || -> flowlab_engine::Result<Vec<Case>> {
        let mut cases = Vec::new();
        for (name, input, filter) in [("conv1", [64usize, 28, 28, 1], [5usize, 5, 1, 32]), ("conv2", [64, 14, 14, 32], [5, 5, 32, 64])] {
            let g = Graph::new();
            let x = g.placeholder("x", DType::F32, input.map(|d| d as i64))?;
            let w = g.constant(Tensor::from_vec(data(filter.iter().product(), 2), filter)?)?;
            let b = g.constant(Tensor::from_vec(data(filter[3], 3), [filter[3]])?)?;
            let conv = g.conv2d(&x, &w, [1, 1], true)?;
            let relu = g.relu(g.bias_add(&conv, &b)?)?;
            let feeds = vec![(x, Tensor::from_vec(data(input.iter().product(), 1), input)?)];
            cases.push((format!("{name}_bias_relu"), g, feeds, relu, conv));
        }
        for (name, input) in [("pool1", [64usize, 28, 28, 32]), ("pool2", [64, 14, 14, 64])] {
            let g = Graph::new();
            let x = g.placeholder("x", DType::F32, input.map(|d| d as i64))?;
            let y = g.relu(&x)?;
            let pooled = g.max_pool(&y, [2, 2], [2, 2], true)?;
            let dy = g.placeholder("dy", DType::F32, pooled.shape())?;
            let ints = |v: [i64; 2]| AttrValue::Ints(v.to_vec());
            let pool_grad = g
                .op("MaxPoolGrad")
                .input(&y)
                .input(&dy)
                .attr("ksize", ints([2, 2]))
                .attr("strides", ints([2, 2]))
                .attr("padding", AttrValue::Str("SAME".into()))
                .build()?;
            let relu_grad = g.op("ReluGrad").input(&pool_grad).input(&y).build()?;
            let pooled = [input[0], input[1].div_ceil(2), input[2].div_ceil(2), input[3]];
            let feeds = vec![
                (x, Tensor::from_vec(data(input.iter().product(), 4), input)?),
                (dy, Tensor::from_vec(data(pooled.iter().product(), 5), pooled)?),
            ];
            cases.push((format!("{name}_grad_relu_grad"), g, feeds, relu_grad, pool_grad));
        }
        Ok(cases)
    };
    let cases = match built() {
        Ok(c) => c,
        Err(e) => return skip(&format!("the fusion graphs: {e}")),
    };
    for (name, g, case_feeds, out, inner) in &cases {
        let sess = match Session::new(g) {
            Ok(s) => s,
            Err(e) => return skip(&format!("{name}: {e}")),
        };
        let feeds: Vec<(&Output, &Tensor)> = case_feeds.iter().map(|(o, t)| (o, t)).collect();
        for (label, fetches) in [("fused", vec![out]), ("unfused", vec![out, inner])] {
            if let Err(e) = sess.run(&feeds, &fetches, &[]) {
                return skip(&format!("{name} {label}: {e}"));
            }
            group.bench_function(BenchmarkId::new(name.as_str(), label), |b| b.iter(|| sess.run(black_box(&feeds), &fetches, &[])));
        }
    }
    group.finish();
}

criterion_group!(benches, cnn_kernels, cnn_fusions);
criterion_main!(benches);
