//! The fleet back as a fleet file (what `gantry plan` writes): every node spelled out, each
//! GPU's mode as a `[[node.gpu]]` override, in the format `parse_fleet` reads, so a planned
//! fleet can be checked, edited and served.

use gantry_types::{Fleet, GpuMode, Node};
use std::fmt::Write;

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn bytes(b: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    if b.is_multiple_of(GIB) {
        format!("\"{}GiB\"", b / GIB)
    } else if b.is_multiple_of(MIB) {
        format!("\"{}MiB\"", b / MIB)
    } else {
        format!("\"{b}B\"")
    }
}

/// The NVLink layout keyword that gives these domains back.
fn nvlink(node: &Node) -> &'static str {
    let domains: Vec<Option<u32>> = node.gpus.iter().map(|g| g.nvlink_domain).collect();
    if domains.iter().all(|d| *d == Some(0)) {
        "all"
    } else if domains.iter().all(Option::is_none) {
        "none"
    } else if domains.iter().enumerate().all(|(i, d)| *d == Some(i as u32 / 2)) {
        "pairs"
    } else {
        "auto"
    }
}

/// Write `fleet` as a fleet file.
pub fn fleet_to_toml(fleet: &Fleet) -> String {
    let mut out = String::from("# written by gantry\n");
    for node in &fleet.nodes {
        let _ = write!(out, "\n[[node]]\nname = {}\n", quote(&node.name));
        let cpu = node.cpu.0;
        if cpu % 1000 == 0 {
            let _ = writeln!(out, "cpu = {}", cpu / 1000);
        } else {
            let _ = writeln!(out, "cpu = \"{cpu}m\"");
        }
        let _ = writeln!(out, "memory = {}", bytes(node.memory.0));
        if let Some(rack) = &node.rack {
            let _ = writeln!(out, "rack = {}", quote(rack));
        }
        if let Some(block) = &node.block {
            let _ = writeln!(out, "block = {}", quote(block));
        }
        if !node.labels.is_empty() {
            let labels: Vec<String> = node.labels.iter().map(|(k, v)| format!("{} = {}", quote(k), quote(v))).collect();
            let _ = writeln!(out, "labels = {{ {} }}", labels.join(", "));
        }
        if !node.taints.is_empty() {
            let taints: Vec<String> = node.taints.iter().map(|t| quote(&t.to_string())).collect();
            let _ = writeln!(out, "taints = [{}]", taints.join(", "));
        }
        let Some(first) = node.gpus.first() else { continue };
        let numa: Vec<String> = node.gpus.iter().map(|g| g.numa.to_string()).collect();
        let _ = write!(
            out,
            "[node.gpus]\nmodel = {}\ncount = {}\nnvlink = {}\nnuma = [{}]\n",
            quote(&first.model),
            node.gpus.len(),
            quote(nvlink(node)),
            numa.join(", ")
        );
        for (i, gpu) in node.gpus.iter().enumerate() {
            let over = match &gpu.mode {
                GpuMode::Whole => continue,
                GpuMode::Mig { instances } => {
                    let layout: Vec<String> =
                        instances.iter().map(|m| quote(&format!("{}@{}", m.profile, m.start))).collect();
                    format!("mig = [{}]", layout.join(", "))
                }
                GpuMode::Mps { max_clients } => format!("mode = \"mps\"\nmax_clients = {max_clients}"),
                GpuMode::TimeSlice { replicas, memory_per_replica } => format!(
                    "mode = \"time-slice\"\nreplicas = {replicas}\nmemory_per_replica = {}",
                    bytes(memory_per_replica.0)
                ),
            };
            let _ = write!(out, "[[node.gpu]]\nindex = {i}\n{over}\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_fleet_round_trips() {
        let catalog = gantry_catalog::Catalog::embedded();
        let demo = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/demo-fleet.toml"))
            .expect("demo fleet");
        let fleet = crate::parse_fleet(&demo, catalog).expect("parses");
        let written = fleet_to_toml(&fleet);
        let again = crate::parse_fleet(&written, catalog).unwrap_or_else(|e| panic!("{e}\n{written}"));
        assert_eq!(again, fleet, "{written}");
    }
}
