//! Which GPU device nodes a task may open: its granted GPUs' `/dev/nvidiaN`, `nvidiactl`,
//! and for a MIG instance the `nvidia-caps` minors of that instance — every other GPU device
//! of the node is denied. Devices that are not GPUs (`/dev/null`, ptys, `nvidia-uvm`, …) are
//! left alone, as Slurm's `ConstrainDevices` and the NVIDIA container toolkit leave them.
//!
//! Rules are about device numbers (major:minor), which is what the kernel checks on `open`
//! (cgroup v1's `devices.deny`, a cgroup v2 device program): `/dev/nvidiaN` is character
//! device 195:N (N is the GPU's minor number, which NVML reports and which is not always its
//! index), `nvidiactl` 195:255, and the MIG capabilities are minors of the `nvidia-caps`
//! major, mapped to `gpu<minor>/gi<id>[/ci<id>]/access` by `/proc/driver/nvidia-caps/mig-minors`.
//!
//! A node without an NVIDIA driver (the simulated backend: an inventory file, the demo fleet)
//! gets fake device nodes in the agent's data directory, `dev/nvidia<index>` as 195:<index>
//! (only while no driver has taken that major, so opening one can never reach a real GPU) and
//! `dev/nvidia-caps/nvidia-cap<N>` for MIG instances under a major from Linux's range for
//! local use; the same rules then apply to them, so confinement is tested without a GPU: an
//! allowed fake device opens to "no such device" (ENXIO, no driver), a denied one to
//! "operation not permitted" (EPERM, the cgroup).

use crate::error::DeviceError;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The NVIDIA driver's character major (`/dev/nvidia*`).
pub const NVIDIA_MAJOR: u32 = 195;
/// `/dev/nvidiactl`: every CUDA process needs it.
pub const NVIDIACTL_MINOR: u32 = 255;
/// The GPU minors a rule covers: 0..=254 are GPUs (254 is `nvidia-modeset`, denied too).
pub const GPU_MINORS: std::ops::RangeInclusive<u32> = 0..=254;
/// Majors Linux sets aside for local and experimental use (Documentation/admin-guide/
/// devices.txt: 240-254 char); the fake `nvidia-caps` major is the first one free.
const LOCAL_MAJORS: std::ops::RangeInclusive<u32> = 240..=254;
/// Fake MIG capability minors per GPU: one per memory-slice start (at most 8).
const FAKE_CAPS_PER_GPU: u32 = 8;

/// What a task may open: GPU minors (besides `nvidiactl`) and `nvidia-caps` minors.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowed {
    pub gpu_minors: BTreeSet<u32>,
    pub caps_minors: BTreeSet<u32>,
}

/// Where the MIG capability minors of an instance come from.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Caps {
    /// The driver's table (`mig-minors`), instances found through NVML.
    Driver { major: u32, minors: BTreeMap<String, u32> },
    /// The simulated backend's own numbering: GPU `index`'s instance at `start` is
    /// `1 + index × 8 + start`.
    Fake { major: u32 },
    /// No MIG capabilities on this node (no driver, or one without MIG).
    None,
}

/// The node's GPU devices, and how to tell a task's from the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceRules {
    /// GPU UUID → its minor number.
    minors: BTreeMap<String, u32>,
    caps: Caps,
}

/// A character major registered in `/proc/devices` under `name`.
pub fn registered_major(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/proc/devices").ok()?;
    parse_major(&text, name)
}

fn parse_major(proc_devices: &str, name: &str) -> Option<u32> {
    proc_devices
        .lines()
        .take_while(|l| !l.starts_with("Block devices"))
        .filter_map(|l| l.trim().split_once(' '))
        .find(|(_, n)| n.trim() == name)
        .and_then(|(major, _)| major.parse().ok())
}

/// `mig-minors`: `gpu0/gi1/ci0/access 12` lines, by name.
fn parse_mig_minors(text: &str) -> BTreeMap<String, u32> {
    text.lines()
        .filter_map(|l| l.trim().rsplit_once(' '))
        .filter_map(|(name, minor)| Some((name.trim().to_string(), minor.trim().parse().ok()?)))
        .collect()
}

impl DeviceRules {
    /// A node with the NVIDIA driver: each GPU's minor as NVML reports it, MIG capabilities
    /// from the driver's table.
    pub fn driver(minors: BTreeMap<String, u32>) -> DeviceRules {
        let caps = match (
            registered_major("nvidia-caps"),
            std::fs::read_to_string("/proc/driver/nvidia-caps/mig-minors").ok(),
        ) {
            (Some(major), Some(table)) => Caps::Driver { major, minors: parse_mig_minors(&table) },
            _ => Caps::None,
        };
        DeviceRules { minors, caps }
    }

