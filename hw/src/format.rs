//! Communication number formats: how tensors are packed when they cross a
//! device or machine boundary. The engine's Send/Recv path encodes with this
//! type and the simulator counts the same bytes, so a quantized transfer costs
//! in simulation exactly what it costs for real.

use crate::HwError;
use std::fmt;

use half::slice::HalfFloatSliceExt;
use std::str::FromStr;

/// A wire format for f32 tensors.
///
/// `Int8 { block }` is linear symmetric quantization with one f32 scale per
/// `block` consecutive elements (`None`: one scale for the whole tensor). The
/// encoding is `[scale: f32 LE][block values: i8]` repeated per block. Finite
/// values use the codes -126..=126 (step = scale = max|x| / 126, rounded up
/// so that no finite value clamps); the three remaining codes carry the
/// non-finite values through the wire: 127 is +inf, -127 is -inf and -128 is
/// NaN. The scale is computed from the finite values only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommFormat {
    F32,
    F16,
    /// TensorFlow's bfloat16: the high 16 bits of the f32 (truncation).
    Bf16,
    Int8 { block: Option<u32> },
}

const VALID: &str = "f32, f16, bf16, int8, int8:<block>";

/// Largest int8 code used for finite values.
const INT8_LEVELS: f64 = 126.0;
const INT8_POS_INF: i8 = 127;
const INT8_NEG_INF: i8 = -127;
const INT8_NAN: i8 = -128;
/// f16 rounds every |x| >= 65520 (half-way between 65504 and 2^16) to infinity.
const F16_OVERFLOW: f32 = 65520.0;
/// f16 rounds every |x| <= 2^-25 (half the smallest subnormal) to zero.
const F16_UNDERFLOW: f32 = f32::from_bits(0x3300_0000);

/// What a wire format does to the values of one tensor beyond rounding: the
/// non-finite values it carries (NaN and infinities survive every format, so
/// a NaN gradient arrives as NaN) and the finite values it cannot represent.
/// Loss-scaling users check `overflow` to lower the loss scale and
/// `underflow` to raise it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WireCensus {
    /// NaN inputs (decoded as NaN).
    pub nan: u64,
    /// ±infinity inputs (decoded as the same infinity).
    pub inf: u64,
    /// Finite inputs decoded as ±infinity (f16: |x| >= 65520).
    pub overflow: u64,
    /// Non-zero finite inputs decoded as zero (f16: |x| <= 2^-25; bf16:
    /// |x| < 2^-133; int8: |x| below half a step of the block's scale).
    pub underflow: u64,
}

impl WireCensus {
    /// Adds the counts of `other` (e.g. the next tensor of a step).
    pub fn add(&mut self, other: WireCensus) {
        self.nan += other.nan;
        self.inf += other.inf;
        self.overflow += other.overflow;
        self.underflow += other.underflow;
    }

