//! Experiment kinds: what one sweep point is and how it runs. Each kind that
//! exists binds a crate's typed configuration (deserialized from the point's
//! parameter tree, validated before anything runs) to the function that runs
//! it. Kinds named in the schema whose crates have not landed yet are
//! rejected when the file is checked.

mod cluster;
mod distributed;
mod distributed_summary;
mod placement;
mod systolic;
pub(crate) mod validate;
mod validate_split;

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::diagnostics;
use crate::error::ExperimentError;

/// Every kind the schema names, in the order the docs list them.
pub(crate) const ALL_KINDS: &[&str] = &["cluster", "graph", "placement", "systolic", "engine", "validate", "distributed"];

/// What a point gets besides its parameters.
#[derive(Debug, Clone, Default)]
pub(crate) struct PointEnv {
    pub(crate) seed: u64,
    /// How `distributed` points start their cluster's tasks.
    pub(crate) launcher: flowlab_runtime::Launcher,
}

/// What a finished point measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Outcome {
    pub(crate) metrics: BTreeMap<String, f64>,
    pub(crate) series: BTreeMap<String, Vec<f64>>,
}

/// Why a point's parameters are not a valid configuration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PointError {
    /// A key the kind's schema does not have: the key, and a message with
    /// a suggestion.
    UnknownKey { key: String, message: String },
    /// Any other type or shape error.
    Malformed(String),
    /// Well-formed but out of range (the kind's own validation).
    Invalid(String),
}

impl PointError {
    pub(crate) fn message(&self) -> &str {
        match self {
            PointError::UnknownKey { message, .. } | PointError::Malformed(message) | PointError::Invalid(message) => {
                message
            }
        }
    }
}

/// One point, parsed and validated, ready to run.
pub(crate) trait Runnable: Send + Sync {
    fn run(&self, env: &PointEnv) -> Result<Outcome, String>;
    /// The point's whole configuration with every default filled in (and,
    /// where a kind resolves references such as a zoo model, what they
    /// resolved to): what `flowlab check --resolved` prints.
    fn resolved(&self) -> Result<Value, String>;
}

/// An experiment kind.
pub(crate) trait Kind: Sync {
    fn name(&self) -> &'static str;
    /// Type-checks the file's `base:` against the kind's schema, so that
    /// errors point at their line and column in the file.
    fn check_base(&self, origin: &str, text: &str) -> Result<(), ExperimentError>;
    /// The JSON Schema of one point's parameter tree, from the typed
    /// configuration (see `crate::schema`).
    fn point_schema(&self) -> Value;
    /// Parses and validates one point's parameter tree.
    fn prepare(&self, tree: &Value) -> Result<Box<dyn Runnable>, PointError>;
    /// Scalar metrics every successful point reports, in column order.
    fn metric_names(&self) -> Vec<String>;
    /// Per-step sample series a point reports (for CDF plots).
    fn series_names(&self) -> &'static [&'static str];
    /// Dotted paths of externally tagged enums (`strategy: {sync: {...}}`),
    /// whose variant name becomes a parameter of its own.
    fn tag_paths(&self) -> &'static [&'static str];
    /// The settings a plot's subtitle names when they are the same in
    /// every point it draws (see `TypedKind::headline`).
    fn headline(&self) -> &'static [&'static str];
    /// Nested parameters a bare key may mean (see `TypedKind::nested_keys`).
    fn nested_keys(&self) -> &'static [&'static str];
    /// Whether points time real runs, so that they must run one at a time.
    fn exclusive(&self) -> bool;
    /// For kinds that time real runs (never sampled by `check`): the wall
    /// seconds per point the catalog's points of this kind took, lowest and
    /// highest, and where that was measured.
    fn measured_point_s(&self) -> Option<(f64, f64, &'static str)>;
    /// Tables over all of a run's rows for the report's summary section,
    /// and the same as text for the terminal (`None`: the kind has none).
    fn summarize(&self, rows: &[flowlab_reports::ResultRow]) -> Option<(Vec<flowlab_reports::SummaryTable>, String)>;
}

