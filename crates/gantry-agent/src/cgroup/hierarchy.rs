//! The files of one cgroup hierarchy, behind one interface ([`Hierarchy`]) that cgroup v1
//! and v2 implement, with the values they exchange (limits, measures) and the small file
//! helpers both use.

use super::devices::{Allowed, DeviceRules};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The CFS period a CPU quota is expressed in (the kernel's default, 100 ms).
pub const CPU_PERIOD_US: u64 = 100_000;
/// The smallest quota the kernel takes (1 ms per period: 10 millicores).
const CPU_QUOTA_US_MIN: u64 = 1_000;

/// The quota per [`CPU_PERIOD_US`] for `milli` millicores.
pub fn cpu_quota_us(milli: u64) -> u64 {
    (milli.saturating_mul(CPU_PERIOD_US) / 1000).max(CPU_QUOTA_US_MIN)
}

/// cgroup v1 or v2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// What a run is held to on this node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Memory (and memory + swap): `None` is not limited.
    pub memory_bytes: Option<u64>,
    /// CPU quota in millicores: `None` is not limited.
    pub cpu_milli: Option<u64>,
    /// Processes and threads.
    pub pids: u64,
}

/// What a cgroup measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub memory_peak_bytes: Option<u64>,
    pub cpu_ns: Option<u64>,
}

/// One hierarchy's files, behind one interface. Paths are relative to its mount(s).
pub trait Hierarchy: Send + Sync + std::fmt::Debug {
    fn version(&self) -> Version;
    /// What it applies, by name (controllers, and for v2 `devices` and `kill`).
    fn controllers(&self) -> Vec<&'static str>;
    /// Controllers the agent would use that this host does not offer.
    fn missing(&self) -> Vec<&'static str>;
    /// Make the cgroup `rel` (and its parents).
    fn make(&self, rel: &str) -> std::io::Result<()>;
    /// Hold `rel` to `limits`.
    fn limit(&self, rel: &str, limits: &Limits) -> std::io::Result<()>;
    /// Let `rel` open only the GPU devices `allowed`.
    fn devices(&self, rel: &str, rules: &DeviceRules, allowed: &Allowed) -> Result<(), crate::error::DeviceError>;
    /// The `cgroup.procs` files a process writes `0` to in order to join `rel`.
    fn join_fds(&self, rel: &str) -> std::io::Result<Vec<OwnedFd>>;
    /// The processes in `rel`.
    fn procs(&self, rel: &str) -> Vec<i32>;
    /// Does `rel` (or a cgroup below it) hold a process?
    fn populated(&self, rel: &str) -> bool;
    /// SIGKILL every process in `rel`, forks racing the kill included.
    fn kill(&self, rel: &str) -> std::io::Result<()>;
    /// How many of `rel`'s processes the OOM killer has ended.
    fn oom_kills(&self, rel: &str) -> u64;
    fn usage(&self, rel: &str) -> Usage;
    /// Remove the (empty) cgroup `rel`.
    fn remove(&self, rel: &str) -> std::io::Result<()>;
    /// The names of `rel`'s child cgroups.
    fn children(&self, rel: &str) -> Vec<String>;
    /// Where the tree is mounted (for messages).
    fn root(&self) -> PathBuf;
}

/// One mount from `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub point: PathBuf,
    pub fstype: String,
    /// The super options (a v1 mount's controllers are among them).
    pub options: Vec<String>,
}

/// Parse `/proc/self/mountinfo`.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let mut right = right.split(' ');
            let fstype = right.next()?.to_string();
            let options = right.nth(1).unwrap_or_default().split(',').map(str::to_string).collect();
            Some(Mount { point: PathBuf::from(point.replace("\\040", " ")), fstype, options })
        })
        .collect()
}

/// Write `text` to a cgroup file (never creating one).
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().write(true).open(path)?;
    file.write_all(text.as_bytes())
}

pub fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in a `key value` file (`memory.events`, `cpu.stat`, `oom_control`).
pub fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

pub fn read_pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

pub fn subdirs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

pub fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    // Never 0 or below: those name process groups, the agent's own among them.
    if pid > 0 {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
    }
}
