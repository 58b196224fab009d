//! Communication number formats: how tensors are packed when they cross a
//! device or machine boundary. The engine's Send/Recv path encodes with this
//! type and the simulator counts the same bytes, so a quantized transfer costs
//! in simulation exactly what it costs for real.

use crate::HwError;
use std::fmt;
use std::str::FromStr;

/// A wire format for f32 tensors.
///
/// `Int8 { block }` is linear symmetric quantization with one f32 scale per
/// `block` consecutive elements (`None`: one scale for the whole tensor). The
/// encoding is `[scale: f32 LE][block values: i8]` repeated per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommFormat {
    F32,
    F16,
    /// TensorFlow's bfloat16: the high 16 bits of the f32 (truncation).
    Bf16,
    Int8 { block: Option<u32> },
}

const VALID: &str = "f32, f16, bf16, int8, int8:<block>";

impl CommFormat {
    /// Bits per element, not counting int8 scales.
    pub fn bits(self) -> u32 {
        match self {
            CommFormat::F32 => 32,
            CommFormat::F16 | CommFormat::Bf16 => 16,
            CommFormat::Int8 { .. } => 8,
        }
    }

    /// Number of scale factors int8 stores for `elements` values (0 for the
    /// float formats, 0 for an empty tensor).
    pub fn scale_count(self, elements: u64) -> u64 {
        match self {
            CommFormat::Int8 { .. } if elements == 0 => 0,
            CommFormat::Int8 { block: None } => 1,
            CommFormat::Int8 { block: Some(b) } => elements.div_ceil(u64::from(b.max(1))),
            _ => 0,
        }
    }

    /// Exact encoded size of `elements` values, int8 scales included. Equal to
    /// `encode(..).len()`.
    pub fn bytes_for(self, elements: u64) -> u64 {
        elements * u64::from(self.bits() / 8) + 4 * self.scale_count(elements)
    }

    /// Bound on the round-trip error `|decode(encode(x)) - x|`, as a fraction:
    ///
    /// * f32: 0 (exact).
    /// * f16: 2^-11 of |x| (round to nearest, 10 fraction bits) for |x| in
    ///   f16's normal range [2^-14, 65504]; larger values overflow to infinity,
    ///   smaller ones lose relative precision (subnormals).
    /// * bf16: 2^-7 of |x| (truncation keeps 7 fraction bits) for all finite
    ///   normal f32.
    /// * int8: 1/254 of the largest |x| in the value's block (the quantization
    ///   step is max|x|/127 and rounding errs by at most half a step).
    pub fn relative_error_bound(self) -> f64 {
        match self {
            CommFormat::F32 => 0.0,
            CommFormat::F16 => 2f64.powi(-11),
            CommFormat::Bf16 => 2f64.powi(-7),
            CommFormat::Int8 { .. } => 1.0 / 254.0,
        }
    }

    /// Absolute round-trip error bound for one value `x` whose block's largest
    /// magnitude is `block_max_abs` (ignored for the float formats).
    pub fn round_trip_bound(self, x: f32, block_max_abs: f32) -> f64 {
        match self {
            CommFormat::Int8 { .. } => f64::from(block_max_abs) * self.relative_error_bound(),
            _ => f64::from(x.abs()) * self.relative_error_bound(),
        }
    }

    /// Encodes `values` into `bytes_for(values.len())` bytes (little endian).
    /// Int8 maps NaN to 0 and clamps infinities to ±127 steps; its scale is
    /// computed from the finite values only.
    pub fn encode(self, values: &[f32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes_for(values.len() as u64) as usize);
        match self {
            CommFormat::F32 => values.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            CommFormat::F16 => values
                .iter()
                .for_each(|v| out.extend_from_slice(&half::f16::from_f32(*v).to_le_bytes())),
            CommFormat::Bf16 => values.iter().for_each(|v| out.extend_from_slice(&bf16_truncate(*v).to_le_bytes())),
            CommFormat::Int8 { block } => {
                let b = block.map_or(values.len().max(1), |b| b.max(1) as usize);
                for chunk in values.chunks(b) {
                    let max_abs = chunk.iter().filter(|v| v.is_finite()).fold(0f32, |m, v| m.max(v.abs()));
                    let scale = if max_abs > 0.0 { max_abs / 127.0 } else { 1.0 };
                    out.extend_from_slice(&scale.to_le_bytes());
                    for v in chunk {
                        let q = if v.is_nan() { 0.0 } else { (v / scale).round().clamp(-127.0, 127.0) };
                        out.push((q as i8) as u8);
                    }
                }
            }
        }
        out
    }

