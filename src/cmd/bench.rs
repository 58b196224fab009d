//! `flowlab bench TARGET`: each crate measures itself and returns records
//! (any serde-serializable struct); this prints them as a table or JSON lines.

use clap::{Args, ValueEnum};
use std::process::ExitCode;

#[derive(Args)]
pub struct BenchArgs {
    /// What to measure.
    target: BenchTarget,
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// Fewer repetitions and smaller sizes, for a quick look.
    #[arg(long)]
    quick: bool,
    /// Engine only: run just the rows whose names contain this text (e.g. `send_recv`, `mlp_infer`).
    #[arg(long, value_name = "TEXT")]
    only: Option<String>,
    /// Engine only, with `--only` naming one model-zoo row (`cnn_train_b64`
    /// or `lstm_lm_train_b32`): build its 1- and 2-thread steps once, print
    /// `ready`, then answer each line `THREADS STEPS` on standard input with
    /// the seconds those steps took. The flowlab side of
    /// `bench/peers/paired.py --lockstep`, which alternates short blocks of
    /// steps with the peer's so that both meet the same spell of a shared
    /// machine.
    #[arg(long, requires = "only")]
    lockstep: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum BenchTarget {
    /// Engine: f32 GEMM, MLP, CNN and LSTM LM training steps and batch-1 inference (1 and 2 threads), executor overhead.
    Engine,
    /// Systolic-array simulators: fast path over ResNet-50, cycle model on 32x32.
    Systolic,
    /// Cluster simulator: event core, 200-worker PS and 1,024-worker ring runs, scaling.
    Sim,
    /// Distributed runtime: Send/Recv of a small tensor in process and over loopback gRPC, a two-task step, sync MLP steps on 1/2/4 workers.
    Cluster,
    /// Graph-level simulator: Inception-v3 training (batch 32) on 8xK40: prepare, one step, m_etf placement.
    Graph,
}

/// The language model row's name.
const LSTM_ROW: &str = "lstm_lm_train_b32";
/// The convolutional network row's name.
const CNN_ROW: &str = "cnn_train_b64";

/// A timed training step of `m`, fed fixed inputs (ids below `ids` for
/// integer placeholders, values in [-1, 1) for float ones).
fn zoo_case(row: &str, m: flowlab_models::zoo::ModelGraph, ids: i64, threads: usize) -> anyhow::Result<flowlab_programs::bench::Case> {
    use flowlab_engine::{DType, Session, SessionOptions, Tensor};
    let sess = Session::with_options(&m.graph, SessionOptions { threads, ..Default::default() })?;
    sess.run(&[], &[], &[&m.graph.global_variables_initializer()?])?;
    let feeds: Vec<Tensor> = m
        .inputs
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let shape = p.shape().to_shape().ok_or_else(|| anyhow::anyhow!("placeholder {} has a partial shape", p.name()))?;
            let n = shape.num_elements() as i64;
            let salt = k as i64 + 1;
            Ok(match p.dtype() {
                DType::I64 => Tensor::from_vec((0..n).map(|i| (i * 7919 + salt) % ids).collect::<Vec<i64>>(), shape)?,
                _ => Tensor::from_vec((0..n).map(|i| ((i * 7919 + salt) % 2000) as f32 / 1000.0 - 1.0).collect::<Vec<f32>>(), shape)?,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(flowlab_programs::bench::Case::new(row.into(), threads, move || {
        let pairs: Vec<_> = m.inputs.iter().zip(&feeds).collect();
        sess.run(&pairs, &[], &[&m.train_op]).map(drop)
    }))
}

/// One momentum step of the zoo's CNN (TensorFlow's "Deep MNIST": two 5x5
/// convolutions and two dense layers) at batch 64: the step
/// `bench/peers/peers.py` times in TensorFlow and PyTorch.
fn cnn_case(threads: usize) -> anyhow::Result<flowlab_programs::bench::Case> {
    zoo_case(CNN_ROW, flowlab_models::zoo::build("cnn", 64)?, 10, threads)
}

/// One Adam step of the zoo's LSTM language model at `flowlab train
/// lstm-lm`'s default sizes (2 x 128 units, vocabulary 1,000, 20 words,
/// batch 32): the step `bench/peers/lstm_lm.py` times in PyTorch.
fn lstm_lm_case(threads: usize) -> anyhow::Result<flowlab_programs::bench::Case> {
    use flowlab_engine::Optimizer;
    let mut o = flowlab_models::zoo::ZooOptions::new(32);
    (o.vocab, o.hidden, o.layers, o.seq_len) = (Some(1000), Some(128), Some(2), Some(20));
    o.optimizer = Some(Optimizer::Adam { lr: 0.003, beta1: 0.9, beta2: 0.999, epsilon: 1e-8 });
    zoo_case(LSTM_ROW, flowlab_models::zoo::build_with("lstm_lm", &o)?, 1000, threads)
}

type ZooCase = fn(usize) -> anyhow::Result<flowlab_programs::bench::Case>;

/// The engine rows built from the model zoo (the rows the peers compare).
const ZOO_ROWS: [(&str, ZooCase); 2] = [(CNN_ROW, cnn_case), (LSTM_ROW, lstm_lm_case)];

/// `--lockstep`: serves blocks of steps of the zoo row `only` names to a
/// driver on standard input (see [`BenchArgs::lockstep`]).
fn lockstep(only: &str, input: impl std::io::BufRead, mut out: impl std::io::Write) -> anyhow::Result<()> {
    let rows: Vec<_> = ZOO_ROWS.iter().filter(|(row, _)| row.contains(only)).collect();
    let [(row, case)] = rows.as_slice() else {
        anyhow::bail!("--lockstep: --only {only:?} must name exactly one of {CNN_ROW}, {LSTM_ROW}");
    };
    let mut cases = Vec::new();
    for threads in [1, 2] {
        let mut c = case(threads)?;
        c.step()?; // warm-up
        cases.push(c);
    }
    writeln!(out, "ready")?;
    out.flush()?;
    for (k, line) in input.lines().enumerate() {
        let line = line?;
        let bad = || anyhow::anyhow!("--lockstep: line {} of standard input: expected `THREADS STEPS` (1 or 2, then a count), got {line:?}", k + 1);
        let nums: Vec<usize> = line.split_whitespace().map(|w| w.parse().map_err(|_| bad())).collect::<anyhow::Result<_>>()?;
        let [threads, steps] = nums.as_slice() else { return Err(bad()) };
        let c = cases.iter_mut().find(|c| c.threads == *threads).ok_or_else(bad)?;
        let t = std::time::Instant::now();
        for _ in 0..*steps {
            c.step().map_err(|e| anyhow::anyhow!("--lockstep: {row} at {threads} threads: {e}"))?;
        }
        writeln!(out, "{}", t.elapsed().as_secs_f64())?;
        out.flush()?;
    }
    Ok(())
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if args.only.is_some() && !matches!(args.target, BenchTarget::Engine) {
        anyhow::bail!("--only applies to `flowlab bench engine` only");
    }
    // `--lockstep` requires `--only`, which the check above keeps to the engine
    if args.lockstep {
        // the driver may close the pipe first: a failed write ends the serve
        super::ignore_sigpipe();
        lockstep(args.only.as_deref().unwrap_or_default(), std::io::stdin().lock(), std::io::stdout().lock())?;
        return Ok(ExitCode::SUCCESS);
    }
    let records: Vec<serde_json::Value> = match args.target {
        BenchTarget::Engine => {
            let mut rows = flowlab_programs::bench::bench(args.quick, args.only.as_deref())?;
            for (row, case) in ZOO_ROWS {
                if args.only.as_deref().is_none_or(|o| row.contains(o)) {
                    for threads in [1, 2] {
                        rows.push(case(threads)?.record(if args.quick { 3 } else { 30 })?);
                    }
                }
            }
            rows.iter().map(serde_json::to_value).collect::<Result<_, _>>()?
        }
        BenchTarget::Systolic => flowlab_hw::systolic::bench_records(args.quick)?
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?,
        BenchTarget::Sim => flowlab_sim::bench::bench(args.quick)?
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?,
        BenchTarget::Cluster => {
            // task servers and clients in this process close connections as
            // each case ends; a write into one must fail, not kill the bench
            super::ignore_sigpipe();
            let mut rows = flowlab_runtime::bench_cluster(args.quick)?;
            rows.extend(flowlab_programs::cluster::bench_steps(args.quick)?);
            rows.iter().map(serde_json::to_value).collect::<Result<_, _>>()?
        }
        BenchTarget::Graph => {
            let model = flowlab_models::zoo::build("inception_v3", 32)?;
            flowlab_sim::graph::bench::bench_graph("inception_v3_b32", &model.graph, "8xK40", if args.quick { 1 } else { 5 })?
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<_, _>>()?
        }
    };
    if let Some(only) = &args.only
        && records.is_empty()
    {
        anyhow::bail!(
            "--only {only:?} matches no engine benchmark (names: gemm_f32_1024, gemm_f32_2048, mlp_train_b128, mlp_train_b512, mlp_infer_b1, chain_add_10000, two_branch_matmul256x75_1dev/_2dev, send_recv_ping_pong_4xf32_2000, cnn_train_b64, lstm_lm_train_b32)"
        );
    }
    #[allow(unreachable_code)]
    {
        super::print_records(&records, args.json);
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_language_model_row_times_real_training_steps() {
        let r = super::lstm_lm_case(1).unwrap().record(2).unwrap();
        assert_eq!((r.name.as_str(), r.threads), (super::LSTM_ROW, 1));
        assert!(r.median_ms > 0.0, "{r:?}");
        let r = super::cnn_case(1).unwrap().record(2).unwrap();
        assert_eq!((r.name.as_str(), r.threads), (super::CNN_ROW, 1));
        assert!(r.median_ms > 0.0, "{r:?}");
    }

    /// The lockstep serve answers each block with its seconds, in order,
    /// and names the line it cannot read.
    #[test]
    fn lockstep_answers_blocks_and_names_a_bad_line() {
        let mut out = Vec::new();
        super::lockstep("lstm", "1 2\n2 1\n".as_bytes(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0], "ready");
        for l in &lines[1..] {
            let secs: f64 = l.parse().unwrap();
            assert!(secs > 0.0 && secs < 60.0, "{text}");
        }
        let e = super::lockstep("lstm", "1 1\n3 1\n".as_bytes(), Vec::new()).unwrap_err().to_string();
        assert_eq!(e, "--lockstep: line 2 of standard input: expected `THREADS STEPS` (1 or 2, then a count), got \"3 1\"");
        let e = super::lockstep("train", "".as_bytes(), Vec::new()).unwrap_err().to_string();
        assert!(e.contains("must name exactly one of cnn_train_b64, lstm_lm_train_b32"), "{e}");
    }
}
