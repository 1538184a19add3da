//! Utilization samples for the heartbeat: NVML's device utilization and memory in use where a
//! driver is loaded, else nothing (the caller simulates). A GPU in MIG mode is left out: NVML
//! has no utilization counters for MIG instances (nor, in MIG mode, for the parent), so it is
//! reported as not measured rather than guessed.

use nvml_wrapper::Nvml;

/// One GPU's measurement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Measured {
    pub index: u32,
    /// Percent of the last sample period a kernel ran.
    pub utilization_pct: u32,
    pub memory_used_mib: u64,
    /// Per process, where the driver reports it (not on MIG GPUs): (pid, SM utilization %).
    pub processes: Vec<(u32, u32)>,
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
                // The last few seconds' samples; the newest per process.
                let since_us = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as u64)
                    .saturating_sub(5_000_000);
                let mut processes: Vec<(u32, u64, u32)> = Vec::new();
                for s in device.process_utilization_stats(since_us).unwrap_or_default() {
                    match processes.iter_mut().find(|(pid, _, _)| *pid == s.pid) {
                        Some(p) if p.1 < s.timestamp => *p = (s.pid, s.timestamp, s.sm_util),
                        Some(_) => {}
                        None => processes.push((s.pid, s.timestamp, s.sm_util)),
                    }
                }
                let processes = processes.into_iter().map(|(pid, _, sm)| (pid, sm)).collect();
                Some(Measured {
                    index,
                    utilization_pct: utilization.gpu,
                    memory_used_mib: memory.used >> 20,
                    processes,
                })
            })
            .collect()
    }
}

/// The process group of `pid`, from `/proc/<pid>/stat` (the field after the state, which
/// follows the parenthesized command name — itself free to contain spaces and parentheses).
pub fn process_group(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_pgrp(&stat)
}

fn parse_pgrp(stat: &str) -> Option<i32> {
    let after = &stat[stat.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let _state = fields.next()?;
    let _ppid = fields.next()?;
    fields.next()?.parse().ok()
}

/// Per-job SM utilization on one GPU: each process's share summed into the job that owns it
/// (`owner`: by its cgroup, or by its process group); processes of no known job are left out.
pub fn attribute(processes: &[(u32, u32)], owner: impl Fn(u32) -> Option<u64>) -> Vec<(u64, u32)> {
    let mut by_job: Vec<(u64, u32)> = Vec::new();
    for &(pid, pct) in processes {
        let Some(job) = owner(pid) else { continue };
        match by_job.iter_mut().find(|(j, _)| *j == job) {
            Some(entry) => entry.1 = (entry.1 + pct).min(100),
            None => by_job.push((job, pct.min(100))),
        }
    }
    by_job.sort_unstable();
    by_job
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
    fn process_groups_are_read_from_proc() {
        assert_eq!(parse_pgrp("42 (a (weird) name) S 1 4242 4242 0"), Some(4242));
        assert_eq!(parse_pgrp("garbage"), None);
        let own = process_group(std::process::id()).expect("this process has a group");
        assert!(own > 0);
    }

    #[test]
    fn process_shares_add_up_per_job() {
        let owner = |pid: u32| match pid {
            10 | 11 => Some(7),
            20 => Some(8),
            _ => None,
        };
        let shares = attribute(&[(10, 30), (11, 25), (20, 90), (99, 50)], owner);
        assert_eq!(shares, vec![(7, 55), (8, 90)]);
    }

    #[test]
    fn without_a_driver_there_is_no_sampler() {
        // This machine (and CI) has no driver; where one exists, every sample is a percentage.
        if let Some(sampler) = Sampler::open() {
            assert!(sampler.sample().iter().all(|m| m.utilization_pct <= 100));
        }
    }
}
