//! Device names in TensorFlow's form and the set of devices a session has.
//!
//! Contract. A [`DeviceName`] is a possibly partial specification
//! `/job:<name>/replica:<n>/task:<n>/device:<TYPE>:<n>`: every field may be
//! left out (or written `*`), which makes it a wildcard. The legacy short
//! form `/cpu:0` (`/gpu:1`, `/cpu:*`) means `/device:CPU:0`. A name whose
//! fields are all set is *full*; the devices of a [`DeviceSet`] are full,
//! a node's requested device is usually partial and is matched against them.
//! `Display` prints the canonical form, and parsing it gives the same value.

use crate::error::{EngineError, Result};
use crate::tensor::DeviceType;
use std::fmt;
use std::str::FromStr;

/// A full or partial device name; `None` fields are wildcards.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceName {
    pub job: Option<String>,
    pub replica: Option<u32>,
    pub task: Option<u32>,
    /// Upper-case device type, e.g. "CPU" or "GPU".
    pub device_type: Option<String>,
    pub id: Option<u32>,
}

fn bad(name: &str, detail: impl Into<String>) -> EngineError {
    EngineError::BadDeviceName { name: name.to_string(), detail: detail.into() }
}

/// Parses a non-negative index or `*` (None).
fn index(name: &str, field: &str, v: &str) -> Result<Option<u32>> {
    if v == "*" {
        return Ok(None);
    }
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(name, format!("{field} '{v}' is not a non-negative integer or '*'")));
    }
    v.parse::<u32>().map(Some).map_err(|_| bad(name, format!("{field} '{v}' is too large")))
}

fn set<T>(name: &str, field: &str, slot: &mut Option<T>, seen: &mut bool, v: Option<T>) -> Result<()> {
    if *seen {
        return Err(bad(name, format!("{field} is given twice")));
    }
    *seen = true;
    *slot = v;
    Ok(())
}

impl DeviceName {
    /// The fully unconstrained specification (matches every device).
    pub fn any() -> DeviceName {
        DeviceName::default()
    }

    /// A full name `/job:<job>/replica:<replica>/task:<task>/device:<ty>:<id>`.
    pub fn full(job: &str, replica: u32, task: u32, device_type: &str, id: u32) -> DeviceName {
        DeviceName {
            job: Some(job.to_string()),
            replica: Some(replica),
            task: Some(task),
            device_type: Some(device_type.to_ascii_uppercase()),
            id: Some(id),
        }
    }

    /// Parses a full or partial name; "" is the unconstrained specification.
    /// Errors quote the string and say which part is wrong.
    pub fn parse(s: &str) -> Result<DeviceName> {
        let mut d = DeviceName::default();
        if s.is_empty() {
            return Ok(d);
        }
        let Some(rest) = s.strip_prefix('/') else {
            return Err(bad(s, "a device name starts with '/'"));
        };
        let (mut sj, mut sr, mut st, mut sd) = (false, false, false, false);
        for part in rest.split('/') {
            if part.is_empty() {
                return Err(bad(s, "empty component (doubled or trailing '/')"));
            }
            let (key, val) = part.split_once(':').ok_or_else(|| bad(s, format!("component '{part}' has no ':'")))?;
            match key {
                "job" => {
                    let v = if val == "*" {
                        None
                    } else {
                        let ok = val.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                            && val.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                        if !ok {
                            return Err(bad(s, format!("job name '{val}' must start with a letter and contain only letters, digits, '_' and '-'")));
                        }
                        Some(val.to_string())
                    };
                    set(s, "job", &mut d.job, &mut sj, v)?;
                }
                "replica" => set(s, "replica", &mut d.replica, &mut sr, index(s, "replica", val)?)?,
                "task" => set(s, "task", &mut d.task, &mut st, index(s, "task", val)?)?,
                "device" => {
                    let (ty, id) = match val.split_once(':') {
                        Some((ty, id)) => (ty, index(s, "device index", id)?),
                        None => (val, None),
                    };
                    let ty = if ty == "*" {
                        None
                    } else {
                        let ok = ty.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                            && ty.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
                        let legacy = ty.eq_ignore_ascii_case("cpu") || ty.eq_ignore_ascii_case("gpu");
                        if !ok && !legacy {
                            return Err(bad(s, format!("device type '{ty}' must be upper case, like CPU or GPU")));
                        }
                        Some(ty.to_ascii_uppercase())
                    };
                    if ty.is_none() && id.is_some() {
                        return Err(bad(s, "a device index needs a device type"));
                    }
                    if sd {
                        return Err(bad(s, "device is given twice"));
                    }
                    sd = true;
                    d.device_type = ty;
                    d.id = id;
                }
                k if k.eq_ignore_ascii_case("cpu") || k.eq_ignore_ascii_case("gpu") => {
                    if sd {
                        return Err(bad(s, "device is given twice"));
                    }
                    sd = true;
                    d.device_type = Some(k.to_ascii_uppercase());
                    d.id = index(s, "device index", val)?;
                }
                k => {
                    return Err(bad(s, format!("unknown component '{k}' (expected job, replica, task, device, cpu or gpu)")));
                }
            }
        }
        Ok(d)
    }

