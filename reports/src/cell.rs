//! Values of a result row looked up by key, and how they order and print.
//!
//! A plot key names a parameter first, then a metric. Numbers are numeric
//! (sorted by value); strings, booleans and anything else are categorical
//! (sorted as text, after the numbers).

use std::cmp::Ordering;

use crate::results::ResultRow;

/// One value of one row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Num(f64),
    Text(String),
}

impl Cell {
    /// The value a row has under `key`: its parameter, else its metric.
    pub(crate) fn lookup(row: &ResultRow, key: &str) -> Option<Cell> {
        if let Some(v) = row.params.get(key) {
            return match v {
                serde_json::Value::Null => None,
                serde_json::Value::Number(n) => n.as_f64().map(Cell::Num),
                serde_json::Value::String(s) => Some(Cell::Text(s.clone())),
                other => Some(Cell::Text(other.to_string())),
            };
        }
        row.metrics.get(key).map(|&v| Cell::Num(v))
    }

    pub(crate) fn as_num(&self) -> Option<f64> {
        match self {
            Cell::Num(v) => Some(*v),
            Cell::Text(_) => None,
        }
    }

    /// The exact text of the value, used to group equal values.
    pub(crate) fn label(&self) -> String {
        match self {
            Cell::Num(v) => format!("{v}"),
            Cell::Text(s) => s.clone(),
        }
    }

    /// Numbers first by value, then text, texts equal to each other: a
    /// stable sort keeps them in the order they came, which is sweep order
    /// when the rows come by index (the first sweep axis outermost).
    pub(crate) fn order(&self, other: &Cell) -> Ordering {
        match (self, other) {
            (Cell::Num(a), Cell::Num(b)) => a.total_cmp(b),
            (Cell::Num(_), Cell::Text(_)) => Ordering::Less,
            (Cell::Text(_), Cell::Num(_)) => Ordering::Greater,
            (Cell::Text(_), Cell::Text(_)) => Ordering::Equal,
        }
    }
}

/// The distinct values among `cells`, in plotting order: numbers by value,
/// then texts in the order they first appear.
pub(crate) fn levels<'a>(cells: impl IntoIterator<Item = &'a Cell>) -> Vec<Cell> {
    let mut seen = std::collections::HashSet::new();
    let mut out: Vec<Cell> = Vec::new();
    for c in cells {
        if seen.insert(c.label()) {
            out.push(c.clone());
        }
    }
    out.sort_by(|a, b| a.order(b));
    out
}

/// A number for an axis tick or a table: integers without a fraction, others
/// with four significant digits, very large or small ones in exponent form.
pub(crate) fn format_number(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v == v.trunc() && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let a = v.abs();
    if !(1e-3..1e6).contains(&a) {
        return format!("{v:.3e}");
    }
    let digits = (3 - a.log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Mean, extremes and count of the repeats at one plotted position.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Stat {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Stat {
    /// `None` for no values; NaN values are left out.
    pub(crate) fn of(values: &[f64]) -> Option<Stat> {
        let finite: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
        if finite.is_empty() {
            return None;
        }
        let n = finite.len();
        Some(Stat {
            mean: finite.iter().sum::<f64>() / n as f64,
            min: finite.iter().copied().fold(f64::INFINITY, f64::min),
            max: finite.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            n,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_sort_by_value_before_text_in_first_appearance_order() {
        let cells = [
            Cell::Num(100.0),
            Cell::Text("f32".into()),
            Cell::Num(25.0),
            Cell::Text("bf16".into()),
            Cell::Num(25.0),
            Cell::Text("f32".into()),
            Cell::Text("int8:256".into()),
        ];
        let l: Vec<String> = levels(&cells).iter().map(Cell::label).collect();
        assert_eq!(l, ["25", "100", "f32", "bf16", "int8:256"]);
    }

    #[test]
    fn formats_numbers_for_people() {
        assert_eq!(format_number(50.0), "50");
        assert_eq!(format_number(1234.5678), "1235");
        assert_eq!(format_number(12.3456), "12.35");
        assert_eq!(format_number(0.5), "0.5");
        assert_eq!(format_number(0.0001234), "1.234e-4");
        assert_eq!(format_number(-2.25), "-2.25");
    }

    #[test]
    fn stat_skips_nan() {
        let s = Stat::of(&[1.0, f64::NAN, 3.0, 2.0]).unwrap();
        assert_eq!((s.mean, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(Stat::of(&[f64::NAN]), None);
    }
}
