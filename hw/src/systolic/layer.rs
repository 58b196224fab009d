//! A layer as SCALE-Sim describes it, its GEMM form (im2col), and the
//! topology CSV reader.
//!
//! Convolution CSV (SCALE-Sim `topologies/conv_nets`): a header row, then
//! `Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width,
//! Channels, Num Filter, Strides,` (one stride for both axes; no padding, so
//! pad the IFMAP dimensions yourself; further columns are ignored).
//! GEMM CSV (SCALE-Sim `GEMM_mnk`): header `Layer, M, N, K,` then
//! `name, M, N, K,` rows. A trailing comma is optional; blank rows and rows
//! of empty fields are skipped.

use crate::HwError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Largest accepted value of any single layer dimension.
pub const MAX_LAYER_DIM: u64 = 1 << 24;

/// One convolution (or GEMM, as a 1 x K filter over an M x K "image") layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layer {
    pub name: String,
    pub ifmap_h: u64,
    pub ifmap_w: u64,
    pub filter_h: u64,
    pub filter_w: u64,
    pub channels: u64,
    pub num_filters: u64,
    pub stride_h: u64,
    pub stride_w: u64,
}

impl Layer {
    /// A convolution layer (no padding, as in SCALE-Sim).
    #[allow(clippy::too_many_arguments)]
    pub fn conv(
        name: &str,
        ifmap_h: u64,
        ifmap_w: u64,
        filter_h: u64,
        filter_w: u64,
        channels: u64,
        num_filters: u64,
        stride: u64,
    ) -> Result<Layer, HwError> {
        let l = Layer {
            name: name.into(),
            ifmap_h,
            ifmap_w,
            filter_h,
            filter_w,
            channels,
            num_filters,
            stride_h: stride,
            stride_w: stride,
        };
        l.validate()?;
        Ok(l)
    }

    /// A GEMM: (M x K) times (K x N), encoded as SCALE-Sim does.
    pub fn gemm(name: &str, m: u64, n: u64, k: u64) -> Result<Layer, HwError> {
        for (p, v) in [("M", m), ("N", n), ("K", k)] {
            check_dim(p, v)?;
        }
        Layer::conv(name, m, k, 1, k, 1, n, 1)
    }

    pub fn validate(&self) -> Result<(), HwError> {
        let dims = [
            ("IFMAP Height", self.ifmap_h),
            ("IFMAP Width", self.ifmap_w),
            ("Filter Height", self.filter_h),
            ("Filter Width", self.filter_w),
            ("Channels", self.channels),
            ("Num Filter", self.num_filters),
            ("Strides", self.stride_h),
            ("Strides", self.stride_w),
        ];
        for (p, v) in dims {
            check_dim(p, v)?;
        }
        if self.filter_h > self.ifmap_h || self.filter_w > self.ifmap_w {
            return Err(HwError::InvalidParameter {
                parameter: "Filter Height/Width".into(),
                message: format!(
                    "filter {}x{} is larger than the {}x{} IFMAP in layer `{}`",
                    self.filter_h, self.filter_w, self.ifmap_h, self.ifmap_w, self.name
                ),
            });
        }
        let (m, n, k) = self.gemm_dims();
        if m.checked_mul(n).and_then(|x| x.checked_mul(k)).is_none_or(|x| x > 1 << 56) {
            return Err(HwError::InvalidParameter {
                parameter: "layer size".into(),
                message: format!("layer `{}` has M*N*K = {m}*{n}*{k}, beyond the 2^56 MAC limit", self.name),
            });
        }
        Ok(())
    }

    /// Output rows of the convolution: `floor((H - F) / S) + 1`.
    pub fn ofmap_h(&self) -> u64 {
        (self.ifmap_h - self.filter_h) / self.stride_h + 1
    }
    /// Output columns of the convolution: `floor((W - F) / S) + 1`.
    pub fn ofmap_w(&self) -> u64 {
        (self.ifmap_w - self.filter_w) / self.stride_w + 1
    }

    /// The im2col GEMM: M = output pixels, N = filters, K = window size.
    pub fn gemm_dims(&self) -> (u64, u64, u64) {
        (self.ofmap_h() * self.ofmap_w(), self.num_filters, self.filter_h * self.filter_w * self.channels)
    }

    /// The im2col GEMM as SCALE-Sim sizes it: `ceil((H - F) / S) + 1` outputs
    /// per axis, so a last window hanging off the input edge is counted
    /// (one more output row or column when `S` does not divide `H - F`).
    pub fn gemm_dims_scalesim(&self) -> (u64, u64, u64) {
        let oh = (self.ifmap_h - self.filter_h).div_ceil(self.stride_h) + 1;
        let ow = (self.ifmap_w - self.filter_w).div_ceil(self.stride_w) + 1;
        (oh * ow, self.num_filters, self.filter_h * self.filter_w * self.channels)
    }

    pub fn macs(&self) -> u64 {
        let (m, n, k) = self.gemm_dims();
        m * n * k
    }
}

fn check_dim(parameter: &str, v: u64) -> Result<(), HwError> {
    if v == 0 || v > MAX_LAYER_DIM {
        return Err(HwError::InvalidParameter {
            parameter: parameter.into(),
            message: format!("must be between 1 and {MAX_LAYER_DIM}, got {v}"),
        });
    }
    Ok(())
}

