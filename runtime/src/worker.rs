//! The worker service of a task: its registered graph partitions, the steps
//! it runs of them, and the rendezvous that moves their tensors between
//! tasks.
//!
//! Contract: a task's Send ops leave tensors in the task's own
//! [`LocalRendezvous`]; a consumer on another task asks for one with the
//! `RecvTensor` call, keyed by (step id, edge, source and destination
//! device), which waits on the producer's rendezvous up to the caller's
//! timeout. A key is used once, so a retried step (a new step id) never
//! receives a tensor of an older step. The tensor travels in the wire form
//! the Send chose (f32, or the f16/bf16/int8 bytes), and the consumer
//! decodes it with the engine's own Recv kernel, so a remote transfer gives
//! exactly the bytes an in-process one does.
//!
//! `RegisterGraph` keeps a partition (the engine's graph JSON) in a
//! one-device session of the task's device and returns a handle;
//! `RunGraph` runs one step of it with a [`StepRendezvous`]: Sends go to the
//! task's rendezvous, Recvs whose source device is on another task become
//! `RecvTensor` calls to that task, the others wait locally. Every request
//! carries the cluster's fingerprint and the incarnation of the task it is
//! meant for; a task refuses any other, naming both, so a message from
//! another cluster or for an earlier run of a restarted task never acts.
//!
//! Emulated links ([`TaskServer::start_with_link`], `flowlab server
//! --link`): a Send whose consumer is on another task hands its tensor to
//! the engine's [`LinkEmulator`], which leaves it in the task's rendezvous
//! no earlier than latency + bytes / bandwidth after the Send (the
//! transfers of one direction of a task pair queue one behind the other,
//! across steps), the engine's rule for devices of one process. The
//! consumer's `RecvTensor` then fetches it over the real network, so a
//! transfer takes the emulated time plus the real one.

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowlab_engine::{
    DType, DeviceName, DeviceSet, EmulatedLink, EngineError, Graph, LinkEmulator, LinkMap, LocalRendezvous, RecvCallback, Rendezvous,
    RendezvousKey, Session, SessionOptions, Shape, Tensor,
};
use flowlab_hw::CommFormat;
use crate::auth::AuthChannel;
use tonic::transport::Endpoint;
use tonic::{Request, Response, Status};

use crate::cluster::{ClusterSpec, TaskId};
use crate::error::{Result, RuntimeError};
use crate::pb::worker_client::WorkerClient;
use crate::pb::worker_server::Worker;
use crate::pb::{
    AbortStepRequest, AbortStepResponse, Addressee, GetStatusRequest, GetStatusResponse, NamedTensor, RecvTensorRequest, RecvTensorResponse, RegisterGraphRequest,
    RegisterGraphResponse, RunGraphRequest, RunGraphResponse,
};
use crate::{tensor_rpc, wire};

/// A number a task draws when it starts: another run of the same task
/// (a restart) draws another.
pub(crate) fn new_incarnation() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish().max(1)
}

/// An error and its sources, "outer: inner: innermost" (tonic's own
/// Display says only "transport error").
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// A millisecond count for a message.
pub(crate) fn millis(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

/// One registered partition.
struct Registered {
    session: Session,
    graph: Graph,
    /// The incarnation of each other task, as the master found them.
    peers: HashMap<TaskId, u64>,
    recv_timeout: Duration,
}

/// What one task knows and keeps.
struct TaskState {
    task: TaskId,
    spec: ClusterSpec,
    cluster: u64,
    incarnation: u64,
    device: DeviceName,
    rendezvous: Arc<LocalRendezvous>,
    graphs: Mutex<HashMap<String, Arc<Registered>>>,
    next_handle: AtomicU64,
    /// Channels to the other tasks, made on first use (they connect lazily).
    channels: Mutex<HashMap<TaskId, AuthChannel>>,
    /// The rendezvous of the steps running here, by step id, so that
    /// `AbortStep` can end them.
    running: Mutex<HashMap<u64, Vec<Arc<StepRendezvous>>>>,
    /// Steps aborted (with why) before, while or after they ran here (the
    /// newest `ABORTED_KEPT`; step ids only grow), shared with the
    /// delivery of emulated-link tensors.
    aborted: Arc<Aborted>,
    /// `RecvTensor` answers this task gave, and their tensors' data bytes
    /// (in the communication format sent): the traffic between tasks.
    served: AtomicU64,
    served_bytes: AtomicU64,
    /// The highest step id run here.
    last_step: AtomicU64,
    /// The emulated link to every other task, and what delays the tensors
    /// sent over it.
    link: Option<EmulatedLink>,
    links: Option<Arc<LinkEmulator>>,
}

impl TaskState {
    /// Refuses a request of another cluster, or meant for another
    /// incarnation of this task (`0` is accepted only where `any_incarnation`).
    fn admit(&self, to: Option<&Addressee>, any_incarnation: bool) -> std::result::Result<(), Status> {
        let to = to.ok_or_else(|| Status::invalid_argument(format!("task {}: request names no cluster and incarnation", self.task)))?;
        if to.cluster != self.cluster {
            return Err(Status::failed_precondition(format!(
                "task {}: message from another cluster (cluster {:016x}; this task serves cluster {:016x}): sender and task were started with different cluster specs",
                self.task, to.cluster, self.cluster
            )));
        }
        if to.incarnation != self.incarnation && !(any_incarnation && to.incarnation == 0) {
            return Err(Status::failed_precondition(format!(
                "task {}: message for incarnation {:016x}, this is incarnation {:016x}: the task restarted since the sender last reached it",
                self.task, to.incarnation, self.incarnation
            )));
        }
        Ok(())
    }

    /// The channel to `task` (connected on first use).
    fn channel(&self, task: TaskId) -> Result<AuthChannel> {
        let mut ch = self.channels.lock();
        if let Some(c) = ch.get(&task) {
            return Ok(c.clone());
        }
        let c = AuthChannel::new(endpoint(&self.spec, task, Duration::from_secs(10))?.connect_lazy(), self.spec.auth());
        ch.insert(task, c.clone());
        Ok(c)
    }
}

/// The highest step id a task runs: a master starts after the highest id
/// its tasks ran, so ids up to here leave it room to count on (a master at
/// a step a second counts 2^62 ids in a hundred billion years).
pub(crate) const MAX_STEP_ID: u64 = 1 << 62;

/// Aborted steps kept per task: a late tensor of one of them (an
/// emulated link delivers it after the abort) is dropped as long as its
/// step is among these.
const ABORTED_KEPT: usize = 4096;

/// The steps aborted on a task, and the one gate between an abort's
/// cleanup of the task's table and any tensor left in it: a tensor of an
/// aborted step is never left there, whether it came before the abort (the
/// cleanup drops it) or after (it is dropped at the door). No consumer
/// asks for it: the master ends every task's part of a failed step.
#[derive(Default)]
pub(crate) struct Aborted {
    steps: Mutex<std::collections::BTreeMap<u64, String>>,
}

impl Aborted {
    fn lock(&self) -> parking_lot::MutexGuard<'_, std::collections::BTreeMap<u64, String>> {
        self.steps.lock()
    }

    fn why(&self, step: u64) -> Option<String> {
        self.lock().get(&step).cloned()
    }

    /// Marks `step` aborted and drops what `table` holds of it: tensors sent
    /// and not received, and receivers waiting (their callers learn that
    /// the step was cleaned up).
    fn abort(&self, step: u64, why: String, table: &LocalRendezvous) {
        let mut steps = self.lock();
        steps.entry(step).or_insert(why);
        while steps.len() > ABORTED_KEPT {
            steps.pop_first();
        }
        table.end_step(step);
    }

    /// Leaves `tensor` in `table` unless its step was aborted: `Ok(false)`
    /// then, and the tensor is dropped.
    fn deliver(&self, table: &LocalRendezvous, key: &RendezvousKey, tensor: Tensor) -> flowlab_engine::Result<bool> {
        let steps = self.lock();
        if steps.contains_key(&key.step_id) {
            return Ok(false);
        }
        table.send(key, tensor)?;
        drop(steps);
        Ok(true)
    }
}

