//! The `sweep:` section and its expansion into points.
//!
//! ```yaml
//! sweep:
//!   workers: [25, 50]              # an axis: one dotted key, its values
//!   zip:                           # groups whose lists advance together
//!     - { model: [a, b], ps: [1, 2] }
//! ```
//!
//! Axes combine as a cartesian product in the order they are written, the
//! first axis outermost, so point indices are stable for a given file. A zip
//! group is one axis whose i-th value sets every key of the group to its
//! i-th entry.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_saphyr::{Location, Spanned};

/// A sweep key with where it was written.
#[derive(Debug, Clone)]
pub(crate) struct SweepKey {
    pub(crate) key: String,
    pub(crate) location: Location,
}

/// One key's list of values, each with its place in the file.
#[derive(Debug, Clone)]
pub(crate) struct KeyValues {
    pub(crate) key: SweepKey,
    pub(crate) list_location: Location,
    pub(crate) values: Vec<Spanned<Value>>,
}

/// One dimension of the product: a single key, or a zip group.
#[derive(Debug, Clone)]
pub(crate) enum Axis {
    Single(KeyValues),
    Zip { location: Location, members: Vec<KeyValues> },
}

impl Axis {
    pub(crate) fn len(&self) -> usize {
        match self {
            Axis::Single(kv) => kv.values.len(),
            Axis::Zip { members, .. } => members.first().map_or(0, |m| m.values.len()),
        }
    }

    pub(crate) fn members(&self) -> &[KeyValues] {
        match self {
            Axis::Single(kv) => std::slice::from_ref(kv),
            Axis::Zip { members, .. } => members,
        }
    }
}

/// The parsed `sweep:` section, axes in file order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sweep {
    pub(crate) axes: Vec<Axis>,
}

/// One assignment a point makes: a dotted key, its value, and where the value
/// was written (to blame it when the combination is invalid).
#[derive(Debug, Clone)]
pub(crate) struct Assignment<'a> {
    pub(crate) key: &'a SweepKey,
    pub(crate) value: &'a Spanned<Value>,
}

impl Sweep {
    /// Every key the sweep sets, in file order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &KeyValues> {
        self.axes.iter().flat_map(|a| a.members().iter())
    }

    /// The number of points, or `None` if it does not fit in a `u64`.
    pub(crate) fn point_count(&self) -> Option<u64> {
        self.axes
            .iter()
            .try_fold(1u64, |n, axis| n.checked_mul(axis.len() as u64))
    }

    /// The assignments of point `index` (0 <= index < point_count).
    pub(crate) fn point(&self, mut index: u64) -> Vec<Assignment<'_>> {
        let mut choice = vec![0usize; self.axes.len()];
        for (slot, axis) in choice.iter_mut().zip(&self.axes).rev() {
            let n = axis.len() as u64;
            *slot = (index % n) as usize;
            index /= n;
        }
        self.axes
            .iter()
            .zip(choice)
            .flat_map(|(axis, i)| {
                axis.members().iter().map(move |kv| Assignment {
                    key: &kv.key,
                    value: &kv.values[i],
                })
            })
            .collect()
    }
}

impl<'de> Deserialize<'de> for Sweep {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(SweepVisitor)
    }
}

struct SweepVisitor;

impl<'de> Visitor<'de> for SweepVisitor {
    type Value = Sweep;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map from dotted keys to lists of values (and optional `zip` groups)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Sweep, A::Error> {
        let mut axes = Vec::new();
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            if key.value == "zip" {
                let groups: Vec<Spanned<ZipGroup>> = map.next_value()?;
                for group in groups {
                    axes.push(Axis::Zip {
                        location: group.referenced,
                        members: group.value.0,
                    });
                }
            } else {
                let values = map.next_value_seed(ValueList { key: &key.value })?;
                axes.push(Axis::Single(KeyValues {
                    list_location: key.referenced,
                    key: SweepKey {
                        key: key.value,
                        location: key.referenced,
                    },
                    values,
                }));
            }
        }
        Ok(Sweep { axes })
    }
}

/// A sweep key's list of values; anything else is an error that says the
/// values must be a list, naming the key.
struct ValueList<'k> {
    key: &'k str,
}

