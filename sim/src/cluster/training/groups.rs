//! The end of a step: gradients applied, a group's update, its members
//! released into the next step.

use super::*;

impl Sim<'_> {
    /// Worker `w`'s whole gradient has been applied on every task.
    pub(super) fn gradient_applied(&mut self, w: u32) -> Result<(), SimError> {
        let ws = &mut self.workers[w as usize];
        if w == 0 {
            self.w0_applied = Some((ws.started_at, ws.fetched_at, ws.computed_at));
        }
        // Stop the worker until its group releases it.
        ws.epoch += 1;
        let stale = (self.version - ws.fetched_version) as usize;
        if self.staleness.len() <= stale {
            self.staleness.resize(stale + 1, 0);
        }
        self.staleness[stale] += 1;
        let g = ws.group as usize;
        self.groups[g].arrivals += 1;
        if self.groups[g].arrivals == self.groups[g].need && self.groups[g].tokens == 0 {
            self.tasks_done(g)?;
        }
        Ok(())
    }

    /// Group `g`'s step has ended on every task: its answers reach the
    /// master `end_wait` later.
    pub(super) fn tasks_done(&mut self, g: usize) -> Result<(), SimError> {
        let now = self.q.now();
        self.groups[g].tasks_done = now;
        if self.end_wait == SimTime::ZERO {
            return self.group_step_done(g);
        }
        let round = self.groups[g].round;
        self.q.schedule_at(now + self.end_wait, Ev::StepAnswered { g: g as u32, round });
        Ok(())
    }

    pub(super) fn group_step_done(&mut self, g: usize) -> Result<(), SimError> {
        let now = self.q.now();
        let need = u64::from(self.groups[g].need);
        let start = self.groups[g].step_start;
        self.step_times.push((now - start).as_secs_f64());
        if self.workers.first().is_some_and(|w0| w0.group as usize == g)
            && let Some((started, fetched, computed)) = self.w0_applied.take()
        {
            // the master's part: before the worker's start and after the
            // last task's end
            let s = |a: SimTime, b: SimTime| b.saturating_sub(a).as_secs_f64();
            let tasks_done = self.groups[g].tasks_done;
            self.phases.push([s(start, started) + s(tasks_done, now), s(started, fetched), s(fetched, computed), s(computed, tasks_done)]);
        }
        self.applied += need;
        self.failures_in_a_row = 0;
        self.processed += need;
        self.version += 1;
        if self.applied >= self.next_ckpt && self.applied < self.target {
            if let Some(c) = &self.cfg.checkpoint {
                let every = c.every_steps.saturating_mul(u64::from(self.cfg.workers));
                self.next_ckpt = self.applied.saturating_add(every);
                self.last_ckpt = self.applied;
                self.ckpt_active = true;
                self.paused_s += c.cost_s;
                self.q.schedule_in(SimTime::from_secs_f64(c.cost_s), Ev::CheckpointDone);
            }
        }
        if self.ckpt_active || self.recovering {
            self.groups[g].waiting = true;
            Ok(())
        } else {
            self.release(g)
        }
    }

    /// Starts group `g`'s next step; members still busy are aborted.
    pub(super) fn release(&mut self, g: usize) -> Result<(), SimError> {
        let now = self.q.now();
        let gs = &mut self.groups[g];
        gs.arrivals = 0;
        gs.waiting = false;
        gs.step_start = now;
        gs.round += 1;
        gs.served.iter_mut().for_each(|s| *s = 0);
        gs.taken.iter_mut().for_each(|s| *s = 0);
        gs.tokens = self.tokens.iter().sum();
        let (first, len) = (gs.first, gs.len);
        if first == 0 {
            // an aborted step's gradient is not this one's
            self.w0_applied = None;
        }
        for w in first..first + len {
            self.workers[w as usize].epoch += 1;
            self.start_step(w)?;
        }
        Ok(())
    }

    pub(super) fn release_waiting(&mut self) -> Result<(), SimError> {
        if self.ckpt_active || self.recovering {
            return Ok(());
        }
        for g in 0..self.groups.len() {
            if self.groups[g].waiting {
                self.release(g)?;
            }
        }
        Ok(())
    }
}
