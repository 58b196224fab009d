//! The floors under a remote Send/Recv on this host, beside flowlab's own
//! `RecvTensor`, in rounds (each round measures every row once, so load
//! changes hit all rows alike): a bare TCP round trip of 64 bytes between two
//! threads, a gRPC unary echo of 64 bytes on the tasks' own runtime set-up,
//! and a 4-float tensor's `RecvTensor` between two task servers.
//!
//! `cargo run --release -p flowlab-runtime --example rpc_floor -- [ROUNDS] [ITERS]`
//! (defaults 5 rounds of 7 batches of 500 calls). Prints each row's median
//! per round and, last, each row's range over the rounds, in microseconds.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
    let iters: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(500);
    let mut all: Vec<(String, Vec<f64>)> = Vec::new();
    for round in 0..rounds {
        let rows = flowlab_runtime::bench_floors(7, iters)?;
        for r in &rows {
            println!("round {round} {:<32} {:>9.1} us", r.name, r.median_us);
            match all.iter_mut().find(|(n, _)| *n == r.name) {
                Some((_, v)) => v.push(r.median_us),
                None => all.push((r.name.clone(), vec![r.median_us])),
            }
        }
    }
    for (name, v) in &all {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        println!("range {name:<32} {lo:>9.1} - {hi:.1} us over {} rounds", v.len());
    }
    Ok(())
}
