//! Quantities with their unit in the type, so a milli-GPU can never be added to a byte count.
//!
//! Capacity in gantry is accounted the same way whatever the sharing mode: compute in milli-GPU
//! (1000 = one whole GPU) and memory in bytes. Parsing human forms ("80GiB", "1.5", "250m")
//! belongs to the spec layer; these types only carry integers.

use serde::{Deserialize, Serialize};
use std::fmt;

/// GPU compute in thousandths of one whole GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct MilliGpu(pub u32);

impl MilliGpu {
    /// One whole GPU.
    pub const WHOLE: MilliGpu = MilliGpu(1000);
}

impl fmt::Display for MilliGpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}m", self.0)
    }
}

/// A byte count (memory of a GPU, a node, a request).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct Bytes(pub u64);

impl Bytes {
    pub const KIB: u64 = 1 << 10;
    pub const MIB: u64 = 1 << 20;
    pub const GIB: u64 = 1 << 30;
    pub const TIB: u64 = 1 << 40;

    pub const fn gib(n: u64) -> Bytes {
        Bytes(n * Self::GIB)
    }
    pub const fn mib(n: u64) -> Bytes {
        Bytes(n * Self::MIB)
    }
}

impl fmt::Display for Bytes {
    /// Largest binary unit that keeps at most two decimals, e.g. `80GiB`, `9.75GiB`, `512MiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = [(Self::TIB, "TiB"), (Self::GIB, "GiB"), (Self::MIB, "MiB"), (Self::KIB, "KiB")];
        for (size, name) in units {
            if self.0 >= size {
                let hundredths = (self.0 as u128 * 100 / size as u128) as u64;
                return if hundredths.is_multiple_of(100) {
                    write!(f, "{}{name}", hundredths / 100)
                } else {
                    let s = format!("{}.{:02}", hundredths / 100, hundredths % 100);
                    write!(f, "{}{name}", s.trim_end_matches('0'))
                };
            }
        }
        write!(f, "{}B", self.0)
    }
}

/// CPU in thousandths of one core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct MilliCpu(pub u32);

impl fmt::Display for MilliCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_multiple_of(1000) { write!(f, "{}", self.0 / 1000) } else { write!(f, "{}m", self.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_display_picks_a_readable_unit() {
        assert_eq!(Bytes::gib(80).to_string(), "80GiB");
        assert_eq!(Bytes(Bytes::GIB * 39 / 4).to_string(), "9.75GiB");
        assert_eq!(Bytes::mib(512).to_string(), "512MiB");
        assert_eq!(Bytes(12).to_string(), "12B");
    }

    #[test]
    fn milli_cpu_display_drops_whole_cores_suffix() {
        assert_eq!(MilliCpu(4000).to_string(), "4");
        assert_eq!(MilliCpu(250).to_string(), "250m");
    }
}
