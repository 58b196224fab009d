//! Criterion benchmarks of the engine workloads that `flowlab bench engine`
//! reports (the same closures, from `flowlab_programs::bench`): the MLP
//! 784-512-512-10 training step at batch 128 and 512 and its batch-1
//! inference, at 1 and 2 threads; the executor overhead of a 10,000-Add
//! chain; the two-branch graph on one and two devices; the Send/Recv
//! ping-pong chain on one and two devices (their difference per hop is the
//! cost of one transfer). GEMM has its own bench (`gemm.rs`).
//!
//! `cargo bench -p flowlab-programs --bench engine [-- FILTER]`

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use flowlab_programs::bench::{Case, chain_case, mlp_infer_case, mlp_train_case, ping_pong_case, two_branch_case};

fn run(c: &mut Criterion, group: &str, cases: Vec<Case>) {
    let mut g = c.benchmark_group(group);
    g.sample_size(20);
    for mut case in cases {
        let id = BenchmarkId::new(case.name.clone(), format!("{}t", case.threads));
        g.bench_function(id, |b| b.iter(|| case.step().expect("benchmark step")));
    }
    g.finish();
}

fn cases(build: impl Fn() -> flowlab_engine::Result<Vec<Case>>) -> Vec<Case> {
    build().expect("building the benchmark cases")
}

fn mlp(c: &mut Criterion) {
    let train = cases(|| {
        let mut v = Vec::new();
        for batch in [128, 512] {
            for threads in [1, 2] {
                v.push(mlp_train_case(batch, threads)?);
            }
        }
        Ok(v)
    });
    run(c, "mlp_train", train);
    run(c, "mlp_infer", cases(|| Ok(vec![mlp_infer_case(1)?, mlp_infer_case(2)?])));
}

fn executor(c: &mut Criterion) {
    run(c, "executor", cases(|| Ok(vec![chain_case(10_000)?])));
}

fn multi_device(c: &mut Criterion) {
    run(c, "two_branch", cases(|| Ok(vec![two_branch_case(75, 1)?, two_branch_case(75, 2)?])));
    run(c, "send_recv", cases(|| Ok(vec![ping_pong_case(2000, 1)?, ping_pong_case(2000, 2)?])));
}

criterion_group!(benches, mlp, executor, multi_device);
criterion_main!(benches);
