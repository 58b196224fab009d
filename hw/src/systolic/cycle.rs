//! The cycle-by-cycle model: every PE's registers are stepped every cycle,
//! and operand values really flow through them, so the outputs it produces
//! can be checked against a matrix product (the unit tests do).
//!
//! Micro-architecture, per fold:
//!
//! * **os**: PE(i, j) holds an accumulator. Row i of the left operand enters
//!   PE(i, 0) skewed by i cycles and moves right one PE per cycle; column j of
//!   the top operand enters PE(0, j) skewed by j and moves down. Element t
//!   meets in PE(i, j) at cycle t + i + j. A PE that has done its T-th MAC puts
//!   its sum on its column's result bus that very cycle; within a column the
//!   PEs finish on distinct cycles, so one bus per column never conflicts (the
//!   model checks). The fold ends with PE(R-1, C-1)'s last MAC:
//!   `T + R + C - 2` cycles.
//! * **ws / is**: first the stationary tile shifts in from the top, one row per
//!   cycle (R cycles, last row first). Then row k of the streamed operand
//!   enters PE(k, 0) at cycle R + t + k and moves right; partial sums move down
//!   one PE per cycle and leave the bottom row into the ofmap SRAM, which adds
//!   them to earlier row folds' partial sums. The fold ends when the last
//!   partial sum leaves PE(R-1, C-1): `2R + C + T - 2` cycles.
//!
//! Folds do not overlap, and unused rows and columns carry zeros in step with
//! the wavefront: this is SCALE-Sim's timing, reproduced by registers.

use super::mapping::Mapping;
use super::report::{LayerReport, SramCounts};
use super::{memory, scalesim, ArrayConfig, Dataflow, Layer};
use crate::HwError;

/// Register file of the whole array, one entry per PE (row-major).
struct Pes {
    r: usize,
    c: usize,
    a: Vec<i32>,
    a_tag: Vec<i64>,
    /// os: top operand in flight; ws/is: the stationary value.
    b: Vec<i32>,
    b_tag: Vec<i64>,
    /// os: accumulator; ws/is: partial sum moving down.
    acc: Vec<i64>,
    acc_tag: Vec<i64>,
}

impl Pes {
    fn new(r: usize, c: usize) -> Pes {
        let n = r * c;
        Pes { r, c, a: vec![0; n], a_tag: vec![-1; n], b: vec![0; n], b_tag: vec![-1; n], acc: vec![0; n], acc_tag: vec![-1; n] }
    }
    fn reset(&mut self) {
        self.a.fill(0);
        self.a_tag.fill(-1);
        self.b.fill(0);
        self.b_tag.fill(-1);
        self.acc.fill(0);
        self.acc_tag.fill(-1);
    }
}

struct FoldShape {
    t: u64,
    rows_used: usize,
    cols_used: usize,
}

fn broken(what: String) -> HwError {
    HwError::Internal(what)
}

/// One output-stationary fold. `left(i, t)`, `top(t, j)`; `emit(i, j, sum)`.
fn os_fold(
    p: &mut Pes,
    s: &FoldShape,
    left: impl Fn(u64, u64) -> i32,
    top: impl Fn(u64, u64) -> i32,
    mut emit: impl FnMut(u64, u64, i64),
    reads: &mut [u64; 2],
) -> Result<u64, HwError> {
    p.reset();
    let (r, c) = (p.r, p.c);
    let t_len = s.t as i64;
    let limit = s.t + (r + c) as u64 + 4;
    let mut bus = vec![u64::MAX; c];
    for x in 0..limit {
        let mut done = false;
        for i in (0..r).rev() {
            let tf = x as i64 - i as i64;
            let feed_a = if (0..t_len).contains(&tf) {
                if i < s.rows_used {
                    reads[0] += 1;
                    (left(i as u64, tf as u64), tf)
                } else {
                    (0, tf)
                }
            } else {
                (0, -1)
            };
            for j in (0..c).rev() {
                let idx = i * c + j;
                let (av, at) = if j > 0 { (p.a[idx - 1], p.a_tag[idx - 1]) } else { feed_a };
                let (bv, bt) = if i > 0 {
                    (p.b[idx - c], p.b_tag[idx - c])
                } else {
                    let tf = x as i64 - j as i64;
                    if (0..t_len).contains(&tf) {
                        if j < s.cols_used {
                            reads[1] += 1;
                            (top(tf as u64, j as u64), tf)
                        } else {
                            (0, tf)
                        }
                    } else {
                        (0, -1)
                    }
                };
                p.a[idx] = av;
                p.a_tag[idx] = at;
                p.b[idx] = bv;
                p.b_tag[idx] = bt;
                if at != bt {
                    return Err(broken(format!("os: operands {at} and {bt} met in PE({i},{j}) at cycle {x}")));
                }
                if at >= 0 {
                    p.acc[idx] += i64::from(av) * i64::from(bv);
                    if at == t_len - 1 {
                        if i < s.rows_used && j < s.cols_used {
                            if bus[j] == x {
                                return Err(broken(format!("os: two results on column bus {j} at cycle {x}")));
                            }
                            bus[j] = x;
                            emit(i as u64, j as u64, p.acc[idx]);
                        }
                        done |= i == r - 1 && j == c - 1;
                    }
                }
            }
        }
        if done {
            return Ok(x + 1);
        }
    }
    Err(broken(format!("os fold did not finish within {limit} cycles")))
}

