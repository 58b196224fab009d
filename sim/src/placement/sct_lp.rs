//! m-SCT's favourite children as Baechi defines them: the LP relaxation of
//! the small-communication-times schedule (Hanen and Munier; Baechi's
//! `solve_favorite_child_lp`, `placer/m_sct.py`).
//!
//! Variables: per edge (i, j) `x_ij` in [0, 1] (0: j is i's favourite child
//! and the edge costs no transfer), per node a start time `s_i >= 0`, and
//! the makespan `w`. Minimise `w` subject to
//! * `s_i + p_i + c_ij x_ij <= s_j` for every edge,
//! * `sum_j x_ij >= outdeg(i) - 1`: at most one favourite child,
//! * `sum_i x_ij >= indeg(j) - 1`: at most one favourite parent,
//! * `s_i + p_i <= w`.
//!
//! `x_ij < 0.5` makes j the favourite child of i (the constraints allow at
//! most one such child per node and one such parent per node). Baechi
//! solves it with an interior-point method (MOSEK); here Clarabel's, which
//! gives the same optimum (the LP is degenerate: other optimal vertices
//! would round differently). `p_i` is the node's time on its fastest
//! device, `c_ij` the edge's bytes on the cheapest link between two devices.
//! Parallel edges between one pair (several outputs) are one edge of their
//! summed bytes, as in Baechi's graph.

use super::problem::Problem;
use crate::error::SimError;
use clarabel::algebra::CscMatrix;
use clarabel::solver::{DefaultSettingsBuilder, DefaultSolver, IPSolver, NonnegativeConeT, SolverStatus};
use std::collections::HashMap;

/// The favourite child of each node (`u32::MAX`: none), from the LP.
pub(crate) fn favourite_children(p: &Problem) -> Result<Vec<u32>, SimError> {
    let n = p.n;
    // One edge per (producer, consumer) pair, bytes summed.
    let mut index: HashMap<(u32, u32), usize> = HashMap::new();
    let mut edges: Vec<(u32, u32, u64)> = Vec::new();
    for j in 0..n {
        for (i, bytes) in p.in_edges(j) {
            let e = *index.entry((i as u32, j as u32)).or_insert_with(|| {
                edges.push((i as u32, j as u32, 0));
                edges.len() - 1
            });
            edges[e].2 += bytes;
        }
    }
    let fastest = |i: usize| (0..p.ndev).map(|d| p.sim.op_ps(i, d)).min().unwrap_or(0) as f64;
    let cheapest = |bytes: u64| {
        let mut best = u64::MAX;
        for a in 0..p.ndev {
            for b in (0..p.ndev).filter(|&b| b != a) {
                best = best.min(p.sim.transfer_ps(a, b, bytes));
            }
        }
        if best == u64::MAX { 0.0 } else { best as f64 }
    };
    // Picoseconds scaled to microseconds keep the interior point well
    // conditioned.
    let us = |ps: f64| ps * 1e-6;
    let proc: Vec<f64> = (0..n).map(|i| us(fastest(i))).collect();
    let comm: Vec<f64> = edges.iter().map(|&(_, _, b)| us(cheapest(b))).collect();

    let ne = edges.len();
    let (x, s, w) = (0usize, ne, ne + n);
    let vars = ne + n + 1;
    // Rows of A x <= b (Clarabel: A x + slack = b, slack >= 0).
    let mut rows: Vec<Vec<(usize, f64)>> = Vec::new();
    let mut rhs: Vec<f64> = Vec::new();
    for e in 0..ne {
        rows.push(vec![(x + e, 1.0)]);
        rhs.push(1.0);
        rows.push(vec![(x + e, -1.0)]);
        rhs.push(0.0);
    }
    for i in 0..n {
        rows.push(vec![(s + i, -1.0)]);
        rhs.push(0.0);
    }
    let mut outs: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut ins: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (e, &(i, j, _)) in edges.iter().enumerate() {
        let (i, j) = (i as usize, j as usize);
        rows.push(vec![(s + i, 1.0), (s + j, -1.0), (x + e, comm[e])]);
        rhs.push(-proc[i]);
        outs[i].push(e);
        ins[j].push(e);
    }
    for list in outs.iter().chain(&ins).filter(|l| !l.is_empty()) {
        rows.push(list.iter().map(|&e| (x + e, -1.0)).collect());
        rhs.push(1.0 - list.len() as f64);
    }
    for (i, &pi) in proc.iter().enumerate() {
        rows.push(vec![(s + i, 1.0), (w, -1.0)]);
        rhs.push(-pi);
    }
    let a = csc(rows.len(), vars, &rows);
    let mut q = vec![0.0; vars];
    q[w] = 1.0;
    let settings = DefaultSettingsBuilder::default()
        .verbose(false)
        .build()
        .map_err(|e| SimError::param("placer", format!("m_sct LP settings: {e:?}")))?;
    let cones = [NonnegativeConeT(rhs.len())];
    let mut solver = DefaultSolver::new(&CscMatrix::zeros((vars, vars)), &q, &a, &rhs, &cones, settings)
        .map_err(|e| SimError::param("placer", format!("m_sct LP: {e:?}")))?;
    solver.solve();
    if !matches!(solver.solution.status, SolverStatus::Solved | SolverStatus::AlmostSolved) {
        return Err(SimError::param("placer", format!("m_sct's favourite-child LP ended {:?}", solver.solution.status)));
    }
    let sol = &solver.solution.x;
    let mut fav = vec![u32::MAX; n];
    for (e, &(i, j, _)) in edges.iter().enumerate() {
        if sol[x + e] < 0.5 {
            fav[i as usize] = j;
        }
    }
    Ok(fav)
}

/// A compressed-column matrix of `m` rows from row lists.
fn csc(m: usize, n: usize, rows: &[Vec<(usize, f64)>]) -> CscMatrix<f64> {
    let mut count = vec![0usize; n + 1];
    for r in rows {
        for &(c, _) in r {
            count[c + 1] += 1;
        }
    }
    for c in 0..n {
        count[c + 1] += count[c];
    }
    let colptr = count.clone();
    let mut next = count;
    let nnz = colptr[n];
    let (mut rowval, mut nzval) = (vec![0usize; nnz], vec![0f64; nnz]);
    for (ri, r) in rows.iter().enumerate() {
        for &(c, v) in r {
            rowval[next[c]] = ri;
            nzval[next[c]] = v;
            next[c] += 1;
        }
    }
    CscMatrix::new(m, n, colptr, rowval, nzval)
}
