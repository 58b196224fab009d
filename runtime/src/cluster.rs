//! The cluster spec: which task of which job listens where.
//!
//! Contract: a spec that loads is valid: every task has a `host:port` address
//! with a non-zero port, no task is named twice, no two tasks share an
//! address, there is at most one chief and at least one task. The file is
//! YAML, one key per job, each a list (task `i` is the `i`-th entry) or a map
//! from task index to address (TensorFlow's sparse `ClusterSpec` form):
//!
//! ```yaml
//! chief: [localhost:2220]
//! ps: [localhost:2221]
//! worker:
//!   0: localhost:2222
//!   1: localhost:2223
//! auth:
//!   secret_file: cluster.secret   # relative to this file
//! ```
//!
//! `auth` is optional; with it every RPC carries the secret's token (see
//! `auth.rs`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::auth::Auth;
use crate::error::{Result, RuntimeError};

/// The jobs a cluster has, in TensorFlow's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Job {
    /// The worker that also saves checkpoints and initializes variables.
    Chief,
    /// Parameter-server tasks: hold the variables, apply gradients.
    Ps,
    /// Tasks that compute gradients.
    Worker,
}

impl Job {
    pub const ALL: [Job; 3] = [Job::Chief, Job::Ps, Job::Worker];

    pub fn name(self) -> &'static str {
        match self {
            Job::Chief => "chief",
            Job::Ps => "ps",
            Job::Worker => "worker",
        }
    }

    /// The job of this name, or `None`.
    pub fn parse(name: &str) -> Option<Job> {
        Job::ALL.into_iter().find(|j| j.name() == name)
    }
}

