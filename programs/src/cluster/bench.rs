//! `flowlab bench cluster`'s training-step rows: synchronous steps of the
//! digits MLPs over a PS task and 1-4 worker tasks on loopback (servers on
//! threads of this process), beside the same step in one process over two
//! devices, and in each narrower communication format.

use flowlab_engine::{DeviceSet, Graph, Output, PartitionOptions, Session, SessionOptions, Tensor};
use flowlab_hw::CommFormat;
use flowlab_runtime::{ClusterBenchRecord, ClusterSpec, Job, Master, MasterOptions, Result, TaskId, TaskServer};

use crate::train::{ModelKind, TrainConfig, build_sharded, local_cpu, model_features};

/// The rows, after the transport's (`flowlab_runtime::bench_cluster`);
/// `quick` does fewer repetitions.
pub fn bench_steps(quick: bool) -> Result<Vec<ClusterBenchRecord>> {
    // steps per batch: a step is tens of transfers
    let (reps, iters) = if quick { (3, 10) } else { (15, 100) };
    let mut rows = Vec::new();
    // synchronous training steps of the digits MLP, batch 64 split over the workers
    let digits = TrainConfig { batch: 64, ..TrainConfig::new(ModelKind::Mlp) };
    for workers in [1u32, 2, 4] {
        rows.push(sync_step(&format!("mlp_sync_step_b64_{workers}workers"), &digits, workers, reps, iters)?);
    }
    // The 784-512-512-10 MLP, batch 64 of synthetic examples, variables on
    // a parameter device: one worker's synchronous step in one process over
    // two devices (the engine's partitioner, in-process Send/Recv, one
    // thread per device as a task has), then over two tasks (gRPC on
    // loopback), then with 2 and 4 workers sharing the batch. The first two
    // give the cluster's overhead over the in-process step.
    let wide = TrainConfig { batch: 64, ..TrainConfig::new(ModelKind::Mlp784) };
    {
        let g = Graph::new();
        let sg = build_sharded(&g, &wide, model_features(wide.model), &[local_cpu(0)], &[local_cpu(1)])?;
        let sess = Session::with_options(&g, SessionOptions { threads: 1, devices: DeviceSet::local_cpus(2), ..Default::default() })?;
        sess.run(&[], &[], &[&sg.init])?;
        let (x, y) = synthetic_batch(wide.batch, model_features(wide.model))?;
        let feeds = [(&sg.xs[0], &x), (&sg.ys[0], &y)];
        rows.push(ClusterBenchRecord::measure("mlp784_step_b64_in_process_2devices", reps, iters, |_| {
            Ok(sess.run(&feeds, &[&sg.loss], &[&sg.train_op]).map(drop)?)
        })?);
    }
    for workers in [1u32, 2, 4] {
        rows.push(sync_step(&format!("mlp784_sync_step_b64_{workers}workers"), &wide, workers, reps, iters)?);
    }
    // the same at 2 workers in each narrower format: the bytes per step
    // and what encoding and decoding them costs the step
    for (name, comm) in [("f16", CommFormat::F16), ("bf16", CommFormat::Bf16), ("int8", CommFormat::Int8 { block: None })] {
        rows.push(sync_step(&format!("mlp784_sync_step_b64_2workers_{name}"), &TrainConfig { comm, ..wide.clone() }, 2, reps, iters)?);
    }
    Ok(rows)
}

/// `n` synthetic examples of `features` values in [0, 1] and their labels.
fn synthetic_batch(n: usize, features: usize) -> Result<(Tensor, Tensor)> {
    let x = Tensor::from_vec((0..n * features).map(|i| (i % 17) as f32 / 16.0).collect::<Vec<f32>>(), vec![n, features])?;
    let y = Tensor::from_vec((0..n).map(|i| (i % 10) as i64).collect::<Vec<i64>>(), vec![n])?;
    Ok((x, y))
}

