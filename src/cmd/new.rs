//! `flowlab new KIND` / `flowlab new --from catalog:NAME`: a starting
//! experiment file on stdout (`> my.yaml`), so that a user with only the
//! binary can begin from an annotated file or from a catalog entry.

use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use flowlab_experiments::{CATALOG_PREFIX, catalog_entry, template, templates};

#[derive(Args)]
pub struct NewArgs {
    /// The experiment kind: cluster, placement, systolic, validate or distributed.
    kind: Option<String>,
    /// Start from a catalog entry instead (`catalog:NAME`, as `flowlab list` names them).
    #[arg(long, value_name = "catalog:NAME", conflicts_with = "kind")]
    from: Option<String>,
}

pub fn run(args: NewArgs) -> anyhow::Result<ExitCode> {
    let text = match (&args.kind, &args.from) {
        (_, Some(from)) => {
            let name = from.strip_prefix(CATALOG_PREFIX).unwrap_or(from);
            catalog_entry(name)?.text
        }
        (Some(kind), None) => template(kind)?,
        (None, None) => {
            let kinds: Vec<&str> = templates().iter().map(|(k, _)| *k).collect();
            bail!("give a kind ({}) or --from catalog:NAME, e.g. `flowlab new cluster > my.yaml`", kinds.join(", "))
        }
    };
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}
