//! The master: takes a client's graph, places and partitions it over the
//! tasks' devices, registers each partition with its task, and runs steps.
//!
//! Contract. [`Master::connect`] reaches every task of the cluster (retrying
//! until a deadline; the error names the task and address) and learns each
//! one's incarnation. [`Master::register`] places the graph with the
//! engine's [`DefaultPlacer`] over one CPU device per task (device requests
//! such as `/job:ps/task:0` are honoured, colocation too), cuts it with the
//! engine's own partitioner (Send/Recv pairs keyed per transfer) and
//! registers one partition per task. [`Master::run`] takes the same
//! arguments as `Session::run` on the client's graph: for each new
//! signature it works out, once, which nodes the step runs (the engine's
//! `step_nodes`), which tasks take part, which feeds, fetches and targets
//! each gets, and which Send nodes must run (those whose Recv is part of the
//! step); then every step gets a fresh step id (a master's ids start after
//! the highest any task has run, so a second master on the same tasks
//! never meets the keys the first one's steps left) and one `RunGraph` per taking
//! part task, all at once. When a task fails, the master aborts the step on
//! the others (`AbortStep`: their Recvs end at once instead of at their
//! timeout), collects their answers and returns the first error, naming
//! the failed task (a task that had done its part drops the tensors it
//! sent for the step at once); the keys a step left are forgotten on the
//! next call to each task after the step ended. `run` may be called from several
//! threads at once (asynchronous workers): each call is its own step.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowlab_engine::{DefaultPlacer, DeviceName, DeviceSet, EmulatedLink, Graph, NodeId, Output, PartitionOptions, Placement, Placer, Tensor};

use crate::cluster::{ClusterSpec, TaskId};
use crate::error::{Result, RuntimeError};
use crate::pb::{AbortStepRequest, NamedTensor, PeerTask, RegisterGraphRequest, RunGraphRequest};
use crate::wire;
use crate::worker::{TaskClient, millis};

/// The longest delay a master may ask a task to wait before a step.
pub const MAX_INJECTED_DELAY: Duration = Duration::from_secs(600);

/// Master settings.
#[derive(Clone, Debug)]
pub struct MasterOptions {
    /// How long to keep trying to reach the tasks.
    pub connect_deadline: Duration,
    /// How long a Recv waits for its tensor (also bounds a step's RPCs).
    pub recv_timeout: Duration,
    /// Formats of the cross-task transfers.
    pub partition: PartitionOptions,
    /// The emulated link every task must delay its tensors by (each task's
    /// own setting, `flowlab server --link`): a task that emulates another
    /// one, or none, is refused at connect, naming it.
    pub link: Option<EmulatedLink>,
}

impl Default for MasterOptions {
    fn default() -> Self {
        MasterOptions {
            connect_deadline: Duration::from_secs(30),
            recv_timeout: Duration::from_secs(60),
            partition: PartitionOptions::default(),
            link: None,
        }
    }
}

/// What one task does in one step signature.
#[derive(Default)]
struct TaskStep {
    /// (index into the run's feeds, "node:output")
    feeds: Vec<(usize, String)>,
    fetches: Vec<String>,
    targets: Vec<String>,
}

/// One run signature, worked out once.
struct StepPlan {
    /// Per task that takes part (index into `Master::tasks`).
    tasks: Vec<(usize, TaskStep)>,
    /// Per fetch: (position in `tasks`, position in that task's fetches).
    fetch_src: Vec<(usize, usize)>,
}

type Signature = (Vec<(NodeId, usize)>, Vec<(NodeId, usize)>, Vec<NodeId>);

/// A registered partition.
struct Part {
    handle: String,
    /// (edge "node:output", destination device) -> Send node name.
    sends: HashMap<(String, DeviceName), String>,
}

/// `--link` as a flag's value: `1gbps,100us`.
pub fn link_arg(l: &EmulatedLink) -> String {
    format!("{}gbps,{}us", l.gbps, l.latency_us)
}

