//! Per-step compute slowdowns drawn from the seeded RNG.

use crate::cluster::config::Straggler;
use crate::error::SimError;
use crate::time::SimTime;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Exp1, StandardNormal};

/// Per-step slowdown factors read from a CSV file, by column.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SlowdownTrace {
    /// `columns[c][row]`, every column of one length.
    columns: Vec<Vec<f64>>,
}

impl SlowdownTrace {
    /// The factors of a `trace` straggler: its file's, or its inline
    /// `factors` (one column per worker), checked alike.
    pub(crate) fn of(cfg: &Straggler) -> Result<SlowdownTrace, SimError> {
        let Straggler::Trace { file, factors, .. } = cfg else {
            return Err(SimError::param("straggler", "not a trace"));
        };
        match (file, factors) {
            (Some(path), None) => SlowdownTrace::load(path),
            (None, Some(columns)) => {
                for (w, column) in columns.iter().enumerate() {
                    if column.is_empty() {
                        return Err(SimError::param(format!("straggler.factors[{w}]"), "is empty"));
                    }
                    if let Some(f) = column.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
                        return Err(SimError::param(format!("straggler.factors[{w}]"), format!("factor {f} must be a positive number")));
                    }
                }
                if columns.is_empty() {
                    return Err(SimError::param("straggler.factors", "lists no worker"));
                }
                Ok(SlowdownTrace { columns: columns.clone() })
            }
            _ => Err(SimError::param("straggler", "a trace takes `file` or `factors`, one of the two")),
        }
    }

    /// Reads `path`: comma-separated factors, one row per step, all rows of
    /// one width. Blank lines and `#` comments are skipped; a first line
    /// with no number in it is a header. Every factor must be a positive
    /// finite number; an error names the file and line.
    pub(crate) fn load(path: &str) -> Result<SlowdownTrace, SimError> {
        let fail = |reason: String| SimError::param("straggler.file", reason);
        let text = std::fs::read_to_string(path).map_err(|e| fail(format!("{path}: {e}")))?;
        let mut rows: Vec<Vec<f64>> = Vec::new();
        let mut seen_line = false;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let cells: Vec<&str> = line.split(',').map(str::trim).collect();
            let first = !std::mem::replace(&mut seen_line, true);
            if first && cells.iter().all(|c| c.parse::<f64>().is_err()) {
                continue;
            }
            let mut row = Vec::with_capacity(cells.len());
            for cell in cells {
                let v: f64 = cell
                    .parse()
                    .map_err(|_| fail(format!("{path}:{}: `{cell}` is not a number", i + 1)))?;
                if !(v.is_finite() && v > 0.0) {
                    return Err(fail(format!("{path}:{}: factor {cell} must be a positive number", i + 1)));
                }
                row.push(v);
            }
            if let Some(first) = rows.first()
                && first.len() != row.len()
            {
                return Err(fail(format!("{path}:{}: {} factors where the first row has {}", i + 1, row.len(), first.len())));
            }
            rows.push(row);
        }
        if rows.is_empty() {
            return Err(fail(format!("{path}: no factors in the file")));
        }
        let columns = (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c]).collect()).collect();
        Ok(SlowdownTrace { columns })
    }
}

/// The factors `cfg` gives `workers` workers over their first `steps`
/// computations each, worker `w` from its own stream of `seed`: what a
/// real run injects and the simulator then replays (`Straggler::Trace`
/// with these `factors`). Slow periods (`transient`) depend on simulated
/// time, so they have no such table.
pub fn factor_table(cfg: &Straggler, workers: usize, steps: usize, seed: u64) -> Result<Vec<Vec<f64>>, SimError> {
    if matches!(cfg, Straggler::Transient { .. }) {
        return Err(SimError::param(
            "straggler",
            "`transient` slow periods follow simulated time, which a real run does not share; use lognormal, exponential, slow_machines or trace",
        ));
    }
    // one model (a trace is read once); each worker draws from its own stream
    let mut model = StragglerModel::new(cfg, workers, &mut crate::rng::point_rng(seed, 0))?;
    Ok((0..workers)
        .map(|w| {
            let mut rng = crate::rng::point_rng(seed, w as u64 + 1);
            (0..steps).map(|_| model.factor(&mut rng, w, SimTime::ZERO)).collect()
        })
        .collect())
}

/// Rows of factors drawn for a real run's injected stragglers: worker
/// `w`'s k-th computation waits by row `k mod INJECTED_ROWS` of its column.
pub const INJECTED_ROWS: usize = 4096;

/// The factors a real run injects ([`factor_table`]'s, each at least 1: a
/// wait cannot make a worker faster), which the simulator then replays as
/// a `trace` straggler so that a prediction meets the same draws.
pub fn injected_factors(cfg: &Straggler, workers: usize, seed: u64) -> Result<Vec<Vec<f64>>, SimError> {
    Ok(factor_table(cfg, workers, INJECTED_ROWS, seed)?.into_iter().map(|c| c.into_iter().map(|f| f.max(1.0)).collect()).collect())
}

