//! `flowlab onnx run MODEL.onnx --input x=x.npy --output-dir out/`: an ONNX
//! model imported into the engine and run forward on `.npy` inputs, each
//! output written as `.npy`; `--train --labels y.npy --steps N` trains it
//! instead (the loss on its first output, the engine's gradients, SGD).

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use flowlab_engine::{Optimizer, Session, SessionOptions, Tensor};
use flowlab_models::{npy, onnx};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
pub struct OnnxArgs {
    #[command(subcommand)]
    command: OnnxCommand,
}

#[derive(Subcommand)]
enum OnnxCommand {
    /// Import a model and run it forward (or train it) on .npy inputs.
    Run(RunArgs),
}

#[derive(Args)]
struct RunArgs {
    /// The model file (external data files beside it).
    model: PathBuf,
    /// An input as NAME=FILE.npy, once per input of the model.
    #[arg(long = "input", value_name = "NAME=FILE")]
    inputs: Vec<String>,
    /// Where each output is written as NAME.npy (created if absent).
    #[arg(long)]
    output_dir: Option<PathBuf>,
    /// The batch (the first symbolic dimension of each input); by default
    /// the first dimension of the first input's array.
    #[arg(long)]
    batch: Option<usize>,
    /// A named symbolic dimension, as NAME=N (repeatable).
    #[arg(long = "dim", value_name = "NAME=N")]
    dims: Vec<String>,
    /// Worker threads of the engine's device.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Forward passes to time (the median is reported).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// After the timed passes, one traced pass: kernel time and count per
    /// operator (the engine's ops, after import), largest first.
    #[arg(long)]
    by_op: bool,
    /// Train instead of running forward: a loss on the first output against
    /// --labels, gradients by the engine's autodiff, SGD.
    #[arg(long)]
    train: bool,
    /// softmax_xent (class ids, i64) or mse (targets of the output's shape);
    /// by default softmax_xent for [batch, classes] outputs, else mse.
    #[arg(long)]
    loss: Option<String>,
    /// The labels or targets (.npy) for --train.
    #[arg(long)]
    labels: Option<PathBuf>,
    #[arg(long, default_value_t = 10)]
    steps: usize,
    #[arg(long, default_value_t = 0.01)]
    lr: f64,
    /// Print one JSON object instead of lines.
    #[arg(long)]
    json: bool,
}

pub fn run(a: OnnxArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        OnnxCommand::Run(r) => run_model(r),
    }
}

fn pair(s: &str, flag: &str) -> anyhow::Result<(String, String)> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => bail!("{flag} {s}: write NAME=VALUE"),
    }
}

