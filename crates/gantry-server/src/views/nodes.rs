//! `gantry nodes`, `GET /v1/nodes`: every node with its GPUs, what each holds and uses, and
//! which jobs run there.

use crate::control::Controller;
use gantry_types::{GpuGrant, JobState};
use std::collections::BTreeMap;

pub use gantry_api::nodes::{GpuView, MigInstanceView, NodeView};

/// `nodes` as `who` may see them: a member sees which of its own queues' jobs hold a GPU,
/// not other teams' job ids (the GPU still shows as allocated).
pub fn seen_by(mut nodes: Vec<NodeView>, c: &Controller, who: &crate::auth::Principal) -> Vec<NodeView> {
    if who.role != gantry_store::Role::Member {
        return nodes;
    }
    let visible = |job: u64| c.jobs().get(&job).is_some_and(|row| who.sees(&row.queue));
    for gpu in nodes.iter_mut().flat_map(|n| n.gpus.iter_mut()) {
        gpu.jobs.retain(|&job| visible(job));
        for instance in &mut gpu.instances {
            instance.job = instance.job.filter(|&job| visible(job));
        }
    }
    nodes
}

/// Every node with its GPUs and the running jobs on them.
pub fn nodes(c: &Controller, now: u64) -> Vec<NodeView> {
    let engine = c.scheduler().engine();
    let state = engine.state();
    let mut on_gpu: BTreeMap<(String, u32), Vec<u64>> = BTreeMap::new();
    let mut on_instance: BTreeMap<(String, u32, u8), u64> = BTreeMap::new();
    for row in c.jobs().values().filter(|r| r.state == JobState::Running) {
        for task in &row.tasks {
            for grant in task.placement.iter().flat_map(|p| p.gpus.iter()) {
                on_gpu.entry((task.node.clone(), grant.gpu())).or_default().push(row.id);
                if let GpuGrant::Mig { gpu, start, .. } = grant {
                    on_instance.insert((task.node.clone(), *gpu, *start), row.id);
                }
            }
        }
    }
    let mut nodes: Vec<NodeView> = state
        .info
        .iter()
        .zip(state.nodes.iter())
        .map(|(n, capacity)| NodeView {
            name: n.name.clone(),
            cpu_milli: u64::from(capacity.cpu_total),
            cpu_free_milli: u64::from(capacity.cpu_free),
            memory_bytes: capacity.memory_total,
            memory_free_bytes: capacity.memory_free,
            features: n.labels.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            drained: engine.is_drained(&n.name),
            ready: !engine.has_mark(&n.name, gantry_engine::NOT_READY_TAINT),
            lost: c.lost_nodes().contains(&n.name),
            heartbeat_age_s: c.links().get(&n.name).map(|l| now.saturating_sub(l.heard_s)),
            agent_version: c.links().get(&n.name).map(|l| l.version.clone()),
            confinement: c.links().get(&n.name).map(|l| l.confinement.clone()),
            refused_reports: c.refused().get(&n.name).map_or(0, |r| r.count),
            gpus: Vec::new(),
        })
        .collect();
    for (gpu, uuid) in state.gpus.iter().zip(state.uuids.iter()) {
        let node = &mut nodes[gpu.node as usize];
        let mut jobs = on_gpu.get(&(node.name.clone(), gpu.index)).cloned().unwrap_or_default();
        jobs.dedup();
        let sample = c.shown_sample(&node.name, gpu.index, jobs.first().copied());
        let gpu_model = c.catalog().model(gpu.model);
        let instances = match &gpu.units {
            gantry_engine::state::Units::Mig { slots } => slots
                .iter()
                .map(|slot| MigInstanceView {
                    profile: gpu_model
                        .mig
                        .as_ref()
                        .and_then(|g| g.profiles.get(usize::from(slot.profile)))
                        .map_or_else(String::new, |p| p.name.clone()),
                    start: slot.start,
                    job: on_instance.get(&(node.name.clone(), gpu.index, slot.start)).copied(),
                    gpu_instance_id: c
                        .links()
                        .get(&node.name)
                        .and_then(|l| l.gpu_instance_ids.get(&(gpu.index, slot.start)).copied()),
                })
                .collect(),
            _ => Vec::new(),
        };
        node.gpus.push(GpuView {
            index: gpu.index,
            uuid: uuid.clone(),
            model: c.catalog().model(gpu.model).id.clone(),
            mode: format!("{:?}", gpu.units.kind()).to_ascii_lowercase().replace("timeslice", "time-slice"),
            allocated_milli: gpu.used_milli,
            utilization_pct: sample.as_ref().map(|s| s.utilization_pct),
            measured: sample.as_ref().is_some_and(|s| s.measured),
            memory_used_mib: sample.as_ref().filter(|s| s.measured).map(|s| s.memory_used_mib),
            jobs,
            instances,
            reconfiguring: super::reconfig::under_way_on(c, &node.name, gpu.index),
        });
    }
    nodes
}