/// Where an emulated link leaves the tensors it delayed: the task's table,
/// through [`Aborted::deliver`] (a tensor that arrives after its step was
/// aborted is dropped).
struct LinkDelivery {
    table: Arc<LocalRendezvous>,
    aborted: Arc<Aborted>,
}

impl Rendezvous for LinkDelivery {
    fn send(&self, key: &RendezvousKey, tensor: Tensor) -> flowlab_engine::Result<()> {
        self.aborted.deliver(&self.table, key, tensor).map(drop)
    }
    fn recv(&self, key: &RendezvousKey, timeout: Duration) -> flowlab_engine::Result<Tensor> {
        self.table.recv(key, timeout)
    }
    fn recv_async(&self, key: RendezvousKey, done: RecvCallback) {
        self.table.recv_async(key, done)
    }
    fn abort(&self, err: &EngineError) {
        self.table.abort(err)
    }
}

/// HTTP/2 flow-control windows of every channel and server. hyper's
/// defaults (a 1 MB stream window on a server, 2 MB on a client) are
/// smaller than one 784x512 weight matrix (1.6 MB), so a tensor stalled
/// for a WINDOW_UPDATE round trip mid-message; with windows above the
/// largest tensor the 784-512-512-10 MLP's 1 PS + 1 worker step took
/// 6.8-7.8 ms instead of 8.1-8.4 ms (`flowlab bench cluster --quick`, three
/// runs each, interleaved), 4 workers 18-22 ms instead of 23-26 ms.
const STREAM_WINDOW: u32 = 32 << 20;
const CONNECTION_WINDOW: u32 = 64 << 20;

/// The largest HTTP/2 frame every channel and server accepts (the
/// default is 16 KB). A tensor's bytes pass through h2 frame by frame, and
/// each frame costs both ends their bookkeeping and a wake-up: since
/// `RecvTensor` answers are read without tonic's copies (see
/// `tensor_rpc`), 1 MB frames made the 784-512-512-10 MLP's 1 PS + 1
/// worker step 5.9-7.3 ms instead of 6.7-8.3 ms, and 4 workers 16-17 ms
/// instead of 20-21 ms (`flowlab bench cluster --quick`, alternated); 4 MB
/// frames were slower again (7.0-7.4 ms).
const MAX_FRAME: u32 = 1 << 20;

/// The endpoint of `task`, with `connect_timeout`.
pub(crate) fn endpoint(spec: &ClusterSpec, task: TaskId, connect_timeout: Duration) -> Result<Endpoint> {
    let address = spec.address(task)?;
    Ok(Endpoint::from_shared(format!("http://{address}"))
        .map_err(|e| RuntimeError::Rpc { task: task.to_string(), address: address.into(), message: format!("not a valid endpoint: {e}") })?
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME)
        .connect_timeout(connect_timeout))
}

/// A client of a task's service. gRPC caps a message at 4 MB by default;
/// a tensor is one message (a 3136 x 1024 weight matrix is 12.8 MB), so
/// answers are limited by the cluster's `max_message_mb` instead.
fn worker_client(channel: AuthChannel, limit: usize) -> WorkerClient<AuthChannel> {
    WorkerClient::new(channel).max_decoding_message_size(limit).max_encoding_message_size(usize::MAX)
}

/// The gRPC side of one task.
#[derive(Clone)]
pub struct WorkerService {
    state: Arc<TaskState>,
}

fn key_of(r: &RecvTensorRequest) -> std::result::Result<RendezvousKey, Status> {
    let dev = |s: &str| DeviceName::parse(s).map_err(|e| Status::invalid_argument(format!("device `{s}`: {e}")));
    Ok(RendezvousKey { src_device: dev(&r.src_device)?, dst_device: dev(&r.dst_device)?, edge: r.edge.clone(), step_id: r.step_id })
}

/// "node:index" (or "node", index 0) of `graph`.
fn output_of(graph: &Graph, name: &str) -> flowlab_engine::Result<flowlab_engine::Output> {
    match name.rsplit_once(':') {
        Some((n, i)) if i.parse::<usize>().is_ok() => graph.output_by_name(n, i.parse().unwrap_or(0)),
        _ => graph.output_by_name(name, 0),
    }
}

impl WorkerService {
    /// The cluster's secret, which every request must prove.
    pub(crate) fn auth(&self) -> Option<&crate::auth::Auth> {
        self.state.spec.auth()
    }

    /// The largest request this task reads.
    pub(crate) fn max_message_bytes(&self) -> usize {
        self.state.spec.max_message_bytes()
    }