    /// NaN and infinite inputs together.
    pub fn non_finite(&self) -> u64 {
        self.nan + self.inf
    }
}

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

    /// The relative part of [`CommFormat::round_trip_bound`]: a fraction of
    /// |x| for the float formats, of the block's largest finite |x| for int8.
    pub fn relative_error_bound(self) -> f64 {
        match self {
            CommFormat::F32 => 0.0,
            CommFormat::F16 => 2f64.powi(-11),
            CommFormat::Bf16 => 2f64.powi(-7),
            CommFormat::Int8 { .. } => 1.0 / (2.0 * INT8_LEVELS) + 2f64.powi(-22),
        }
    }

    /// Bound on the round-trip error `|decode(encode(x)) - x|` for one value
    /// `x` whose block's largest finite magnitude is `block_max_abs` (used by
    /// int8 only). Holds for every f32, subnormals and f32::MAX included:
    ///
    /// * non-finite `x`: 0 (NaN decodes as NaN, ±inf as the same infinity).
    /// * f32: 0 (exact).
    /// * f16: max(2^-11 |x|, 2^-25) (round to nearest, 10 fraction bits; the
    ///   absolute term covers f16 subnormals); |x| >= 65520 overflows to
    ///   infinity: the bound is infinite and [`CommFormat::census`] counts it.
    /// * bf16: max(2^-7 |x|, 2^-133) (truncation keeps 7 fraction bits; the
    ///   absolute term covers f32 subnormals, whose low 16 bits are dropped).
    /// * int8: (1/252 + 2^-22) max|x| + 2^-149: half a quantization step
    ///   (max|x|/126), plus the f32 rounding of the scale and of the decoded
    ///   value, plus one subnormal step when the scale itself is subnormal.
    pub fn round_trip_bound(self, x: f32, block_max_abs: f32) -> f64 {
        if !x.is_finite() {
            return 0.0;
        }
        let ax = f64::from(x.abs());
        match self {
            CommFormat::F32 => 0.0,
            CommFormat::F16 if x.abs() >= F16_OVERFLOW => f64::INFINITY,
            CommFormat::F16 => (ax * self.relative_error_bound()).max(2f64.powi(-25)),
            CommFormat::Bf16 => (ax * self.relative_error_bound()).max(2f64.powi(-133)),
            CommFormat::Int8 { .. } => {
                f64::from(block_max_abs.abs()) * self.relative_error_bound() + 2f64.powi(-149)
            }
        }
    }

    /// Counts the non-finite values of `values` and the finite ones this
    /// format turns into infinity or zero (see [`WireCensus`]). Equal to
    /// comparing `values` with `decode(encode(values))`, without encoding.
    pub fn census(self, values: &[f32]) -> WireCensus {
        let mut c = WireCensus::default();
        let mut count = |v: f32, zero: &dyn Fn(f32) -> bool| {
            if v.is_nan() {
                c.nan += 1;
            } else if v.is_infinite() {
                c.inf += 1;
            } else if self == CommFormat::F16 && v.abs() >= F16_OVERFLOW {
                c.overflow += 1;
            } else if v != 0.0 && zero(v) {
                c.underflow += 1;
            }
        };
        match self {
            CommFormat::F32 => values.iter().for_each(|v| count(*v, &|_| false)),
            CommFormat::F16 => values.iter().for_each(|v| count(*v, &|v| v.abs() <= F16_UNDERFLOW)),
            CommFormat::Bf16 => values.iter().for_each(|v| count(*v, &|v| bf16_truncate(v) & 0x7fff == 0)),
            CommFormat::Int8 { block } => {
                let b = block.map_or(values.len().max(1), |b| b.max(1) as usize);
                for chunk in values.chunks(b) {
                    let scale = int8_scale(chunk);
                    chunk.iter().for_each(|v| count(*v, &|v| int8_quantize(v, scale) == 0));
                }
            }
        }
        c
    }

    /// Encodes `values` into `bytes_for(values.len())` bytes (little endian).
    /// NaN and infinities survive every format (see [`CommFormat::Int8`] for
    /// their int8 codes).
    pub fn encode(self, values: &[f32]) -> Vec<u8> {
        // Each format is one tight loop over a sized buffer, so that it
        // vectorizes: this runs on the sender for every transfer.
        let mut out = vec![0u8; self.bytes_for(values.len() as u64) as usize];
        match self {
            CommFormat::F32 => {
                for (o, v) in out.chunks_exact_mut(4).zip(values) {
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            CommFormat::F16 => {
                let mut halves = vec![half::f16::ZERO; values.len()];
                halves.convert_from_f32_slice(values);
                for (o, h) in out.chunks_exact_mut(2).zip(&halves) {
                    o.copy_from_slice(&h.to_le_bytes());
                }
            }
            CommFormat::Bf16 => {
                for (o, v) in out.chunks_exact_mut(2).zip(values) {
                    o.copy_from_slice(&bf16_truncate(*v).to_le_bytes());
                }
            }
            CommFormat::Int8 { block } => {
                let b = block.map_or(values.len().max(1), |b| b.max(1) as usize);
                for (chunk, o) in values.chunks(b).zip(out.chunks_mut(b + 4)) {
                    let scale = int8_scale(chunk);
                    o[..4].copy_from_slice(&scale.to_le_bytes());
                    int8_quantize_into(chunk, scale, &mut o[4..]);
                }
            }
        }
        out
    }

    /// Decodes bytes produced by [`CommFormat::encode`]. An int8 scale that is
    /// NaN, infinite or negative (which `encode` never writes) is an error
    /// naming the block.
    pub fn decode(self, bytes: &[u8]) -> Result<Vec<f32>, HwError> {
        let bad = |reason: String| HwError::Decode { format: self.to_string(), reason };
        match self {
            CommFormat::F32 | CommFormat::F16 | CommFormat::Bf16 => {
                let w = (self.bits() / 8) as usize;
                if bytes.len() % w != 0 {
                    return Err(bad(format!("{} bytes is not a multiple of {w}", bytes.len())));
                }
                let mut out = vec![0f32; bytes.len() / w];
                match self {
                    CommFormat::F32 => {
                        for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                            *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                        }
                    }
                    CommFormat::F16 => {
                        let halves: Vec<half::f16> = bytes
                            .chunks_exact(2)
                            .map(|c| half::f16::from_le_bytes([c[0], c[1]]))
                            .collect();
                        halves.convert_to_f32_slice(&mut out);
                    }
                    _ => {
                        for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                            *o = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
                        }
                    }
                }
                Ok(out)
            }
            CommFormat::Int8 { block } => {
                let mut out = Vec::with_capacity(bytes.len());
                let mut rest = bytes;
                let mut index = 0usize;
                while !rest.is_empty() {
                    if rest.len() < 5 {
                        return Err(bad(format!("truncated block: {} trailing bytes", rest.len())));
                    }
                    let scale = f32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
                    if !scale.is_finite() || scale < 0.0 {
                        return Err(bad(format!(
                            "block {index} (byte {}) has scale {scale}; a scale must be finite and non-negative",
                            bytes.len() - rest.len()
                        )));
                    }
                    let n = block.map_or(rest.len() - 4, |b| (b.max(1) as usize).min(rest.len() - 4));
                    let start = out.len();
                    out.resize(start + n, 0.0);
                    int8_dequantize_into(&rest[4..4 + n], scale, &mut out[start..]);
                    rest = &rest[4 + n..];
                    index += 1;
                }
                Ok(out)
            }
        }
    }
}

