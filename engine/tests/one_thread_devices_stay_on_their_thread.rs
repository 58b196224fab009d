//! A device of one thread runs every kernel on that thread. Rayon's global
//! pool belongs to nobody: a kernel that borrowed it would compete with the
//! host's other devices (the engine's two CPU devices of a validation run
//! share two cores) and make a "1 thread" figure a 2-thread one.
//!
//! The check: every thread of the global pool is held busy, then a
//! one-thread session runs the kernels that could go parallel. A kernel that
//! reached for the global pool would wait behind the held threads; the step
//! must end without them.

use flowlab_engine::{Graph, Result, Session, SessionOptions, Tensor};
use std::sync::atomic::{AtomicUsize, Ordering};
use parking_lot::{Condvar, Mutex};
use std::sync::{Arc, mpsc};
use std::time::Duration;

#[test]
fn a_one_thread_step_never_waits_on_the_global_pool() -> Result<()> {
    // Large enough for every parallel path (pooling output >= 32K values,
    // element ops and reductions >= their parallel thresholds).
    let (n, hw, c) = (8usize, 64usize, 16usize);
    let g = Graph::new();
    let values: Vec<f32> = (0..n * hw * hw * c).map(|i| ((i * 37) % 101) as f32 / 101.0).collect();
    let x = g.constant(Tensor::from_vec(values, vec![n, hw, hw, c])?)?;
    let maxed = g.max_pool(&x, [2, 2], [2, 2], true)?;
    let averaged = g.avg_pool(&x, [2, 2], [2, 2], true)?;
    let both = g.add(&g.reduce_sum(&maxed, &[], false)?, g.reduce_sum(&averaged, &[], false)?)?;
    let dx = g.gradients(&[&both], &[&x])?[0].clone().expect("a gradient through both pools");
    let activated = g.op("Relu").input(&dx).build()?;
    let sess = Session::with_options(&g, SessionOptions { threads: 1, ..Default::default() })?;
    sess.run(&[], &[&both, &activated], &[])?; // prepared before the pool is held

    // Hold every thread of the global pool until released.
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let held = Arc::new(AtomicUsize::new(0));
    let threads = rayon::current_num_threads();
    for _ in 0..threads {
        let (gate, held) = (gate.clone(), held.clone());
        rayon::spawn(move || {
            held.fetch_add(1, Ordering::SeqCst);
            let (open, cv) = &*gate;
            let mut o = open.lock();
            while !*o {
                cv.wait(&mut o);
            }
        });
    }
    while held.load(Ordering::SeqCst) < threads {
        std::thread::yield_now();
    }
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let r = sess.run(&[], &[&both, &activated], &[]).map(|v| v.len());
        let _ = tx.send(r);
    });
    let outcome = rx.recv_timeout(Duration::from_secs(10));
    // Release the pool whatever happened, so that a failing step ends too.
    {
        let (open, cv) = &*gate;
        *open.lock() = true;
        cv.notify_all();
    }
    let _ = worker.join();
    match outcome {
        Ok(r) => assert_eq!(r?, 2),
        Err(_) => panic!("the one-thread step waited on rayon's global pool ({threads} threads held busy)"),
    }
    Ok(())
}
