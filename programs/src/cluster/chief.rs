//! The chief's duties: checkpoints and evaluations between updates (the
//! asynchronous gate that makes them exact), and restoring a checkpoint.

use super::*;

/// The chief's duty after each update: a checkpoint every `every` updates
/// (variables fetched from the PS), then the caller's hook.
///
/// Asynchronous workers apply their updates while the chief saves, so the
/// asynchronous path goes through `gate`: the update that brings the
/// global count to a multiple of `every` closes the gate (no update starts
/// while it is closed), the chief waits for the updates in flight to end,
/// fetches the variables with none in flight and opens it again. The
/// checkpoint is thus of an exact global update count, the one its file is
/// named by: the multiple of `every`, or up to `workers - 1` more (the
/// updates that were in flight when the gate closed).
pub(super) struct Chief<'a> {
    pub(super) manager: Option<CheckpointManager>,
    pub(super) every: usize,
    /// The held-out evaluation every `eval_every` updates and what it found.
    pub(super) eval: Option<Evaluation>,
    pub(super) curve: parking_lot::Mutex<Vec<(usize, f64)>>,
    pub(super) variables: Vec<Output>,
    pub(super) meta: BTreeMap<String, String>,
    pub(super) on_step: &'a (dyn Fn(usize) + Sync),
    pub(super) progress: std::sync::atomic::AtomicUsize,
    pub(super) gate: parking_lot::Mutex<Gate>,
    pub(super) turn: parking_lot::Condvar,
    /// Backup workers: shards taken from the queue when each update was
    /// applied (index: the update), saved with the checkpoint
    /// (`shards_taken`) so that a resumed run goes on from there.
    pub(super) positions: Option<&'a parking_lot::Mutex<Vec<usize>>>,
    /// The updates to record ([`ClusterTraining::timeline`]) and what was.
    pub(super) timeline: Option<(usize, usize)>,
    pub(super) recorded: parking_lot::Mutex<Option<Vec<flowlab_engine::PartitionTimeline>>>,
    /// Recording has ended: it does not start again (asynchronous workers
    /// may report update `first - 1` after update `last`).
    pub(super) timeline_ended: std::sync::atomic::AtomicBool,
}

/// The held-out accuracy of the variables as they are: the eval graph's
/// inputs, its accuracy and the held-out examples.
pub(super) struct Evaluation {
    pub(super) every: usize,
    pub(super) x: Output,
    pub(super) y: Output,
    pub(super) accuracy: Output,
    pub(super) examples: (Tensor, Tensor),
}

impl Evaluation {
    pub(super) fn run(&self, master: &Master) -> Result<f64> {
        let out = master.run(&[(&self.x, &self.examples.0), (&self.y, &self.examples.1)], &[&self.accuracy], &[])?;
        Ok(out.first().ok_or_else(|| config("the evaluation fetched no accuracy".into()))?.scalar_f64()?)
    }
}

/// The checkpoint metadata key of a backup-worker run's shard position.
pub(super) const SHARDS_TAKEN: &str = "shards_taken";

/// Asynchronous updates and the chief's checkpoints (see [`Chief`]).
#[derive(Default)]
pub(super) struct Gate {
    /// Updates applied (global step), restarted from a checkpoint's.
    pub(super) updates: usize,
    pub(super) in_flight: usize,
    /// A checkpoint is due: no update may start.
    pub(super) closed: bool,
}

