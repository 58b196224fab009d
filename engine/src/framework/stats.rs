//! Step statistics: per node, start and end time, thread and output bytes,
//! exportable as Chrome / Perfetto trace JSON (the `traceEvents` format that
//! chrome://tracing and ui.perfetto.dev load).

use crate::error::Result;
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

/// One end of a transfer between processes, as the process at that end saw
/// it: the sender's start or the receiver's arrival.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TransferEnd {
    /// "node:output" ("node:control" for a control edge).
    pub edge: String,
    pub send_device: String,
    pub recv_device: String,
    pub format: String,
    /// Bytes on the wire (known at the sender; 0 at the receiver).
    pub bytes: u64,
    /// Microseconds from the start of that process's step.
    pub at_us: f64,
}

/// What one partition did in one traced step of a distributed run: its
/// nodes, and the ends of its transfers to and from other processes, with
/// the host's wall clock at the step's start so that the partitions of
/// several processes can be laid on one time axis
/// ([`StepStats::merge_partitions`]).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PartitionTimeline {
    pub step_id: u64,
    /// The device the partition ran on (every node's).
    pub device: String,
    /// Microseconds since the Unix epoch at the step's start (the instant
    /// `stats` times are measured from).
    pub start_unix_us: f64,
    pub stats: StepStats,
    /// Sends whose receiver ran in another process.
    pub sent: Vec<TransferEnd>,
    /// Receives whose sender ran in another process.
    pub received: Vec<TransferEnd>,
}

