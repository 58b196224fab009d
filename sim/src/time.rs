//! Simulated time: an integer count of picoseconds, so runs repeat exactly.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A point in (or span of) simulated time, in picoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SimTime(pub u64);

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);
    pub const MAX: SimTime = SimTime(u64::MAX);
    pub const PS_PER_SECOND: f64 = 1e12;
    /// The longest representable span in seconds (2^64 - 1 ps, about 213
    /// days). Additions saturate at `MAX`, so a run's time bound must stay
    /// below it: `ClusterConfig::validate` rejects a larger
    /// `max_sim_time_s`, and any event beyond the bound ends the run with
    /// an error instead of a clamped time.
    pub const MAX_SECS: f64 = u64::MAX as f64 / Self::PS_PER_SECOND;

    /// Rounds to the nearest picosecond; negative or NaN inputs give zero,
    /// inputs beyond the range saturate at `MAX`.
    pub fn from_secs_f64(s: f64) -> SimTime {
        let ps = (s * Self::PS_PER_SECOND).round();
        if ps.is_nan() || ps <= 0.0 {
            SimTime::ZERO
        } else if ps >= u64::MAX as f64 {
            SimTime::MAX
        } else {
            SimTime(ps as u64)
        }
    }

    /// Rounds up, for durations that must not finish early (transfers).
    pub fn from_secs_f64_ceil(s: f64) -> SimTime {
        let ps = (s * Self::PS_PER_SECOND).ceil();
        if ps.is_nan() || ps <= 0.0 {
            SimTime::ZERO
        } else if ps >= u64::MAX as f64 {
            SimTime::MAX
        } else {
            SimTime(ps as u64)
        }
    }

    pub fn from_micros(us: u64) -> SimTime {
        SimTime(us.saturating_mul(1_000_000))
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / Self::PS_PER_SECOND
    }

    pub fn saturating_add(self, other: SimTime) -> SimTime {
        SimTime(self.0.saturating_add(other.0))
    }

    pub fn saturating_sub(self, other: SimTime) -> SimTime {
        SimTime(self.0.saturating_sub(other.0))
    }
}

impl Add for SimTime {
    type Output = SimTime;
    fn add(self, o: SimTime) -> SimTime {
        self.saturating_add(o)
    }
}

impl AddAssign for SimTime {
    fn add_assign(&mut self, o: SimTime) {
        *self = self.saturating_add(o);
    }
}

impl Sub for SimTime {
    type Output = SimTime;
    fn sub(self, o: SimTime) -> SimTime {
        self.saturating_sub(o)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.9} s", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_trip_and_saturate() {
        assert_eq!(SimTime::from_secs_f64(1.5).0, 1_500_000_000_000);
        assert_eq!(SimTime::from_secs_f64(-1.0), SimTime::ZERO);
        assert_eq!(SimTime::from_secs_f64(f64::NAN), SimTime::ZERO);
        assert_eq!(SimTime::from_secs_f64(1e30), SimTime::MAX);
        assert_eq!(SimTime::from_secs_f64_ceil(1.0000000000001e-12).0, 2);
        assert_eq!(SimTime::MAX + SimTime(5), SimTime::MAX);
        assert_eq!(SimTime(3) - SimTime(5), SimTime::ZERO);
        assert!((SimTime(2_500_000_000_000).as_secs_f64() - 2.5).abs() < 1e-15);
    }

    #[test]
    fn max_secs_is_the_last_representable_second() {
        // 2^64 ps = 18,446,744.073709551616 s, computed by hand.
        assert!((SimTime::MAX_SECS - 18_446_744.073_709_55).abs() < 1e-6);
        assert!(SimTime::from_secs_f64(18_446_744.0) < SimTime::MAX);
        assert_eq!(SimTime::from_secs_f64(18_446_745.0), SimTime::MAX);
    }
}
