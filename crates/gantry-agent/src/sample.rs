//! Utilization samples for the heartbeat: NVML's device utilization and memory in use where a
//! driver is loaded, else nothing (the caller simulates). MIG instances are not measurable
//! through NVML's device utilization; their parent GPU's figure is all there is.

use nvml_wrapper::Nvml;

/// One GPU's measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Measured {
    pub index: u32,
    /// Percent of the last sample period a kernel ran.
    pub utilization_pct: u32,
    pub memory_used_mib: u64,
}

/// Holds NVML open between samples.
pub struct Sampler {
    nvml: Nvml,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sampler(NVML)")
    }
}

impl Sampler {
    /// NVML, if this machine has a driver.
    pub fn open() -> Option<Sampler> {
        Nvml::init().ok().map(|nvml| Sampler { nvml })
    }

    /// Every GPU NVML can read now; a GPU it cannot read is left out.
    pub fn sample(&self) -> Vec<Measured> {
        let count = self.nvml.device_count().unwrap_or(0);
        (0..count)
            .filter_map(|index| {
                let device = self.nvml.device_by_index(index).ok()?;
                let utilization = device.utilization_rates().ok()?;
                let memory = device.memory_info().ok()?;
                Some(Measured { index, utilization_pct: utilization.gpu, memory_used_mib: memory.used >> 20 })
            })
            .collect()
    }
}

/// A steady made-up load for a busy simulated GPU, the same for the same task every time
/// (55–94 %), so demos and tests show utilization below allocation the way real fleets do.
pub fn simulated_pct(job: u64, gpu_index: u32) -> u32 {
    let mut x = job.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(gpu_index).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 31;
    55 + (x % 40) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_load_is_steady_and_in_range() {
        for job in 0..200 {
            for gpu in 0..8 {
                let pct = simulated_pct(job, gpu);
                assert!((55..95).contains(&pct));
                assert_eq!(pct, simulated_pct(job, gpu));
            }
        }
    }

    #[test]
    fn without_a_driver_there_is_no_sampler() {
        // This machine (and CI) has no driver; where one exists, every sample is a percentage.
        if let Some(sampler) = Sampler::open() {
            assert!(sampler.sample().iter().all(|m| m.utilization_pct <= 100));
        }
    }
}
