//! The event loop: events and flow arrivals dispatched to the worker,
//! PS and group steps, and failures with their recovery.

use super::*;

impl Sim<'_> {
    pub(super) fn schedule_failures(&mut self) {
        if let Some(f) = &self.cfg.failures {
            for &t in &f.at_s {
                self.q.schedule_at(SimTime::from_secs_f64(t), Ev::Failure);
            }
            if f.mtbf_hours.is_some() {
                self.schedule_next_random_failure();
            }
        }
    }

    /// Next crash of any task: tasks fail independently with the MTBF, so
    /// the cluster fails at `tasks / MTBF` per second.
    pub(super) fn schedule_next_random_failure(&mut self) {
        let Some(mtbf) = self.cfg.failures.as_ref().and_then(|f| f.mtbf_hours) else {
            return;
        };
        let tasks = (self.workers.len() + self.cfg.ps as usize) as f64;
        let gap = self.rng.sample::<f64, _>(Exp1) * mtbf * 3600.0 / tasks;
        self.q.schedule_in(SimTime::from_secs_f64(gap), Ev::Failure);
    }

    pub(super) fn main_loop(&mut self) -> Result<(), SimError> {
        let max_t = SimTime::from_secs_f64(self.cfg.max_sim_time_s);
        while self.applied < self.target {
            let tq = self.q.peek_time();
            // Events at the current instant run before the network is asked
            // for its next event, so flows started together share one
            // bandwidth recomputation instead of one each.
            if tq.is_some() && tq == Some(self.q.now()) {
                self.events += 1;
                if self.events > self.cfg.max_events {
                    return Err(SimError::BoundExceeded {
                        what: "max_events".into(),
                        limit: self.cfg.max_events.to_string(),
                    });
                }
                if let Some((_, ev)) = self.q.pop() {
                    self.on_event(ev)?;
                }
                continue;
            }
            let tn = self.net.next_event_time();
            let t = match (tq, tn) {
                (None, None) => {
                    return Err(SimError::BoundExceeded {
                        what: "no pending events before the last step".into(),
                        limit: format!("{} steps", self.cfg.steps),
                    })
                }
                (a, b) => a.unwrap_or(SimTime::MAX).min(b.unwrap_or(SimTime::MAX)),
            };
            if t > max_t {
                return Err(SimError::BoundExceeded {
                    what: "max_sim_time_s".into(),
                    limit: format!("{} s", self.cfg.max_sim_time_s),
                });
            }
            self.events += 1;
            if self.events > self.cfg.max_events {
                return Err(SimError::BoundExceeded {
                    what: "max_events".into(),
                    limit: self.cfg.max_events.to_string(),
                });
            }
            if tn == Some(t) {
                self.q.advance_to(t);
                let mut done = std::mem::take(&mut self.done);
                self.net.advance(t, &mut done);
                for &tag in &done {
                    self.on_transfer(tag)?;
                }
                done.clear();
                self.done = done;
            } else if let Some((_, ev)) = self.q.pop() {
                self.on_event(ev)?;
            }
        }
        Ok(())
    }

    pub(super) fn current(&self, w: u32, epoch: u64) -> bool {
        self.workers[w as usize].epoch == epoch
    }

    pub(super) fn on_event(&mut self, ev: Ev) -> Result<(), SimError> {
        let now = self.q.now();
        match ev {
            Ev::FetchArrive { w, ps, epoch } => {
                if self.current(w, epoch) {
                    // The response streams while the PS CPU serves the request
                    // (FIFO) and copies the shard out; the worker has the
                    // shard once both are done.
                    let copy = self.memory_work(w, ps, 1);
                    let ready = self.serve_for(ps, now, self.ps_request[ps as usize] + copy);
                    let bytes = self.shard_bytes[w as usize * self.layout.tasks() + ps as usize];
                    let tag = self.transfer(Transfer { w, ps, epoch, kind: TransferKind::Fetch, ready, tensor: u32::MAX });
                    let route = self.route(w, ps, true)?;
                    self.net.start_flow_on(now, self.ps_endpoint(ps), self.worker_endpoint(w), route, bytes, tag)?;
                }
            }
            Ev::FetchReady { w, ps, epoch, held } => {
                if self.current(w, epoch) {
                    if held {
                        self.shard_fetched(w, epoch);
                    } else {
                        self.fetch_ready(w, ps, epoch);
                    }
                }
            }
            Ev::ComputeDone { w, epoch } => {
                if self.current(w, epoch) {
                    if self.w.overlap {
                        self.backward(w, epoch)?;
                    } else if self.softmax_cpu.is_empty() {
                        self.push(w, epoch)?;
                    } else {
                        self.softmax_exchange(w, epoch)?;
                    }
                }
            }
            Ev::SoftmaxServed { w, ps, epoch } => {
                if self.current(w, epoch) {
                    let tag = self.transfer(Transfer { w, ps, epoch, kind: TransferKind::ActivationGrads, ready: now, tensor: u32::MAX });
                    let route = self.route(w, ps, true)?;
                    self.net.start_flow_on(now, self.ps_endpoint(ps), self.worker_endpoint(w), route, self.activation_bytes, tag)?;
                }
            }
            Ev::PushComplete { w, ps, epoch } => {
                if self.current(w, epoch) {
                    self.push_complete(w, ps, epoch);
                }
            }
            Ev::PushTensor { w, i, epoch } => {
                if self.current(w, epoch) {
                    let t = self.push_tensors[i as usize];
                    let tag = self.transfer(Transfer { w, ps: t.task, epoch, kind: TransferKind::Push, ready: now, tensor: i });
                    let route = self.route(w, t.task, false)?;
                    self.net.start_flow_on(now, self.worker_endpoint(w), self.ps_endpoint(t.task), route, t.bytes, tag)?;
                }
            }
            Ev::PushServed { w, ps, epoch, whole } => {
                if self.current(w, epoch) {
                    if whole && self.tokens[ps as usize] > 0 {
                        self.push_counted(w, ps)?;
                    }
                    let ws = &mut self.workers[w as usize];
                    ws.pending -= 1;
                    if ws.pending == 0 {
                        self.gradient_applied(w)?;
                    }
                }
            }
            Ev::TokenArrive { g, round } => {
                if self.groups[g as usize].round == round {
                    let at = self.serve_for(0, now, self.token_cpu);
                    self.q.schedule_at(at, Ev::TokenServed { g, round });
                }
            }
            Ev::TokenServed { g, round } => {
                let gs = &mut self.groups[g as usize];
                if gs.round == round {
                    gs.tokens -= 1;
                    if gs.tokens == 0 && gs.arrivals >= gs.need {
                        self.tasks_done(g as usize)?;
                    }
                }
            }
            Ev::StepAnswered { g, round } => {
                if self.groups[g as usize].round == round {
                    self.group_step_done(g as usize)?;
                }
            }
            Ev::CheckpointDone => {
                self.ckpt_active = false;
                self.release_waiting()?;
            }
            Ev::Failure => self.fail()?,
            Ev::RecoveryDone => {
                self.recovering = false;
                self.release_waiting()?;
            }
        }
        Ok(())
    }

    pub(super) fn on_transfer(&mut self, tag: FlowTag) -> Result<(), SimError> {
        let t = self.transfers[tag as usize];
        self.free_transfers.push(tag as u32);
        if !self.current(t.w, t.epoch) {
            return Ok(()); // a dropped (late or pre-failure) transfer
        }
        let now = self.q.now();
        match t.kind {
            TransferKind::Fetch => {
                if t.ready > now {
                    self.q.schedule_at(t.ready, Ev::FetchReady { w: t.w, ps: t.ps, epoch: t.epoch, held: false });
                } else {
                    self.fetch_ready(t.w, t.ps, t.epoch);
                }
            }
            TransferKind::Activations => {
                let at = self.serve_for(t.ps, now, self.softmax_cpu[t.ps as usize]);
                self.q.schedule_at(at, Ev::SoftmaxServed { w: t.w, ps: t.ps, epoch: t.epoch });
            }
            TransferKind::ActivationGrads => {
                let ws = &mut self.workers[t.w as usize];
                ws.pending -= 1;
                if ws.pending == 0 {
                    self.push(t.w, t.epoch)?;
                }
            }
            TransferKind::Push if t.tensor != u32::MAX => {
                // one tensor: its PS task takes it (FIFO); the worker's last
                // one there also costs the task's request and, on the first
                // task, its end of the worker's loss
                let p = self.push_tensors[t.tensor as usize];
                let i = t.w as usize * self.layout.tasks() + t.ps as usize;
                self.tensors_left[i] -= 1;
                let whole = self.tensors_left[i] == 0;
                let extra = match (whole, t.ps) {
                    (false, _) => SimTime::ZERO,
                    (true, 0) => self.ps_graph + self.first_push,
                    (true, _) => self.ps_graph,
                };
                let at = self.serve_for(t.ps, now, p.cost + extra);
                self.q.schedule_at(at, Ev::PushServed { w: t.w, ps: t.ps, epoch: t.epoch, whole });
            }
            TransferKind::Push => {
                // With `overlap` the last bytes exist once the backward pass is done.
                let complete = if self.w.overlap { self.workers[t.w as usize].backward_end } else { now };
                if complete > now {
                    self.q.schedule_at(complete, Ev::PushComplete { w: t.w, ps: t.ps, epoch: t.epoch });
                } else {
                    self.push_complete(t.w, t.ps, t.epoch);
                }
            }
        }
        Ok(())
    }

    /// A crash: everything since the last checkpoint is lost; all work stops
    /// until recovery, then resumes from the checkpoint.
    pub(super) fn fail(&mut self) -> Result<(), SimError> {
        let from_mtbf = self.cfg.failures.as_ref().is_some_and(|f| f.mtbf_hours.is_some());
        if self.recovering {
            if from_mtbf {
                self.schedule_next_random_failure();
            }
            return Ok(());
        }
        self.failures += 1;
        self.failures_in_a_row += 1;
        if self.failures_in_a_row > MAX_FAILURES_IN_A_ROW {
            return Err(no_progress(&self.cfg, self.workers.len() + self.cfg.ps as usize));
        }
        self.applied = self.last_ckpt;
        if let Some(c) = &self.cfg.checkpoint {
            self.next_ckpt = self.last_ckpt.saturating_add(c.every_steps.saturating_mul(u64::from(self.cfg.workers)));
        }
        for ws in &mut self.workers {
            ws.epoch += 1;
        }
        for gs in &mut self.groups {
            gs.arrivals = 0;
            gs.round += 1;
            gs.waiting = true;
        }
        self.recovering = true;
        let recovery = self.cfg.failures.as_ref().map_or(0.0, |f| f.recovery_s);
        self.paused_s += recovery;
        self.q.schedule_in(SimTime::from_secs_f64(recovery), Ev::RecoveryDone);
        if from_mtbf {
            self.schedule_next_random_failure();
        }
        Ok(())
    }
}
