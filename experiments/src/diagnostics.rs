//! Turns YAML parser errors into one-line messages a person can act on:
//! `file:line:column: what is wrong`, with a "did you mean" for misspelled
//! keys and values.

use serde_saphyr::{Error as YamlError, Location};

use crate::error::ExperimentError;
use crate::suggest::did_you_mean;

/// A YAML error at its place in `origin` (the file name as the user gave it).
pub(crate) fn yaml_error(origin: &str, source: &str, error: &YamlError) -> ExperimentError {
    let location = error.without_snippet().location().unwrap_or(Location::UNKNOWN);
    // the parser stops at the token after a scalar that should have been a
    // map: blame the key that holds it
    if let Some((line, column, ..)) = scalar_for_map(source, error) {
        return ExperimentError::AtLocation { origin: origin.to_string(), line, column, message: yaml_message(source, error) };
    }
    at(origin, location, yaml_message(source, error))
}

/// A `key: scalar` before the error's place whose key takes a map (see
/// [`form_of`]), when the parser expected a map: its line, column, key,
/// value and what it takes.
fn scalar_for_map(source: &str, error: &YamlError) -> Option<(u64, u64, String, String, String)> {
    let error = error.without_snippet();
    if !strip_location(&error.to_string()).contains("expected mapping start") {
        return None;
    }
    let before = error.location()?.line();
    (1..before).rev().find_map(|l| key_value_at(source, l).map(|kv| (l, kv))).and_then(|(l, (k, v))| {
        let column = source.lines().nth(usize::try_from(l).ok()? - 1).map(|t| t.len() - t.trim_start().len() + 1)? as u64;
        form_of(&k).map(|f| (l, column, k, v, f))
    })
}

/// The message of a YAML error, without its location.
pub(crate) fn yaml_message(source: &str, error: &YamlError) -> String {
    let error = error.without_snippet();
    let location = error.location().unwrap_or(Location::UNKNOWN);
    if source.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
        return "the file is empty: an experiment file has `name`, `kind` and `base` (`flowlab list` names the catalog's; \
                experiments/catalog/ holds them to copy)"
            .to_string();
    }
    match error {
        YamlError::SerdeUnknownField { field, expected, .. } => format!(
            "unknown key `{field}`{}{}",
            did_you_mean(field, expected.iter().copied()),
            expected_list(expected)
        ),
        YamlError::SerdeUnknownVariant {
            variant, expected, ..
        } => format!(
            "unknown value `{variant}`{}{}",
            did_you_mean(variant, expected.iter().copied()),
            expected_list(expected)
        ),
        YamlError::SerdeMissingField { field, .. } => format!("missing key `{field}`"),
        YamlError::SerdeInvalidType {
            unexpected,
            expected,
            ..
        } => match key_value_at(source, location.line()).and_then(|(k, v)| form_of(&k).map(|f| (k, v, f))) {
            Some((key, value, form)) => format!("`{key}: {value}`: `{key}` takes {form}"),
            None => format!("wrong type: expected {expected}, found {unexpected}"),
        },
        YamlError::SerdeInvalidValue {
            unexpected,
            expected,
            ..
        } => format!("invalid value: expected {expected}, found {unexpected}"),
        YamlError::InvalidScalar { ty, .. } => match (source_text(source, location), key_at(source, location)) {
            (Some(text), _) => format!("wrong type: expected {}, found `{text}`{}", type_name(ty), as_integer(ty, text)),
            (None, Some(key)) => format!("`{key}` is empty: give it {}", type_name(ty)),
            (None, None) => format!("wrong type: expected {}, found nothing", type_name(ty)),
        },
        YamlError::DuplicateMappingKey { key: Some(key), .. } => format!("duplicate key `{key}`"),
        other => {
            let message = strip_location(&other.to_string());
            if message.contains("cannot deserialize null") {
                match key_at(source, location) {
                    Some(key) => format!("`{key}` is empty: give it a value"),
                    None => "a value is missing here".to_string(),
                }
            } else if message.starts_with("budget breached: Depth") {
                format!(
                    "the file nests maps and lists deeper than {MAX_DEPTH} levels; an experiment file needs a few \
                     (is a bracket unclosed, or was a generated file meant to be flatter?)"
                )
            } else if let Some((.., key, value, form)) = scalar_for_map(source, &other) {
                format!("`{key}: {value}`: `{key}` takes {form}")
            } else if message.starts_with("budget breached") {
                format!("the file is too large or complex to read safely ({message})")
            } else {
                message
            }
        }
    }
}