/// Refuses a task whose emulated link is not `want`.
fn check_link(client: &TaskClient, want: Option<EmulatedLink>) -> Result<()> {
    if client.link == want {
        return Ok(());
    }
    let name = |l: Option<EmulatedLink>| l.map_or("no link".to_string(), |l| format!("link {}", link_arg(&l)));
    Err(client.rpc_error(format!(
        "the task emulates {} but this run expects {}: start it with `flowlab server ... {}`",
        name(client.link),
        name(want),
        want.map_or("(without --link)".to_string(), |l| format!("--link {}", link_arg(&l)))
    )))
}

/// Drives a graph over the tasks of a cluster (see the module comment).
pub struct Master {
    spec: ClusterSpec,
    tasks: Vec<Arc<TaskClient>>,
    runtime: Arc<tokio::runtime::Runtime>,
    opts: MasterOptions,
    graph: Option<Graph>,
    placement: Option<Placement>,
    /// Per task, its partition (None: no node placed there).
    parts: Vec<Option<Part>>,
    cache: Mutex<HashMap<Signature, Arc<StepPlan>>>,
    next_step: AtomicU64,
    /// Per task, steps finished whose keys it may forget.
    finished: Mutex<Vec<Vec<u64>>>,
    /// Data bytes of the tensors fed to and fetched from the tasks.
    fed_fetched: AtomicU64,
    /// The steps' timelines, while recording ([`Master::start_timeline`]).
    timeline: crate::timeline::Recorder,
}

/// Traffic counters of a cluster (see [`Master::traffic`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Tensors moved between tasks (`RecvTensor` answers).
    pub transfers: u64,
    /// Their data bytes, in the communication format they travelled in.
    pub bytes: u64,
    /// Data bytes of the feeds and fetches between the master and the tasks.
    pub master_bytes: u64,
}

impl Master {
    /// Reaches every task of `spec` (see the module comment).
    pub fn connect(spec: &ClusterSpec, opts: MasterOptions) -> Result<Master> {
        // one thread runs every step's calls (tasks on it; each step's
        // caller waits on its own thread for them): with two, the second
        // mostly woke for single answers (the master's CPU per update of
        // the 784 MLP at 2 workers 405-442 us with two, 355-383 with one)
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("flowlab-master")
            .enable_all()
            .build()
            .map_err(|e| RuntimeError::Engine { message: format!("master runtime: {e}") })?;
        let runtime = Arc::new(runtime);
        let start = Instant::now();
        let mut tasks = Vec::new();
        for (task, _) in spec.tasks() {
            let left = opts.connect_deadline.saturating_sub(start.elapsed()).max(Duration::from_millis(50));
            let client = TaskClient::connect_on(spec, task, left, Arc::clone(&runtime))?;
            check_link(&client, opts.link)?;
            tasks.push(Arc::new(client));
        }
        let n = tasks.len();
        // after every step an earlier master ran on these tasks
        let last = tasks.iter().map(|t| (t.last_step, t.task)).max();
        let first_step = match last {
            Some((s, task)) if s >= crate::worker::MAX_STEP_ID => {
                return Err(RuntimeError::Rpc { task: task.to_string(), address: spec.address(task)?.to_string(), message: format!("it has run step id {s}, beyond the {} a task accepts: restart it", crate::worker::MAX_STEP_ID) });
            }
            Some((s, _)) => s + 1,
            None => 1,
        };
        Ok(Master {
            spec: spec.clone(),
            tasks,
            runtime,
            opts,
            graph: None,
            placement: None,
            parts: (0..n).map(|_| None).collect(),
            cache: Mutex::new(HashMap::new()),
            next_step: AtomicU64::new(first_step),
            finished: Mutex::new(vec![Vec::new(); n]),
            fed_fetched: AtomicU64::new(0),
            timeline: Default::default(),
        })
    }

    /// Records the timeline of every step that starts from now on: each
    /// task traces its partition and answers with it (TensorFlow's
    /// `record_timeline`). Costs a little time per node while on.
    pub fn start_timeline(&self) {
        self.timeline.start();
    }

