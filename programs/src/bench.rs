//! `flowlab bench engine`: GEMM, training-step, inference and executor-overhead
//! measurements, printed by the CLI as a table or JSON lines.
//!
//! Every figure is the median of several timed repetitions after one warm-up
//! run, each thread count measured inside its own rayon pool of exactly that
//! size, so `threads` means what it says whatever the machine's core count.

use flowlab_engine::{DType, EngineError, Graph, Optimizer, Output, Result, Session, SessionOptions, Tensor};
use flowlab_engine::kernels::cpu::{Product, matmul};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::time::Instant;

/// One measurement, as printed by `flowlab bench engine` (JSON field names are
/// part of the output format: `name`, `threads`, `median_ms`, `gflops`).
#[derive(Debug, Clone, Serialize)]
pub struct BenchRecord {
    /// What was measured, e.g. `gemm_f32_1024`.
    pub name: String,
    /// Threads of the rayon pool the measurement ran in.
    pub threads: usize,
    /// Median wall time of one repetition, in milliseconds.
    pub median_ms: f64,
    /// Arithmetic throughput, where the work has a flop count.
    pub gflops: Option<f64>,
    /// Wall time per executed op (executor chain), or per cross-device
    /// transfer (Send/Recv ping-pong).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub us_per_op: Option<f64>,
    /// One-device time over this row's time (two-branch graph on 2 devices).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
}

/// One benchmark workload, built and warmed up: [`Case::step`] runs one
/// repetition. `flowlab bench engine` takes medians of these; the criterion
/// benches (`programs/benches/engine.rs`) time the very same closures.
pub struct Case {
    /// The record name, e.g. `mlp_train_b128` or `two_branch_matmul256x75_2dev`.
    pub name: String,
    /// Threads per device of the case's session.
    pub threads: usize,
    step: Box<dyn FnMut() -> Result<()> + Send>,
}

impl Case {
    /// A workload built elsewhere (the CLI adds the model zoo's language
    /// model, which this crate cannot build): `step` runs one repetition.
    pub fn new(name: String, threads: usize, step: impl FnMut() -> Result<()> + Send + 'static) -> Case {
        Case { name, threads, step: Box::new(step) }
    }

    /// The case's row: median of `reps` repetitions after one warm-up.
    pub fn record(mut self, reps: usize) -> Result<BenchRecord> {
        let secs = self.median_secs(reps)?;
        Ok(BenchRecord { name: self.name, threads: self.threads, median_ms: secs * 1e3, gflops: None, us_per_op: None, speedup: None })
    }

    /// Runs one repetition.
    pub fn step(&mut self) -> Result<()> {
        (self.step)()
    }

    /// Median seconds of `reps` repetitions after one warm-up; the first
    /// error ends the measurement.
    fn median_secs(&mut self, reps: usize) -> Result<f64> {
        let mut err = None;
        let secs = median_secs(reps, || {
            if err.is_none()
                && let Err(e) = self.step()
            {
                err = Some(e);
            }
        });
        err.map_or(Ok(secs), Err)
    }
}

