//! `--local-cluster ps=P,workers=W`: a cluster of `flowlab server` child
//! processes on free loopback ports, for `flowlab train`: the runtime's
//! [`LocalCluster`] (which kills and reaps every child on drop) started
//! with this binary.

use anyhow::{Context, bail};
use flowlab_engine::EmulatedLink;
use flowlab_runtime::{Launcher, LocalCluster, MAX_LOCAL_TASKS, TaskId};
#[cfg(test)]
use flowlab_runtime::Job;

/// Parses `ps=1,workers=2` (keys in any order, both required).
pub fn parse_shape(s: &str) -> anyhow::Result<(u32, u32)> {
    let (mut ps, mut workers) = (None, None);
    for part in s.split(',') {
        let Some((k, v)) = part.split_once('=') else {
            bail!("--local-cluster {s}: `{part}` is not key=count (expected ps=P,workers=W)");
        };
        let n: u32 = v.trim().parse().with_context(|| format!("--local-cluster {s}: `{v}` is not a count"))?;
        match k.trim() {
            "ps" => ps = Some(n),
            "workers" | "worker" => workers = Some(n),
            other => bail!("--local-cluster {s}: unknown key `{other}` (expected ps and workers)"),
        }
    }
    match (ps, workers) {
        (Some(p), Some(w)) if (1..=MAX_LOCAL_TASKS).contains(&p) && (1..=MAX_LOCAL_TASKS).contains(&w) => Ok((p, w)),
        (Some(_), Some(_)) => bail!("--local-cluster {s}: needs 1 to {MAX_LOCAL_TASKS} ps and 1 to {MAX_LOCAL_TASKS} workers"),
        _ => bail!("--local-cluster {s}: give both ps=P and workers=W"),
    }
}

/// Parses `--kill worker:2@200`: the task and the update after which it dies.
pub fn parse_kill(s: &str) -> anyhow::Result<(TaskId, usize)> {
    flowlab_runtime::parse_kill(s).map_err(|e| anyhow::anyhow!("--kill {s}: {e}"))
}

/// Starts a local cluster of `flowlab server` children (this binary), each
/// emulating `link` to the others.
pub fn start(ps: u32, workers: u32, link: Option<EmulatedLink>) -> anyhow::Result<LocalCluster> {
    let exe = std::env::current_exe().context("finding the flowlab binary to start the tasks")?;
    Ok(LocalCluster::start_with_link(&Launcher::Processes(exe), ps, workers, link)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_and_bad_ones_name_the_problem() {
        assert_eq!(parse_shape("ps=1,workers=4").unwrap(), (1, 4));
        assert_eq!(parse_shape("workers=2,ps=2").unwrap(), (2, 2));
        for (bad, why) in [("ps=1", "both"), ("ps=1,workers=0", "1 to 32 ps and 1 to 32 workers"), ("ps=1,workers=33", "1 to 32 ps and 1 to 32 workers"), ("ps=100000,workers=1", "1 to 32 ps"), ("ps=1,gpus=2", "unknown key `gpus`"), ("ps=x,workers=1", "`x`"), ("ps1", "key=count")] {
            let e = parse_shape(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
        }
        assert_eq!(parse_kill("worker:2@200").unwrap(), (TaskId::new(Job::Worker, 2), 200));
        for (bad, why) in [("worker:2", "TASK@STEP"), ("gpu:1@3", "`gpu:1`"), ("ps:0@x", "`x`"), ("ps:0@0", "updates count from 1")] {
            let e = format!("{:#}", parse_kill(bad).unwrap_err());
            assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
        }
    }
}
