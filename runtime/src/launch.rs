//! A local cluster on loopback for `--local-cluster`, experiments and tests:
//! one task per PS and worker, either as child processes of a given binary
//! or as task servers on threads of this process.
//!
//! Contract: every task this starts is stopped when the [`LocalCluster`] is
//! dropped, on every exit path (errors and panics included), with a bounded
//! wait; a child process also dies with its launcher (the binary is started
//! with `--parent PID`, which `flowlab server` turns into Linux's
//! `PR_SET_PDEATHSIG`), so none outlives a killed launcher. The spec file
//! and the children's logs live in a temporary folder removed on drop.
//!
//! The binary is the caller's to name ([`Launcher::Processes`]): the
//! runtime cannot know which executable serves tasks (`flowlab` passes its
//! own path; a test binary cannot). It must accept
//! `server --cluster FILE --job J --task N --parent PID` (and `--link
//! 1gbps,100us` when the cluster emulates a link between its tasks).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::auth::Auth;
use crate::cluster::{ClusterSpec, Job, TaskId};
use flowlab_engine::EmulatedLink;

use crate::error::{Result, RuntimeError};
use crate::master::link_arg;
use crate::net::bind_task;
use crate::worker::TaskServer;

/// How a local cluster's tasks run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Launcher {
    /// Each task a child process: `BINARY server --cluster ...`.
    Processes(PathBuf),
    /// Each task a [`TaskServer`] on threads of this process (still gRPC
    /// over loopback TCP between tasks, without process start-up).
    #[default]
    Threads,
}

impl Launcher {
    /// Whether tasks are separate processes.
    pub fn processes(&self) -> bool {
        matches!(self, Launcher::Processes(_))
    }
}

enum Running {
    Child(Child),
    Server(Option<TaskServer>),
}

struct Task {
    id: TaskId,
    running: Running,
    log: PathBuf,
}

/// Running local tasks (see the module comment).
pub struct LocalCluster {
    pub spec: ClusterSpec,
    launcher: Launcher,
    /// The link every task emulates to the others.
    pub link: Option<EmulatedLink>,
    dir: PathBuf,
    tasks: Vec<Task>,
    /// The tasks' ports, held in [`HELD_PORTS`] until the cluster is dropped.
    ports: Vec<u16>,
}

/// Binds a loopback port in 20000..32768, below Linux's ephemeral range
/// (32768..61000), at a pseudo-random place from `state`: a port released
/// there for a task to bind is not handed to another process's `bind(0)`
/// or outgoing connection in the meantime, as one from the ephemeral range
/// can be (another test's local cluster took one that way). `None` after
/// 64 taken ports: the caller falls back to `bind(0)`.
fn bind_below_ephemeral(state: &mut u64) -> Option<TcpListener> {
    for _ in 0..64 {
        // a 64-bit LCG (Knuth's MMIX constants): the high bits pick the port
        *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let port = 20000 + ((*state >> 33) % 12768) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            return Some(l);
        }
    }
    None
}

/// Loopback ports of this process's live local clusters. A cluster picks
/// free ports by binding them ([`bind_below_ephemeral`], or port 0) and
/// releasing them for its tasks to bind; without this, a second cluster
/// started in the meantime (tests run in parallel, a distributed point's
/// calibration cluster beside its run) could pick the same port and its
/// task bind it first.
static HELD_PORTS: parking_lot::Mutex<std::collections::BTreeSet<u16>> = parking_lot::Mutex::new(std::collections::BTreeSet::new());

fn launch_error(task: TaskId, message: String) -> RuntimeError {
    RuntimeError::Launch { task: task.to_string(), message }
}

/// Starts `exe server` for task `id` of the spec in `file`, its stderr
/// appended to `log`.
fn spawn_task(exe: &Path, file: &Path, id: TaskId, log: &Path, link: Option<EmulatedLink>) -> Result<Child> {
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| launch_error(id, format!("opening {}: {e}", log.display())))?;
    let mut cmd = Command::new(exe);
    cmd.args(["server", "--cluster"])
        .arg(file)
        .args(["--job", id.job.name(), "--task", &id.index.to_string(), "--parent", &std::process::id().to_string()]);
    if let Some(l) = &link {
        cmd.args(["--link", &link_arg(l)]);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .map_err(|e| launch_error(id, format!("{}: {e}", exe.display())))
}

