//! Step timelines across task processes: each task answers a traced
//! `RunGraph` with its partition's nodes and transfer ends
//! ([`PartitionTimeline`]); the master keeps those of the steps it records
//! for them to be laid on one time axis ([`StepStats::merge_partitions`]): a
//! Chrome / Perfetto trace with one process per task device and each
//! transfer between tasks drawn from the send to the arrival.

use flowlab_engine::{NodeStats, PartitionTimeline, StepStats, TransferEnd, TransferStats};
use parking_lot::Mutex;
use std::time::Instant;

use crate::pb;

fn end_to_proto(e: &TransferEnd) -> pb::TransferEnd {
    pb::TransferEnd {
        edge: e.edge.clone(),
        send_device: e.send_device.clone(),
        recv_device: e.recv_device.clone(),
        format: e.format.clone(),
        bytes: e.bytes,
        at_us: e.at_us,
    }
}

fn end_from_proto(e: pb::TransferEnd) -> TransferEnd {
    TransferEnd { edge: e.edge, send_device: e.send_device, recv_device: e.recv_device, format: e.format, bytes: e.bytes, at_us: e.at_us }
}

/// A task's timeline of one step as it travels in the `RunGraph` answer.
/// Transfers with both ends in the task (none in a one-device partition)
/// travel as a sent and a received end.
pub(crate) fn to_proto(t: &PartitionTimeline) -> pb::StepTimeline {
    let local = t.stats.transfers.iter();
    pb::StepTimeline {
        step_id: t.step_id,
        start_unix_us: t.start_unix_us,
        total_us: t.stats.total_us,
        nodes: t
            .stats
            .nodes
            .iter()
            .map(|n| pb::NodeExecStats {
                node: n.node.clone(),
                op: n.op.clone(),
                start_us: n.start_us,
                end_us: n.end_us,
                thread: u32::try_from(n.thread).unwrap_or(u32::MAX),
                output_bytes: n.output_bytes as u64,
            })
            .collect(),
        sent: t.sent.iter().map(end_to_proto).chain(local.clone().map(|x| end_to_proto(&half(x, true)))).collect(),
        received: t.received.iter().map(end_to_proto).chain(local.map(|x| end_to_proto(&half(x, false)))).collect(),
        device: t.device.clone(),
    }
}

fn half(t: &TransferStats, sent: bool) -> TransferEnd {
    TransferEnd {
        edge: t.edge.clone(),
        send_device: t.send_device.clone(),
        recv_device: t.recv_device.clone(),
        format: t.format.clone(),
        bytes: if sent { t.bytes } else { 0 },
        at_us: if sent { t.start_us } else { t.end_us },
    }
}

pub(crate) fn from_proto(p: pb::StepTimeline) -> PartitionTimeline {
    let device = p.device;
    PartitionTimeline {
        step_id: p.step_id,
        start_unix_us: p.start_unix_us,
        stats: StepStats {
            nodes: p
                .nodes
                .into_iter()
                .map(|n| NodeStats {
                    node: n.node,
                    op: n.op,
                    start_us: n.start_us,
                    end_us: n.end_us,
                    thread: n.thread as usize,
                    output_bytes: usize::try_from(n.output_bytes).unwrap_or(usize::MAX),
                    device: device.clone(),
                })
                .collect(),
            total_us: p.total_us,
            transfers: Vec::new(),
            peak_live_tensors: 0,
        },
        sent: p.sent.into_iter().map(end_from_proto).collect(),
        received: p.received.into_iter().map(end_from_proto).collect(),
        device,
    }
}

/// The device name of the master's own part of a step's timeline.
pub const MASTER_DEVICE: &str = "/job:master";

