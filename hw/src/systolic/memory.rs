//! Double-buffered SRAMs and the DRAM interface, at fold granularity.
//!
//! Each SRAM is split in two halves. While fold i computes out of one half,
//! each operand's DRAM port (Bandwidth words per cycle, one port per operand
//! as in SCALE-Sim v2) fills the other half with fold i+1's tile. The fill for
//! fold i+1 may start when fold i starts (its half was released when fold i-1
//! ended). A fold starts when the previous fold has ended and its tiles are in
//! SRAM; the gap is stall. A tile larger than a half is prefetched up to a
//! half and the rest streams in during the fold, which lasts as long as the
//! slower of compute and streaming (the excess is stall too).
//!
//! Reuse: a tile identical to the previous fold's stays put if it fits in a
//! half (a larger one streams through and is fetched again); a tile indexed
//! by the row fold alone is fetched once per layer when the whole operand
//! fits in a half, and once per column fold otherwise.
//!
//! DRAM traffic is counted on the GEMM operands: for a convolution the ifmap
//! operand is the im2col matrix (M x K, each input pixel repeated in every
//! window that covers it), as on an accelerator whose DRAM holds the lowered
//! matrix, or one that re-reads overlapping windows. SCALE-Sim counts the
//! ifmap itself (AlexNet Conv1: 150,528 words, against 1,098,075 im2col
//! words here); a design with an on-chip im2col unit moves the smaller
//! figure, so read flowlab's ifmap DRAM bytes as the upper bound.
//!
//! Outputs: under os each fold completes its outputs, which drain to DRAM
//! during the following folds. Under ws/is the row folds of one column fold
//! accumulate partial sums into the same output tile: if the tile fits in a
//! half it stays on chip and drains once after its last row fold, otherwise
//! the partial sums spill to DRAM during each fold and are read back for the
//! next. A half can take a new output tile only when the tile before the
//! previous one has drained.
//!
//! The first fold's fill (`prefetch_cycles`) and the last tile's drain
//! (`drain_cycles`) are reported apart from the stall cycles, like SCALE-Sim's
//! "Total Cycles" versus "Total Cycles (incl. prefetch)".

use super::mapping::{Fold, Mapping};
use super::{ArrayConfig, Dataflow};
use crate::HwError;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MemoryOutcome {
    pub stall_cycles: u64,
    pub prefetch_cycles: u64,
    pub drain_cycles: u64,
    pub ifmap_dram_words: u64,
    pub filter_dram_words: u64,
    pub ofmap_dram_words_written: u64,
    pub ofmap_dram_words_read: u64,
}

/// How a tile of an input operand is identified across folds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TileKey {
    /// Changes with the row fold, repeats for every column fold.
    RowFold,
    /// Changes with the column fold only.
    ColFold,
    /// A different tile every fold (the stationary operand of ws / is).
    EveryFold,
}

struct Operand {
    name: &'static str,
    key: TileKey,
    whole_words: u64,
    half_words: u64,
    size_kib: u64,
}

impl Operand {
    fn tile_words(&self, map: &Mapping, f: &Fold) -> u64 {
        match (map.dataflow, self.key) {
            (Dataflow::Os, TileKey::RowFold) => f.rows_used * map.k,
            (Dataflow::Os, _) => map.k * f.cols_used,
            (_, TileKey::RowFold) => map.t * f.rows_used,
            (_, _) => f.rows_used * f.cols_used,
        }
    }

    /// Whether fold `f` fetches its tile from DRAM. A tile stays in SRAM for
    /// the next fold that uses it only if it fits in a half: a larger one
    /// streams through and is gone when the fold ends.
    fn fetched(&self, map: &Mapping, f: &Fold) -> bool {
        match self.key {
            TileKey::EveryFold => true,
            TileKey::ColFold => f.fr == 0 || self.tile_words(map, f) > self.half_words,
            // With one row fold the tile is the whole operand.
            TileKey::RowFold => f.fc == 0 || self.whole_words > self.half_words,
        }
    }
}

/// Most folds the replay steps one by one before refusing; the steady-state
/// skip below keeps every layer accepted by `Layer::validate` far under it.
pub(crate) const MAX_REPLAY_STEPS: u64 = 1 << 26;

