//! The fast path: per-fold cycles and SRAM traffic in closed form, memory
//! replayed fold by fold. Agrees exactly with `simulate_layer_cycles`.

use super::mapping::Mapping;
use super::report::{LayerReport, SramCounts};
use super::{memory, scalesim, ArrayConfig, Dataflow, Layer};
use crate::HwError;

/// Simulates one layer without stepping the PEs.
pub fn simulate_layer(cfg: &ArrayConfig, layer: &Layer) -> Result<LayerReport, HwError> {
    cfg.validate()?;
    layer.validate()?;
    let map = Mapping::new(cfg, layer);
    let per_fold = map.fold_cycles();
    let (m, n, k) = (map.m, map.n, map.k);
    let sram = match map.dataflow {
        Dataflow::Os => SramCounts {
            ifmap_reads: map.col_folds * m * k,
            filter_reads: map.row_folds * k * n,
            ofmap_writes: m * n,
            ofmap_reads: 0,
        },
        Dataflow::Ws => SramCounts {
            ifmap_reads: map.col_folds * m * k,
            filter_reads: k * n,
            ofmap_writes: map.row_folds * m * n,
            ofmap_reads: (map.row_folds - 1) * m * n,
        },
        Dataflow::Is => SramCounts {
            ifmap_reads: m * k,
            filter_reads: map.col_folds * k * n,
            ofmap_writes: map.row_folds * m * n,
            ofmap_reads: (map.row_folds - 1) * m * n,
        },
    };
    if scalesim::applies(cfg) {
        return scalesim::report(cfg, layer, &map, sram);
    }
    let mem = memory::schedule(cfg, &map, |_| per_fold, true)?;
    Ok(LayerReport::assemble(cfg, layer, &map, map.num_folds() * per_fold, sram, &mem))
}
