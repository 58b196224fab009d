//! A worker's step: fetching its shards, the forward and backward passes
//! (overlapped with the transfers), pushing its gradients.

use super::*;

impl Sim<'_> {
    pub(super) fn shard_fetched(&mut self, w: u32, epoch: u64) {
        let now = self.q.now();
        let ws = &mut self.workers[w as usize];
        ws.pending -= 1;
        if ws.pending == 0 {
            ws.fetched_at = now;
            ws.fetched_version = self.version;
            if self.w.overlap {
                // The forward pass has consumed each variable as it came:
                // it ends with the last bytes or its own time, the later.
                let end = ws.forward_end.max(self.q.now());
                self.q.schedule_at(end, Ev::ComputeDone { w, epoch });
            } else {
                self.compute(w, epoch);
            }
        }
    }

    /// With `overlap`, at the step's first fetch request: the compute time
    /// is drawn and the forward pass starts (it runs as the variables
    /// arrive, so it cannot end before the last of them).
    pub(super) fn start_forward(&mut self, w: u32, t0: SimTime) {
        let d = self.compute_duration(w, t0).as_secs_f64();
        let forward = SimTime::from_secs_f64(d * self.w.forward_fraction);
        let end = self.cpu(t0, forward);
        let ws = &mut self.workers[w as usize];
        ws.forward_end = end;
        ws.backward = SimTime::from_secs_f64(d * (1.0 - self.w.forward_fraction));
    }

    /// With `overlap`: the forward pass is done, the backward pass starts
    /// and every gradient shard streams out as it is produced (its flow
    /// starts now; the PS task applies it once it has arrived and the
    /// backward pass, which makes its last bytes, is done).
    pub(super) fn backward(&mut self, w: u32, epoch: u64) -> Result<(), SimError> {
        let now = self.q.now();
        let d = self.workers[w as usize].backward;
        let end = self.cpu(now, d);
        self.workers[w as usize].backward_end = end;
        self.push(w, epoch)
    }

    /// Worker `w`'s end of the tensors one fetch or push of its step moves,
    /// from `from`: CPU on the shared host that nothing waits for (see
    /// `Workload::worker_transfer_us`). Nothing without it or `host_cores`,
    /// so that other workloads keep their cores' schedule bit for bit.
    pub(super) fn worker_transfer_cpu(&mut self, w: u32, from: SimTime) {
        if self.worker_transfer == SimTime::ZERO || self.cores.is_empty() {
            return;
        }
        let tensors: u64 = (0..self.layout.tasks()).filter(|&k| self.involved(w, k)).map(|k| self.layout.tensors[k]).sum();
        self.cpu(from, SimTime(self.worker_transfer.0.saturating_mul(tensors)));
    }

    pub(super) fn involved(&self, w: u32, k: usize) -> bool {
        self.layout.dense[k] > 0 || self.sparse[w as usize * self.layout.tasks() + k] > 0
    }

    /// Starts worker `w`'s step at its current generation: fetch requests to every task it needs.
    pub(super) fn start_step(&mut self, w: u32) -> Result<(), SimError> {
        let now = self.q.now();
        let tasks = self.layout.tasks();
        let row = w as usize * tasks..(w as usize + 1) * tasks;
        self.layout.draw_sparse(&mut self.rng, &mut self.sparse[row.clone()]);
        for (k, (bytes, &sparse)) in self.shard_bytes[row.clone()].iter_mut().zip(&self.sparse[row]).enumerate() {
            *bytes = self.comm.bytes_for(self.layout.dense[k]) + self.comm.bytes_for(sparse);
        }
        let epoch = self.workers[w as usize].epoch;
        // the master's CPU runs beside the worker's own overhead (nothing
        // waits for it), and its call reaches the worker `dispatch` after
        // the step's start at the earliest
        if self.master_cpu > SimTime::ZERO && !self.cores.is_empty() {
            self.cpu(now, self.master_cpu);
        }
        let t0 = self.cpu(now, self.overhead).max(now + self.dispatch) + self.wait;
        self.workers[w as usize].started_at = t0;
        self.worker_transfer_cpu(w, t0);
        let mut pending = 0;
        for k in 0..self.layout.tasks() {
            if self.involved(w, k) {
                let lat = self.route(w, k as u32, false)?.latency;
                self.q.schedule_at(t0 + lat, Ev::FetchArrive { w, ps: k as u32, epoch });
                pending += 1;
            }
        }
        self.workers[w as usize].pending = pending;
        if pending == 0 {
            // Nothing to fetch or push: the whole compute at once.
            self.workers[w as usize].fetched_version = self.version;
            self.workers[w as usize].backward = SimTime::ZERO;
            self.compute(w, epoch);
        } else if self.w.overlap {
            self.start_forward(w, t0);
        }
        Ok(())
    }

    pub(super) fn compute(&mut self, w: u32, epoch: u64) {
        let now = self.q.now();
        let d = self.compute_duration(w, now);
        let end = self.cpu(now, d);
        self.q.schedule_at(end, Ev::ComputeDone { w, epoch });
        if !self.push_tensors.is_empty() {
            // the backward pass ends the compute and makes the gradients
            // one by one: each leaves once made
            let backward = d.as_secs_f64() * (1.0 - self.w.forward_fraction);
            let tasks = self.layout.tasks();
            // a model of variables only: a task's tensors are the variables it holds
            for (left, &held) in self.tensors_left[w as usize * tasks..(w as usize + 1) * tasks].iter_mut().zip(&self.layout.tensors) {
                *left = held as u32;
            }
            for (i, t) in self.push_tensors.iter().enumerate() {
                let at = end.saturating_sub(SimTime::from_secs_f64(backward * (1.0 - t.made_at))).max(now);
                self.q.schedule_at(at, Ev::PushTensor { w, i: i as u32, epoch });
            }
            self.workers[w as usize].pending = self.push_tensors.len() as u32;
        }
    }

    /// Worker `w`'s compute time for a step starting at `now`: the
    /// workload's jitter and the straggler model's factor.
    pub(super) fn compute_duration(&mut self, w: u32, now: SimTime) -> SimTime {
        let jitter = if self.w.compute_sigma > 0.0 {
            (self.w.compute_sigma * self.rng.sample::<f64, _>(StandardNormal)).exp()
        } else {
            1.0
        };
        let factor = self.straggler.factor(&mut self.rng, w as usize, now);
        SimTime::from_secs_f64(self.w.compute_s * jitter * factor)
    }

    pub(super) fn push(&mut self, w: u32, epoch: u64) -> Result<(), SimError> {
        let now = self.q.now();
        let ws = &mut self.workers[w as usize];
        ws.computed_at = if self.w.overlap { ws.backward_end } else { now };
        self.worker_transfer_cpu(w, now);
        if !self.push_tensors.is_empty() {
            // the tensors left as the backward pass made them (`compute`)
            return Ok(());
        }
        let mut pending = 0;
        for k in 0..self.layout.tasks() {
            if self.involved(w, k) {
                let bytes = self.shard_bytes[w as usize * self.layout.tasks() + k];
                let tag = self.transfer(Transfer { w, ps: k as u32, epoch, kind: TransferKind::Push, ready: now, tensor: u32::MAX });
                let route = self.route(w, k as u32, false)?;
                self.net.start_flow_on(now, self.worker_endpoint(w), self.ps_endpoint(k as u32), route, bytes, tag)?;
                pending += 1;
            }
        }
        self.workers[w as usize].pending = pending;
        if pending == 0 {
            self.gradient_applied(w)?;
        }
        Ok(())
    }
}
