//! The training loops a run drives through the master: synchronous,
//! asynchronous (one thread per worker) and with backup workers.

use super::*;

/// What every training loop reads: the master that drives the steps, the
/// training set and schedule, the PS tasks (named when a step fails), the
/// record of step times and the injected stragglers.
pub(super) struct StepLoop<'a> {
    pub(super) master: &'a Master,
    pub(super) train_set: &'a Dataset,
    pub(super) cfg: &'a TrainConfig,
    pub(super) ps: &'a [TaskId],
    pub(super) times: &'a Times,
    pub(super) inject: &'a Injector<'a>,
}

/// Synchronous steps: every batch split over the workers, one update each.
/// Returns (steps, mean training loss of the last epoch).
/// The first `from` updates are skipped (done before a restart; the
/// shuffles still run so later epochs see the same order).
pub(super) fn run_sync(l: &StepLoop, sg: &ShardedGraph, n: usize, from: usize, after: &(dyn Fn(usize) -> Result<()> + Sync)) -> Result<(usize, f64)> {
    let StepLoop { master, train_set, cfg, times, inject, .. } = *l;
    let mut batches = Batches::new(train_set.len(), cfg, n);
    let (mut steps, mut train_loss) = (0usize, f64::NAN);
    for _ in 0..cfg.epochs {
        let (mut sum, mut count) = (0.0, 0usize);
        for idx in batches.next_epoch() {
            if steps < from {
                steps += 1;
                continue;
            }
            let shard = idx.len() / n;
            let mut tensors: Vec<(Tensor, Tensor)> = Vec::with_capacity(n);
            for i in 0..n {
                tensors.push(batch_tensors(train_set, &idx[i * shard..(i + 1) * shard])?);
            }
            let mut feeds: Vec<(&Output, &Tensor)> = Vec::with_capacity(2 * n);
            for (i, (x, y)) in tensors.iter().enumerate() {
                feeds.push((&sg.xs[i], x));
                feeds.push((&sg.ys[i], y));
            }
            let delays: Vec<(TaskId, Duration)> = (0..n).filter_map(|w| inject.next(w)).collect();
            let t = Instant::now();
            let out = master.run_delayed(&feeds, &[&sg.loss], &[&sg.train_op], &delays)?;
            push_time(times, t);
            let loss = out.first().ok_or_else(|| config("the step fetched no loss".into()))?.scalar_f64()?;
            sum += loss * idx.len() as f64;
            count += idx.len();
            steps += 1;
            after(steps)?;
        }
        train_loss = sum / count.max(1) as f64;
    }
    Ok((steps, train_loss))
}

/// Asynchronous steps: one thread per worker, worker `i` on batches `i`,
/// `i + n`, ... of each epoch. Returns (steps, mean training loss of the
/// last epoch).
///
/// After a restart from the checkpoint of global update `from`, the first
/// `from` batches of the one-process schedule count as done (which worker
/// ran which is not recorded: asynchronous updates have no fixed order)
/// and the rest are dealt out the same way. Each update runs under the
/// chief's gate and is followed by its duty (a checkpoint, the `--kill`
/// hook). When a step fails, the error that names a PS task is returned
/// in preference to a worker's (a worker's step fails with the PS it
/// needs).
pub(super) fn run_async(l: &StepLoop, ag: &AsyncGraph, n: usize, from: usize, chief: &Chief<'_>) -> Result<(usize, f64)> {
    let StepLoop { master, train_set, cfg, ps, times, inject } = *l;
    let mut batches = Batches::new(train_set.len(), cfg, 1);
    let (mut steps, mut train_loss) = (0usize, f64::NAN);
    for _ in 0..cfg.epochs {
        let epoch = batches.next_epoch();
        let skip = from.saturating_sub(steps).min(epoch.len());
        steps += skip;
        let todo = &epoch[skip..];
        let failed = std::sync::atomic::AtomicBool::new(false);
        let results: Vec<Result<(f64, usize, usize)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let failed = &failed;
                    s.spawn(move || -> Result<(f64, usize, usize)> {
                        let (mut sum, mut count, mut steps) = (0.0, 0usize, 0usize);
                        for idx in todo.iter().skip(i).step_by(n) {
                            if failed.load(std::sync::atomic::Ordering::Relaxed) {
                                break;
                            }
                            let (x, y) = batch_tensors(train_set, idx)?;
                            let delay: Vec<(TaskId, Duration)> = inject.next(i).into_iter().collect();
                            let t = Instant::now();
                            let r = chief.update(|| master.run_delayed(&[(&ag.xs[i], &x), (&ag.ys[i], &y)], &[&ag.losses[i]], &[&ag.train_ops[i]], &delay));
                            let (out, k, closed) = match r {
                                Ok(x) => x,
                                Err(e) => {
                                    failed.store(true, std::sync::atomic::Ordering::Relaxed);
                                    return Err(e);
                                }
                            };
                            push_time(times, t);
                            // first: a gate this update closed opens again
                            if let Err(e) = chief.after_async(master, k, closed) {
                                failed.store(true, std::sync::atomic::Ordering::Relaxed);
                                return Err(e);
                            }
                            let loss = out.first().ok_or_else(|| config("the step fetched no loss".into()))?.scalar_f64()?;
                            sum += loss * idx.len() as f64;
                            count += idx.len();
                            steps += 1;
                        }
                        Ok((sum, count, steps))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(config("a worker's step thread panicked".into())))).collect()
        });
        let (mut sum, mut count) = (0.0, 0usize);
        let mut errors = Vec::new();
        for r in results {
            match r {
                Ok((s, c, k)) => {
                    sum += s;
                    count += c;
                    steps += k;
                }
                Err(e) => errors.push(e),
            }
        }
        if let Some(i) = errors.iter().position(|e| dead_ps_of(master, ps, e).is_some()) {
            return Err(errors.swap_remove(i));
        }
        if let Some(e) = errors.into_iter().next() {
            return Err(e);
        }
        train_loss = sum / count.max(1) as f64;
    }
    Ok((steps, train_loss))
}

