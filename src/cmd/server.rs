//! `flowlab server --cluster FILE --job J --task N`: one task process of a
//! cluster. It binds its address from the cluster spec (errors name the task
//! and the address), serves the worker service (graph partitions, steps,
//! tensors for the other tasks) and runs until it is stopped.

use anyhow::{Context, bail};
use clap::Args;
use flowlab_runtime::{ClusterSpec, Job, MIN_SECRET_BYTES, TaskId, TaskServer, bind_task};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct ServerArgs {
    /// The cluster spec (YAML: jobs chief, ps, worker with their task addresses).
    #[arg(long)]
    cluster: PathBuf,
    /// This task's job: chief, ps or worker.
    #[arg(long)]
    job: String,
    /// This task's index in its job.
    #[arg(long)]
    task: u32,
    /// Emulate a link from this task to every other task, e.g. `1gbps,100us`:
    /// each tensor sent to another task is handed over no earlier than
    /// latency + bytes / bandwidth after its Send (one queue per direction
    /// of a task pair), before the real network carries it. Start every
    /// task of the cluster with the same --link, and train with it.
    #[arg(long)]
    link: Option<String>,
    /// Serve a non-loopback address although the cluster file names no
    /// secret (`auth: { secret_file: PATH }`): anyone who reaches the port
    /// can then run graphs on this task. Only on a network that only the
    /// cluster's hosts share.
    #[arg(long)]
    insecure: bool,
    /// For launchers: the process id of the launcher; this task ends when
    /// that process does (Linux), so no task outlives a killed launcher.
    #[arg(long, hide = true)]
    parent: Option<u32>,
}

/// Whether every address `address` resolves to is a loopback one (an
/// address that does not resolve is left to the bind to report).
fn loopback_only(address: &str) -> bool {
    use std::net::ToSocketAddrs;
    match address.to_socket_addrs() {
        Ok(addrs) => addrs.into_iter().all(|a| a.ip().is_loopback()),
        Err(_) => true,
    }
}

/// Ends this process when `parent` ends (Linux: the kernel sends SIGKILL).
fn exit_with_parent(parent: u32) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_PDEATHSIG and a signal number changes only
    // this process's death signal; getppid cannot fail.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
        // the launcher may have died before the call
        if libc::getppid() as u32 != parent {
            std::process::exit(1);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = parent;
}

pub fn run(args: ServerArgs) -> anyhow::Result<ExitCode> {
    super::ignore_sigpipe();
    if let Some(p) = args.parent {
        exit_with_parent(p);
    }
    let Some(job) = Job::parse(&args.job) else {
        bail!("--job {}: expected chief, ps or worker", args.job);
    };
    let task = TaskId::new(job, args.task);
    let link = args.link.as_deref().map(super::train::parse_link).transpose()?;
    let spec = ClusterSpec::from_file(&args.cluster)?;
    if spec.auth().is_none() && !args.insecure {
        let address = spec.address(task)?;
        if !loopback_only(address) {
            bail!(
                "task {task} would serve {address}, which other hosts may reach, and {} names no secret: add `auth: {{ secret_file: PATH }}` to it (a file of at least {MIN_SECRET_BYTES} random bytes, e.g. `openssl rand -hex 32`, mode 600, on every host), or pass --insecure on a network only the cluster's hosts share",
                args.cluster.display()
            );
        }
    }
    let listener = bind_task(&spec, task)?;
    let server = TaskServer::start_with_link(&spec, task, listener, link).with_context(|| format!("starting task {task}"))?;
    eprintln!(
        "flowlab server: task {task} (incarnation {:016x}) serving on {} for cluster {}{}{}",
        server.incarnation,
        server.address,
        args.cluster.display(),
        if spec.auth().is_some() { ", every request authenticated" } else { ", unauthenticated" },
        link.map_or(String::new(), |l| format!(", emulating a link of {} Gbit/s and {} us to every other task", l.gbps, l.latency_us))
    );
    server.wait();
    Ok(ExitCode::SUCCESS)
}