    /// Decodes bytes produced by [`CommFormat::encode`].
    pub fn decode(self, bytes: &[u8]) -> Result<Vec<f32>, HwError> {
        let bad = |reason: String| HwError::Decode { format: self.to_string(), reason };
        match self {
            CommFormat::F32 | CommFormat::F16 | CommFormat::Bf16 => {
                let w = (self.bits() / 8) as usize;
                if bytes.len() % w != 0 {
                    return Err(bad(format!("{} bytes is not a multiple of {w}", bytes.len())));
                }
                Ok(bytes
                    .chunks_exact(w)
                    .map(|c| match self {
                        CommFormat::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                        CommFormat::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f32(),
                        _ => f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16),
                    })
                    .collect())
            }
            CommFormat::Int8 { block } => {
                let mut out = Vec::with_capacity(bytes.len());
                let mut rest = bytes;
                while !rest.is_empty() {
                    if rest.len() < 5 {
                        return Err(bad(format!("truncated block: {} trailing bytes", rest.len())));
                    }
                    let scale = f32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
                    let n = block.map_or(rest.len() - 4, |b| (b.max(1) as usize).min(rest.len() - 4));
                    out.extend(rest[4..4 + n].iter().map(|q| f32::from(*q as i8) * scale));
                    rest = &rest[4 + n..];
                }
                Ok(out)
            }
        }
    }
}

/// TensorFlow's f32 -> bfloat16 conversion by truncation; NaN stays a quiet NaN.
fn bf16_truncate(v: f32) -> u16 {
    if v.is_nan() { 0x7fc0 } else { (v.to_bits() >> 16) as u16 }
}

impl fmt::Display for CommFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommFormat::F32 => f.write_str("f32"),
            CommFormat::F16 => f.write_str("f16"),
            CommFormat::Bf16 => f.write_str("bf16"),
            CommFormat::Int8 { block: None } => f.write_str("int8"),
            CommFormat::Int8 { block: Some(b) } => write!(f, "int8:{b}"),
        }
    }
}

impl FromStr for CommFormat {
    type Err = HwError;
    fn from_str(s: &str) -> Result<Self, HwError> {
        let name = s.trim().to_ascii_lowercase();
        match name.as_str() {
            "f32" => return Ok(CommFormat::F32),
            "f16" => return Ok(CommFormat::F16),
            "bf16" => return Ok(CommFormat::Bf16),
            "int8" => return Ok(CommFormat::Int8 { block: None }),
            _ => {}
        }
        if let Some(b) = name.strip_prefix("int8:") {
            return match b.parse::<u32>() {
                Ok(0) => Err(HwError::InvalidFormat { name: s.into(), reason: "block size must be at least 1".into() }),
                Ok(b) => Ok(CommFormat::Int8 { block: Some(b) }),
                Err(_) => Err(HwError::InvalidFormat {
                    name: s.into(),
                    reason: format!("block size `{b}` is not a positive integer"),
                }),
            };
        }
        Err(HwError::UnknownFormat { name: s.into(), valid: VALID.into() })
    }
}

