//! Two runs into one output folder: the second is refused with a message
//! naming the first (its pid), and the first finishes with every row.

mod common;

use std::time::{Duration, Instant};

use common::{describe, flowlab, read_rows, run_flowlab, small_sweep, write_file};

#[test]
fn a_second_run_into_a_busy_folder_is_refused_and_no_row_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    // Enough steps that the first run is still going when the second starts.
    let file = write_file(tmp.path(), "slow.yaml", &small_sweep("slow", 4000));
    let dir = tmp.path().join("results");
    let (file_s, dir_s) = (file.to_str().unwrap(), dir.to_str().unwrap());
    let mut first = flowlab()
        .args(["run", file_s, "--out", dir_s, "--jobs", "1"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the first run holds the folder (its lock file names it).
    let lock = dir.join(".flowlab.lock");
    let start = Instant::now();
    while !std::fs::read_to_string(&lock).is_ok_and(|t| t.contains(&format!("pid {}", first.id()))) {
        assert!(start.elapsed() < Duration::from_secs(60), "the first run never took the folder");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = run_flowlab(&["run", file_s, "--out", dir_s]);
    let status = first.wait().unwrap();
    assert!(status.success());
    assert!(!second.status.success(), "{}", describe(&second));
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        stderr.contains(&format!("{dir_s}: in use by another flowlab run: pid {}", first.id())),
        "{stderr}"
    );
    assert_eq!(read_rows(&dir).len(), 6);
    // Once the first is done, the folder is free again.
    let again = run_flowlab(&["run", file_s, "--out", dir_s]);
    assert!(again.status.success(), "{}", describe(&again));
}
