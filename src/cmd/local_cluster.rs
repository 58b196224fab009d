//! `--local-cluster ps=P,workers=W`: a cluster of `flowlab server` child
//! processes on free loopback ports, for `flowlab train`.
//!
//! Contract: every child this starts is killed and reaped when the
//! [`LocalCluster`] is dropped, on every exit path (errors and panics
//! included), with a bounded wait; a child also dies with its launcher
//! (Linux), so none outlives a killed `flowlab train`. The spec file and the
//! children's logs live in a temporary folder removed on drop.

use anyhow::{Context, bail};
use flowlab_runtime::{ClusterSpec, Job, TaskId};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
        (Some(p), Some(w)) if p >= 1 && w >= 1 => Ok((p, w)),
        (Some(_), Some(_)) => bail!("--local-cluster {s}: needs at least 1 ps and 1 worker"),
        _ => bail!("--local-cluster {s}: give both ps=P and workers=W"),
    }
}

/// Parses `--kill worker:2@200`: the task and the update after which it dies.
pub fn parse_kill(s: &str) -> anyhow::Result<(TaskId, usize)> {
    let (task, step) = s.split_once('@').with_context(|| format!("--kill {s}: expected TASK@STEP, e.g. worker:2@200"))?;
    let id = TaskId::parse(task).with_context(|| format!("--kill {s}: `{task}` is not a task like worker:2"))?;
    let step: usize = step.parse().with_context(|| format!("--kill {s}: `{step}` is not a step number"))?;
    Ok((id, step))
}

struct Task {
    id: TaskId,
    child: Child,
    log: PathBuf,
}

/// Running `flowlab server` children (see the module comment).
pub struct LocalCluster {
    pub spec: ClusterSpec,
    dir: PathBuf,
    tasks: Vec<Task>,
}

/// Starts `flowlab server` for task `id` of the spec in `file`, its
/// stderr appended to `log`.
fn spawn_task(file: &std::path::Path, id: TaskId, log: &std::path::Path) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("finding the flowlab binary to start the tasks")?;
    let err = std::fs::OpenOptions::new().create(true).append(true).open(log).with_context(|| format!("opening {}", log.display()))?;
    Command::new(&exe)
        .args(["server", "--cluster"])
        .arg(file)
        .args(["--job", id.job.name(), "--task", &id.index.to_string(), "--parent", &std::process::id().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting task {id}: {}", exe.display()))
}

impl LocalCluster {
    /// Writes a spec with `ps` PS and `workers` worker tasks on free
    /// loopback ports and starts one `flowlab server` per task.
    pub fn start(ps: u32, workers: u32) -> anyhow::Result<LocalCluster> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("flowlab-cluster-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // the ports are free now; a task that loses a race for one fails to
        // bind, and the master's error then carries that task's log
        let mut tasks = Vec::new();
        let mut listeners = Vec::new();
        for (job, n) in [(Job::Ps, ps), (Job::Worker, workers)] {
            for i in 0..n {
                let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
                tasks.push((TaskId::new(job, i), format!("127.0.0.1:{}", l.local_addr()?.port())));
                listeners.push(l);
            }
        }
        drop(listeners);
        let spec = ClusterSpec::from_tasks(tasks).map_err(|e| anyhow::anyhow!("local cluster: {e}"))?;
        let mut cluster = LocalCluster { spec, dir, tasks: Vec::new() };
        let file = cluster.dir.join("cluster.yaml");
        std::fs::write(&file, cluster.spec.to_yaml()).with_context(|| format!("writing {}", file.display()))?;
        let ids: Vec<TaskId> = cluster.spec.tasks().map(|(t, _)| t).collect();
        for id in ids {
            let log = cluster.dir.join(format!("{}-{}.log", id.job, id.index));
            let child = spawn_task(&file, id, &log)?;
            cluster.tasks.push(Task { id, child, log });
        }
        Ok(cluster)
    }

    /// Kills task `id` (SIGKILL) and reaps it; false when it is not one of
    /// this cluster's running tasks.
    pub fn kill_task(&mut self, id: TaskId) -> bool {
        for t in &mut self.tasks {
            if t.id == id && matches!(t.child.try_wait(), Ok(None)) {
                let _ = t.child.kill();
                let _ = t.child.wait();
                return true;
            }
        }
        false
    }

    /// Starts task `id` again (after it died) on its address.
    pub fn restart_task(&mut self, id: TaskId) -> anyhow::Result<()> {
        let file = self.dir.join("cluster.yaml");
        let t = self.tasks.iter_mut().find(|t| t.id == id).with_context(|| format!("no task {id} to restart"))?;
        if matches!(t.child.try_wait(), Ok(None)) {
            let _ = t.child.kill();
        }
        let _ = t.child.wait();
        t.child = spawn_task(&file, id, &t.log)?;
        Ok(())
    }

    /// Tasks that have exited, each with its status and the end of its log.
    pub fn exited(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for t in &mut self.tasks {
            if let Ok(Some(status)) = t.child.try_wait() {
                let log = std::fs::read_to_string(&t.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect();
                out.push(format!("task {} exited ({status}): {}", t.id, tail.join(" | ")));
            }
        }
        out
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for t in &mut self.tasks {
            let _ = t.child.kill();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for t in &mut self.tasks {
            // SIGKILL ends a task at once; the wait only reaps it, bounded
            while Instant::now() < deadline {
                match t.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_and_bad_ones_name_the_problem() {
        assert_eq!(parse_shape("ps=1,workers=4").unwrap(), (1, 4));
        assert_eq!(parse_shape("workers=2,ps=2").unwrap(), (2, 2));
        for (bad, why) in [("ps=1", "both"), ("ps=1,workers=0", "at least 1"), ("ps=1,gpus=2", "unknown key `gpus`"), ("ps=x,workers=1", "`x`"), ("ps1", "key=count")] {
            let e = parse_shape(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
        }
        assert_eq!(parse_kill("worker:2@200").unwrap(), (TaskId::new(Job::Worker, 2), 200));
        for (bad, why) in [("worker:2", "TASK@STEP"), ("gpu:1@3", "`gpu:1`"), ("ps:0@x", "`x`")] {
            let e = format!("{:#}", parse_kill(bad).unwrap_err());
            assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
        }
    }
}