/// Runs every engine benchmark: f32 GEMM (1024^3, 2048^3), the MLP
/// 784-512-512-10 training step (batch 128, 512) and batch-1 inference, at 1
/// and 2 threads, the executor overhead of a 10,000-op chain, the two-branch
/// graph on one and two devices and the Send/Recv ping-pong. `quick` uses
/// fewer repetitions and skips the largest sizes; `only` runs just the rows
/// whose names contain it (e.g. `send_recv`), so one figure can be
/// re-measured alone; nothing matching gives an empty list.
pub fn bench(quick: bool, only: Option<&str>) -> Result<Vec<BenchRecord>> {
    let want = |group: &str| only.is_none_or(|o| group.contains(o));
    let mut records = Vec::new();
    let sizes: &[usize] = if quick { &[1024] } else { &[1024, 2048] };
    for &n in sizes {
        for threads in [1, 2] {
            let reps = match (quick, n) {
                (true, _) => 3,
                (false, 1024) => 15,
                (false, _) => 7,
            };
            if want(&format!("gemm_f32_{n}")) {
                records.push(gemm_f32(n, threads, reps)?);
            }
        }
    }
    let batches: &[usize] = if quick { &[128] } else { &[128, 512] };
    for &batch in batches {
        for threads in [1, 2] {
            if want(&format!("mlp_train_b{batch}")) {
                records.push(mlp_train_step(batch, threads, if quick { 5 } else { 30 })?);
            }
        }
    }
    for threads in [1, 2] {
        if want("mlp_infer_b1") {
            records.push(mlp_inference_b1(threads, if quick { 50 } else { 2000 })?);
        }
    }
    let chain = if quick { 1000 } else { CHAIN_OPS };
    if want(&format!("chain_add_{chain}")) {
        records.push(executor_chain(chain, if quick { 3 } else { 15 })?);
    }
    let branch = if quick { 10 } else { TWO_BRANCH_MATMULS };
    if want(&format!("two_branch_matmul256x{branch}_1dev two_branch_matmul256x{branch}_2dev")) {
        records.extend(two_branch(branch, if quick { 3 } else { 11 })?);
    }
    let hops = if quick { 200 } else { PING_PONG_HOPS };
    if want(&format!("send_recv_ping_pong_4xf32_{hops}")) {
        records.push(send_recv_ping_pong(hops, if quick { 3 } else { 15 })?);
    }
    Ok(records)
}

/// MatMuls per branch of the two-branch graph (about 25 ms per branch on
/// one core of this machine).
const TWO_BRANCH_MATMULS: usize = 75;
/// Device crossings of the Send/Recv ping-pong chain.
const PING_PONG_HOPS: usize = 2000;

fn multi_session(g: &Graph, devices: usize) -> Result<Session> {
    Session::with_options(g, SessionOptions { threads: 1, devices: flowlab_engine::DeviceSet::local_cpus(devices), ..Default::default() })
}

/// Two independent chains of `n` 256x256 MatMuls (by the identity, so values
/// stay put), each summed to a scalar; with `split`, chain i asks for CPU:i.
fn two_branch_graph(n: usize, split: bool) -> Result<(Graph, Vec<Output>)> {
    let g = Graph::new();
    let eye: Vec<f32> = (0..256 * 256).map(|i| if i / 256 == i % 256 { 1.0 } else { 0.0 }).collect();
    let x: Vec<f32> = (0..256 * 256).map(|i| ((i * 7) % 13) as f32 * 0.1).collect();
    let mut sums = Vec::new();
    for b in 0..2 {
        let d = if split { g.device(&format!("/cpu:{b}")) } else { g.clone() };
        let w = d.constant(Tensor::from_vec(eye.clone(), [256, 256])?)?;
        let mut h = d.constant(Tensor::from_vec(x.clone(), [256, 256])?)?;
        for _ in 0..n {
            h = d.matmul(&h, &w)?;
        }
        sums.push(d.reduce_sum(&h, &[], false)?);
    }
    Ok((g, sums))
}

/// The two-branch graph ([`two_branch_graph`]) on `devices` (1 or 2) CPU
/// devices of one thread each.
pub fn two_branch_case(n: usize, devices: usize) -> Result<Case> {
    let (g, sums) = two_branch_graph(n, devices > 1)?;
    let sess = multi_session(&g, devices)?;
    Ok(Case::new(format!("two_branch_matmul256x{n}_{devices}dev"), 1, move || {
        let fetches: Vec<&Output> = sums.iter().collect();
        sess.run(&[], &fetches, &[]).map(drop)
    }))
}

/// The two-branch graph on 1 device x 1 thread and on 2 CPU devices x 1
/// thread each: both medians, the second row with the speedup.
fn two_branch(n: usize, reps: usize) -> Result<Vec<BenchRecord>> {
    let mut rows = Vec::new();
    let mut first = 0.0;
    for devices in [1, 2] {
        let mut case = two_branch_case(n, devices)?;
        let secs = case.median_secs(reps)?;
        if devices == 1 {
            first = secs;
        }
        rows.push(BenchRecord {
            name: case.name,
            threads: 1,
            median_ms: secs * 1e3,
            gflops: Some(2.0 * 2.0 * n as f64 * 256f64.powi(3) / secs / 1e9),
            us_per_op: None,
            speedup: (devices > 1).then(|| first / secs),
        });
    }
    Ok(rows)
}