/// The master's part of a recorded step, as a partition of device
/// [`MASTER_DEVICE`]: from the start of its `run` (`started`: the instant
/// and the wall clock), a `RunGraph` node per task call from when the
/// master's runtime sent it to when its answer was in (`calls`: the
/// task's name and those two instants), the step ending with the last
/// answer.
pub(crate) fn master_part(step_id: u64, started: (Instant, f64), calls: impl Iterator<Item = (String, (Instant, Instant))>) -> PartitionTimeline {
    let (t0, start_unix_us) = started;
    let us = |t: Instant| t.saturating_duration_since(t0).as_secs_f64() * 1e6;
    let nodes: Vec<NodeStats> = calls
        .map(|(task, (sent, done))| NodeStats {
            node: format!("RunGraph {task}"),
            op: "RunGraph".into(),
            start_us: us(sent),
            end_us: us(done),
            thread: 0,
            output_bytes: 0,
            device: MASTER_DEVICE.into(),
        })
        .collect();
    let total_us = nodes.iter().map(|n| n.end_us).fold(0.0, f64::max);
    PartitionTimeline {
        step_id,
        device: MASTER_DEVICE.into(),
        start_unix_us,
        stats: StepStats { nodes, total_us, ..Default::default() },
        sent: Vec::new(),
        received: Vec::new(),
    }
}

/// One recorded step seen from its first worker (the lowest worker task):
/// what the step's phases are read from.
pub struct TracedStep<'a> {
    pub worker: &'a PartitionTimeline,
    /// The master's part, when it was recorded.
    pub master: Option<&'a PartitionTimeline>,
    /// When the step's last task partition ended, on the wall clock
    /// (microseconds since the Unix epoch).
    pub tasks_end_unix_us: f64,
}

impl TracedStep<'_> {
    /// The master's dispatch around the worker, seconds: from its start
    /// to the worker's partition starting, and from the last task's end to
    /// its own (NaN without the master's part).
    pub fn dispatch_s(&self) -> (f64, f64) {
        match self.master {
            Some(m) => ((self.worker.start_unix_us - m.start_unix_us) * 1e-6, (m.start_unix_us + m.stats.total_us - self.tasks_end_unix_us) * 1e-6),
            None => (f64::NAN, f64::NAN),
        }
    }
}

/// The recorded steps with a worker partition, in step order.
pub fn traced_steps(parts: &[PartitionTimeline]) -> Vec<TracedStep<'_>> {
    let mut steps: std::collections::BTreeMap<u64, Vec<&PartitionTimeline>> = std::collections::BTreeMap::new();
    for p in parts {
        steps.entry(p.step_id).or_default().push(p);
    }
    // a worker partition's task number (worker:10 is after worker:2)
    let worker_task = |p: &PartitionTimeline| flowlab_engine::DeviceName::parse(&p.device).ok().filter(|d| d.job.as_deref() == Some("worker")).and_then(|d| d.task);
    steps
        .into_values()
        .filter_map(|ps| {
            let worker = ps.iter().filter_map(|p| worker_task(p).map(|t| (t, *p))).min_by_key(|(t, _)| *t)?.1;
            let master = ps.iter().copied().find(|p| p.device == MASTER_DEVICE);
            let tasks_end_unix_us = ps.iter().filter(|p| p.device != MASTER_DEVICE).map(|p| p.start_unix_us + p.stats.total_us).fold(f64::NAN, f64::max);
            Some(TracedStep { worker, master, tasks_end_unix_us })
        })
        .collect()
}

/// The master's recording: `None` when off, else the partitions of every
/// step that started while it was on.
#[derive(Default)]
pub(crate) struct Recorder {
    parts: Mutex<Option<Vec<PartitionTimeline>>>,
}

impl Recorder {
    pub(crate) fn on(&self) -> bool {
        self.parts.lock().is_some()
    }

    pub(crate) fn start(&self) {
        let mut p = self.parts.lock();
        if p.is_none() {
            *p = Some(Vec::new());
        }
    }

    /// Adds a recorded step's partitions (dropped if recording stopped
    /// meanwhile).
    pub(crate) fn add(&self, parts: impl IntoIterator<Item = PartitionTimeline>) {
        if let Some(v) = self.parts.lock().as_mut() {
            v.extend(parts);
        }
    }

    /// Stops recording; what was recorded.
    pub(crate) fn stop(&self) -> Option<Vec<PartitionTimeline>> {
        self.parts.lock().take()
    }
}