impl Chief<'_> {
    /// After training from update `from` to `steps`: refused when the
    /// checkpoint restored lies beyond the run's end, else the end
    /// checkpointed too, unless a checkpoint of it was just written.
    pub(super) fn save_the_end(&self, master: &Master, from: usize, steps: usize, epochs: usize) -> Result<()> {
        if from > steps {
            return Err(config(format!(
                "the checkpoint restored is of update {from}, beyond this run's {steps} updates (--epochs {epochs}): nothing is left to train; ask for more epochs, or resume from another checkpoint folder"
            )));
        }
        if let Some(m) = &self.manager
            && steps > from
            && m.steps()?.last() != Some(&(steps as u64))
        {
            self.save(master, steps)?;
        }
        Ok(())
    }

    /// A checkpoint or an evaluation is due after `steps` updates: the
    /// asynchronous gate closes for either.
    pub(super) fn due(&self, steps: usize) -> bool {
        self.checkpoint_due(steps) || self.eval.as_ref().is_some_and(|e| steps.is_multiple_of(e.every.max(1)))
    }

    pub(super) fn checkpoint_due(&self, steps: usize) -> bool {
        self.manager.is_some() && steps.is_multiple_of(self.every.max(1))
    }

    /// With nothing in flight after update `at` (reached as the multiple
    /// `due` saw, or up to `workers - 1` past it): the checkpoint and the
    /// evaluation that were due.
    pub(super) fn at_rest(&self, master: &Master, due: usize, at: usize) -> Result<()> {
        if self.checkpoint_due(due) {
            self.save(master, at)?;
        }
        if let Some(e) = self.eval.as_ref().filter(|e| due.is_multiple_of(e.every.max(1))) {
            let a = e.run(master)?;
            self.curve.lock().push((at, a));
        }
        Ok(())
    }

    pub(super) fn save(&self, master: &Master, at: usize) -> Result<()> {
        let Some(m) = &self.manager else { return Ok(()) };
        let values = master.run(&[], &self.variables.iter().collect::<Vec<_>>(), &[])?;
        let named: Vec<(String, Tensor)> = self.variables.iter().map(|v| v.name()).zip(values).collect();
        let mut meta = self.meta.clone();
        meta.insert("step".into(), at.to_string());
        if let Some(p) = self.positions
            && let Some(&taken) = p.lock().get(at)
        {
            meta.insert(SHARDS_TAKEN.into(), taken.to_string());
        }
        m.save_values(&named, at as u64, &meta)?;
        Ok(())
    }

    /// After a synchronous update (nothing else in flight).
    pub(super) fn after(&self, master: &Master, steps: usize) -> Result<()> {
        self.progress.fetch_max(steps, std::sync::atomic::Ordering::Relaxed);
        if self.due(steps) {
            self.at_rest(master, steps, steps)?;
        }
        (self.on_step)(steps);
        self.timeline_after(master, steps);
        Ok(())
    }

    /// Starts recording once update `first - 1` is done (`done` updates),
    /// stops after update `last`.
    pub(super) fn timeline_after(&self, master: &Master, done: usize) {
        let Some((first, last)) = self.timeline else { return };
        if done + 1 == first.max(1) && !self.timeline_ended.load(std::sync::atomic::Ordering::Acquire) {
            master.start_timeline();
        }
        if done >= last {
            self.keep_timeline(master);
        }
    }

    /// Stops recording and keeps what was recorded, if anything.
    pub(super) fn keep_timeline(&self, master: &Master) {
        if self.timeline.is_some() {
            self.timeline_ended.store(true, std::sync::atomic::Ordering::Release);
        }
        if let Some(t) = master.stop_timeline() {
            *self.recorded.lock() = Some(t);
        }
    }

    pub(super) fn lock(&self) -> parking_lot::MutexGuard<'_, Gate> {
        self.gate.lock()
    }

    /// Restarts the global count (a fresh run or a restore).
    pub(super) fn start_at(&self, updates: usize) {
        *self.lock() = Gate { updates, ..Gate::default() };
    }

    /// Runs one asynchronous update through the gate; returns its result,
    /// the global update count it made and whether it closed the gate.
    pub(super) fn update<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<(T, usize, bool)> {
        {
            let mut g = self.lock();
            while g.closed {
                self.turn.wait(&mut g);
            }
            g.in_flight += 1;
        }
        let r = f();
        let mut g = self.lock();
        g.in_flight -= 1;
        let out = match r {
            Ok(out) => {
                g.updates += 1;
                let k = g.updates;
                let close = self.due(k) && !g.closed;
                g.closed |= close;
                Ok((out, k, close))
            }
            Err(e) => Err(e),
        };
        self.turn.notify_all();
        out
    }

    /// After asynchronous update `k`; `closed` when that update closed the
    /// gate: the checkpoint once the updates in flight have ended.
    pub(super) fn after_async(&self, master: &Master, k: usize, closed: bool) -> Result<()> {
        self.progress.fetch_max(k, std::sync::atomic::Ordering::Relaxed);
        if closed {
            let mut g = self.lock();
            while g.in_flight > 0 {
                self.turn.wait(&mut g);
            }
            let r = self.at_rest(master, k, g.updates);
            g.closed = false;
            self.turn.notify_all();
            r?;
        }
        (self.on_step)(k);
        self.timeline_after(master, k);
        Ok(())
    }
}

