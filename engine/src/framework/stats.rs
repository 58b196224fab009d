//! Step statistics: per node, start and end time, thread and output bytes,
//! exportable as Chrome / Perfetto trace JSON (the `traceEvents` format that
//! chrome://tracing and ui.perfetto.dev load).

use crate::error::{EngineError, Result};
use serde::Serialize;
use std::path::Path;

/// Timing of one node in one step.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct NodeStats {
    pub node: String,
    pub op: String,
    /// Microseconds from the start of the step.
    pub start_us: f64,
    pub end_us: f64,
    /// Index of the worker thread that ran it (0 for the caller's thread).
    pub thread: usize,
    /// Bytes of all its outputs.
    pub output_bytes: usize,
    /// Full name of the device that ran it.
    pub device: String,
}

/// One cross-device transfer of one step: from the Send's start on the
/// source device to the end of the Recv on the destination device.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TransferStats {
    /// The transferred tensor, "node:output" ("node:control" for a control edge).
    pub edge: String,
    pub send_device: String,
    pub recv_device: String,
    /// The [`CommFormat`](flowlab_hw::CommFormat) name it travelled in.
    pub format: String,
    /// Bytes on the wire (after encoding).
    pub bytes: u64,
    /// Microseconds from the start of the step.
    pub start_us: f64,
    pub end_us: f64,
}

/// Transfer totals of a session since it was created.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct CommStats {
    /// Cross-device transfers completed (sent).
    pub transfers: u64,
    /// Bytes on the wire, after f16/bf16/int8 encoding.
    pub bytes_sent: u64,
    /// What the same tensors would have taken as they are.
    pub bytes_f32: u64,
}

/// Statistics of one `Session::run`.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct StepStats {
    /// One entry per executed node, in completion order.
    pub nodes: Vec<NodeStats>,
    /// Wall time of the step in microseconds.
    pub total_us: f64,
    /// Every cross-device transfer of the step, in order of arrival.
    pub transfers: Vec<TransferStats>,
    /// Graphs with control flow only: the most tensors the executor held
    /// at once in its per-iteration input slots (0 on the plain path).
    pub peak_live_tensors: usize,
}

/// One Trace Event Format event; fields a phase does not use are left out.
#[derive(Serialize)]
struct TraceEvent {
    name: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    cat: String,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: usize,
    tid: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'static str>,
    args: serde_json::Value,
}

#[derive(Serialize)]
struct Trace {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<TraceEvent>,
    #[serde(rename = "displayTimeUnit")]
    display_time_unit: &'static str,
}

/// Thread ids of the transfer tracks inside a device's process.
const TID_SENDS: usize = 10_000;
const TID_RECVS: usize = 10_001;

fn meta(name: &'static str, pid: usize, tid: usize, value: &str) -> TraceEvent {
    TraceEvent {
        name: name.into(),
        cat: String::new(),
        ph: "M",
        ts: None,
        dur: None,
        pid,
        tid,
        id: None,
        bp: None,
        args: serde_json::json!({ "name": value }),
    }
}

impl StepStats {
    /// The Chrome trace JSON text: one process per device, one complete
    /// ("X") event per node on its worker thread's track, and each transfer
    /// as a span on the sender's "sends" and the receiver's "recvs" track
    /// joined by a flow arrow.
    pub fn to_chrome_trace(&self) -> String {
        Self::chrome_trace_of(std::slice::from_ref(self))
    }

    /// One trace of several steps laid end to end (step i shifted by the
    /// total time of the steps before it).
    pub fn chrome_trace_of(steps: &[StepStats]) -> String {
        let mut events = Vec::new();
        let mut pids: Vec<String> = Vec::new();
        let mut tids: Vec<(usize, usize)> = Vec::new();
        // A one-device step without transfers keeps the plain node events.
        let named = steps.iter().any(|s| !s.transfers.is_empty() || s.nodes.iter().any(|n| s.nodes.first().is_some_and(|f| f.device != n.device)));
        let mut pid_of = |d: &str, events: &mut Vec<TraceEvent>| -> usize {
            match pids.iter().position(|p| p == d) {
                Some(p) => p,
                None if !named => {
                    pids.push(d.to_string());
                    pids.len() - 1
                }
                None => {
                    pids.push(d.to_string());
                    let p = pids.len() - 1;
                    let label = if d.is_empty() { "device" } else { d };
                    events.push(meta("process_name", p, 0, label));
                    events.push(meta("thread_name", p, TID_SENDS, "transfers out"));
                    events.push(meta("thread_name", p, TID_RECVS, "transfers in"));
                    p
                }
            }
        };
        let mut offset = 0.0;
        let mut flow = 0;
        for s in steps {
            for n in &s.nodes {
                let pid = pid_of(&n.device, &mut events);
                if named && !tids.contains(&(pid, n.thread)) {
                    tids.push((pid, n.thread));
                    let label = if n.thread == 0 { "driver".to_string() } else { format!("worker {}", n.thread) };
                    events.push(meta("thread_name", pid, n.thread, &label));
                }
                events.push(TraceEvent {
                    name: n.node.clone(),
                    cat: n.op.clone(),
                    ph: "X",
                    ts: Some(offset + n.start_us),
                    dur: Some((n.end_us - n.start_us).max(0.0)),
                    pid,
                    tid: n.thread,
                    id: None,
                    bp: None,
                    args: serde_json::json!({ "op": n.op, "output_bytes": n.output_bytes }),
                });
            }
            for t in &s.transfers {
                let (sp, rp) = (pid_of(&t.send_device, &mut events), pid_of(&t.recv_device, &mut events));
                let (ts, dur) = (offset + t.start_us, (t.end_us - t.start_us).max(0.0));
                let args = serde_json::json!({
                    "edge": t.edge, "from": t.send_device, "to": t.recv_device, "format": t.format, "bytes": t.bytes,
                });
                let span = |pid, tid| TraceEvent {
                    name: t.edge.clone(),
                    cat: "transfer".into(),
                    ph: "X",
                    ts: Some(ts),
                    dur: Some(dur),
                    pid,
                    tid,
                    id: None,
                    bp: None,
                    args: args.clone(),
                };
                events.push(span(sp, TID_SENDS));
                events.push(span(rp, TID_RECVS));
                flow += 1;
                let arrow = |ph, pid, tid, ts| TraceEvent {
                    name: t.edge.clone(),
                    cat: "transfer".into(),
                    ph,
                    ts: Some(ts),
                    dur: None,
                    pid,
                    tid,
                    id: Some(flow),
                    bp: Some("e"),
                    args: serde_json::json!({}),
                };
                events.push(arrow("s", sp, TID_SENDS, ts));
                events.push(arrow("f", rp, TID_RECVS, ts + dur / 2.0));
            }
            offset += s.total_us;
        }
        let t = Trace { trace_events: events, display_time_unit: "ms" };
        serde_json::to_string(&t).unwrap_or_else(|_| "{\"traceEvents\":[]}".into())
    }

    /// Writes [`to_chrome_trace`](Self::to_chrome_trace) to `path`.
    pub fn write_chrome_trace(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.to_chrome_trace()).map_err(|e| EngineError::io(path, e))
    }
}