/// The kind named `name`, or a message saying why there is none.
pub(crate) fn lookup(name: &str) -> Result<&'static dyn Kind, String> {
    match name {
        "cluster" => Ok(&cluster::CLUSTER),
        "placement" => Ok(&placement::PLACEMENT),
        "systolic" => Ok(&systolic::SYSTOLIC),
        "validate" => Ok(&validate::VALIDATE),
        "distributed" => Ok(&distributed::DISTRIBUTED),
        _ if ALL_KINDS.contains(&name) => Err(unavailable(name)),
        _ => Err(format!(
            "unknown kind `{name}`{} (expected one of: {})",
            crate::suggest::did_you_mean(name, ALL_KINDS.iter().copied()),
            ALL_KINDS.join(", ")
        )),
    }
}

/// The kinds that can run in this build.
pub(crate) fn available() -> Vec<&'static str> {
    vec!["cluster", "placement", "systolic", "validate", "distributed"]
}

fn unavailable(name: &str) -> String {
    format!(
        "kind `{name}` is not available yet (available: {})",
        available().join(", ")
    )
}

/// Summary tables and the text printed after a sweep, from its rows.
pub(crate) type Summarize = fn(&[flowlab_reports::ResultRow]) -> (Vec<flowlab_reports::SummaryTable>, String);

/// A kind defined by its typed configuration `C` and three functions.
pub(crate) struct TypedKind<C> {
    pub(crate) name: &'static str,
    pub(crate) validate: fn(&C) -> Result<(), String>,
    pub(crate) run: fn(&C, &PointEnv) -> Result<Outcome, String>,
    /// The configuration resolved (see [`Runnable::resolved`]).
    pub(crate) resolve: fn(&C) -> Result<Value, String>,
    pub(crate) metric_names: fn() -> Vec<String>,
    pub(crate) series_names: &'static [&'static str],
    pub(crate) tag_paths: &'static [&'static str],
    /// The settings that say what a plot shows when they are fixed (the
    /// model, the cluster's size, the strategy, stragglers): named in each
    /// plot's subtitle with their resolved values, written or default.
    pub(crate) headline: &'static [&'static str],
    /// Parameters nested in maps that users name bare (`backup` for
    /// `strategy.sync.backup`): the "did you mean" of an unknown sweep key.
    pub(crate) nested_keys: &'static [&'static str],
    pub(crate) exclusive: bool,
    /// See [`Kind::measured_point_s`].
    pub(crate) measured_point_s: Option<(f64, f64, &'static str)>,
    pub(crate) summarize: Option<Summarize>,
}

/// The file with only `base:` typed (other keys are skipped), to get the
/// parser's located errors.
#[derive(serde::Deserialize)]
struct BaseOnly<C> {
    #[serde(rename = "base")]
    _base: C,
}

struct Bound<C> {
    config: C,
    run: fn(&C, &PointEnv) -> Result<Outcome, String>,
    resolve: fn(&C) -> Result<Value, String>,
}

impl<C: Send + Sync> Runnable for Bound<C> {
    fn run(&self, env: &PointEnv) -> Result<Outcome, String> {
        (self.run)(&self.config, env)
    }

    fn resolved(&self) -> Result<Value, String> {
        (self.resolve)(&self.config)
    }
}

/// `model:` of the placement and validate kinds: a zoo name or an ONNX
/// file's path (`model: resnet50`, `model: net.onnx`), or an ONNX file with
/// its batch (`model: { onnx: net.onnx, batch: 8 }`, the cluster kind's
/// form), whose batch binds the file's symbolic batch dimension.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ModelKey {
    Name(String),
    Onnx(OnnxModel),
}

/// `{ onnx: FILE, batch: B }`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OnnxModel {
    /// The ONNX file, relative to where flowlab runs.
    pub(crate) onnx: String,
    /// Examples per step (the file's first symbolic dimension); absent: the
    /// point's `batch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) batch: Option<usize>,
}

impl ModelKey {
    /// The zoo name or the file's path.
    pub(crate) fn path(&self) -> &str {
        match self {
            ModelKey::Name(n) => n,
            ModelKey::Onnx(m) => &m.onnx,
        }
    }

    /// The batch the map form gives, if it gives one.
    pub(crate) fn batch(&self) -> Option<usize> {
        match self {
            ModelKey::Name(_) => None,
            ModelKey::Onnx(m) => m.batch,
        }
    }

