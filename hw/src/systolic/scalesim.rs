//! SCALE-Sim 3.0.0's memory system, replayed as SCALE-Sim replays it: the
//! stall and total cycles of compat mode when the DRAM bandwidth is given
//! (SCALE-Sim's `InterfaceBandwidth: USER`).
//!
//! This is a port of `single_layer_sim.py`, `operand_matrix.py`,
//! `systolic_compute_{os,ws,is}.py` and `memory/{read,write}_buffer.py`
//! (no custom layout, no sparsity, no Ramulator trace), so that a user can
//! reproduce published SCALE-Sim figures. It keeps SCALE-Sim's model
//! exactly, including what the physical model (`memory.rs`) does not do:
//! * the array's demand is replayed one line (one cycle) at a time; each
//!   operand buffer holds "sets" of `ceil(SRAM words / 100)` addresses taken
//!   from its prefetch order, half of them active;
//! * a miss in the active sets starts a prefetch that begins when the
//!   previous prefetch ended (not when the miss happens) and takes
//!   `ceil(half / bandwidth) + 1` cycles;
//! * the wait for a prefetch is added to the line's delay twice when
//!   positive, and subtracted when the prefetch ended in the past;
//! * a line's stall is the largest of the three operands' delays.
//!
//! The second and third points are why SCALE-Sim's stalls are several times
//! what the bandwidth alone explains (see `bench/scalesim/README.md`).

use super::mapping::Mapping;
use super::memory::MemoryOutcome;
use super::report::{LayerReport, SramCounts};
use super::{ArrayConfig, Dataflow, Layer};
use crate::HwError;

/// Most address checks one replay may take (demand lines x array ports plus
/// the prefetch order): about 5 to 10 s on this project's machines.
pub const MAX_REPLAY_WORK: u64 = 1 << 30;

/// What SCALE-Sim's `COMPUTE_REPORT` and access counts say for one layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replay {
    /// SCALE-Sim's "Total Cycles": the latest cycle an output line is written.
    pub total_cycles: u64,
    /// SCALE-Sim's "Stall Cycles".
    pub stall_cycles: u64,
    /// Cycles the first prefetch runs before cycle 0.
    pub prefetch_cycles: u64,
    /// Cycles from the last output line to the last DRAM write.
    pub drain_cycles: u64,
    pub ifmap_dram_words: u64,
    pub filter_dram_words: u64,
    pub ofmap_dram_words: u64,
}

/// Whether compat mode replays SCALE-Sim's memory system for this config:
/// only with every DRAM bandwidth given, as SCALE-Sim's USER mode.
pub(crate) fn applies(cfg: &ArrayConfig) -> bool {
    cfg.scalesim_compat && cfg.dram_bandwidths().iter().all(Option::is_some)
}

/// SCALE-Sim's operand address matrices (`operand_matrix.py`), each operand
/// numbered from 0 (its offset only separates operands, and every buffer
/// holds one).
struct Operands {
    m: u64,
    n: u64,
    k: u64,
    ifmap_h: u64,
    ifmap_w: u64,
    filter_w: u64,
    channels: u64,
    stride_h: u64,
    stride_w: u64,
    ofmap_w: u64,
}

impl Operands {
    fn new(layer: &Layer) -> Operands {
        let (m, n, k) = layer.gemm_dims_scalesim();
        let ofmap_w = (layer.ifmap_w - layer.filter_w).div_ceil(layer.stride_w) + 1;
        Operands {
            m,
            n,
            k,
            ifmap_h: layer.ifmap_h,
            ifmap_w: layer.ifmap_w,
            filter_w: layer.filter_w,
            channels: layer.channels,
            stride_h: layer.stride_h,
            stride_w: layer.stride_w,
            ofmap_w,
        }
    }

    /// Word `j` of output pixel `i`'s window (-1 where the window hangs off
    /// the input, as SCALE-Sim's ceil-rounded output size lets it).
    fn ifmap(&self, i: u64, j: u64) -> i64 {
        let (i_row, i_col) = ((i / self.ofmap_w) * self.stride_h, (i % self.ofmap_w) * self.stride_w);
        let (c_row, rest) = (j / (self.filter_w * self.channels), j % (self.filter_w * self.channels));
        let (c_col, c_ch) = (rest / self.channels, rest % self.channels);
        if c_row + i_row >= self.ifmap_h || c_col + i_col >= self.ifmap_w {
            return -1;
        }
        (((c_row * self.ifmap_w + c_col) * self.channels + c_ch) + (i_row * self.ifmap_w + i_col) * self.channels) as i64
    }