/// One shard of a batch, waiting for a worker.
pub(super) struct Shard {
    pub(super) epoch: usize,
    pub(super) idx: Vec<usize>,
}

/// A worker's compute finished: (worker, the step it was launched for,
/// its loss, examples, epoch).
pub(super) type Done = (usize, u64, Result<f64>, usize, usize);

/// The PS task `e` names, when that task no longer answers a status call
/// in the incarnation the master knows (dead, restarted or stalled itself).
/// An error naming a PS is its death only then: a PS whose Recv timed out
/// waiting for a stalled worker's gradient still answers, and the worker
/// is the one that failed.
pub(super) fn dead_ps_of(master: &Master, ps: &[TaskId], e: &RuntimeError) -> Option<TaskId> {
    let RuntimeError::Rpc { task, .. } = e else { return None };
    let p = ps.iter().copied().find(|p| p.to_string() == *task)?;
    (!master.answers(p)).then_some(p)
}

/// Synchronous steps with backup workers: every idle worker gets the next
/// shard (`cfg.batch / needed` examples) and computes on the current
/// variables; the first `needed` to finish are averaged into the update
/// (their masks 1), later ones, and the shards they held, are dropped.
/// Returns (steps, mean training loss of the last epoch, dropped gradients).
/// A worker whose computation fails (its task died) is not asked again;
/// training goes on while `needed` workers live. One that fails because
/// a PS task died returns that error (the caller restarts the PS); `from`
/// updates are done and `skip` shards taken already after a restart.
pub(super) fn run_backup(
    l: &StepLoop,
    bg: &BackupGraph,
    needed: usize,
    (from, skip): (usize, usize),
    positions: &parking_lot::Mutex<Vec<usize>>,
    after: &(dyn Fn(usize) -> Result<()> + Sync),
) -> Result<(usize, f64, u64, Vec<usize>)> {
    let StepLoop { master, train_set, cfg, ps, times, inject } = *l;
    let workers = bg.xs.len();
    let mut shards = std::collections::VecDeque::new();
    let mut batches = Batches::new(train_set.len(), cfg, needed);
    for epoch in 0..cfg.epochs {
        for idx in batches.next_epoch() {
            let len = idx.len() / needed;
            for k in 0..needed {
                shards.push_back(Shard { epoch, idx: idx[k * len..(k + 1) * len].to_vec() });
            }
        }
    }
    let total = shards.len();
    shards.drain(..skip.min(total));
    // longer than any one computation takes to fail (a stalled worker's
    // ends at the master's call limit), so that such a failure reaches
    // this loop before the loop gives up on every worker
    let wait = master.rpc_limit() + Duration::from_secs(10);
    let (tx, rx) = std::sync::mpsc::channel::<Done>();
    let mut failed = Vec::new();
    let r = std::thread::scope(|s| -> Result<(usize, f64, u64)> {
        let launch = |w: usize, step: u64, shard: Shard, busy: &mut Vec<bool>| {
            busy[w] = true;
            let tx = tx.clone();
            let delay: Vec<(TaskId, Duration)> = inject.next(w).into_iter().collect();
            s.spawn(move || {
                let r = (|| -> Result<f64> {
                    let (x, y) = batch_tensors(train_set, &shard.idx)?;
                    let out = master.run_delayed(&[(&bg.xs[w], &x), (&bg.ys[w], &y)], &[&bg.losses[w]], &[&bg.computes[w]], &delay)?;
                    Ok(out.first().ok_or_else(|| config("the step fetched no loss".into()))?.scalar_f64()?)
                })();
                let _ = tx.send((w, step, r, shard.idx.len(), shard.epoch));
            });
        };
        let mut busy = vec![false; workers];
        // workers whose computation failed (their task died): never asked again
        let mut dead: Vec<Option<String>> = vec![None; workers];
        let (mut steps, mut dropped) = (from, 0u64);
        let (mut last_sum, mut last_n) = (0.0, 0usize);
        let mut step = 0u64;
        let mut last_update = Instant::now();
        'steps: loop {
            step += 1;
            let mut in_flight = 0usize;
            for w in 0..workers {
                if !busy[w] && dead[w].is_none() && let Some(sh) = shards.pop_front() {
                    launch(w, step, sh, &mut busy);
                    in_flight += 1;
                }
            }
            let mut fresh: Vec<(usize, f64, usize, usize)> = Vec::with_capacity(needed);
            while fresh.len() < needed {
                if in_flight == 0 && busy.iter().all(|b| !b) {
                    // out of data (or workers): too few gradients for one more update
                    dropped += fresh.len() as u64;
                    break 'steps;
                }
                let (w, st, r, n, epoch) = rx.recv_timeout(wait).map_err(|_| config(format!("no worker finished a computation in {wait:?}")))?;
                busy[w] = false;
                if st == step {
                    in_flight -= 1;
                }
                match r {
                    Ok(loss) if st == step => fresh.push((w, loss, n, epoch)),
                    // computed on variables an update has since changed
                    Ok(_) => dropped += 1,
                    // the PS died, not this worker: the caller restarts it
                    Err(e) if dead_ps_of(master, ps, &e).is_some() => return Err(e),
                    Err(e) => {
                        dropped += 1;
                        dead[w] = Some(e.to_string());
                        let live = dead.iter().filter(|d| d.is_none()).count();
                        if live < needed {
                            let why: Vec<String> = dead.iter().flatten().cloned().collect();
                            return Err(config(format!(
                                "{live} workers left, {needed} needed per update: {}",
                                why.join("; ")
                            )));
                        }
                    }
                }
                // keep enough computations going for this step
                while fresh.len() + in_flight < needed {
                    let Some(w2) = (0..workers).find(|&k| !busy[k] && dead[k].is_none()) else { break };
                    let Some(sh) = shards.pop_front() else { break };
                    launch(w2, step, sh, &mut busy);
                    in_flight += 1;
                }
            }
            let masks: Vec<Tensor> = (0..workers)
                .map(|w| Tensor::from_vec(vec![if fresh.iter().any(|f| f.0 == w) { 1.0f32 } else { 0.0 }], Vec::<usize>::new()))
                .collect::<flowlab_engine::Result<_>>()?;
            let feeds: Vec<(&Output, &Tensor)> = bg.masks.iter().zip(&masks).collect();
            master.run(&feeds, &[], &[&bg.apply])?;
            push_time(times, last_update);
            last_update = Instant::now();
            steps += 1;
            {
                let mut pos = positions.lock();
                pos.resize(steps + 1, 0);
                pos[steps] = total - shards.len();
            }
            after(steps)?;
            for (_, loss, n, epoch) in fresh {
                if epoch + 1 == cfg.epochs {
                    last_sum += loss * n as f64;
                    last_n += n;
                }
            }
        }
        failed = dead.iter().enumerate().filter(|(_, d)| d.is_some()).map(|(w, _)| w).collect();
        // the stragglers' last computations: bounded, then dropped
        while busy.iter().any(|b| *b) {
            let (w, _, _, _, _) = rx.recv_timeout(wait).map_err(|_| config(format!("a worker did not finish in {wait:?}")))?;
            busy[w] = false;
            dropped += 1;
        }
        Ok((steps, last_sum / last_n.max(1) as f64, dropped))
    })?;
    Ok((r.0, r.1, r.2, failed))
}

