//! What GPUs this machine has, through NVML. `nvml-wrapper` loads `libnvidia-ml.so.1` at run
//! time, so this builds and runs everywhere; without a driver, discovery says why in one line
//! (the caller then falls back to a fleet file or the demo fleet).
//!
//! Read: each GPU's index, UUID, model (its NVML name through the catalog), memory, MIG mode,
//! NUMA node, PCIe switch and NVLink domain ([`crate::topology`]). A GPU in MIG mode comes with
//! its MIG instances (read through raw NVML, `crate::mig_nvml::layout_of`) when the catalog's
//! layout rules accept them; otherwise it is left out with a note rather than guessed.

use crate::topology::Links;
use gantry_catalog::{Catalog, GpuModel};
use gantry_types::{Gpu, GpuMode, Node};
use nvml_wrapper::{Device, Nvml};

/// What discovery found on this machine, and what it had to leave out.
#[derive(Debug)]
pub struct Discovery {
    pub node: Node,
    /// One line per GPU left out, or per fact not read.
    pub notes: Vec<String>,
}

impl Discovery {
    /// `gantry discover`'s table: the node, one line per GPU (its MIG layout if in MIG mode),
    /// then the notes. Lines, without a final line break.
    pub fn table(&self) -> String {
        let mut lines = vec![format!("{}: {} GPU(s)", self.node.name, self.node.gpus.len())];
        for g in &self.node.gpus {
            let mode = match &g.mode {
                GpuMode::Mig { .. } => format!("  {}", g.mode.text()),
                _ => String::new(),
            };
            lines.push(format!("  gpu{} {} {}{mode}", g.index, g.model, g.uuid));
        }
        lines.extend(self.notes.iter().map(|note| format!("  note: {note}")));
        lines.join("\n")
    }

    /// `gantry discover --json`: the node as a fleet file's node, pretty-printed.
    pub fn json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(&self.node)
    }
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
        if let Some((gpu, gpu_links)) = read_gpu(&nvml, i, catalog, &mut notes) {
            links.push(gpu_links);
            gpus.push(gpu);
        }
    }
    if gpus.is_empty() {
        return Err(Unavailable(format!("no usable GPU: {}", notes.join("; "))));
    }
    place_gpus(&nvml, &mut gpus, &links, &mut notes);
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

/// GPU `i` (its NUMA node, PCIe switch and NVLink domain still unset) and its links, or
/// `None` with a note saying why it is left out.
fn read_gpu(nvml: &Nvml, i: u32, catalog: &Catalog, notes: &mut Vec<String>) -> Option<(Gpu, Links)> {
    let device = match nvml.device_by_index(i) {
        Ok(d) => d,
        Err(e) => {
            notes.push(format!("GPU {i}: left out ({e})"));
            return None;
        }
    };
    let (Ok(product), Ok(uuid)) = (device.name(), device.uuid()) else {
        notes.push(format!("GPU {i}: left out (no name or UUID)"));
        return None;
    };
    let Some(model) = catalog.lookup(&product) else {
        notes.push(format!("GPU {i} {product:?}: left out (not in the catalog: `gantry catalog` lists the models)"));
        return None;
    };
    let mut mode = GpuMode::Whole;
    if device.mig_mode().is_ok_and(|m| m.current == 1) {
        mode = mig_mode(nvml, &device, catalog.model(model), i, &product, notes)?;
    }
    let links = crate::topology::read(i, &device, notes);
    let gpu = Gpu {
        index: i,
        model: catalog.model(model).id.clone(),
        uuid,
        numa: 0,
        pcie_switch: 0,
        nvlink_domain: None,
        mode,
    };
    Some((gpu, links))
}

/// A GPU in MIG mode: its instances, when the catalog's layout rules accept them; else `None`
/// with a note.
fn mig_mode(
    nvml: &Nvml,
    device: &Device<'_>,
    model: &GpuModel,
    i: u32,
    product: &str,
    notes: &mut Vec<String>,
) -> Option<GpuMode> {
    let geometry = model.mig.as_ref();
    match crate::mig_nvml::layout_of(nvml, device) {
        Ok(instances) => match geometry.map(|g| g.validate_layout(&model.id, &instances)) {
            Some(Ok(_)) => Some(GpuMode::Mig { instances }),
            Some(Err(e)) => {
                notes.push(format!("GPU {i} {product:?}: left out (its MIG layout breaks the catalog's rules: {e})"));
                None
            }
            None => {
                notes.push(format!(
                    "GPU {i} {product:?}: left out (MIG mode on, but the catalog has no MIG geometry for it)"
                ));
                None
            }
        },
        Err(e) => {
            notes.push(format!("GPU {i} {product:?}: left out (MIG mode on, instances unreadable: {e})"));
            None
        }
    }
}

/// Sets each GPU's NUMA node, PCIe switch group and NVLink domain from NVML and `links`.
fn place_gpus(nvml: &Nvml, gpus: &mut [Gpu], links: &[Links], notes: &mut Vec<String>) {
    let mut unknown_pcie = false;
    let pcie = crate::topology::pcie_groups(gpus.len(), |a, b| {
        crate::topology::same_switch(nvml, gpus[a].index, gpus[b].index).unwrap_or_else(|| {
            unknown_pcie = true;
            false
        })
    });
    if unknown_pcie {
        notes.push("PCIe topology partly unknown: GPUs NVML could not compare are in PCIe groups of their own".into());
    }
    let domains = crate::topology::nvlink_domains(links);
    for (i, gpu) in gpus.iter_mut().enumerate() {
        gpu.numa = links[i].numa.unwrap_or(0);
        gpu.pcie_switch = pcie[i];
        gpu.nvlink_domain = domains[i];
    }
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
    fn the_table_shows_each_gpu_its_mig_layout_and_the_notes() {
        let gpu = |index: u32, mode: GpuMode| Gpu {
            index,
            model: "A100-80GB".into(),
            uuid: format!("GPU-{index}"),
            numa: 0,
            pcie_switch: 0,
            nvlink_domain: None,
            mode,
        };
        let mig =
            GpuMode::Mig { instances: vec![gantry_types::MigInstanceSpec { profile: "3g.40gb".into(), start: 0 }] };
        let node = Node {
            name: "here".into(),
            cpu: gantry_types::MilliCpu(8000),
            memory: gantry_types::Bytes(1 << 30),
            gpus: vec![gpu(0, GpuMode::Whole), gpu(1, mig.clone())],
            labels: Default::default(),
            taints: Vec::new(),
            rack: None,
            block: None,
        };
        let found = Discovery { node, notes: vec!["GPU 2: left out (why)".into()] };
        let expected = format!(
            "here: 2 GPU(s)\n  gpu0 A100-80GB GPU-0\n  gpu1 A100-80GB GPU-1  {}\n  note: GPU 2: left out (why)",
            mig.text()
        );
        assert_eq!(found.table(), expected);
        assert_eq!(found.json().expect("serializes"), serde_json::to_string_pretty(&found.node).expect("serializes"));
    }

    #[test]
    fn host_resources_are_read() {
        let (cpus, memory) = host_resources();
        assert!(cpus >= 1 && memory > 0);
    }
}
