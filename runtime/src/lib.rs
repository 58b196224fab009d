//! The distributed runtime: engine processes (tasks) that run one graph
//! together, as in sections 3.3 and 4.4 of the TensorFlow paper: cluster
//! specs, task servers, the master that partitions and drives a graph over
//! them, the rendezvous between tasks, and local launch. A library of
//! tasks and transport only: training over a cluster is a program on it
//! (`flowlab_programs::cluster`).
//!
//! A crate of its own on top of `flowlab-engine` rather than a layer inside
//! it: the network transport (and later its async runtime) is a heavy
//! dependency that the single-process engine, the simulators and their users
//! should not have to build.
//!
//! | module | holds |
//! |---|---|
//! | `error` | the crate's error type |
//! | `bench` | `flowlab bench cluster`'s transport rows: transfers and a master-driven step over loopback gRPC beside their in-process peers |
//! | `cluster` | the cluster spec: jobs `chief`, `ps`, `worker` and their task addresses |
//! | `launch` | a local cluster on loopback: tasks as child processes of a given binary, or on threads here |
//! | `net` | binding a task's address and reaching another task, with a deadline |
//! | `wire` | tensors in messages |
//! | `worker` | a task's gRPC server: registered partitions, steps, the rendezvous between tasks |
//! | `master` | places and partitions a client's graph over the tasks, registers it, runs steps |

mod auth;
mod bench;
mod cluster;
mod error;
mod launch;
mod master;
mod net;
mod tensor_rpc;
mod timeline;
pub use timeline::{MASTER_DEVICE, TracedStep, traced_steps};
mod wire;
mod worker;

/// Messages and services generated from `proto/flowlab.proto`.
pub mod pb {
    tonic::include_proto!("flowlab");
}

pub use auth::{Auth, MIN_SECRET_BYTES};
pub use bench::{ClusterBenchRecord, LoopbackFigures, ProcessFigures, bench as bench_cluster, bench_floors, measure_loopback, measure_task_processes, process_cpu_s};
pub use cluster::{ClusterSpec, Job, TaskId, parse_kill};
pub use error::{Result, RuntimeError};
pub use launch::{Launcher, LocalCluster, MAX_LOCAL_TASKS};
pub use net::{bind_task, connect_task};
pub use master::{MAX_INJECTED_DELAY, Master, MasterOptions, Traffic, link_arg};
pub use worker::{StepRendezvous, TaskClient, TaskServer, WorkerService};