    /// Stops recording and returns every task's partition of every
    /// recorded step (`None` if not recording), to be laid on one time
    /// axis by [`flowlab_engine::StepStats::merge_partitions`] (every
    /// transfer between tasks from its send's start to its arrival).
    pub fn stop_timeline(&self) -> Option<Vec<flowlab_engine::PartitionTimeline>> {
        self.timeline.stop()
    }

    /// The longest a step's call to one task may take before it fails: a
    /// Recv's wait and a margin for the answer.
    pub fn rpc_limit(&self) -> Duration {
        self.opts.recv_timeout + Duration::from_secs(10)
    }

    /// How long a Recv of a step waits.
    pub fn recv_timeout(&self) -> Duration {
        self.opts.recv_timeout
    }

    /// Reaches `task` again after it restarted (a new incarnation); the
    /// graph must then be registered again ([`Master::register`]) so that
    /// every task knows the new incarnation.
    pub fn reconnect(&mut self, task: TaskId) -> Result<()> {
        let i = self.tasks.iter().position(|t| t.task == task).ok_or_else(|| RuntimeError::NoSuchTask {
            task: task.to_string(),
            known: self.tasks.iter().map(|t| t.task.to_string()).collect::<Vec<_>>().join(", "),
        })?;
        let client = TaskClient::connect_on(&self.spec, task, self.opts.connect_deadline, Arc::clone(&self.runtime))?;
        check_link(&client, self.opts.link)?;
        self.tasks[i] = Arc::new(client);
        self.parts.iter_mut().for_each(|p| *p = None);
        self.cache.lock().clear();
        Ok(())
    }

    /// The counters so far: tensors between tasks (summed over the tasks'
    /// own counts, which restart with a restarted task; a task that does
    /// not answer, e.g. a dead backup worker, counts nothing) and the
    /// master's feeds and fetches.
    pub fn traffic(&self) -> Traffic {
        let mut t = Traffic { master_bytes: self.fed_fetched.load(Ordering::Relaxed), ..Default::default() };
        for c in &self.tasks {
            if let Ok((n, b)) = c.traffic() {
                t.transfers += n;
                t.bytes += b;
            }
        }
        t
    }

    /// The task whose device runs `o`'s node in the registered graph.
    pub fn task_of(&self, o: &Output) -> Option<TaskId> {
        let dev = self.placement.as_ref()?.device(o.node_id())?;
        self.tasks.iter().find(|t| t.device == *dev).map(|t| t.task)
    }

    /// Whether `task` answers a status call within 2 s in the incarnation
    /// this master knows: not dead, not restarted, not stalled.
    pub fn answers(&self, task: TaskId) -> bool {
        self.tasks.iter().find(|t| t.task == task).is_some_and(|c| c.traffic().is_ok())
    }

