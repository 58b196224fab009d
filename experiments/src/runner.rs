//! Runs an experiment's points in parallel and stores each as it finishes.
//!
//! Points run on a rayon pool of `jobs` threads. A point's numbers depend
//! only on its parameters and its seed, never on the thread or the order, so
//! any `jobs` gives the same results. A point that fails (or panics) records
//! its error and the sweep goes on.

use std::collections::HashSet;
use std::io::IsTerminal;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use parking_lot::Mutex;
use std::time::{Duration, Instant};

use flowlab_reports::ResultRow;
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;

use crate::error::ExperimentError;
use crate::experiment::{Experiment, Run};
use crate::store::{Columns, ResultStore};

/// The command line as a person would retype it: the program by its
/// name, and arguments that are paths under the working directory
/// relative to it.
fn command_line() -> String {
    let cwd = std::env::current_dir().ok();
    std::env::args()
        .enumerate()
        .map(|(i, a)| {
            if i == 0 {
                return Path::new(&a).file_name().map_or(a.clone(), |n| n.to_string_lossy().into_owned());
            }
            match cwd.as_ref().and_then(|c| Path::new(&a).strip_prefix(c).ok()) {
                Some(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
                _ => a,
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Which share of the runs this process takes: runs whose index is
/// `index mod count == index_of_shard`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

/// `K/N`, as `--shard` takes it.
impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = ExperimentError;

    /// `K/N` with 0 <= K < N.
    fn from_str(s: &str) -> Result<Shard, ExperimentError> {
        let bad = || ExperimentError::Usage(format!("--shard `{s}`: expected K/N with 0 <= K < N, e.g. 0/4"));
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u64 = k.trim().parse().map_err(|_| bad())?;
        let count: u64 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A bar when stdout is a terminal, plain lines otherwise.
    Auto,
    /// One line per finished point.
    Lines,
    /// Nothing.
    Quiet,
}

/// How to run an experiment.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The output directory (`out/<name>` if absent).
    pub out_dir: Option<PathBuf>,
    /// Worker threads (all cores if absent).
    pub jobs: Option<usize>,
    pub shard: Option<Shard>,
    /// Discard earlier results instead of resuming.
    pub fresh: bool,
    pub progress: Progress,
    /// How `distributed` points start their tasks: child processes of a
    /// binary that serves `server --cluster ...` (`flowlab run` passes its
    /// own path), or task servers on threads here (the default).
    pub launcher: flowlab_runtime::Launcher,
    /// Set (by a Ctrl-C handler) to stop starting runs: those in flight
    /// finish and are stored, then `run` returns
    /// [`ExperimentError::Interrupted`].
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            out_dir: None,
            jobs: None,
            shard: None,
            fresh: false,
            progress: Progress::Auto,
            launcher: flowlab_runtime::Launcher::Threads,
            stop: None,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub out_dir: PathBuf,
    /// Runs in this shard.
    pub runs: u64,
    /// Runs already done by an earlier, interrupted invocation.
    pub resumed: u64,
    /// Runs done now.
    pub ran: u64,
    /// Runs of this shard whose stored row is an error.
    pub failed: u64,
    /// Whether the stored experiment file differed (an edited file resumed).
    pub changed: bool,
    /// Stored rows of runs the edited file no longer has, set aside in
    /// `results.superseded.jsonl`.
    pub superseded: u64,
    pub elapsed: Duration,
}

/// The default output directory of an experiment: `out/<name>`.
pub fn default_out_dir(experiment: &Experiment) -> PathBuf {
    Path::new("out").join(&experiment.name)
}

/// Runs every run of the experiment (of this shard) not already stored in
/// the output directory, storing each as it finishes.
pub fn run(experiment: &Experiment, options: &RunOptions) -> Result<RunSummary, ExperimentError> {
    let start = Instant::now();
    let kind = crate::kinds::lookup(experiment.kind).ok();
    let pool = thread_pool(experiment, options, kind)?;
    let (calibrated, calibration) = match &experiment.calibrate {
        None => (None, None),
        Some(spec) => {
            if options.progress != Progress::Quiet {
                let targets = experiment.calibration_targets().count();
                println!(
                    "calibrating {} on {targets} calibration points ({}, at most {} iterations)",
                    spec.params.keys().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", "),
                    spec.method.name(),
                    spec.max_iters
                );
            }
            let fit_start = Instant::now();
            let record = pool.install(|| crate::calibrate::fit(experiment, &options.launcher))?;
            if options.progress != Progress::Quiet {
                let values: Vec<String> = record.fitted.iter().map(|(k, v)| format!("{k} = {v:.6}")).collect();
                println!(
                    "calibrated: {} (loss {:.3e}, {} evaluations, {:.1} s)",
                    values.join(", "),
                    record.loss,
                    record.evaluations,
                    fit_start.elapsed().as_secs_f64()
                );
            }
            (Some(experiment.with_values(&record.fitted)?), Some(record))
        }
    };
    let experiment = calibrated.as_ref().unwrap_or(experiment);
    let out_dir = options.out_dir.clone().unwrap_or_else(|| default_out_dir(experiment));
    let mine: Vec<&Run> = experiment
        .runs
        .iter()
        .filter(|r| options.shard.is_none_or(|s| r.index % s.count == s.index))
        .collect();
    let my_keys: HashSet<&str> = mine.iter().map(|r| r.key.as_str()).collect();
    let columns = Columns {
        params: experiment.param_columns.clone(),
        metrics: experiment.metric_columns.clone(),
    };
    let all_keys: HashSet<&str> = experiment.runs.iter().map(|r| r.key.as_str()).collect();
    let (store, opened) = ResultStore::open(
        &out_dir,
        &experiment.name,
        &experiment.text,
        columns,
        options.fresh,
        &all_keys,
        &my_keys,
    )?;
    let done: HashSet<&str> = opened.rows.iter().map(|r| r.key.as_str()).collect();
    let pending: Vec<&Run> = mine.iter().copied().filter(|r| !done.contains(r.key.as_str())).collect();
    let resumed = (mine.len() - pending.len()) as u64;


    if opened.changed && options.progress != Progress::Quiet {
        let moved = if opened.superseded > 0 {
            format!(
                "; {} stored runs are no longer in its sweep: moved to {}",
                opened.superseded,
                out_dir.join(crate::store::SUPERSEDED_JSONL).display()
            )
        } else {
            String::new()
        };
        println!(
            "{}: the experiment file changed since the stored results: {resumed} of {} runs still match{moved}; {} to run",
            out_dir.display(),
            mine.len(),
            pending.len()
        );
    }
    let reporter = Reporter::new(options.progress, pending.len() as u64, mine.len() as u64, resumed);
    let store = Mutex::new(store);
    let first_error: Mutex<Option<ExperimentError>> = Mutex::new(None);
    pool.install(|| {
        pending.par_iter().for_each(|run| {
            if lock(&first_error).is_some() || stopped(options) {
                return;
            }
            let row = execute(run, &options.launcher);
            let stored = lock(&store).append(&row);
            match stored {
                Ok(()) => reporter.finished(run, &row),
                Err(e) => {
                    lock(&first_error).get_or_insert(e);
                }
            }
        });
    });
    reporter.done();
    if let Some(e) = first_error.into_inner() {
        return Err(e);
    }
    let store = store.into_inner();
    let rows = store.finish()?;
    if stopped(options) {
        let stored = rows.iter().filter(|r| my_keys.contains(r.key.as_str())).count() as u64;
        return Err(ExperimentError::Interrupted { out_dir, stored, runs: mine.len() as u64 });
    }
    let unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let info = flowlab_reports::RunInfo {
        date: flowlab_reports::utc_date(unix_s),
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: env!("FLOWLAB_COMMIT").to_string(),
        profile: env!("FLOWLAB_PROFILE").to_string(),
        command: command_line(),
        wall_s: start.elapsed().as_secs_f64(),
        ran: pending.len() as u64,
        resumed,
        calibration,
        resolved: experiment.resolved_constants(),
    };
    flowlab_reports::write_run_info(&out_dir, &info)?;
    let references = crate::references::checks(&experiment.targets, &rows, experiment.repeat);
    let (tables, text) = kind.and_then(|k| k.summarize(&rows)).unwrap_or_default();
    if !tables.is_empty() || !references.is_empty() {
        let text = format!("{text}{}", crate::references::text(&references));
        flowlab_reports::write_summary(&out_dir, &flowlab_reports::Summary { references, tables })?;
        if options.progress != Progress::Quiet {
            print!("{text}");
        }
    }
    let failed = rows
        .iter()
        .filter(|r| r.error.is_some() && my_keys.contains(r.key.as_str()))
        .count() as u64;
    Ok(RunSummary {
        out_dir,
        runs: mine.len() as u64,
        resumed,
        ran: pending.len() as u64,
        failed,
        changed: opened.changed,
        superseded: opened.superseded,
        elapsed: start.elapsed(),
    })
}

fn stopped(options: &RunOptions) -> bool {
    options.stop.as_ref().is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst))
}

/// The pool the points run on: `jobs` threads, one for kinds that time
/// real runs.
fn thread_pool(
    experiment: &Experiment,
    options: &RunOptions,
    kind: Option<&'static dyn crate::kinds::Kind>,
) -> Result<rayon::ThreadPool, ExperimentError> {
    let mut jobs = options
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    if kind.is_some_and(|k| k.exclusive()) {
        // Points that time real runs must not share the machine.
        if options.jobs.is_some_and(|j| j > 1) && options.progress != Progress::Quiet {
            println!("kind `{}` times real runs: its points run one at a time (--jobs ignored)", experiment.kind);
        }
        jobs = 1;
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .map_err(|e| ExperimentError::ThreadPool { jobs, message: e.to_string() })
}

/// A poisoned lock only means another point panicked while holding it; the
/// data (a file handle, an error slot) is still sound.
fn lock<T>(m: &Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    m.lock()
}

/// Runs one point, turning an error or a panic into a failed row.
fn execute(run: &Run, launcher: &flowlab_runtime::Launcher) -> ResultRow {
    let start = Instant::now();
    let env = crate::kinds::PointEnv { seed: run.seed, launcher: launcher.clone() };
    let outcome = run_caught(run.runnable.as_ref(), &env);
    let elapsed_s = start.elapsed().as_secs_f64();
    let (metrics, series, error) = match outcome {
        Ok(o) => (o.metrics, o.series, None),
        Err(e) => (Default::default(), Default::default(), Some(e)),
    };
    ResultRow {
        index: run.index,
        key: run.key.clone(),
        seed: run.seed,
        params: run.params.clone(),
        metrics,
        series,
        error,
        elapsed_s,
    }
}

/// Runs a point, a panic becoming its error.
pub(crate) fn run_caught(runnable: &dyn crate::kinds::Runnable, env: &crate::kinds::PointEnv) -> Result<crate::kinds::Outcome, String> {
    catch_unwind(AssertUnwindSafe(|| runnable.run(env))).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown cause".to_string());
        Err(format!("panicked: {message}"))
    })
}