    /// Whether every field is set.
    pub fn is_full(&self) -> bool {
        self.job.is_some() && self.replica.is_some() && self.task.is_some() && self.device_type.is_some() && self.id.is_some()
    }

    /// Whether `self` (normally a full name) satisfies the specification
    /// `spec`: every field `spec` sets has the same value here.
    pub fn matches(&self, spec: &DeviceName) -> bool {
        fn ok<T: PartialEq>(mine: &Option<T>, want: &Option<T>) -> bool {
            want.as_ref().is_none_or(|w| mine.as_ref() == Some(w))
        }
        ok(&self.job, &spec.job)
            && ok(&self.replica, &spec.replica)
            && ok(&self.task, &spec.task)
            && ok(&self.device_type, &spec.device_type)
            && ok(&self.id, &spec.id)
    }

    /// The union of two specifications; a field both set to different
    /// values is an error naming both names (TensorFlow's MergeDevNames).
    pub fn merge(&self, other: &DeviceName) -> Result<DeviceName> {
        fn pick<T: Clone + PartialEq + fmt::Debug>(
            a: &DeviceName,
            b: &DeviceName,
            field: &str,
            x: &Option<T>,
            y: &Option<T>,
        ) -> Result<Option<T>> {
            match (x, y) {
                (Some(p), Some(q)) if p != q => Err(bad(
                    &a.to_string(),
                    format!("cannot merge with '{b}': {field} differs"),
                )),
                (Some(p), _) => Ok(Some(p.clone())),
                (None, q) => Ok(q.clone()),
            }
        }
        Ok(DeviceName {
            job: pick(self, other, "job", &self.job, &other.job)?,
            replica: pick(self, other, "replica", &self.replica, &other.replica)?,
            task: pick(self, other, "task", &self.task, &other.task)?,
            device_type: pick(self, other, "device type", &self.device_type, &other.device_type)?,
            id: pick(self, other, "device index", &self.id, &other.id)?,
        })
    }

    /// This specification completed from `defaults` where it leaves a field
    /// open (the specification wins where both set a field). Completing a
    /// partial request with a session's default job and task gives a full name.
    pub fn with_defaults(&self, defaults: &DeviceName) -> DeviceName {
        DeviceName {
            job: self.job.clone().or_else(|| defaults.job.clone()),
            replica: self.replica.or(defaults.replica),
            task: self.task.or(defaults.task),
            device_type: self.device_type.clone().or_else(|| defaults.device_type.clone()),
            id: if self.device_type.is_some() && self.device_type != defaults.device_type {
                self.id
            } else {
                self.id.or(defaults.id)
            },
        }
    }

    /// The kernel device type this name runs ops with (GPU devices run CUDA
    /// kernels); `None` for a type the engine has no kernels for.
    pub fn kernel_device_type(&self) -> Option<DeviceType> {
        match self.device_type.as_deref() {
            Some("CPU") => Some(DeviceType::Cpu),
            Some("GPU") => Some(DeviceType::Cuda),
            _ => None,
        }
    }
}

impl FromStr for DeviceName {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<DeviceName> {
        DeviceName::parse(s)
    }
}

impl fmt::Display for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(j) = &self.job {
            write!(f, "/job:{j}")?;
        }
        if let Some(r) = self.replica {
            write!(f, "/replica:{r}")?;
        }
        if let Some(t) = self.task {
            write!(f, "/task:{t}")?;
        }
        if let Some(ty) = &self.device_type {
            match self.id {
                Some(i) => write!(f, "/device:{ty}:{i}")?,
                None => write!(f, "/device:{ty}:*")?,
            }
        }
        Ok(())
    }
}

/// The devices a session can place nodes on, in a fixed order: each a full
/// name and the kernel device type it runs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceSet {
    devices: Vec<(DeviceName, DeviceType)>,
}

impl DeviceSet {
    pub fn new() -> DeviceSet {
        DeviceSet::default()
    }

