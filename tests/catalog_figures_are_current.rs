//! Every figure block in a catalog file's header is what a fresh run of the
//! entry computes today: the simulation entries (deterministic, under a
//! minute each) are run here and their plots' numbers compared with the
//! block docs/gen/catalog_figures.py wrote. Entries that time real runs
//! carry no block.

use flowlab_experiments::{Progress, RunOptions, catalog};

const BEGIN: &str = "# Figures of a fresh run (docs/gen/catalog_figures.py writes them, tests/catalog_figures_are_current.rs checks them):\n";
const END: &str = "# (end of figures)\n";

#[test]
fn every_simulation_entrys_figures_are_what_a_fresh_run_gives() {
    let mut checked = Vec::new();
    for entry in catalog() {
        let experiment = flowlab_experiments::load(&format!("catalog:{}", entry.name)).expect("catalog entry");
        let block = entry.text.split_once(BEGIN).and_then(|(_, rest)| rest.split_once(END)).map(|(b, _)| b);
        if matches!(experiment.kind, "validate" | "distributed") {
            assert!(block.is_none(), "{}: a real-run entry's numbers vary from run to run; quote them in docs/logs instead", entry.name);
            continue;
        }
        let block = block.unwrap_or_else(|| panic!("{}: no figure block; run docs/gen/catalog_figures.py {}", entry.name, entry.name));
        let tmp = tempfile::tempdir().expect("tempdir");
        let options = RunOptions { out_dir: Some(tmp.path().to_path_buf()), jobs: Some(2), progress: Progress::Quiet, ..RunOptions::default() };
        flowlab_experiments::run(&experiment, &options).expect("run");
        let fresh = flowlab_reports::figures_text(tmp.path()).expect("figures");
        assert!(
            fresh == block,
            "{}'s quoted figures are stale; run `python3 docs/gen/catalog_figures.py {}`.\nfile:\n{block}\nfresh run:\n{fresh}",
            entry.name,
            entry.name
        );
        checked.push(entry.name);
    }
    assert!(checked.len() >= 10, "{checked:?}");
}