    fn run_graph_blocking(&self, r: RunGraphRequest) -> std::result::Result<RunGraphResponse, Status> {
        let st = &self.state;
        let reg = st.graphs.lock().get(&r.handle).cloned().ok_or_else(|| {
            Status::not_found(format!("task {}: no graph registered under handle `{}`", st.task, r.handle))
        })?;
        let bad = |e: EngineError| Status::invalid_argument(format!("task {}: {e}", st.task));
        let mut feeds = Vec::with_capacity(r.feeds.len());
        for f in &r.feeds {
            let t = f.tensor.as_ref().ok_or_else(|| Status::invalid_argument(format!("task {}: feed `{}` without a tensor", st.task, f.name)))?;
            let t = wire::from_proto(t).map_err(|e| Status::invalid_argument(format!("task {}: feed `{}`: {e}", st.task, f.name)))?;
            feeds.push((output_of(&reg.graph, &f.name).map_err(bad)?, t));
        }
        let fetches = r.fetches.iter().map(|n| output_of(&reg.graph, n)).collect::<flowlab_engine::Result<Vec<_>>>().map_err(bad)?;
        let targets = r.targets.iter().map(|n| reg.graph.output_by_name(n, 0)).collect::<flowlab_engine::Result<Vec<_>>>().map_err(bad)?;
        let rdv = Arc::new(StepRendezvous::new(Arc::clone(st), &reg, r.step_id));
        st.running.lock().entry(r.step_id).or_default().push(Arc::clone(&rdv));
        // an abort that came first
        if let Some(why) = st.aborted.why(r.step_id) {
            rdv.abort(&EngineError::Device(why));
        }
        let feed_refs: Vec<_> = feeds.iter().map(|(o, t)| (o, t)).collect();
        let (fetch_refs, target_refs) = (fetches.iter().collect::<Vec<_>>(), targets.iter().collect::<Vec<_>>());
        let out = if r.record_timeline {
            reg.session.run_partition_traced(&feed_refs, &fetch_refs, &target_refs, rdv.as_ref(), r.step_id).map(|(v, t)| (v, Some(t)))
        } else {
            reg.session.run_partition(&feed_refs, &fetch_refs, &target_refs, rdv.as_ref(), r.step_id).map(|v| (v, None))
        };
        {
            let mut running = st.running.lock();
            if let Some(v) = running.get_mut(&r.step_id) {
                v.retain(|x| !Arc::ptr_eq(x, &rdv));
                if v.is_empty() {
                    running.remove(&r.step_id);
                }
            }
        }
        let out = out.map_err(|e| {
            // the step failed here: what this task sent for it will not be
            // asked for (the master aborts the step everywhere)
            let why = format!("task {} step {}: {e}", st.task, r.step_id);
            st.aborted.abort(r.step_id, why.clone(), &st.rendezvous);
            Status::aborted(why)
        })?;
        let (out, timeline) = out;
        let mut fetched = Vec::with_capacity(out.len());
        for (name, t) in r.fetches.iter().zip(&out) {
            let tensor = wire::to_proto(t).map_err(|e| Status::internal(format!("task {}: fetch `{name}`: {e}", st.task)))?;
            fetched.push(NamedTensor { name: name.clone(), tensor: Some(tensor) });
        }
        Ok(RunGraphResponse { fetched, timeline: timeline.as_ref().map(crate::timeline::to_proto) })
    }

