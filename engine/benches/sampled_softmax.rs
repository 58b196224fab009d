//! Criterion benchmark: one SGD step of the output layer of a language
//! model with a 40,000-word vocabulary (batch 64, 256-dim inputs), full
//! softmax against sampled softmax with 512 log-uniform samples (the paper's
//! section 4.2 setting). The full step computes all 40,000 logits and updates
//! the whole [40000, 256] weight matrix; the sampled step gathers the
//! 64 + 512 rows it needs and scatters their updates back (ScatterAdd).

use criterion::{Criterion, criterion_group, criterion_main};
use flowlab_engine::{DType, Graph, Optimizer, Output, Session, SessionOptions, Tensor};

const V: usize = 40_000;
const D: usize = 256;
const B: usize = 64;
const S: usize = 512;

struct Step {
    sess: Session,
    x: Output,
    y: Output,
    train: Output,
}

fn model() -> (Graph, Output, Output, Output, Output) {
    let g = Graph::new();
    let w = g.variable("w", g.random_uniform([V, D], DType::F32, -0.05, 0.05, 1).expect("init")).expect("w");
    let b = g.variable("b", g.zeros(DType::F32, [V]).expect("zeros")).expect("b");
    let x = g.placeholder("x", DType::F32, [B as i64, D as i64]).expect("x");
    let y = g.placeholder("y", DType::I64, [B as i64]).expect("y");
    (g, w, b, x, y)
}

fn full(threads: usize) -> Step {
    let (g, w, b, x, y) = model();
    let logits = g.add(g.matmul_ex(&x, &w, false, true).expect("matmul"), &b).expect("add");
    let loss = g.reduce_mean(g.sparse_softmax_cross_entropy_with_logits(&logits, &y).expect("xent"), &[], false).expect("mean");
    let grads = g.gradients(&[&loss], &[&w, &b]).expect("grads");
    let pairs = vec![(w, grads[0].clone().expect("dw")), (b, grads[1].clone().expect("db"))];
    let train = Optimizer::Sgd { lr: 0.1 }.apply_gradients(&g, &pairs).expect("sgd");
    finish(g, x, y, train, threads)
}

fn sampled(threads: usize) -> Step {
    let (g, w, b, x, y) = model();
    let smp = g.log_uniform_candidate_sampler(&y, S, V, DType::F32, 7).expect("sampler");
    // The rows the step needs: the batch's true classes, then the samples.
    let ids = g.concat(&[&y, &smp[0]], 0).expect("ids");
    let rows = g.gather(&w, &ids).expect("rows");
    let brows = g.gather(&b, &ids).expect("brows");
    let local_true = g.constant(Tensor::from_vec((0..B as i64).collect::<Vec<_>>(), [B]).expect("t")).expect("c");
    let local_smp = g.constant(Tensor::from_vec((B as i64..(B + S) as i64).collect::<Vec<_>>(), [S]).expect("t")).expect("c");
    let per = g.sampled_softmax_loss_with(&rows, &brows, &local_true, &x, [&local_smp, &smp[1], &smp[2]]).expect("loss");
    let loss = g.reduce_mean(&per, &[], false).expect("mean");
    let d = g.gradients(&[&loss], &[&rows, &brows]).expect("grads");
    let uw = g.embedding_sgd(&[&w], &ids, d[0].as_ref().expect("drows"), 0.1).expect("sgd w");
    let ub = g.embedding_sgd(&[&b], &ids, d[1].as_ref().expect("dbrows"), 0.1).expect("sgd b");
    let train = g.group("train", &[&uw, &ub]).expect("group");
    finish(g, x, y, train, threads)
}

fn finish(g: Graph, x: Output, y: Output, train: Output, threads: usize) -> Step {
    let sess = Session::with_options(&g, SessionOptions { threads, ..Default::default() }).expect("session");
    sess.run(&[], &[], &[&g.global_variables_initializer().expect("init")]).expect("init run");
    Step { sess, x, y, train }
}

fn softmax(c: &mut Criterion) {
    let xv = Tensor::from_vec((0..B * D).map(|k| ((k * 7) % 23) as f32 * 0.01 - 0.1).collect::<Vec<_>>(), [B, D]).expect("x");
    let yv = Tensor::from_vec((0..B as i64).map(|k| (k * 613) % V as i64).collect::<Vec<_>>(), [B]).expect("y");
    let mut group = c.benchmark_group("softmax_step_v40000");
    group.sample_size(10);
    for threads in [1usize, 2] {
        for (name, step) in [("full", full(threads)), ("sampled512", sampled(threads))] {
            group.bench_function(format!("{name}/{threads}t"), |bench| {
                bench.iter(|| step.sess.run(&[(&step.x, &xv), (&step.y, &yv)], &[], &[&step.train]).expect("step"))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, softmax);
criterion_main!(benches);
