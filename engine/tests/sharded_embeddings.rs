//! Sharded embeddings: a lookup over a table split into shards (row i in
//! shard i % P) equals indexing the whole table; sparse SGD changes exactly
//! the rows a batch used, by the dense gradient's amount; shards on two
//! devices are each gathered where they live; bad ids name the node.

use flowlab_engine::{DType, DeviceSet, Graph, Output, Session, SessionOptions, Tensor};

const ROWS: usize = 10;
const DIM: usize = 3;

fn table() -> Vec<f32> {
    (0..ROWS * DIM).map(|k| (k as f32 * 0.37).sin()).collect()
}

/// The table split into `p` shards, as variables (shard s on `devices[s % len]` when given).
fn shards(g: &Graph, p: usize, devices: &[&str]) -> Vec<Output> {
    let t = table();
    (0..p)
        .map(|s| {
            let rows: Vec<usize> = (0..ROWS).filter(|i| i % p == s).collect();
            let data: Vec<f32> = rows.iter().flat_map(|&i| t[i * DIM..(i + 1) * DIM].to_vec()).collect();
            let gs = if devices.is_empty() { g.clone() } else { g.device(devices[s % devices.len()]) };
            gs.variable(&format!("shard{s}"), gs.constant(Tensor::from_vec(data, [rows.len(), DIM]).unwrap()).unwrap()).unwrap()
        })
        .collect()
}

#[test]
fn a_lookup_over_shards_equals_indexing_the_whole_table() {
    let ids = vec![7i64, 0, 3, 3, 9, 4, 1];
    let t = table();
    let want: Vec<f32> = ids.iter().flat_map(|&i| t[i as usize * DIM..(i as usize + 1) * DIM].to_vec()).collect();
    for p in [1, 2, 3, 4] {
        let g = Graph::new();
        let sh = shards(&g, p, &[]);
        let idx = g.placeholder("ids", DType::I64, [ids.len() as i64]).unwrap();
        let refs: Vec<&Output> = sh.iter().collect();
        let e = g.embedding_lookup(&refs, &idx).unwrap();
        let s = Session::new(&g).unwrap();
        s.run(&[], &[], &[&g.global_variables_initializer().unwrap()]).unwrap();
        let r = s.run(&[(&idx, &Tensor::from_vec(ids.clone(), [ids.len()]).unwrap())], &[&e], &[]).unwrap();
        assert_eq!(r[0].dims(), &[ids.len(), DIM]);
        assert_eq!(r[0].to_vec::<f32>().unwrap(), want, "{p} shards");
    }
}