    /// The tensor a `RecvTensor` asks for, once its Send has run here.
    pub(crate) async fn recv_tensor_value(&self, r: RecvTensorRequest) -> std::result::Result<Tensor, Status> {
        self.state.admit(r.to.as_ref(), false)?;
        let key = key_of(&r)?;
        let timeout = Duration::from_millis(r.timeout_ms);
        // wait without a thread: the rendezvous calls back when the Send comes
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.state.rendezvous.recv_async(key.clone(), Box::new(move |res| {
            let _ = tx.send(res);
        }));
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Ok(t))) => Ok(t),
            Ok(Ok(Err(e))) => Err(Status::aborted(e.to_string())),
            Ok(Err(_)) => Err(Status::aborted(format!("{key}: the step was cleaned up before its Send ran"))),
            Err(_) => Err(Status::deadline_exceeded(format!("{key}: no Send within {timeout:?}"))),
        }
    }

    /// Counts one `RecvTensor` answered with `bytes` data bytes.
    pub(crate) fn count_served(&self, bytes: usize) {
        self.state.served.fetch_add(1, Ordering::Relaxed);
        self.state.served_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

#[tonic::async_trait]
impl Worker for WorkerService {
    async fn get_status(&self, req: Request<GetStatusRequest>) -> std::result::Result<Response<GetStatusResponse>, Status> {
        let st = &self.state;
        st.admit(req.get_ref().to.as_ref(), true)?;
        Ok(Response::new(GetStatusResponse {
            task: st.task.to_string(),
            incarnation: st.incarnation,
            device: st.device.to_string(),
            recv_tensor_served: st.served.load(Ordering::Relaxed),
            recv_tensor_bytes: st.served_bytes.load(Ordering::Relaxed),
            last_step_id: st.last_step.load(Ordering::Relaxed),
            link_gbps: st.link.map_or(0.0, |l| l.gbps),
            link_latency_us: st.link.map_or(0.0, |l| l.latency_us),
        }))
    }

    async fn recv_tensor(&self, req: Request<RecvTensorRequest>) -> std::result::Result<Response<RecvTensorResponse>, Status> {
        // a task's own server answers through `tensor_rpc`; this serves a
        // stock gRPC client
        let t = self.recv_tensor_value(req.into_inner()).await?;
        let tensor = wire::to_proto(&t).map_err(|e| Status::internal(e.to_string()))?;
        self.count_served(tensor.data.len());
        Ok(Response::new(RecvTensorResponse { tensor: Some(tensor) }))
    }

    async fn register_graph(&self, req: Request<RegisterGraphRequest>) -> std::result::Result<Response<RegisterGraphResponse>, Status> {
        let st = &self.state;
        let r = req.into_inner();
        st.admit(r.to.as_ref(), false)?;
        let bad = |e: String| Status::invalid_argument(format!("task {}: RegisterGraph: {e}", st.task));
        let graph = Graph::from_json(r.graph_json.as_bytes(), "the registered graph").map_err(|e| bad(e.to_string()))?;
        let mut devices = DeviceSet::new();
        devices.add(&st.device.to_string()).map_err(|e| bad(e.to_string()))?;
        let recv_timeout = Duration::from_millis(r.recv_timeout_ms.max(1));
        let session = Session::with_options(&graph, SessionOptions { threads: 1, devices, recv_timeout, ..Default::default() })
            .map_err(|e| bad(e.to_string()))?;
        let mut peers = HashMap::new();
        for p in &r.peers {
            let t = TaskId::parse(&p.task).ok_or_else(|| bad(format!("peer `{}` is not a task name like worker:1", p.task)))?;
            st.spec.address(t).map_err(|e| bad(e.to_string()))?;
            peers.insert(t, p.incarnation);
        }
        let handle = format!("{}/graph{}", st.task, st.next_handle.fetch_add(1, Ordering::Relaxed));
        let reg = Arc::new(Registered { session, graph, peers, recv_timeout });
        st.graphs.lock().insert(handle.clone(), reg);
        Ok(Response::new(RegisterGraphResponse { handle }))
    }

    async fn abort_step(&self, req: Request<AbortStepRequest>) -> std::result::Result<Response<AbortStepResponse>, Status> {
        let st = &self.state;
        let r = req.into_inner();
        st.admit(r.to.as_ref(), false)?;
        let why = format!("step {} aborted by the master: {}", r.step_id, r.reason);
        st.aborted.abort(r.step_id, why.clone(), &st.rendezvous);
        let steps = st.running.lock().get(&r.step_id).cloned().unwrap_or_default();
        for rdv in steps {
            rdv.abort(&EngineError::Device(why.clone()));
        }
        Ok(Response::new(AbortStepResponse {}))
    }

    async fn run_graph(&self, req: Request<RunGraphRequest>) -> std::result::Result<Response<RunGraphResponse>, Status> {
        let r = req.into_inner();
        self.state.admit(r.to.as_ref(), false)?;
        if r.step_id > MAX_STEP_ID {
            return Err(Status::invalid_argument(format!("task {}: step id {} is above {MAX_STEP_ID}, which no master reaches", self.state.task, r.step_id)));
        }
        for &s in &r.finished_steps {
            self.state.rendezvous.end_step(s);
        }
        self.state.last_step.fetch_max(r.step_id, Ordering::Relaxed);
        if r.delay_us > 0 {
            let delay = Duration::from_micros(r.delay_us);
            if delay > crate::master::MAX_INJECTED_DELAY {
                return Err(Status::invalid_argument(format!(
                    "task {}: an injected delay of {delay:?} is over the {:?} allowed",
                    self.state.task,
                    crate::master::MAX_INJECTED_DELAY
                )));
            }
            tokio::time::sleep(delay).await;
        }
        let me = WorkerService { state: Arc::clone(&self.state) };
        // the executor blocks its thread: keep it off the async threads
        let resp = tokio::task::spawn_blocking(move || me.run_graph_blocking(r))
            .await
            .map_err(|e| Status::internal(format!("step thread failed: {e}")))??;
        Ok(Response::new(resp))
    }
}

/// The rendezvous of one step of one task (see the module comment). An
/// abort ends this step's pending receives only: the task's table lives on.
pub struct StepRendezvous {
    state: Arc<TaskState>,
    peers: HashMap<TaskId, u64>,
    recv_timeout: Duration,
    step_id: u64,
    /// Receivers not yet answered, so that an abort can answer them.
    pending: Mutex<Vec<Arc<Mutex<Option<RecvCallback>>>>>,
    aborted: Mutex<Option<String>>,
}

impl StepRendezvous {
    fn new(state: Arc<TaskState>, reg: &Registered, step_id: u64) -> StepRendezvous {
        StepRendezvous {
            state,
            peers: reg.peers.clone(),
            recv_timeout: reg.recv_timeout,
            step_id,
            pending: Mutex::new(Vec::new()),
            aborted: Mutex::new(None),
        }
    }

    fn aborted(&self) -> Option<String> {
        self.aborted.lock().clone()
    }

    /// Asks the producer's task for `key` and answers `fire` with the result.
    fn recv_remote(&self, src: TaskId, key: RendezvousKey, fire: impl FnOnce(flowlab_engine::Result<Tensor>) + Send + 'static) {
        let st = &self.state;
        let fail = |detail: String, key: &RendezvousKey| EngineError::Rendezvous { key: key.to_string(), detail };
        let address = st.spec.address(src).map(str::to_string).unwrap_or_default();
        let channel = match st.channel(src) {
            Ok(c) => c,
            Err(e) => return fire(Err(fail(e.to_string(), &key))),
        };
        let req = RecvTensorRequest {
            step_id: key.step_id,
            edge: key.edge.clone(),
            src_device: key.src_device.to_string(),
            dst_device: key.dst_device.to_string(),
            timeout_ms: millis(self.recv_timeout),
            to: Some(Addressee { cluster: st.cluster, incarnation: self.peers.get(&src).copied().unwrap_or(0) }),
        };
        let limit = self.recv_timeout + Duration::from_secs(5);
        let max_message = st.spec.max_message_bytes();
        // steps run on the server runtime's blocking threads, which know it
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return fire(Err(fail("no network runtime on this thread".into(), &key)));
        };
        handle.spawn(async move {
            let r = match tokio::time::timeout(limit, tensor_rpc::call(channel, &req, max_message)).await {
                Err(_) => Err(fail(format!("RecvTensor from task {src} at {address}: no answer in {limit:?}"), &key)),
                Ok(Err(s)) => Err(fail(format!("RecvTensor from task {src} at {address}: {}", s.message()), &key)),
                Ok(Ok(t)) => Ok(t),
            };
            fire(r);
        });
    }
}

impl Rendezvous for StepRendezvous {
    fn send(&self, key: &RendezvousKey, tensor: Tensor) -> flowlab_engine::Result<()> {
        if let Some(why) = self.aborted() {
            return Err(EngineError::Rendezvous { key: key.to_string(), detail: format!("step aborted: {why}") });
        }
        // a tensor for another task crosses the emulated link first
        let mut tensor = tensor;
        if let Some(links) = &self.state.links
            && TaskId::of_device(&key.dst_device).is_some_and(|dst| dst != self.state.task)
        {
            match links.send(key, tensor) {
                None => return Ok(()),
                Some(t) => tensor = t,
            }
        }
        match self.state.aborted.deliver(&self.state.rendezvous, key, tensor)? {
            true => Ok(()),
            false => Err(EngineError::Rendezvous { key: key.to_string(), detail: "step aborted on this task".into() }),
        }
    }

    fn recv(&self, key: &RendezvousKey, timeout: Duration) -> flowlab_engine::Result<Tensor> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.recv_async(key.clone(), Box::new(move |r| {
            let _ = tx.send(r);
        }));
        rx.recv_timeout(timeout).map_err(|_| EngineError::Rendezvous { key: key.to_string(), detail: format!("no tensor within {timeout:?}") })?
    }

    fn recv_async(&self, key: RendezvousKey, done: RecvCallback) {
        if let Some(why) = self.aborted() {
            return done(Err(EngineError::Rendezvous { key: key.to_string(), detail: format!("step aborted: {why}") }));
        }
        let cell = Arc::new(Mutex::new(Some(done)));
        self.pending.lock().push(Arc::clone(&cell));
        let fire = move |r: flowlab_engine::Result<Tensor>| {
            let done = cell.lock().take();
            if let Some(d) = done {
                d(r);
            }
        };
        match TaskId::of_device(&key.src_device) {
            Some(src) if src != self.state.task => self.recv_remote(src, key, fire),
            _ => self.state.rendezvous.recv_async(key, Box::new(fire)),
        }
    }

    fn abort(&self, err: &EngineError) {
        let why = err.to_string();
        *self.aborted.lock() = Some(why.clone());
        let pending = std::mem::take(&mut *self.pending.lock());
        for cell in pending {
            let done = cell.lock().take();
            if let Some(d) = done {
                d(Err(EngineError::Rendezvous { key: format!("step {}", self.step_id), detail: format!("aborted: {why}") }));
            }
        }
    }
}