    fn filter(&self, i: u64, j: u64) -> i64 {
        (j * self.k + i) as i64
    }

    fn ofmap(&self, i: u64, j: u64) -> i64 {
        (self.n * i + j) as i64
    }

    fn ifmap_words(&self) -> u64 {
        self.ifmap_h * self.ifmap_w * self.channels
    }
}

/// The demand and prefetch orders of one dataflow (`systolic_compute_*.py`).
struct Orders<'a> {
    op: &'a Operands,
    df: Dataflow,
    r: u64,
    c: u64,
    row_folds: u64,
    col_folds: u64,
}

/// `skew_matrix`: column `c` of line `l` is row `l - c` of the unskewed fold.
fn skewed(l: u64, c: u64, rows: u64, at: impl Fn(u64, u64) -> i64) -> i64 {
    if l < c || l - c >= rows {
        -1
    } else {
        at(l - c, c)
    }
}

impl Orders<'_> {
    /// Lines (cycles) of one fold's demand matrices.
    fn fold_lines(&self) -> u64 {
        let t = self.t();
        match self.df {
            Dataflow::Os => t + self.r + self.c - 2,
            Dataflow::Ws | Dataflow::Is => 2 * self.r + t + self.c - 2,
        }
    }

    fn t(&self) -> u64 {
        match self.df {
            Dataflow::Os => self.op.k,
            Dataflow::Ws => self.op.m,
            Dataflow::Is => self.op.n,
        }
    }

    /// Line `l` of fold (`fr`, `fc`): the ifmap, filter and ofmap addresses
    /// in port order.
    fn line(&self, fr: u64, fc: u64, l: u64, ifmap: &mut Vec<i64>, filter: &mut Vec<i64>, ofmap: &mut Vec<i64>) {
        let (op, r, c, t) = (self.op, self.r, self.c, self.t());
        ifmap.clear();
        filter.clear();
        ofmap.clear();
        match self.df {
            Dataflow::Os => {
                for p in 0..r {
                    ifmap.push(skewed(l, p, t + c - 1, |tt, p| {
                        let row = fr * r + p;
                        if tt < t && row < op.m { op.ifmap(row, tt) } else { -1 }
                    }));
                }
                for q in 0..c {
                    filter.push(skewed(l, q, t + r - 1, |tt, q| {
                        let col = fc * c + q;
                        if tt < t && col < op.n { op.filter(tt, col) } else { -1 }
                    }));
                    ofmap.push(skewed(l, q, t - 1 + r, |tt, q| {
                        if tt + 1 < t {
                            return -1;
                        }
                        let (row, col) = (fr * r + (r - 1 - (tt + 1 - t)), fc * c + q);
                        if row < op.m && col < op.n { op.ofmap(row, col) } else { -1 }
                    }));
                }
            }
            Dataflow::Ws => {
                for p in 0..r {
                    ifmap.push(skewed(l, p, r + t + c - 1, |tt, p| {
                        let col = fr * r + p;
                        if tt >= r && tt - r < t && col < op.k { op.ifmap(tt - r, col) } else { -1 }
                    }));
                }
                for q in 0..c {
                    let col = fc * c + q;
                    filter.push(if l < r && fr * r + (r - 1 - l) < op.k && col < op.n {
                        op.filter(fr * r + (r - 1 - l), col)
                    } else {
                        -1
                    });
                    ofmap.push(skewed(l, q, 2 * r - 1 + t, |tt, q| {
                        let col = fc * c + q;
                        if tt >= 2 * r - 1 && col < op.n { op.ofmap(tt - (2 * r - 1), col) } else { -1 }
                    }));
                }
            }
            Dataflow::Is => {
                for q in 0..c {
                    let col = fc * c + q;
                    ifmap.push(if l < r && fr * r + (r - 1 - l) < op.k && col < op.m {
                        op.ifmap(col, fr * r + (r - 1 - l))
                    } else {
                        -1
                    });
                }
                for p in 0..r {
                    filter.push(skewed(l, p, r + t + c - 1, |tt, p| {
                        let row = fr * r + p;
                        if tt >= r && tt - r < t && row < op.k { op.filter(row, tt - r) } else { -1 }
                    }));
                }
                for q in 0..c {
                    ofmap.push(skewed(l, q, 2 * r - 1 + t, |tt, q| {
                        let row = fc * c + q;
                        if tt >= 2 * r - 1 && row < op.m { op.ofmap(row, tt - (2 * r - 1)) } else { -1 }
                    }));
                }
            }
        }
    }

    /// The ifmap and filter prefetch orders (`create_*_prefetch_mat`): the
    /// fold tiles stacked, then walked by anti-diagonals or row by row.
    fn prefetch(&self) -> (Vec<i64>, Vec<i64>) {
        let (op, r, c) = (self.op, self.r, self.c);
        match self.df {
            Dataflow::Os => (
                diagonal(self.row_folds * op.k, r, |row, p| {
                    let (fr, t) = (row / op.k, row % op.k);
                    if fr * r + p < op.m { op.ifmap(fr * r + p, t) } else { -1 }
                }),
                diagonal(self.col_folds * op.k, c, |row, q| {
                    let (fc, t) = (row / op.k, row % op.k);
                    if fc * c + q < op.n { op.filter(t, fc * c + q) } else { -1 }
                }),
            ),
            Dataflow::Ws => (
                diagonal(self.row_folds * op.m, r, |row, p| {
                    let (fr, t) = (row / op.m, row % op.m);
                    if fr * r + p < op.k { op.ifmap(t, fr * r + p) } else { -1 }
                }),
                row_major(self.col_folds * op.k, c, |row, q| {
                    let (fc, kk) = (row / op.k, row % op.k);
                    if fc * c + q < op.n { op.filter(kk, fc * c + q) } else { -1 }
                }),
            ),
            Dataflow::Is => (
                row_major(self.col_folds * op.k, c, |row, q| {
                    let (fc, kk) = (row / op.k, row % op.k);
                    if fc * c + q < op.m { op.ifmap(fc * c + q, kk) } else { -1 }
                }),
                diagonal(self.row_folds * op.n, r, |row, p| {
                    let (fr, t) = (row / op.n, row % op.n);
                    if fr * r + p < op.k { op.filter(fr * r + p, t) } else { -1 }
                }),
            ),
        }
    }
}