/// Microseconds since the Unix epoch at `t`, read through one pairing of
/// the wall clock with the monotonic clock per process: a pair read at
/// each step would be off by however long the thread is preempted between
/// its two reads (hundreds of microseconds on a loaded 2-core host, enough
/// to draw a receive before its send), while one anchor gives every task
/// of one process the same offset exactly.
pub fn unix_us_at(t: std::time::Instant) -> f64 {
    static ANCHOR: std::sync::OnceLock<(std::time::Instant, f64)> = std::sync::OnceLock::new();
    let (i0, u0) = *ANCHOR.get_or_init(|| {
        let i = std::time::Instant::now();
        (i, std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1e6))
    });
    match t.checked_duration_since(i0) {
        Some(d) => u0 + d.as_secs_f64() * 1e6,
        None => u0 - i0.duration_since(t).as_secs_f64() * 1e6,
    }
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
    /// The partitions of distributed steps on one time axis: every node
    /// shifted by its process's start relative to the earliest, each send
    /// paired with its receive (same step, edge and devices) as a transfer
    /// from the send's start to the arrival. The clocks are the processes'
    /// wall clocks: exact between processes of one host, as good as the
    /// hosts' clock synchronisation otherwise. An end whose other end is not
    /// among `parts` (a step of another task not traced) is left out.
    pub fn merge_partitions(parts: &[PartitionTimeline]) -> StepStats {
        let origin = parts.iter().map(|p| p.start_unix_us).fold(f64::INFINITY, f64::min);
        let mut out = StepStats::default();
        // (step, edge, sender, receiver) -> (start, bytes, format)
        type Sends<'a> = std::collections::HashMap<(u64, &'a str, &'a str, &'a str), (f64, u64, &'a str)>;
        let mut sends: Sends = Sends::new();
        for p in parts {
            let shift = p.start_unix_us - origin;
            for n in &p.stats.nodes {
                out.nodes.push(NodeStats { start_us: n.start_us + shift, end_us: n.end_us + shift, ..n.clone() });
            }
            for t in &p.stats.transfers {
                out.transfers.push(TransferStats { start_us: t.start_us + shift, end_us: t.end_us + shift, ..t.clone() });
            }
            for e in &p.sent {
                sends.insert((p.step_id, &e.edge, &e.send_device, &e.recv_device), (e.at_us + shift, e.bytes, &e.format));
            }
            out.total_us = out.total_us.max(shift + p.stats.total_us);
            out.peak_live_tensors = out.peak_live_tensors.max(p.stats.peak_live_tensors);
        }
        for p in parts {
            let shift = p.start_unix_us - origin;
            for e in &p.received {
                if let Some(&(start, bytes, format)) = sends.get(&(p.step_id, e.edge.as_str(), e.send_device.as_str(), e.recv_device.as_str())) {
                    out.transfers.push(TransferStats {
                        edge: e.edge.clone(),
                        send_device: e.send_device.clone(),
                        recv_device: e.recv_device.clone(),
                        format: format.to_string(),
                        bytes,
                        start_us: start,
                        end_us: e.at_us + shift,
                    });
                }
            }
        }
        out.nodes.sort_by(|a, b| a.end_us.total_cmp(&b.end_us));
        out.transfers.sort_by(|a, b| a.end_us.total_cmp(&b.end_us));
        out
    }

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
        crate::files::write_atomic(path, self.to_chrome_trace().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, device: &str, start_us: f64, end_us: f64) -> NodeStats {
        NodeStats { node: name.into(), op: "Op".into(), start_us, end_us, thread: 0, output_bytes: 4, device: device.into() }
    }

    fn end(edge: &str, bytes: u64, at_us: f64) -> TransferEnd {
        TransferEnd { edge: edge.into(), send_device: "/job:ps".into(), recv_device: "/job:worker".into(), format: "f16".into(), bytes, at_us }
    }

    /// Two processes whose steps began 500 us apart: the later one's
    /// times move by 500, a send at 10 us on the first and its arrival at
    /// 20 us on the second make one transfer from 10 to 520, and the ends
    /// without a partner (another step's, an edge never sent) are left out.
    #[test]
    fn partitions_merge_on_the_earliest_start_and_sends_meet_their_receives() {
        let ps = PartitionTimeline {
            step_id: 7,
            device: "/job:ps".into(),
            start_unix_us: 1_000.0,
            stats: StepStats { nodes: vec![node("send_w", "/job:ps", 10.0, 12.0)], total_us: 40.0, ..Default::default() },
            sent: vec![end("w:0", 1_024, 10.0), end("b:0", 8, 11.0)],
            received: vec![],
        };
        let worker = PartitionTimeline {
            step_id: 7,
            device: "/job:worker".into(),
            start_unix_us: 1_500.0,
            stats: StepStats { nodes: vec![node("recv_w", "/job:worker", 19.0, 20.0), node("matmul", "/job:worker", 20.0, 90.0)], total_us: 100.0, ..Default::default() },
            sent: vec![],
            received: vec![end("w:0", 0, 20.0), TransferEnd { edge: "x:0".into(), ..end("w:0", 0, 30.0) }],
        };
        let other_step = PartitionTimeline { step_id: 8, start_unix_us: 1_500.0, received: vec![end("b:0", 0, 5.0)], ..Default::default() };
        for parts in [vec![ps.clone(), worker.clone()], vec![worker.clone(), ps.clone(), other_step]] {
            let m = StepStats::merge_partitions(&parts);
            let t: Vec<_> = m.transfers.iter().filter(|t| t.edge == "w:0").collect();
            assert_eq!(t.len(), 1, "{m:?}");
            assert_eq!((t[0].start_us, t[0].end_us, t[0].bytes, t[0].format.as_str()), (10.0, 520.0, 1_024, "f16"));
            assert!(m.transfers.iter().all(|t| t.edge == "w:0"), "unpaired ends are left out: {m:?}");
            let at = |name: &str| m.nodes.iter().find(|n| n.node == name).map(|n| (n.start_us, n.end_us));
            assert_eq!(at("send_w"), Some((10.0, 12.0)));
            assert_eq!(at("matmul"), Some((520.0, 590.0)));
            // the later process's step ends at 500 + 100
            assert_eq!(m.total_us, 600.0);
            assert!(m.nodes.windows(2).all(|w| w[0].end_us <= w[1].end_us));
        }
    }
}
