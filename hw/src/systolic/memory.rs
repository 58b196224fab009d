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
//! Reuse: a tile identical to the previous fold's stays put; a tile indexed by
//! the row fold alone is fetched once per layer when the whole operand fits in
//! a half, and once per column fold otherwise.
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

    fn fetched(&self, map: &Mapping, f: &Fold) -> bool {
        match self.key {
            TileKey::EveryFold => true,
            TileKey::ColFold => f.fr == 0,
            TileKey::RowFold if map.row_folds == 1 => f.fc == 0,
            TileKey::RowFold => self.whole_words > self.half_words || f.fc == 0,
        }
    }
}

/// Checks that one fold fits, then replays the folds (`fold_cycles(i)` is the
/// compute time of fold i) against the memory system.
pub(crate) fn schedule(cfg: &ArrayConfig, map: &Mapping, fold_cycles: impl Fn(u64) -> u64) -> Result<MemoryOutcome, HwError> {
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
    // Output tile of one column fold (ws/is) or of one fold (os).
    let out_tile = |f: &Fold| match map.dataflow {
        Dataflow::Os => f.rows_used * f.cols_used,
        _ => map.t * f.cols_used,
    };
    let max_out_tile = match map.dataflow {
        Dataflow::Os => rows_max * cols_max,
        _ => map.t * cols_max,
    };
    let spill = map.dataflow != Dataflow::Os && max_out_tile > out_half;
    too_small("ofmap", if map.dataflow == Dataflow::Os { max_out_tile } else { cols_max }, out_half, cfg.ofmap_sram_kib)?;

    let xfer = |words: u64| cfg.dram_words_per_cycle.map_or(0, |bw| words.div_ceil(bw));
    let mut out = MemoryOutcome::default();
    let mut port = [0u64; 2];
    let mut out_port = 0u64;
    let mut drained = [0u64; 2];
    let mut out_tiles = 0u64;
    let (mut prev_start, mut prev_end) = (0u64, 0u64);
    for i in 0..map.num_folds() {
        let f = map.fold(i);
        let c = fold_cycles(i);
        let mut ready = 0u64;
        let mut stream = [0u64; 2];
        for (j, op) in ops.iter().enumerate() {
            let need = if op.fetched(map, &f) { op.tile_words(map, &f) } else { 0 };
            if j == 0 { out.ifmap_dram_words += need } else { out.filter_dram_words += need }
            let pre = need.min(op.half_words);
            stream[j] = need - pre;
            if pre > 0 {
                port[j] = port[j].max(if i == 0 { 0 } else { prev_start }) + xfer(pre);
                ready = ready.max(port[j]);
            }
        }
        let out_first = map.dataflow == Dataflow::Os || f.fr == 0;
        let out_last = map.dataflow == Dataflow::Os || f.fr + 1 == map.row_folds;
        let mut start = prev_end.max(ready);
        if !spill && out_first && out_tiles >= 2 {
            start = start.max(drained[(out_tiles % 2) as usize]);
        }
        if i == 0 {
            out.prefetch_cycles = start;
        } else {
            out.stall_cycles += start - prev_end;
        }
        let mut end = start + c;
        for j in 0..2 {
            if stream[j] > 0 {
                port[j] = port[j].max(start) + xfer(stream[j]);
                end = end.max(port[j]);
            }
        }
        let tile = out_tile(&f);
        if spill {
            let back = if f.fr > 0 { tile } else { 0 };
            out.ofmap_dram_words_written += tile;
            out.ofmap_dram_words_read += back;
            out_port = out_port.max(start) + xfer(tile + back);
            end = end.max(out_port);
        }
        out.stall_cycles += end - start - c;
        if !spill && out_last {
            out_port = out_port.max(end) + xfer(tile);
            drained[(out_tiles % 2) as usize] = out_port;
            out.ofmap_dram_words_written += tile;
            out_tiles += 1;
        }
        prev_start = start;
        prev_end = end;
    }
    out.drain_cycles = out_port.max(prev_end) - prev_end;
    Ok(out)
}
