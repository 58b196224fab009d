//! The worker service of a task and its remote rendezvous.
//!
//! Contract: a task's Send ops leave tensors in the task's own
//! [`LocalRendezvous`]; a consumer on another task asks for one with the
//! `RecvTensor` call, keyed by (step id, edge, source and destination
//! device), which waits on the producer's rendezvous up to the caller's
//! timeout. A key is used once, so a retried step (a new step id) never
//! receives a tensor of an older step. The tensor travels in the wire form
//! the Send chose (f32, or the f16/bf16/int8 bytes), and the consumer
//! decodes it with the engine's own `recv_tensor`, so a remote transfer gives
//! exactly the bytes an in-process one does.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowlab_engine::{DType, DeviceName, LocalRendezvous, Rendezvous, RendezvousKey, Shape, Tensor};
use flowlab_hw::CommFormat;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};

use crate::cluster::{ClusterSpec, TaskId};
use crate::error::{Result, RuntimeError};
use crate::pb::worker_client::WorkerClient;
use crate::pb::worker_server::{Worker, WorkerServer};
use crate::pb::{RecvTensorRequest, RecvTensorResponse};
use crate::wire;

/// The gRPC side of one task: answers `RecvTensor` from its rendezvous.
pub struct WorkerService {
    rendezvous: Arc<LocalRendezvous>,
}

fn key_of(r: &RecvTensorRequest) -> std::result::Result<RendezvousKey, Status> {
    let dev = |s: &str| DeviceName::parse(s).map_err(|e| Status::invalid_argument(format!("device `{s}`: {e}")));
    Ok(RendezvousKey { src_device: dev(&r.src_device)?, dst_device: dev(&r.dst_device)?, edge: r.edge.clone(), step_id: r.step_id })
}

#[tonic::async_trait]
impl Worker for WorkerService {
    async fn recv_tensor(&self, req: Request<RecvTensorRequest>) -> std::result::Result<Response<RecvTensorResponse>, Status> {
        let r = req.into_inner();
        let key = key_of(&r)?;
        let timeout = Duration::from_millis(r.timeout_ms);
        let rdv = Arc::clone(&self.rendezvous);
        // the local rendezvous blocks its caller: keep it off the async threads
        let t = tokio::task::spawn_blocking(move || rdv.recv(&key, timeout))
            .await
            .map_err(|e| Status::internal(format!("receive task failed: {e}")))?
            .map_err(|e| Status::deadline_exceeded(e.to_string()))?;
        let tensor = wire::to_proto(&t).map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(RecvTensorResponse { tensor: Some(tensor) }))
    }
}

/// A running task server: its rendezvous and the runtime that serves it.
/// Dropping it stops the server.
pub struct TaskServer {
    pub rendezvous: Arc<LocalRendezvous>,
    pub address: std::net::SocketAddr,
    runtime: tokio::runtime::Runtime,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TaskServer {
    /// Serves `listener` (from [`crate::bind_task`]) on a runtime of its own.
    pub fn start(listener: TcpListener) -> Result<TaskServer> {
        let io = |e: std::io::Error| RuntimeError::Engine { message: format!("task server: {e}") };
        let address = listener.local_addr().map_err(io)?;
        listener.set_nonblocking(true).map_err(io)?;
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(io)?;
        let rendezvous = Arc::new(LocalRendezvous::new());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let svc = WorkerService { rendezvous: Arc::clone(&rendezvous) };
        let listener = {
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(io)?
        };
        runtime.spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .tcp_nodelay(true)
                .add_service(WorkerServer::new(svc))
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(TaskServer { rendezvous, address, runtime, stop: Some(stop) })
    }

    /// Blocks the calling thread while the server runs (for `flowlab server`).
    pub fn wait(mut self) {
        let stop = self.stop.take();
        self.runtime.block_on(std::future::pending::<()>());
        drop(stop);
    }
}

impl Drop for TaskServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// The consumer's end of transfers from one producer task.
pub struct RemoteRendezvous {
    task: TaskId,
    address: String,
    client: WorkerClient<Channel>,
    runtime: tokio::runtime::Runtime,
}

impl RemoteRendezvous {
    /// Connects to `task`, retrying until `deadline` (the task may still be
    /// starting); the error names task and address.
    pub fn connect(spec: &ClusterSpec, task: TaskId, deadline: Duration) -> Result<RemoteRendezvous> {
        let address = spec.address(task)?.to_string();
        let rpc = |message: String| RuntimeError::Rpc { task: task.to_string(), address: address.clone(), message };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| rpc(format!("runtime: {e}")))?;
        let endpoint = Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| rpc(format!("not a valid endpoint: {e}")))?
            .tcp_nodelay(true)
            .connect_timeout(deadline);
        let start = Instant::now();
        let mut pause = Duration::from_millis(10);
        let mut attempts = 0u32;
        let client = loop {
            attempts += 1;
            match runtime.block_on(endpoint.connect()) {
                Ok(ch) => break WorkerClient::new(ch),
                Err(e) if start.elapsed() >= deadline => {
                    return Err(rpc(format!(
                        "not reachable after {:?} ({attempts} attempts); last error: {e:?}",
                        start.elapsed()
                    )));
                }
                Err(_) => {
                    std::thread::sleep(pause.min(deadline.saturating_sub(start.elapsed())));
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
            }
        };
        Ok(RemoteRendezvous { task, address, client, runtime })
    }