/// A chain `h = h + 1` of `hops` Adds on a 4-element f32 tensor; on 2
/// devices it alternates between two CPU devices so every Add follows a
/// transfer. Checks the chain's value once before it is timed.
pub fn ping_pong_case(hops: usize, devices: usize) -> Result<Case> {
    let g = Graph::new();
    let dev = |i: usize| if devices > 1 { g.device(&format!("/cpu:{}", i % 2)) } else { g.clone() };
    let mut h = dev(0).constant(Tensor::from_vec(vec![0f32; 4], [4])?)?;
    let ones: Vec<Output> = (0..2).map(|i| dev(i).constant(Tensor::from_vec(vec![1f32; 4], [4])?)).collect::<Result<_>>()?;
    for i in 1..=hops {
        h = dev(i).add(&h, &ones[i % 2])?;
    }
    let sess = multi_session(&g, devices)?;
    let got = sess.run(&[], &[&h], &[])?[0].to_vec::<f32>()?;
    if got != vec![hops as f32; 4] {
        return Err(EngineError::Kernel { node: h.name(), op: "Add".into(), detail: format!("ping-pong chain of {hops} computed {got:?}") });
    }
    Ok(Case::new(format!("send_recv_ping_pong_4xf32_{hops}_{devices}dev"), 1, move || sess.run(&[], &[&h], &[]).map(drop)))
}

/// The ping-pong chain on two devices minus the same chain on one, per
/// hop: the cost of one Send/Recv pair.
fn send_recv_ping_pong(hops: usize, reps: usize) -> Result<BenchRecord> {
    let mut times = [0.0; 2];
    for (k, devices) in [1usize, 2].into_iter().enumerate() {
        times[k] = ping_pong_case(hops, devices)?.median_secs(reps)?;
    }
    Ok(BenchRecord {
        name: format!("send_recv_ping_pong_4xf32_{hops}"),
        threads: 1,
        median_ms: times[1] * 1e3,
        gflops: None,
        us_per_op: Some((times[1] - times[0]) * 1e6 / hops as f64),
        speedup: None,
    })
}

/// Layer widths of the benchmark MLP (TF's classic MNIST model).
const MLP_LAYERS: [usize; 4] = [784, 512, 512, 10];
/// Length of the executor-overhead chain.
const CHAIN_OPS: usize = 10_000;

/// The MLP's graph: placeholders `x` [batch, 784] f32 and `y` [batch] i64,
/// Glorot-uniform weights, ReLU hidden layers, mean sparse softmax
/// cross-entropy, and an SGD train op (learning rate 0.01).
struct Mlp {
    graph: Graph,
    x: Output,
    y: Output,
    logits: Output,
    train: Output,
    init: Output,
}

fn build_mlp(batch: usize) -> Result<Mlp> {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [batch as i64, MLP_LAYERS[0] as i64])?;
    let y = g.placeholder("y", DType::I64, [batch as i64])?;
    let mut h = x.clone();
    for (i, w) in MLP_LAYERS.windows(2).enumerate() {
        let s = g.scope(&format!("layer{i}"));
        let limit = (6.0 / (w[0] + w[1]) as f64).sqrt();
        let wt = s.variable("w", s.random_uniform([w[0], w[1]], DType::F32, -limit, limit, 1 + i as u64)?)?;
        let b = s.variable("b", s.zeros(DType::F32, [w[1]])?)?;
        h = s.bias_add(s.matmul(&h, &wt)?, &b)?;
        if i + 2 < MLP_LAYERS.len() {
            h = s.relu(&h)?;
        }
    }
    let loss = g.reduce_mean(g.sparse_softmax_cross_entropy_with_logits(&h, &y)?, &[], false)?;
    let vars = g.variables();
    let train = Optimizer::Sgd { lr: 0.01 }.minimize(&loss, &vars.iter().collect::<Vec<_>>())?;
    let init = g.global_variables_initializer()?;
    Ok(Mlp { graph: g, x, y, logits: h, train, init })
}