/// Timing state of the replay between folds (absolute cycles).
#[derive(Debug, Clone, Default)]
struct State {
    port: [u64; 2],
    out_port: u64,
    drained: [u64; 2],
    out_tiles: u64,
    prev_start: u64,
    prev_end: u64,
}

impl State {
    /// The state relative to the last fold's end, each time clamped at the
    /// point below which the replay cannot tell it apart (ports are only ever
    /// used as `max(port, prev_start)` or later; the output port and drain
    /// times as `max(_, prev_end)` or later).
    fn norm(&self) -> [u64; 8] {
        let p = (self.out_tiles % 2) as usize;
        let rel = |t: u64, floor: u64| t.max(floor) - floor;
        [
            self.prev_end - self.prev_start,
            rel(self.port[0], self.prev_start),
            rel(self.port[1], self.prev_start),
            rel(self.out_port, self.prev_end),
            rel(self.drained[p], self.prev_end),
            rel(self.drained[1 - p], self.prev_end),
            self.out_tiles.min(2),
            0,
        ]
    }

    /// Moves the state `k` repetitions of a period of `dt` cycles and
    /// `tiles` output tiles ahead.
    fn advance(&mut self, k: u64, dt: u64, tiles: u64) {
        let shift = k * dt;
        let p = (self.out_tiles % 2) as usize;
        let (cur, other) = (self.drained[p] + shift, self.drained[1 - p] + shift);
        self.out_tiles += k * tiles;
        let q = (self.out_tiles % 2) as usize;
        self.drained[q] = cur;
        self.drained[1 - q] = other;
        self.port = self.port.map(|t| t + shift);
        self.out_port += shift;
        self.prev_start += shift;
        self.prev_end += shift;
    }
}

impl MemoryOutcome {
    fn minus(&self, o: &MemoryOutcome) -> MemoryOutcome {
        MemoryOutcome {
            stall_cycles: self.stall_cycles - o.stall_cycles,
            prefetch_cycles: 0,
            drain_cycles: 0,
            ifmap_dram_words: self.ifmap_dram_words - o.ifmap_dram_words,
            filter_dram_words: self.filter_dram_words - o.filter_dram_words,
            ofmap_dram_words_written: self.ofmap_dram_words_written - o.ofmap_dram_words_written,
            ofmap_dram_words_read: self.ofmap_dram_words_read - o.ofmap_dram_words_read,
        }
    }

    fn add_times(&mut self, d: &MemoryOutcome, k: u64) {
        self.stall_cycles += k * d.stall_cycles;
        self.ifmap_dram_words += k * d.ifmap_dram_words;
        self.filter_dram_words += k * d.filter_dram_words;
        self.ofmap_dram_words_written += k * d.ofmap_dram_words_written;
        self.ofmap_dram_words_read += k * d.ofmap_dram_words_read;
    }
}

/// The two input operands of `map` (which fold fetches each tile, how big
/// each SRAM half is) and whether output tiles spill to DRAM, after
/// checking that one fold's tiles fit every buffer.
fn operands_that_fit(cfg: &ArrayConfig, map: &Mapping) -> Result<([Operand; 2], bool), HwError> {
    let (ifmap_key, filter_key) = match map.dataflow {
        Dataflow::Os => (TileKey::RowFold, TileKey::ColFold),
        Dataflow::Ws => (TileKey::RowFold, TileKey::EveryFold),
        Dataflow::Is => (TileKey::EveryFold, TileKey::RowFold),
    };
    let ops = [
        Operand {
            name: "ifmap",
            key: ifmap_key,
            whole_words: map.m * map.k,
            half_words: cfg.half_words(cfg.ifmap_sram_kib),
            size_kib: cfg.ifmap_sram_kib,
        },
        Operand {
            name: "filter",
            key: filter_key,
            whole_words: map.k * map.n,
            half_words: cfg.half_words(cfg.filter_sram_kib),
            size_kib: cfg.filter_sram_kib,
        },
    ];
    let out_half = cfg.half_words(cfg.ofmap_sram_kib);
    let (rows_max, cols_max) = (map.sr.min(map.r), map.sc.min(map.c));
    let too_small = |buffer: &'static str, need: u64, have: u64, kib: u64| {
        if need > have { Err(HwError::SramTooSmall { buffer, need_words: need, have_words: have, size_kib: kib }) } else { Ok(()) }
    };
    for op in &ops {
        let need = match (map.dataflow, op.key) {
            (_, TileKey::EveryFold) => rows_max * cols_max,
            (Dataflow::Os, TileKey::ColFold) => cols_max,
            _ => rows_max,
        };
        too_small(op.name, need, op.half_words, op.size_kib)?;
    }
    let max_out_tile = match map.dataflow {
        Dataflow::Os => rows_max * cols_max,
        _ => map.t * cols_max,
    };
    let spill = map.dataflow != Dataflow::Os && max_out_tile > out_half;
    too_small("ofmap", if map.dataflow == Dataflow::Os { max_out_tile } else { cols_max }, out_half, cfg.ofmap_sram_kib)?;
    Ok((ops, spill))
}

