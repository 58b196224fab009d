//! Parameter-server layout: which parameters live on which PS task, and how
//! many elements a worker moves to and from each task in one step.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// An embedding table, sharded by row (row r on task r mod P); each step a
/// worker gathers `rows_per_step` random rows and pushes their gradients.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EmbeddingShard {
    pub rows: u64,
    pub dim: u64,
    pub rows_per_step: u64,
}

/// Parameters per PS task, in elements.
#[derive(Debug, Clone, PartialEq)]
pub struct PsLayout {
    /// Dense elements held by each task (fetched whole every step).
    pub dense: Vec<u64>,
    /// Tensors each task holds (the dense partition's share, each whole
    /// variable, the scalar): a runtime moves one message per tensor, so a
    /// per-message cost scales with these, not with the elements.
    pub tensors: Vec<u64>,
    pub embeddings: Vec<EmbeddingShard>,
    /// The task of each of `new`'s `variables`, in their order.
    pub var_task: Vec<usize>,
}

/// Part `k` of `total` split evenly over `parts`, the first parts taking
/// the remainder (how variables, tables and classes shard over PS tasks).
pub(crate) fn even_share(total: u64, k: usize, parts: usize) -> u64 {
    let p = parts.max(1) as u64;
    total / p + u64::from((k as u64) < total % p)
}

impl PsLayout {
    /// `dense_params` is one partitioned variable split evenly over the
    /// tasks; `variables` are whole variables placed greedily, largest first,
    /// on the least-loaded task (TensorFlow's greedy load balancing by size);
    /// `scalar_per_ps` puts one more element on every task.
    pub fn new(
        ps: usize,
        dense_params: u64,
        variables: &[u64],
        scalar_per_ps: bool,
        embeddings: Vec<EmbeddingShard>,
    ) -> PsLayout {
        let mut dense = vec![0u64; ps];
        let mut tensors = vec![0u64; ps];
        if ps == 0 {
            return PsLayout { dense, tensors, embeddings, var_task: Vec::new() };
        }
        for (k, (d, t)) in dense.iter_mut().zip(&mut tensors).enumerate() {
            let part = even_share(dense_params, k, ps);
            *d = part + u64::from(scalar_per_ps);
            *t = u64::from(part > 0) + u64::from(scalar_per_ps);
        }
        // largest first, ties in the given order
        let mut order: Vec<usize> = (0..variables.len()).collect();
        order.sort_by(|&a, &b| variables[b].cmp(&variables[a]).then(a.cmp(&b)));
        let mut var_task = vec![0; variables.len()];
        for i in order {
            // Least loaded; ties to the lowest index, so placement is deterministic.
            let k = (0..ps).min_by_key(|&k| (dense[k], k)).unwrap_or(0);
            dense[k] += variables[i];
            tensors[k] += 1;
            var_task[i] = k;
        }
        PsLayout { dense, tensors, embeddings, var_task }
    }

    pub fn tasks(&self) -> usize {
        self.dense.len()
    }

    /// Elements each task stores: its dense part plus its rows of every table.
    pub fn stored_elements(&self, k: usize) -> u64 {
        let sparse: u64 = self
            .embeddings
            .iter()
            .map(|e| even_share(e.rows, k, self.tasks()) * e.dim)
            .sum();
        self.dense[k] + sparse
    }

    /// Draws one step's sparse rows and writes, per task, the elements the
    /// worker gathers from it (and later pushes back).
    pub fn draw_sparse(&self, rng: &mut ChaCha8Rng, out: &mut [u64]) {
        out.fill(0);
        let p = self.tasks() as u64;
        if p == 0 {
            return;
        }
        for e in &self.embeddings {
            for _ in 0..e.rows_per_step {
                let row = rng.random_range(0..e.rows.max(1));
                out[(row % p) as usize] += e.dim;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::point_rng;

    #[test]
    fn dense_split_is_even_and_variables_balance_greedily() {
        let l = PsLayout::new(3, 10, &[], false, vec![]);
        assert_eq!(l.dense, vec![4, 3, 3]);
        let l = PsLayout::new(2, 0, &[5, 3, 3, 1], false, vec![]);
        // 5 -> t0, 3 -> t1, 3 -> t1 (3 < 5), 1 -> t0 (5 < 6).
        assert_eq!(l.dense, vec![6, 6]);
        assert_eq!(l.tensors, vec![2, 2]);
        let l = PsLayout::new(4, 0, &[], true, vec![]);
        assert_eq!(l.dense, vec![1, 1, 1, 1]);
        assert_eq!(l.tensors, vec![1, 1, 1, 1]);
        // the digits MLP's four variables over two tasks: the 64 x 128
        // weights alone on one, the other three on the other
        let l = PsLayout::new(2, 0, &[8192, 1280, 128, 10], false, vec![]);
        assert_eq!((l.dense.clone(), l.tensors.clone()), (vec![8192, 1418], vec![1, 3]));
    }

    #[test]
    fn sparse_rows_land_on_their_tasks() {
        let e = EmbeddingShard { rows: 1000, dim: 8, rows_per_step: 32 };
        let l = PsLayout::new(4, 0, &[], false, vec![e]);
        let mut out = vec![0; 4];
        l.draw_sparse(&mut point_rng(1, 0), &mut out);
        assert_eq!(out.iter().sum::<u64>(), 32 * 8);
        assert_eq!(l.stored_elements(0), 250 * 8);
    }
}