/// The int8 scale of one block: its largest finite |x| over 126, rounded up
/// to the next f32 so that no finite value of the block exceeds 126 steps
/// (never zero: a subnormal block gets at least the smallest subnormal).
fn int8_scale(chunk: &[f32]) -> f32 {
    // Eight running maxima, branch-free, so that the loop vectorizes; NaN
    // and infinities never win the comparison (the order of a max is free).
    #[inline(always)]
    fn keep(m: f32, v: f32) -> f32 {
        let a = v.abs();
        let a = if a < f32::INFINITY { a } else { 0.0 };
        if a > m { a } else { m }
    }
    let (rows, rest) = chunk.as_chunks::<8>();
    let lanes = crate::simd::vectorized(#[inline(always)] || {
        let mut lanes = [0f32; 8];
        for row in rows {
            for j in 0..8 {
                lanes[j] = keep(lanes[j], row[j]);
            }
        }
        lanes
    });
    let max_abs = rest.iter().fold(lanes.iter().fold(0f32, |m, v| keep(m, *v)), |m, v| keep(m, *v));
    if max_abs == 0.0 {
        return 1.0;
    }
    let exact = f64::from(max_abs) / INT8_LEVELS;
    let s = exact as f32;
    if f64::from(s) < exact { s.next_up() } else { s }
}

/// The code of `v` when it is not finite (NaN, ±inf), else `finite`.
#[inline(always)]
fn int8_code(v: f32, finite: i8) -> i8 {
    if v.is_nan() {
        INT8_NAN
    } else if v == f32::INFINITY {
        INT8_POS_INF
    } else if v == f32::NEG_INFINITY {
        INT8_NEG_INF
    } else {
        finite
    }
}

fn int8_quantize(v: f32, scale: f32) -> i8 {
    // In f64: the quotient of two f32 is exact enough that ties round as
    // the real quotient does, and nothing overflows for f32::MAX.
    let finite = if v.is_finite() { (f64::from(v) / f64::from(scale)).round().clamp(-INT8_LEVELS, INT8_LEVELS) as i8 } else { 0 };
    int8_code(v, finite)
}

/// [`int8_quantize`] over a block, written so that the loop vectorizes:
/// the same codes bit for bit (a unit test holds the two together). Round
/// half away from zero is trunc(q + copysign(0.5 - 2^-54, q)), exact for
/// every f64, as LLVM itself lowers `round`.
fn int8_quantize_into(chunk: &[f32], scale: f32, out: &mut [u8]) {
    const BELOW_HALF: f64 = 0.499_999_999_999_999_94;
    let s = f64::from(scale);
    crate::simd::vectorized(
        #[inline(always)]
        || {
            for (o, &v) in out.iter_mut().zip(chunk) {
                // max/min (not clamp) also turn NaN into a number, replaced below.
                let q = (f64::from(v) / s).max(-127.0).min(127.0);
                // SAFETY: |q + 0.5| <= 127.5 is finite and within i32.
                let r = unsafe { (q + BELOW_HALF.copysign(q)).to_int_unchecked::<i32>() }
                    .clamp(-126, 126) as i8;
                *o = int8_code(v, r) as u8;
            }
        },
    )
}

