//! Tiled 2-D transposition, the inner loop of the Transpose op and of
//! products whose right operand is stored transposed.

/// Side of the square blocks a transposition copies through a small local
/// buffer: each block reads 8 contiguous elements from each of 8 source
/// rows and writes 8 contiguous elements to each of 8 destination rows, so
/// only 8 cache lines are live per side even at power-of-two strides, where
/// column-by-column reads fall into one or two cache sets and evict each
/// other.
const BLOCK: usize = 8;

/// `dst[a * dst_stride + b] = src[a + b * src_stride]` for `a < rows`,
/// `b < cols`: the `cols x rows` block of `src` (rows `src_stride` apart)
/// transposed into the `rows x cols` block of `dst` (rows `dst_stride`
/// apart).
pub(crate) fn transpose_block<T: Copy>(src: &[T], src_stride: usize, dst: &mut [T], dst_stride: usize, rows: usize, cols: usize) {
    let (full_a, full_b) = (rows - rows % BLOCK, cols - cols % BLOCK);
    for b0 in (0..full_b).step_by(BLOCK) {
        for a0 in (0..full_a).step_by(BLOCK) {
            let mut buf = [[src[0]; BLOCK]; BLOCK];
            for (j, row) in buf.iter_mut().enumerate() {
                let s = (b0 + j) * src_stride + a0;
                row.copy_from_slice(&src[s..s + BLOCK]);
            }
            for i in 0..BLOCK {
                let d = (a0 + i) * dst_stride + b0;
                for (y, row) in dst[d..d + BLOCK].iter_mut().zip(&buf) {
                    *y = row[i];
                }
            }
        }
    }
    // The ragged edges, element by element.
    for a in 0..rows {
        let bs = if a < full_a { full_b } else { 0 };
        for b in bs..cols {
            dst[a * dst_stride + b] = src[a + b * src_stride];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::transpose_block;

    #[test]
    fn blocks_and_ragged_edges_equal_the_definition() {
        for &(rows, cols, src_extra, dst_extra) in &[(8, 8, 0, 0), (16, 24, 0, 0), (13, 21, 3, 5), (1, 9, 0, 2), (9, 1, 4, 0), (0, 5, 0, 0), (37, 64, 1, 0)] {
            let (ss, ds) = (rows + src_extra, cols + dst_extra);
            let src: Vec<u32> = (0..(cols * ss).max(1) as u32).collect();
            let mut dst = vec![u32::MAX; (rows * ds).max(1)];
            transpose_block(&src, ss, &mut dst, ds, rows, cols);
            for a in 0..rows {
                for b in 0..cols {
                    assert_eq!(dst[a * ds + b], src[a + b * ss], "{rows}x{cols} at ({a}, {b})");
                }
                // What lies between rows of dst is left alone.
                assert!(dst[a * ds + cols..(a * ds + ds).min(dst.len())].iter().all(|&v| v == u32::MAX));
            }
        }
    }
}
