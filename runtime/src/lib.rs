//! The distributed runtime (issue 16): several engine processes that run one
//! training job together, as in sections 3.3 and 4.4 of the TensorFlow paper.
//!
//! A crate of its own on top of `flowlab-engine` rather than a layer inside
//! it: the network transport (and later its async runtime) is a heavy
//! dependency that the single-process engine, the simulators and their users
//! should not have to build.
//!
//! | module | holds |
//! |---|---|
//! | `error` | the crate's error type |
//! | `bench` | `flowlab bench cluster`: transfers and steps over loopback gRPC beside their in-process peers |
//! | `cluster` | the cluster spec: jobs `chief`, `ps`, `worker` and their task addresses |
//! | `launch` | a local cluster on loopback: tasks as child processes of a given binary, or on threads here |
//! | `net` | binding a task's address and reaching another task, with a deadline |
//! | `wire` | tensors in messages |
//! | `worker` | a task's gRPC server: registered partitions, steps, the rendezvous between tasks |
//! | `master` | places and partitions a client's graph over the tasks, registers it, runs steps |
//! | `train` | data-parallel training of the digits recipes over a cluster, synchronous or asynchronous |

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
mod train;
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
pub use train::{ClusterTrainReport, ClusterTraining, Hooks, Mode, Stragglers, percentile, planned_updates, train_on_cluster, train_on_cluster_with};
pub use worker::{StepRendezvous, TaskClient, TaskServer, WorkerService};