fn row_major(rows: u64, cols: u64, at: impl Fn(u64, u64) -> i64) -> Vec<i64> {
    let mut out = Vec::with_capacity((rows * cols) as usize);
    for row in 0..rows {
        for col in 0..cols {
            out.push(at(row, col));
        }
    }
    out
}

/// SCALE-Sim's anti-diagonal walk: diagonal `d` from its bottom row up.
fn diagonal(rows: u64, cols: u64, at: impl Fn(u64, u64) -> i64) -> Vec<i64> {
    let mut out = Vec::with_capacity((rows * cols) as usize);
    for d in 0..rows + cols {
        let max_row = d.min(rows - 1);
        let min_row = (d + 1).saturating_sub(cols);
        for row in (min_row..=max_row).rev() {
            out.push(at(row, d - row));
        }
    }
    out
}

/// `read_buffer.py`: a double-buffered operand SRAM filled from DRAM in
/// SCALE-Sim's prefetch order.
struct ReadBuffer {
    name: &'static str,
    bandwidth: u64,
    active_words: u64,
    prefetch_words: u64,
    fetch_rows: u64,
    sets: u64,
    active_sets: u64,
    prefetch_sets: u64,
    /// Set ids holding each address: `ids[first[a]..first[a + 1]]`, ascending.
    first: Vec<u32>,
    ids: Vec<u32>,
    window: (u64, u64),
    last_prefetch: i64,
    started: bool,
    accesses: u64,
    first_rows: u64,
}