fn run_model(a: RunArgs) -> anyhow::Result<ExitCode> {
    if a.threads == 0 || a.threads > flowlab_engine::MAX_THREADS {
        bail!("--threads: must be between 1 and {} (got {})", flowlab_engine::MAX_THREADS, a.threads);
    }
    let mut arrays: BTreeMap<String, Tensor> = BTreeMap::new();
    let mut order = Vec::new();
    for s in &a.inputs {
        let (name, file) = pair(s, "--input")?;
        let t = npy::read(std::path::Path::new(&file))?;
        order.push(name.clone());
        arrays.insert(name, t);
    }
    let mut opts = onnx::ImportOptions { batch: a.batch, training: a.train, ..Default::default() };
    for s in &a.dims {
        let (k, v) = pair(s, "--dim")?;
        opts.dims.insert(k, v.parse().with_context(|| format!("--dim {s}: {v} is not a whole number"))?);
    }
    if opts.batch.is_none() {
        opts.batch = order.first().and_then(|n| arrays[n].shape().dims().first().copied());
    }
    let t0 = Instant::now();
    let m = onnx::import(&a.model, &opts)?;
    let import_seconds = t0.elapsed().as_secs_f64();
    for i in &m.inputs {
        if !arrays.contains_key(&i.name) {
            let names: Vec<&str> = m.inputs.iter().map(|i| i.name.as_str()).collect();
            bail!("{}: input '{}' is not given (--input {}=FILE.npy; the model's inputs: {})", a.model.display(), i.name, i.name, names.join(", "));
        }
    }
    if let Some(extra) = arrays.keys().find(|k| !m.inputs.iter().any(|i| &i.name == *k)) {
        bail!("--input {extra}: the model has no input of that name");
    }
    let summary = |m: &onnx::OnnxModel| {
        serde_json::json!({
            "model": a.model.display().to_string(),
            "opset": m.opset,
            "nodes": m.op_counts.values().sum::<usize>(),
            "ops": m.op_counts,
            "params": m.params,
            "import_seconds": import_seconds,
        })
    };
    let mut report = summary(&m);
    let options = SessionOptions { threads: a.threads, ..Default::default() };
    if a.train {
        train(&a, m, &arrays, options, &mut report)?;
    } else {
        forward(&a, &m, &arrays, options, &mut report)?;
    }
    if a.json {
        println!("{report}");
    } else {
        print_lines(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn forward(a: &RunArgs, m: &onnx::OnnxModel, arrays: &BTreeMap<String, Tensor>, options: SessionOptions, report: &mut serde_json::Value) -> anyhow::Result<()> {
    let sess = Session::with_options(&m.graph, options)?;
    sess.run(&[], &[], &[&m.graph.global_variables_initializer()?])?;
    let feeds: Vec<_> = m.inputs.iter().map(|i| (&i.placeholder, &arrays[&i.name])).collect();
    let fetches: Vec<_> = m.outputs.iter().map(|(_, o)| o).collect();
    let mut times = Vec::new();
    let mut values = Vec::new();
    for _ in 0..a.repeat.max(1) {
        let t = Instant::now();
        values = sess.run(&feeds, &fetches, &[])?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    report["forward_seconds"] = times[times.len() / 2].into();
    report["repeat"] = times.len().into();
    if a.by_op {
        let (_, stats) = sess.run_traced(&feeds, &fetches, &[])?;
        let mut by_op: BTreeMap<String, (f64, usize)> = BTreeMap::new();
        for n in &stats.nodes {
            let e = by_op.entry(n.op.clone()).or_default();
            e.0 += (n.end_us - n.start_us).max(0.0) * 1e-6;
            e.1 += 1;
        }
        let mut rows: Vec<_> = by_op.into_iter().collect();
        rows.sort_by(|x, y| y.1.0.total_cmp(&x.1.0));
        report["traced_seconds"] = (stats.total_us * 1e-6).into();
        report["by_op"] = rows.into_iter().map(|(op, (s, n))| serde_json::json!({ "op": op, "seconds": s, "nodes": n })).collect::<Vec<_>>().into();
    }
    let mut outs = Vec::new();
    if let Some(dir) = &a.output_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("--output-dir {}", dir.display()))?;
    }
    for ((name, _), v) in m.outputs.iter().zip(&values) {
        let mut o = serde_json::json!({ "name": name, "shape": v.shape().dims(), "dtype": v.dtype().to_string() });
        if let Some(dir) = &a.output_dir {
            let file = dir.join(format!("{}.npy", sanitize(name)));
            npy::write(&file, v)?;
            o["file"] = file.display().to_string().into();
        }
        outs.push(o);
    }
    report["outputs"] = outs.into();
    Ok(())
}

/// An output name as a file name (PyTorch's may hold '/' and ':').
fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect()
}

fn train(a: &RunArgs, m: onnx::OnnxModel, arrays: &BTreeMap<String, Tensor>, options: SessionOptions, report: &mut serde_json::Value) -> anyhow::Result<()> {
    let labels_file = a.labels.as_ref().context("--train needs --labels FILE.npy")?;
    let labels = npy::read(labels_file)?;
    let loss = match &a.loss {
        Some(l) => l.parse::<onnx::Loss>().map_err(|e| anyhow::anyhow!("--loss: {e}"))?,
        None => onnx::Loss::default_for(&m),
    };
    let inputs: Vec<Tensor> = m.inputs.iter().map(|i| arrays[&i.name].clone()).collect();
    let batch = inputs.first().and_then(|t| t.shape().dims().first().copied()).unwrap_or(1);
    let name = a.model.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let mg = onnx::training(m, &name, batch, loss, &Optimizer::Sgd { lr: a.lr })?;
    let sess = Session::with_options(&mg.graph, options)?;
    sess.run(&[], &[], &[&mg.graph.global_variables_initializer()?])?;
    let mut data = inputs;
    data.push(labels);
    let feeds: Vec<_> = mg.inputs.iter().zip(&data).collect();
    let mut losses = Vec::new();
    for _ in 0..a.steps {
        let l = sess.run(&feeds, &[&mg.loss], &[&mg.train_op]).with_context(|| format!("training on {}", labels_file.display()))?;
        losses.push(l[0].scalar_f64()?);
    }
    report["loss"] = format!("{loss:?}").into();
    report["steps"] = a.steps.into();
    report["losses"] = losses.into();
    Ok(())
}

fn print_lines(r: &serde_json::Value) {
    let get = |k: &str| r.get(k).map(|v| v.to_string()).unwrap_or_default();
    println!("{}: opset {}, {} nodes, {} parameters, imported in {:.3} s", r["model"].as_str().unwrap_or(""), get("opset"), get("nodes"), get("params"), r["import_seconds"].as_f64().unwrap_or(0.0));
    if let Some(s) = r.get("forward_seconds").and_then(|v| v.as_f64()) {
        println!("forward pass: {:.3} ms (median of {})", s * 1e3, get("repeat"));
    }
    if let Some(rows) = r.get("by_op").and_then(|v| v.as_array()) {
        println!("traced pass: {:.3} ms; kernel time by op:", r["traced_seconds"].as_f64().unwrap_or(0.0) * 1e3);
        for row in rows {
            println!("  {:>28} {:9.3} ms  x{}", row["op"].as_str().unwrap_or(""), row["seconds"].as_f64().unwrap_or(0.0) * 1e3, row["nodes"]);
        }
    }
    for o in r.get("outputs").and_then(|v| v.as_array()).into_iter().flatten() {
        println!("output {} {} {}{}", o["name"].as_str().unwrap_or(""), o["dtype"].as_str().unwrap_or(""), o["shape"], o.get("file").and_then(|f| f.as_str()).map(|f| format!(" -> {f}")).unwrap_or_default());
    }
    if let Some(l) = r.get("losses").and_then(|v| v.as_array()) {
        let f = |i: usize| l.get(i).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
        println!("trained {} steps ({}): loss {:.6} -> {:.6}", l.len(), r["loss"].as_str().unwrap_or(""), f(0), f(l.len().saturating_sub(1)));
    }
}
