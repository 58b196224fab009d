//! FIFOQueue and RandomShuffleQueue as a user drives them: order, stacking,
//! blocking between threads, closing, timeouts, seeded shuffling, an input
//! pipeline feeding a training step, and a queue on another device.

use flowlab_engine::{DType, DeviceSet, EngineError, Graph, Optimizer, PartialShape, Result, Session, SessionOptions, Tensor};
use std::time::Duration;

fn sess(g: &Graph, timeout_ms: u64) -> Session {
    Session::with_options(g, SessionOptions { threads: 1, recv_timeout: Duration::from_millis(timeout_ms), ..Default::default() }).unwrap()
}

fn scalar_shape() -> PartialShape {
    PartialShape::scalar()
}

#[test]
fn elements_come_out_in_order_and_stack_with_dequeue_many() -> Result<()> {
    let g = Graph::new();
    let q = g.fifo_queue("q", 10, &[DType::F32, DType::I64], &[scalar_shape(), PartialShape::from([2])])?;
    let x = g.placeholder("x", DType::F32, [-1])?;
    let y = g.placeholder("y", DType::I64, [-1, 2])?;
    let put = q.enqueue_many(&[&x, &y])?;
    let one = q.dequeue()?;
    let three = q.dequeue_many(3)?;
    let size = q.size()?;
    let s = sess(&g, 5_000);
    let xs = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0, 5.0], [5])?;
    let ys = Tensor::from_vec(vec![10i64, 11, 20, 21, 30, 31, 40, 41, 1 << 60, 51], [5, 2])?;
    s.run(&[(&x, &xs), (&y, &ys)], &[], &[&put])?;
    assert_eq!(s.run(&[], &[&size], &[])?[0].scalar_f64()?, 5.0);
    let e = s.run(&[], &[&one[0], &one[1]], &[])?;
    assert_eq!((e[0].to_vec::<f32>()?, e[1].to_vec::<i64>()?), (vec![1.0], vec![10, 11]));
    let m = s.run(&[], &[&three[0], &three[1]], &[])?;
    assert_eq!(m[0].dims(), &[3]);
    assert_eq!(m[0].to_vec::<f32>()?, vec![2.0, 3.0, 4.0]);
    assert_eq!(m[1].to_vec::<i64>()?, vec![20, 21, 30, 31, 40, 41], "i64 values survive exactly");
    let last = s.run(&[], &[&one[1]], &[])?;
    assert_eq!(last[0].to_vec::<i64>()?, vec![1 << 60, 51]);
    Ok(())
}

#[test]
fn a_closed_queue_drains_then_refuses_naming_the_queue() -> Result<()> {
    let g = Graph::new();
    let q = g.fifo_queue("inputs", 4, &[DType::F32], &[scalar_shape()])?;
    let v = g.placeholder("v", DType::F32, [])?;
    let put = q.enqueue(&[&v])?;
    let take = q.dequeue()?;
    let take2 = q.dequeue_many(2)?;
    let close = q.close()?;
    let s = sess(&g, 5_000);
    s.run(&[(&v, &Tensor::scalar(7f32))], &[], &[&put])?;
    s.run(&[], &[], &[&close])?;
    match s.run(&[(&v, &Tensor::scalar(8f32))], &[], &[&put]) {
        Err(EngineError::QueueClosed { queue, .. }) => assert_eq!(queue, "inputs"),
        other => panic!("expected QueueClosed, got {other:?}"),
    }
    let e = s.run(&[], &[&take2[0]], &[]).unwrap_err().to_string();
    assert_eq!(e, "node 'QueueDequeueMany': queue 'inputs' is closed: 1 elements left, 2 requested");
    assert_eq!(s.run(&[], &[&take[0]], &[])?[0].scalar_f64()?, 7.0, "what was enqueued before closing drains");
    assert!(matches!(s.run(&[], &[&take[0]], &[]), Err(EngineError::QueueClosed { .. })));
    Ok(())
}

#[test]
fn a_full_queue_blocks_the_producer_until_a_consumer_takes() -> Result<()> {
    let g = Graph::new();
    let q = g.fifo_queue("q", 2, &[DType::I32], &[scalar_shape()])?;
    let v = g.placeholder("v", DType::I32, [])?;
    let put = q.enqueue(&[&v])?;
    let take = q.dequeue()?;
    let s = sess(&g, 10_000);
    let got = std::thread::scope(|scope| {
        scope.spawn(|| {
            for i in 0..50 {
                s.run(&[(&v, &Tensor::scalar(i))], &[], &[&put]).unwrap();
            }
        });
        (0..50).map(|_| s.run(&[], &[&take[0]], &[]).unwrap()[0].scalar_f64().unwrap() as i32).collect::<Vec<_>>()
    });
    assert_eq!(got, (0..50).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn a_dequeue_nobody_feeds_times_out_with_the_queue_named() -> Result<()> {
    let g = Graph::new();
    let q = g.fifo_queue("lonely", 3, &[DType::F32], &[scalar_shape()])?;
    let take = q.dequeue()?;
    let s = sess(&g, 50);
    let e = s.run(&[], &[&take[0]], &[]).unwrap_err().to_string();
    assert!(e.contains("queue 'lonely' waited 50ms to dequeue (0 of 3 elements)"), "{e}");
    Ok(())
}

#[test]
fn wrong_component_types_are_refused_when_the_op_is_built() -> Result<()> {
    let g = Graph::new();
    let q = g.fifo_queue("q", 3, &[DType::F32], &[PartialShape::from([2])])?;
    let bad = g.placeholder("bad", DType::I32, [2])?;
    let e = q.enqueue(&[&bad]).unwrap_err().to_string();
    assert_eq!(e, "node 'QueueEnqueue' (QueueEnqueue): shape mismatch: input 0 is i32[2], the queue's component 0 needs f32[2]");
    let e = g.fifo_queue("q2", 0, &[DType::F32], &[scalar_shape()]).unwrap_err().to_string();
    assert_eq!(e, "node 'q2' (FIFOQueue): attribute 'capacity': must be at least 1, got 0");
    Ok(())
}

/// The order a seeded shuffling queue gives 0..20 back in.
fn shuffled(seed: u64) -> Result<Vec<i64>> {
    let g = Graph::new();
    let q = g.random_shuffle_queue("q", 32, 4, seed, &[DType::I64], &[scalar_shape()])?;
    let v = g.placeholder("v", DType::I64, [-1])?;
    let put = q.enqueue_many(&[&v])?;
    let close = q.close()?;
    let take = q.dequeue()?;
    let s = sess(&g, 5_000);
    s.run(&[(&v, &Tensor::from_vec((0..20i64).collect(), [20])?)], &[], &[&put, &close])?;
    (0..20).map(|_| Ok(s.run(&[], &[&take[0]], &[])?[0].to_vec::<i64>()?[0])).collect()
}

#[test]
fn a_shuffling_queue_is_a_seeded_permutation() -> Result<()> {
    let a = shuffled(3)?;
    assert_eq!(a, shuffled(3)?, "same seed, same order");
    assert_ne!(a, shuffled(4)?);
    assert_ne!(a, (0..20).collect::<Vec<_>>());
    let mut sorted = a.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..20).collect::<Vec<_>>(), "every element exactly once");
    Ok(())
}

