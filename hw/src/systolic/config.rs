//! Array configuration: SCALE-Sim's architecture knobs (array size, SRAM sizes
//! in KiB, dataflow, DRAM bandwidth in words per cycle) plus a clock and a
//! word size. Read from a SCALE-Sim `.cfg` file or from YAML with the same key
//! names.

use crate::HwError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// Largest array side accepted; beyond this a configuration is a typo.
pub const MAX_ARRAY_DIM: u32 = 4096;

/// Which operand stays in the processing elements while the others stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Dataflow {
    /// Output stationary: each PE accumulates one output.
    Os,
    /// Weight stationary: each PE holds one filter weight.
    Ws,
    /// Input stationary: each PE holds one input (im2col) element.
    Is,
}

/// `os`, `ws` or `is`, in any case (as `FromStr` reads them).
impl schemars::JsonSchema for Dataflow {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Dataflow".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Which operand stays in the processing elements: os (output stationary), ws (weight stationary) or is (input stationary).",
            "type": "string",
            "enum": ["os", "ws", "is", "OS", "WS", "IS"]
        })
    }
}

impl FromStr for Dataflow {
    type Err = HwError;
    fn from_str(s: &str) -> Result<Self, HwError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "os" => Ok(Dataflow::Os),
            "ws" => Ok(Dataflow::Ws),
            "is" => Ok(Dataflow::Is),
            _ => Err(HwError::UnknownDataflow { name: s.into() }),
        }
    }
}

impl TryFrom<String> for Dataflow {
    type Error = HwError;
    fn try_from(s: String) -> Result<Self, HwError> {
        s.parse()
    }
}

impl From<Dataflow> for String {
    fn from(d: Dataflow) -> String {
        d.to_string()
    }
}

impl fmt::Display for Dataflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dataflow::Os => "os",
            Dataflow::Ws => "ws",
            Dataflow::Is => "is",
        })
    }
}

/// One systolic array with its three double-buffered SRAMs and DRAM port.
///
/// YAML keys are SCALE-Sim's (`ArrayHeight`, `ArrayWidth`, `IfmapSramSzkB`,
/// `FilterSramSzkB`, `OfmapSramSzkB`, `Dataflow`, `Bandwidth`) plus flowlab's
/// `WordBytes` (default 1, as in SCALE-Sim) and `ClockMHz` (default 1000).
/// `Bandwidth` is words per cycle on each operand's DRAM interface; leaving it
/// out means unlimited bandwidth (SCALE-Sim's `InterfaceBandwidth: CALC`).
/// `IfmapBandwidth` / `FilterBandwidth` override it for one input operand
/// (the ofmap always uses `Bandwidth`).
///
/// `ScaleSimCompat` (default false; true for a config read from a SCALE-Sim
/// `.cfg` file) reproduces SCALE-Sim's two counting conventions, so that
/// compute cycles equal SCALE-Sim's "Total Cycles" when nothing stalls:
/// a layer's cycle count is the index of its last cycle (one less than the
/// number of cycles), and a strided convolution's output is
/// `ceil((H - F) / S) + 1` wide (a window hanging off the input edge counts).
/// The default mode is the physical one: every cycle counted and the
/// convolution's `floor((H - F) / S) + 1` outputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrayConfig {
    #[serde(rename = "ArrayHeight")]
    pub rows: u32,
    #[serde(rename = "ArrayWidth")]
    pub cols: u32,
    #[serde(rename = "Dataflow")]
    pub dataflow: Dataflow,
    #[serde(rename = "IfmapSramSzkB")]
    pub ifmap_sram_kib: u64,
    #[serde(rename = "FilterSramSzkB")]
    pub filter_sram_kib: u64,
    #[serde(rename = "OfmapSramSzkB")]
    pub ofmap_sram_kib: u64,
    #[serde(rename = "Bandwidth", default)]
    pub dram_words_per_cycle: Option<u64>,
    /// The ifmap operand's DRAM bandwidth when it differs from `Bandwidth`
    /// (SCALE-Sim 3.0.0 takes it from `[layout] IfmapSRAMBankBandwidth`).
    #[serde(rename = "IfmapBandwidth", default, skip_serializing_if = "Option::is_none")]
    pub ifmap_dram_words_per_cycle: Option<u64>,
    /// The filter operand's DRAM bandwidth when it differs from `Bandwidth`
    /// (SCALE-Sim 3.0.0: `[layout] FilterSRAMBankBandwidth`).
    #[serde(rename = "FilterBandwidth", default, skip_serializing_if = "Option::is_none")]
    pub filter_dram_words_per_cycle: Option<u64>,
    #[serde(rename = "WordBytes", default = "default_word_bytes")]
    pub word_bytes: u32,
    #[serde(rename = "ClockMHz", default = "default_clock_mhz")]
    pub clock_mhz: f64,
    #[serde(rename = "ScaleSimCompat", default)]
    pub scalesim_compat: bool,
}

