//! YAML experiment schema, sweeps, parallel runner with resumable result store.
