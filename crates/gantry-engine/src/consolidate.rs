//! Which busy MIG GPUs to empty, by moving their inference instances elsewhere, so that
//! whole-GPU work that waits can start.
//!
//! The online planner (`online.rs`) offers the candidates: busy MIG GPUs its target wants
//! whole whose tasks can all restart elsewhere. Emptying one costs a restart per instance, so
//! it is worth it only when a waiting task then fits — and an 8-GPU gang fits only on a whole
//! node, so emptying three GPUs on one node and five on another starts nothing. Here each
//! waiting task picks the one node where the fewest instances must move for it. Pure; the
//! caller moves the instances (all of a group or none) and asks the planner again.

use crate::online::{GpuNow, Step};
use gantry_types::{Fleet, GpuMode};
use std::collections::{BTreeMap, BTreeSet};

/// Of the GPUs a step offers to empty ([`Step::empty`]), those to empty for the whole-GPU
/// tasks that wait (`waiting`: GPUs each needs on one node, in queue order). Each task, in turn, takes
/// the node where the fewest tasks must move for it to have that many free whole GPUs (idle
/// ones, and ones this step turns whole), counting GPUs earlier tasks took as gone; a task no
/// node can make room for is skipped. One group per task that needs moves: empty a group
/// entirely or not at all — half a node does not start a gang.
pub fn choose_empty(fleet: &Fleet, now: &[Vec<GpuNow>], step: &Step, waiting: &[u32]) -> Vec<Vec<(String, u32)>> {
    let offered: BTreeMap<(&str, u32), usize> =
        step.empty.iter().enumerate().map(|(rank, (node, index))| ((node.as_str(), *index), rank)).collect();
    let turning_whole: BTreeSet<(&str, u32)> = step
        .reconfigure
        .iter()
        .filter(|(_, _, mode)| *mode == GpuMode::Whole)
        .map(|(node, index, _)| (node.as_str(), *index))
        .collect();
    let mut taken: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut groups = Vec::new();
    for &count in waiting {
        // (tasks to move, node, free GPUs to take, GPUs to empty)
        let mut best: Option<(u32, usize, Vec<usize>, Vec<usize>)> = None;
        for (n, node) in fleet.nodes.iter().enumerate() {
            let mut free = Vec::new();
            let mut movable: Vec<(u32, usize, usize)> = Vec::new();
            for (g, gpu) in node.gpus.iter().enumerate() {
                if taken.contains(&(n, g)) {
                    continue;
                }
                let key = (node.name.as_str(), gpu.index);
                let idle_whole = now[n][g].busy_until_s.is_none() && gpu.mode == GpuMode::Whole;
                if idle_whole || turning_whole.contains(&key) {
                    free.push(g);
                } else if let Some(&rank) = offered.get(&key) {
                    movable.push((now[n][g].tasks, rank, g));
                }
            }
            let need = (count as usize).saturating_sub(free.len());
            if need > movable.len() {
                continue;
            }
            movable.sort();
            let cost: u32 = movable[..need].iter().map(|m| m.0).sum();
            if best.as_ref().is_none_or(|b| cost < b.0) {
                let empty: Vec<usize> = movable[..need].iter().map(|m| m.2).collect();
                free.truncate(count as usize - need);
                best = Some((cost, n, free, empty));
            }
        }
        let Some((_, n, free, empty)) = best else { continue };
        taken.extend(free.iter().chain(&empty).map(|&g| (n, g)));
        if !empty.is_empty() {
            groups.push(empty.iter().map(|&g| (fleet.nodes[n].name.clone(), fleet.nodes[n].gpus[g].index)).collect());
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_catalog::Catalog;
    use gantry_types::MigInstanceSpec;

    /// Two nodes of four A100s. Node 0: GPUs 0–1 idle whole, 2–3 MIG with one instance each.
    /// Node 1: GPU 0 idle whole, 1–3 MIG with one instance each. All MIG GPUs offered.
    fn situation() -> (Fleet, Vec<Vec<GpuNow>>, Step) {
        let text = "[[node]]\nname = \"n\"\ncount = 2\ncpu = 64\nmemory = \"512GiB\"\n\
                    [node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 4\n";
        let mut fleet = gantry_spec::parse_fleet(text, Catalog::embedded()).expect("fleet");
        let mig = GpuMode::Mig { instances: vec![MigInstanceSpec { profile: "3g.40gb".into(), start: 0 }] };
        let busy = GpuNow { busy_until_s: Some(50_000), tasks: 1, movable: true, ..GpuNow::default() };
        let mut now = vec![vec![GpuNow::default(); 4]; 2];
        let mut step = Step::default();
        for (n, g) in [(0, 2), (0, 3), (1, 1), (1, 2), (1, 3)] {
            fleet.nodes[n].gpus[g].mode = mig.clone();
            now[n][g] = busy;
            step.empty.push((format!("n-{n}"), g as u32));
        }
        (fleet, now, step)
    }

    fn names(groups: &[Vec<(String, u32)>]) -> Vec<Vec<String>> {
        groups.iter().map(|g| g.iter().map(|(n, i)| format!("{n}/{i}")).collect()).collect()
    }

    #[test]
    fn each_waiting_task_empties_the_node_that_needs_the_fewest_moves() {
        let (fleet, now, step) = situation();
        // (what, waiting tasks' GPU counts, groups to empty as node/GPU)
        type Case = (&'static str, &'static [u32], &'static [&'static [&'static str]]);
        let cases: [Case; 6] = [
            ("a 4-GPU gang: node 0 needs two moves, node 1 three", &[4], &[&["n-0/2", "n-0/3"]]),
            ("two gangs: the second takes node 1", &[4, 4], &[&["n-0/2", "n-0/3"], &["n-1/1", "n-1/2", "n-1/3"]]),
            ("a task that fits already moves nothing", &[2], &[]),
            ("free GPUs an earlier task takes do not count twice", &[2, 4], &[&["n-1/1", "n-1/2", "n-1/3"]]),
            ("a 3-GPU task: one move on node 0 (fewest), not two on node 1", &[3], &[&["n-0/2"]]),
            ("a task larger than any node is skipped", &[8, 1], &[]),
        ];
        for (name, waiting, want) in cases {
            let got = names(&choose_empty(&fleet, &now, &step, waiting));
            let want: Vec<Vec<String>> = want.iter().map(|g| g.iter().map(|s| s.to_string()).collect()).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn gpus_this_step_turns_whole_count_as_free_and_busy_unoffered_ones_never_move() {
        let (fleet, now, mut step) = situation();
        // Node 1's GPU 1 is not offered (its tasks cannot move): node 1 cannot host 4.
        step.empty.retain(|(n, i)| !(n == "n-1" && *i == 1));
        assert_eq!(names(&choose_empty(&fleet, &now, &step, &[4, 4])), vec![vec!["n-0/2", "n-0/3"]]);
        // An idle MIG GPU this step turns whole is as good as a free one.
        let (fleet, mut now, mut step) = situation();
        now[0][3] = GpuNow::default();
        step.empty.retain(|(n, i)| !(n == "n-0" && *i == 3));
        step.reconfigure.push(("n-0".into(), 3, GpuMode::Whole));
        assert_eq!(names(&choose_empty(&fleet, &now, &step, &[4])), vec![vec!["n-0/2"]]);
    }
}
