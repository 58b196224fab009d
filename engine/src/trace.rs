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
}

/// Statistics of one `Session::run`.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct StepStats {
    /// One entry per executed node, in completion order.
    pub nodes: Vec<NodeStats>,
    /// Wall time of the step in microseconds.
    pub total_us: f64,
}

#[derive(Serialize)]
struct TraceEvent<'a> {
    name: &'a str,
    cat: &'a str,
    ph: &'static str,
    ts: f64,
    dur: f64,
    pid: u32,
    tid: usize,
    args: TraceArgs<'a>,
}

#[derive(Serialize)]
struct TraceArgs<'a> {
    op: &'a str,
    output_bytes: usize,
}

#[derive(Serialize)]
struct Trace<'a> {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<TraceEvent<'a>>,
    #[serde(rename = "displayTimeUnit")]
    display_time_unit: &'static str,
}

impl StepStats {
    /// The Chrome trace JSON text: one complete ("X") event per node.
    pub fn to_chrome_trace(&self) -> String {
        Self::chrome_trace_of(std::slice::from_ref(self))
    }

    /// One trace of several steps laid end to end (step i shifted by the
    /// total time of the steps before it).
    pub fn chrome_trace_of(steps: &[StepStats]) -> String {
        let mut events = Vec::new();
        let mut offset = 0.0;
        for s in steps {
            for n in &s.nodes {
                events.push(TraceEvent {
                    name: &n.node,
                    cat: &n.op,
                    ph: "X",
                    ts: offset + n.start_us,
                    dur: (n.end_us - n.start_us).max(0.0),
                    pid: 0,
                    tid: n.thread,
                    args: TraceArgs { op: &n.op, output_bytes: n.output_bytes },
                });
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
