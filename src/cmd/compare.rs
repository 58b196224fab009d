//! `flowlab compare A B`: two runs' shared metrics side by side, point by
//! point, with the settings that differ between them named.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::Value;

#[derive(Args)]
pub struct CompareArgs {
    /// The first run's result directory.
    a: PathBuf,
    /// The second run's result directory.
    b: PathBuf,
    /// Compare only these metrics (repeatable; default: every metric both runs have).
    #[arg(long = "metric", value_name = "NAME")]
    metrics: Vec<String>,
    /// Also write the comparison as a report folder (index.html: the table, and a bar chart per metric with A and B side by side).
    #[arg(long, value_name = "DIR")]
    html: Option<PathBuf>,
}

fn show(v: &Option<Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => "(varies or absent)".into(),
    }
}

fn number(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x != 0.0 && (x.abs() >= 1e6 || x.abs() < 1e-3) {
        format!("{x:.4e}")
    } else {
        format!("{x:.4}")
    }
}

pub fn run(args: CompareArgs) -> anyhow::Result<ExitCode> {
    let c = flowlab_experiments::compare(&args.a, &args.b, &args.metrics)?;
    let (a, b) = (args.a.display(), args.b.display());
    println!("A = {a}, B = {b}: {} points matched ({} only in A, {} only in B)", c.points.len(), c.unmatched.0, c.unmatched.1);
    if c.differing.is_empty() {
        println!("settings: the same in both runs (points differ only in what they sweep)");
    }
    for (k, va, vb) in &c.differing {
        println!("setting that differs: {k} = {} in A, {} in B", show(va), show(vb));
    }
    let mut header: Vec<String> = c.keys.clone();
    for m in &c.metrics {
        header.extend([format!("{m} A"), format!("{m} B"), "B/A".into()]);
    }
    println!("{}", header.join("\t"));
    for (values, pairs) in &c.points {
        let mut row: Vec<String> = values.iter().map(|v| show(&Some(v.clone()))).collect();
        for &(x, y) in pairs {
            row.extend([number(x), number(y), number(y / x)]);
        }
        println!("{}", row.join("\t"));
    }
    if let Some(dir) = &args.html {
        let page = flowlab_experiments::compare_report(&args.a, &args.b, &args.metrics, dir)?;
        println!("report: {}", page.display());
    }
    Ok(ExitCode::SUCCESS)
}