/// [`int8_dequantize`] over a block: a block has one scale, so a large one
/// is decoded through a table of the 256 codes' values at that scale (bit
/// for bit the definition, one load per value).
fn int8_dequantize_into(codes: &[u8], scale: f32, out: &mut [f32]) {
    if codes.len() < 1024 {
        let s = f64::from(scale);
        let max = f64::from(f32::MAX);
        crate::simd::vectorized(
            #[inline(always)]
            || {
                for (o, &c) in out.iter_mut().zip(codes) {
                    let q = c as i8;
                    let v = (f64::from(q) * s).max(-max).min(max) as f32;
                    let v = if q == INT8_NAN { f32::NAN } else { v };
                    let v = if q == INT8_POS_INF { f32::INFINITY } else { v };
                    *o = if q == INT8_NEG_INF {
                        f32::NEG_INFINITY
                    } else {
                        v
                    };
                }
            },
        );
        return;
    }
    let mut table = [0f32; 256];
    for (c, t) in table.iter_mut().enumerate() {
        *t = int8_dequantize(c as u8 as i8, scale);
    }
    for (o, &c) in out.iter_mut().zip(codes) {
        *o = table[usize::from(c)];
    }
}

fn int8_dequantize(q: i8, scale: f32) -> f32 {
    match q {
        INT8_NAN => f32::NAN,
        INT8_POS_INF => f32::INFINITY,
        INT8_NEG_INF => f32::NEG_INFINITY,
        // The product of a rounded-up scale and 126 can pass f32::MAX by a
        // rounding error; no finite input was larger, so clamp.
        _ => (f64::from(q) * f64::from(scale)).clamp(-f64::from(f32::MAX), f64::from(f32::MAX)) as f32,
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

/// A string such as `f32` or `int8:256` (any case, as `FromStr` reads it).
impl schemars::JsonSchema for CommFormat {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "CommFormat".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "number format of tensors on the wire: f32 | f16 | bf16 | int8 | int8:<block> (one scale per block of values)",
            "type": "string",
            "pattern": "^\\s*([fF]32|[fF]16|[bB][fF]16|[iI][nN][tT]8(:0*[1-9][0-9]*)?)\\s*$"
        })
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
    use proptest::prelude::*;
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
    #[test]
    fn int8_regression_block_from_the_issue_is_within_bound() {
        // Rounding 53.937004 with the f32 scale 100/127 erred beyond the
        // bound before scales were rounded up and quotients taken in f64.
        let f = CommFormat::Int8 { block: None };
        let v = [100.0f32, 53.937004];
        let back = f.decode(&f.encode(&v)).unwrap();
        for (x, y) in v.iter().zip(&back) {
            assert!(f64::from((x - y).abs()) <= f.round_trip_bound(*x, 100.0), "{x} -> {y}");
        }
    }

    #[test]
    fn non_finite_values_survive_every_format() {
        let v = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.5, -3.0, f32::MAX, -f32::MAX];
        for f in ["f32", "f16", "bf16", "int8", "int8:2", "int8:1"] {
            let f: CommFormat = f.parse().unwrap();
            let back = f.decode(&f.encode(&v)).unwrap();
            assert!(back[0].is_nan(), "{f}: NaN -> {}", back[0]);
            assert_eq!(back[1], f32::INFINITY, "{f}");
            assert_eq!(back[2], f32::NEG_INFINITY, "{f}");
            let c = f.census(&v);
            assert_eq!((c.nan, c.inf, c.non_finite()), (1, 2, 3), "{f}");
            if f == CommFormat::F16 {
                // f16 has no f32::MAX: it overflows, and the census says so.
                assert_eq!(back[5], f32::INFINITY);
                assert_eq!(c.overflow, 2);
            } else {
                // bf16 truncates f32::MAX to its own largest finite value; int8
                // decodes it as itself (within the bound), never infinity.
                assert!(back[5].is_finite() && back[6].is_finite(), "{f}: {} {}", back[5], back[6]);
                assert!(back[5] >= f32::MAX * (1.0 - 1.0 / 100.0), "{f}: {}", back[5]);
                assert_eq!(c.overflow, 0, "{f}");
            }
        }
    }

    #[test]
    fn int8_decode_rejects_a_bad_scale() {
        let f = CommFormat::Int8 { block: Some(2) };
        let mut bytes = f.encode(&[1.0, 2.0, 3.0, 4.0]);
        bytes[6..10].copy_from_slice(&f32::NAN.to_le_bytes());
        let e = f.decode(&bytes).unwrap_err().to_string();
        assert_eq!(e, "cannot decode int8:2: block 1 (byte 6) has scale NaN; a scale must be finite and non-negative");
        bytes[6..10].copy_from_slice(&(-1.0f32).to_le_bytes());
        assert!(f.decode(&bytes).unwrap_err().to_string().contains("scale -1"));
        bytes[6..10].copy_from_slice(&f32::INFINITY.to_le_bytes());
        assert!(f.decode(&bytes).unwrap_err().to_string().contains("scale inf"));
    }

    #[test]
    fn f16_and_bf16_edges_match_ieee_rounding() {
        // Independent reference: IEEE half round-to-nearest-even ties.
        let f = CommFormat::F16;
        let back = f.decode(&f.encode(&[65519.0, 65520.0, 2f32.powi(-25), 2f32.powi(-25) * 1.01])).unwrap();
        assert_eq!(back, vec![65504.0, f32::INFINITY, 0.0, 2f32.powi(-24)]);
        // bf16 truncates the smallest f32 subnormal to zero; 2^-133 survives.
        let b = CommFormat::Bf16;
        let back = b.decode(&b.encode(&[f32::from_bits(1), 2f32.powi(-133)])).unwrap();
        assert_eq!(back, vec![0.0, 2f32.powi(-133)]);
        assert_eq!(b.census(&[f32::from_bits(1), 2f32.powi(-133)]).underflow, 1);
    }

    /// Values that break naive quantizers: specials, extremes, subnormals,
    /// rounding ties of f16, plus any f32 at all.
    fn adversarial() -> impl Strategy<Value = f32> {
        prop_oneof![
            3 => proptest::num::f32::ANY,
            1 => proptest::sample::select(vec![
                f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, -f32::MAX, f32::MIN_POSITIVE,
                -f32::MIN_POSITIVE, f32::from_bits(1), -f32::from_bits(1), f32::from_bits(0x007f_ffff),
                0.0, -0.0, 65504.0, 65519.99, 65520.0, 2f32.powi(-24), 2f32.powi(-25), 2f32.powi(-14),
                1.0 + 2f32.powi(-11), 100.0, 53.937004,
            ]),
            1 => -1e6f32..1e6f32,
            1 => (1u32..0x0080_0000).prop_map(f32::from_bits),
        ]
    }

    /// Blocks whose second value sits on (or next to) a tie of the int8
    /// quantization grid of the first.
    fn int8_ties() -> impl Strategy<Value = Vec<f32>> {
        (proptest::num::f32::NORMAL | proptest::num::f32::SUBNORMAL, 0i32..126, -1i32..=1).prop_map(|(max, k, nudge)| {
            let tie = (f64::from(max) / 126.0 * (f64::from(k) + 0.5)) as f32;
            let tie = f32::from_bits((tie.to_bits() as i64 + i64::from(nudge)).max(0) as u32);
            vec![max, tie]
        })
    }

    fn check_bound(f: CommFormat, v: &[f32]) -> Result<(), TestCaseError> {
        let back = f.decode(&f.encode(v)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back.len(), v.len());
        let block = match f {
            CommFormat::Int8 { block: Some(b) } => b as usize,
            _ => v.len().max(1),
        };
        for (chunk, out) in v.chunks(block).zip(back.chunks(block)) {
            let max_abs = chunk.iter().filter(|x| x.is_finite()).fold(0f32, |m, x| m.max(x.abs()));
            for (x, y) in chunk.iter().zip(out) {
                if x.is_nan() {
                    prop_assert!(y.is_nan(), "{}: NaN -> {}", f, y);
                } else if x.is_infinite() {
                    prop_assert_eq!(x, y, "{}", f);
                } else {
                    // Exact in f64: both are f32.
                    let err = (f64::from(*x) - f64::from(*y)).abs();
                    let bound = f.round_trip_bound(*x, max_abs);
                    prop_assert!(err <= bound, "{}: {:e} -> {:e}, err {:e} > bound {:e}", f, x, y, err, bound);
                    if bound.is_finite() {
                        prop_assert!(y.is_finite(), "{}: finite {:e} decoded as {}", f, x, y);
                    }
                }
            }
        }
        // The census equals what the round trip did.
        let mut seen = WireCensus::default();
        for (x, y) in v.iter().zip(&back) {
            match (x.is_nan(), x.is_infinite()) {
                (true, _) => seen.nan += 1,
                (_, true) => seen.inf += 1,
                _ if y.is_infinite() => seen.overflow += 1,
                _ if *x != 0.0 && *y == 0.0 => seen.underflow += 1,
                _ => {}
            }
        }
        prop_assert_eq!(f.census(v), seen, "{}", f);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn round_trip_bound_holds_on_adversarial_blocks(v in proptest::collection::vec(adversarial(), 0..40)) {
            for f in ["f32", "f16", "bf16", "int8", "int8:1", "int8:3", "int8:16"] {
                check_bound(f.parse().unwrap(), &v)?;
            }
        }

        #[test]
        fn int8_bound_holds_on_quantization_ties(v in int8_ties()) {
            check_bound(CommFormat::Int8 { block: None }, &v)?;
        }

        /// The vectorized block kernels give the per-value definitions'
        /// codes and values bit for bit, on ties and on anything at all.
        #[test]
        fn int8_block_kernels_equal_the_per_value_definitions(
            mut v in proptest::collection::vec(adversarial(), 1..40),
            ties in int8_ties(),
            scale_pick in 0usize..4,
        ) {
            v.extend(ties);
            let reference_max = v.iter().filter(|x| x.is_finite()).fold(0f32, |m, x| m.max(x.abs()));
            let scale = int8_scale(&v);
            let expected = if reference_max == 0.0 { 1.0 } else {
                let exact = f64::from(reference_max) / INT8_LEVELS;
                let s = exact as f32;
                if f64::from(s) < exact { s.next_up() } else { s }
            };
            prop_assert_eq!(scale.to_bits(), expected.to_bits());
            // Also at scales the block does not pick, where codes clamp.
            let scale = [scale, 1.0, f32::from_bits(1), 3.5e-3][scale_pick];
            let mut codes = vec![0u8; v.len()];
            int8_quantize_into(&v, scale, &mut codes);
            for (x, c) in v.iter().zip(&codes) {
                prop_assert_eq!(*c as i8, int8_quantize(*x, scale), "{:e} at scale {:e}", x, scale);
            }
        }
    }

    #[test]
    fn int8_dequantize_kernel_equals_the_definition_for_every_code() {
        // Every code once (the direct loop) and four times (the table).
        for n in [256, 1024] {
            let codes: Vec<u8> = (0..n).map(|c| (c % 256) as u8).collect();
            for scale in [
                1.0f32,
                0.0,
                f32::from_bits(1),
                7.25e-3,
                f32::MAX / 100.0,
                f32::MAX,
            ] {
                let mut out = vec![0f32; codes.len()];
                int8_dequantize_into(&codes, scale, &mut out);
                for (c, y) in codes.iter().zip(&out) {
                    let want = int8_dequantize(*c as i8, scale);
                    assert!(
                        y.to_bits() == want.to_bits() || (y.is_nan() && want.is_nan()),
                        "code {c} scale {scale:e}: {y} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn int8_rounds_exact_ties_away_from_zero_and_near_ties_to_nearest() {
        // Scale 1: the code is the value rounded half away from zero.
        let near = |x: f32, up: bool| if up { x.next_up() } else { x.next_down() };
        let v = [
            0.5f32,
            -0.5,
            1.5,
            -1.5,
            2.5,
            125.5,
            -125.5,
            near(0.5, false),
            near(0.5, true),
            near(-2.5, true),
            126.4,
            130.0,
        ];
        let mut codes = vec![0u8; v.len()];
        int8_quantize_into(&v, 1.0, &mut codes);
        let got: Vec<i8> = codes.iter().map(|c| *c as i8).collect();
        assert_eq!(got, vec![1, -1, 2, -2, 3, 126, -126, 0, 1, -2, 126, 126]);
    }
}