/// What a key takes, where the parser's words ("internally tagged enum",
/// "expected mapping start") do not say.
fn form_of(key: &str) -> Option<String> {
    match key {
        "straggler" => {
            let dists = flowlab_sim::cluster::Straggler::DISTS;
            let (last, rest) = dists.split_last()?;
            Some(format!(
                "a map naming its `dist`: {} or {last}, e.g. `{{ dist: lognormal, sigma: 0.3 }}` (absent: none)",
                rest.join(", ")
            ))
        }
        "strategy" => Some("a map naming one strategy: `{ sync: { backup: 0 } }`, `{ async: {} }` or `{ sync_groups: { groups: 2 } }`".into()),
        _ => None,
    }
}

/// `key` and its scalar `value` written on line `line` (1-based), if that
/// line is a `key: value` with a value.
fn key_value_at(source: &str, line: u64) -> Option<(String, String)> {
    let text = source.lines().nth(usize::try_from(line).ok()?.checked_sub(1)?)?;
    let (key, value) = text.split_once(':')?;
    let key = key.trim().trim_start_matches("- ").trim();
    let value = value.split('#').next().unwrap_or("").trim();
    (!key.is_empty() && !value.is_empty() && !key.contains(' ')).then(|| (key.to_string(), value.to_string()))
}

/// For a whole number written as a float where an integer is expected
/// (`25.6e6`): how to write it.
fn as_integer(ty: &str, text: &str) -> String {
    let unsigned = matches!(ty, "u8" | "u16" | "u32" | "u64" | "usize");
    let integer = unsigned || matches!(ty, "i8" | "i16" | "i32" | "i64" | "isize");
    match text.parse::<f64>() {
        // only a float spelling of a whole number the type holds
        Ok(v) if integer && text.parse::<i64>().is_err() && v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e15 && (v >= 0.0 || !unsigned) => {
            format!(" (write it as {v:.0})")
        }
        _ => String::new(),
    }
}

/// The dotted parameter a kind's validation message names
/// ("invalid parameter `network.link_gbps`: ...").
pub(crate) fn named_parameter(message: &str) -> Option<&str> {
    let rest = message.split_once("invalid parameter `")?.1;
    rest.split_once('`').map(|(p, _)| p)
}

/// The line and column of the dotted `path` inside the block map whose
/// first key is at `first` (line and column, 1-based; e.g. `base:`'s
/// value): each segment a `key:` deeper than the one before, on its own
/// line or inside a one-line `{ ... }`.
pub(crate) fn locate(source: &str, first: (u64, u64), path: &str) -> Option<(u64, u64)> {
    let lines: Vec<&str> = source.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let start = usize::try_from(first.0).ok()?.checked_sub(1)?;
    // the block's keys sit at the first key's column
    let (mut from, mut depth) = (start, usize::try_from(first.1).ok()?.checked_sub(2)?);
    let segments: Vec<&str> = path.split('.').collect();
    for (k, seg) in segments.iter().enumerate() {
        let mut found = None;
        for (i, l) in lines.iter().enumerate().skip(from) {
            let t = l.trim_start();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            if indent(l) <= depth {
                break;
            }
            if t.strip_prefix(seg).is_some_and(|r| r.starts_with(':')) {
                found = Some(i);
                break;
            }
        }
        let i = found?;
        let line = lines[i];
        // the rest of the path inside a flow map on this line, in order
        let inline = segments[k + 1..].iter().try_fold(indent(line), |col, rest| line[col..].find(&format!("{rest}:")).map(|c| c + col));
        if let Some(col) = inline {
            return Some((i as u64 + 1, col as u64 + 1));
        }
        (from, depth) = (i + 1, indent(line));
    }
    None
}

