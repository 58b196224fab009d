//! Gemm and MatMul as the engine's MatMul (transposes as its flags, a
//! rank-1 bias as BiasAdd) and BatchMatMul; a stack of rows times a
//! weight matrix (`[B, S, D] x [D, F]`, every Transformer projection) is
//! one MatMul over `B * S` rows.

use super::super::convert::{Importer, Node};
use super::{Str, dims_i64};
use flowlab_engine::Graph;

pub(super) fn gemm(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let (a, b, out) = (n.need(0)?, n.need(1)?, n.output(0).ok_or("no output")?);
    let (ta, tb) = (n.int("transA", 0) != 0, n.int("transB", 0) != 0);
    let (alpha, beta) = (f64::from(n.float("alpha", 1.0)), f64::from(n.float("beta", 1.0)));
    let (x, w) = (imp.out(a)?, imp.out(b)?);
    let mut y = g.matmul_ex(&x, &w, ta, tb).s()?;
    if alpha != 1.0 {
        y = g.mul(&y, g.scalar(alpha, y.dtype()).s()?).s()?;
    }
    if let Some(c) = n.input(2) {
        let c_shape = imp.shape(c)?;
        let mut bias = imp.out(c)?;
        if beta != 1.0 {
            bias = g.mul(&bias, g.scalar(beta, bias.dtype()).s()?).s()?;
        }
        y = if c_shape.len() == 1 { g.bias_add(&y, &bias) } else { g.add(&y, &bias) }.s()?;
    }
    imp.set_out(out, y);
    Ok(())
}

pub(super) fn matmul(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let (a, b, out) = (n.need(0)?, n.need(1)?, n.output(0).ok_or("no output")?);
    let (sa, sb) = (imp.shape(a)?, imp.shape(b)?);
    let (x, w) = (imp.out(a)?, imp.out(b)?);
    let y = match (sa.len(), sb.len()) {
        (2, 2) => g.matmul(&x, &w).s()?,
        (ra, 2) if ra > 2 => {
            let rows = super::super::lit::numel(&sa[..ra - 1]).ok_or("shape overflows")?;
            let flat = g.reshape(&x, &[rows as i64, sa[ra - 1] as i64]).s()?;
            let mut shape = sa[..ra - 1].to_vec();
            shape.push(sb[1]);
            g.reshape(g.matmul(&flat, &w).s()?, &dims_i64(&shape)).s()?
        }
        (ra, rb) if ra == rb && ra > 2 && sa[..ra - 2] == sb[..rb - 2] => g.batch_matmul(&x, &w).s()?,
        (1, _) | (_, 1) => {
            // a vector operand is a row (left) or a column (right), then dropped
            let x2 = if sa.len() == 1 { g.reshape(&x, &[1, sa[0] as i64]).s()? } else { x.clone() };
            let w2 = if sb.len() == 1 { g.reshape(&w, &[sb[0] as i64, 1]).s()? } else { w.clone() };
            if x2.shape().rank() != 2 || w2.shape().rank() != 2 {
                return Err(format!("MatMul of shapes {sa:?} and {sb:?} is not imported"));
            }
            let mut shape = Vec::new();
            if sa.len() == 2 {
                shape.push(sa[0]);
            }
            if sb.len() == 2 {
                shape.push(sb[1]);
            }
            g.reshape(g.matmul(&x2, &w2).s()?, &dims_i64(&shape)).s()?
        }
        _ => return Err(format!("MatMul broadcasting shapes {sa:?} and {sb:?} is not imported (equal batch dimensions, or a matrix on the right)")),
    };
    imp.set_out(out, y);
    Ok(())
}