/// Binds `id`'s address, retrying for a while (a killed task's port may
/// take a moment to come free), and serves it on threads here.
fn serve_here(spec: &ClusterSpec, id: TaskId, link: Option<EmulatedLink>) -> Result<TaskServer> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let listener = loop {
        match bind_task(spec, id) {
            Ok(l) => break l,
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    TaskServer::start_with_link(spec, id, listener, link)
}

/// The most tasks of one job a local cluster starts: each is a process on
/// this host with its own port and threads (beyond that a host runs out of
/// file descriptors before the cluster is up).
pub const MAX_LOCAL_TASKS: u32 = 32;

impl LocalCluster {
    /// Writes a spec with `ps` PS and `workers` worker tasks on free
    /// loopback ports and starts every task.
    pub fn start(launcher: &Launcher, ps: u32, workers: u32) -> Result<LocalCluster> {
        LocalCluster::start_with_link(launcher, ps, workers, None)
    }

    /// [`LocalCluster::start`] with every task emulating `link` to the
    /// others (restarted tasks too).
    pub fn start_with_link(launcher: &Launcher, ps: u32, workers: u32, link: Option<EmulatedLink>) -> Result<LocalCluster> {
        for (job, n) in [(Job::Ps, ps), (Job::Worker, workers)] {
            if n == 0 || n > MAX_LOCAL_TASKS {
                return Err(RuntimeError::Launch { task: format!("{job}"), message: format!("a local cluster has 1 to {MAX_LOCAL_TASKS} {job} tasks, got {n}") });
            }
        }
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        remove_folders_of_dead_launchers(&std::env::temp_dir());
        let dir = std::env::temp_dir().join(format!("{FOLDER_PREFIX}{}-{nanos}", std::process::id()));
        let io = |what: String, e: std::io::Error| RuntimeError::Engine { message: format!("local cluster: {what}: {e}") };
        std::fs::create_dir_all(&dir).map_err(|e| io(format!("creating {}", dir.display()), e))?;
        // the ports are free now; a task that loses a race for one fails to
        // bind, and the master's error then carries that task's log
        let mut tasks = Vec::new();
        let mut listeners = Vec::new();
        let mut ports = Vec::new();
        let mut pick = u64::from(nanos) ^ (u64::from(std::process::id()) << 32);
        {
            // a port another live cluster of this process holds (released,
            // but its task may not have bound it yet) is not taken again
            let mut held = HELD_PORTS.lock();
            for (job, n) in [(Job::Ps, ps), (Job::Worker, workers)] {
                for i in 0..n {
                    let port = loop {
                        let l = bind_below_ephemeral(&mut pick).map_or_else(|| TcpListener::bind("127.0.0.1:0"), Ok).map_err(|e| io("finding a free loopback port".into(), e))?;
                        let port = l.local_addr().map_err(|e| io("finding a free loopback port".into(), e))?.port();
                        listeners.push(l);
                        if held.insert(port) {
                            break port;
                        }
                    };
                    ports.push(port);
                    tasks.push((TaskId::new(job, i), format!("127.0.0.1:{port}")));
                }
            }
        }
        drop(listeners);
        let spec = ClusterSpec::from_tasks(tasks).map_err(|message| RuntimeError::Engine { message: format!("local cluster: {message}") })?;
        // a fresh secret every run: no other process on this host drives
        // the tasks, although they listen on loopback ports anyone may reach
        let spec = spec.with_auth(Auth::create(&dir.join("secret"))?);
        let mut cluster = LocalCluster { spec, launcher: launcher.clone(), link, dir, tasks: Vec::new(), ports };
        let file = cluster.dir.join("cluster.yaml");
        std::fs::write(&file, cluster.spec.to_yaml()).map_err(|e| io(format!("writing {}", file.display()), e))?;
        let ids: Vec<TaskId> = cluster.spec.tasks().map(|(t, _)| t).collect();
        for id in ids {
            let log = cluster.dir.join(format!("{}-{}.log", id.job, id.index));
            let running = cluster.launch(id, &log)?;
            cluster.tasks.push(Task { id, running, log });
        }
        Ok(cluster)
    }

    fn launch(&self, id: TaskId, log: &Path) -> Result<Running> {
        Ok(match &self.launcher {
            Launcher::Processes(exe) => Running::Child(spawn_task(exe, &self.dir.join("cluster.yaml"), id, log, self.link)?),
            Launcher::Threads => Running::Server(Some(serve_here(&self.spec, id, self.link)?)),
        })
    }

    /// Kills task `id` (SIGKILL for a process; a thread-served task stops
    /// serving at once); false when it is not one of this cluster's
    /// running tasks.
    pub fn kill_task(&mut self, id: TaskId) -> bool {
        for t in &mut self.tasks {
            if t.id != id {
                continue;
            }
            return match &mut t.running {
                Running::Child(c) => {
                    if !matches!(c.try_wait(), Ok(None)) {
                        return false;
                    }
                    let _ = c.kill();
                    let _ = c.wait();
                    true
                }
                Running::Server(s) => s.take().is_some(),
            };
        }
        false
    }

    /// Stops task `id`'s process (SIGSTOP) without ending it: a host that
    /// hangs. Its connections stay open and nothing answers on them. False
    /// when the task is not a running process of this cluster (tasks in
    /// this process cannot be stopped apart).
    pub fn stall_task(&mut self, id: TaskId) -> bool {
        let Some(Running::Child(c)) = self.tasks.iter_mut().find(|t| t.id == id).map(|t| &mut t.running) else { return false };
        if !matches!(c.try_wait(), Ok(None)) {
            return false;
        }
        let Ok(pid) = libc::pid_t::try_from(c.id()) else { return false };
        // SAFETY: sends SIGSTOP to our own child, reaped only by us (so the
        // pid names it); SIGKILL at drop ends it stopped or not.
        unsafe { libc::kill(pid, libc::SIGSTOP) == 0 }
    }

    /// Starts task `id` again (after it died) on its address.
    pub fn restart_task(&mut self, id: TaskId) -> Result<()> {
        let i = self.tasks.iter().position(|t| t.id == id).ok_or_else(|| launch_error(id, "no such task in this local cluster".into()))?;
        if let Running::Child(c) = &mut self.tasks[i].running {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
        if let Running::Server(s) = &mut self.tasks[i].running {
            drop(s.take());
        }
        let log = self.tasks[i].log.clone();
        self.tasks[i].running = self.launch(id, &log)?;
        Ok(())
    }

    /// CPU time (user and system, every thread, those that have exited
    /// too) each task process has used so far, seconds, to the nanosecond
    /// (the kernel's clock of the process, [`process_clock_s`]): how a run's
    /// CPU divides between the tasks, over windows as short as a
    /// calibration's batches. Tasks on threads of this process, and hosts
    /// without per-process clocks, have none.
    pub fn task_cpu_s(&self) -> Vec<(TaskId, Option<f64>)> {
        self.cpu_by(process_clock_s)
    }

    fn cpu_by(&self, clock: fn(u32) -> Option<f64>) -> Vec<(TaskId, Option<f64>)> {
        self.tasks
            .iter()
            .map(|t| {
                let cpu = match &t.running {
                    Running::Child(c) => clock(c.id()),
                    Running::Server(_) => None,
                };
                (t.id, cpu)
            })
            .collect()
    }

    /// Tasks that have exited, each with its status and the end of its log.
    pub fn exited(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for t in &mut self.tasks {
            if let Running::Child(c) = &mut t.running
                && let Ok(Some(status)) = c.try_wait()
            {
                let log = std::fs::read_to_string(&t.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect();
                out.push(format!("task {} exited ({status}): {}", t.id, tail.join(" | ")));
            }
        }
        out
    }
}

/// CPU time of process `pid`, every thread of it (those that have exited
/// too), seconds: the kernel's CPU clock of the process
/// (`clock_getcpuclockid`), exact where `/proc/<pid>/stat` counts 10 ms
/// ticks.
fn process_clock_s(pid: u32) -> Option<f64> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: writes one clock id through a valid pointer; a pid that has
    // gone gives an error code, not undefined behaviour.
    let found = unsafe { libc::clock_getcpuclockid(pid, &mut clock) } == 0;
    if found { crate::bench::clock_s(clock) } else { None }
}

/// The temporary folders of local clusters: `<prefix><launcher pid>-<nanos>`.
const FOLDER_PREFIX: &str = "flowlab-cluster-";

/// Removes the folders that launchers killed before their clean-up (kill -9)
/// left in `temp`: those whose launcher process is gone. A folder of a live
/// process, or one whose name is not a launcher's, stays.
fn remove_folders_of_dead_launchers(temp: &Path) {
    let Ok(entries) = std::fs::read_dir(temp) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(FOLDER_PREFIX)).and_then(|rest| rest.split_once('-')).and_then(|(pid, _)| pid.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !process_alive(pid) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Whether a process with this id exists (signal 0 checks without sending;
/// EPERM means it exists under another user).
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 sends nothing; the call only reports whether the
    // process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for t in &mut self.tasks {
            match &mut t.running {
                Running::Child(c) => {
                    let _ = c.kill();
                }
                Running::Server(s) => drop(s.take()),
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for t in &mut self.tasks {
            // SIGKILL ends a task at once; the wait only reaps it, bounded
            if let Running::Child(c) = &mut t.running {
                while Instant::now() < deadline {
                    match c.try_wait() {
                        Ok(Some(_)) | Err(_) => break,
                        Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        let mut held = HELD_PORTS.lock();
        for p in &self.ports {
            held.remove(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_of_dead_launchers_go_and_live_ones_stay() {
        let temp = tempfile::tempdir().unwrap();
        // a child that has exited and been reaped: its pid names no process
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let names = [format!("{FOLDER_PREFIX}{dead}-1"), format!("{FOLDER_PREFIX}{}-2", std::process::id()), format!("{FOLDER_PREFIX}x-3"), "other-1".into()];
        for n in &names {
            std::fs::create_dir(temp.path().join(n)).unwrap();
        }
        remove_folders_of_dead_launchers(temp.path());
        let left: Vec<bool> = names.iter().map(|n| temp.path().join(n).exists()).collect();
        assert_eq!(left, [false, true, true, true]);
    }

    #[test]
    fn thread_tasks_stop_restart_and_a_missing_binary_is_named() {
        let mut c = LocalCluster::start(&Launcher::Threads, 1, 1).unwrap();
        let ps = TaskId::new(Job::Ps, 0);
        let first = crate::worker::TaskClient::connect(&c.spec, ps, Duration::from_secs(5)).unwrap().incarnation;
        assert!(c.kill_task(ps));
        assert!(!c.kill_task(ps), "already stopped");
        c.restart_task(ps).unwrap();
        let again = crate::worker::TaskClient::connect(&c.spec, ps, Duration::from_secs(5)).unwrap().incarnation;
        assert_ne!(first, again);
        let e = LocalCluster::start(&Launcher::Processes("/nonexistent/flowlab".into()), 1, 1).err().unwrap().to_string();
        assert!(e.starts_with("cannot start task ps:0: /nonexistent/flowlab"), "{e}");
        // tasks on threads have no process clock of their own
        assert!(c.task_cpu_s().iter().all(|(_, cpu)| cpu.is_none()));
        // a cluster this host cannot hold is refused before a port is taken
        for (ps, workers, want) in [(1, 100_000, "cannot start task worker: a local cluster has 1 to 32 worker tasks, got 100000"), (0, 1, "cannot start task ps: a local cluster has 1 to 32 ps tasks, got 0")] {
            let e = LocalCluster::start(&Launcher::Threads, ps, workers).err().map(|e| e.to_string());
            assert_eq!(e.as_deref(), Some(want));
        }
    }

    /// utime + stime of process `pid`, seconds (fields 14 and 15 of
    /// `/proc/<pid>/stat`, after the parenthesized command name): the
    /// kernel's other account of a process's CPU, in clock ticks.
    fn proc_stat_cpu_s(pid: u32) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 1..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // rest starts at field 3 (state): utime is field 14, stime 15
        let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        // SAFETY: sysconf reads a configuration value and has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (hz > 0).then(|| ticks as f64 / hz as f64)
    }

    /// The process clock of a spinning child process against the clock
    /// ticks of `/proc/<pid>/stat`, after 0.3 s; and a thread of this
    /// process that spins and exits stays counted in its process clock.
    #[test]
    fn the_process_clock_agrees_with_proc_stat_ticks() {
        let mut child = Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let (exact, ticks) = (process_clock_s(child.id()), proc_stat_cpu_s(child.id()));
        let _ = child.kill();
        let _ = child.wait();
        let (exact, ticks) = (exact.unwrap(), ticks.unwrap());
        // it ran (a loaded host may give it less than the wall time), and
        // the two accounts differ by at most two 10 ms ticks and the moment
        // between the two readings
        assert!(exact > 0.02, "process clock {exact} s");
        assert!((exact - ticks).abs() < 0.025, "process clock {exact} s, /proc/<pid>/stat {ticks} s");
        // gone: no clock
        assert_eq!(process_clock_s(child.id()), None);

        let me = std::process::id();
        let before = process_clock_s(me).unwrap();
        let thread_cpu_s = || crate::bench::clock_s(libc::CLOCK_THREAD_CPUTIME_ID).unwrap();
        let spun = std::thread::spawn(move || {
            let t = thread_cpu_s();
            let mut x = 0u64;
            while thread_cpu_s() - t < 0.1 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        });
        spun.join().unwrap();
        // the exited thread's 0.1 s is still counted
        assert!(process_clock_s(me).unwrap() - before >= 0.1);
    }
}