/// The parser's nesting limit (serde-saphyr's default budget).
const MAX_DEPTH: u32 = 64;

/// The key of a `key:` whose value is at (or, when empty, ends just before)
/// `location`: the text before the colon on that line.
fn key_at(source: &str, location: Location) -> Option<String> {
    let line = source.lines().nth(usize::try_from(location.line()).ok()?.checked_sub(1)?)?;
    let (key, value) = line.split_once(':')?;
    let key = key.trim().trim_start_matches("- ").trim();
    let value = value.split('#').next().unwrap_or("").trim();
    (!key.is_empty() && value.is_empty() && !key.contains(' ')).then(|| key.to_string())
}

/// An error at a known location of the experiment file.
pub(crate) fn at(origin: &str, location: Location, message: String) -> ExperimentError {
    ExperimentError::AtLocation {
        origin: origin.to_string(),
        line: location.line(),
        column: location.column(),
        message,
    }
}

fn expected_list(expected: &[&str]) -> String {
    if expected.is_empty() {
        String::new()
    } else {
        format!(" (expected one of: {})", expected.join(", "))
    }
}

/// Rust's primitive names, as a person would say them.
fn type_name(ty: &str) -> String {
    match ty {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a non-negative integer".into(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "an integer".into(),
        "f32" | "f64" => "a number".into(),
        "bool" => "true or false".into(),
        other => other.to_string(),
    }
}

/// The source text the location's span covers, if it is a short scalar.
fn source_text(source: &str, location: Location) -> Option<&str> {
    let span = location.span();
    let start = usize::try_from(span.byte_offset()?).ok()?;
    let len = usize::try_from(span.byte_len()?).ok()?;
    let text = source.get(start..start.checked_add(len)?)?;
    (!text.is_empty() && text.len() <= 80 && !text.contains('\n')).then_some(text)
}

/// The parser's own message ends with " at line L, column C"; the location
/// is already in front of ours.
fn strip_location(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

/// Parses YAML the way every experiment file is parsed: YAML 1.2 booleans
/// only, so `y`, `on` or `no` stay strings (a dataflow named `os`, a sweep
/// over `[x, y]`) instead of turning into booleans.
pub(crate) fn parse_yaml<'de, T: serde::Deserialize<'de>>(text: &'de str) -> Result<T, YamlError> {
    serde_saphyr::from_str_with_options(text, serde_saphyr::options! { strict_booleans: true })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dotted_parameter_is_found_on_its_line_in_block_and_flow_maps() {
        let text = "name: x\nbase:\n  model: m\n  network:\n    topology: fat_tree\n    link_gbps: -1\n  strategy: { sync: { backup: 9 } }\n  ps: 0\nsweep:\n  ps: [1]\n";
        let base = (3, 3);
        assert_eq!(locate(text, base, "network.link_gbps"), Some((6, 5)));
        assert_eq!(locate(text, base, "strategy.sync.backup"), Some((7, 23)));
        assert_eq!(locate(text, base, "ps"), Some((8, 3)), "base's own `ps`, not the sweep's");
        assert_eq!(locate(text, base, "network.dims"), None);
        assert_eq!(locate(text, base, "steps"), None);
        assert_eq!(named_parameter("invalid parameter `network.link_gbps`: must be"), Some("network.link_gbps"));
        assert_eq!(named_parameter("something else"), None);
    }

    #[test]
    fn only_a_whole_number_the_type_holds_gets_its_integer_spelling() {
        assert_eq!(as_integer("u64", "25.6e6"), " (write it as 25600000)");
        assert_eq!(as_integer("u64", "1e3"), " (write it as 1000)");
        assert_eq!(as_integer("u64", "2.5"), "");
        assert_eq!(as_integer("u64", "-1"), "");
        assert_eq!(as_integer("u64", "-1e3"), "");
        assert_eq!(as_integer("i64", "-1e3"), " (write it as -1000)");
        assert_eq!(as_integer("f64", "1e3"), "");
    }
}
