//! How a GEMM (M, N, K) is laid onto an R x C array under each dataflow, and
//! the sequence of folds (array-sized tiles) it is cut into.
//!
//! Following SCALE-Sim, a dataflow maps two GEMM dimensions onto the array
//! rows (`Sr`) and columns (`Sc`) and streams the third over time (`T`):
//!
//! | dataflow | Sr (rows) | Sc (cols) | T (time) | stationary in PEs |
//! |---|---|---|---|---|
//! | os | M | N | K | outputs |
//! | ws | K | N | M | filter weights |
//! | is | K | M | N | im2col inputs |
//!
//! Folds run column-fold outer, row-fold inner (SCALE-Sim's order), one after
//! the other with no overlap. A fold takes `T + R + C - 2` cycles under os and
//! `2R + C + T - 2` under ws/is, whatever part of the array it uses: the
//! controller sequences the whole array (see `cycle.rs` for the register-level
//! account of every cycle).

use super::{ArrayConfig, Dataflow, Layer};

#[derive(Debug, Clone, Copy)]
pub(crate) struct Mapping {
    pub dataflow: Dataflow,
    pub r: u64,
    pub c: u64,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub sr: u64,
    pub sc: u64,
    pub t: u64,
    pub row_folds: u64,
    pub col_folds: u64,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Fold {
    pub fr: u64,
    pub fc: u64,
    pub rows_used: u64,
    pub cols_used: u64,
}

impl Mapping {
    pub fn new(cfg: &ArrayConfig, layer: &Layer) -> Mapping {
        let (m, n, k) = if cfg.scalesim_compat { layer.gemm_dims_scalesim() } else { layer.gemm_dims() };
        let (r, c) = (u64::from(cfg.rows), u64::from(cfg.cols));
        let (sr, sc, t) = match cfg.dataflow {
            Dataflow::Os => (m, n, k),
            Dataflow::Ws => (k, n, m),
            Dataflow::Is => (k, m, n),
        };
        Mapping { dataflow: cfg.dataflow, r, c, m, n, k, sr, sc, t, row_folds: sr.div_ceil(r), col_folds: sc.div_ceil(c) }
    }

    pub fn num_folds(&self) -> u64 {
        self.row_folds * self.col_folds
    }

    /// Cycles of one fold in closed form (the fast path's whole secret).
    pub fn fold_cycles(&self) -> u64 {
        match self.dataflow {
            Dataflow::Os => self.t + self.r + self.c - 2,
            Dataflow::Ws | Dataflow::Is => 2 * self.r + self.c + self.t - 2,
        }
    }

    pub fn fold(&self, index: u64) -> Fold {
        let (fc, fr) = (index / self.row_folds, index % self.row_folds);
        Fold { fr, fc, rows_used: (self.sr - fr * self.r).min(self.r), cols_used: (self.sc - fc * self.c).min(self.c) }
    }

    /// Average over folds of the fraction of PEs mapped (SCALE-Sim's
    /// "mapping efficiency"); separable, hence this closed form.
    pub fn mapping_efficiency(&self) -> f64 {
        (self.sr as f64 * self.sc as f64) / ((self.row_folds * self.r) as f64 * (self.col_folds * self.c) as f64)
    }
}
