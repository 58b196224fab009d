//! Values known when the file is imported: `Constant` nodes, integer
//! initializers and everything computed from them and from static shapes
//! (the `Shape -> Gather -> Unsqueeze -> Concat -> Reshape` chains that
//! exporters emit for a reshape). They are evaluated here, once, instead of
//! becoming engine nodes that every step would run; a batch bound at import
//! makes every shape static, so each such chain folds to its answer.
//!
//! Elements are held as f64, which holds every i32, every f32 and every
//! i64 a shape computation produces exactly.

use flowlab_engine::{DType, Tensor};

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Lit {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Lit {
    pub fn new(dtype: DType, shape: Vec<usize>, data: Vec<f64>) -> Result<Lit, String> {
        if numel(&shape) != Some(data.len()) {
            return Err(format!("{} elements for shape {shape:?}", data.len()));
        }
        Ok(Lit { dtype, shape, data })
    }

    pub fn ints(dtype: DType, v: &[i64]) -> Lit {
        Lit { dtype, shape: vec![v.len()], data: v.iter().map(|&x| x as f64).collect() }
    }

    /// A tensor's elements as f64 (the engine's own conversion); f16 and
    /// bf16 weights are not folded.
    pub fn from_tensor(t: &Tensor) -> Result<Lit, String> {
        if matches!(t.dtype(), DType::F16 | DType::BF16 | DType::I8) {
            return Err(format!("a {} constant cannot be folded", t.dtype()));
        }
        Ok(Lit { dtype: t.dtype(), shape: t.shape().dims().to_vec(), data: t.to_f64_vec().map_err(|e| e.to_string())? })
    }

    pub fn to_tensor(&self) -> Result<Tensor, String> {
        Tensor::from_f64s(self.dtype, &self.data, self.shape.clone()).map_err(|e| e.to_string())
    }

    pub fn as_ints(&self) -> Vec<i64> {
        self.data.iter().map(|&x| x as i64).collect()
    }

    pub fn is_int(&self) -> bool {
        matches!(self.dtype, DType::I64 | DType::I32 | DType::Bool)
    }

    pub fn reshape(&self, shape: Vec<usize>) -> Result<Lit, String> {
        Lit::new(self.dtype, shape, self.data.clone())
    }

    /// Elementwise `f` of two lits under numpy broadcasting.
    pub fn zip(&self, o: &Lit, dtype: DType, f: impl Fn(f64, f64) -> f64) -> Result<Lit, String> {
        let shape = broadcast(&self.shape, &o.shape)?;
        let n = folded_len(&shape)?;
        let (ia, ib) = (index_map(&self.shape, &shape), index_map(&o.shape, &shape));
        let data = (0..n).map(|i| f(self.data[ia(i)], o.data[ib(i)])).collect();
        Ok(Lit { dtype, shape, data })
    }

    /// `a` where `c` is true, else `b`, all three broadcast (ONNX Where).
    pub fn select(c: &Lit, a: &Lit, b: &Lit) -> Result<Lit, String> {
        let shape = broadcast(&broadcast(&c.shape, &a.shape)?, &b.shape)?;
        let n = folded_len(&shape)?;
        let (ic, ia, ib) = (index_map(&c.shape, &shape), index_map(&a.shape, &shape), index_map(&b.shape, &shape));
        let data = (0..n).map(|i| if c.data[ic(i)] != 0.0 { a.data[ia(i)] } else { b.data[ib(i)] }).collect();
        Ok(Lit { dtype: a.dtype, shape, data })
    }

    pub fn map(&self, dtype: DType, f: impl Fn(f64) -> f64) -> Lit {
        Lit { dtype, shape: self.shape.clone(), data: self.data.iter().map(|&x| f(x)).collect() }
    }

    /// The elements at `indices` along `axis` (ONNX Gather).
    pub fn gather(&self, axis: usize, indices: &Lit) -> Result<Lit, String> {
        let dim = self.shape[axis];
        let outer: usize = self.shape[..axis].iter().product();
        let inner: usize = self.shape[axis + 1..].iter().product();
        if outer.checked_mul(indices.data.len()).and_then(|x| x.checked_mul(inner)).is_none_or(|n| n > MAX_FOLDED) {
            return Err(format!("gathering {} indices of {:?} gives more than {MAX_FOLDED} elements to fold", indices.data.len(), self.shape));
        }
        let mut data = Vec::with_capacity(outer * indices.data.len() * inner);
        for o in 0..outer {
            for &i in &indices.data {
                let i = norm_index(i as i64, dim).ok_or_else(|| format!("index {i} outside a dimension of {dim}"))?;
                data.extend_from_slice(&self.data[(o * dim + i) * inner..(o * dim + i + 1) * inner]);
            }
        }
        let mut shape = self.shape[..axis].to_vec();
        shape.extend_from_slice(&indices.shape);
        shape.extend_from_slice(&self.shape[axis + 1..]);
        Lit::new(self.dtype, shape, data)
    }

    /// `begin..begin + size` of each axis.
    pub fn slice(&self, begin: &[usize], size: &[usize]) -> Lit {
        let n: usize = size.iter().product();
        let strides = strides(&self.shape);
        let data = (0..n)
            .map(|mut i| {
                let mut at = 0;
                for d in (0..size.len()).rev() {
                    at += (begin[d] + i % size[d]) * strides[d];
                    i /= size[d];
                }
                self.data[at]
            })
            .collect();
        Lit { dtype: self.dtype, shape: size.to_vec(), data }
    }

    pub fn concat(parts: &[Lit], axis: usize) -> Result<Lit, String> {
        let first = parts.first().ok_or("nothing to concatenate")?;
        let outer: usize = first.shape[..axis].iter().product();
        let mut shape = first.shape.clone();
        shape[axis] = parts.iter().map(|p| p.shape.get(axis).copied().unwrap_or(0)).sum();
        let mut data = Vec::with_capacity(shape.iter().product());
        for o in 0..outer {
            for p in parts {
                if p.shape.len() != first.shape.len() {
                    return Err(format!("ranks differ: {:?} and {:?}", first.shape, p.shape));
                }
                let chunk: usize = p.shape[axis..].iter().product();
                data.extend_from_slice(&p.data[o * chunk..(o + 1) * chunk]);
            }
        }
        Lit::new(first.dtype, shape, data)
    }

    pub fn transpose(&self, perm: &[usize]) -> Lit {
        let (shape, data) = permute(&self.data, &self.shape, perm);
        Lit { dtype: self.dtype, shape, data }
    }
}

/// Elements of a row-major array of `shape` with its axes reordered by
/// `perm` (a permutation of the axes, which callers check): the new
/// shape and elements. Folded constants and filters laid out at import
/// share it.
pub(crate) fn permute<T: Copy>(src: &[T], shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<T>) {
    let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let from = strides(shape);
    let data = (0..src.len())
        .map(|mut i| {
            let mut at = 0;
            for d in (0..out.len()).rev() {
                at += (i % out[d]) * from[perm[d]];
                i /= out[d];
            }
            src[at]
        })
        .collect();
    (out, data)
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Elements of a shape; `None` when the product overflows.
pub(crate) fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// `i` counted from the end when negative; `None` outside `0..dim`.
pub(crate) fn norm_index(i: i64, dim: usize) -> Option<usize> {
    let j = if i < 0 { i + dim as i64 } else { i };
    (0..dim as i64).contains(&j).then_some(j as usize)
}

/// The most elements a folded constant may have (64 Mi: a shape
/// computation never comes near; a hostile file asking more is refused
/// instead of exhausting memory).
pub(crate) const MAX_FOLDED: usize = 1 << 26;

/// Numpy broadcasting of two shapes.
pub(crate) fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let r = a.len().max(b.len());
    let out: Vec<usize> = (0..r)
        .map(|i| {
            let x = if i + a.len() >= r { a[i + a.len() - r] } else { 1 };
            let y = if i + b.len() >= r { b[i + b.len() - r] } else { 1 };
            match (x, y) {
                _ if x == y => Ok(x),
                (1, _) => Ok(y),
                (_, 1) => Ok(x),
                _ => Err(format!("shapes {a:?} and {b:?} do not broadcast")),
            }
        })
        .collect::<Result<_, _>>()?;
    match numel(&out) {
        Some(_) => Ok(out),
        None => Err(format!("broadcasting {a:?} and {b:?} overflows")),
    }
}

/// Elements of a constant about to be folded, at most [`MAX_FOLDED`].
pub(crate) fn folded_len(shape: &[usize]) -> Result<usize, String> {
    numel(shape).filter(|&n| n <= MAX_FOLDED).ok_or_else(|| format!("a constant of shape {shape:?} is more than the {MAX_FOLDED} elements the importer folds"))
}

/// For each flat index of `out`, the flat index of `from` broadcast to it.
fn index_map(from: &[usize], out: &[usize]) -> impl Fn(usize) -> usize + use<> {
    let pad = out.len() - from.len();
    let fs = strides(from);
    let (from, out) = (from.to_vec(), out.to_vec());
    move |mut i| {
        let mut at = 0;
        for d in (0..out.len()).rev() {
            let k = i % out[d];
            i /= out[d];
            if d >= pad && from[d - pad] != 1 {
                at += k * fs[d - pad];
            }
        }
        at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(shape: &[usize], data: &[f64]) -> Lit {
        Lit::new(DType::I64, shape.to_vec(), data.to_vec()).unwrap()
    }

    #[test]
    fn gathers_slices_concatenates_and_transposes_as_numpy_does() {
        // numpy: a = arange(6).reshape(2, 3)
        let a = lit(&[2, 3], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        // a.take([2, 0], axis=1) == [[2, 0], [5, 3]]
        assert_eq!(a.gather(1, &lit(&[2], &[2.0, -3.0])).unwrap(), lit(&[2, 2], &[2.0, 0.0, 5.0, 3.0]));
        // a[1:2, 1:3] == [[4, 5]]
        assert_eq!(a.slice(&[1, 1], &[1, 2]), lit(&[1, 2], &[4.0, 5.0]));
        // concatenate([a, a[:, :1]], axis=1)
        let c = Lit::concat(&[a.clone(), a.slice(&[0, 0], &[2, 1])], 1).unwrap();
        assert_eq!(c, lit(&[2, 4], &[0.0, 1.0, 2.0, 0.0, 3.0, 4.0, 5.0, 3.0]));
        // a.T
        assert_eq!(a.transpose(&[1, 0]), lit(&[3, 2], &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]));
        // a + [[10], [20]]
        let s = a.zip(&lit(&[2, 1], &[10.0, 20.0]), DType::I64, |x, y| x + y).unwrap();
        assert_eq!(s, lit(&[2, 3], &[10.0, 11.0, 12.0, 23.0, 24.0, 25.0]));
        assert!(a.zip(&lit(&[2], &[1.0, 2.0]), DType::I64, |x, y| x + y).unwrap_err().contains("do not broadcast"));
        assert!(a.gather(0, &lit(&[1], &[2.0])).unwrap_err().contains("index 2 outside a dimension of 2"));
    }
}
