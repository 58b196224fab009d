//! Determinism: the same file and seed give the same numbers whether the
//! points run on one thread, two, or as shards merged afterwards; another
//! seed gives other numbers.

mod common;

use common::{comparable, describe, read_rows, run_flowlab, small_sweep, write_file};

#[test]
fn one_thread_two_threads_and_two_shards_agree() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write_file(tmp.path(), "small.yaml", &small_sweep("small", 10));
    let file = file.to_str().unwrap();
    let run = |dir: &str, extra: &[&str]| {
        let path = tmp.path().join(dir);
        let mut args = vec!["run", file, "--out", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = run_flowlab(&args);
        assert!(out.status.success(), "{}", describe(&out));
        path
    };
    let one = comparable(read_rows(&run("one", &["--jobs", "1"])));
    let two = comparable(read_rows(&run("two", &["--jobs", "2"])));
    assert_eq!(one.len(), 6);
    assert_eq!(one, two);

    let a = run("shard0", &["--shard", "0/2", "--jobs", "1"]);
    let b = run("shard1", &["--shard", "1/2", "--jobs", "2"]);
    let indices = |dir: &std::path::Path| -> Vec<u64> {
        read_rows(dir).iter().map(|r| r["index"].as_u64().unwrap()).collect()
    };
    assert_eq!(indices(&a), [0, 2, 4]);
    assert_eq!(indices(&b), [1, 3, 5]);
    let merged = tmp.path().join("merged");
    let out = run_flowlab(&["report", a.to_str().unwrap(), b.to_str().unwrap(), "--out", merged.to_str().unwrap()]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("6 of 6 runs (0 failed) from 2 directories"),
        "{}",
        describe(&out)
    );
    assert_eq!(comparable(read_rows(&merged)), one);
    assert!(merged.join("index.html").exists());
}

#[test]
fn another_seed_gives_other_step_times() {
    let tmp = tempfile::tempdir().unwrap();
    let text = small_sweep("small", 10);
    let a = write_file(tmp.path(), "a.yaml", &text);
    let b = write_file(tmp.path(), "b.yaml", &text.replace("seed: 7", "seed: 8"));
    let (da, db) = (tmp.path().join("a"), tmp.path().join("b"));
    for (file, dir) in [(&a, &da), (&b, &db)] {
        let out = run_flowlab(&["run", file.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
        assert!(out.status.success(), "{}", describe(&out));
    }
    let (ra, rb) = (read_rows(&da), read_rows(&db));
    assert_ne!(ra[0]["seed"], rb[0]["seed"]);
    assert_ne!(ra[0]["series"]["step_time_s"], rb[0]["series"]["step_time_s"]);
}