const CONV_COLUMNS: [&str; 8] =
    ["Layer name", "IFMAP Height", "IFMAP Width", "Filter Height", "Filter Width", "Channels", "Num Filter", "Strides"];

/// Reads a SCALE-Sim topology file (convolution or GEMM form, told apart by
/// the header). Errors name the file, the line and the column.
pub fn read_topology_csv(path: impl AsRef<Path>) -> Result<Vec<Layer>, HwError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|error| HwError::Io { path: path.into(), error })?;
    parse_topology(&text, path)
}

pub(crate) fn parse_topology(text: &str, path: &Path) -> Result<Vec<Layer>, HwError> {
    let err = |line: usize, message: String| HwError::Parse { path: path.into(), line, message };
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else {
        return Err(err(1, "empty topology file: expected a header row".into()));
    };
    let head: Vec<String> = header.split(',').map(|f| f.trim().to_ascii_lowercase()).collect();
    let gemm = head.len() >= 4 && head[1] == "m" && head[2] == "n" && head[3] == "k";
    let mut layers = Vec::new();
    for (i, raw) in lines {
        let line = i + 1;
        let mut fields: Vec<&str> = raw.split(',').map(str::trim).collect();
        if fields.iter().all(|f| f.is_empty()) {
            continue;
        }
        while fields.last().is_some_and(|f| f.is_empty()) {
            fields.pop();
        }
        let needed = if gemm { 4 } else { 8 };
        if fields.len() < needed {
            let expect = if gemm { "Layer name, M, N, K".to_string() } else { CONV_COLUMNS.join(", ") };
            return Err(err(line, format!("expected {needed} fields ({expect}), found {}", fields.len())));
        }
        let name = fields[0];
        if name.is_empty() {
            return Err(err(line, "empty layer name".into()));
        }
        let mut nums = Vec::with_capacity(needed - 1);
        for (j, f) in fields.iter().enumerate().take(needed).skip(1) {
            let col = if gemm { ["", "M", "N", "K"][j] } else { CONV_COLUMNS[j] };
            let v = f.parse::<u64>().map_err(|_| err(line, format!("{col}: expected a positive integer, found `{f}`")))?;
            nums.push(v);
        }
        let layer = if gemm {
            Layer::gemm(name, nums[0], nums[1], nums[2])
        } else {
            Layer::conv(name, nums[0], nums[1], nums[2], nums[3], nums[4], nums[5], nums[6])
        };
        layers.push(layer.map_err(|e| err(line, e.to_string()))?);
    }
    if layers.is_empty() {
        return Err(err(1, "no layers after the header row".into()));
    }
    Ok(layers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv_and_gemm_forms() {
        let text = "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,,,Eh\n,,,,,,,,,,\nConv1,224,224,7,7,3,64,2,,,110\nFC6,1,1,1,1,2048,1000,1\n";
        let l = parse_topology(text, Path::new("t.csv")).unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!((l[0].ofmap_h(), l[0].ofmap_w()), (109, 109));
        assert_eq!(l[0].gemm_dims(), (109 * 109, 64, 147));
        // 224 - 7 = 217 is odd: SCALE-Sim counts a 110th window off the edge.
        assert_eq!(l[0].gemm_dims_scalesim(), (110 * 110, 64, 147));
        assert_eq!(l[1].gemm_dims_scalesim(), l[1].gemm_dims());
        assert_eq!(l[1].gemm_dims(), (1, 1000, 2048));
        let g = parse_topology("Layer, M, N, K,\nTest 1, 256, 128, 64,\n", Path::new("g.csv")).unwrap();
        assert_eq!(g[0].gemm_dims(), (256, 128, 64));
        assert_eq!(g[0].name, "Test 1");
    }

    #[test]
    fn malformed_rows_name_file_and_line() {
        let h = "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n";
        let e = parse_topology(&format!("{h}a,8,8,3,3,4,4,1,\nb,8,8,3,3,4\n"), Path::new("t.csv")).unwrap_err().to_string();
        assert_eq!(e, "t.csv:3: expected 8 fields (Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides), found 6");
        let e = parse_topology(&format!("{h}a,8,x8,3,3,4,4,1,\n"), Path::new("t.csv")).unwrap_err().to_string();
        assert_eq!(e, "t.csv:2: IFMAP Width: expected a positive integer, found `x8`");
        let e = parse_topology(&format!("{h}a,8,8,3,3,0,4,1,\n"), Path::new("t.csv")).unwrap_err().to_string();
        assert_eq!(e, "t.csv:2: invalid parameter `Channels`: must be between 1 and 16777216, got 0");
        let e = parse_topology(&format!("{h}a,8,8,9,3,1,4,1,\n"), Path::new("t.csv")).unwrap_err().to_string();
        assert!(e.starts_with("t.csv:2: ") && e.contains("larger than the 8x8 IFMAP"), "{e}");
        let e = parse_topology("Layer, M, N, K,\nx, 4, -1, 2,\n", Path::new("g.csv")).unwrap_err().to_string();
        assert_eq!(e, "g.csv:2: N: expected a positive integer, found `-1`");
        assert!(parse_topology(h, Path::new("t.csv")).unwrap_err().to_string().contains("no layers"));
    }
}
