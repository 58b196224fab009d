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
}

#[derive(Clone, Copy, ValueEnum)]
enum BenchTarget {
    /// Engine: f32 GEMM, MLP training step and batch-1 inference (1 and 2 threads), executor overhead.
    Engine,
    /// Systolic-array simulators: fast path over ResNet-50, cycle model on 32x32.
    Systolic,
    /// Cluster simulator: event core, 200-worker PS and 1,024-worker ring runs, scaling.
    Sim,
    /// Graph-level simulator: Inception-v3 training (batch 32) on 8xK40: prepare, one step, m_etf placement.
    Graph,
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if args.only.is_some() && !matches!(args.target, BenchTarget::Engine) {
        anyhow::bail!("--only applies to `flowlab bench engine` only");
    }
    let records: Vec<serde_json::Value> = match args.target {
        BenchTarget::Engine => flowlab_programs::bench::bench(args.quick, args.only.as_deref())?
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?,
        BenchTarget::Systolic => flowlab_hw::systolic::bench_records(args.quick)?
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?,
        BenchTarget::Sim => flowlab_sim::bench::bench(args.quick)?
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?,
        BenchTarget::Graph => {
            let model = flowlab_sim::zoo::build("inception_v3", 32)?;
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
            "--only {only:?} matches no engine benchmark (names: gemm_f32_1024, gemm_f32_2048, mlp_train_b128, mlp_train_b512, mlp_infer_b1, chain_add_10000, two_branch_matmul256x75_1dev/_2dev, send_recv_ping_pong_4xf32_2000)"
        );
    }
    #[allow(unreachable_code)]
    {
        super::print_records(&records, args.json);
        Ok(ExitCode::SUCCESS)
    }
}
