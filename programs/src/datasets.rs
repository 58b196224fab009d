//! Small data sets for end-to-end training: the UCI optical digits (8x8
//! images, 64 pixel values 0..16 then the label 0..9 per CSV line, gzip).

use flowlab_engine::{EngineError, Result};
use flate2::read::GzDecoder;
use std::io::{BufRead, BufReader};
use std::path::Path;

/// Labelled examples with `features` values each, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    pub features: usize,
    pub classes: usize,
    pub x: Vec<f32>,
    pub y: Vec<i64>,
}

impl Dataset {
    pub fn len(&self) -> usize {
        self.y.len()
    }
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }
    /// The examples at `idx`, in that order.
    pub fn select(&self, idx: &[usize]) -> Dataset {
        let f = self.features;
        let mut x = Vec::with_capacity(idx.len() * f);
        for &i in idx {
            x.extend_from_slice(&self.x[i * f..(i + 1) * f]);
        }
        Dataset { features: f, classes: self.classes, x, y: idx.iter().map(|&i| self.y[i]).collect() }
    }

    /// Square images of `from` x `from` pixels resized to `to` x `to` by
    /// bilinear interpolation between pixel centres, the edge pixels held
    /// beyond them (TensorFlow's `resize_bilinear` with half-pixel
    /// centres). The digits at 28 x 28 give the 784-input MLP, MNIST's
    /// shape, something real to learn.
    pub fn resized_images(&self, from: usize, to: usize) -> Result<Dataset> {
        if from == 0 || to == 0 || self.features != from * from {
            return Err(EngineError::Config {
                key: "resize".into(),
                detail: format!("examples of {} features are not {from} x {from} images, or a side is 0 (to {to} x {to})", self.features),
            });
        }
        // per output row (and column): the two source rows and the weight of the second
        let taps: Vec<(usize, usize, f32)> = (0..to)
            .map(|j| {
                let u = ((j as f64 + 0.5) * from as f64 / to as f64 - 0.5).clamp(0.0, (from - 1) as f64);
                let lo = u.floor() as usize;
                (lo, (lo + 1).min(from - 1), (u - lo as f64) as f32)
            })
            .collect();
        let mut x = Vec::with_capacity(self.len() * to * to);
        for img in self.x.chunks_exact(from * from) {
            for &(r0, r1, wr) in &taps {
                for &(c0, c1, wc) in &taps {
                    let top = img[r0 * from + c0] * (1.0 - wc) + img[r0 * from + c1] * wc;
                    let bottom = img[r1 * from + c0] * (1.0 - wc) + img[r1 * from + c1] * wc;
                    x.push(top * (1.0 - wr) + bottom * wr);
                }
            }
        }
        Ok(Dataset { features: to * to, classes: self.classes, x, y: self.y.clone() })
    }
}

/// Reads the digits CSV (optionally gzip-compressed: detected by magic
/// bytes). Pixels are scaled to [0, 1]. Errors name the file and line.
pub fn load_digits(path: &Path) -> Result<Dataset> {
    let bytes = std::fs::read(path).map_err(|e| EngineError::io(path, e))?;
    parse_digits(&path.display().to_string(), &bytes)
}

/// The digits set shipped in `data/digits.csv.gz` (1,797 8x8 images),
/// built into the binary.
pub fn builtin_digits() -> Result<Dataset> {
    parse_digits("digits (built in)", include_bytes!("../../data/digits.csv.gz"))
}

/// Parses the digits CSV from memory; `file` names the source in errors.
pub fn parse_digits(file: &str, bytes: &[u8]) -> Result<Dataset> {
    let text: Box<dyn BufRead> = if bytes.starts_with(&[0x1f, 0x8b]) {
        Box::new(BufReader::new(GzDecoder::new(bytes)))
    } else {
        Box::new(BufReader::new(bytes))
    };
    let file = file.to_string();
    let bad = |line: usize, detail: String| EngineError::Data { file: file.clone(), line, detail };
    let mut x = Vec::new();
    let mut y = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.map_err(|e| bad(i + 1, format!("{e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let vals: Vec<&str> = line.trim().split(',').collect();
        if vals.len() != 65 {
            return Err(bad(i + 1, format!("expected 65 comma-separated values, found {}", vals.len())));
        }
        for (j, v) in vals.iter().enumerate() {
            let n: i64 = v
                .trim()
                .parse()
                .map_err(|_| bad(i + 1, format!("column {}: '{v}' is not an integer", j + 1)))?;
            if j < 64 {
                if !(0..=16).contains(&n) {
                    return Err(bad(i + 1, format!("column {}: pixel {n} outside 0..16", j + 1)));
                }
                x.push(n as f32 / 16.0);
            } else {
                if !(0..10).contains(&n) {
                    return Err(bad(i + 1, format!("label {n} outside 0..9")));
                }
                y.push(n);
            }
        }
    }
    Ok(Dataset { features: 64, classes: 10, x, y })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plane `a + b*row + c*col` over the source pixel centres is
    /// reproduced at every output pixel centre inside them, and held at
    /// the edge value outside: the closed form of bilinear interpolation
    /// with half-pixel centres.
    #[test]
    fn resizing_reproduces_a_plane_between_pixel_centres() {
        let (from, to) = (8usize, 28usize);
        let plane = |r: f64, c: f64| 0.25 + 0.03 * r - 0.05 * c;
        let img: Vec<f32> = (0..from * from).map(|i| plane((i / from) as f64, (i % from) as f64) as f32).collect();
        let d = Dataset { features: from * from, classes: 10, x: [img.clone(), img].concat(), y: vec![3, 7] };
        let r = d.resized_images(from, to).unwrap();
        assert_eq!((r.features, r.len(), r.y.clone()), (784, 2, vec![3, 7]));
        let src = |j: usize| ((j as f64 + 0.5) * 8.0 / 28.0 - 0.5).clamp(0.0, 7.0);
        for (i, &v) in r.x[..784].iter().enumerate() {
            let want = plane(src(i / to), src(i % to));
            assert!((f64::from(v) - want).abs() < 1e-5, "pixel {i}: {v} against {want}");
        }
        assert_eq!(r.x[..784], r.x[784..]);
    }

    #[test]
    fn resizing_what_is_not_a_square_image_names_the_shape() {
        let d = Dataset { features: 10, classes: 2, x: vec![0.0; 10], y: vec![0] };
        let e = d.resized_images(3, 28).unwrap_err().to_string();
        assert!(e.contains("10 features") && e.contains("3 x 3"), "{e}");
    }
}