/// One weight- or input-stationary fold. `stationary(k, j)`, `streamed(t, k)`;
/// `emit(t, j, partial_sum)`.
fn stationary_fold(
    p: &mut Pes,
    s: &FoldShape,
    stationary: impl Fn(u64, u64) -> i32,
    streamed: impl Fn(u64, u64) -> i32,
    mut emit: impl FnMut(u64, u64, i64),
    reads: &mut [u64; 2],
) -> Result<u64, HwError> {
    p.reset();
    let (r, c) = (p.r, p.c);
    let t_len = s.t as i64;
    let limit = s.t + (2 * r + c) as u64 + 4;
    let last = (r - 1) * c;
    for x in 0..limit {
        if (x as usize) < r {
            // Shift the stationary tile down one row; the new top row enters.
            p.b.copy_within(0..last, c);
            let src = r - 1 - x as usize;
            for j in 0..c {
                p.b[j] = if src < s.rows_used && j < s.cols_used {
                    reads[0] += 1;
                    stationary(src as u64, j as u64)
                } else {
                    0
                };
            }
        }
        for k in (0..r).rev() {
            let tf = x as i64 - r as i64 - k as i64;
            let feed = if (0..t_len).contains(&tf) {
                if k < s.rows_used {
                    reads[1] += 1;
                    (streamed(tf as u64, k as u64), tf)
                } else {
                    (0, tf)
                }
            } else {
                (0, -1)
            };
            for j in (0..c).rev() {
                let idx = k * c + j;
                let (av, at) = if j > 0 { (p.a[idx - 1], p.a_tag[idx - 1]) } else { feed };
                p.a[idx] = av;
                p.a_tag[idx] = at;
                let (pin, ptag) = if k > 0 { (p.acc[idx - c], p.acc_tag[idx - c]) } else { (0, at) };
                if at != ptag {
                    return Err(broken(format!("stationary: input {at} met partial sum {ptag} in PE({k},{j}) at cycle {x}")));
                }
                p.acc[idx] = pin + i64::from(av) * i64::from(p.b[idx]);
                p.acc_tag[idx] = ptag;
            }
        }
        for j in 0..s.cols_used {
            let tag = p.acc_tag[last + j];
            if tag >= 0 {
                emit(tag as u64, j as u64, p.acc[last + j]);
            }
        }
        if p.acc_tag[last + c - 1] == t_len - 1 {
            return Ok(x + 1);
        }
    }
    Err(broken(format!("stationary fold did not finish within {limit} cycles")))
}

pub(crate) struct CycleRun {
    pub fold_cycles: Vec<u64>,
    pub sram: SramCounts,
}