#[test]
fn sparse_sgd_moves_only_the_used_rows_by_the_dense_gradient() {
    // loss = sum(lookup(ids) * c); d loss / d row i = c summed over the positions of i.
    let ids = vec![5i64, 2, 5, 8];
    let lr = 0.5;
    let g = Graph::new();
    let sh = shards(&g, 3, &[]);
    let refs: Vec<&Output> = sh.iter().collect();
    let idx = g.constant(Tensor::from_vec(ids.clone(), [ids.len()]).unwrap()).unwrap();
    let e = g.embedding_lookup(&refs, &idx).unwrap();
    let c = g.constant(Tensor::from_vec((0..ids.len() * DIM).map(|k| k as f32 - 4.0).collect::<Vec<_>>(), [ids.len(), DIM]).unwrap()).unwrap();
    let loss = g.reduce_sum(g.mul(&e, &c).unwrap(), &[0, 1], false).unwrap();
    let de = g.gradients(&[&loss], &[&e]).unwrap()[0].clone().unwrap();
    let step = g.embedding_sgd(&refs, &idx, &de, lr).unwrap();
    // The dense gradient through DynamicStitch and Gather, for comparison.
    let dense = g.gradients(&[&loss], &refs).unwrap();
    let s = Session::new(&g).unwrap();
    s.run(&[], &[], &[&g.global_variables_initializer().unwrap()]).unwrap();
    let dense: Vec<Vec<f32>> = dense.iter().map(|d| s.run(&[], &[d.as_ref().unwrap()], &[]).unwrap()[0].to_vec::<f32>().unwrap()).collect();
    s.run(&[], &[], &[&step]).unwrap();
    let cv: Vec<f32> = (0..ids.len() * DIM).map(|k| k as f32 - 4.0).collect();
    let mut want = table();
    for (k, &i) in ids.iter().enumerate() {
        for d in 0..DIM {
            want[i as usize * DIM + d] -= lr as f32 * cv[k * DIM + d];
        }
    }
    let t = table();
    for (sidx, name) in ["shard0", "shard1", "shard2"].iter().enumerate() {
        let got = s.variable_value(name).unwrap().to_vec::<f32>().unwrap();
        for (r, i) in (0..ROWS).filter(|i| i % 3 == sidx).enumerate() {
            let row = &got[r * DIM..(r + 1) * DIM];
            let drow = &dense[sidx][r * DIM..(r + 1) * DIM];
            for d in 0..DIM {
                // Sparse step = -lr x dense gradient (zero for unused rows).
                assert!((t[i * DIM + d] - lr as f32 * drow[d] - row[d]).abs() < 1e-6, "row {i}");
            }
            if ids.contains(&(i as i64)) {
                assert_eq!(row, &want[i * DIM..(i + 1) * DIM], "row {i}");
            } else {
                // Untouched rows keep their exact bits.
                assert_eq!(row, &t[i * DIM..(i + 1) * DIM], "row {i} changed");
            }
        }
    }
}

#[test]
fn each_shard_is_gathered_on_its_own_device() {
    let g = Graph::new();
    let sh = shards(&g, 2, &["/cpu:0", "/cpu:1"]);
    let refs: Vec<&Output> = sh.iter().collect();
    let idx = g.placeholder("ids", DType::I64, [4]).unwrap();
    let e = g.embedding_lookup(&refs, &idx).unwrap();
    let s = Session::with_options(&g, SessionOptions { threads: 1, devices: DeviceSet::local_cpus(2), ..Default::default() }).unwrap();
    s.run(&[], &[], &[&g.global_variables_initializer().unwrap()]).unwrap();
    let (r, stats) = s.run_traced(&[(&idx, &Tensor::from_vec(vec![1i64, 2, 9, 6], [4]).unwrap())], &[&e], &[]).unwrap();
    let t = table();
    let want: Vec<f32> = [1, 2, 9, 6].iter().flat_map(|&i: &usize| t[i * DIM..(i + 1) * DIM].to_vec()).collect();
    assert_eq!(r[0].to_vec::<f32>().unwrap(), want);
    let gathers: Vec<&str> = stats.nodes.iter().filter(|n| n.op == "Gather").map(|n| n.device.as_str()).collect();
    assert!(gathers.iter().any(|d| d.ends_with("CPU:0")) && gathers.iter().any(|d| d.ends_with("CPU:1")), "{gathers:?}");
}

#[test]
fn an_id_outside_the_table_is_an_error_naming_the_node() {
    let g = Graph::new();
    let sh = shards(&g, 2, &[]);
    let refs: Vec<&Output> = sh.iter().collect();
    let idx = g.placeholder("ids", DType::I64, [2]).unwrap();
    let e = g.embedding_lookup(&refs, &idx).unwrap();
    let s = Session::new(&g).unwrap();
    s.run(&[], &[], &[&g.global_variables_initializer().unwrap()]).unwrap();
    for bad in [vec![1i64, 10], vec![-3i64, 0]] {
        let err = s.run(&[(&idx, &Tensor::from_vec(bad.clone(), [2]).unwrap())], &[&e], &[]).unwrap_err().to_string();
        assert!((err.contains("Gather") || err.contains("ModPartition")) && (err.contains("out of range") || err.contains("negative")), "{bad:?}: {err}");
    }
}