/// The runtime a task serves on: one async thread for the network (a step
/// runs on its blocking threads).
pub(crate) fn server_runtime(name: String) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).thread_name(name).enable_all().build()
}

/// Serves `routes` on `listener` (a bound std listener) on `runtime` until
/// the returned sender is dropped or fires.
pub(crate) fn serve(runtime: &tokio::runtime::Runtime, listener: TcpListener, routes: tonic::service::Routes) -> std::io::Result<tokio::sync::oneshot::Sender<()>> {
    listener.set_nonblocking(true)?;
    let listener = {
        let _guard = runtime.enter();
        tokio::net::TcpListener::from_std(listener)?
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    runtime.spawn(async move {
        // Server::tcp_nodelay applies only to listeners tonic binds
        // itself: set it on each accepted stream, or every small answer
        // waits for the peer's delayed ACK (40 ms on Linux)
        let incoming = tokio_stream::StreamExt::map(tokio_stream::wrappers::TcpListenerStream::new(listener), |s| {
            s.inspect(|s| {
                let _ = s.set_nodelay(true);
            })
        });
        let _ = tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_frame_size(MAX_FRAME)
            .add_routes(routes)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            })
            .await;
    });
    Ok(stop)
}

/// A running task server: its rendezvous and the runtime that serves it.
/// Dropping it stops the server.
pub struct TaskServer {
    pub rendezvous: Arc<LocalRendezvous>,
    pub address: std::net::SocketAddr,
    pub task: TaskId,
    pub incarnation: u64,
    /// The emulated link to every other task, if any.
    pub link: Option<EmulatedLink>,
    links: Option<Arc<LinkEmulator>>,
    runtime: Option<tokio::runtime::Runtime>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TaskServer {
    /// Serves `task` of `spec` on `listener` (from [`crate::bind_task`]) on
    /// a runtime of its own, with a fresh incarnation.
    pub fn start(spec: &ClusterSpec, task: TaskId, listener: TcpListener) -> Result<TaskServer> {
        TaskServer::start_with_link(spec, task, listener, None)
    }

    /// Every task of `spec` served on threads of this process, in the
    /// spec's order (a spec from [`ClusterSpec::loopback`]).
    pub fn start_all(spec: &ClusterSpec) -> Result<Vec<TaskServer>> {
        spec.tasks().map(|(t, _)| TaskServer::start(spec, t, crate::bind_task(spec, t)?)).collect()
    }

    /// [`TaskServer::start`] with the tensors this task sends to every other
    /// task delayed as over `link` (see the module comment).
    pub fn start_with_link(spec: &ClusterSpec, task: TaskId, listener: TcpListener, link: Option<EmulatedLink>) -> Result<TaskServer> {
        let io = |e: std::io::Error| RuntimeError::Engine { message: format!("task {task} server: {e}") };
        let address = listener.local_addr().map_err(io)?;
        let runtime = server_runtime(format!("flowlab-{}-{}", task.job, task.index)).map_err(io)?;
        spec.address(task)?;
        let rendezvous = Arc::new(LocalRendezvous::new());
        let aborted = Arc::new(Aborted::default());
        let links = match link {
            Some(l) => Some(Arc::new(
                LinkEmulator::start(
                    LinkMap { all: Some(l), ..Default::default() },
                    Arc::new(LinkDelivery { table: Arc::clone(&rendezvous), aborted: Arc::clone(&aborted) }) as Arc<dyn Rendezvous>,
                )
                    .map_err(|e| RuntimeError::Engine { message: format!("task {task}: {e}") })?,
            )),
            None => None,
        };
        let incarnation = new_incarnation();
        let state = Arc::new(TaskState {
            task,
            spec: spec.clone(),
            cluster: spec.fingerprint(),
            incarnation,
            device: task.device(),
            rendezvous: Arc::clone(&rendezvous),
            graphs: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            channels: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            aborted,
            served: AtomicU64::new(0),
            served_bytes: AtomicU64::new(0),
            last_step: AtomicU64::new(0),
            link,
            links: links.clone(),
        });
        let svc = WorkerService { state };
        let routes = tonic::service::Routes::new(tensor_rpc::WorkerRoutes::new(svc));
        let stop = serve(&runtime, listener, routes).map_err(io)?;
        Ok(TaskServer { rendezvous, address, task, incarnation, link, links, runtime: Some(runtime), stop: Some(stop) })
    }

    /// Blocks the calling thread while the server runs (for `flowlab server`).
    pub fn wait(mut self) {
        let stop = self.stop.take();
        if let Some(rt) = &self.runtime {
            rt.block_on(std::future::pending::<()>());
        }
        drop(stop);
    }
}

impl Drop for TaskServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        // in-flight steps may hold blocking threads: do not wait for them
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
        if let Some(l) = self.links.take() {
            l.stop();
        }
    }
}

/// The runtime of a [`TaskClient`] of its own: its calls run on the
/// calling thread.
pub(crate) fn client_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()
}

