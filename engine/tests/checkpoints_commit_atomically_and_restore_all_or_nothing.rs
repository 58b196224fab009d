//! Checkpoints as a user depends on them: a failed or interrupted save
//! never costs the previous checkpoint, a restore either applies the whole
//! checkpoint or changes nothing, and every refusal names the file and the
//! tensor.

use flowlab_engine::checkpoint::{self, CheckpointManager};
use flowlab_engine::{Graph, Output, Result, Session, SessionOptions, Tensor};
use std::collections::BTreeMap;

fn sess(g: &Graph) -> Session {
    Session::with_options(g, SessionOptions { threads: 1, ..Default::default() }).unwrap()
}

/// A graph with variables `w` (f32 [2, 3]) and `b` (f32 [3]), initialized.
fn model(w0: f32) -> Result<(Graph, Session, Output, Output)> {
    let g = Graph::new();
    let w = g.variable("w", g.constant(Tensor::from_vec(vec![w0; 6], [2, 3])?)?)?;
    let b = g.variable("b", g.constant(Tensor::from_vec(vec![w0 + 1.0; 3], [3])?)?)?;
    let s = sess(&g);
    s.run(&[], &[], &[&g.global_variables_initializer()?])?;
    Ok((g, s, w, b))
}

fn value(s: &Session, name: &str) -> Vec<f32> {
    s.variable_value(name).unwrap().to_vec::<f32>().unwrap()
}

#[test]
fn a_restore_that_does_not_fit_the_graph_changes_nothing_and_names_file_and_tensor() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    // A checkpoint of a model with only `w`.
    let g1 = Graph::new();
    g1.variable("w", g1.constant(Tensor::from_vec(vec![5f32; 6], [2, 3])?)?)?;
    let s1 = sess(&g1);
    s1.run(&[], &[], &[&g1.global_variables_initializer()?])?;
    let only_w = dir.path().join("only_w.safetensors");
    checkpoint::save(&s1, &only_w)?;

    let (_, s, _, _) = model(1.0)?;
    let e = checkpoint::restore(&s, &only_w).unwrap_err().to_string();
    assert_eq!(e, format!("{}: variable 'b' (f32[3]) is not in the checkpoint", only_w.display()));
    // `w` sorts after `b` but was not restored either: nothing changed.
    assert_eq!(value(&s, "w"), vec![1.0; 6]);

    // A checkpoint whose `w` is transposed.
    let g2 = Graph::new();
    g2.variable("w", g2.constant(Tensor::from_vec(vec![7f32; 6], [3, 2])?)?)?;
    g2.variable("b", g2.constant(Tensor::from_vec(vec![7f32; 3], [3])?)?)?;
    let s2 = sess(&g2);
    s2.run(&[], &[], &[&g2.global_variables_initializer()?])?;
    let transposed = dir.path().join("t.safetensors");
    checkpoint::save(&s2, &transposed)?;
    let e = checkpoint::restore(&s, &transposed).unwrap_err().to_string();
    assert_eq!(e, format!("{}: tensor 'w' is f32[3, 2], but the graph's variable is f32[2, 3]", transposed.display()));
    assert_eq!(value(&s, "b"), vec![2.0; 3], "b fits but must not be restored alone");

    // A checkpoint with a tensor the graph lacks.
    let g3 = Graph::new();
    g3.variable("w", g3.constant(Tensor::from_vec(vec![7f32; 6], [2, 3])?)?)?;
    g3.variable("b", g3.constant(Tensor::from_vec(vec![7f32; 3], [3])?)?)?;
    g3.variable("extra", g3.constant(Tensor::scalar(1f32))?)?;
    let s3 = sess(&g3);
    s3.run(&[], &[], &[&g3.global_variables_initializer()?])?;
    let more = dir.path().join("more.safetensors");
    checkpoint::save(&s3, &more)?;
    let e = checkpoint::restore(&s, &more).unwrap_err().to_string();
    assert!(e.ends_with("tensor 'extra' is not a variable of this graph (a checkpoint of another model?)"), "{e}");
    assert_eq!(value(&s, "w"), vec![1.0; 6]);
    Ok(())
}

