//! What a simulation reports for one layer.

use super::mapping::Mapping;
use super::memory::MemoryOutcome;
use super::{ArrayConfig, Layer};
use serde::{Deserialize, Serialize};

/// SRAM accesses in words, per operand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SramCounts {
    pub ifmap_reads: u64,
    pub filter_reads: u64,
    pub ofmap_writes: u64,
    pub ofmap_reads: u64,
}

/// Per-layer results. Cycle fields:
/// * `compute_cycles`: sum over folds of the fold's cycles (no memory waits).
///   SCALE-Sim reports the index of a layer's last cycle, one less; with
///   `ArrayConfig::scalesim_compat` the report follows it, so compute cycles
///   equal SCALE-Sim's "Total Cycles" when SCALE-Sim sees no stall (and M
///   is sized as SCALE-Sim sizes strided outputs, see `Layer::gemm_dims_scalesim`).
/// * `stall_cycles`: cycles the array waits for DRAM between and within folds.
/// * `total_cycles` = compute + stall.
/// * `prefetch_cycles` / `drain_cycles`: filling the SRAMs before the first
///   fold and writing the last outputs back after the last one.
/// * `end_to_end_cycles` = prefetch + total + drain; `time_seconds` is this at
///   the configured clock.
///
/// `utilization` = MACs / (R * C * total_cycles); `mapping_efficiency` is the
/// average fraction of PEs mapped per fold (both as in SCALE-Sim, as
/// fractions rather than percent). SRAM counts are words; ofmap reads are
/// partial-sum read-backs when ws/is folds the reduction dimension.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerReport {
    pub name: String,
    pub dataflow: String,
    pub array_rows: u32,
    pub array_cols: u32,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub row_folds: u64,
    pub col_folds: u64,
    pub macs: u64,
    pub compute_cycles: u64,
    pub stall_cycles: u64,
    pub total_cycles: u64,
    pub prefetch_cycles: u64,
    pub drain_cycles: u64,
    pub end_to_end_cycles: u64,
    pub utilization: f64,
    pub mapping_efficiency: f64,
    pub ifmap_sram_reads: u64,
    pub filter_sram_reads: u64,
    pub ofmap_sram_writes: u64,
    pub ofmap_sram_reads: u64,
    pub ifmap_dram_bytes_read: u64,
    pub filter_dram_bytes_read: u64,
    pub ofmap_dram_bytes_written: u64,
    pub ofmap_dram_bytes_read: u64,
    pub time_seconds: f64,
}

impl LayerReport {
    pub(crate) fn assemble(
        cfg: &ArrayConfig,
        layer: &Layer,
        map: &Mapping,
        compute_cycles: u64,
        sram: SramCounts,
        mem: &MemoryOutcome,
    ) -> LayerReport {
        // Every layer takes at least one cycle, so the index is never negative.
        let compute_cycles = if cfg.scalesim_compat { compute_cycles - 1 } else { compute_cycles };
        LayerReport::build(cfg, layer, map, compute_cycles, sram, mem)
    }

    /// The report with `compute_cycles` as it is to be reported.
    pub(crate) fn build(
        cfg: &ArrayConfig,
        layer: &Layer,
        map: &Mapping,
        compute_cycles: u64,
        sram: SramCounts,
        mem: &MemoryOutcome,
    ) -> LayerReport {
        let total = compute_cycles + mem.stall_cycles;
        let e2e = mem.prefetch_cycles + total + mem.drain_cycles;
        let wb = u64::from(cfg.word_bytes);
        let macs = map.m * map.n * map.k;
        LayerReport {
            name: layer.name.clone(),
            dataflow: cfg.dataflow.to_string(),
            array_rows: cfg.rows,
            array_cols: cfg.cols,
            m: map.m,
            n: map.n,
            k: map.k,
            row_folds: map.row_folds,
            col_folds: map.col_folds,
            macs,
            compute_cycles,
            stall_cycles: mem.stall_cycles,
            total_cycles: total,
            prefetch_cycles: mem.prefetch_cycles,
            drain_cycles: mem.drain_cycles,
            end_to_end_cycles: e2e,
            // max(1): a one-cycle layer has last-cycle index 0 in compat mode.
            utilization: macs as f64 / (map.r as f64 * map.c as f64 * total.max(1) as f64),
            mapping_efficiency: map.mapping_efficiency(),
            ifmap_sram_reads: sram.ifmap_reads,
            filter_sram_reads: sram.filter_reads,
            ofmap_sram_writes: sram.ofmap_writes,
            ofmap_sram_reads: sram.ofmap_reads,
            ifmap_dram_bytes_read: mem.ifmap_dram_words * wb,
            filter_dram_bytes_read: mem.filter_dram_words * wb,
            ofmap_dram_bytes_written: mem.ofmap_dram_words_written * wb,
            ofmap_dram_bytes_read: mem.ofmap_dram_words_read * wb,
            time_seconds: e2e as f64 / (cfg.clock_mhz * 1e6),
        }
    }
}
