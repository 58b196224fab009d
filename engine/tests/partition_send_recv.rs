//! Partitioning a placed graph: node sets per device, one Recv per tensor per
//! destination, control edges carried, unique rendezvous keys, formats.

use flowlab_engine::{
    AttrValue, DefaultPlacer, DeviceName, DeviceSet, Graph, Output, PartitionOptions, Placer, Tensor, partition, partition_with,
};
use flowlab_hw::CommFormat;
use std::collections::HashSet;

fn names(g: &Graph) -> Vec<String> {
    g.nodes().into_iter().map(|n| n.name).collect()
}

/// a, b on CPU:0; c = a + b and d = a * c on CPU:1 (a used twice there);
/// e = -c back on CPU:0; f on CPU:1 runs after b (control edge).
fn small() -> (Graph, Vec<Output>) {
    let g = Graph::new();
    let g0 = g.device("/cpu:0");
    let g1 = g.device("/cpu:1");
    let a = g0.op("Const").name("a").attr("value", AttrValue::Tensor(flowlab_engine::TensorValue::from_tensor(&Tensor::scalar(2f32)).unwrap())).build().unwrap();
    let b = g0.op("Const").name("b").attr("value", AttrValue::Tensor(flowlab_engine::TensorValue::from_tensor(&Tensor::scalar(3f32)).unwrap())).build().unwrap();
    let c = g1.op("Add").name("c").input(&a).input(&b).build().unwrap();
    let d = g1.op("Mul").name("d").input(&a).input(&c).build().unwrap();
    let e = g0.op("Neg").name("e").input(&c).build().unwrap();
    let f = g1.op("NoOp").name("f").control_input(&b).build().unwrap();
    (g, vec![a, b, c, d, e, f])
}

#[test]
fn node_sets_recvs_control_edges_and_keys() {
    let (g, _) = small();
    let p = DefaultPlacer.place(&g, &DeviceSet::local_cpus(2)).unwrap();
    let parts = partition(&g, &p).unwrap();
    assert_eq!(parts.len(), 2);
    let cpu0 = "/job:localhost/replica:0/task:0/device:CPU:0";
    let cpu1 = "/job:localhost/replica:0/task:0/device:CPU:1";
    let t0 = "job_localhost_replica_0_task_0_device_CPU_0";
    let t1 = "job_localhost_replica_0_task_0_device_CPU_1";
    assert_eq!(parts[0].device.to_string(), cpu0);
    assert_eq!(parts[1].device.to_string(), cpu1);
    assert_eq!(parts[0].nodes, vec![0, 1, 4]);
    assert_eq!(parts[1].nodes, vec![2, 3, 5]);
    assert_eq!(
        names(&parts[0].graph),
        vec![
            "a".to_string(),
            "b".into(),
            format!("_send/a_0/to_{t1}"),
            format!("_send/b_0/to_{t1}"),
            format!("_recv/c_0/from_{t1}"),
            "e".into(),
            format!("_ctrl/b/to_{t1}"),
            format!("_send/b_control/to_{t1}"),
        ]
    );
    assert_eq!(
        names(&parts[1].graph),
        vec![
            format!("_recv/a_0/from_{t0}"),
            format!("_recv/b_0/from_{t0}"),
            "c".into(),
            "d".into(),
            format!("_send/c_0/to_{t0}"),
            format!("_recv/b_control/from_{t0}"),
            "f".into(),
        ]
    );
    // One Recv of a on CPU:1 although c and d both read it.
    let n1 = parts[1].graph.nodes();
    let recv_a = n1.iter().position(|n| n.name == format!("_recv/a_0/from_{t0}")).unwrap();
    let c = n1.iter().find(|n| n.name == "c").unwrap();
    let d = n1.iter().find(|n| n.name == "d").unwrap();
    assert_eq!(c.inputs[0], (recv_a, 0));
    assert_eq!(d.inputs[0], (recv_a, 0));
    assert_eq!(n1.iter().filter(|n| n.op == "Recv").count(), 3);
    // The control edge b -> f: f waits for the control Recv; on CPU:0 the
    // control Const runs after b.
    let f = n1.iter().find(|n| n.name == "f").unwrap();
    let ctrl_recv = n1.iter().position(|n| n.name == format!("_recv/b_control/from_{t0}")).unwrap();
    assert_eq!(f.control_inputs, vec![ctrl_recv]);
    let n0 = parts[0].graph.nodes();
    let ctrl = n0.iter().find(|n| n.name == format!("_ctrl/b/to_{t1}")).unwrap();
    assert_eq!(ctrl.control_inputs, vec![1]);
    // Every node carries its device; Send/Recv attrs name both devices.
    assert!(n1.iter().all(|n| n.device == cpu1));
    assert_eq!(n1[recv_a].attrs.get("send_device"), Some(&AttrValue::Str(cpu0.into())));
    assert_eq!(n1[recv_a].attrs.get("edge"), Some(&AttrValue::Str("a:0".into())));
    // Keys: unique, and each send matches exactly one recv.
    let sends: Vec<_> = parts.iter().flat_map(|p| p.sends.iter().map(|t| t.key.clone())).collect();
    let recvs: Vec<_> = parts.iter().flat_map(|p| p.recvs.iter().map(|t| t.key.clone())).collect();
    assert_eq!(sends.len(), 4);
    assert_eq!(sends.iter().collect::<HashSet<_>>().len(), 4);
    assert_eq!(sends.iter().collect::<HashSet<_>>(), recvs.iter().collect::<HashSet<_>>());
    let edges: HashSet<_> = sends.iter().map(|k| k.edge.as_str()).collect();
    assert_eq!(edges, ["a:0", "b:0", "c:0", "b:control"].into_iter().collect::<HashSet<_>>());
    assert!(parts[1].recvs.iter().any(|t| t.control && t.key.edge == "b:control"));
}