    /// `n` CPU devices of one local process:
    /// `/job:localhost/replica:0/task:0/device:CPU:{0..n}`.
    pub fn local_cpus(n: usize) -> DeviceSet {
        let mut s = DeviceSet::new();
        for i in 0..n {
            s.devices.push((DeviceName::full("localhost", 0, 0, "CPU", i as u32), DeviceType::Cpu));
        }
        s
    }

    /// Adds a device given by its full name (parsed); the type must be CPU or GPU.
    pub fn add(&mut self, name: &str) -> Result<&mut DeviceSet> {
        let d = DeviceName::parse(name)?;
        if !d.is_full() {
            return Err(bad(name, "a device of a device set needs job, replica, task, type and index"));
        }
        let ty = d
            .kernel_device_type()
            .ok_or_else(|| bad(name, format!("device type '{}' has no kernels (use CPU or GPU)", d.device_type.as_deref().unwrap_or(""))))?;
        if self.contains(&d) {
            return Err(bad(name, "device is already in the set"));
        }
        self.devices.push((d, ty));
        Ok(self)
    }

    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    pub fn contains(&self, d: &DeviceName) -> bool {
        self.devices.iter().any(|(n, _)| n == d)
    }

    /// The devices with their kernel types, in set order.
    pub fn devices(&self) -> &[(DeviceName, DeviceType)] {
        &self.devices
    }

    /// The kernel device type of a member.
    pub fn device_type(&self, d: &DeviceName) -> Option<DeviceType> {
        self.devices.iter().find(|(n, _)| n == d).map(|(_, t)| *t)
    }

    /// The members that satisfy `spec`, in set order.
    pub fn matching(&self, spec: &DeviceName) -> Vec<&DeviceName> {
        self.devices.iter().filter(|(n, _)| n.matches(spec)).map(|(n, _)| n).collect()
    }

