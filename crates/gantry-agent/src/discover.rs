//! What GPUs this machine has, through NVML. `nvml-wrapper` loads `libnvidia-ml.so.1` at run
//! time, so this builds and runs everywhere; without a driver, discovery says why in one line
//! (the caller then falls back to a fleet file or the demo fleet).
//!
//! Read: each GPU's index, UUID, model (its NVML name through the catalog), memory, MIG mode,
//! NUMA node, PCIe switch and NVLink domain ([`crate::topology`]). A GPU in MIG mode comes with
//! its MIG instances (read through raw NVML, `crate::mig_nvml::layout_of`) when the catalog's
//! layout rules accept them; otherwise it is left out with a note rather than guessed.

use gantry_catalog::Catalog;
use gantry_types::{Gpu, GpuMode, Node};
use nvml_wrapper::Nvml;

/// What discovery found on this machine, and what it had to leave out.
#[derive(Debug)]
pub struct Discovery {
    pub node: Node,
    /// One line per GPU left out, or per fact not read.
    pub notes: Vec<String>,
}

/// Why there is nothing to discover.
#[derive(Debug, PartialEq, Eq)]
pub struct Unavailable(pub String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// CPUs and memory of this machine from /proc (milli-CPU, bytes); zeros if unreadable.
fn host_resources() -> (u32, u64) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get() as u32);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024);
    (cpus, memory)
}

/// Discover this machine's GPUs as one fleet node called `name`.
pub fn discover(name: &str, catalog: &Catalog) -> Result<Discovery, Unavailable> {
    let nvml = Nvml::init().map_err(|e| Unavailable(format!("NVML is not available here ({e})")))?;
    let count = nvml.device_count().map_err(|e| Unavailable(format!("NVML cannot count GPUs ({e})")))?;
    if count == 0 {
        return Err(Unavailable("NVML found no GPU".into()));
    }
    let mut gpus = Vec::new();
    let mut links = Vec::new();
    let mut notes = Vec::new();
    for i in 0..count {
        let device = match nvml.device_by_index(i) {
            Ok(d) => d,
            Err(e) => {
                notes.push(format!("GPU {i}: left out ({e})"));
                continue;
            }
        };
        let (Ok(product), Ok(uuid)) = (device.name(), device.uuid()) else {
            notes.push(format!("GPU {i}: left out (no name or UUID)"));
            continue;
        };
        let Some(model) = catalog.lookup(&product) else {
            notes
                .push(format!("GPU {i} {product:?}: left out (not in the catalog: `gantry catalog` lists the models)"));
            continue;
        };
        let mut mode = GpuMode::Whole;
        if device.mig_mode().is_ok_and(|m| m.current == 1) {
            let geometry = catalog.model(model).mig.as_ref();
            match crate::mig_nvml::layout_of(&nvml, &device) {
                Ok(instances) => {
                    match geometry.map(|g| g.validate_layout(&catalog.model(model).id, &instances)) {
                        Some(Ok(_)) => mode = GpuMode::Mig { instances },
                        Some(Err(e)) => {
                            notes.push(format!(
                                "GPU {i} {product:?}: left out (its MIG layout breaks the catalog's rules: {e})"
                            ));
                            continue;
                        }
                        None => {
                            notes.push(format!("GPU {i} {product:?}: left out (MIG mode on, but the catalog has no MIG geometry for it)"));
                            continue;
                        }
                    }
                }
                Err(e) => {
                    notes.push(format!("GPU {i} {product:?}: left out (MIG mode on, instances unreadable: {e})"));
                    continue;
                }
            }
        }
        links.push(crate::topology::read(i, &device, &mut notes));
        gpus.push(Gpu {
            index: i,
            model: catalog.model(model).id.clone(),
            uuid,
            numa: 0,
            pcie_switch: 0,
            nvlink_domain: None,
            mode,
        });
    }
    if gpus.is_empty() {
        return Err(Unavailable(format!("no usable GPU: {}", notes.join("; "))));
    }
    let mut unknown_pcie = false;
    let pcie = crate::topology::pcie_groups(gpus.len(), |a, b| {
        crate::topology::same_switch(&nvml, gpus[a].index, gpus[b].index).unwrap_or_else(|| {
            unknown_pcie = true;
            false
        })
    });
    if unknown_pcie {
        notes.push("PCIe topology partly unknown: GPUs NVML could not compare are in PCIe groups of their own".into());
    }
    let domains = crate::topology::nvlink_domains(&links);
    for (i, gpu) in gpus.iter_mut().enumerate() {
        gpu.numa = links[i].numa.unwrap_or(0);
        gpu.pcie_switch = pcie[i];
        gpu.nvlink_domain = domains[i];
    }
    let (cpus, memory) = host_resources();
    let node = Node {
        name: name.to_string(),
        cpu: gantry_types::MilliCpu(cpus * 1000),
        memory: gantry_types::Bytes(memory),
        gpus,
        labels: Default::default(),
        taints: Vec::new(),
        rack: None,
        block: None,
    };
    Ok(Discovery { node, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_discovery_says_so_in_one_line() {
        // This machine has no NVIDIA driver (CI neither); where one exists the result is a node.
        match discover("here", Catalog::embedded()) {
            Err(Unavailable(why)) => {
                assert!(why.starts_with("NVML is not available here") || why.contains("GPU"), "{why}");
                assert!(!why.contains('\n'));
            }
            Ok(found) => assert!(!found.node.gpus.is_empty()),
        }
    }

    #[test]
    fn host_resources_are_read() {
        let (cpus, memory) = host_resources();
        assert!(cpus >= 1 && memory > 0);
    }
}