#[test]
fn formats_per_graph_and_per_edge() {
    let (g, _) = small();
    let p = DefaultPlacer.place(&g, &DeviceSet::local_cpus(2)).unwrap();
    let mut opts = PartitionOptions::in_format(CommFormat::Bf16);
    opts.edge_formats.insert("c:0".into(), CommFormat::Int8 { block: Some(64) });
    let parts = partition_with(&g, &p, &opts).unwrap();
    let fmt = |edge: &str| parts.iter().flat_map(|p| &p.sends).find(|t| t.key.edge == edge).unwrap().format;
    assert_eq!(fmt("a:0"), CommFormat::Bf16);
    assert_eq!(fmt("c:0"), CommFormat::Int8 { block: Some(64) });
    let recv_c = parts[0].graph.nodes().into_iter().find(|n| n.op == "Recv").unwrap();
    assert_eq!(recv_c.attrs.get("comm_format"), Some(&AttrValue::Str("int8:64".into())));
}

#[test]
fn variables_stay_registered_in_their_partition() {
    let g = Graph::new();
    let init = g.constant(Tensor::scalar(1f32)).unwrap();
    let w = g.device("/cpu:1").variable("w", init).unwrap();
    g.neg(&w).unwrap();
    let p = DefaultPlacer.place(&g, &DeviceSet::local_cpus(2)).unwrap();
    let parts = partition(&g, &p).unwrap();
    let on1 = parts.iter().find(|p| p.device == DeviceName::full("localhost", 0, 0, "CPU", 1)).unwrap();
    assert_eq!(on1.graph.variables().iter().map(|v| v.name()).collect::<Vec<_>>(), vec!["w"]);
    assert_eq!(on1.graph.initializers().iter().map(|v| v.name()).collect::<Vec<_>>(), vec!["w/Assign"]);
}

#[test]
fn incomplete_placement_is_an_error_naming_the_node() {
    let (g, _) = small();
    let p = flowlab_engine::Placement::from_devices(vec![DeviceName::full("localhost", 0, 0, "CPU", 0)]);
    let e = partition(&g, &p).unwrap_err().to_string();
    assert_eq!(e, "cannot place node 'b': the placement covers 1 of the graph's 6 nodes");
    let p = flowlab_engine::Placement::from_devices(vec![DeviceName::parse("/cpu:0").unwrap(); 6]);
    let e = partition(&g, &p).unwrap_err().to_string();
    assert_eq!(e, "cannot place node 'a': placed on '/device:CPU:0', which is not a full device name");
}