impl ReadBuffer {
    fn new(name: &'static str, order: &[i64], addresses: u64, sram_words: u64, bandwidth: u64) -> ReadBuffer {
        let active_words = sram_words.div_ceil(2);
        let prefetch_words = sram_words - active_words;
        let per_set = sram_words.div_ceil(100);
        let mut count = vec![0u32; addresses as usize + 1];
        let mut seen = 0u64;
        let mut last_set = vec![u32::MAX; addresses as usize];
        for &a in order.iter().filter(|&&a| a >= 0) {
            let set = (seen / per_set) as u32;
            seen += 1;
            if last_set[a as usize] != set {
                last_set[a as usize] = set;
                count[a as usize + 1] += 1;
            }
        }
        for i in 1..count.len() {
            count[i] += count[i - 1];
        }
        let first = count;
        let mut fill = first.clone();
        let mut ids = vec![0u32; *first.last().unwrap_or(&0) as usize];
        last_set.fill(u32::MAX);
        seen = 0;
        for &a in order.iter().filter(|&&a| a >= 0) {
            let set = (seen / per_set) as u32;
            seen += 1;
            if last_set[a as usize] != set {
                last_set[a as usize] = set;
                ids[fill[a as usize] as usize] = set;
                fill[a as usize] += 1;
            }
        }
        let sets = seen / per_set + 1;
        let active_sets = sets.min(active_words.div_ceil(per_set));
        let prefetch_sets = (sets - active_sets).min(prefetch_words.div_ceil(per_set));
        ReadBuffer {
            name,
            bandwidth,
            active_words,
            prefetch_words,
            fetch_rows: (order.len() as u64).div_ceil(bandwidth),
            sets,
            active_sets,
            prefetch_sets,
            first,
            ids,
            window: (0, active_sets),
            last_prefetch: -1,
            started: false,
            accesses: 0,
            first_rows: 0,
        }
    }

    fn hit(&self, addr: i64) -> Result<bool, HwError> {
        let a = addr as usize;
        let ids = match self.first.get(a + 1) {
            Some(&end) => &self.ids[self.first[a] as usize..end as usize],
            None => &[][..],
        };
        if ids.is_empty() {
            return Err(HwError::Internal(format!(
                "{} address {addr} is demanded but never prefetched (SCALE-Sim would loop forever)",
                self.name
            )));
        }
        let (start, end) = (self.window.0 as u32, self.window.1 as u32);
        let from = ids.partition_point(|&s| s < start);
        Ok(if start < end { from < ids.len() && ids[from] < end } else { from < ids.len() || ids[0] < end })
    }

    /// `prefetch_active_buffer`: fills the active half before cycle `start`.
    fn fill_active(&mut self, start: i64) {
        let rows = self.active_words.div_ceil(self.bandwidth).min(self.fetch_rows);
        self.accesses += rows * self.bandwidth;
        self.first_rows = rows;
        // Row i returns at start - rows + i (request at start - rows + i - 1, latency 1).
        self.last_prefetch = start - 1;
        self.started = true;
    }

    /// `new_prefetch`: the window moves on by the prefetch sets; the next
    /// fetch starts when the previous one ended.
    fn prefetch(&mut self) {
        let start = (self.window.0 + self.prefetch_sets) % self.sets;
        self.window = (start, (start + self.active_sets) % self.sets);
        let rows = self.prefetch_words.div_ceil(self.bandwidth);
        self.accesses += rows * self.bandwidth;
        self.last_prefetch += rows as i64 + 1;
    }

    /// `service_reads` for one line at `cycle`: the delay SCALE-Sim adds.
    fn service(&mut self, cycle: i64, line: &[i64]) -> Result<i64, HwError> {
        if !self.started {
            self.fill_active(cycle);
        }
        let mut offset = 1i64;
        for &addr in line.iter().filter(|&&a| a >= 0) {
            let mut turns = 0;
            while !self.hit(addr)? {
                // The window has come round without finding it: SCALE-Sim would spin.
                turns += 1;
                if turns > self.sets {
                    return Err(HwError::Internal(format!("{} address {addr} never enters the active sets", self.name)));
                }
                self.prefetch();
                let wait = self.last_prefetch - (cycle + offset);
                offset += wait;
                if wait > 0 {
                    offset += wait;
                }
            }
        }
        Ok(offset - 1)
    }
}