fn default_word_bytes() -> u32 {
    1
}
fn default_clock_mhz() -> f64 {
    1000.0
}

impl ArrayConfig {
    /// An R x C array with generous SRAMs (SCALE-Sim's google.cfg sizes:
    /// 6 MiB ifmap, 6 MiB filter, 2 MiB ofmap) and unlimited DRAM bandwidth.
    pub fn new(rows: u32, cols: u32, dataflow: Dataflow) -> Result<ArrayConfig, HwError> {
        let c = ArrayConfig {
            rows,
            cols,
            dataflow,
            ifmap_sram_kib: 6144,
            filter_sram_kib: 6144,
            ofmap_sram_kib: 2048,
            dram_words_per_cycle: None,
            ifmap_dram_words_per_cycle: None,
            filter_dram_words_per_cycle: None,
            word_bytes: 1,
            clock_mhz: 1000.0,
            scalesim_compat: false,
        };
        c.validate()?;
        Ok(c)
    }

    /// Checks every field; called by all constructors and by the simulators.
    pub fn validate(&self) -> Result<(), HwError> {
        let bad = |parameter: &str, message: String| HwError::InvalidParameter { parameter: parameter.into(), message };
        for (p, v) in [("ArrayHeight", self.rows), ("ArrayWidth", self.cols)] {
            if v == 0 || v > MAX_ARRAY_DIM {
                return Err(bad(p, format!("must be between 1 and {MAX_ARRAY_DIM}, got {v}")));
            }
        }
        for (p, v) in
            [("IfmapSramSzkB", self.ifmap_sram_kib), ("FilterSramSzkB", self.filter_sram_kib), ("OfmapSramSzkB", self.ofmap_sram_kib)]
        {
            if v == 0 || v > 1 << 30 {
                return Err(bad(p, format!("must be between 1 and 2^30 KiB, got {v}")));
            }
        }
        for (p, v) in [
            ("Bandwidth", self.dram_words_per_cycle),
            ("IfmapBandwidth", self.ifmap_dram_words_per_cycle),
            ("FilterBandwidth", self.filter_dram_words_per_cycle),
        ] {
            if v == Some(0) {
                return Err(bad(p, "must be at least 1 word per cycle".into()));
            }
        }
        if !(1..=8).contains(&self.word_bytes) {
            return Err(bad("WordBytes", format!("must be between 1 and 8, got {}", self.word_bytes)));
        }
        if !(self.clock_mhz.is_finite() && self.clock_mhz > 0.0) {
            return Err(bad("ClockMHz", format!("must be positive, got {}", self.clock_mhz)));
        }
        Ok(())
    }

    /// DRAM words per cycle of the ifmap, filter and ofmap interfaces (`None`:
    /// unlimited).
    pub fn dram_bandwidths(&self) -> [Option<u64>; 3] {
        let bw = self.dram_words_per_cycle;
        [self.ifmap_dram_words_per_cycle.or(bw), self.filter_dram_words_per_cycle.or(bw), bw]
    }

    /// Sets one DRAM bandwidth for all three interfaces.
    pub fn set_dram_bandwidth(&mut self, words_per_cycle: Option<u64>) {
        self.dram_words_per_cycle = words_per_cycle;
        self.ifmap_dram_words_per_cycle = None;
        self.filter_dram_words_per_cycle = None;
    }

    /// Words one half of a double-buffered SRAM of `kib` KiB holds.
    pub(crate) fn half_words(&self, kib: u64) -> u64 {
        kib * 1024 / u64::from(self.word_bytes) / 2
    }