#[test]
fn truncated_and_corrupt_files_are_refused_with_the_file_named() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.safetensors");
    let (_, s, _, _) = model(1.0)?;
    checkpoint::save(&s, &path)?;
    let good = std::fs::read(&path).unwrap();
    for (what, bytes) in [
        ("truncated data", good[..good.len() - 4].to_vec()),
        ("truncated header length", good[..5].to_vec()),
        ("empty", Vec::new()),
        ("garbage header", {
            let mut b = good.clone();
            b[8] = b'#';
            b
        }),
    ] {
        std::fs::write(&path, &bytes).unwrap();
        let e = checkpoint::restore(&s, &path).unwrap_err().to_string();
        assert!(e.starts_with(&format!("{}: not a valid safetensors file", path.display())), "{what}: {e}");
    }
    assert_eq!(value(&s, "w"), vec![1.0; 6]);
    Ok(())
}

#[test]
fn a_failed_save_keeps_the_previous_checkpoint_and_restore_skips_what_it_cannot_read() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let m = CheckpointManager::new(dir.path(), 3)?;
    let (g, s, w, _) = model(1.0)?;
    m.save(&s, 1, &BTreeMap::from([("step".to_string(), "1".to_string())]))?;
    // The save of step 2 cannot be committed: a non-empty directory stands
    // where its file would be renamed to.
    std::fs::create_dir_all(m.path(2).join("in-the-way")).unwrap();
    s.run(&[], &[], &[&g.assign(&w, g.constant(Tensor::from_vec(vec![9f32; 6], [2, 3])?)?)?])?;
    assert!(m.save(&s, 2, &BTreeMap::new()).is_err());
    // Only the committed checkpoint and the obstacle: no temporary files left.
    let names: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
    assert_eq!(names.len(), 2, "{names:?}");

    let (_, fresh, _, _) = model(0.0)?;
    let r = m.restore_latest(&fresh)?.expect("a checkpoint");
    assert_eq!(r.step, 1);
    assert_eq!(r.info.metadata["step"], "1");
    assert_eq!(r.skipped.len(), 1, "the unreadable step 2 is reported: {:?}", r.skipped);
    assert!(r.skipped[0].starts_with(&m.path(2).display().to_string()), "{:?}", r.skipped);
    assert_eq!(value(&fresh, "w"), vec![1.0; 6]);
    Ok(())
}

#[test]
fn the_newest_intact_checkpoint_wins_and_old_ones_are_pruned() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let m = CheckpointManager::new(dir.path(), 2)?;
    let (g, s, w, _) = model(1.0)?;
    for step in 1..=4u64 {
        s.run(&[], &[], &[&g.assign(&w, g.constant(Tensor::from_vec(vec![step as f32; 6], [2, 3])?)?)?])?;
        m.save(&s, step, &BTreeMap::new())?;
    }
    assert_eq!(m.steps()?, vec![3, 4], "keep 2");
    // Truncate the newest: the previous one is used, and the reason given.
    let newest = std::fs::read(m.path(4)).unwrap();
    std::fs::write(m.path(4), &newest[..newest.len() / 2]).unwrap();
    let (_, fresh, _, _) = model(0.0)?;
    let r = m.restore_latest(&fresh)?.expect("a checkpoint");
    assert_eq!((r.step, value(&fresh, "w")), (3, vec![3.0; 6]));
    assert!(r.skipped[0].contains("not a valid safetensors file"), "{:?}", r.skipped);
    // An empty directory has nothing to restore.
    let empty = tempfile::tempdir().unwrap();
    assert!(CheckpointManager::new(empty.path(), 1)?.restore_latest(&fresh)?.is_none());
    Ok(())
}