/// Runs every fold of `map` with operands `a` (M x K) and `b` (K x N); when
/// `out` is given (M x N, row-major) the product is accumulated into it.
pub(crate) fn run(
    map: &Mapping,
    a: &dyn Fn(u64, u64) -> i32,
    b: &dyn Fn(u64, u64) -> i32,
    mut out: Option<&mut [i64]>,
) -> Result<CycleRun, HwError> {
    let (r, c) = (map.r as usize, map.c as usize);
    let mut pes = Pes::new(r, c);
    let mut sram = SramCounts::default();
    let mut fold_cycles = Vec::with_capacity(map.num_folds() as usize);
    let n = map.n;
    for i in 0..map.num_folds() {
        let f = map.fold(i);
        let shape = FoldShape { t: map.t, rows_used: f.rows_used as usize, cols_used: f.cols_used as usize };
        let (r0, c0) = (f.fr * map.r, f.fc * map.c);
        let mut reads = [0u64; 2];
        let mut writes = 0u64;
        let mut readbacks = 0u64;
        let partial = f.fr > 0;
        let cycles = match map.dataflow {
            Dataflow::Os => os_fold(
                &mut pes,
                &shape,
                |i, t| a(r0 + i, t),
                |t, j| b(t, c0 + j),
                |i, j, v| {
                    writes += 1;
                    if let Some(o) = out.as_deref_mut() {
                        o[((r0 + i) * n + c0 + j) as usize] = v;
                    }
                },
                &mut reads,
            )?,
            Dataflow::Ws => stationary_fold(
                &mut pes,
                &shape,
                |k, j| b(r0 + k, c0 + j),
                |t, k| a(t, r0 + k),
                |t, j, v| {
                    writes += 1;
                    readbacks += u64::from(partial);
                    if let Some(o) = out.as_deref_mut() {
                        o[(t * n + c0 + j) as usize] += v;
                    }
                },
                &mut reads,
            )?,
            Dataflow::Is => stationary_fold(
                &mut pes,
                &shape,
                |k, j| a(c0 + j, r0 + k),
                |t, k| b(r0 + k, t),
                |t, j, v| {
                    writes += 1;
                    readbacks += u64::from(partial);
                    if let Some(o) = out.as_deref_mut() {
                        o[((c0 + j) * n + t) as usize] += v;
                    }
                },
                &mut reads,
            )?,
        };
        // reads[0]: os left / stationary operand; reads[1]: os top / streamed operand.
        let (ifmap, filter) = match map.dataflow {
            Dataflow::Os => (reads[0], reads[1]),
            Dataflow::Ws => (reads[1], reads[0]),
            Dataflow::Is => (reads[0], reads[1]),
        };
        sram.ifmap_reads += ifmap;
        sram.filter_reads += filter;
        sram.ofmap_writes += writes;
        sram.ofmap_reads += readbacks;
        fold_cycles.push(cycles);
    }
    Ok(CycleRun { fold_cycles, sram })
}

/// The operand values `simulate_layer_cycles` pushes through the array: small
/// deterministic integers, so that every register carries real data.
pub(crate) fn default_a(i: u64, k: u64) -> i32 {
    ((i * 31 + k * 7) % 13) as i32 - 6
}
pub(crate) fn default_b(k: u64, j: u64) -> i32 {
    ((k * 17 + j * 5) % 11) as i32 - 5
}

/// Largest array (in PEs) the cycle-by-cycle model accepts: 512 x 512.
pub const MAX_CYCLE_MODEL_PES: u64 = 512 * 512;

/// Most PE-steps (PEs x cycles) the cycle-by-cycle model takes for one
/// layer: 2^30, about 5 s at the 4-6 ns per PE-step it runs at (measured:
/// 16x16 ws GEMM 512,512,1024, 2.9e8 PE-steps, 1.6 s).
pub const MAX_CYCLE_MODEL_WORK: u64 = 1 << 30;

/// Simulates one layer cycle by cycle (every PE stepped every cycle). Meant
/// for small arrays and layers: the work is R * C per simulated cycle, and
/// arrays beyond [`MAX_CYCLE_MODEL_PES`] are refused (use `simulate_layer`).
pub fn simulate_layer_cycles(cfg: &ArrayConfig, layer: &Layer) -> Result<LayerReport, HwError> {
    cfg.validate()?;
    let pes = u64::from(cfg.rows) * u64::from(cfg.cols);
    if pes > MAX_CYCLE_MODEL_PES {
        return Err(HwError::InvalidParameter {
            parameter: "ArrayHeight x ArrayWidth".into(),
            message: format!(
                "the cycle-by-cycle model takes at most {MAX_CYCLE_MODEL_PES} PEs, got {}x{}; use the fast path",
                cfg.rows, cfg.cols
            ),
        });
    }
    layer.validate()?;
    let map = Mapping::new(cfg, layer);
    // Every fold steps every PE for its cycles plus a few of flush.
    let work = u128::from(map.num_folds()) * u128::from(map.fold_cycles() + 4) * u128::from(pes);
    if work > u128::from(MAX_CYCLE_MODEL_WORK) {
        return Err(HwError::TooMuchWork {
            what: "cycle-by-cycle model".into(),
            estimate: format!(
                "{} folds x {} cycles x {pes} PEs = {work} PE-steps (layer `{}`)",
                map.num_folds(),
                map.fold_cycles() + 4,
                layer.name
            ),
            limit: format!("{MAX_CYCLE_MODEL_WORK} PE-steps (a few seconds); use the fast path, which agrees with it"),
        });
    }
    if scalesim::applies(cfg) {
        let run = run(&map, &default_a, &default_b, None)?;
        return scalesim::report(cfg, layer, &map, run.sram);
    }
    // Check SRAM sizes before spending time on the array.
    memory::schedule(cfg, &map, |_| 0, true)?;
    let run = run(&map, &default_a, &default_b, None)?;
    let mem = memory::schedule(cfg, &map, |i| run.fold_cycles[i as usize], false)?;
    let compute = run.fold_cycles.iter().sum();
    Ok(LayerReport::assemble(cfg, layer, &map, compute, run.sram, &mem))
}
