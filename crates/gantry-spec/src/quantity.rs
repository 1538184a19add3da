//! Human quantities in spec files: `cpu = 4`, `cpu = "500m"`, `memory = "80GiB"`, `"16Gi"`.

use crate::error::SpecError;
use gantry_types::{Bytes, MilliCpu};
use serde::Deserialize;

/// A number or a string with a unit, as written in a file.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Quantity {
    Int(i64),
    Float(f64),
    Text(String),
}

/// Largest memory a spec may name (1 PiB): beyond it, the value is a typo.
pub const MEMORY_MAX: u64 = 1 << 50;
/// Largest CPU count a spec may name (100,000 cores).
pub const CPU_MILLI_MAX: u64 = 100_000_000;

fn number(field: &str, q: &Quantity) -> Result<(f64, String), SpecError> {
    match q {
        Quantity::Int(i) => Ok((*i as f64, String::new())),
        Quantity::Float(f) => Ok((*f, String::new())),
        Quantity::Text(t) => {
            let t = t.trim();
            let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
            let (num, unit) = t.split_at(split);
            let value: f64 = num.parse().map_err(|_| {
                SpecError::new(field, format!("{t:?} is not a quantity"))
                    .hint("write a number with an optional unit, e.g. \"16GiB\" or \"500m\"")
            })?;
            Ok((value, unit.trim().to_string()))
        }
    }
}

fn check_finite(field: &str, value: f64) -> Result<(), SpecError> {
    if !value.is_finite() || value < 0.0 {
        return Err(SpecError::new(field, format!("{value} is negative or not a number")));
    }
    Ok(())
}

/// Memory: plain numbers are bytes; units Ki/Mi/Gi/Ti (or KiB…) are binary, K/M/G/T (or KB…)
/// decimal.
pub fn memory(field: &str, q: &Quantity) -> Result<Bytes, SpecError> {
    let (value, unit) = number(field, q)?;
    check_finite(field, value)?;
    let scale: f64 = match unit.as_str() {
        "" | "B" => 1.0,
        "Ki" | "KiB" => 1024.0,
        "Mi" | "MiB" => 1024.0 * 1024.0,
        "Gi" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        "Ti" | "TiB" => 1024f64.powi(4),
        "K" | "KB" | "k" => 1e3,
        "M" | "MB" => 1e6,
        "G" | "GB" => 1e9,
        "T" | "TB" => 1e12,
        other => {
            return Err(SpecError::new(field, format!("unknown memory unit {other:?}"))
                .hint("use B, KiB, MiB, GiB, TiB (or Ki, Mi, Gi, Ti; KB, MB, GB, TB)"));
        }
    };
    let bytes = value * scale;
    if bytes > MEMORY_MAX as f64 {
        return Err(SpecError::new(field, format!("{} is more than 1 PiB", Bytes(bytes as u64))).hint("check the unit"));
    }
    Ok(Bytes(bytes.round() as u64))
}

/// CPU: plain numbers are cores (fractions allowed), `m` suffix is millicores.
pub fn cpu(field: &str, q: &Quantity) -> Result<MilliCpu, SpecError> {
    let (value, unit) = number(field, q)?;
    check_finite(field, value)?;
    let milli = match unit.as_str() {
        "" => value * 1000.0,
        "m" => value,
        other => {
            return Err(SpecError::new(field, format!("unknown CPU unit {other:?}"))
                .hint("write cores (4, 0.5) or millicores (\"500m\")"));
        }
    };
    if milli > CPU_MILLI_MAX as f64 {
        return Err(SpecError::new(field, format!("{value}{unit} CPU is absurd")).hint("the limit is 100,000 cores"));
    }
    Ok(MilliCpu(milli.round() as u32))
}

/// A whole non-negative integer within `max`.
pub fn count(field: &str, value: i64, min: i64, max: i64, hint: &str) -> Result<u32, SpecError> {
    if value < min || value > max {
        return Err(SpecError::new(field, format!("{value} is out of range {min}..={max}")).hint(hint));
    }
    Ok(value as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_memory_and_cpu_forms() {
        assert_eq!(memory("m", &Quantity::Text("80GiB".into())), Ok(Bytes::gib(80)));
        assert_eq!(memory("m", &Quantity::Text("16Gi".into())), Ok(Bytes::gib(16)));
        assert_eq!(memory("m", &Quantity::Text("1.5GiB".into())), Ok(Bytes(3 * Bytes::GIB / 2)));
        assert_eq!(memory("m", &Quantity::Int(1024)), Ok(Bytes(1024)));
        assert_eq!(cpu("c", &Quantity::Int(4)), Ok(MilliCpu(4000)));
        assert_eq!(cpu("c", &Quantity::Text("500m".into())), Ok(MilliCpu(500)));
        assert_eq!(cpu("c", &Quantity::Float(0.25)), Ok(MilliCpu(250)));
    }

    #[test]
    fn rejects_bad_quantities_with_the_field() {
        let cases = [
            (memory("gpu.memory", &Quantity::Text("12 parsecs".into())).err(), "unknown memory unit"),
            (memory("gpu.memory", &Quantity::Int(-5)).err(), "negative"),
            (memory("gpu.memory", &Quantity::Text("4000TiB".into())).err(), "more than 1 PiB"),
            (cpu("cpu", &Quantity::Text("lots".into())).err(), "not a quantity"),
            (cpu("cpu", &Quantity::Int(10_000_000)).err(), "absurd"),
        ];
        for (err, needle) in cases {
            let err = err.expect("must fail");
            assert!(err.to_string().contains(needle), "{err}");
        }
    }
}

/// A duration as written: seconds, or a number with s, m, h or d.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(untagged)]
pub(crate) enum Duration {
    Seconds(i64),
    Text(String),
}

/// Seconds from a duration as a flag gives it (`"90"`, `"30m"`, `"7d"`), at least `min`.
pub fn duration_seconds(field: &str, text: &str, min: u64) -> Result<u64, SpecError> {
    seconds(field, &Duration::Text(text.to_string()), min)
}

/// Seconds from `90`, `"90s"`, `"30m"`, `"12h"`, `"7d"`.
pub(crate) fn seconds(field: &str, d: &Duration, min: u64) -> Result<u64, SpecError> {
    let negative = match d {
        Duration::Seconds(s) => *s < 0,
        Duration::Text(t) => t.trim().starts_with('-'),
    };
    if negative {
        let shown = match d {
            Duration::Seconds(s) => s.to_string(),
            Duration::Text(t) => format!("{:?}", t.trim()),
        };
        return Err(
            SpecError::new(field, format!("{shown} is negative")).hint("a duration is 0 or more: \"30m\", 3600")
        );
    }
    let value = match d {
        Duration::Seconds(s) => *s as f64,
        Duration::Text(t) => {
            let t = t.trim();
            let (num, unit) = t.split_at(t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len()));
            let scale = match unit.trim() {
                "" | "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                "d" => 86_400.0,
                other => {
                    return Err(SpecError::new(field, format!("unknown unit {other:?} in {t:?}"))
                        .hint("write seconds, or a number with s, m, h or d: \"7d\""));
                }
            };
            let n: f64 = num.parse().map_err(|_| {
                SpecError::new(field, format!("{t:?} is not a duration")).hint("e.g. \"7d\", \"12h\", 3600")
            })?;
            n * scale
        }
    };
    if !value.is_finite() || !(min as f64..=100.0 * 365.0 * 86_400.0).contains(&value) {
        return Err(SpecError::new(field, format!("{value} s is outside {min} s..=100 years")));
    }
    Ok(value.round() as u64)
}