    /// The simulated backend: GPU `index` is minor `index`.
    pub fn fake(gpus: &[(u32, String)]) -> DeviceRules {
        let used = std::fs::read_to_string("/proc/devices").unwrap_or_default();
        let caps = LOCAL_MAJORS
            .clone()
            .find(|m| !used.lines().any(|l| l.split_whitespace().next() == Some(&m.to_string())))
            .map_or(Caps::None, |major| Caps::Fake { major });
        DeviceRules { minors: gpus.iter().map(|(index, uuid)| (uuid.clone(), *index)).collect(), caps }
    }

    /// The `nvidia-caps` major, where there is one.
    pub fn caps_major(&self) -> Option<u32> {
        match self.caps {
            Caps::Driver { major, .. } | Caps::Fake { major } => Some(major),
            Caps::None => None,
        }
    }

    /// Every `nvidia-caps` minor a rule must cover (the driver's table, or the fake's range).
    pub fn all_caps_minors(&self) -> BTreeSet<u32> {
        match &self.caps {
            Caps::Driver { minors, .. } => minors.values().copied().collect(),
            Caps::Fake { .. } => {
                let gpus = self.minors.values().copied().max().map_or(0, |m| m + 1);
                (1..=gpus * FAKE_CAPS_PER_GPU).collect()
            }
            Caps::None => BTreeSet::new(),
        }
    }

    /// What a task granted `devices` (the launch's GPU UUIDs and MIG grant names, as the
    /// controller names them) may open. `mig_ids`: the (GPU instance, compute instance) ids
    /// of the instance at a start on a GPU, from the driver (unused by the fake).
    pub fn allowed(&self, devices: &[String], mig_ids: impl Fn(&str, u8) -> Option<(u32, u32)>) -> Allowed {
        let mut allowed = Allowed::default();
        for device in devices {
            if let Some((gpu, _, start)) = crate::mig_nvml::parse_grant_name(device) {
                let Some(&minor) = self.minors.get(&gpu) else { continue };
                allowed.gpu_minors.insert(minor);
                match &self.caps {
                    Caps::Driver { minors, .. } => {
                        if let Some((gi, ci)) = mig_ids(&gpu, start) {
                            for name in
                                [format!("gpu{minor}/gi{gi}/access"), format!("gpu{minor}/gi{gi}/ci{ci}/access")]
                            {
                                allowed.caps_minors.extend(minors.get(&name));
                            }
                        }
                    }
                    Caps::Fake { .. } => {
                        allowed.caps_minors.insert(1 + minor * FAKE_CAPS_PER_GPU + u32::from(start));
                    }
                    Caps::None => {}
                }
            } else if let Some(&minor) = self.minors.get(device) {
                allowed.gpu_minors.insert(minor);
            }
        }
        allowed
    }

    /// cgroup v1 `devices.deny` lines for everything GPU-like `allowed` does not cover. (v1
    /// keeps a list of exceptions to "allow all"; a wildcard denial cannot be narrowed by a
    /// later allow, so each minor is denied on its own.)
    pub fn v1_denials(&self, allowed: &Allowed) -> Vec<String> {
        let mut lines: Vec<String> = GPU_MINORS
            .filter(|m| !allowed.gpu_minors.contains(m))
            .map(|m| format!("c {NVIDIA_MAJOR}:{m} rwm"))
            .collect();
        if let Some(major) = self.caps_major() {
            lines.extend(
                self.all_caps_minors()
                    .into_iter()
                    .filter(|m| !allowed.caps_minors.contains(m))
                    .map(|m| format!("c {major}:{m} rwm")),
            );
        }
        lines
    }
}