impl serde::Serialize for CommFormat {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CommFormat {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn byte_counts_are_exact() {
        assert_eq!(CommFormat::F32.bytes_for(10), 40);
        assert_eq!(CommFormat::F16.bytes_for(10), 20);
        assert_eq!(CommFormat::Bf16.bytes_for(10), 20);
        assert_eq!(CommFormat::Int8 { block: None }.bytes_for(10), 14);
        assert_eq!(CommFormat::Int8 { block: Some(4) }.bytes_for(10), 10 + 3 * 4);
        assert_eq!(CommFormat::Int8 { block: Some(256) }.bytes_for(1024), 1024 + 16);
        assert_eq!(CommFormat::Int8 { block: None }.bytes_for(0), 0);
        let v: Vec<f32> = (0..37).map(|i| i as f32 - 5.0).collect();
        for f in ["f32", "f16", "bf16", "int8", "int8:8", "int8:37", "int8:100"] {
            let f: CommFormat = f.parse().unwrap();
            assert_eq!(f.encode(&v).len() as u64, f.bytes_for(37), "{f}");
            assert_eq!(f.decode(&f.encode(&v)).unwrap().len(), 37, "{f}");
        }
    }

    #[test]
    fn round_trip_error_within_bound_on_random_data() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let v: Vec<f32> = (0..4096).map(|_| rng.random_range(-1000.0f32..1000.0)).collect();
        for f in ["f32", "f16", "bf16", "int8", "int8:64"] {
            let f: CommFormat = f.parse().unwrap();
            let back = f.decode(&f.encode(&v)).unwrap();
            let block = match f {
                CommFormat::Int8 { block: Some(b) } => b as usize,
                _ => v.len(),
            };
            let mut worst = 0f64;
            for (chunk, out) in v.chunks(block).zip(back.chunks(block)) {
                let max_abs = chunk.iter().fold(0f32, |m, x| m.max(x.abs()));
                for (x, y) in chunk.iter().zip(out) {
                    let err = f64::from((x - y).abs());
                    let bound = f.round_trip_bound(*x, max_abs);
                    assert!(err <= bound * (1.0 + 1e-6) + 1e-30, "{f}: {x} -> {y}, err {err} > {bound}");
                    worst = worst.max(if bound > 0.0 { err / bound } else { 0.0 });
                }
            }
            if f != CommFormat::F32 {
                // The bound is tight-ish: the worst case uses a sizeable part of it.
                assert!(worst > 0.2, "{f}: worst error only {worst} of the bound");
            }
        }
    }

    #[test]
    fn bf16_is_truncation_like_tensorflow() {
        // 1 + 2^-7 + 2^-8: truncation drops the 2^-8 bit (rounding would carry).
        let x = 1.0f32 + 2f32.powi(-7) + 2f32.powi(-8);
        let f = CommFormat::Bf16;
        assert_eq!(f.decode(&f.encode(&[x])).unwrap()[0], 1.0 + 2f32.powi(-7));
        assert_eq!(f.encode(&[-2.0]), vec![0x00, 0xc0]);
        assert!(f.decode(&f.encode(&[f32::NAN])).unwrap()[0].is_nan());
    }

    #[test]
    fn names_parse_display_and_serde() {
        for s in ["f32", "f16", "bf16", "int8", "int8:256"] {
            let f: CommFormat = s.parse().unwrap();
            assert_eq!(f.to_string(), s);
            assert_eq!(serde_json::to_string(&f).unwrap(), format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<CommFormat>(&format!("\"{s}\"")).unwrap(), f);
        }
        assert_eq!("int8:256".parse::<CommFormat>().unwrap(), CommFormat::Int8 { block: Some(256) });
        let e = "fp8".parse::<CommFormat>().unwrap_err().to_string();
        assert_eq!(e, "unknown number format `fp8`; valid formats: f32, f16, bf16, int8, int8:<block>");
        let e = "int8:0".parse::<CommFormat>().unwrap_err().to_string();
        assert!(e.contains("block size must be at least 1"), "{e}");
        assert!(serde_json::from_str::<CommFormat>("\"f64\"").unwrap_err().to_string().contains("valid formats"));
    }

    #[test]
    fn truncated_int8_is_an_error() {
        let f = CommFormat::Int8 { block: Some(4) };
        let e = f.decode(&[0, 0, 128, 63]).unwrap_err().to_string();
        assert_eq!(e, "cannot decode int8:4: truncated block: 4 trailing bytes");
        assert!(CommFormat::F16.decode(&[1, 2, 3]).is_err());
    }
}