/// How a trace is read: drawn from as one pool, or replayed per worker.
enum TraceUse {
    Pool(Vec<f64>),
    /// The columns, and each worker's steps so far.
    Replay(Vec<Vec<f64>>, Vec<usize>),
}

/// Draws the factor by which a worker's step compute time is multiplied.
pub(crate) struct StragglerModel {
    cfg: Straggler,
    /// Transient: per worker, the current or next slow window [start, end).
    windows: Vec<(SimTime, SimTime)>,
    trace: Option<TraceUse>,
}

impl StragglerModel {
    pub fn new(cfg: &Straggler, workers: usize, rng: &mut ChaCha8Rng) -> Result<Self, SimError> {
        let trace = match cfg {
            Straggler::Trace { pooled, .. } => {
                let t = SlowdownTrace::of(cfg)?;
                Some(if *pooled || t.columns.len() == 1 {
                    TraceUse::Pool(t.columns.concat())
                } else {
                    TraceUse::Replay(t.columns, vec![0; workers])
                })
            }
            _ => None,
        };
        let mut windows = Vec::new();
        if let Straggler::Transient {
            mean_interval_s,
            duration_s,
            ..
        } = cfg
        {
            windows = (0..workers)
                .map(|_| {
                    let start = SimTime::from_secs_f64(rng.sample::<f64, _>(Exp1) * mean_interval_s);
                    (start, start + SimTime::from_secs_f64(*duration_s))
                })
                .collect();
        }
        Ok(StragglerModel {
            cfg: cfg.clone(),
            windows,
            trace,
        })
    }