    /// The tasks, in spec order, with their incarnations.
    pub fn tasks(&self) -> impl Iterator<Item = (TaskId, u64)> + '_ {
        self.tasks.iter().map(|t| (t.task, t.incarnation))
    }

    /// Places, partitions and registers `graph` (see the module comment).
    pub fn register(&mut self, graph: &Graph) -> Result<()> {
        let mut devices = DeviceSet::new();
        for t in &self.tasks {
            devices.add(&t.device.to_string())?;
        }
        let placement = DefaultPlacer.place(graph, &devices)?;
        let parts = flowlab_engine::partition_with(graph, &placement, &self.opts.partition)?;
        let peers: Vec<PeerTask> = self.tasks.iter().map(|t| PeerTask { task: t.task.to_string(), incarnation: t.incarnation }).collect();
        for p in parts {
            let i = self.tasks.iter().position(|t| t.device == p.device).ok_or_else(|| RuntimeError::Engine {
                message: format!("the partitioner made a partition for {}, which is no task's device", p.device),
            })?;
            let t = &self.tasks[i];
            let req = RegisterGraphRequest {
                to: t.to(),
                graph_json: p.graph.to_json(),
                recv_timeout_ms: millis(self.opts.recv_timeout),
                peers: peers.clone(),
            };
            let mut c = t.raw();
            let limit = self.opts.recv_timeout;
            let r = t
                .block_on(async move { tokio::time::timeout(limit, c.register_graph(req)).await })
                .map_err(|_| t.rpc_error(format!("RegisterGraph: no answer in {limit:?}")))?
                .map_err(|s| t.rpc_error(format!("RegisterGraph: {}", s.message())))?;
            let sends = p.sends.iter().map(|s| ((s.key.edge.clone(), s.key.dst_device.clone()), s.send_node.clone())).collect();
            self.parts[i] = Some(Part { handle: r.into_inner().handle, sends });
        }
        self.graph = Some(graph.clone());
        self.placement = Some(placement);
        self.cache.lock().clear();
        Ok(())
    }

    fn plan(&self, key: Signature) -> Result<Arc<StepPlan>> {
        if let Some(p) = self.cache.lock().get(&key) {
            return Ok(Arc::clone(p));
        }
        let (Some(graph), Some(placement)) = (&self.graph, &self.placement) else {
            return Err(RuntimeError::Engine { message: "Master::run before Master::register".into() });
        };
        let mask = flowlab_engine::step_nodes(graph, &key.0, &key.1, &key.2)?;
        let nodes = graph.nodes();
        let dev = placement.devices();
        let task_of = |n: NodeId| -> Result<usize> {
            self.tasks.iter().position(|t| t.device == dev[n]).ok_or_else(|| RuntimeError::Engine {
                message: format!("node '{}' is placed on {}, which is no task's device", nodes[n].name, dev[n]),
            })
        };
        let mut steps: Vec<Option<TaskStep>> = (0..self.tasks.len()).map(|_| None).collect();
        let mut sends: BTreeSet<(usize, String)> = BTreeSet::new();
        for (n, node) in nodes.iter().enumerate() {
            if !mask.get(n).copied().unwrap_or(false) {
                continue;
            }
            let t = task_of(n)?;
            steps[t].get_or_insert_with(TaskStep::default);
            let edges = node.inputs.iter().map(|&(s, i)| (s, i.to_string())).chain(node.control_inputs.iter().map(|&c| (c, "control".to_string())));
            for (s, out) in edges {
                if dev[s] == dev[n] {
                    continue;
                }
                let st = task_of(s)?;
                let edge = format!("{}:{out}", nodes[s].name);
                let send = self.parts[st].as_ref().and_then(|p| p.sends.get(&(edge.clone(), dev[n].clone()))).ok_or_else(|| {
                    RuntimeError::Engine { message: format!("no Send for '{edge}' to {} in the partition of task {}", dev[n], self.tasks[st].task) }
                })?;
                sends.insert((st, send.clone()));
            }
        }
        for (st, send) in sends {
            steps[st].get_or_insert_with(TaskStep::default).targets.push(send);
        }
        for (i, &(n, idx)) in key.0.iter().enumerate() {
            let t = task_of(n)?;
            steps[t].get_or_insert_with(TaskStep::default).feeds.push((i, format!("{}:{idx}", nodes[n].name)));
        }
        let mut fetch_at = Vec::with_capacity(key.1.len());
        for &(n, idx) in &key.1 {
            let t = task_of(n)?;
            let s = steps[t].get_or_insert_with(TaskStep::default);
            s.fetches.push(format!("{}:{idx}", nodes[n].name));
            fetch_at.push((t, s.fetches.len() - 1));
        }
        for &n in &key.2 {
            let t = task_of(n)?;
            steps[t].get_or_insert_with(TaskStep::default).targets.push(nodes[n].name.clone());
        }
        let tasks: Vec<(usize, TaskStep)> = steps.into_iter().enumerate().filter_map(|(i, s)| s.map(|s| (i, s))).collect();
        let fetch_src = fetch_at
            .into_iter()
            .map(|(t, j)| (tasks.iter().position(|(i, _)| *i == t).unwrap_or(0), j))
            .collect();
        let plan = Arc::new(StepPlan { tasks, fetch_src });
        self.cache.lock().insert(key, Arc::clone(&plan));
        Ok(plan)
    }

    /// Runs one step over the cluster: feeds, fetches and targets are
    /// outputs of the registered graph, as for `Session::run`.
    pub fn run(&self, feeds: &[(&Output, &Tensor)], fetches: &[&Output], targets: &[&Output]) -> Result<Vec<Tensor>> {
        self.run_delayed(feeds, fetches, targets, &[])
    }

    /// As [`Self::run`], with `delays`: each named task waits that long
    /// before running its part of the step (an injected straggler). A delay
    /// over [`MAX_INJECTED_DELAY`] is refused by the task.
    pub fn run_delayed(
        &self,
        feeds: &[(&Output, &Tensor)],
        fetches: &[&Output],
        targets: &[&Output],
        delays: &[(TaskId, Duration)],
    ) -> Result<Vec<Tensor>> {
        let key: Signature = (
            feeds.iter().map(|(o, _)| (o.node_id(), o.index())).collect(),
            fetches.iter().map(|o| (o.node_id(), o.index())).collect(),
            targets.iter().map(|o| o.node_id()).collect(),
        );
        let plan = self.plan(key)?;
        let step_id = self.next_step.fetch_add(1, Ordering::Relaxed);
        let record_timeline = self.timeline.on();
        // the master's own part of a recorded step: from here to the last answer
        let started = record_timeline.then(|| {
            let t = Instant::now();
            (t, flowlab_engine::unix_us_at(t))
        });
        let feeds: Vec<_> = feeds.iter().map(|(_, t)| wire::to_proto(t)).collect::<Result<_>>()?;
        let fed: usize = plan.tasks.iter().flat_map(|(_, ts)| ts.feeds.iter()).map(|(f, _)| feeds[*f].data.len()).sum();
        self.fed_fetched.fetch_add(fed as u64, Ordering::Relaxed);
        let mut finished = self.finished.lock();
        let mut calls = Vec::with_capacity(plan.tasks.len());
        for (pos, (i, ts)) in plan.tasks.iter().enumerate() {
            let t = &self.tasks[*i];
            let handle = self.parts[*i].as_ref().map(|p| p.handle.clone()).ok_or_else(|| t.rpc_error("has no registered partition but the step needs it".into()))?;
            let req = RunGraphRequest {
                to: t.to(),
                handle,
                step_id,
                feeds: ts.feeds.iter().map(|(f, name)| NamedTensor { name: name.clone(), tensor: Some(feeds[*f].clone()) }).collect(),
                fetches: ts.fetches.clone(),
                targets: ts.targets.clone(),
                finished_steps: std::mem::take(&mut finished[*i]),
                record_timeline,
                delay_us: delays.iter().find(|(task, _)| *task == t.task).map_or(0, |(_, d)| d.as_micros().min(u128::from(u64::MAX)) as u64),
            };
            calls.push((pos, t.raw(), req));
        }
        drop(finished);
        let limit = self.rpc_limit();
        // who to tell when the step fails: (position, client, addressee)
        let abort_to: Vec<_> = plan.tasks.iter().enumerate().map(|(pos, (i, _))| (pos, self.tasks[*i].raw(), self.tasks[*i].to())).collect();
        let task_names: Vec<String> = plan.tasks.iter().map(|(i, _)| self.tasks[*i].task.to_string()).collect();
        let results = self.runtime.block_on(async move {
            let mut set = tokio::task::JoinSet::new();
            for (pos, mut c, req) in calls {
                set.spawn(async move {
                    // the call's clock only for a recorded step
                    let sent = record_timeline.then(Instant::now);
                    let r = tokio::time::timeout(limit, c.run_graph(req)).await;
                    (pos, r, sent.map(|s| (s, Instant::now())))
                });
            }
            let mut calls_at = vec![None; set.len()];
            let mut out: Vec<Option<(Vec<NamedTensor>, Option<crate::pb::StepTimeline>)>> = (0..set.len()).map(|_| None).collect();
            let mut first: Option<(usize, String)> = None;
            let mut errors: Vec<(usize, String)> = Vec::new();
            while let Some(r) = set.join_next().await {
                let (pos, r, at) = r.map_err(|e| (usize::MAX, format!("step call failed: {e}")))?;
                calls_at[pos] = at;
                let failed = match r {
                    Err(_) => format!("RunGraph step {step_id}: no answer in {limit:?}"),
                    Ok(Err(s)) => format!("RunGraph step {step_id}: {}", s.message()),
                    Ok(Ok(resp)) => {
                        let resp = resp.into_inner();
                        out[pos] = Some((resp.fetched, resp.timeline));
                        continue;
                    }
                };
                errors.push((pos, failed.clone()));
                if first.is_none() {
                    // the others may wait for this task's tensors: end the
                    // step there at once, then collect their answers; the
                    // ones done already may hold tensors no one will ask
                    // for, which the abort drops
                    let reason = format!("task {} failed", task_names[pos]);
                    for (p, c, to) in &abort_to {
                        if *p != pos {
                            let mut c = c.clone();
                            let req = AbortStepRequest { to: *to, step_id, reason: reason.clone() };
                            tokio::spawn(async move {
                                let _ = tokio::time::timeout(Duration::from_secs(5), c.abort_step(req)).await;
                            });
                        }
                    }
                    first = Some((pos, failed));
                }
            }
            // the root cause, not a task that only missed its tensors
            let consequence = |m: &str| m.contains("RecvTensor from task") || m.contains("aborted by the master");
            match errors.iter().find(|(_, m)| !consequence(m)).cloned().or(first) {
                Some(e) => Err(e),
                None => Ok((out, calls_at)),
            }
        });
        // only now may the tasks forget the step's keys: with concurrent
        // steps (async workers) an earlier push would end a running step
        let mut finished = self.finished.lock();
        for (i, _) in &plan.tasks {
            finished[*i].push(step_id);
        }
        drop(finished);
        let (mut outs, calls_at) = results.map_err(|(pos, message)| match plan.tasks.get(pos) {
            Some((i, _)) => self.tasks[*i].rpc_error(message),
            None => RuntimeError::Engine { message },
        })?;
        if let Some(started) = started {
            let calls = plan.tasks.iter().zip(&calls_at).filter_map(|((i, _), at)| at.map(|at| (self.tasks[*i].task.to_string(), at)));
            let master = crate::timeline::master_part(step_id, started, calls);
            self.timeline.add(outs.iter_mut().filter_map(|o| o.as_mut().and_then(|(_, t)| t.take())).map(crate::timeline::from_proto).chain([master]));
        }
        let mut values = Vec::with_capacity(plan.fetch_src.len());
        for &(pos, j) in &plan.fetch_src {
            let t = &self.tasks[plan.tasks[pos].0];
            let p = outs
                .get(pos)
                .and_then(|o| o.as_ref())
                .and_then(|(o, _)| o.get(j))
                .and_then(|n| n.tensor.as_ref())
                .ok_or_else(|| t.rpc_error(format!("RunGraph step {step_id}: fetch {j} missing from the answer")))?;
            self.fed_fetched.fetch_add(p.data.len() as u64, Ordering::Relaxed);
            values.push(wire::from_proto(p)?);
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Job;
    use crate::net::bind_task;
    use crate::worker::TaskServer;
    use flowlab_engine::{DType, EmulatedLink};

    #[test]
    fn a_failing_task_ends_the_step_on_the_others_at_once() {
        let (ps, w0) = (TaskId::new(Job::Ps, 0), TaskId::new(Job::Worker, 0));
        let spec = ClusterSpec::loopback(1, 1).unwrap();
        let _servers: Vec<TaskServer> = spec.tasks().map(|(t, _)| TaskServer::start(&spec, t, bind_task(&spec, t).unwrap()).unwrap()).collect();
        let g = Graph::new();
        let x = g.device(&w0.device().to_string()).placeholder("x", DType::F32, [2]).unwrap();
        let y = g.device(&ps.device().to_string()).add(&x, &x).unwrap();
        let mut m = Master::connect(&spec, MasterOptions { recv_timeout: Duration::from_secs(30), ..Default::default() }).unwrap();
        m.register(&g).unwrap();
        let good = Tensor::from_vec(vec![1.0f32, 2.0], vec![2]).unwrap();
        assert_eq!(m.run(&[(&x, &good)], &[&y], &[]).unwrap()[0].to_vec::<f32>().unwrap(), [2.0, 4.0]);
        // worker:0 refuses the feed; ps:0 would wait 30 s for its tensor
        let bad = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], vec![3]).unwrap();
        let t = Instant::now();
        let e = m.run(&[(&x, &bad)], &[&y], &[]).unwrap_err().to_string();
        assert!(t.elapsed() < Duration::from_secs(5), "the step ended after {:?}", t.elapsed());
        assert!(e.starts_with(&format!("task worker:0 at {}: RunGraph step 2", spec.address(w0).unwrap())) && e.contains("feed for 'x:0': expected f32[2], got f32[3]"), "{e}");
        // the next step runs as before
        assert_eq!(m.run(&[(&x, &good)], &[&y], &[]).unwrap()[0].to_vec::<f32>().unwrap(), [2.0, 4.0]);
    }

    /// A step that fails on ps:0 after worker:0 has sent its tensor (or
    /// handed it to an emulated link that delivers it later): the tensor
    /// is dropped from worker:0's table when the step is aborted, not kept
    /// until the master's next call there (which may never come).
    #[test]
    fn a_failed_steps_tensors_do_not_stay_in_the_senders_table() {
        for link in [None, Some(EmulatedLink::new(1.0, 300_000.0).unwrap())] {
            let (ps, w0) = (TaskId::new(Job::Ps, 0), TaskId::new(Job::Worker, 0));
            let spec = ClusterSpec::loopback(1, 1).unwrap();
            let servers: Vec<TaskServer> =
                spec.tasks().map(|(t, _)| TaskServer::start_with_link(&spec, t, bind_task(&spec, t).unwrap(), link).unwrap()).collect();
            let g = Graph::new();
            let x = g.device(&w0.device().to_string()).placeholder("x", DType::F32, [2]).unwrap();
            let z = g.device(&ps.device().to_string()).placeholder("z", DType::F32, [2]).unwrap();
            let y = g.device(&ps.device().to_string()).add(&x, &z).unwrap();
            let mut m = Master::connect(&spec, MasterOptions { recv_timeout: Duration::from_secs(30), link, ..Default::default() }).unwrap();
            m.register(&g).unwrap();
            let good = Tensor::from_vec(vec![1.0f32, 2.0], vec![2]).unwrap();
            let bad = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], vec![3]).unwrap();
            // ps:0 refuses its feed; worker:0's Send of x has run (or its
            // tensor is on the emulated link for 300 ms)
            let e = m.run(&[(&x, &good), (&z, &bad)], &[&y], &[]).unwrap_err().to_string();
            assert!(e.contains("ps:0"), "{e}");
            let table = &servers.iter().find(|s| s.task == w0).unwrap().rendezvous;
            // the abort reaches worker:0 at once; an emulated delivery comes
            // 300 ms after the Send: watch past it
            let until = Instant::now() + Duration::from_millis(if link.is_some() { 900 } else { 300 });
            let mut most = 0;
            let mut last = usize::MAX;
            while Instant::now() < until || last != 0 {
                last = table.num_keys();
                most = most.max(last);
                assert!(Instant::now() < until + Duration::from_secs(5), "worker:0 still holds {last} keys of the failed step");
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(most <= 1, "{most}");
            // the next step runs as before
            assert_eq!(m.run(&[(&x, &good), (&z, &good)], &[&y], &[]).unwrap()[0].to_vec::<f32>().unwrap(), [2.0, 4.0]);
        }
    }
}
