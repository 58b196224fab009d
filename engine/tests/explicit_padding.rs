//! Convolution and pooling with given pads (`padding: EXPLICIT`, as ONNX
//! and PyTorch pad) against the same window run VALID over an input padded
//! by hand here: zeros for the convolution, -inf for the max pool, and for
//! the average pool a plain loop that counts only the input's own cells.

use flowlab_engine::{DType, Graph, Session, Tensor};

fn input(shape: [usize; 4], seed: u32) -> Vec<f64> {
    let n: usize = shape.iter().product();
    (0..n).map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 1000) as f64 / 250.0 - 2.0).collect()
}

/// `x` (NHWC) with `[top, bottom, left, right]` rows and columns of `fill`.
fn pad(x: &[f64], [n, h, w, c]: [usize; 4], [t, b, l, r]: [usize; 4], fill: f64) -> (Vec<f64>, [usize; 4]) {
    let (ph, pw) = (h + t + b, w + l + r);
    let mut out = vec![fill; n * ph * pw * c];
    for i in 0..n {
        for y in 0..h {
            for xx in 0..w {
                for k in 0..c {
                    out[((i * ph + y + t) * pw + xx + l) * c + k] = x[((i * h + y) * w + xx) * c + k];
                }
            }
        }
    }
    (out, [n, ph, pw, c])
}

fn run(g: &Graph, y: &flowlab_engine::Output) -> Tensor {
    Session::new(g).unwrap().run(&[], &[y], &[]).unwrap().remove(0)
}

fn close(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    for (i, (a, b)) in got.to_vec::<f64>().unwrap().iter().zip(want.to_vec::<f64>().unwrap()).enumerate() {
        assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "{what}: element {i}: {a} vs {b}");
    }
}

#[test]
fn a_padded_convolution_is_a_valid_one_over_zero_padded_input() {
    for (shape, fshape, strides, pads) in [
        ([2, 7, 7, 3], [7, 7, 3, 4], [2, 2], [3, 3, 3, 3]),
        ([1, 8, 6, 2], [3, 3, 2, 5], [2, 1], [1, 1, 0, 2]),
        ([1, 5, 5, 4], [1, 1, 4, 2], [1, 1], [0, 0, 0, 0]),
    ] {
        let (x, f) = (input(shape, 1), input(fshape, 7));
        let g = Graph::new();
        let xt = g.constant(Tensor::from_vec(x.clone(), shape).unwrap()).unwrap();
        let ft = g.constant(Tensor::from_vec(f, fshape).unwrap()).unwrap();
        let got = run(&g, &g.conv2d_padded(&xt, &ft, strides, pads).unwrap());
        let (xp, pshape) = pad(&x, shape, pads, 0.0);
        let xpt = g.constant(Tensor::from_vec(xp, pshape).unwrap()).unwrap();
        let want = run(&g, &g.conv2d(&xpt, &ft, strides, false).unwrap());
        close(&got, &want, &format!("conv {shape:?} {fshape:?} {strides:?} {pads:?}"));
    }
}

#[test]
fn a_padded_max_pool_never_takes_the_padding() {
    let (shape, pads) = ([2, 6, 5, 3], [1, 1, 1, 1]);
    let x = input(shape, 3);
    let g = Graph::new();
    let xt = g.constant(Tensor::from_vec(x.clone(), shape).unwrap()).unwrap();
    let got = run(&g, &g.pool_padded(true, &xt, [3, 3], [2, 2], pads).unwrap());
    let (xp, pshape) = pad(&x, shape, pads, f64::NEG_INFINITY);
    let xpt = g.constant(Tensor::from_vec(xp, pshape).unwrap()).unwrap();
    close(&got, &run(&g, &g.max_pool(&xpt, [3, 3], [2, 2], false).unwrap()), "max pool");
}

#[test]
fn a_padded_average_pool_counts_only_the_inputs_cells() {
    let ([n, h, w, c], pads, (k, s)) = ([1, 5, 4, 2], [1, 1, 0, 2], (3, 1));
    let x = input([n, h, w, c], 5);
    let g = Graph::new();
    let xt = g.constant(Tensor::from_vec(x.clone(), [n, h, w, c]).unwrap()).unwrap();
    let got = run(&g, &g.pool_padded(false, &xt, [k, k], [s, s], pads).unwrap());
    let (oh, ow) = ((h + pads[0] + pads[1] - k) / s + 1, (w + pads[2] + pads[3] - k) / s + 1);
    let mut want = Vec::new();
    for oy in 0..oh {
        for ox in 0..ow {
            for ch in 0..c {
                let (mut sum, mut count) = (0.0, 0.0);
                for dy in 0..k {
                    for dx in 0..k {
                        let (y, xx) = ((oy * s + dy) as i64 - pads[0] as i64, (ox * s + dx) as i64 - pads[2] as i64);
                        if (0..h as i64).contains(&y) && (0..w as i64).contains(&xx) {
                            sum += x[((y as usize) * w + xx as usize) * c + ch];
                            count += 1.0;
                        }
                    }
                }
                want.push(sum / count);
            }
        }
    }
    close(&got, &Tensor::from_vec(want, [n, oh, ow, c]).unwrap(), "avg pool");
}

#[test]
fn a_pad_as_wide_as_the_window_is_refused_naming_it() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [1, 4, 4, 1]).unwrap();
    let e = g.pool_padded(true, &x, [2, 2], [1, 1], [2, 0, 0, 0]).unwrap_err().to_string();
    assert!(e.contains("padding 2 before and 0 after along height must each be smaller than the window 2"), "{e}");
}
