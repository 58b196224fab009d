//! Discrete-event cluster and network simulator, graph-level simulation and cost-based placement.
