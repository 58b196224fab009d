//! The LSTM cell's elementwise arithmetic, forward and backward, over
//! `[batch, hidden]` rows (gate layout i, ci, f, o as TensorFlow's
//! LSTMBlockCell). The cell's GEMM is the caller's: the forward pass gets the
//! gate pre-activations `z = [x, h_prev] · w + b`, the backward pass returns
//! their gradient so that the caller can form the weight and input
//! gradients with two GEMMs.

use super::scalar::Float;

/// The cell's activations, each `[batch, hidden]` (row-major).
pub(crate) struct LstmActivations<T> {
    pub i: Vec<T>,
    pub cs: Vec<T>,
    pub f: Vec<T>,
    pub o: Vec<T>,
    pub ci: Vec<T>,
    pub co: Vec<T>,
    pub h: Vec<T>,
}

/// From the pre-activations `z` (`[batch, 4*hidden]`, rows i | ci | f | o) and
/// the previous cell state: i = σ(z_i), ci = tanh(z_ci), f = σ(z_f + forget_bias),
/// o = σ(z_o), cs = ci·i + cs_prev·f, co = tanh(cs), h = co·o.
pub(crate) fn lstm_forward<T: Float>(z: &[T], cs_prev: &[T], batch: usize, hidden: usize, forget_bias: T) -> LstmActivations<T> {
    let n = batch * hidden;
    debug_assert_eq!(z.len(), 4 * n);
    debug_assert_eq!(cs_prev.len(), n);
    // Gather each gate's pre-activations into its own [batch, hidden]
    // array, then apply its nonlinearity to the whole array at once.
    let gate = |g: usize, shift: T| -> Vec<T> {
        let mut v = Vec::with_capacity(n);
        for r in 0..batch {
            v.extend(z[(4 * r + g) * hidden..(4 * r + g + 1) * hidden].iter().map(|&x| x + shift));
        }
        v
    };
    let (mut i, mut ci, mut f, mut o) = (gate(0, T::ZERO), gate(1, T::ZERO), gate(2, forget_bias), gate(3, T::ZERO));
    T::sigmoid_in_place(&mut i);
    T::tanh_in_place(&mut ci);
    T::sigmoid_in_place(&mut f);
    T::sigmoid_in_place(&mut o);
    let cs: Vec<T> = (0..n).map(|e| ci[e] * i[e] + cs_prev[e] * f[e]).collect();
    let mut co = cs.clone();
    T::tanh_in_place(&mut co);
    let h = co.iter().zip(&o).map(|(&c, &g)| c * g).collect();
    LstmActivations { i, cs, f, o, ci, co, h }
}

/// One value per element for each of the cell's gate outputs (input,
/// forget, output, candidate, tanh of the state): the forward pass's
/// activations, or the gradients arriving at them.
pub(crate) struct Gates<'a, T> {
    pub i: &'a [T],
    pub f: &'a [T],
    pub o: &'a [T],
    pub ci: &'a [T],
    pub co: &'a [T],
}

/// The backward pass of [`lstm_forward`]: given the forward activations
/// `gates`, the gradients at `cs` and `h` (and, when something besides the
/// cell's own state uses the gates, at them), returns (d cs_prev
/// `[batch, hidden]`, d z `[batch, 4*hidden]`).
pub(crate) fn lstm_backward<T: Float>(
    cs_prev: &[T],
    gates: Gates<T>,
    cs_grad: &[T],
    h_grad: &[T],
    gate_grads: Option<Gates<T>>,
    batch: usize,
    hidden: usize,
) -> (Vec<T>, Vec<T>) {
    let Gates { i, f, o, ci, co } = gates;
    let n = batch * hidden;
    let mut d_cs_prev = vec![T::ZERO; n];
    let mut dz = vec![T::ZERO; 4 * n];
    for r in 0..batch {
        let dr = &mut dz[r * 4 * hidden..(r + 1) * 4 * hidden];
        let (di, rest) = dr.split_at_mut(hidden);
        let (dci, rest) = rest.split_at_mut(hidden);
        let (df, d_o) = rest.split_at_mut(hidden);
        for k in 0..hidden {
            let e = r * hidden + k;
            let (gi, gf, go, gci, gco) = match &gate_grads {
                Some(g) => (g.i[e], g.f[e], g.o[e], g.ci[e], g.co[e]),
                None => (T::ZERO, T::ZERO, T::ZERO, T::ZERO, T::ZERO),
            };
            // d h / d o = co, d h / d co = o, d co / d cs = 1 - co².
            let d_out = h_grad[e] * co[e] + go;
            let d_co = h_grad[e] * o[e] + gco;
            let dcs = d_co * (T::ONE - co[e] * co[e]) + cs_grad[e];
            let d_in = dcs * ci[e] + gi;
            let d_cand = dcs * i[e] + gci;
            let d_forget = dcs * cs_prev[e] + gf;
            di[k] = d_in * i[e] * (T::ONE - i[e]);
            dci[k] = d_cand * (T::ONE - ci[e] * ci[e]);
            df[k] = d_forget * f[e] * (T::ONE - f[e]);
            d_o[k] = d_out * o[e] * (T::ONE - o[e]);
            d_cs_prev[e] = dcs * f[e];
        }
    }
    (d_cs_prev, dz)
}
