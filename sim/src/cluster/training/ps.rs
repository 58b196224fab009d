//! The PS tasks' side of a step: serving fetches and pushes on their CPU,
//! the optimizer's memory work, the softmax computed on the PS tasks.

use super::*;

impl Sim<'_> {
    /// PS task `ps` has all of worker `w`'s gradient shard (of its current
    /// step: both callers check): its CPU applies it (FIFO).
    pub(super) fn push_complete(&mut self, w: u32, ps: u32, epoch: u64) {
        let extra = if ps == 0 { self.first_push } else { SimTime::ZERO };
        let memory = self.gradient_memory_work(w, ps);
        let at = self.serve_for(ps, self.q.now(), self.ps_push_request[ps as usize] + extra + memory);
        self.q.schedule_at(at, Ev::PushServed { w, ps, epoch, whole: true });
    }

    /// With `ps_softmax`: worker `w`'s activations leave for every PS task
    /// (each answers with their gradient once it has computed its classes).
    pub(super) fn softmax_exchange(&mut self, w: u32, epoch: u64) -> Result<(), SimError> {
        let now = self.q.now();
        let tasks = self.layout.tasks();
        for k in 0..tasks as u32 {
            let tag = self.transfer(Transfer { w, ps: k, epoch, kind: TransferKind::Activations, ready: now, tensor: u32::MAX });
            let route = self.route(w, k, false)?;
            self.net.start_flow_on(now, self.worker_endpoint(w), self.ps_endpoint(k), route, self.activation_bytes, tag)?;
        }
        self.workers[w as usize].pending = tasks as u32;
        Ok(())
    }

    /// PS CPU time for `passes` passes over the elements worker `w` moves
    /// to or from task `ps` this step (its dense share and its sparse rows).
    pub(super) fn memory_work(&self, w: u32, ps: u32, passes: u32) -> SimTime {
        if self.pass_s == 0.0 {
            return SimTime::ZERO;
        }
        let k = ps as usize;
        let elements = self.layout.dense[k] + self.sparse[w as usize * self.layout.tasks() + k];
        SimTime::from_secs_f64(self.pass_s * f64::from(passes) * elements as f64)
    }

    /// What a gradient costs the task's memory as it is taken in: alone
    /// (one gradient an update, as asynchronous training has) the update's
    /// passes; else three passes to add it to the accumulator, and the
    /// update's passes with the `need`-th. Later ones are dropped unread.
    pub(super) fn gradient_memory_work(&mut self, w: u32, ps: u32) -> SimTime {
        if self.pass_s == 0.0 {
            return SimTime::ZERO;
        }
        let g = self.workers[w as usize].group as usize;
        let need = self.groups[g].need;
        let taken = &mut self.groups[g].taken[ps as usize];
        *taken += 1;
        let passes = match (need, (*taken).cmp(&need)) {
            (1, std::cmp::Ordering::Equal) => self.update_passes,
            (_, std::cmp::Ordering::Less) => 3,
            (_, std::cmp::Ordering::Equal) => 3 + self.update_passes,
            (_, std::cmp::Ordering::Greater) => 0,
        };
        self.memory_work(w, ps, passes)
    }

    /// Worker `w`'s shard from PS task `ps` has arrived and the task has
    /// served it; with `fetch_in_turn` it is the worker's once the task
    /// has also served the work queued by then (which shared its turns),
    /// not what comes later: a busy task starves no fetch.
    pub(super) fn fetch_ready(&mut self, w: u32, ps: u32, epoch: u64) {
        let busy = self.ps_busy[ps as usize];
        if self.w.fetch_in_turn && busy > self.q.now() {
            self.q.schedule_at(busy, Ev::FetchReady { w, ps, epoch, held: true });
        } else {
            self.shard_fetched(w, epoch);
        }
    }

    /// FIFO PS CPU: work of `d` on PS task `ps` arriving at `now` is done
    /// at the returned time. On a shared host it also holds a core.
    pub(super) fn serve_for(&mut self, ps: u32, now: SimTime, d: SimTime) -> SimTime {
        let from = self.ps_busy[ps as usize].max(now);
        let end = self.cpu(from, d);
        self.ps_busy[ps as usize] = end;
        end
    }

    /// Worker `w`'s push to PS task `ps` (which sends tokens) was served:
    /// when it is the group's `need`-th there, the task's update for the
    /// step has run and its tokens leave for the first task.
    pub(super) fn push_counted(&mut self, w: u32, ps: u32) -> Result<(), SimError> {
        let now = self.q.now();
        let g = self.workers[w as usize].group as usize;
        let k = ps as usize;
        let gs = &mut self.groups[g];
        gs.served[k] += 1;
        if gs.served[k] != gs.need {
            return Ok(());
        }
        let round = gs.round;
        if self.token_latency[k] == SimTime::MAX {
            self.token_latency[k] = self.net.path_latency(self.ps_endpoint(ps), self.ps_endpoint(0))?;
        }
        let lat = self.token_latency[k];
        for _ in 0..self.tokens[k] {
            let sent = self.serve_for(ps, now, self.token_cpu);
            self.q.schedule_at(sent + lat, Ev::TokenArrive { g: g as u32, round });
        }
        Ok(())
    }
}
