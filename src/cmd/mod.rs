//! One module per command family. Each turns parsed arguments into a call on
//! the owning crate and prints the result.

pub mod bench;
pub mod check;
pub mod compare;
pub mod diagnose;
mod local_cluster;
pub mod new;
pub mod onnx;
pub mod place;
pub mod profile;
pub mod report;
pub mod run;
pub mod schema;
pub mod server;
pub mod systolic;
pub mod train;
mod train_lm;

/// Prints records as one JSON object per line, or as an aligned text table
/// whose columns are the union of the records' keys in first-seen order.
pub fn print_records(records: &[serde_json::Value], json: bool) {
    if json {
        for r in records {
            println!("{r}");
        }
        return;
    }
    // serde_json sorts object keys, so put the identifying columns first.
    let mut columns: Vec<String> = ["name", "threads"]
        .iter()
        .filter(|k| records.iter().any(|r| r.get(**k).is_some()))
        .map(|k| k.to_string())
        .collect();
    for r in records {
        if let Some(obj) = r.as_object() {
            for k in obj.keys() {
                if !columns.contains(k) {
                    columns.push(k.clone());
                }
            }
        }
    }
    let cell = |r: &serde_json::Value, c: &str| -> String {
        match r.get(c) {
            None | Some(serde_json::Value::Null) => String::new(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) => match n.as_f64() {
                Some(f) if n.is_f64() => format_number(f),
                _ => n.to_string(),
            },
            Some(v) => v.to_string(),
        }
    };
    let widths: Vec<usize> = columns
        .iter()
        .map(|c| records.iter().map(|r| cell(r, c).len()).max().unwrap_or(0).max(c.len()))
        .collect();
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells.iter().zip(&widths).map(|(s, w)| format!("{s:>w$}")).collect();
        println!("{}", parts.join("  "));
    };
    line(columns.clone());
    for r in records {
        line(columns.iter().map(|c| cell(r, c)).collect());
    }
}

fn format_number(f: f64) -> String {
    let a = f.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e6 || a < 1e-3 {
        format!("{f:.3e}")
    } else if a >= 100.0 {
        format!("{f:.1}")
    } else {
        format!("{f:.4}")
    }
}

/// Ignores SIGPIPE for the rest of the process. `main` restores its default
/// (a closed stdout pipe ends a filter quietly), but a task or a master
/// whose peer task died writes into a closed socket with `writev` (hyper),
/// which raises SIGPIPE: with the default disposition that kills the
/// survivor instead of failing the one call, and the runtime could not
/// restart the dead task. The cluster commands call this first.
pub fn ignore_sigpipe() {
    #[cfg(unix)]
    // SAFETY: sets the disposition of one signal to "ignore"; no handler runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}
