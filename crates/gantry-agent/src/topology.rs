//! How a machine's GPUs connect, from what NVML reports per GPU: NUMA node, the PCIe switch
//! they share (GPUs whose closest common ancestor is at most a PCIe switch), and NVLink
//! domains (GPUs joined by NVLink directly, or all through NVSwitches). The grouping is pure
//! and tested here; the NVML reads are in [`read`], best effort: what a driver does not
//! support becomes a note and a safe default (NUMA 0, one PCIe group per GPU, no NVLink).

use nvml_wrapper::enum_wrappers::device::TopologyLevel;
use nvml_wrapper::{Device, Nvml};

/// `NVML_NVLINK_MAX_LINKS` in current nvml.h (36); links past a GPU's own count answer
/// "invalid argument" and are skipped.
const NVLINK_MAX_LINKS: u32 = 36;
use nvml_wrapper::enum_wrappers::nv_link::IntDeviceType;

/// One GPU's connections as NVML reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Links {
    pub numa: Option<u32>,
    /// Its PCI bus id (`0000:18:00.0`), how NVLink peers name it.
    pub bus_id: String,
    /// PCI bus ids of the GPUs at the other end of its active NVLinks.
    pub nvlink_peers: Vec<String>,
    /// Some active NVLink goes to an NVSwitch.
    pub nvswitch: bool,
}

/// Smallest-index representative (union-find without ranks: a machine has at most 16 GPUs).
fn find(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

fn union(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (find(parent, a), find(parent, b));
    parent[ra.max(rb)] = ra.min(rb);
}

/// Number the groups 0, 1, … in order of their first GPU.
fn number(parent: &mut [usize]) -> Vec<u32> {
    let mut ids: Vec<Option<u32>> = vec![None; parent.len()];
    let mut next = 0;
    (0..parent.len())
        .map(|i| {
            let root = find(parent, i);
            *ids[root].get_or_insert_with(|| {
                next += 1;
                next - 1
            })
        })
        .collect()
}

/// PCIe groups: GPUs `i` and `j` are in one group when `same_switch(i, j)`.
pub fn pcie_groups(n: usize, mut same_switch: impl FnMut(usize, usize) -> bool) -> Vec<u32> {
    let mut parent: Vec<usize> = (0..n).collect();
    for i in 0..n {
        for j in i + 1..n {
            if same_switch(i, j) {
                union(&mut parent, i, j);
            }
        }
    }
    number(&mut parent)
}

/// NVLink domains: GPUs joined by NVLink (directly or through NVSwitches) share a domain; a
/// GPU without an active NVLink has none.
pub fn nvlink_domains(links: &[Links]) -> Vec<Option<u32>> {
    let n = links.len();
    let mut parent: Vec<usize> = (0..n).collect();
    let switched: Vec<usize> = (0..n).filter(|&i| links[i].nvswitch).collect();
    for pair in switched.windows(2) {
        union(&mut parent, pair[0], pair[1]);
    }
    for (i, l) in links.iter().enumerate() {
        for peer in &l.nvlink_peers {
            if let Some(j) = links.iter().position(|o| o.bus_id.eq_ignore_ascii_case(peer)) {
                union(&mut parent, i, j);
            }
        }
    }
    let ids = number(&mut parent);
    // Only groups with a link in them are domains; renumber those densely.
    let linked = |i: usize| links[i].nvswitch || !links[i].nvlink_peers.is_empty();
    let mut dense: Vec<Option<u32>> = vec![None; n];
    let mut next = 0;
    let mut seen: Vec<(u32, u32)> = Vec::new();
    for i in 0..n {
        if !linked(i) && !links.iter().any(|o| o.nvlink_peers.iter().any(|p| p.eq_ignore_ascii_case(&links[i].bus_id)))
        {
            continue;
        }
        let id = match seen.iter().find(|(raw, _)| *raw == ids[i]) {
            Some((_, id)) => *id,
            None => {
                seen.push((ids[i], next));
                next += 1;
                next - 1
            }
        };
        dense[i] = Some(id);
    }
    dense
}

/// Read one GPU's connections; what NVML cannot tell is left at its default and named in
/// `notes`.
pub fn read(index: u32, device: &Device<'_>, notes: &mut Vec<String>) -> Links {
    let mut links = Links::default();
    match device.numa_node_id() {
        Ok(numa) => links.numa = Some(numa),
        Err(e) => notes.push(format!("GPU {index}: NUMA node unknown ({e}); put in NUMA node 0")),
    }
    match device.pci_info() {
        Ok(pci) => links.bus_id = pci.bus_id,
        Err(e) => notes.push(format!("GPU {index}: PCI bus id unknown ({e}); its NVLink peers cannot be matched")),
    }
    for link in 0..NVLINK_MAX_LINKS {
        let wrapper = device.link_wrapper_for(link);
        if !wrapper.is_active().unwrap_or(false) {
            continue;
        }
        if matches!(wrapper.remote_device_type(link), Ok(IntDeviceType::Switch)) {
            links.nvswitch = true;
        } else if let Ok(remote) = wrapper.remote_pci_info() {
            links.nvlink_peers.push(remote.bus_id);
        }
    }
    links
}

/// Do the GPUs at NVML indices `a` and `b` share a PCIe switch (or a board)? `None` if NVML
/// cannot say.
pub fn same_switch(nvml: &Nvml, a: u32, b: u32) -> Option<bool> {
    let (first, second) = (nvml.device_by_index(a).ok()?, nvml.device_by_index(b).ok()?);
    first
        .topology_common_ancestor(second)
        .ok()
        .map(|level| matches!(level, TopologyLevel::Internal | TopologyLevel::Single | TopologyLevel::Multiple))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(bus: &str, peers: &[&str], nvswitch: bool) -> Links {
        Links {
            numa: Some(0),
            bus_id: bus.into(),
            nvlink_peers: peers.iter().map(|p| p.to_string()).collect(),
            nvswitch,
        }
    }

    #[test]
    fn nvswitch_gpus_form_one_domain() {
        let links: Vec<Links> = (0..8).map(|i| gpu(&format!("0000:{i:02x}:00.0"), &[], true)).collect();
        assert_eq!(nvlink_domains(&links), vec![Some(0); 8]);
    }

    #[test]
    fn nvlink_bridges_pair_gpus_and_unlinked_gpus_have_no_domain() {
        // An A100 PCIe box: bridges join 0-1 and 2-3; GPU 4 has none.
        let links = vec![
            gpu("0000:01:00.0", &["0000:02:00.0"], false),
            gpu("0000:02:00.0", &["0000:01:00.0"], false),
            gpu("0000:03:00.0", &["0000:04:00.0"], false),
            gpu("0000:04:00.0", &["0000:03:00.0"], false),
            gpu("0000:05:00.0", &[], false),
        ];
        assert_eq!(nvlink_domains(&links), vec![Some(0), Some(0), Some(1), Some(1), None]);
    }

    #[test]
    fn pcie_groups_follow_shared_switches() {
        // GPUs 0-1 and 2-3 share a switch each; 4 is alone.
        let switch = [0, 0, 1, 1, 2];
        assert_eq!(pcie_groups(5, |i, j| switch[i] == switch[j]), vec![0, 0, 1, 1, 2]);
        assert_eq!(pcie_groups(3, |_, _| false), vec![0, 1, 2]);
    }
}