    /// The point's batch: the map form's, else the point's own `batch`,
    /// else 32; both given and different is an error naming both.
    pub(crate) fn batch_with(&self, point: Option<usize>) -> Result<usize, String> {
        match (self.batch(), point) {
            (Some(a), Some(b)) if a != b => Err(format!("invalid parameter `batch`: {b}, but `model.batch` says {a}: give it once")),
            (a, b) => Ok(a.or(b).unwrap_or(DEFAULT_BATCH)),
        }
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        if let ModelKey::Onnx(m) = self
            && !m.onnx.ends_with(".onnx")
        {
            return Err(format!("invalid parameter `model.onnx`: `{}` is not an ONNX file (*.onnx)", m.onnx));
        }
        check_model(self.path())
    }
}

/// A serialized point with its batch as it runs (given, from `model`, or
/// the default), for `--resolved` and the report's constants.
pub(crate) fn with_batch(mut v: Value, batch: usize) -> Result<Value, String> {
    if let Some(o) = v.as_object_mut() {
        o.insert("batch".into(), Value::from(batch));
    }
    Ok(v)
}

/// The batch a point without one trains at.
pub(crate) const DEFAULT_BATCH: usize = 32;

impl serde::Serialize for ModelKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ModelKey::Name(n) => s.serialize_str(n),
            ModelKey::Onnx(m) => m.serialize(s),
        }
    }
}

impl<'de> serde::Deserialize<'de> for ModelKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ModelKey;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a zoo model, an ONNX file (*.onnx), or `{ onnx: FILE, batch: B }`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ModelKey, E> {
                Ok(ModelKey::Name(v.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<ModelKey, A::Error> {
                <OnnxModel as serde::Deserialize>::deserialize(serde::de::value::MapAccessDeserializer::new(m)).map(ModelKey::Onnx)
            }
        }
        d.deserialize_any(V)
    }
}

impl schemars::JsonSchema for ModelKey {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ModelKey".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let onnx = generator.subschema_for::<OnnxModel>();
        schemars::json_schema!({
            "description": "a model-zoo graph (mlp, cnn, resnet50, inception_v3, lstm_lm, transformer, transformer_base, gnmt), an ONNX file (*.onnx, relative to where flowlab runs), or `{ onnx: FILE, batch: B }`",
            "anyOf": [{ "type": "string" }, onnx]
        })
    }
}

/// A placer key (kinds `placement` and `validate`): a placer's name,
/// `map:FILE`, or `{ map: FILE }`, a hand-written device map
/// (`flowlab_sim::placement::DeviceMap`), kept as `map:FILE`.
pub(crate) fn placer_key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a placer's name, or `{ map: FILE }` (a device map)")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<String, A::Error> {
            #[derive(serde::Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Map {
                map: String,
            }
            let m = <Map as serde::Deserialize>::deserialize(serde::de::value::MapAccessDeserializer::new(m))?;
            Ok(format!("{}{}", flowlab_sim::placement::MAP_PREFIX, m.map))
        }
    }
    d.deserialize_any(V)
}

/// [`placer_key`] for an optional key.
pub(crate) fn optional_placer_key<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    placer_key(d).map(Some)
}

pub(crate) fn placer_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": format!("a placer ({}), or a hand-written device map: `map:FILE` or `{{ map: FILE }}` (a YAML list of `{{ nodes: GLOB, device: N }}`, first match wins; relative to where flowlab runs)", flowlab_sim::placement::PLACERS.join(", ")),
        "anyOf": [
            { "type": "string" },
            { "type": "object", "properties": { "map": { "type": "string" } }, "required": ["map"], "additionalProperties": false }
        ]
    })
}

/// A placer key names a placer, or a device map that reads and parses.
pub(crate) fn check_placer(key: &str, name: &str) -> Result<(), String> {
    use flowlab_sim::placement::{DeviceMap, MAP_PREFIX, PLACERS};
    if PLACERS.contains(&name) {
        return Ok(());
    }
    if let Some(file) = name.strip_prefix(MAP_PREFIX) {
        return DeviceMap::load(std::path::Path::new(file)).map(|_| ()).map_err(|e| format!("invalid parameter `{key}`: {e}"));
    }
    Err(format!(
        "invalid parameter `{key}`: unknown placer `{name}`{} (valid: {}, or {{ map: FILE }})",
        crate::suggest::did_you_mean(name, PLACERS.iter().copied()),
        PLACERS.join(", ")
    ))
}