/// `write_buffer.py`: the ofmap SRAM, drained to DRAM in lines of
/// `bandwidth` words once its active half is full.
struct WriteBuffer {
    bandwidth: u64,
    /// The active half: a drain starts once fewer words than this are free.
    active_words: i64,
    drain_words: u64,
    free: i64,
    /// Words in the line being filled.
    line_fill: u64,
    /// Full lines not yet moved to the trace (SCALE-Sim's cache of 1024).
    cached: Vec<u64>,
    /// Valid words of each trace line, drained in order.
    trace: Vec<u64>,
    drained_lines: usize,
    drain_end: i64,
    accesses: u64,
    last_write: Option<i64>,
}

const WRITE_CACHE_LINES: usize = 1024;

impl WriteBuffer {
    fn new(sram_words: u64, bandwidth: u64) -> WriteBuffer {
        let active = sram_words.div_ceil(2);
        WriteBuffer {
            bandwidth,
            active_words: active as i64,
            drain_words: sram_words - active,
            free: sram_words as i64,
            line_fill: 0,
            cached: Vec::new(),
            trace: Vec::new(),
            drained_lines: 0,
            drain_end: 0,
            accesses: 0,
            last_write: None,
        }
    }

    fn store(&mut self) {
        self.line_fill += 1;
        self.free -= 1;
        if self.line_fill >= self.bandwidth {
            self.cached.push(self.bandwidth);
            self.line_fill = 0;
            if self.cached.len() >= WRITE_CACHE_LINES {
                self.flush(false);
            }
        }
    }

    /// `append_to_trace_mat`: cached lines (and with `force` the partial
    /// one) become drainable.
    fn flush(&mut self, force: bool) {
        if force && self.line_fill != 0 {
            self.cached.push(self.line_fill);
            self.line_fill = 0;
        }
        self.trace.append(&mut self.cached);
    }

    /// `empty_drain_buf`: writes up to a drain half's lines from `start`.
    fn drain(&mut self, start: i64) -> Result<i64, HwError> {
        let lines = self.drain_words.div_ceil(self.bandwidth) as usize;
        let end = (self.drained_lines + lines).min(self.trace.len());
        if end == self.drained_lines {
            return Err(HwError::Internal("ofmap drain with nothing to write (SCALE-Sim fails here)".into()));
        }
        let n = (end - self.drained_lines) as u64;
        let words = (n - 1) * self.bandwidth + self.trace[end - 1];
        self.accesses += words;
        self.free += words as i64;
        self.drained_lines = end;
        let last = start + n as i64 - 1;
        self.last_write = Some(self.last_write.map_or(last, |w| w.max(last)));
        Ok(last)
    }

    /// `service_writes` for one line at `cycle`: the cycle it is served.
    fn service(&mut self, cycle: i64, line: &[i64]) -> Result<i64, HwError> {
        let mut current = cycle;
        for _ in line.iter().filter(|&&a| a >= 0) {
            self.store();
            if current < self.drain_end {
                if self.free <= 0 {
                    current = self.drain_end;
                }
            } else if self.free < self.active_words {
                self.flush(true);
                self.drain_end = self.drain(current)?;
            }
        }
        Ok(current)
    }

    /// `empty_all_buffers`: everything left, drain after drain.
    fn drain_all(&mut self, mut cycle: i64) -> Result<(), HwError> {
        self.flush(true);
        while self.drained_lines < self.trace.len() {
            self.drain_end = self.drain(cycle)?;
            cycle = self.drain_end + 1;
        }
        Ok(())
    }
}

/// Address checks a replay takes, refused beyond [`MAX_REPLAY_WORK`].
fn work(map: &Mapping, orders: &Orders) -> u128 {
    let lines = u128::from(map.num_folds()) * u128::from(orders.fold_lines());
    let (r, c) = (u128::from(map.r), u128::from(map.c));
    lines * (r + 2 * c)
        + u128::from(map.row_folds) * u128::from(orders.t()) * r
        + u128::from(map.col_folds) * u128::from(map.k.max(orders.t())) * c
}