impl fmt::Display for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One task: a job and its index, written `worker:1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId {
    pub job: Job,
    pub index: u32,
}

impl TaskId {
    pub fn new(job: Job, index: u32) -> TaskId {
        TaskId { job, index }
    }
}

impl TaskId {
    /// The task's one device: `/job:<job>/replica:0/task:<index>/device:CPU:0`.
    pub fn device(self) -> flowlab_engine::DeviceName {
        flowlab_engine::DeviceName::full(self.job.name(), 0, self.index, "CPU", 0)
    }

    /// The task a device belongs to (`None` when its job is not a cluster
    /// job or it names no task).
    pub fn of_device(d: &flowlab_engine::DeviceName) -> Option<TaskId> {
        Some(TaskId::new(Job::parse(d.job.as_deref()?)?, d.task?))
    }

    /// Parses `worker:1`.
    pub fn parse(s: &str) -> Option<TaskId> {
        let (job, index) = s.split_once(':')?;
        Some(TaskId::new(Job::parse(job)?, index.parse().ok()?))
    }
}

/// Parses `worker:2@200`: a task and the update after which it is stopped
/// (`flowlab train --kill` and the distributed kind's `kill`). The error
/// says what is wrong; the caller names the flag or key.
pub fn parse_kill(s: &str) -> std::result::Result<(TaskId, usize), String> {
    let (task, step) = s.split_once('@').ok_or("expected TASK@STEP, e.g. worker:2@200")?;
    let id = TaskId::parse(task).ok_or_else(|| format!("`{task}` is not a task like worker:2"))?;
    let step: usize = step.parse().map_err(|_| format!("`{step}` is not an update number"))?;
    // updates count from 1: at 0 the task would never be stopped
    if step == 0 {
        return Err("updates count from 1: a task stopped at update 0 would never be stopped".into());
    }
    Ok((id, step))
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.job, self.index)
    }
}

/// A validated cluster spec (see the module comment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSpec {
    tasks: BTreeMap<TaskId, String>,
    auth: Option<Auth>,
    /// The largest gRPC message a task reads, in MiB.
    max_message_mb: u32,
}

/// The default message limit: a request larger than this is refused from
/// its header, before it is read. The runtime's largest tensor today is a
/// 3136 x 1024 weight matrix (12.8 MB); raise `max_message_mb` for more.
pub const DEFAULT_MAX_MESSAGE_MB: u32 = 64;

/// The tasks of one job as written: (index, address) in file order, with
/// repeated indices kept so validation can name them.
#[derive(Debug, Default)]
struct RawTasks(Vec<(u32, String)>);

impl<'de> Deserialize<'de> for RawTasks {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawTasks;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of host:port addresses, or a map from task index to host:port")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<RawTasks, A::Error> {
                let mut v = Vec::new();
                while let Some(addr) = seq.next_element::<String>()? {
                    v.push((v.len() as u32, addr));
                }
                Ok(RawTasks(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<RawTasks, A::Error> {
                let mut v = Vec::new();
                while let Some((k, addr)) = map.next_entry::<u32, String>()? {
                    v.push((k, addr));
                }
                Ok(RawTasks(v))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    #[serde(default)]
    chief: RawTasks,
    #[serde(default)]
    ps: RawTasks,
    #[serde(default)]
    worker: RawTasks,
    #[serde(default)]
    auth: Option<RawAuth>,
    #[serde(default)]
    max_message_mb: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    secret_file: PathBuf,
}

/// Why `address` is not `host:port` with a port in 1..=65535, or `None`.
fn address_problem(address: &str) -> Option<&'static str> {
    let Some((host, port)) = address.rsplit_once(':') else {
        return Some("expected host:port");
    };
    if host.is_empty() || host == "[]" {
        return Some("the host is empty");
    }
    match port.parse::<u16>() {
        Ok(0) => Some("port 0 cannot be reached by the other tasks: name a port"),
        Ok(_) => None,
        Err(_) => Some("the port is not a number in 1..=65535"),
    }
}

impl ClusterSpec {
    /// Reads and validates a cluster spec file; errors name the file (and,
    /// for YAML errors, line and column; for others, the task and address).
    pub fn from_file(path: impl AsRef<Path>) -> Result<ClusterSpec> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| RuntimeError::Io { path: path.into(), source })?;
        ClusterSpec::from_yaml(&text, path)
    }

    /// Parses and validates spec text; `path` only labels the errors.
    pub fn from_yaml(text: &str, path: impl AsRef<Path>) -> Result<ClusterSpec> {
        let path: PathBuf = path.as_ref().into();
        let raw: RawSpec =
            serde_saphyr::from_str(text).map_err(|e| RuntimeError::Yaml { path: path.clone(), message: e.to_string() })?;
        let spec_err = |message: String| RuntimeError::Spec { path: path.clone(), message };
        let mut tasks = BTreeMap::new();
        let RawSpec { chief, ps, worker, auth, max_message_mb } = raw;
        for (job, raw) in [(Job::Chief, chief), (Job::Ps, ps), (Job::Worker, worker)] {
            for (index, address) in raw.0 {
                let task = TaskId::new(job, index);
                if let Some(why) = address_problem(&address) {
                    return Err(spec_err(format!("task {task}: bad address `{address}`: {why}")));
                }
                if tasks.insert(task, address).is_some() {
                    return Err(spec_err(format!("task {task} is named twice")));
                }
            }
        }
        let mut spec = ClusterSpec::check(tasks).map_err(spec_err)?;
        if let Some(mb) = max_message_mb {
            if !(1..=4095).contains(&mb) {
                return Err(spec_err(format!("max_message_mb: {mb} is not in 1..=4095 (a gRPC message is under 4 GiB)")));
            }
            spec.max_message_mb = mb;
        }
        let Some(auth) = auth else { return Ok(spec) };
        // absolute, so that a spec written elsewhere (to_yaml) still finds it
        let secret = path.parent().unwrap_or(Path::new("")).join(&auth.secret_file);
        let secret = std::path::absolute(&secret).unwrap_or(secret);
        Ok(spec.with_auth(Auth::from_file(&secret)?))
    }

    /// The spec with every RPC authenticated by `auth`.
    pub fn with_auth(mut self, auth: Auth) -> ClusterSpec {
        self.auth = Some(auth);
        self
    }

    /// The largest gRPC message a task reads, in bytes.
    pub fn max_message_bytes(&self) -> usize {
        self.max_message_mb as usize * (1 << 20)
    }

    /// The cluster's secret, if it has one.
    pub fn auth(&self) -> Option<&Auth> {
        self.auth.as_ref()
    }

    /// A spec from (task, address) pairs, validated like a file.
    pub fn from_tasks(tasks: impl IntoIterator<Item = (TaskId, String)>) -> std::result::Result<ClusterSpec, String> {
        let mut map = BTreeMap::new();
        for (task, address) in tasks {
            if let Some(why) = address_problem(&address) {
                return Err(format!("task {task}: bad address `{address}`: {why}"));
            }
            if map.insert(task, address).is_some() {
                return Err(format!("task {task} is named twice"));
            }
        }
        ClusterSpec::check(map)
    }

    fn check(tasks: BTreeMap<TaskId, String>) -> std::result::Result<ClusterSpec, String> {
        if tasks.is_empty() {
            return Err("the cluster has no tasks (give at least one of chief, ps, worker)".into());
        }
        let chiefs = tasks.keys().filter(|t| t.job == Job::Chief).count();
        if chiefs > 1 {
            return Err(format!("{chiefs} chief tasks: a cluster has at most one"));
        }
        let mut by_address: BTreeMap<&str, TaskId> = BTreeMap::new();
        for (task, address) in &tasks {
            if let Some(other) = by_address.insert(address.as_str(), *task) {
                return Err(format!("tasks {other} and {task} both use address {address}"));
            }
        }
        Ok(ClusterSpec { tasks, auth: None, max_message_mb: DEFAULT_MAX_MESSAGE_MB })
    }

    /// A fingerprint of the tasks and their addresses (FNV-1a), carried by
    /// every message so that a task refuses messages of another cluster.
    pub fn fingerprint(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (t, a) in &self.tasks {
            for b in format!("{t}={a}\n").bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        h
    }

    /// The spec as YAML that [`ClusterSpec::from_yaml`] reads back (map form).
    pub fn to_yaml(&self) -> String {
        let mut out = String::new();
        for job in Job::ALL {
            let tasks: Vec<_> = self.job_tasks(job).collect();
            if tasks.is_empty() {
                continue;
            }
            out.push_str(&format!("{job}:\n"));
            for (t, a) in tasks {
                out.push_str(&format!("  {}: \"{a}\"\n", t.index));
            }
        }
        if self.max_message_mb != DEFAULT_MAX_MESSAGE_MB {
            out.push_str(&format!("max_message_mb: {}\n", self.max_message_mb));
        }
        if let Some(a) = &self.auth {
            out.push_str(&format!("auth:\n  secret_file: {:?}\n", a.secret_file()));
        }
        out
    }

    /// The address of `task`, or an error listing the tasks there are.
    pub fn address(&self, task: TaskId) -> Result<&str> {
        self.tasks.get(&task).map(String::as_str).ok_or_else(|| RuntimeError::NoSuchTask {
            task: task.to_string(),
            known: self.tasks.keys().map(|t| t.to_string()).collect::<Vec<_>>().join(", "),
        })
    }

    /// Every task with its address, chief first, then ps, then worker, by index.
    pub fn tasks(&self) -> impl Iterator<Item = (TaskId, &str)> {
        self.tasks.iter().map(|(t, a)| (*t, a.as_str()))
    }

    /// The tasks of one job, by index.
    pub fn job_tasks(&self, job: Job) -> impl Iterator<Item = (TaskId, &str)> {
        self.tasks().filter(move |(t, _)| t.job == job)
    }

    /// `ps` PS tasks and `workers` workers on free loopback ports, for tasks
    /// served on threads of this process ([`crate::TaskServer::start_all`]:
    /// benches, tests). Every port is picked while the others are still
    /// bound: ports picked one by one (bind, read, close) can come back
    /// twice. A launched cluster picks its own ([`crate::LocalCluster`]).
    pub fn loopback(ps: u32, workers: u32) -> crate::Result<ClusterSpec> {
        let ids: Vec<TaskId> = (0..ps).map(|i| TaskId::new(Job::Ps, i)).chain((0..workers).map(|i| TaskId::new(Job::Worker, i))).collect();
        let mut tasks = Vec::with_capacity(ids.len());
        let mut held = Vec::with_capacity(ids.len());
        for t in ids {
            let bind = |source| crate::RuntimeError::Bind { task: t.to_string(), address: "127.0.0.1:0".into(), source };
            let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(bind)?;
            let port = l.local_addr().map_err(bind)?.port();
            tasks.push((t, format!("127.0.0.1:{port}")));
            held.push(l);
        }
        drop(held);
        ClusterSpec::from_tasks(tasks).map_err(|message| crate::RuntimeError::Engine { message })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<ClusterSpec> {
        ClusterSpec::from_yaml(text, "c.yaml")
    }

    #[test]
    fn list_and_map_forms_give_the_same_tasks() {
        let a = load("ps: [localhost:2221]\nworker: [localhost:2222, localhost:2223]\n").unwrap();
        let b = load("ps:\n  0: localhost:2221\nworker:\n  1: localhost:2223\n  0: localhost:2222\n").unwrap();
        assert_eq!(a, b);
        let workers: Vec<_> = a.job_tasks(Job::Worker).map(|(t, ad)| (t.to_string(), ad.to_string())).collect();
        assert_eq!(workers, [("worker:0".into(), "localhost:2222".into()), ("worker:1".into(), "localhost:2223".into())]);
        assert_eq!(a.address(TaskId::new(Job::Ps, 0)).unwrap(), "localhost:2221");
    }

    #[test]
    fn a_task_named_twice_is_refused_naming_it() {
        // a YAML map with a repeated key: refused with its line, never one
        // address kept silently
        let e = load("worker:\n  0: localhost:1\n  1: localhost:2\n  1: localhost:3\n").unwrap_err().to_string();
        assert!(e.contains("duplicate") && e.contains("line 4") && e.contains("c.yaml"), "{e}");
        // a spec built in code (the launcher's) with a repeated task
        let ps0 = TaskId::new(Job::Ps, 0);
        let e = ClusterSpec::from_tasks([(ps0, "h:1".to_string()), (ps0, "h:2".to_string())]).unwrap_err();
        assert!(e.contains("ps:0 is named twice"), "{e}");
    }

    #[test]
    fn two_tasks_on_one_address_are_refused_naming_both() {
        let e = load("ps: [h:5]\nworker: [h:6, h:5]\n").unwrap_err().to_string();
        assert!(e.contains("ps:0") && e.contains("worker:1") && e.contains("h:5"), "{e}");
    }

    #[test]
    fn bad_addresses_name_task_and_address() {
        for (addr, why) in [("localhost", "host:port"), (":80", "host is empty"), ("h:0", "port 0"), ("h:70000", "1..=65535")] {
            let e = load(&format!("worker: [ok:1, \"{addr}\"]\n")).unwrap_err().to_string();
            assert!(e.contains("worker:1") && e.contains(addr) && e.contains(why), "{addr}: {e}");
        }
    }

    #[test]
    fn unknown_job_is_refused_with_its_line() {
        let e = load("ps: [h:1]\nworkers: [h:2]\n").unwrap_err().to_string();
        assert!(e.contains("workers") && e.contains("line 2"), "{e}");
    }

    #[test]
    fn empty_spec_and_two_chiefs_are_refused() {
        assert!(load("{}\n").unwrap_err().to_string().contains("no tasks"));
        assert!(load("chief: [h:1, h:2]\n").unwrap_err().to_string().contains("at most one"));
    }

    #[test]
    fn yaml_round_trips_and_the_fingerprint_tells_clusters_apart() {
        let a = load("ps: [h:1]\nworker: [h:2, h:3]\n").unwrap();
        let back = load(&a.to_yaml()).unwrap();
        assert_eq!(back, a);
        assert_eq!(back.fingerprint(), a.fingerprint());
        let b = load("ps: [h:1]\nworker: [h:2, h:4]\n").unwrap();
        assert_ne!(a.fingerprint(), b.fingerprint());
        let w1 = TaskId::parse("worker:1").unwrap();
        assert_eq!(w1.device().to_string(), "/job:worker/replica:0/task:1/device:CPU:0");
        assert_eq!(TaskId::of_device(&w1.device()), Some(w1));
        assert_eq!(TaskId::parse("workers:1"), None);
    }

    #[test]
    fn kills_parse_and_bad_ones_say_what_is_wrong() {
        assert_eq!(parse_kill("worker:2@200"), Ok((TaskId::new(Job::Worker, 2), 200)));
        assert_eq!(parse_kill("ps:0@1"), Ok((TaskId::new(Job::Ps, 0), 1)));
        for (bad, want) in [
            ("worker:2", "expected TASK@STEP, e.g. worker:2@200"),
            ("gpu:1@3", "`gpu:1` is not a task like worker:2"),
            ("ps:0@x", "`x` is not an update number"),
            ("ps:0@-1", "`-1` is not an update number"),
            ("ps:0@0", "updates count from 1: a task stopped at update 0 would never be stopped"),
        ] {
            assert_eq!(parse_kill(bad), Err(want.to_string()), "{bad}");
        }
    }

    #[test]
    fn unknown_task_lists_the_known_ones() {
        let s = load("ps: [h:1]\nworker: [h:2]\n").unwrap();
        let e = s.address(TaskId::new(Job::Worker, 3)).unwrap_err().to_string();
        assert!(e.contains("worker:3") && e.contains("ps:0, worker:0"), "{e}");
    }
}