/// A model key: a zoo name, or an ONNX file (a path ending in `.onnx`,
/// relative to where flowlab runs) that exists; the file is imported when
/// the point runs.
pub(crate) fn check_model(model: &str) -> Result<(), String> {
    if model.ends_with(".onnx") {
        return match std::fs::metadata(model) {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => Err(format!("invalid parameter `model`: ONNX file `{model}` is not a file")),
            Err(e) => Err(format!("invalid parameter `model`: ONNX file `{model}`: {e}")),
        };
    }
    let models = flowlab_models::zoo::names();
    if models.contains(&model) {
        return Ok(());
    }
    Err(format!(
        "invalid parameter `model`: unknown model `{model}`{} (zoo: {}; or an ONNX file, *.onnx)",
        crate::suggest::did_you_mean(model, models.iter().copied()),
        models.join(", ")
    ))
}

/// A configuration as it deserialized, defaults filled in.
pub(crate) fn serialized<C: serde::Serialize>(config: &C) -> Result<Value, String> {
    serde_json::to_value(config).map_err(|e| e.to_string())
}

impl<C: DeserializeOwned + schemars::JsonSchema + Send + Sync + 'static> Kind for TypedKind<C> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn point_schema(&self) -> Value {
        schemars::schema_for!(C).to_value()
    }

    fn check_base(&self, origin: &str, text: &str) -> Result<(), ExperimentError> {
        diagnostics::parse_yaml::<BaseOnly<C>>(text)
            .map(|_| ())
            .map_err(|e| diagnostics::yaml_error(origin, text, &e))
    }

    fn prepare(&self, tree: &Value) -> Result<Box<dyn Runnable>, PointError> {
        // Straight from the tree when it is valid (no text per point: a
        // million-point sweep is checked without a YAML round trip each);
        // through YAML text when it is not, so that the errors are the
        // parser's structured ones (unknown key with the expected names,
        // wrong scalar type), as for the file itself.
        if let Ok(config) = C::deserialize(tree) {
            (self.validate)(&config).map_err(PointError::Invalid)?;
            return Ok(Box::new(Bound {
                config,
                run: self.run,
                resolve: self.resolve,
            }));
        }
        let yaml = serde_saphyr::to_string(tree).map_err(|e| PointError::Malformed(e.to_string()))?;
        let config: C = diagnostics::parse_yaml(&yaml).map_err(|e| {
            let message = diagnostics::yaml_message(&yaml, &e);
            match e.without_snippet() {
                serde_saphyr::Error::SerdeUnknownField { field, .. } => PointError::UnknownKey {
                    key: field.clone(),
                    message,
                },
                _ => PointError::Malformed(message),
            }
        })?;
        (self.validate)(&config).map_err(PointError::Invalid)?;
        Ok(Box::new(Bound {
            config,
            run: self.run,
            resolve: self.resolve,
        }))
    }

    fn metric_names(&self) -> Vec<String> {
        (self.metric_names)()
    }

    fn series_names(&self) -> &'static [&'static str] {
        self.series_names
    }

    fn tag_paths(&self) -> &'static [&'static str] {
        self.tag_paths
    }

    fn headline(&self) -> &'static [&'static str] {
        self.headline
    }

    fn nested_keys(&self) -> &'static [&'static str] {
        self.nested_keys
    }

    fn exclusive(&self) -> bool {
        self.exclusive
    }

    fn measured_point_s(&self) -> Option<(f64, f64, &'static str)> {
        self.measured_point_s
    }

    fn summarize(&self, rows: &[flowlab_reports::ResultRow]) -> Option<(Vec<flowlab_reports::SummaryTable>, String)> {
        self.summarize.map(|f| f(rows))
    }
}

/// A finished row for the summaries' tests: its parameters and metrics.
#[cfg(test)]
pub(crate) fn test_row(index: u64, params: &[(&str, serde_json::Value)], metrics: &[(&str, f64)]) -> flowlab_reports::ResultRow {
    flowlab_reports::ResultRow {
        index,
        key: index.to_string(),
        seed: 0,
        params: params.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        metrics: metrics.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        series: BTreeMap::new(),
        error: None,
        elapsed_s: 0.0,
    }
}