/// The fake device nodes of a simulated node, in `dir` (`<data>/dev`): `nvidia<index>` and
/// `nvidiactl`, and one `nvidia-caps/nvidia-cap<N>` per possible MIG instance. Made only
/// where the NVIDIA major is not taken by a driver (so no fake node can open a real GPU) and
/// by root (mknod); a note says why not otherwise.
pub fn make_fake_nodes(dir: &Path, rules: &DeviceRules) -> Result<PathBuf, DeviceError> {
    use nix::sys::stat::{Mode, SFlag, makedev};
    use std::os::unix::fs::PermissionsExt;
    if let Some(major) = registered_major("nvidia") {
        let message = format!("the NVIDIA driver holds major {major} here: no fake GPU devices are made");
        return Err(DeviceError::new("/proc/devices", message));
    }
    let failed = |path: &Path, what: &str, e: &dyn std::fmt::Display| {
        DeviceError::new(path.display().to_string(), format!("{what}{}: {e}", path.display()))
    };
    // Readable by anyone: the cgroup decides who may open them, as with the real ones.
    let perm = Mode::from_bits_truncate(0o666);
    let node = |path: &Path, major: u32, minor: u32| -> Result<(), DeviceError> {
        let _ = std::fs::remove_file(path);
        nix::sys::stat::mknod(path, SFlag::S_IFCHR, perm, makedev(u64::from(major), u64::from(minor)))
            .map_err(|e| failed(path, "mknod ", &e))?;
        nix::sys::stat::fchmodat(nix::fcntl::AT_FDCWD, path, perm, nix::sys::stat::FchmodatFlags::NoFollowSymlink)
            .map_err(|e| failed(path, "chmod ", &e))
    };
    let folder = |path: &Path| -> Result<(), DeviceError> {
        std::fs::create_dir_all(path).map_err(|e| failed(path, "", &e))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(|e| failed(path, "chmod ", &e))
    };
    folder(dir)?;
    for &minor in rules.minors.values() {
        node(&dir.join(format!("nvidia{minor}")), NVIDIA_MAJOR, minor)?;
    }
    node(&dir.join("nvidiactl"), NVIDIA_MAJOR, NVIDIACTL_MINOR)?;
    if let Some(major) = rules.caps_major() {
        let caps = dir.join("nvidia-caps");
        folder(&caps)?;
        for minor in rules.all_caps_minors() {
            node(&caps.join(format!("nvidia-cap{minor}")), major, minor)?;
        }
    }
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> DeviceRules {
        DeviceRules {
            minors: [("GPU-a".to_string(), 0), ("GPU-b".to_string(), 1), ("GPU-c".to_string(), 3)].into(),
            caps: Caps::Fake { major: 240 },
        }
    }

    #[test]
    fn a_task_may_open_its_gpus_and_nothing_else_gpu_like() {
        let r = rules();
        let allowed = r.allowed(&["GPU-c".into()], |_, _| None);
        assert_eq!(allowed.gpu_minors, [3].into());
        let denied = r.v1_denials(&allowed);
        assert!(denied.contains(&"c 195:0 rwm".to_string()));
        assert!(denied.contains(&"c 195:254 rwm".to_string()), "nvidia-modeset too");
        assert!(!denied.iter().any(|l| l == "c 195:3 rwm" || l == "c 195:255 rwm"), "its GPU and nvidiactl");
        assert_eq!(denied.iter().filter(|l| l.starts_with("c 240:")).count(), 32, "every fake MIG capability");
    }

    #[test]
    fn a_mig_task_gets_its_parent_gpu_and_its_instance_capability_only() {
        let r = rules();
        let allowed = r.allowed(&["MIG-b-1g.10gb-4".into()], |_, _| None);
        assert_eq!(allowed.gpu_minors, [1].into());
        assert_eq!(allowed.caps_minors, [1 + 8 + 4].into());
        let driver = DeviceRules {
            minors: [("GPU-b".to_string(), 2)].into(),
            caps: Caps::Driver {
                major: 509,
                minors: parse_mig_minors(
                    "config 1\nmonitor 2\ngpu2/gi3/access 30\ngpu2/gi3/ci0/access 31\ngpu2/gi4/access 40\n",
                ),
            },
        };
        let allowed =
            driver.allowed(&["MIG-b-1g.10gb-4".into()], |gpu, start| (gpu == "GPU-b" && start == 4).then_some((3, 0)));
        assert_eq!(allowed.caps_minors, [30, 31].into());
        let denied = driver.v1_denials(&allowed);
        for m in [1, 2, 40] {
            assert!(denied.contains(&format!("c 509:{m} rwm")), "config, monitor and other instances: {m}");
        }
    }

    #[test]
    fn proc_devices_is_read_for_character_majors_only() {
        let text = "Character devices:\n  1 mem\n195 nvidia\n509 nvidia-caps\n\nBlock devices:\n  7 loop\n195 nvidia\n";
        assert_eq!(parse_major(text, "nvidia"), Some(195));
        assert_eq!(parse_major(text, "nvidia-caps"), Some(509));
        assert_eq!(parse_major(text, "loop"), None);
    }
}
