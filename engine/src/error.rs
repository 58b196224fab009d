//! The engine's one error type. Every variant that concerns a graph node names
//! the node and its op, and carries the shapes involved, so a message read at
//! the CLI says where the problem is without a debugger.

use thiserror::Error;

/// Errors of the dataflow engine.
#[derive(Debug, Error)]
pub enum EngineError {
    /// Shape inference (or a kernel) found incompatible shapes.
    #[error("node '{node}' ({op}): shape mismatch: {detail}")]
    Shape { node: String, op: String, detail: String },
    /// A misuse of cond / while_loop, or a control-flow graph the executor cannot run.
    #[error("control flow at node '{node}': {detail}")]
    ControlFlow { node: String, detail: String },
    /// An input of the wrong element type.
    #[error("node '{node}' ({op}): dtype mismatch: {detail}")]
    DType { node: String, op: String, detail: String },
    /// An attribute is missing or has the wrong type or value.
    #[error("node '{node}' ({op}): attribute '{attr}': {detail}")]
    Attr { node: String, op: String, attr: String, detail: String },
    /// Wrong number of inputs for an op.
    #[error("node '{node}' ({op}): expected {expected} inputs, got {got}")]
    Arity { node: String, op: String, expected: String, got: usize },
    /// No op of that name is registered.
    #[error("unknown op '{op}' (node '{node}')")]
    UnknownOp { node: String, op: String },
    /// No kernel for this op on this device type and dtype.
    #[error("node '{node}' ({op}): no {device} kernel for dtype {dtype}")]
    NoKernel { node: String, op: String, device: String, dtype: String },
    /// A node name that does not exist in the graph.
    #[error("unknown node '{0}'")]
    UnknownNode(String),
    /// Two nodes with the same name.
    #[error("duplicate node name '{0}'")]
    DuplicateName(String),
    /// A fetch of an output index the node does not have.
    #[error("node '{node}' ({op}) has {outputs} outputs, output {index} was requested")]
    BadOutputIndex { node: String, op: String, index: usize, outputs: usize },
    /// Mixing handles from two different graphs.
    #[error("node '{node}': input '{input}' belongs to a different graph")]
    ForeignGraph { node: String, input: String },
    /// A placeholder the requested fetches need was not fed.
    #[error("placeholder '{node}' (shape {shape}, {dtype}) must be fed")]
    MissingFeed { node: String, shape: String, dtype: String },
    /// A feed that does not match the fed output's declared type.
    #[error("feed for '{node}': expected {expected}, got {got}")]
    FeedMismatch { node: String, expected: String, got: String },
    /// A variable read before any assignment.
    #[error("variable '{0}' is read before it was initialized (run the initializer first)")]
    Uninitialized(String),
    /// A cycle in the part of the graph a step needs.
    #[error("the graph has a cycle through node '{0}'")]
    Cycle(String),
    /// A kernel failed at run time (bad index, bad value).
    #[error("node '{node}' ({op}): {detail}")]
    Kernel { node: String, op: String, detail: String },
    /// Asking for a gradient through an op that has none.
    #[error("node '{node}' ({op}): op has no gradient")]
    NoGradient { node: String, op: String },
    /// Tensor construction with inconsistent data and shape, or a dtype
    /// conversion that is not possible.
    #[error("tensor: {0}")]
    Tensor(String),
    /// A bad setting of a program or an API call (a flag, an option), named.
    #[error("{key}: {detail}")]
    Config { key: String, detail: String },
    /// A graph file that parses but does not describe a valid graph; names
    /// the file, and the node (also in `detail`) where one is at fault.
    #[error("{file}: {detail}")]
    GraphFile { file: String, node: String, detail: String },
    /// A checkpoint that cannot be read or does not fit the graph; names the
    /// file and, where one is at fault, the tensor.
    #[error("{file}: {detail}")]
    Checkpoint { file: String, detail: String },
    /// A tensor too large to allocate (or to address at all).
    #[error("cannot allocate {what}: {size}")]
    Alloc { what: String, size: String },
    /// A queue that is closed and cannot give (or take) what a step asked
    /// for: TensorFlow's OutOfRange, which ends an input loop.
    #[error("node '{node}': queue '{queue}' is closed: {detail}")]
    QueueClosed { node: String, queue: String, detail: String },
    /// A variable whose update in place was cut short by a panic: its value
    /// may be half old, half new, so it is not read until it is set again.
    #[error("variable '{0}' was left half-updated by a kernel that panicked while writing it: set it again (initializer, checkpoint restore or `set_variable`) before using it")]
    TornVariable(String),
    /// A corrupt or truncated file (graph JSON, checkpoint).
    #[error("{file}: corrupt at byte offset {offset}: {detail}")]
    Corrupt { file: String, offset: u64, detail: String },
    /// A bad line in a text data file.
    #[error("{file}:{line}: {detail}")]
    Data { file: String, line: usize, detail: String },
    /// A file that could not be read or written.
    /// The cause is part of the message and deliberately not a `source`, so a
    /// reported error chain does not print it twice.
    #[error("{file}: {cause}")]
    Io { file: String, cause: std::io::Error },
    /// A device this build cannot run on (e.g. CUDA without the feature).
    #[error("device '{0}' is not available in this build")]
    Device(String),
    /// A CUDA device asked of a build without the `cuda` feature.
    #[error("{0}: this build has no CUDA support (rebuild with `--features cuda`)")]
    NoCuda(String),
    /// The CUDA driver is missing or failed.
    #[error("CUDA {device}: {detail}")]
    Cuda { device: String, detail: String },
    /// Host code read a tensor whose elements live in a device's memory.
    #[error("a {what} tensor is in {device} memory: copy it to the host before reading it there")]
    NotOnHost { device: String, what: String },
    /// A malformed device name or device specification.
    #[error("invalid device name '{name}': {detail}")]
    BadDeviceName { name: String, detail: String },
    /// No device satisfies a node's constraints; the message names the nodes.
    #[error("cannot place node '{node}': {detail}")]
    Placement { node: String, detail: String },
    /// A failed, timed out or aborted transfer; `key` names the devices and edge.
    #[error("rendezvous {key}: {detail}")]
    Rendezvous { key: String, detail: String },
    /// The first error of a multi-device step, with the device it happened on.
    #[error("{error} (on device {device})")]
    OnDevice { device: String, error: Box<EngineError> },
}

/// Result with [`EngineError`].
pub type Result<T> = std::result::Result<T, EngineError>;

impl EngineError {
    /// This error attributed to the node that raised it: errors that name no
    /// node (tensor construction, allocation) become kernel errors naming it.
    pub(crate) fn at_node(self, node: &str, op: &str) -> EngineError {
        match self {
            EngineError::Tensor(detail) => EngineError::Kernel { node: node.into(), op: op.into(), detail },
            e @ EngineError::Alloc { .. } => EngineError::Kernel { node: node.into(), op: op.into(), detail: e.to_string() },
            e => e,
        }
    }

    /// An I/O error on `file`.
    pub fn io(file: &std::path::Path, source: std::io::Error) -> Self {
        EngineError::Io { file: file.display().to_string(), cause: source }
    }
}
