//! Turns YAML parser errors into one-line messages a person can act on:
//! `file:line:column: what is wrong`, with a "did you mean" for misspelled
//! keys and values.

use serde_saphyr::{Error as YamlError, Location};

use crate::error::ExperimentError;
use crate::suggest::did_you_mean;

/// A YAML error at its place in `origin` (the file name as the user gave it).
pub(crate) fn yaml_error(origin: &str, source: &str, error: &YamlError) -> ExperimentError {
    let location = error.without_snippet().location().unwrap_or(Location::UNKNOWN);
    at(origin, location, yaml_message(source, error))
}

/// The message of a YAML error, without its location.
pub(crate) fn yaml_message(source: &str, error: &YamlError) -> String {
    let error = error.without_snippet();
    let location = error.location().unwrap_or(Location::UNKNOWN);
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
        } => format!("wrong type: expected {expected}, found {unexpected}"),
        YamlError::SerdeInvalidValue {
            unexpected,
            expected,
            ..
        } => format!("invalid value: expected {expected}, found {unexpected}"),
        YamlError::InvalidScalar { ty, .. } => match (source_text(source, location), key_at(source, location)) {
            (Some(text), _) => format!("wrong type: expected {}, found `{text}`", type_name(ty)),
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
            } else if message.starts_with("budget breached") {
                format!("the file is too large or complex to read safely ({message})")
            } else {
                message
            }
        }
    }
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