/// Shows progress as a bar or as lines.
enum Reporter {
    Bar(ProgressBar),
    Lines { done: Mutex<u64>, total: u64 },
    Quiet,
}

impl Reporter {
    fn new(progress: Progress, pending: u64, total: u64, resumed: u64) -> Reporter {
        let terminal = std::io::stdout().is_terminal();
        match progress {
            Progress::Quiet => Reporter::Quiet,
            Progress::Auto if terminal => {
                let bar = ProgressBar::new(pending);
                let style = ProgressStyle::with_template(
                    "{bar:40.cyan/blue} {pos}/{len} points  {per_sec}  elapsed {elapsed}  ETA {eta}  {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar());
                bar.set_style(style);
                if resumed > 0 {
                    bar.println(format!("resuming: {resumed} of {total} runs already done"));
                }
                Reporter::Bar(bar)
            }
            Progress::Auto | Progress::Lines => {
                if resumed > 0 {
                    println!("resuming: {resumed} of {total} runs already done");
                }
                Reporter::Lines {
                    done: Mutex::new(resumed),
                    total,
                }
            }
        }
    }

    fn finished(&self, run: &Run, row: &ResultRow) {
        match self {
            Reporter::Quiet => {}
            Reporter::Bar(bar) => {
                if let Some(e) = &row.error {
                    bar.println(format!("run {} ({}) failed: {e}", run.index, run.label));
                }
                bar.inc(1);
            }
            Reporter::Lines { done, total } => {
                let mut done = lock(done);
                *done += 1;
                let status = match &row.error {
                    None => "ok".to_string(),
                    Some(e) => format!("FAILED: {e}"),
                };
                let width = total.to_string().len();
                println!(
                    "[{:>width$}/{total}] run {} {} ({:.2} s) {status}",
                    *done, run.index, run.label, row.elapsed_s
                );
            }
        }
    }

    fn done(&self) {
        if let Reporter::Bar(bar) = self {
            bar.finish();
        }
    }
}
