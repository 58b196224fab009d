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
