//! The one error type of `flowlab-sim`. Every variant names the parameter or
//! component at fault so the CLI can show it without more context.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum SimError {
    /// A configuration value outside its valid range; `param` is the dotted key.
    #[error("invalid parameter `{param}`: {reason}")]
    InvalidParam { param: String, reason: String },
    /// The topology cannot host the requested devices.
    #[error("topology `{topology}` has {ports} device ports but {needed} devices were requested ({hint})")]
    TooFewPorts {
        topology: String,
        ports: usize,
        needed: usize,
        hint: String,
    },
    /// Two endpoints with no path between them.
    #[error("no route from endpoint {src} to endpoint {dst}")]
    NoRoute { src: usize, dst: usize },
    /// An endpoint index outside the topology.
    #[error("endpoint {endpoint} does not exist (topology has {count} endpoints)")]
    NoSuchEndpoint { endpoint: usize, count: usize },
    /// A name not found in the workload catalog.
    #[error("unknown workload `{name}` in `model` (known: {known}){hint}")]
    UnknownWorkload { name: String, known: String, hint: String },
    /// A link name the hardware catalog does not know.
    #[error("unknown link `{name}` in `{param}`: {reason}")]
    UnknownLink {
        name: String,
        param: String,
        reason: String,
    },
    /// A model that could not be built or imported.
    #[error(transparent)]
    Model(#[from] flowlab_models::ModelError),
    /// A token of a device-set string such as "4xK40,1xcpu" that names no
    /// catalog device or has a bad count.
    #[error("bad device set `{spec}`: token `{token}`: {reason}")]
    BadDeviceSet { spec: String, token: String, reason: String },
    /// A graph the simulator or a placer cannot use, naming the node at fault.
    #[error("node '{node}': {detail}")]
    Graph { node: String, detail: String },
    /// A placement that cannot be simulated or a placer that cannot place.
    #[error("cannot place node '{node}': {detail}")]
    Placement { node: String, detail: String },
    /// A device map file that cannot be read or makes no sense.
    #[error("device map `{file}`: {detail}")]
    DeviceMap { file: String, detail: String },
    /// A placer name that `placement::by_name` does not know.
    #[error("unknown placer `{name}` (valid: {valid})")]
    UnknownPlacer { name: String, valid: String },
    /// A run stopped by its step or simulated-time bound before finishing.
    #[error("simulation stopped by its bound: {what} (limit {limit})")]
    BoundExceeded { what: String, limit: String },
}

impl SimError {
    pub(crate) fn param(param: impl Into<String>, reason: impl Into<String>) -> Self {
        SimError::InvalidParam {
            param: param.into(),
            reason: reason.into(),
        }
    }
}
