//! Reaching tasks: binding a task's own address, and connecting to another
//! task with retries until a deadline.
//!
//! Contract: neither call hangs. Binding fails at once with the task and
//! address named; connecting retries (the other task may still be starting)
//! with a growing pause, each attempt bounded by the time left, and gives up
//! at the deadline naming task, address, time waited and the last error.

use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::cluster::{ClusterSpec, TaskId};
use crate::error::{Result, RuntimeError};

/// Binds the listening socket of `task` at its address in `spec`.
pub fn bind_task(spec: &ClusterSpec, task: TaskId) -> Result<TcpListener> {
    let address = spec.address(task)?;
    TcpListener::bind(address).map_err(|source| RuntimeError::Bind {
        task: task.to_string(),
        address: address.to_string(),
        source,
    })
}

fn resolve(task: TaskId, address: &str) -> std::io::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = address.to_socket_addrs()?.collect();
    if addrs.is_empty() {
        return Err(std::io::Error::new(std::io::ErrorKind::NotFound, format!("{task}: no address found")));
    }
    Ok(addrs)
}

/// Connects to `task`, retrying until `deadline` has passed since the call.
pub fn connect_task(spec: &ClusterSpec, task: TaskId, deadline: Duration) -> Result<TcpStream> {
    let address = spec.address(task)?;
    let start = Instant::now();
    let mut pause = Duration::from_millis(10);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let left = deadline.saturating_sub(start.elapsed());
        // a name that does not resolve may come up later (a starting
        // container), so resolution is retried like the connection
        let error = match resolve(task, address) {
            Ok(addrs) => {
                let mut last = None;
                for a in addrs {
                    match TcpStream::connect_timeout(&a, left.max(Duration::from_millis(1))) {
                        Ok(s) => {
                            // step messages are small and latency-bound
                            let _ = s.set_nodelay(true);
                            return Ok(s);
                        }
                        Err(e) => last = Some(e),
                    }
                }
                last.unwrap_or_else(|| std::io::Error::other("no address tried"))
            }
            Err(e) if start.elapsed() >= deadline => {
                return Err(RuntimeError::Resolve { task: task.to_string(), address: address.to_string(), source: e });
            }
            Err(e) => e,
        };
        let waited = start.elapsed();
        if waited >= deadline {
            return Err(RuntimeError::Unreachable {
                task: task.to_string(),
                address: address.to_string(),
                waited,
                attempts,
                source: error,
            });
        }
        std::thread::sleep(pause.min(deadline - waited));
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Job;

    /// A loopback port that nothing listens on right now.
    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    fn spec(ps: u16, worker: u16) -> ClusterSpec {
        ClusterSpec::from_tasks([
            (TaskId::new(Job::Ps, 0), format!("127.0.0.1:{ps}")),
            (TaskId::new(Job::Worker, 0), format!("127.0.0.1:{worker}")),
        ])
        .unwrap()
    }

    #[test]
    fn binding_a_taken_address_names_task_and_address() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let s = spec(port, free_port());
        let e = bind_task(&s, TaskId::new(Job::Ps, 0)).unwrap_err().to_string();
        assert!(e.contains("ps:0") && e.contains(&format!("127.0.0.1:{port}")), "{e}");
        assert!(bind_task(&s, TaskId::new(Job::Worker, 0)).is_ok());
    }

    #[test]
    fn an_absent_task_gives_up_at_the_deadline_naming_it() {
        let s = ClusterSpec::loopback(1, 1).unwrap();
        let port = s.address(TaskId::new(Job::Ps, 0)).unwrap().rsplit(':').next().unwrap().to_string();
        let t = Instant::now();
        let e = connect_task(&s, TaskId::new(Job::Ps, 0), Duration::from_millis(400)).unwrap_err();
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(400) && took < Duration::from_secs(3), "{took:?}");
        let e = e.to_string();
        assert!(e.contains("ps:0") && e.contains(&format!("127.0.0.1:{port}")) && e.contains("attempts"), "{e}");
    }

    #[test]
    fn a_task_that_starts_late_is_reached() {
        let s = ClusterSpec::loopback(1, 1).unwrap();
        let port: u16 = s.address(TaskId::new(Job::Ps, 0)).unwrap().rsplit(':').next().unwrap().parse().unwrap();
        let server = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            let l = TcpListener::bind(("127.0.0.1", port)).unwrap();
            l.accept().map(|_| ()).unwrap();
        });
        connect_task(&s, TaskId::new(Job::Ps, 0), Duration::from_secs(10)).unwrap();
        server.join().unwrap();
    }

    #[test]
    fn an_unresolvable_host_is_an_error_in_bounded_time() {
        let s = ClusterSpec::from_tasks([(TaskId::new(Job::Worker, 0), "no-such-host.invalid:1".to_string())]).unwrap();
        let t = Instant::now();
        let e = connect_task(&s, TaskId::new(Job::Worker, 0), Duration::from_millis(200)).unwrap_err().to_string();
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert!(e.contains("worker:0") && e.contains("no-such-host.invalid:1"), "{e}");
    }
}