impl<'de> serde::de::DeserializeSeed<'de> for ValueList<'_> {
    type Value = Vec<Spanned<Value>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueList<'_> {
    type Value = Vec<Spanned<Value>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a list of values for sweep key `{}`", self.key)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut values = Vec::new();
        while let Some(v) = seq.next_element::<Spanned<Value>>()? {
            values.push(v);
        }
        Ok(values)
    }

    fn visit_map<A: MapAccess<'de>>(self, _map: A) -> Result<Self::Value, A::Error> {
        Err(self.not_a_list("a map"))
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Err(self.not_a_list(&v.to_string()))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Err(self.not_a_list(&v.to_string()))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Err(self.not_a_list(&v.to_string()))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Err(self.not_a_list(&v.to_string()))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Err(self.not_a_list(v))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Err(E::custom(format!(
            "sweep key `{}` has no values: give it a list, e.g. `{}: [1, 2]`",
            self.key, self.key
        )))
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.visit_unit()
    }
}

impl ValueList<'_> {
    fn not_a_list<E: serde::de::Error>(&self, found: &str) -> E {
        let example = if found == "a map" { "[{...}, {...}]".to_string() } else { format!("[{found}]") };
        E::custom(format!(
            "sweep values must be a list: write `{}: {example}` (found {found})",
            self.key
        ))
    }
}

/// One `zip` group: keys to lists, in file order.
struct ZipGroup(Vec<KeyValues>);

impl<'de> Deserialize<'de> for ZipGroup {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct GroupVisitor;
        impl<'de> Visitor<'de> for GroupVisitor {
            type Value = ZipGroup;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a zip group: a map from dotted keys to lists of equal length")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ZipGroup, A::Error> {
                let mut members = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    let values = map.next_value_seed(ValueList { key: &key.value })?;
                    members.push(KeyValues {
                        list_location: key.referenced,
                        key: SweepKey {
                            key: key.value,
                            location: key.referenced,
                        },
                        values,
                    });
                }
                Ok(ZipGroup(members))
            }
        }
        deserializer.deserialize_map(GroupVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Holder {
        sweep: Sweep,
    }

    fn parse(text: &str) -> Sweep {
        crate::diagnostics::parse_yaml::<Holder>(text).unwrap().sweep
    }

    fn values(sweep: &Sweep, index: u64) -> Vec<(String, Value)> {
        sweep
            .point(index)
            .into_iter()
            .map(|a| (a.key.key.clone(), a.value.value.clone()))
            .collect()
    }

    #[test]
    fn cartesian_product_first_axis_outermost() {
        let s = parse("sweep:\n  b: [1, 2, 3]\n  a: [x, y]\n");
        assert_eq!(s.point_count(), Some(6));
        let all: Vec<_> = (0..6).map(|i| values(&s, i)).collect();
        assert_eq!(all[0], vec![("b".into(), 1.into()), ("a".into(), "x".into())]);
        assert_eq!(all[1], vec![("b".into(), 1.into()), ("a".into(), "y".into())]);
        assert_eq!(all[5], vec![("b".into(), 3.into()), ("a".into(), "y".into())]);
    }

    #[test]
    fn zip_groups_advance_together() {
        let s = parse("sweep:\n  zip:\n    - { m: [a, b], ps: [1, 2] }\n  w: [10, 20, 30]\n");
        assert_eq!(s.point_count(), Some(6));
        assert_eq!(
            values(&s, 4),
            vec![("m".into(), "b".into()), ("ps".into(), 2.into()), ("w".into(), 20.into())]
        );
        let keys: Vec<&str> = s.keys().map(|k| k.key.key.as_str()).collect();
        assert_eq!(keys, ["m", "ps", "w"]);
    }

    #[test]
    fn empty_sweep_is_one_point_and_locations_are_kept() {
        let s = parse("sweep: {}\n");
        assert_eq!(s.point_count(), Some(1));
        assert!(s.point(0).is_empty());
        let s = parse("sweep:\n  workers: [1, 2]\n");
        let kv = s.keys().next().unwrap();
        assert_eq!((kv.key.location.line(), kv.key.location.column()), (2, 3));
        assert_eq!((kv.values[1].referenced.line(), kv.values[1].referenced.column()), (2, 16));
    }
}