/// Restoring a checkpoint: every variable assigned from a placeholder on
/// its own PS task, the assignments grouped in one op.
pub(super) struct Restore {
    pub(super) feeds: Vec<(String, Output)>,
    pub(super) op: Output,
}

impl Restore {
    pub(super) fn ops(g: &Graph, ps0: TaskId, variables: &[Output]) -> Result<Restore> {
        let pg = g.device(&ps0.device().to_string());
        let mut feeds = Vec::with_capacity(variables.len());
        let mut assigns = Vec::with_capacity(variables.len());
        for v in variables {
            let rg = pg.on_device_of(v).scope("restore");
            let ph = rg.placeholder(&v.name(), v.dtype(), v.tensor_type().shape)?;
            assigns.push(rg.assign(v, &ph)?);
            feeds.push((v.name(), ph));
        }
        let op = pg.scope("restore").group("all", &assigns.iter().collect::<Vec<_>>())?;
        Ok(Restore { feeds, op })
    }

    /// A PS task restarted (its variables gone): reconnected, the graph
    /// registered again (every task learns its incarnation), the newest
    /// checkpoint restored into every PS task (the others' variables have
    /// moved on since), or the initial values without one. Returns the
    /// update training goes on from.
    pub(super) fn after_restart(&self, master: &mut Master, dead: TaskId, g: &Graph, init: &Output, chief: &Chief<'_>, how: &ClusterTraining) -> Result<usize> {
        master.reconnect(dead)?;
        master.register(g)?;
        Ok(match self.newest(master, chief, how)? {
            Some((step, _)) => step,
            None => {
                master.run(&[], &[], &[init])?;
                0
            }
        })
    }

    /// The newest checkpoint that reads intact, written by a run with the
    /// same settings, restored into every PS task: (its step, the newer
    /// files skipped and why); None when there is none. With backup
    /// workers its shard position goes back into the chief's positions.
    pub(super) fn newest(&self, master: &Master, chief: &Chief<'_>, how: &ClusterTraining) -> Result<Option<(usize, Vec<String>)>> {
        let Some(m) = &chief.manager else { return Ok(None) };
        let mut skipped = Vec::new();
        for step in m.steps()?.into_iter().rev() {
            let path = m.path(step);
            let ck = match flowlab_engine::checkpoint::read(&path) {
                Ok(ck) => ck,
                Err(e) => {
                    skipped.push(e.to_string());
                    continue;
                }
            };
            for (key, want) in &chief.meta {
                if let Some(got) = ck.metadata.get(key)
                    && got != want
                {
                    return Err(config(format!(
                        "checkpoint {} was written by a run with {key} {got}, this run has {key} {want}: resume with the same settings or another checkpoint folder",
                        path.display()
                    )));
                }
            }
            let mut feeds = Vec::with_capacity(self.feeds.len());
            for (name, ph) in &self.feeds {
                let t = ck.tensors.get(name).ok_or_else(|| config(format!("checkpoint {} has no variable '{name}'", path.display())))?;
                feeds.push((ph, t));
            }
            if let Some(positions) = chief.positions {
                let taken: usize = ck.metadata.get(SHARDS_TAKEN).and_then(|v| v.parse().ok()).ok_or_else(|| {
                    config(format!(
                        "checkpoint {} has no `{SHARDS_TAKEN}` (written before backup-worker runs could resume): resume from another checkpoint folder",
                        path.display()
                    ))
                })?;
                let mut pos = positions.lock();
                let at = step as usize;
                if pos.len() <= at {
                    pos.resize(at + 1, 0);
                }
                pos[at] = taken;
            }
            master.run(&feeds, &[], &[&self.op])?;
            return Ok(Some((step as usize, skipped)));
        }
        match skipped.first() {
            Some(e) => Err(config(format!("no checkpoint in {} reads intact: {e}", how.checkpoint.as_ref().map(|c| c.dir.display().to_string()).unwrap_or_default()))),
            None => Ok(None),
        }
    }
}