    pub fn factor(&mut self, rng: &mut ChaCha8Rng, worker: usize, now: SimTime) -> f64 {
        match &self.cfg {
            Straggler::None => 1.0,
            Straggler::Lognormal { sigma } => (sigma * rng.sample::<f64, _>(StandardNormal)).exp(),
            Straggler::Exponential { p, mean } => {
                if rng.random::<f64>() < *p {
                    1.0 + mean * rng.sample::<f64, _>(Exp1)
                } else {
                    1.0
                }
            }
            Straggler::SlowMachines { workers, factor } => {
                if workers.contains(&(worker as u32)) {
                    *factor
                } else {
                    1.0
                }
            }
            Straggler::Trace { .. } => match &mut self.trace {
                Some(TraceUse::Pool(pool)) => pool[rng.random_range(0..pool.len())],
                Some(TraceUse::Replay(columns, steps)) => {
                    let column = &columns[worker % columns.len()];
                    let k = steps[worker];
                    steps[worker] += 1;
                    column[k % column.len()]
                }
                None => 1.0,
            },
            Straggler::Transient {
                mean_interval_s,
                duration_s,
                factor,
                jitter_sigma,
            } => {
                let w = &mut self.windows[worker];
                while w.1 <= now {
                    let gap = SimTime::from_secs_f64(rng.sample::<f64, _>(Exp1) * mean_interval_s);
                    let start = w.1 + gap;
                    *w = (start, start + SimTime::from_secs_f64(*duration_s));
                }
                let slow = if w.0 <= now { *factor } else { 1.0 };
                // No draw without jitter: runs without it keep their streams.
                if *jitter_sigma > 0.0 {
                    slow * (jitter_sigma * rng.sample::<f64, _>(StandardNormal)).exp()
                } else {
                    slow
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn trace_file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn a_trace_with_columns_is_replayed_per_worker_and_a_single_column_is_a_pool() {
        let f = trace_file("# measured somewhere\nw0,w1\n1.0,2.0\n3.0,4.0\n");
        let cfg = Straggler::Trace { file: Some(f.path().display().to_string()), factors: None, pooled: false };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut m = StragglerModel::new(&cfg, 3, &mut rng).unwrap();
        let mut at = |w| m.factor(&mut rng, w, SimTime(0));
        // Worker 2 replays column 0 again (2 mod 2).
        assert_eq!([at(0), at(1), at(0), at(1), at(0), at(2)], [1.0, 2.0, 3.0, 4.0, 1.0, 1.0]);
        // One column: every step draws from the four values alike.
        let f = trace_file("1\n2\n3\n4\n");
        let cfg = Straggler::Trace { file: Some(f.path().display().to_string()), factors: None, pooled: false };
        let mut m = StragglerModel::new(&cfg, 2, &mut rng).unwrap();
        let draws: Vec<f64> = (0..40_000).map(|i| m.factor(&mut rng, i % 2, SimTime(0))).collect();
        for v in [1.0, 2.0, 3.0, 4.0] {
            let share = draws.iter().filter(|&&d| d == v).count() as f64 / draws.len() as f64;
            assert!((share - 0.25).abs() < 0.01, "{v}: {share}");
        }
    }

    #[test]
    fn factor_tables_are_one_stream_per_worker_and_refuse_time_dependent_stragglers() {
        let cfg = Straggler::Lognormal { sigma: 0.5 };
        let t = factor_table(&cfg, 3, 20_000, 9).unwrap();
        assert_eq!(t, factor_table(&cfg, 3, 20_000, 9).unwrap(), "same seed, same table");
        // the first worker's column does not depend on how many there are
        assert_eq!(t[0], factor_table(&cfg, 1, 20_000, 9).unwrap()[0]);
        assert_ne!(t[0], t[1]);
        for column in &t {
            let logs: Vec<f64> = column.iter().map(|f| f.ln()).collect();
            let mean = logs.iter().sum::<f64>() / logs.len() as f64;
            let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / logs.len() as f64).sqrt();
            assert!(mean.abs() < 0.02 && (sd - 0.5).abs() < 0.02, "ln factor: mean {mean}, sd {sd}");
        }
        let transient = Straggler::Transient { mean_interval_s: 1.0, duration_s: 1.0, factor: 2.0, jitter_sigma: 0.0 };
        assert!(factor_table(&transient, 2, 4, 1).unwrap_err().to_string().contains("`transient` slow periods follow simulated time"));
        let inline = |factors: Vec<Vec<f64>>| Straggler::Trace { file: None, factors: Some(factors), pooled: false };
        assert_eq!(factor_table(&inline(vec![vec![1.0, 2.0], vec![3.0]]), 3, 3, 1).unwrap(), vec![vec![1.0, 2.0, 1.0], vec![3.0; 3], vec![1.0, 2.0, 1.0]]);
        let e = SlowdownTrace::of(&inline(vec![vec![1.0], vec![0.0]])).unwrap_err().to_string();
        assert_eq!(e, "invalid parameter `straggler.factors[1]`: factor 0 must be a positive number");
        let both = Straggler::Trace { file: Some("x.csv".into()), factors: Some(vec![vec![1.0]]), pooled: false };
        assert!(SlowdownTrace::of(&both).unwrap_err().to_string().contains("`file` or `factors`, one of the two"));
    }

    #[test]
    fn a_bad_trace_is_refused_naming_its_file_and_line() {
        let err = |text: &str| {
            let f = trace_file(text);
            let e = SlowdownTrace::load(&f.path().display().to_string()).unwrap_err().to_string();
            (e, f.path().display().to_string())
        };
        let (e, p) = err("factor\n1.2\n0\n");
        assert_eq!(e, format!("invalid parameter `straggler.file`: {p}:3: factor 0 must be a positive number"));
        let (e, p) = err("1.2\nslow\n");
        assert_eq!(e, format!("invalid parameter `straggler.file`: {p}:2: `slow` is not a number"));
        let (e, p) = err("1,2\n3\n");
        assert_eq!(e, format!("invalid parameter `straggler.file`: {p}:2: 1 factors where the first row has 2"));
        let (e, p) = err("# nothing\n");
        assert_eq!(e, format!("invalid parameter `straggler.file`: {p}: no factors in the file"));
        let e = SlowdownTrace::load("/nonexistent/trace.csv").unwrap_err().to_string();
        assert!(e.starts_with("invalid parameter `straggler.file`: /nonexistent/trace.csv: "), "{e}");
    }

    #[test]
    fn transient_jitter_is_lognormal_and_slow_periods_persist() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        // Never slow (zero-length periods): the factor is exp(sigma Z), so
        // ln(factor) has mean 0 and standard deviation sigma.
        let cfg = Straggler::Transient { mean_interval_s: 1.0, duration_s: 0.0, factor: 3.0, jitter_sigma: 0.2 };
        let mut m = StragglerModel::new(&cfg, 1, &mut rng).unwrap();
        let logs: Vec<f64> = (0..20_000u64).map(|i| m.factor(&mut rng, 0, SimTime(i * 1_000_000_000)).ln()).collect();
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        let sd = (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / logs.len() as f64).sqrt();
        assert!(mean.abs() < 0.01 && (sd - 0.2).abs() < 0.01, "mean {mean} sd {sd}");
        // Without jitter a slow period gives exactly `factor` for every
        // step started in it: consecutive steps of one worker agree.
        let cfg = Straggler::Transient { mean_interval_s: 10.0, duration_s: 5.0, factor: 2.0, jitter_sigma: 0.0 };
        let mut m = StragglerModel::new(&cfg, 1, &mut rng).unwrap();
        let f: Vec<f64> = (0..20_000u64).map(|i| m.factor(&mut rng, 0, SimTime(i * 1_000_000_000_000))).collect();
        let slow = f.iter().filter(|&&x| x == 2.0).count() as f64 / f.len() as f64;
        // Slow a third of the time (5 s in every 10 + 5 s on average).
        assert!((slow - 1.0 / 3.0).abs() < 0.03, "{slow}");
        let runs = f.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(runs < f.len() / 4, "slowness should persist over steps: {runs} changes");
    }
}