/// The row `name`: one synchronous step of `cfg`'s model over a PS task
/// and `workers` worker tasks on loopback, `cfg.batch` split evenly over
/// the workers, and the data bytes the tasks sent each other per step.
fn sync_step(name: &str, cfg: &TrainConfig, workers: u32, reps: usize, iters: usize) -> Result<ClusterBenchRecord> {
    let spec = ClusterSpec::loopback(1, workers)?;
    let _servers = TaskServer::start_all(&spec)?;
    let ps = TaskId::new(Job::Ps, 0);
    let g = Graph::new();
    let devices: Vec<_> = (0..workers).map(|i| TaskId::new(Job::Worker, i).device()).collect();
    let features = model_features(cfg.model);
    let sg = build_sharded(&g, cfg, features, &[ps.device()], &devices)?;
    let options = MasterOptions { partition: PartitionOptions::in_format(cfg.comm), ..Default::default() };
    let mut master = Master::connect(&spec, options)?;
    master.register(&g)?;
    master.run(&[], &[], &[&sg.init])?;
    let (x, y) = synthetic_batch(cfg.batch / workers as usize, features)?;
    let feeds: Vec<(&Output, &Tensor)> = sg.xs.iter().zip(&sg.ys).flat_map(|(xi, yi)| [(xi, &x), (yi, &y)]).collect();
    let before = master.traffic().bytes;
    let mut row = ClusterBenchRecord::measure(name, reps, iters, |_| master.run(&feeds, &[&sg.loss], &[&sg.train_op]).map(drop))?;
    // a warm-up batch and `reps` timed ones
    let steps = ((reps + 1) * iters).max(1) as f64;
    row.bytes_per_step = Some(master.traffic().bytes.saturating_sub(before) as f64 / steps);
    Ok(row)
}

#[cfg(test)]
mod tests {
    /// Every row, in order, and the bytes a step moves: every variable out
    /// to each worker and its gradient back, and with several workers each
    /// one's loss to ps:0. By hand, 64*128 + 128 + 128*10 + 10 = 9,610
    /// parameters in the digits MLP, 784*512 + 512 + 512*512 + 512 +
    /// 512*10 + 10 = 669,706 in the wide one.
    #[test]
    fn every_step_row_is_measured_and_moves_its_variables() {
        let rows = super::bench_steps(true).unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "mlp_sync_step_b64_1workers",
                "mlp_sync_step_b64_2workers",
                "mlp_sync_step_b64_4workers",
                "mlp784_step_b64_in_process_2devices",
                "mlp784_sync_step_b64_1workers",
                "mlp784_sync_step_b64_2workers",
                "mlp784_sync_step_b64_4workers",
                "mlp784_sync_step_b64_2workers_f16",
                "mlp784_sync_step_b64_2workers_bf16",
                "mlp784_sync_step_b64_2workers_int8"
            ]
        );
        for r in &rows {
            assert!(r.median_us > 0.0 && r.median_us < 1e6 && (r.per_second * r.median_us - 1e6).abs() < 1.0, "{r:?}");
        }
        let bytes = |name: &str| rows.iter().find(|r| r.name == name).and_then(|r| r.bytes_per_step).unwrap();
        let moved = |params: f64, workers: f64, width: f64| 2.0 * workers * params * width + if workers > 1.0 { workers * width } else { 0.0 };
        for (w, name) in [(1.0, "1workers"), (2.0, "2workers"), (4.0, "4workers")] {
            assert_eq!(bytes(&format!("mlp_sync_step_b64_{name}")), moved(9_610.0, w, 4.0), "{name}");
            assert_eq!(bytes(&format!("mlp784_sync_step_b64_{name}")), moved(669_706.0, w, 4.0), "{name}");
        }
        assert_eq!(bytes("mlp784_sync_step_b64_2workers_f16"), moved(669_706.0, 2.0, 2.0));
        assert_eq!(bytes("mlp784_sync_step_b64_2workers_bf16"), moved(669_706.0, 2.0, 2.0));
        // int8: a byte per value, and a little for the scales
        let int8 = bytes("mlp784_sync_step_b64_2workers_int8");
        assert!(int8 >= moved(669_706.0, 2.0, 1.0) && int8 < 1.05 * moved(669_706.0, 2.0, 1.0), "{int8}");
        assert!(rows[3].bytes_per_step.is_none(), "the in-process step has no tasks: {rows:?}");
    }
}