/// A blocking client of one task's worker service, for the master, tests
/// and benchmarks. Connecting asks the task for its incarnation, which
/// every later call carries.
pub struct TaskClient {
    pub task: TaskId,
    pub address: String,
    pub incarnation: u64,
    pub device: DeviceName,
    /// The highest step id the task had run when this client connected.
    pub last_step: u64,
    /// The link the task emulates to the other tasks (`flowlab server --link`).
    pub link: Option<EmulatedLink>,
    cluster: u64,
    /// One HTTP/2 connection to the task: tonic's client for every method
    /// but `RecvTensor`, which `tensor_rpc` calls on it.
    channel: AuthChannel,
    /// The cluster's message limit, for answers.
    max_message: usize,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl TaskClient {
    /// Connects to `task`, retrying until `deadline` (the task may still be
    /// starting); the error names task and address.
    pub fn connect(spec: &ClusterSpec, task: TaskId, deadline: Duration) -> Result<TaskClient> {
        let runtime = client_runtime().map_err(|e| RuntimeError::Rpc {
            task: task.to_string(),
            address: spec.address(task).unwrap_or_default().to_string(),
            message: format!("runtime: {e}"),
        })?;
        TaskClient::connect_on(spec, task, deadline, Arc::new(runtime))
    }

    /// [`TaskClient::connect`] on a runtime shared with other clients (a
    /// multi-threaded one serves calls to several tasks at once).
    pub(crate) fn connect_on(spec: &ClusterSpec, task: TaskId, deadline: Duration, runtime: Arc<tokio::runtime::Runtime>) -> Result<TaskClient> {
        let address = spec.address(task)?.to_string();
        let rpc = |message: String| RuntimeError::Rpc { task: task.to_string(), address: address.clone(), message };
        let start = Instant::now();
        let mut pause = Duration::from_millis(10);
        let mut attempts = 0u32;
        let cluster = spec.fingerprint();
        let to = Some(Addressee { cluster, incarnation: 0 });
        let (channel, status) = loop {
            attempts += 1;
            let left = deadline.saturating_sub(start.elapsed()).max(Duration::from_millis(1));
            let ep = endpoint(spec, task, left)?;
            let tried = runtime.block_on(async {
                let ch = AuthChannel::new(ep.connect().await.map_err(|e| error_chain(&e))?, spec.auth());
                let mut c = worker_client(ch.clone(), spec.max_message_bytes());
                match tokio::time::timeout(left, c.get_status(GetStatusRequest { to })).await {
                    Ok(Ok(s)) => Ok((ch, s.into_inner())),
                    Ok(Err(s)) if s.code() == tonic::Code::FailedPrecondition => Err(format!("refused: {}", s.message())),
                    Ok(Err(s)) if s.code() == tonic::Code::Unauthenticated => Err(format!(
                        "refused: {} ({})",
                        s.message(),
                        match spec.auth() {
                            None => "the task requires a secret; the cluster file names none".to_string(),
                            Some(a) => format!("the secret in {} is not the task's", a.secret_file().display()),
                        }
                    )),
                    Ok(Err(s)) => Err(s.message().to_string()),
                    Err(_) => Err("no answer to GetStatus".to_string()),
                }
            });
            match tried {
                Ok(x) => break x,
                // another cluster's task answered: waiting will not help
                Err(e) if e.starts_with("refused: ") => return Err(rpc(e)),
                Err(e) if start.elapsed() >= deadline => {
                    return Err(rpc(format!("not reachable after {:?} ({attempts} attempts); last error: {e}", start.elapsed())));
                }
                Err(_) => {
                    std::thread::sleep(pause.min(deadline.saturating_sub(start.elapsed())));
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
            }
        };
        let device = DeviceName::parse(&status.device).map_err(|e| rpc(format!("bad device in GetStatus: {e}")))?;
        if status.task != task.to_string() {
            return Err(rpc(format!("the process there is task {}, not {task}", status.task)));
        }
        let link = if status.link_gbps > 0.0 {
            Some(EmulatedLink::new(status.link_gbps, status.link_latency_us).map_err(|e| rpc(format!("bad link in GetStatus: {e}")))?)
        } else {
            None
        };
        let max_message = spec.max_message_bytes();
        Ok(TaskClient { task, address, incarnation: status.incarnation, device, last_step: status.last_step_id, link, cluster, channel, max_message, runtime })
    }

    /// What every request to this task carries.
    pub(crate) fn to(&self) -> Option<Addressee> {
        Some(Addressee { cluster: self.cluster, incarnation: self.incarnation })
    }

    pub(crate) fn rpc_error(&self, message: String) -> RuntimeError {
        RuntimeError::Rpc { task: self.task.to_string(), address: self.address.clone(), message }
    }

    /// The raw gRPC client (on a clone of the channel) for concurrent calls.
    pub(crate) fn raw(&self) -> WorkerClient<AuthChannel> {
        worker_client(self.channel.clone(), self.max_message)
    }

    /// Runs `f` on this client's runtime.
    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    /// The task's `RecvTensor` answers and their data bytes so far.
    pub fn traffic(&self) -> Result<(u64, u64)> {
        let mut client = self.raw();
        let to = self.to();
        let r = self
            .runtime
            .block_on(async move { tokio::time::timeout(Duration::from_secs(2), client.get_status(GetStatusRequest { to })).await })
            .map_err(|_| self.rpc_error("GetStatus: no answer in 2 s".into()))?
            .map_err(|s| self.rpc_error(format!("GetStatus: {}", s.message())))?
            .into_inner();
        Ok((r.recv_tensor_served, r.recv_tensor_bytes))
    }

    /// The wire tensor the producer task sent under `key`, waiting at most `timeout`.
    pub fn recv_wire(&mut self, key: &RendezvousKey, timeout: Duration) -> Result<Tensor> {
        let req = RecvTensorRequest {
            step_id: key.step_id,
            edge: key.edge.clone(),
            src_device: key.src_device.to_string(),
            dst_device: key.dst_device.to_string(),
            timeout_ms: millis(timeout),
            to: self.to(),
        };
        let (channel, limit) = (self.channel.clone(), self.max_message);
        self.runtime
            .block_on(async move { tokio::time::timeout(timeout + Duration::from_secs(5), tensor_rpc::call(channel, &req, limit)).await })
            .map_err(|_| self.rpc_error(format!("RecvTensor {key} got no answer in time")))?
            .map_err(|s| self.rpc_error(format!("RecvTensor {key}: {}", s.message())))
    }

    /// The tensor under `key` decoded from `format` by the engine's own
    /// `recv_tensor` (what a Recv op of that dtype and shape would get).
    pub fn recv_tensor(&mut self, key: &RendezvousKey, format: CommFormat, dtype: DType, shape: &Shape, timeout: Duration) -> Result<Tensor> {
        let wire = self.recv_wire(key, timeout)?;
        let local = LocalRendezvous::new();
        local.send(key, wire)?;
        Ok(flowlab_engine::recv_tensor(&local, key, format, dtype, shape, Duration::ZERO)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Job;
    use crate::net::bind_task;

    fn key(step: u64) -> RendezvousKey {
        RendezvousKey {
            src_device: DeviceName::parse("/job:ps/task:0/device:cpu:0").unwrap(),
            dst_device: DeviceName::parse("/job:worker/task:0/device:cpu:0").unwrap(),
            edge: "w:0".into(),
            step_id: step,
        }
    }

    fn cluster() -> ClusterSpec {
        ClusterSpec::loopback(1, 1).unwrap()
    }

    /// A PS task's server and a client of it.
    fn ps_and_client() -> (TaskServer, TaskClient) {
        let spec = cluster();
        let ps = TaskId::new(Job::Ps, 0);
        let server = TaskServer::start(&spec, ps, bind_task(&spec, ps).unwrap()).unwrap();
        let client = TaskClient::connect(&spec, ps, Duration::from_secs(10)).unwrap();
        (server, client)
    }

    #[test]
    fn a_remote_recv_gives_the_in_process_bytes_in_every_format() {
        let (server, mut remote) = ps_and_client();
        let vals: Vec<f32> = (0..1000).map(|i| ((i as f32) * 0.37).sin() * 10.0 - 0.001 * i as f32).collect();
        let t = Tensor::from_vec(vals, vec![10, 100]).unwrap();
        let formats = [CommFormat::F32, CommFormat::F16, CommFormat::Bf16, CommFormat::Int8 { block: None }];
        for (step, f) in formats.into_iter().enumerate() {
            let k = key(step as u64 + 1);
            // reference: the engine's in-process transfer
            let local = LocalRendezvous::new();
            flowlab_engine::send_tensor(&local, &k, &t, f).unwrap();
            let want = flowlab_engine::recv_tensor(&local, &k, f, DType::F32, t.shape(), Duration::ZERO).unwrap();
            // the same over gRPC between two tasks
            flowlab_engine::send_tensor(server.rendezvous.as_ref(), &k, &t, f).unwrap();
            let got = remote.recv_tensor(&k, f, DType::F32, t.shape(), Duration::from_secs(5)).unwrap();
            let bits = |x: &Tensor| x.as_slice::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{f:?}");
            assert_eq!(got.dims(), t.dims());
        }
    }

    #[test]
    fn a_tensor_larger_than_grpcs_default_message_limit_crosses() {
        // 2 M floats = 8 MB, twice gRPC's usual 4 MB cap on a message: a
        // dense layer's weights of that size (e.g. 3136 x 1024 = 12.8 MB)
        // must reach the worker whole.
        let (server, mut remote) = ps_and_client();
        let n = 2 << 20;
        let t = Tensor::from_vec((0..n).map(|i| i as f32).collect::<Vec<f32>>(), vec![n]).unwrap();
        server.rendezvous.send(&key(3), t).unwrap();
        let got = remote.recv_wire(&key(3), Duration::from_secs(20)).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(got.len(), n);
        assert!(got.iter().enumerate().all(|(i, &v)| v == i as f32));
    }

    /// A stock tonic client of a task's `RecvTensor` (tonic's own codec)
    /// gets the tensor that `tensor_rpc`'s frame-by-frame reader gets.
    #[test]
    fn a_stock_grpc_client_reads_the_same_answer() {
        let (server, mut remote) = ps_and_client();
        let t = Tensor::from_vec((0..300_000).map(|i| (i as f32 * 0.1).cos()).collect::<Vec<f32>>(), vec![600, 500]).unwrap();
        server.rendezvous.send(&key(4), t.clone()).unwrap();
        server.rendezvous.send(&key(5), t.clone()).unwrap();
        let ours = remote.recv_wire(&key(4), Duration::from_secs(5)).unwrap();
        let req = RecvTensorRequest {
            step_id: 5,
            edge: "w:0".into(),
            src_device: key(5).src_device.to_string(),
            dst_device: key(5).dst_device.to_string(),
            timeout_ms: 5000,
            to: remote.to(),
        };
        let mut stock = remote.raw();
        let p = remote.runtime.block_on(stock.recv_tensor(req)).unwrap().into_inner().tensor.unwrap();
        let theirs = wire::from_proto(&p).unwrap();
        let bits = |x: &Tensor| x.as_slice::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&ours), bits(&t));
        assert_eq!(bits(&theirs), bits(&t));
        assert_eq!((ours.dims(), theirs.dims()), (t.dims(), t.dims()));
    }

    #[test]
    fn a_recv_of_another_step_never_gets_the_tensor() {
        let (server, mut remote) = ps_and_client();
        let t = Tensor::from_vec(vec![1.0f32, 2.0], vec![2]).unwrap();
        server.rendezvous.send(&key(7), t.clone()).unwrap();
        // a retried step has a new id: it waits (and times out), not steals step 7's tensor
        let e = remote.recv_wire(&key(8), Duration::from_millis(200)).unwrap_err().to_string();
        assert!(e.contains("ps:0") && e.contains("step 8"), "{e}");
        assert_eq!(remote.recv_wire(&key(7), Duration::from_secs(5)).unwrap().to_vec::<f32>().unwrap(), [1.0, 2.0]);
    }

    #[test]
    fn connecting_to_an_absent_task_ends_at_the_deadline_naming_it() {
        let spec = cluster();
        let t = Instant::now();
        let e = TaskClient::connect(&spec, TaskId::new(Job::Worker, 0), Duration::from_millis(300)).err().unwrap().to_string();
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert!(e.contains("worker:0") && e.contains(spec.address(TaskId::new(Job::Worker, 0)).unwrap()), "{e}");
    }

    #[test]
    fn a_message_from_another_cluster_or_an_older_incarnation_is_refused() {
        let spec = cluster();
        let ps = TaskId::new(Job::Ps, 0);
        let server = TaskServer::start(&spec, ps, bind_task(&spec, ps).unwrap()).unwrap();
        // another cluster: the same ps address, another worker
        let other = ClusterSpec::from_tasks([
            (ps, spec.address(ps).unwrap().to_string()),
            (TaskId::new(Job::Worker, 0), "127.0.0.1:1".to_string()),
        ])
        .unwrap();
        let t = Instant::now();
        let e = TaskClient::connect(&other, ps, Duration::from_secs(20)).err().unwrap().to_string();
        assert!(t.elapsed() < Duration::from_secs(5), "refused at once, not retried: {:?}", t.elapsed());
        assert!(e.contains("ps:0") && e.contains("another cluster") && e.contains(&format!("{:016x}", spec.fingerprint())), "{e}");

        let mut old = TaskClient::connect(&spec, ps, Duration::from_secs(10)).unwrap();
        assert_eq!(old.incarnation, server.incarnation);
        let first = server.incarnation;
        // the task restarts on its address: a new incarnation
        drop(server);
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match bind_task(&spec, ps) {
                Ok(l) => break l,
                Err(e) if Instant::now() > deadline => panic!("{e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let server = TaskServer::start(&spec, ps, listener).unwrap();
        assert_ne!(server.incarnation, first);
        let t0 = Tensor::from_vec(vec![1.0f32], vec![1]).unwrap();
        server.rendezvous.send(&key(3), t0).unwrap();
        // a client that knew the old run is refused, and the tensor stays
        let mut e = String::new();
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            // the old connection may need a retry to reach the new server
            match old.recv_wire(&key(3), Duration::from_millis(200)) {
                Err(err) if err.to_string().contains("incarnation") => {
                    e = err.to_string();
                    break;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
                Ok(t) => panic!("an old incarnation's request got {t:?}"),
            }
        }
        assert!(
            e.contains("ps:0") && e.contains(&format!("incarnation {first:016x}")) && e.contains(&format!("{:016x}", server.incarnation)) && e.contains("restarted"),
            "{e}"
        );
        let mut fresh = TaskClient::connect(&spec, ps, Duration::from_secs(10)).unwrap();
        assert_eq!(fresh.recv_wire(&key(3), Duration::from_secs(5)).unwrap().to_vec::<f32>().unwrap(), [1.0]);
    }

    /// A spec of one PS and one worker on loopback with a secret of its own.
    fn secret_spec(dir: &std::path::Path, name: &str) -> ClusterSpec {
        cluster().with_auth(crate::auth::Auth::create(&dir.join(name)).unwrap())
    }

    /// Without the cluster's secret every method is refused, and nothing in
    /// the refusal names the cluster, the task or its incarnation; with it
    /// a client works as before.
    #[test]
    fn every_method_refuses_a_client_without_the_secret_and_names_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let spec = secret_spec(dir.path(), "secret");
        let ps = TaskId::new(Job::Ps, 0);
        let server = TaskServer::start(&spec, ps, bind_task(&spec, ps).unwrap()).unwrap();
        let t = Tensor::from_vec(vec![1.0f32, 2.0], vec![2]).unwrap();
        server.rendezvous.send(&key(3), t).unwrap();
        let mut friend = TaskClient::connect(&spec, ps, Duration::from_secs(10)).unwrap();
        assert_eq!(friend.recv_wire(&key(3), Duration::from_secs(5)).unwrap().to_vec::<f32>().unwrap(), [1.0, 2.0]);

        let to = Some(Addressee { cluster: spec.fingerprint(), incarnation: server.incarnation });
        let rt = client_runtime().unwrap();
        let _in_runtime = rt.enter();
        let other = secret_spec(dir.path(), "other");
        for (who, auth) in [("no secret", None), ("another secret", other.auth())] {
            let channel = AuthChannel::new(endpoint(&spec, ps, Duration::from_secs(5)).unwrap().connect_lazy(), auth);
            let mut c = worker_client(channel.clone(), usize::MAX);
            let codes: Vec<(&str, std::result::Result<(), Status>)> = rt.block_on(async {
                vec![
                    ("GetStatus", c.get_status(GetStatusRequest { to }).await.map(drop)),
                    ("RegisterGraph", c.register_graph(RegisterGraphRequest { to, graph_json: "{}".into(), ..Default::default() }).await.map(drop)),
                    ("RunGraph", c.run_graph(RunGraphRequest { to, handle: "1".into(), step_id: u64::MAX, ..Default::default() }).await.map(drop)),
                    ("AbortStep", c.abort_step(AbortStepRequest { to, step_id: 3, reason: "x".into() }).await.map(drop)),
                    ("RecvTensor", {
                        let req = RecvTensorRequest { step_id: 3, edge: "w:0".into(), src_device: key(3).src_device.to_string(), dst_device: key(3).dst_device.to_string(), timeout_ms: 100, to };
                        tensor_rpc::call(channel.clone(), &req, usize::MAX).await.map(drop)
                    }),
                ]
            });
            for (method, r) in codes {
                let s = r.expect_err(method);
                assert_eq!(s.code(), tonic::Code::Unauthenticated, "{who}: {method}: {s:?}");
                let m = s.message();
                for secret in [format!("{:016x}", spec.fingerprint()), format!("{:016x}", server.incarnation), "ps".into(), "127.0.0.1".into()] {
                    assert!(!m.contains(&secret), "{who}: {method}: `{m}` names {secret}");
                }
            }
        }
        // the tensor a stranger asked for is still there, for the friend
        server.rendezvous.send(&key(4), Tensor::from_vec(vec![5.0f32], vec![1]).unwrap()).unwrap();
        assert_eq!(friend.recv_wire(&key(3), Duration::from_millis(300)).is_err(), true, "taken once already");
        assert_eq!(friend.recv_wire(&key(4), Duration::from_secs(5)).unwrap().to_vec::<f32>().unwrap(), [5.0]);
        // a client's connect says why at once, instead of retrying
        let t = Instant::now();
        let e = TaskClient::connect(&cluster_without_secret(&spec), ps, Duration::from_secs(20)).err().unwrap().to_string();
        assert!(t.elapsed() < Duration::from_secs(5) && e.contains("missing or wrong credentials") && e.contains("names none"), "{e}");
    }

    /// `spec`'s tasks without its secret.
    fn cluster_without_secret(spec: &ClusterSpec) -> ClusterSpec {
        ClusterSpec::from_tasks(spec.tasks().map(|(t, a)| (t, a.to_string())).collect::<Vec<_>>()).unwrap()
    }

    /// A request over the cluster's limit is refused from its header with
    /// RESOURCE_EXHAUSTED, and the refusal does not echo it.
    #[test]
    fn requests_over_the_message_limit_are_refused_without_an_echo() {
        let dir = tempfile::tempdir().unwrap();
        let base = cluster();
        let yaml = format!("{}max_message_mb: 1\n", base.to_yaml());
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, yaml).unwrap();
        let spec = ClusterSpec::from_file(&file).unwrap();
        assert_eq!(spec.max_message_bytes(), 1 << 20);
        let ps = TaskId::new(Job::Ps, 0);
        let _server = TaskServer::start(&spec, ps, bind_task(&spec, ps).unwrap()).unwrap();
        let rt = client_runtime().unwrap();
        let _in_runtime = rt.enter();
        let channel = AuthChannel::new(endpoint(&spec, ps, Duration::from_secs(5)).unwrap().connect_lazy(), None);
        let mut c = worker_client(channel.clone(), usize::MAX);
        let to = Some(Addressee { cluster: spec.fingerprint(), incarnation: 0 });
        let marker = "graph-payload-";
        let big = marker.repeat((2 << 20) / marker.len());
        let s = rt.block_on(c.register_graph(RegisterGraphRequest { to, graph_json: big.clone(), ..Default::default() })).unwrap_err();
        assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
        assert!(!s.message().contains(marker), "{}", &s.message()[..s.message().len().min(200)]);
        let req = RecvTensorRequest { step_id: 1, edge: big, to, ..Default::default() };
        let s = rt.block_on(tensor_rpc::call(channel, &req, usize::MAX)).unwrap_err();
        assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
        assert!(!s.message().contains(marker) && s.message().contains("at most 65536 bytes"), "{}", &s.message()[..s.message().len().min(200)]);
    }

    /// A step id no master reaches is refused, so the next master's ids
    /// cannot wrap past u64::MAX.
    #[test]
    fn a_step_id_beyond_any_masters_is_refused_and_not_remembered() {
        let (_server, remote) = ps_and_client();
        let mut c = remote.raw();
        let req = RunGraphRequest { to: remote.to(), handle: "none".into(), step_id: u64::MAX, ..Default::default() };
        let s = remote.block_on(c.run_graph(req)).unwrap_err();
        assert!(s.code() == tonic::Code::InvalidArgument && s.message().contains(&format!("step id {} is above {MAX_STEP_ID}", u64::MAX)), "{s:?}");
        let status = remote.block_on(c.get_status(GetStatusRequest { to: remote.to() })).unwrap().into_inner();
        assert_eq!(status.last_step_id, 0);
    }
}