/// Checks that one fold fits, then replays the folds (`fold_cycles(i)` is the
/// compute time of fold i) against the memory system.
pub(crate) fn schedule(
    cfg: &ArrayConfig,
    map: &Mapping,
    fold_cycles: impl Fn(u64) -> u64,
    uniform_folds: bool,
) -> Result<MemoryOutcome, HwError> {
    let (ops, spill) = operands_that_fit(cfg, map)?;
    // Output tile of one column fold (ws/is) or of one fold (os).
    let out_tile = |f: &Fold| match map.dataflow {
        Dataflow::Os => f.rows_used * f.cols_used,
        _ => map.t * f.cols_used,
    };

    let bws = cfg.dram_bandwidths();
    let xfer_on = |port: usize, words: u64| bws[port].map_or(0, |bw| words.div_ceil(bw));
    let mut out = MemoryOutcome::default();
    let mut st = State::default();
    // One fold of the replay; returns the fold's class (what it fetches and
    // drains), which with `st.norm()` determines everything it adds.
    let step = |i: u64, st: &mut State, out: &mut MemoryOutcome| -> [u64; 8] {
        let f = map.fold(i);
        let c = fold_cycles(i);
        let mut ready = 0u64;
        let mut stream = [0u64; 2];
        let mut need_words = [0u64; 2];
        for (j, op) in ops.iter().enumerate() {
            let need = if op.fetched(map, &f) { op.tile_words(map, &f) } else { 0 };
            need_words[j] = need;
            if j == 0 { out.ifmap_dram_words += need } else { out.filter_dram_words += need }
            let pre = need.min(op.half_words);
            stream[j] = need - pre;
            if pre > 0 {
                st.port[j] = st.port[j].max(if i == 0 { 0 } else { st.prev_start }) + xfer_on(j, pre);
                ready = ready.max(st.port[j]);
            }
        }
        let out_first = map.dataflow == Dataflow::Os || f.fr == 0;
        let out_last = map.dataflow == Dataflow::Os || f.fr + 1 == map.row_folds;
        let mut start = st.prev_end.max(ready);
        if !spill && out_first && st.out_tiles >= 2 {
            start = start.max(st.drained[(st.out_tiles % 2) as usize]);
        }
        if i == 0 {
            out.prefetch_cycles = start;
        } else {
            out.stall_cycles += start - st.prev_end;
        }
        let mut end = start + c;
        for j in 0..2 {
            if stream[j] > 0 {
                st.port[j] = st.port[j].max(start) + xfer_on(j, stream[j]);
                end = end.max(st.port[j]);
            }
        }
        let tile = out_tile(&f);
        if spill {
            let back = if f.fr > 0 { tile } else { 0 };
            out.ofmap_dram_words_written += tile;
            out.ofmap_dram_words_read += back;
            st.out_port = st.out_port.max(start) + xfer_on(2, tile + back);
            end = end.max(st.out_port);
        }
        out.stall_cycles += end - start - c;
        if !spill && out_last {
            st.out_port = st.out_port.max(end) + xfer_on(2, tile);
            st.drained[(st.out_tiles % 2) as usize] = st.out_port;
            out.ofmap_dram_words_written += tile;
            st.out_tiles += 1;
        }
        st.prev_start = start;
        st.prev_end = end;
        [need_words[0], need_words[1], u64::from(out_first), u64::from(out_last), tile, c, u64::from(f.fr > 0), 0]
    };
    // The replay is translation-invariant in time: a fold's effect depends
    // only on its class and on the state relative to the previous fold's end.
    // When two consecutive folds (or column folds) of the same class leave the
    // same relative state, every following one of that class repeats their
    // effect exactly, so the run is added in one step. Folds fr in
    // 1..row_folds-1 of a column fold share a class, and so do column folds
    // 1..col_folds-1 (the last row and column folds may be partial). Only with
    // uniform fold cycles (the fast path).
    let (rf, cf) = (map.row_folds, map.col_folds);
    let mut steps = 0u64;
    let mut last_fold: Option<([u64; 8], [u64; 8], MemoryOutcome, State)> = None;
    let mut last_col: Option<([u64; 8], MemoryOutcome, State)> = None;
    let mut i = 0u64;
    while i < map.num_folds() {
        steps += 1;
        if steps > MAX_REPLAY_STEPS {
            return Err(HwError::TooMuchWork {
                what: "memory replay".into(),
                estimate: format!("{} folds ({rf} row x {cf} column folds) did not settle into a repeating pattern", map.num_folds()),
                limit: format!("{MAX_REPLAY_STEPS} folds"),
            });
        }
        let class = step(i, &mut st, &mut out);
        let (fr, fc) = (i % rf, i / rf);
        i += 1;
        if !uniform_folds {
            continue;
        }
        let norm = st.norm();
        if let Some((prev_class, prev_norm, prev_out, prev_st)) = &last_fold {
            if fr >= 2 && fr + 2 < rf && *prev_class == class && *prev_norm == norm {
                let k = rf - 2 - fr;
                let (d_out, dt) = (out.minus(prev_out), st.prev_end - prev_st.prev_end);
                out.add_times(&d_out, k);
                st.advance(k, dt, st.out_tiles - prev_st.out_tiles);
                i += k;
                last_fold = None;
                continue;
            }
        }
        last_fold = Some((class, norm, out.clone(), st.clone()));
        if fr + 1 == rf {
            last_fold = None;
            if let Some((prev_norm, prev_out, prev_st)) = &last_col {
                if fc >= 2 && fc + 2 < cf && *prev_norm == norm {
                    let k = cf - 2 - fc;
                    let (d_out, dt) = (out.minus(prev_out), st.prev_end - prev_st.prev_end);
                    out.add_times(&d_out, k);
                    st.advance(k, dt, st.out_tiles - prev_st.out_tiles);
                    i += k * rf;
                    last_col = None;
                    continue;
                }
            }
            last_col = Some((norm, out.clone(), st.clone()));
        }
    }
    let (out_port, prev_end) = (st.out_port, st.prev_end);
    out.drain_cycles = out_port.max(prev_end) - prev_end;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systolic::Layer;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The steady-state skip is exact: it equals stepping every fold, on
    /// layers with up to thousands of folds under every regime.
    #[test]
    fn skipping_repeated_folds_equals_stepping_every_fold() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut skipped = 0;
        for case in 0..400 {
            let df = [Dataflow::Os, Dataflow::Ws, Dataflow::Is][rng.random_range(0..3)];
            let mut c = ArrayConfig::new(rng.random_range(1..6), rng.random_range(1..6), df).unwrap();
            c.ifmap_sram_kib = rng.random_range(1..5);
            c.filter_sram_kib = rng.random_range(1..5);
            c.ofmap_sram_kib = rng.random_range(1..5);
            c.dram_words_per_cycle = if rng.random_bool(0.2) { None } else { Some(rng.random_range(1..9)) };
            c.scalesim_compat = rng.random_bool(0.3);
            let l = Layer::gemm("g", rng.random_range(1..300), rng.random_range(1..300), rng.random_range(1..200)).unwrap();
            let map = Mapping::new(&c, &l);
            let per = map.fold_cycles();
            match (schedule(&c, &map, |_| per, true), schedule(&c, &map, |_| per, false)) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a, b, "case {case}: {c:?} {l:?}");
                    skipped += usize::from(map.row_folds > 4 || map.col_folds > 4);
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                (a, b) => panic!("case {case}: {a:?} vs {b:?}"),
            }
        }
        assert!(skipped > 100, "only {skipped} cases had runs to skip");
    }

    /// The undercount: os 32x32, 64 KiB SRAMs, K = 8192, N = 256 (8
    /// column folds). The ifmap (M x 8192 words) is far larger than a 32,768-
    /// word half, so it streams once per column fold whether M takes one row
    /// fold or two: 8 M 8192 words, linear in M. The filter's column tiles
    /// (8192 x 32 words) do not fit either: fetched once per row fold.
    #[test]
    fn tiles_larger_than_a_half_are_fetched_again() {
        let mut c = ArrayConfig::new(32, 32, Dataflow::Os).unwrap();
        (c.ifmap_sram_kib, c.filter_sram_kib, c.ofmap_sram_kib, c.dram_words_per_cycle) = (64, 64, 64, Some(10));
        for (m, row_folds) in [(31u64, 1u64), (32, 1), (33, 2), (64, 2)] {
            let map = Mapping::new(&c, &Layer::gemm("g", m, 256, 8192).unwrap());
            let r = schedule(&c, &map, |_| map.fold_cycles(), true).unwrap();
            assert_eq!(r.ifmap_dram_words, 8 * m * 8192, "M={m}");
            assert_eq!(r.filter_dram_words, row_folds * 256 * 8192, "M={m}");
        }
        // A whole operand that fits in a half is fetched once.
        let map = Mapping::new(&c, &Layer::gemm("g", 32, 256, 512).unwrap());
        let r = schedule(&c, &map, |_| map.fold_cycles(), true).unwrap();
        assert_eq!((r.ifmap_dram_words, r.filter_dram_words), (32 * 512, 256 * 512));
    }

    /// ws, partial sums that do not fit the ofmap SRAM: each of the K/R row
    /// folds writes the column fold's M x C partial sums and all but the first
    /// read them back.
    #[test]
    fn ws_partial_sums_spill_when_the_ofmap_sram_is_too_small() {
        let mut c = ArrayConfig::new(32, 32, Dataflow::Ws).unwrap();
        (c.ifmap_sram_kib, c.filter_sram_kib, c.ofmap_sram_kib, c.dram_words_per_cycle) = (64, 64, 64, Some(10));
        let map = Mapping::new(&c, &Layer::gemm("g", 4096, 64, 256).unwrap());
        let r = schedule(&c, &map, |_| map.fold_cycles(), true).unwrap();
        // 2 column folds x 8 row folds x 4096 x 32 words written, 7 of 8 read back.
        assert_eq!(r.ofmap_dram_words_written, 2 * 8 * 4096 * 32);
        assert_eq!(r.ofmap_dram_words_read, 2 * 7 * 4096 * 32);
        c.ofmap_sram_kib = 2048;
        let r = schedule(&c, &map, |_| map.fold_cycles(), true).unwrap();
        assert_eq!((r.ofmap_dram_words_written, r.ofmap_dram_words_read), (4096 * 64, 0));
    }

    /// The hang: 2^48 folds of one cycle on a 1x1 array. Closed form
    /// at 1 word/cycle: each fold needs one new ifmap word (the 2^24-word
    /// operand does not fit a 3 MiWord half), one filter word per column fold,
    /// and drains one output word; all overlap with the one-cycle folds, so
    /// nothing stalls after the first word's prefetch and the last word's drain.
    #[test]
    fn a_layer_of_2_pow_48_folds_replays_in_closed_form() {
        let mut c = ArrayConfig::new(1, 1, Dataflow::Os).unwrap();
        c.dram_words_per_cycle = Some(1);
        let map = Mapping::new(&c, &Layer::gemm("g", 1 << 24, 1 << 24, 1).unwrap());
        let m = schedule(&c, &map, |_| map.fold_cycles(), true).unwrap();
        assert_eq!(map.num_folds(), 1 << 48);
        assert_eq!((m.stall_cycles, m.prefetch_cycles, m.drain_cycles), (0, 1, 1));
        assert_eq!((m.ifmap_dram_words, m.filter_dram_words, m.ofmap_dram_words_written), (1 << 48, 1 << 24, 1 << 48));
    }
}