#[test]
fn reader_threads_feed_a_training_step_through_a_queue() -> Result<()> {
    // y = 2x + 1 learned by SGD from batches of 16 that two reader threads
    // enqueue while the training loop dequeues.
    let g = Graph::new();
    let q = g.random_shuffle_queue("examples", 256, 32, 7, &[DType::F32, DType::F32], &[scalar_shape(), scalar_shape()])?;
    let xs = g.placeholder("xs", DType::F32, [-1])?;
    let ys = g.placeholder("ys", DType::F32, [-1])?;
    let put = q.enqueue_many(&[&xs, &ys])?;
    let close = q.close()?;
    let batch = q.dequeue_many(16)?;
    let w = g.variable("w", g.constant(Tensor::scalar(0f32))?)?;
    let b = g.variable("b", g.constant(Tensor::scalar(0f32))?)?;
    let err = g.sub(g.add(g.mul(&batch[0], &w)?, &b)?, &batch[1])?;
    let loss = g.reduce_mean(g.mul(&err, &err)?, &[], false)?;
    let train = Optimizer::Sgd { lr: 0.5 }.minimize(&loss, &[&w, &b])?;
    let s = sess(&g, 10_000);
    s.run(&[], &[], &[&g.global_variables_initializer()?])?;
    // The TF input-pipeline idiom: readers fill the queue, a coordinator
    // closes it when they are done, and training runs until the queue
    // reports that it is closed and drained.
    let steps = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..2)
            .map(|reader| {
                let (s, xs, ys, put) = (&s, &xs, &ys, &put);
                scope.spawn(move || {
                    for chunk in 0..25 {
                        let x: Vec<f32> = (0..16).map(|i| ((reader * 400 + chunk * 16 + i) % 97) as f32 / 97.0 - 0.5).collect();
                        let y: Vec<f32> = x.iter().map(|x| 2.0 * x + 1.0).collect();
                        let (tx, ty) = (Tensor::from_vec(x, [16]).unwrap(), Tensor::from_vec(y, [16]).unwrap());
                        s.run(&[(xs, &tx), (ys, &ty)], &[], &[put]).unwrap();
                    }
                })
            })
            .collect();
        let (s2, close) = (&s, &close);
        scope.spawn(move || {
            for r in readers {
                r.join().unwrap();
            }
            s2.run(&[], &[], &[close]).unwrap();
        });
        let mut steps = 0;
        loop {
            match s.run(&[], &[], &[&train]) {
                Ok(_) => steps += 1,
                Err(EngineError::QueueClosed { .. }) => break steps,
                Err(e) => panic!("{e}"),
            }
        }
    });
    assert_eq!(steps, 50, "800 examples in batches of 16, every one used");
    let (wv, bv) = (s.variable_value("w").unwrap().scalar_f64()?, s.variable_value("b").unwrap().scalar_f64()?);
    assert!((bv - 1.0).abs() < 0.05 && (wv - 2.0).abs() < 0.1, "w {wv}, b {bv}");
    Ok(())
}

#[test]
fn a_queue_on_another_device_feeds_this_one() -> Result<()> {
    let g = Graph::new();
    let q = g.device("/cpu:1").fifo_queue("q", 4, &[DType::F32], &[PartialShape::from([3])])?;
    let v = g.placeholder("v", DType::F32, [3])?;
    let put = q.enqueue(&[&v])?;
    let taken = q.dequeue()?;
    let doubled = g.device("/cpu:0").mul(&taken[0], g.scalar(2.0, DType::F32)?)?;
    let s = Session::with_options(&g, SessionOptions { threads: 1, devices: DeviceSet::local_cpus(2), ..Default::default() })?;
    assert!(s.placement().device_of(&g, put.name().as_str())?.to_string().ends_with("CPU:1"), "queue ops stay with the queue");
    s.run(&[(&v, &Tensor::from_vec(vec![1f32, 2.0, 3.0], [3])?)], &[], &[&put])?;
    assert_eq!(s.run(&[], &[&doubled], &[])?[0].to_vec::<f32>()?, vec![2.0, 4.0, 6.0]);
    Ok(())
}