/// A seeded batch: inputs uniform in [0, 1), labels uniform over the classes.
fn mlp_batch(batch: usize) -> Result<(Tensor, Tensor)> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let xs: Vec<f32> = (0..batch * MLP_LAYERS[0]).map(|_| rng.random::<f32>()).collect();
    let ys: Vec<i64> = (0..batch).map(|_| rng.random_range(0..MLP_LAYERS[3] as i64)).collect();
    Ok((Tensor::from_vec(xs, [batch, MLP_LAYERS[0]])?, Tensor::from_vec(ys, [batch])?))
}

fn session(g: &Graph, threads: usize) -> Result<Session> {
    Session::with_options(g, SessionOptions { threads, ..Default::default() })
}

/// One SGD step of the MLP 784-512-512-10 (forward, backward, update) at
/// `batch`, on a session with `threads` threads.
pub fn mlp_train_case(batch: usize, threads: usize) -> Result<Case> {
    let m = build_mlp(batch)?;
    let (bx, by) = mlp_batch(batch)?;
    let sess = session(&m.graph, threads)?;
    sess.run(&[], &[], &[&m.init])?;
    Ok(Case::new(format!("mlp_train_b{batch}"), threads, move || sess.run(&[(&m.x, &bx), (&m.y, &by)], &[], &[&m.train]).map(drop)))
}

fn mlp_train_step(batch: usize, threads: usize, reps: usize) -> Result<BenchRecord> {
    let mut case = mlp_train_case(batch, threads)?;
    let secs = case.median_secs(reps)?;
    // Forward + backward matmuls: 3x the forward multiply-adds, 2 flops each.
    let macs: usize = MLP_LAYERS.windows(2).map(|w| batch * w[0] * w[1]).sum();
    Ok(BenchRecord {
        name: case.name,
        threads,
        median_ms: secs * 1e3,
        gflops: Some(6.0 * macs as f64 / secs / 1e9),
        us_per_op: None,
        speedup: None,
    })
}

/// The MLP's logits for one example, on a session with `threads` threads.
pub fn mlp_infer_case(threads: usize) -> Result<Case> {
    let m = build_mlp(1)?;
    let (bx, _) = mlp_batch(1)?;
    let sess = session(&m.graph, threads)?;
    sess.run(&[], &[], &[&m.init])?;
    Ok(Case::new("mlp_infer_b1".into(), threads, move || sess.run(&[(&m.x, &bx)], &[&m.logits], &[]).map(drop)))
}

fn mlp_inference_b1(threads: usize, reps: usize) -> Result<BenchRecord> {
    let secs = mlp_infer_case(threads)?.median_secs(reps)?;
    Ok(BenchRecord { name: "mlp_infer_b1".into(), threads, median_ms: secs * 1e3, gflops: None, us_per_op: None, speedup: None })
}

/// Executor overhead: `x + 1 + 1 + ...` as `ops` chained scalar Add nodes,
/// fetched in one run on one thread; checks the sum once so nothing is
/// skipped.
pub fn chain_case(ops: usize) -> Result<Case> {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, Vec::<Option<usize>>::new())?;
    let one = g.scalar(1.0, DType::F32)?;
    let mut h = x.clone();
    for _ in 0..ops {
        h = g.add(&h, &one)?;
    }
    let sess = session(&g, 1)?;
    let zero = Tensor::scalar(0f32);
    let got = sess.run(&[(&x, &zero)], &[&h], &[])?[0].scalar_f64()?;
    if got != ops as f64 {
        return Err(EngineError::Kernel {
            node: h.name(),
            op: "Add".into(),
            detail: format!("benchmark chain of {ops} adds computed {got}"),
        });
    }
    Ok(Case::new(format!("chain_add_{ops}"), 1, move || sess.run(&[(&x, &zero)], &[&h], &[]).map(drop)))
}

