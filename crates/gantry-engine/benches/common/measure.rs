//! What the benches measure besides their own figures: percentiles of sorted timings and the
//! process's resident memory.

use std::time::Duration;

/// The `p` percentile (0..=1) of `sorted` timings.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// This process's resident memory (`VmRSS`), bytes; `None` where /proc does not say.
pub fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}