    /// The names of all members joined by ", " (for error messages).
    pub(crate) fn list(&self) -> String {
        self.devices.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> String {
        DeviceName::parse(s).unwrap_err().to_string()
    }

    #[test]
    fn full_names_round_trip() {
        for s in [
            "/job:worker/replica:0/task:3/device:CPU:1",
            "/job:ps/replica:2/task:0/device:GPU:7",
            "/job:localhost/replica:0/task:0/device:CPU:0",
        ] {
            let d = DeviceName::parse(s).unwrap();
            assert!(d.is_full(), "{s}");
            assert_eq!(d.to_string(), s);
        }
        let d = DeviceName::parse("/job:worker/replica:0/task:3/device:CPU:1").unwrap();
        assert_eq!(d, DeviceName::full("worker", 0, 3, "CPU", 1));
    }

    #[test]
    fn partial_and_legacy_names() {
        let d = DeviceName::parse("/cpu:0").unwrap();
        assert_eq!(d, DeviceName { device_type: Some("CPU".into()), id: Some(0), ..Default::default() });
        assert_eq!(d.to_string(), "/device:CPU:0");
        assert_eq!(DeviceName::parse("/GPU:2").unwrap().to_string(), "/device:GPU:2");
        assert_eq!(DeviceName::parse("/job:worker/task:0/cpu:1").unwrap().to_string(), "/job:worker/task:0/device:CPU:1");
        let w = DeviceName::parse("/device:CPU:*").unwrap();
        assert_eq!(w, DeviceName { device_type: Some("CPU".into()), ..Default::default() });
        assert_eq!(w.to_string(), "/device:CPU:*");
        assert_eq!(DeviceName::parse("/device:GPU").unwrap().to_string(), "/device:GPU:*");
        assert_eq!(DeviceName::parse("/job:ps").unwrap().to_string(), "/job:ps");
        assert_eq!(DeviceName::parse("/job:*/task:*").unwrap(), DeviceName::any());
        assert_eq!(DeviceName::parse("").unwrap(), DeviceName::any());
        assert_eq!(DeviceName::any().to_string(), "");
        // Every canonical form parses back to itself.
        for s in ["/job:ps", "/task:4", "/replica:1/device:CPU:*", "/job:a_b-1/device:TPU:3"] {
            let d = DeviceName::parse(s).unwrap();
            assert_eq!(DeviceName::parse(&d.to_string()).unwrap(), d, "{s}");
        }
    }

    #[test]
    fn malformed_names_say_what_is_wrong() {
        assert_eq!(err("cpu:0"), "invalid device name 'cpu:0': a device name starts with '/'");
        assert_eq!(err("/job:worker//task:0"), "invalid device name '/job:worker//task:0': empty component (doubled or trailing '/')");
        assert_eq!(err("/job:worker/"), "invalid device name '/job:worker/': empty component (doubled or trailing '/')");
        assert_eq!(err("/task:x"), "invalid device name '/task:x': task 'x' is not a non-negative integer or '*'");
        assert_eq!(err("/replica:-1"), "invalid device name '/replica:-1': replica '-1' is not a non-negative integer or '*'");
        assert_eq!(err("/device:CPU:1a"), "invalid device name '/device:CPU:1a': device index '1a' is not a non-negative integer or '*'");
        assert_eq!(err("/device:tpu:0"), "invalid device name '/device:tpu:0': device type 'tpu' must be upper case, like CPU or GPU");
        assert_eq!(err("/job:1x"), "invalid device name '/job:1x': job name '1x' must start with a letter and contain only letters, digits, '_' and '-'");
        assert_eq!(err("/job:a/job:b"), "invalid device name '/job:a/job:b': job is given twice");
        assert_eq!(err("/cpu:0/device:GPU:0"), "invalid device name '/cpu:0/device:GPU:0': device is given twice");
        assert_eq!(err("/host:3"), "invalid device name '/host:3': unknown component 'host' (expected job, replica, task, device, cpu or gpu)");
        assert_eq!(err("/task"), "invalid device name '/task': component 'task' has no ':'");
        assert_eq!(err("/device:*:3"), "invalid device name '/device:*:3': a device index needs a device type");
        assert_eq!(err("/task:99999999999"), "invalid device name '/task:99999999999': task '99999999999' is too large");
    }

    #[test]
    fn matching_merging_and_defaults() {
        let d = DeviceName::full("worker", 0, 3, "CPU", 1);
        for (spec, want) in [
            ("", true),
            ("/job:worker", true),
            ("/job:ps", false),
            ("/device:CPU:*", true),
            ("/cpu:1", true),
            ("/cpu:0", false),
            ("/gpu:1", false),
            ("/job:worker/task:3/device:CPU:1", true),
            ("/task:2", false),
        ] {
            assert_eq!(d.matches(&DeviceName::parse(spec).unwrap()), want, "{spec}");
        }
        let a = DeviceName::parse("/job:worker/task:1").unwrap();
        let b = DeviceName::parse("/device:GPU:0").unwrap();
        assert_eq!(a.merge(&b).unwrap().to_string(), "/job:worker/task:1/device:GPU:0");
        let e = a.merge(&DeviceName::parse("/job:ps").unwrap()).unwrap_err().to_string();
        assert_eq!(e, "invalid device name '/job:worker/task:1': cannot merge with '/job:ps': job differs");
        let base = DeviceName::full("localhost", 0, 0, "CPU", 0);
        assert_eq!(DeviceName::parse("/cpu:1").unwrap().with_defaults(&base).to_string(), "/job:localhost/replica:0/task:0/device:CPU:1");
        // A different device type does not inherit the default's index.
        assert_eq!(DeviceName::parse("/device:GPU").unwrap().with_defaults(&base).to_string(), "/job:localhost/replica:0/task:0/device:GPU:*");
        assert!(DeviceName::parse("/job:ps").unwrap().with_defaults(&base).is_full());
    }

    #[test]
    fn device_sets() {
        let s = DeviceSet::local_cpus(2);
        assert_eq!(s.len(), 2);
        assert_eq!(s.matching(&DeviceName::parse("/cpu:1").unwrap()), vec![&DeviceName::full("localhost", 0, 0, "CPU", 1)]);
        assert_eq!(s.matching(&DeviceName::parse("/device:CPU:*").unwrap()).len(), 2);
        let mut s = DeviceSet::new();
        s.add("/job:worker/replica:0/task:0/device:GPU:0").unwrap().add("/job:worker/replica:0/task:0/device:CPU:0").unwrap();
        assert_eq!(s.device_type(&DeviceName::full("worker", 0, 0, "GPU", 0)), Some(DeviceType::Cuda));
        let e = s.add("/cpu:0").unwrap_err().to_string();
        assert_eq!(e, "invalid device name '/cpu:0': a device of a device set needs job, replica, task, type and index");
        let e = s.add("/job:w/replica:0/task:0/device:TPU:0").unwrap_err().to_string();
        assert_eq!(e, "invalid device name '/job:w/replica:0/task:0/device:TPU:0': device type 'TPU' has no kernels (use CPU or GPU)");
        let e = s.add("/job:worker/replica:0/task:0/device:CPU:0").unwrap_err().to_string();
        assert!(e.ends_with("device is already in the set"), "{e}");
    }
}
