//! The event-driven replay of one step on a placement (see the module
//! contract of `simulate`): the state of a running step and one method per
//! thing that happens to it. Devices run ready nodes (a stack on devices
//! that run their own transfers, as the engine's executor; earliest ready
//! first elsewhere), kernels share the host's cores when contended,
//! outputs go to local consumers at once and to remote ones by transfers
//! over copy engines or shared ports, and memory is counted per device.

use super::{Event, GraphSimulator, NONE, Trace, Transfer};
use crate::error::SimError;
use crate::event_queue::EventQueue;
use crate::network::ports::SharedPorts;
use crate::graph::sim_graph::SimGraph;
use crate::time::SimTime;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A step being replayed. Node ids index the graph; ids from `n` on in a
/// device's ready heap are the Recv kernels of transfers `id - n`.
pub(super) struct Replay<'s> {
    sim: &'s GraphSimulator,
    g: &'s SimGraph,
    dev: &'s [u16],
    n: usize,
    nd: usize,
    /// Dependencies each node still waits for.
    pending: Vec<u32>,
    ready_at: Vec<u64>,
    /// The node whose output made each node ready last, and the node its
    /// device ran just before it when it had to wait for the device.
    pred: Vec<u32>,
    dev_pred: Vec<u32>,
    start: Vec<u64>,
    finish: Vec<u64>,
    done: usize,
    heaps: Vec<BinaryHeap<Reverse<(u64, u32)>>>,
    /// Pushes so far: the stack order of self-driven devices.
    pushes: u64,
    busy: Vec<bool>,
    /// Per self-driven device: transfers that arrived while it ran a
    /// kernel, in order of arrival. As the engine takes its inbox after
    /// each node, their Recvs go on top of the stack once the node's own
    /// successors are on it.
    inbox: Vec<Vec<u32>>,
    last_op: Vec<u32>,
    busy_ps: Vec<u64>,
    ops_per_device: Vec<usize>,
    copy_free: Vec<Vec<u64>>,
    ports: SharedPorts,
    rates_due: bool,
    mem: Vec<u64>,
    peak_mem: Vec<u64>,
    slot_ref: Vec<u32>,
    /// Transfer id per (slot, destination), for releasing received copies.
    xfer_of: Vec<u32>,
    xfer_ref: Vec<u32>,
    transfers: Vec<Transfer>,
    q: EventQueue<Event>,
    /// Host contention (processor sharing among self-driven devices): the
    /// kernel each device runs (event id as in `OpDone`), its speed beside
    /// one other computing device, its work left in solo picoseconds, since
    /// when, and its generation.
    kernel: Vec<u32>,
    kshare: Vec<f64>,
    pair_share: f64,
    work_left: Vec<f64>,
    kernel_start: Vec<u64>,
    generation: Vec<u32>,
    computing: usize,
    settled_at: u64,
}