    /// The wire tensor the producer task sent under `key`, waiting at most `timeout`.
    pub fn recv_wire(&mut self, key: &RendezvousKey, timeout: Duration) -> Result<Tensor> {
        let req = RecvTensorRequest {
            step_id: key.step_id,
            edge: key.edge.clone(),
            src_device: key.src_device.to_string(),
            dst_device: key.dst_device.to_string(),
            timeout_ms: timeout.as_millis().min(u128::from(u64::MAX)) as u64,
        };
        let mut client = self.client.clone();
        let resp = self.runtime.block_on(async move {
            tokio::time::timeout(timeout + Duration::from_secs(5), client.recv_tensor(req)).await
        });
        let rpc = |message: String| RuntimeError::Rpc { task: self.task.to_string(), address: self.address.clone(), message };
        let resp = resp
            .map_err(|_| rpc(format!("RecvTensor {key} got no answer in time")))?
            .map_err(|s| rpc(format!("RecvTensor {key}: {}", s.message())))?;
        let p = resp.into_inner().tensor.ok_or_else(|| rpc(format!("RecvTensor {key}: answer without a tensor")))?;
        wire::from_proto(&p)
    }

    /// The tensor under `key` decoded from `format` by the engine's own
    /// `recv_tensor` (what a Recv op of that dtype and shape would get).
    pub fn recv_tensor(&mut self, key: &RendezvousKey, format: CommFormat, dtype: DType, shape: &Shape, timeout: Duration) -> Result<Tensor> {
        let wire = self.recv_wire(key, timeout)?;
        let local = LocalRendezvous::new();
        let engine = |e: flowlab_engine::EngineError| RuntimeError::Engine { message: e.to_string() };
        local.send(key, wire).map_err(engine)?;
        flowlab_engine::recv_tensor(&local, key, format, dtype, shape, Duration::ZERO).map_err(engine)
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
        let port = || TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        ClusterSpec::from_tasks([
            (TaskId::new(Job::Ps, 0), format!("127.0.0.1:{}", port())),
            (TaskId::new(Job::Worker, 0), format!("127.0.0.1:{}", port())),
        ])
        .unwrap()
    }

    #[test]
    fn a_remote_recv_gives_the_in_process_bytes_in_every_format() {
        let spec = cluster();
        let ps = TaskId::new(Job::Ps, 0);
        let server = TaskServer::start(bind_task(&spec, ps).unwrap()).unwrap();
        let mut remote = RemoteRendezvous::connect(&spec, ps, Duration::from_secs(10)).unwrap();
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
    fn a_recv_of_another_step_never_gets_the_tensor() {
        let spec = cluster();
        let ps = TaskId::new(Job::Ps, 0);
        let server = TaskServer::start(bind_task(&spec, ps).unwrap()).unwrap();
        let mut remote = RemoteRendezvous::connect(&spec, ps, Duration::from_secs(10)).unwrap();
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
        let e = RemoteRendezvous::connect(&spec, TaskId::new(Job::Worker, 0), Duration::from_millis(300)).err().unwrap().to_string();
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert!(e.contains("worker:0") && e.contains(spec.address(TaskId::new(Job::Worker, 0)).unwrap()), "{e}");
    }
}