fn executor_chain(ops: usize, reps: usize) -> Result<BenchRecord> {
    let secs = chain_case(ops)?.median_secs(reps)?;
    Ok(BenchRecord {
        name: format!("chain_add_{ops}"),
        threads: 1,
        median_ms: secs * 1e3,
        gflops: None,
        us_per_op: Some(secs * 1e6 / ops as f64),
        speedup: None,
    })
}

/// Builds a rayon pool of exactly `threads` threads.
pub(crate) fn pool(threads: usize) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().map_err(|e| EngineError::Kernel {
        node: "bench".into(),
        op: "ThreadPool".into(),
        detail: format!("cannot start a pool of {threads} threads: {e}"),
    })
}

/// Median seconds of `reps` timed calls of `f`, after one untimed warm-up.
pub(crate) fn median_secs(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Square f32 GEMM `n x n x n` through the public [`matmul`] kernel.
fn gemm_f32(n: usize, threads: usize, reps: usize) -> Result<BenchRecord> {
    let a: Vec<f32> = (0..n * n).map(|i| ((i * 7) % 13) as f32 * 0.1 - 0.6).collect();
    let b: Vec<f32> = (0..n * n).map(|i| ((i * 5) % 11) as f32 * 0.1 - 0.5).collect();
    let mut c = vec![0f32; n * n];
    let secs = pool(threads)?.install(|| median_secs(reps, || matmul(&a, &b, &mut c, Product::new(n, n, n), threads)));
    Ok(BenchRecord {
        name: format!("gemm_f32_{n}"),
        threads,
        median_ms: secs * 1e3,
        gflops: Some(2.0 * (n as f64).powi(3) / secs / 1e9),
        us_per_op: None,
        speedup: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_bench_reports_every_row_for_one_and_two_threads() {
        let records = bench(true, None).unwrap();
        let rows: Vec<(&str, usize)> = records.iter().map(|r| (r.name.as_str(), r.threads)).collect();
        assert_eq!(
            rows,
            [
                ("gemm_f32_1024", 1),
                ("gemm_f32_1024", 2),
                ("mlp_train_b128", 1),
                ("mlp_train_b128", 2),
                ("mlp_infer_b1", 1),
                ("mlp_infer_b1", 2),
                ("chain_add_1000", 1),
                ("two_branch_matmul256x10_1dev", 1),
                ("two_branch_matmul256x10_2dev", 1),
                ("send_recv_ping_pong_4xf32_200", 1),
            ]
        );
        assert!(records[8].speedup.is_some_and(|s| s > 0.0) && records[7].speedup.is_none());
        assert!(records[9].us_per_op.is_some());
        for r in &records {
            assert!(r.median_ms > 0.0, "{r:?}");
        }
        assert!(records[0].gflops.is_some_and(|g| g > 0.0));
        let chain = &records[6];
        assert!((chain.us_per_op.unwrap() - chain.median_ms).abs() < 1e-9, "1000 ops: us/op equals ms");
        let json = serde_json::to_value(&records[0]).unwrap();
        let mut keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["gflops", "median_ms", "name", "threads"]);
    }

    #[test]
    fn mlp_training_steps_lower_the_loss() {
        let m = build_mlp(32).unwrap();
        let (bx, by) = mlp_batch(32).unwrap();
        let loss = m.graph.reduce_mean(m.graph.sparse_softmax_cross_entropy_with_logits(&m.logits, &m.y).unwrap(), &[], false).unwrap();
        let sess = session(&m.graph, 1).unwrap();
        sess.run(&[], &[], &[&m.init]).unwrap();
        let feeds = [(&m.x, &bx), (&m.y, &by)];
        let first = sess.run(&feeds, &[&loss], &[]).unwrap()[0].scalar_f64().unwrap();
        for _ in 0..20 {
            sess.run(&feeds, &[], &[&m.train]).unwrap();
        }
        let last = sess.run(&feeds, &[&loss], &[]).unwrap()[0].scalar_f64().unwrap();
        // Ten classes, random init: the first loss is near ln 10.
        assert!((first - 10f64.ln()).abs() < 0.5, "initial loss {first}");
        assert!(last < first - 0.1, "20 SGD steps on one batch: {first} -> {last}");
    }
}