impl<'s> Replay<'s> {
    /// Checks that each node's device exists and can run it, and sets up
    /// an empty step.
    pub(super) fn new(sim: &'s GraphSimulator, dev: &'s [u16]) -> Result<Replay<'s>, SimError> {
        let g = &sim.graph;
        let n = g.len();
        let nd = sim.ndev;
        if dev.len() != n {
            return Err(SimError::param("placement", format!("{} devices given for {} nodes", dev.len(), n)));
        }
        for (i, &d) in dev.iter().enumerate() {
            if d as usize >= nd {
                return Err(SimError::Placement { node: g.names[i].clone(), detail: format!("device index {d} outside the cluster of {nd}") });
            }
            if g.runs[i] && sim.times[i * nd + d as usize] == u64::MAX {
                return Err(SimError::Placement {
                    node: g.names[i].clone(),
                    detail: format!("{} cannot run its {} (the roofline has no rate for it there)", sim.cluster.devices()[d as usize].name, g.ops[i]),
                });
            }
        }
        let nslots = g.slot_elems.len();
        Ok(Replay {
            sim,
            g,
            dev,
            n,
            nd,
            pending: (0..n).map(|i| (g.inputs.get(i).len() + g.control_inputs.get(i).len()) as u32).collect(),
            ready_at: vec![0; n],
            pred: vec![NONE; n],
            dev_pred: vec![NONE; n],
            start: vec![0; n],
            finish: vec![0; n],
            done: 0,
            heaps: vec![BinaryHeap::new(); nd],
            pushes: 0,
            busy: vec![false; nd],
            inbox: vec![Vec::new(); nd],
            last_op: vec![NONE; nd],
            busy_ps: vec![0; nd],
            ops_per_device: vec![0; nd],
            copy_free: sim.copy_engines.iter().map(|&k| vec![0u64; k]).collect(),
            ports: SharedPorts::new(sim.port_cap.clone()),
            rates_due: false,
            mem: vec![0; nd],
            peak_mem: vec![0; nd],
            slot_ref: vec![0; nslots],
            xfer_of: vec![NONE; nslots * nd],
            xfer_ref: Vec::new(),
            transfers: Vec::new(),
            q: EventQueue::new(),
            kernel: vec![NONE; nd],
            kshare: vec![1.0; nd],
            pair_share: sim.contention.get(1).copied().unwrap_or(1.0),
            work_left: vec![0.0; nd],
            kernel_start: vec![0; nd],
            generation: vec![0; nd],
            computing: 0,
            settled_at: 0,
        })
    }

    /// Runs the step to its end.
    pub(super) fn run(mut self) -> Result<Trace, SimError> {
        for i in 0..self.n {
            if self.g.is_variable[i] {
                let d = self.dev[i] as usize;
                self.mem[d] += self.g.footprint(i);
                self.peak_mem[d] = self.peak_mem[d].max(self.mem[d]);
            }
        }
        for i in (0..self.n).rev() {
            if self.pending[i] == 0 {
                let d = self.dev[i] as usize;
                let k = self.ready_key(d, 0);
                self.heaps[d].push(Reverse((k, i as u32)));
            }
        }
        for d in 0..self.nd {
            self.try_start(d, 0);
        }
        // The time of the last event that did something (stale kernel
        // events are skipped).
        let mut clock = 0u64;
        while let Some((t, ev)) = self.q.pop() {
            let now = t.0;
            let ev = match ev {
                Event::PortWake { generation } if generation != self.ports.generation => continue,
                Event::Kernel { device, generation } => match self.kernel_done(device as usize, generation, now) {
                    Some(id) => Event::OpDone(id),
                    None => continue,
                },
                e => e,
            };
            clock = now;
            self.handle(ev, now);
        }
        if self.done < self.n {
            let stuck = (0..self.n).find(|&i| self.pending[i] > 0).unwrap_or(0);
            return Err(SimError::Graph { node: self.g.names[stuck].clone(), detail: "it never became ready (its inputs form a cycle)".into() });
        }
        let r = self;
        Ok(Trace {
            step: SimTime(clock),
            start: r.start,
            finish: r.finish,
            busy_ps: r.busy_ps,
            peak_mem: r.peak_mem,
            ops_per_device: r.ops_per_device,
            transfers: r.transfers,
            pred: r.pred,
            dev_pred: r.dev_pred,
        })
    }

    fn handle(&mut self, ev: Event, now: u64) {
        match ev {
            Event::OpDone(i) if i as usize >= self.n => {
                // A Recv kernel finished: its device is free, the tensor is
                // there. The device chooses its next node once all that
                // the Recv made ready is on its stack.
                let x = i as usize - self.n;
                let dst = self.transfers[x].dst as usize;
                self.deliver(x, now);
                self.take_arrivals(dst);
                self.busy[dst] = false;
                self.try_start(dst, now);
            }
            Event::OpDone(i) => self.op_done(i, now),
            Event::DeviceFree(d) => {
                self.take_arrivals(d as usize);
                self.busy[d as usize] = false;
                self.try_start(d as usize, now);
            }
            // Turned into OpDone by `run`.
            Event::Kernel { .. } => {}
            Event::TransferDone(x) => self.transfer_done(x, now),
            Event::PortJoin(x) => {
                let tr = self.transfers[x as usize];
                if let Some((o, i)) = self.sim.pair_ports[tr.src as usize * self.nd + tr.dst as usize] {
                    self.ports.join(now, x, o, i, tr.bytes);
                    self.schedule_rates(now);
                }
            }
            Event::PortWake { .. } => {
                let done = self.ports.finish(now);
                if !done.is_empty() {
                    self.schedule_rates(now);
                } else if let Some(at) = self.ports.next_end(now) {
                    // Woken a rounding error early: the same rates hold.
                    self.q.schedule_at(SimTime(at.max(now + 1)), Event::PortWake { generation: self.ports.generation });
                }
                for x in done {
                    self.transfer_done(x, now);
                }
            }
            Event::PortRates => {
                self.rates_due = false;
                self.ports.fill();
                if let Some(at) = self.ports.next_end(now) {
                    self.q.schedule_at(SimTime(at), Event::PortWake { generation: self.ports.generation });
                }
            }
        }
    }

    /// Node `i` finished on its device: its outputs go to local consumers
    /// at once and to remote devices by transfers (after the device's own
    /// Send kernels, where it runs them), and the inputs it was the last
    /// consumer of are freed.
    fn op_done(&mut self, i: u32, now: u64) {
        let (g, dev) = (self.g, self.dev);
        let iu = i as usize;
        let d = dev[iu] as usize;
        self.finish[iu] = now;
        self.done += 1;
        self.last_op[d] = i;
        // A device that runs its own Sends stays busy through them; each
        // transfer leaves when its Send is done.
        let self_driven = self.sim.self_driven[d];
        let self_sends = self_driven
            && (g.slots(iu).any(|s| g.slot_consumers.get(s).iter().any(|&c| dev[c as usize] as usize != d))
                || g.control_consumers.get(iu).iter().any(|&c| dev[c as usize] as usize != d));
        // Such a device also chooses its next node only once all that this
        // one made ready is on its stack.
        self.busy[d] = self_driven;
        let mut send_clock = now;
        for s in g.slots(iu) {
            self.send_output(iu, s, now, self_sends, &mut send_clock);
        }
        let mut sent: u64 = 0;
        for &c in g.control_consumers.get(iu) {
            let cd = dev[c as usize] as usize;
            if cd == d {
                self.arrive(c, now, i);
            } else if sent & (1u64 << cd) == 0 {
                sent |= 1u64 << cd;
                let x = self.transfers.len() as u32;
                let bytes = self.sim.control_bytes;
                self.transfers.push(Transfer { what: i, control: true, src: d as u16, dst: cd as u16, bytes });
                self.xfer_ref.push(0);
                if self_sends {
                    send_clock += self.sim.control_send_ps;
                }
                self.send(x, d, cd, bytes, send_clock);
            }
        }
        self.free_inputs(iu, d);
        if self_sends {
            self.busy_ps[d] += send_clock - now;
            self.q.schedule_at(SimTime(send_clock), Event::DeviceFree(d as u16));
        } else {
            if self_driven {
                self.take_arrivals(d);
                self.busy[d] = false;
            }
            self.try_start(d, now);
        }
    }

    /// Output slot `s` of node `iu`: one transfer per remote device that
    /// reads it (each leaving at `send_clock`, advanced by its Send kernel
    /// when the device runs its own), then its local consumers.
    fn send_output(&mut self, iu: usize, s: usize, now: u64, self_sends: bool, send_clock: &mut u64) {
        let (g, dev) = (self.g, self.dev);
        let d = dev[iu] as usize;
        let mut refs = 0u32;
        let mut sent: u64 = 0;
        for &c in g.slot_consumers.get(s) {
            let cd = dev[c as usize] as usize;
            if cd == d {
                refs += 1;
            } else if sent & (1u64 << cd) == 0 {
                sent |= 1u64 << cd;
                refs += 1;
                let bytes = self.sim.wire_bytes[s];
                let x = self.transfers.len() as u32;
                self.transfers.push(Transfer { what: s as u32, control: false, src: d as u16, dst: cd as u16, bytes });
                self.xfer_of[s * self.nd + cd] = x;
                self.xfer_ref.push(0);
                if self_sends {
                    *send_clock += self.sim.send_ps[s];
                }
                self.send(x, d, cd, bytes, *send_clock);
            }
        }
        self.slot_ref[s] = refs;
        if refs == 0 && !g.is_variable[iu] {
            self.mem[d] -= g.slot_mem[s];
        }
        for &c in g.slot_consumers.get(s) {
            if dev[c as usize] as usize == d {
                self.arrive(c, now, iu as u32);
            }
        }
    }

    /// Inputs node `iu` (on device `d`) was the last consumer of are freed:
    /// the producer's copy on this device, or the received one.
    fn free_inputs(&mut self, iu: usize, d: usize) {
        let g = self.g;
        for &s in g.inputs.get(iu) {
            let s = s as usize;
            let p = g.slot_node[s] as usize;
            if self.dev[p] as usize == d {
                self.slot_ref[s] -= 1;
                if self.slot_ref[s] == 0 && !g.is_variable[p] {
                    self.mem[d] -= g.slot_mem[s];
                }
            } else {
                let x = self.xfer_of[s * self.nd + d] as usize;
                self.xfer_ref[x] -= 1;
                if self.xfer_ref[x] == 0 {
                    self.mem[d] -= g.slot_mem[s];
                }
            }
        }
    }

    /// The key of a node made ready on `d`: a stack position on devices
    /// that run their own transfers (the engine's executor runs the node
    /// made ready last), else its ready time.
    fn ready_key(&mut self, d: usize, ready: u64) -> u64 {
        self.pushes += 1;
        if self.sim.self_driven[d] { u64::MAX - self.pushes } else { ready }
    }

    /// A kernel's speed while `k` devices compute: alone 1; beside one
    /// other its own share; beyond, that share scaled as the host's
    /// measured speeds at k and 2 devices.
    fn rate(&self, share: f64, k: usize) -> f64 {
        let contention = &self.sim.contention;
        match k {
            0 | 1 => 1.0,
            2 => share,
            _ => match (contention.get(1), contention.get(k - 1).or(contention.last())) {
                (Some(&e2), Some(&ek)) if e2 > 0.0 => (share * ek / e2).clamp(1e-6, 1.0),
                _ => share,
            },
        }
    }

    /// Work done by every running kernel up to `now` at the old rates.
    fn settle(&mut self, now: u64) {
        for d in 0..self.nd {
            if self.kernel[d] != NONE {
                let r = self.rate(self.kshare[d], self.computing);
                self.work_left[d] = (self.work_left[d] - (now - self.settled_at) as f64 * r).max(0.0);
            }
        }
        self.settled_at = now;
    }

    /// Every running kernel's end at the current rates.
    fn reschedule(&mut self, now: u64) {
        for d in 0..self.nd {
            if self.kernel[d] != NONE {
                let r = self.rate(self.kshare[d], self.computing);
                self.generation[d] += 1;
                let end = now + (self.work_left[d] / r).ceil() as u64;
                self.q.schedule_at(SimTime(end), Event::Kernel { device: d as u16, generation: self.generation[d] });
            }
        }
    }

    /// A contended kernel's end event: the kernel's id, or `None` if the
    /// event is stale (the kernels were rescheduled since).
    fn kernel_done(&mut self, d: usize, generation: u32, now: u64) -> Option<u32> {
        if generation != self.generation[d] {
            return None;
        }
        self.settle(now);
        let id = self.kernel[d];
        self.kernel[d] = NONE;
        self.busy_ps[d] += now - self.kernel_start[d];
        self.computing -= 1;
        self.reschedule(now);
        Some(id)
    }

    /// Starts kernel `id` of `dt` solo picoseconds on device `d`.
    fn launch(&mut self, d: usize, id: u32, now: u64, dt: u64) {
        if self.sim.contended && self.sim.self_driven[d] {
            self.settle(now);
            self.kernel[d] = id;
            self.kshare[d] = if (id as usize) < self.n { self.sim.shares[id as usize * self.nd + d] } else { self.pair_share };
            self.work_left[d] = dt as f64;
            self.kernel_start[d] = now;
            self.computing += 1;
            self.reschedule(now);
        } else {
            self.busy_ps[d] += dt;
            self.q.schedule_at(SimTime(now + dt), Event::OpDone(id));
        }
    }

    /// Starts the first ready node (or Recv) of device `d` if it is idle.
    fn try_start(&mut self, d: usize, now: u64) {
        if self.busy[d] {
            return;
        }
        let Some(Reverse((_, i))) = self.heaps[d].pop() else { return };
        let i = i as usize;
        self.busy[d] = true;
        if i >= self.n {
            // The Recv kernel of transfer i - n.
            let tr = self.transfers[i - self.n];
            let dt = if tr.control { self.sim.control_recv_ps } else { self.sim.recv_ps[tr.what as usize] };
            self.launch(d, i as u32, now, dt);
        } else {
            if now > self.ready_at[i] {
                self.dev_pred[i] = self.last_op[d];
            }
            let dt = self.sim.op_ps(i, d);
            self.start[i] = now;
            self.ops_per_device[d] += 1;
            if !self.g.is_variable[i] {
                self.mem[d] += self.g.footprint(i);
                self.peak_mem[d] = self.peak_mem[d].max(self.mem[d]);
            }
            self.launch(d, i as u32, now, dt);
        }
    }

    /// One dependency of `c` satisfied at `now`, the last one coming from `from`.
    fn arrive(&mut self, c: u32, now: u64, from: u32) {
        let c = c as usize;
        if now > self.ready_at[c] || self.pred[c] == NONE {
            self.ready_at[c] = now;
            self.pred[c] = from;
        }
        self.pending[c] -= 1;
        if self.pending[c] == 0 {
            let d = self.dev[c] as usize;
            let k = self.ready_key(d, self.ready_at[c]);
            self.heaps[d].push(Reverse((k, c as u32)));
            self.try_start(d, now);
        }
    }

    /// Transfer `x` is on its destination device: its consumers there get
    /// their input.
    fn deliver(&mut self, x: usize, now: u64) {
        let (g, dev) = (self.g, self.dev);
        let tr = self.transfers[x];
        let dst = tr.dst as usize;
        if tr.control {
            for &c in g.control_consumers.get(tr.what as usize) {
                if dev[c as usize] as usize == dst {
                    self.arrive(c, now, tr.what);
                }
            }
        } else {
            let s = tr.what as usize;
            let p = g.slot_node[s];
            let consumers = g.slot_consumers.get(s);
            self.xfer_ref[x] = consumers.iter().filter(|&&c| dev[c as usize] as usize == dst).count() as u32;
            self.mem[dst] += g.slot_mem[s];
            self.peak_mem[dst] = self.peak_mem[dst].max(self.mem[dst]);
            // The source copy is no longer needed for this transfer.
            self.release_source(s, tr.src as usize);
            for &c in consumers {
                if dev[c as usize] as usize == dst {
                    self.arrive(c, now, p);
                }
            }
        }
    }

    /// Drops one reference to slot `s` on its source device `d`.
    fn release_source(&mut self, s: usize, d: usize) {
        let p = self.g.slot_node[s] as usize;
        if self.slot_ref[s] > 0 {
            self.slot_ref[s] -= 1;
            if self.slot_ref[s] == 0 && !self.g.is_variable[p] {
                self.mem[d] -= self.g.slot_mem[s];
            }
        }
    }

    /// Transfer `x` of `bytes` leaves device `src` for `dst` at `at`: over
    /// a port link it joins the ports after its latency, else it queues on
    /// the sender's first free copy engine.
    fn send(&mut self, x: u32, src: usize, dst: usize, bytes: u64, at: u64) {
        if self.sim.pair_ports[src * self.nd + dst].is_some() {
            let (latency, _) = self.sim.transfer_parts_ps(src, dst, 0);
            self.q.schedule_at(SimTime(at + latency), Event::PortJoin(x));
        } else {
            let sim = self.sim;
            let end = self.copy_free[src].iter_mut().min().map_or(0, |f| {
                let start = (*f).max(at);
                *f = start + sim.transfer_ps(src, dst, bytes);
                *f
            });
            self.q.schedule_at(SimTime(end), Event::TransferDone(x));
        }
    }

    /// Device `d` finished a node: what arrived meanwhile goes on top.
    fn take_arrivals(&mut self, d: usize) {
        for x in self.inbox[d].drain(..) {
            self.pushes += 1;
            self.heaps[d].push(Reverse((u64::MAX - self.pushes, self.n as u32 + x)));
        }
    }

    /// Transfer `x` has crossed its link.
    fn transfer_done(&mut self, x: u32, now: u64) {
        let dst = self.transfers[x as usize].dst as usize;
        if self.sim.self_driven[dst] {
            // The receiving device runs the Recv kernel before its other
            // ready work: at once if it is waiting, else after the node it
            // is running (the engine takes arrivals between nodes).
            if self.busy[dst] {
                self.inbox[dst].push(x);
            } else {
                self.pushes += 1;
                self.heaps[dst].push(Reverse((u64::MAX - self.pushes, self.n as u32 + x)));
                self.try_start(dst, now);
            }
        } else {
            self.deliver(x as usize, now);
        }
    }

    /// New port rates are due at `now` (once per instant, after its joins).
    fn schedule_rates(&mut self, now: u64) {
        if !self.rates_due {
            self.rates_due = true;
            self.q.schedule_at(SimTime(now), Event::PortRates);
        }
    }
}