    /// Reads a YAML file with the keys documented on the type.
    pub fn from_yaml_file(path: impl AsRef<Path>) -> Result<ArrayConfig, HwError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| HwError::Io { path: path.into(), error })?;
        let c: ArrayConfig =
            serde_saphyr::from_str(&text).map_err(|e| HwError::Yaml { path: path.into(), message: e.to_string() })?;
        c.validate().map_err(|e| HwError::Yaml { path: path.into(), message: e.to_string() })?;
        Ok(c)
    }

    /// Reads a SCALE-Sim `.cfg` (INI) file: `[architecture_presets]` keys, and
    /// `[run_presets] InterfaceBandwidth` (`CALC` means unlimited bandwidth).
    /// Under `USER`, as in SCALE-Sim 3.0.0, the ifmap and filter DRAM
    /// bandwidths are `[layout] IfmapSRAMBankBandwidth` and
    /// `FilterSRAMBankBandwidth` when present, the ofmap's `Bandwidth`.
    /// Keys are case-insensitive and other SCALE-Sim keys are ignored, so
    /// SCALE-Sim's own files load unchanged. Errors name the file and line.
    /// The result has `scalesim_compat` set: a SCALE-Sim file asks for
    /// SCALE-Sim's numbers (clear the field for the physical counts).
    pub fn from_scalesim_cfg(path: impl AsRef<Path>) -> Result<ArrayConfig, HwError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| HwError::Io { path: path.into(), error })?;
        Self::from_scalesim_str(&text, path)
    }

    pub(crate) fn from_scalesim_str(text: &str, path: &Path) -> Result<ArrayConfig, HwError> {
        let err = |line: usize, message: String| HwError::Parse { path: path.into(), line, message };
        let mut section = String::new();
        let mut values: std::collections::HashMap<(String, String), (String, usize)> = Default::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(s) = line.strip_prefix('[') {
                section = s.trim_end_matches(']').trim().to_ascii_lowercase();
                continue;
            }
            let Some(pos) = line.find([':', '=']) else {
                return Err(err(i + 1, format!("expected `key: value` or `key = value`, found `{line}`")));
            };
            let key = line[..pos].trim().to_ascii_lowercase();
            values.insert((section.clone(), key), (line[pos + 1..].trim().to_string(), i + 1));
        }
        let arch = "architecture_presets";
        let get = |key: &str| -> Result<(String, usize), HwError> {
            values.get(&(arch.to_string(), key.to_ascii_lowercase())).cloned().ok_or_else(|| HwError::InvalidValue {
                path: path.into(),
                key: format!("[{arch}] {key}"),
                message: "missing".into(),
            })
        };
        let int = |key: &str| -> Result<u64, HwError> {
            let (v, line) = get(key)?;
            v.parse::<u64>().map_err(|_| err(line, format!("{key}: expected a non-negative integer, found `{v}`")))
        };
        let small = |key: &str| -> Result<u32, HwError> {
            let v = int(key)?;
            u32::try_from(v).map_err(|_| err(get(key).map(|g| g.1).unwrap_or(0), format!("{key}: {v} is too large")))
        };
        let calc = values
            .get(&("run_presets".to_string(), "interfacebandwidth".to_string()))
            .is_some_and(|(v, _)| v.eq_ignore_ascii_case("calc"));
        let dram_words_per_cycle = if calc {
            None
        } else {
            let (v, line) = get("Bandwidth")?;
            // SCALE-Sim allows a comma list (one per operand); the first applies to all.
            let first = v.split(',').next().unwrap_or("").trim();
            Some(first.parse::<u64>().map_err(|_| err(line, format!("Bandwidth: expected words per cycle, found `{v}`")))?)
        };
        let layout_bw = |key: &str| -> Result<Option<u64>, HwError> {
            if calc {
                return Ok(None);
            }
            match values.get(&("layout".to_string(), key.to_ascii_lowercase())) {
                None => Ok(None),
                Some((v, line)) => v
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| err(*line, format!("{key}: expected words per cycle, found `{v}`"))),
            }
        };
        let ifmap_dram_words_per_cycle = layout_bw("IfmapSRAMBankBandwidth")?;
        let filter_dram_words_per_cycle = layout_bw("FilterSRAMBankBandwidth")?;
        let (df, df_line) = get("Dataflow")?;
        let dataflow = df.parse::<Dataflow>().map_err(|e| err(df_line, e.to_string()))?;
        let c = ArrayConfig {
            rows: small("ArrayHeight")?,
            cols: small("ArrayWidth")?,
            dataflow,
            ifmap_sram_kib: int("IfmapSramSzkB")?,
            filter_sram_kib: int("FilterSramSzkB")?,
            ofmap_sram_kib: int("OfmapSramSzkB")?,
            dram_words_per_cycle,
            ifmap_dram_words_per_cycle,
            filter_dram_words_per_cycle,
            word_bytes: 1,
            clock_mhz: 1000.0,
            scalesim_compat: true,
        };
        c.validate().map_err(|e| HwError::Yaml { path: path.into(), message: e.to_string() })?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataflow_names() {
        assert_eq!("WS".parse::<Dataflow>().unwrap(), Dataflow::Ws);
        assert_eq!("xs".parse::<Dataflow>().unwrap_err().to_string(), "unknown dataflow `xs`; valid dataflows: os, ws, is");
    }

    #[test]
    fn scalesim_cfg_loads_and_reports_lines() {
        let text = "[general]\nrun_name = x\n\n[architecture_presets]\nArrayHeight:    32\nArrayWidth:     16\nIfmapSramSzkB:   64\nFilterSramSzkB:  64\nOfmapSramSzkB:   32\nIfmapOffset:    0\nBandwidth : 10\nDataflow : ws\n\n[run_presets]\nInterfaceBandwidth: USER\n";
        let c = ArrayConfig::from_scalesim_str(text, Path::new("a.cfg")).unwrap();
        assert_eq!((c.rows, c.cols, c.dataflow, c.ofmap_sram_kib, c.dram_words_per_cycle), (32, 16, Dataflow::Ws, 32, Some(10)));
        assert!(c.scalesim_compat, "a SCALE-Sim file asks for SCALE-Sim's conventions");
        // SCALE-Sim 3.0.0 feeds the ifmap and filter from the [layout] bank bandwidths.
        let layout = format!("{text}[layout]\nIfmapSRAMBankBandwidth: 3\nFilterSRAMBankBandwidth: 1\n");
        let l = ArrayConfig::from_scalesim_str(&layout, Path::new("a.cfg")).unwrap();
        assert_eq!(l.dram_bandwidths(), [Some(3), Some(1), Some(10)]);
        assert_eq!(c.dram_bandwidths(), [Some(10), Some(10), Some(10)]);
        let e = ArrayConfig::from_scalesim_str(&layout.replace(": 3", ": x"), Path::new("a.cfg")).unwrap_err().to_string();
        assert_eq!(e, "a.cfg:17: IfmapSRAMBankBandwidth: expected words per cycle, found `x`");
        let calc = text.replace("USER", "CALC").replace("Bandwidth : 10\n", "");
        assert_eq!(ArrayConfig::from_scalesim_str(&calc, Path::new("a.cfg")).unwrap().dram_words_per_cycle, None);
        let e = ArrayConfig::from_scalesim_str(&text.replace("ws", "xx"), Path::new("a.cfg")).unwrap_err().to_string();
        assert_eq!(e, "a.cfg:12: unknown dataflow `xx`; valid dataflows: os, ws, is");
        let e = ArrayConfig::from_scalesim_str(&text.replace("16", "sixteen"), Path::new("a.cfg")).unwrap_err().to_string();
        assert_eq!(e, "a.cfg:6: ArrayWidth: expected a non-negative integer, found `sixteen`");
        let e = ArrayConfig::from_scalesim_str(&text.replace("32\nArrayWidth", "100000\nArrayWidth"), Path::new("a.cfg"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ArrayHeight") && e.contains("between 1 and 4096"), "{e}");
    }

    #[test]
    fn yaml_config_rejects_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.yaml");
        std::fs::write(&p, "ArrayHeight: 8\nArrayWidth: 8\nDataflow: os\nIfmapSramSzkB: 4\nFilterSramSzkB: 4\nOfmapSramSzkB: 4\nBandwidth: 2\n").unwrap();
        let c = ArrayConfig::from_yaml_file(&p).unwrap();
        assert_eq!((c.rows, c.dataflow, c.dram_words_per_cycle, c.word_bytes), (8, Dataflow::Os, Some(2), 1));
        assert!(!c.scalesim_compat, "YAML defaults to the physical counts");
        std::fs::write(&p, "ArrayHeight: 8\nArrayWidth: 8\nDataflow: os\nIfmapSramSzkB: 4\nFilterSramSzkB: 4\nOfmapSramSzkB: 4\nScaleSimCompat: true\n").unwrap();
        assert!(ArrayConfig::from_yaml_file(&p).unwrap().scalesim_compat);
        std::fs::write(&p, "ArrayHeight: 8\nArrayWidth: 8\nDataflow: os\nIfmapSramSzkB: 4\nFilterSramSzkB: 4\nOfmapSramSzkB: 4\nArrayDepth: 2\n").unwrap();
        let e = ArrayConfig::from_yaml_file(&p).unwrap_err().to_string();
        assert!(e.contains("c.yaml") && e.contains("ArrayDepth"), "{e}");
        std::fs::write(&p, "ArrayHeight: 0\nArrayWidth: 8\nDataflow: os\nIfmapSramSzkB: 4\nFilterSramSzkB: 4\nOfmapSramSzkB: 4\n").unwrap();
        let e = ArrayConfig::from_yaml_file(&p).unwrap_err().to_string();
        assert!(e.contains("ArrayHeight") && e.contains("got 0"), "{e}");
    }
}