/// The report of one layer in compat mode with a DRAM bandwidth: compute
/// cycles as SCALE-Sim implies them (Total - Stall Cycles).
pub(crate) fn report(cfg: &ArrayConfig, layer: &Layer, map: &Mapping, sram: SramCounts) -> Result<LayerReport, HwError> {
    let r = replay(cfg, layer, map)?;
    let mem = MemoryOutcome {
        stall_cycles: r.stall_cycles,
        prefetch_cycles: r.prefetch_cycles,
        drain_cycles: r.drain_cycles,
        ifmap_dram_words: r.ifmap_dram_words,
        filter_dram_words: r.filter_dram_words,
        ofmap_dram_words_written: r.ofmap_dram_words,
        ofmap_dram_words_read: 0,
    };
    Ok(LayerReport::build(cfg, layer, map, r.total_cycles.saturating_sub(r.stall_cycles), sram, &mem))
}

/// Replays one layer through SCALE-Sim's memory system.
pub(crate) fn replay(cfg: &ArrayConfig, layer: &Layer, map: &Mapping) -> Result<Replay, HwError> {
    let op = Operands::new(layer);
    let orders = Orders { op: &op, df: map.dataflow, r: map.r, c: map.c, row_folds: map.row_folds, col_folds: map.col_folds };
    let work = work(map, &orders);
    if work > u128::from(MAX_REPLAY_WORK) {
        return Err(HwError::TooMuchWork {
            what: "SCALE-Sim memory replay (compat mode with a DRAM bandwidth)".into(),
            estimate: format!(
                "{} folds x {} lines x {} ports = about {work} address checks (layer `{}`)",
                map.num_folds(),
                orders.fold_lines(),
                map.r + 2 * map.c,
                layer.name
            ),
            limit: format!("{MAX_REPLAY_WORK} checks (about 10 s); use --physical for the closed-form memory model"),
        });
    }
    let [ifmap_bw, filter_bw, ofmap_bw] = cfg.dram_bandwidths().map(|b| b.unwrap_or(u64::MAX).max(1));
    let words = |kib: u64| kib * 1024;
    let (ifmap_order, filter_order) = orders.prefetch();
    let mut ifmap = ReadBuffer::new("ifmap", &ifmap_order, op.ifmap_words(), words(cfg.ifmap_sram_kib), ifmap_bw);
    let mut filter = ReadBuffer::new("filter", &filter_order, op.k * op.n, words(cfg.filter_sram_kib), filter_bw);
    drop((ifmap_order, filter_order));
    let mut ofmap = WriteBuffer::new(words(cfg.ofmap_sram_kib), ofmap_bw);

    let (mut li, mut lf, mut lo) = (Vec::new(), Vec::new(), Vec::new());
    let (mut stall, mut total, mut last_out, mut line) = (0i64, 0i64, 0i64, 0i64);
    for fc in 0..map.col_folds {
        for fr in 0..map.row_folds {
            for l in 0..orders.fold_lines() {
                orders.line(fr, fc, l, &mut li, &mut lf, &mut lo);
                let cycle = line + stall;
                let si = ifmap.service(cycle, &li)?;
                let sf = filter.service(cycle, &lf)?;
                let out = ofmap.service(cycle, &lo)?;
                stall += si.max(sf).max(out - cycle);
                total = total.max(out);
                last_out = out;
                line += 1;
            }
        }
    }
    ofmap.drain_all(last_out)?;
    let total = total.max(0) as u64;
    Ok(Replay {
        total_cycles: total,
        stall_cycles: stall.max(0) as u64,
        prefetch_cycles: ifmap.first_rows.max(filter.first_rows),
        drain_cycles: (ofmap.last_write.unwrap_or(0).max(0) as u64).saturating_sub(total),
        ifmap_dram_words: ifmap.accesses,
        filter_dram_words: filter.accesses,
        ofmap_dram_words: ofmap.accesses,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systolic::simulate_layer;

    fn scale_cfg(array: u32, df: Dataflow, sram_kib: u64, bandwidth: u64) -> ArrayConfig {
        let mut cfg = ArrayConfig::new(array, array, df).unwrap();
        cfg.ifmap_sram_kib = sram_kib;
        cfg.filter_sram_kib = sram_kib;
        cfg.ofmap_sram_kib = sram_kib;
        cfg.set_dram_bandwidth(Some(bandwidth));
        cfg.scalesim_compat = true;
        cfg
    }

    fn stall_layers() -> [Layer; 3] {
        [
            Layer::gemm("gemm_128_256_512", 128, 256, 512).unwrap(),
            Layer::conv("conv3x3", 16, 16, 3, 3, 32, 64, 1).unwrap(),
            Layer::conv("conv3x3_s2", 15, 15, 3, 3, 16, 48, 2).unwrap(),
        ]
    }

    /// `bench/scalesim/stalls.csv` on SCALE-Sim's example memory (64 KiB
    /// SRAMs, 10 words/cycle on every interface): SCALE-Sim 3.0.0's
    /// COMPUTE_REPORT (Total Cycles, Stall Cycles), run on 2026-11-25 with
    /// `bench/scalesim/compare.py --topology bench/scalesim/stalls.csv
    /// --sram 64 --bandwidth 10 --array A --dataflow D`.
    #[test]
    fn compat_mode_reproduces_scalesim_total_and_stall_cycles() {
        // (array, dataflow, per layer (Total Cycles, Stall Cycles))
        type Case = (u32, Dataflow, [(u64, u64); 3]);
        let cases: [Case; 6] = [
            (32, Dataflow::Os, [(289_753, 271_386), (13_759, 8_860), (823, 0)]),
            (32, Dataflow::Ws, [(104_895, 76_480), (14_063, 8_844), (1_429, 0)]),
            (32, Dataflow::Is, [(209_817, 187_418), (9_953, 0), (1_419, 0)]),
            (128, Dataflow::Os, [(26_221, 24_690), (6_987, 5_904), (397, 0)]),
            (128, Dataflow::Ws, [(52_065, 47_986), (14_293, 12_560), (861, 0)]),
            (128, Dataflow::Is, [(52_573, 50_022), (7_251, 4_576), (859, 0)]),
        ];
        for (array, df, want) in cases {
            let cfg = scale_cfg(array, df, 64, 10);
            for (layer, (total, stall)) in stall_layers().iter().zip(want) {
                let r = simulate_layer(&cfg, layer).unwrap();
                assert_eq!((r.total_cycles, r.stall_cycles), (total, stall), "{array}x{array} {df} {}", layer.name);
                assert_eq!(r.compute_cycles + r.stall_cycles, r.total_cycles);
            }
        }
    }

    /// The same run's DETAILED_ACCESS_REPORT (DRAM IFMAP/Filter Reads, DRAM
    /// OFMAP Writes) and "Total Cycles (incl. prefetch)", 32x32 os.
    #[test]
    fn compat_mode_reproduces_scalesim_dram_traffic_and_prefetch() {
        let cfg = scale_cfg(32, Dataflow::Os, 64, 10);
        let want = [(296_306, 1_048_640, 2_883_760, 32_768), (18_290, 163_850, 18_440, 12_544), (1_980, 9_220, 9_220, 2_352)];
        for (layer, w) in stall_layers().iter().zip(want) {
            let r = simulate_layer(&cfg, layer).unwrap();
            let got = (r.end_to_end_cycles, r.ifmap_dram_bytes_read, r.filter_dram_bytes_read, r.ofmap_dram_bytes_written);
            assert_eq!(got, w, "{}", layer.name);
        }
    }

    /// The cycle-by-cycle model replays the same memory system.
    #[test]
    fn cycle_model_reports_the_same_replay() {
        let cfg = scale_cfg(8, Dataflow::Ws, 1, 2);
        for layer in [Layer::conv("c", 9, 9, 3, 3, 4, 10, 2).unwrap(), Layer::gemm("g", 20, 12, 30).unwrap()] {
            let fast = simulate_layer(&cfg, &layer).unwrap();
            let cycles = crate::systolic::simulate_layer_cycles(&cfg, &layer).unwrap();
            assert_eq!(fast, cycles);
            assert!(fast.stall_cycles > 0, "1 KiB at 2 words/cycle must stall");
        }
    }

    #[test]
    fn a_replay_beyond_the_work_limit_is_refused_with_its_estimate() {
        let cfg = scale_cfg(128, Dataflow::Os, 64, 10);
        let layer = Layer::gemm("huge", 1 << 16, 1 << 12, 1 << 12).unwrap();
        let err = simulate_layer(&cfg, &layer).unwrap_err().to_string();
        assert!(err.contains("SCALE-Sim memory replay") && err.contains("layer `huge`") && err.contains("--physical"), "{err}");
    }
}
