//! `flowlab schema [KIND] [--markdown]`: the JSON Schema of experiment files
//! (for editors: `# yaml-language-server: $schema=...`), one kind's point
//! schema, or the manual's reference page of a kind's keys, all generated
//! from the configuration types.

use std::process::ExitCode;

use anyhow::anyhow;
use clap::Args;

#[derive(Args)]
pub struct SchemaArgs {
    /// One kind's point schema instead of the whole file's: cluster, placement, systolic, validate or distributed.
    kind: Option<String>,
    /// The kind's reference page (markdown: every key with type, default and meaning) instead of JSON.
    #[arg(long, requires = "kind")]
    markdown: bool,
}

pub fn run(args: SchemaArgs) -> anyhow::Result<ExitCode> {
    let text = match (&args.kind, args.markdown) {
        (None, _) => pretty(&flowlab_experiments::file_schema())?,
        (Some(kind), false) => pretty(&flowlab_experiments::point_schema(kind).map_err(|e| anyhow!(e))?)?,
        (Some(kind), true) => flowlab_experiments::reference_page(kind).map_err(|e| anyhow!(e))?,
    };
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// Two-space JSON with a final newline, as the committed schema file.
fn pretty(v: &serde_json::Value) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(v)? + "\n")
}
