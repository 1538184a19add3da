//! `gantry nodes`, `GET /v1/nodes`: every node with its GPUs, what each holds and uses, and
//! which jobs run there.

use crate::control::Controller;
use gantry_types::{GpuGrant, JobState};
use std::collections::BTreeMap;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A node as `gantry nodes` shows it: its GPUs, what each holds, which jobs run there.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct NodeView {
    pub name: String,
    pub drained: bool,
    /// With remote agents: whether this node's agent is connected (it gets work only then).
    pub ready: bool,
    /// With remote agents: lost (silent past `node_lost_after`, or declared): what ran there
    /// has ended or waits again.
    #[serde(default)]
    pub lost: bool,
    /// With remote agents: seconds since its agent's last heartbeat (`None`: never since the
    /// controller started).
    pub heartbeat_age_s: Option<u64>,
    /// With remote agents: the version its agent registered with.
    pub agent_version: Option<String>,
    /// How the node confines its tasks (cgroup v1 or v2 and what they hold, or unconfined
    /// and why), as its agent said when it registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confinement: Option<crate::wire::Confinement>,
    /// Reports its agent made about tasks of other nodes, refused since the controller
    /// started (an honest agent makes none: its agent may be compromised).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refused_reports: u64,
    pub gpus: Vec<GpuView>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct GpuView {
    pub index: u32,
    pub uuid: String,
    pub model: String,
    /// whole, mig, mps or time-slice.
    pub mode: String,
    /// Compute handed out, milli-GPU of 1000.
    pub allocated_milli: u32,
    /// Utilization its agent last sampled, percent (`None`: no sample).
    pub utilization_pct: Option<u32>,
    /// Whether that sample was measured (NVML) rather than simulated.
    pub measured: bool,
    /// Running jobs holding part or all of it.
    pub jobs: Vec<u64>,
    /// A MIG GPU's instances (its layout), each with the job holding it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<MigInstanceView>,
    /// Cordoned for a reconfiguration under way: its phase and target, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconfiguring: Option<String>,
}

/// One MIG instance of a GPU's layout.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct MigInstanceView {
    pub profile: String,
    /// First compute slice.
    pub start: u8,
    /// The running job holding it.
    pub job: Option<u64>,
}

/// `nodes` as `who` may see them: a member sees which of its own queues' jobs hold a GPU,
/// not other teams' job ids (the GPU still shows as allocated).
pub fn seen_by(mut nodes: Vec<NodeView>, c: &Controller, who: &crate::auth::Principal) -> Vec<NodeView> {
    if who.role != gantry_store::Role::Member {
        return nodes;
    }
    let visible = |job: u64| c.jobs.get(&job).is_some_and(|row| who.sees(&row.queue));
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
    let engine = c.scheduler.engine();
    let state = engine.state();
    let mut on_gpu: BTreeMap<(String, u32), Vec<u64>> = BTreeMap::new();
    let mut on_instance: BTreeMap<(String, u32, u8), u64> = BTreeMap::new();
    for row in c.jobs.values().filter(|r| r.state == JobState::Running) {
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
        .map(|n| NodeView {
            name: n.name.clone(),
            drained: engine.is_drained(&n.name),
            ready: !engine.has_mark(&n.name, gantry_engine::NOT_READY_TAINT),
            lost: c.lost_nodes.contains(&n.name),
            heartbeat_age_s: c.links.get(&n.name).map(|l| now.saturating_sub(l.heard_s)),
            agent_version: c.links.get(&n.name).map(|l| l.version.clone()),
            confinement: c.links.get(&n.name).map(|l| l.confinement.clone()),
            refused_reports: c.refused.get(&n.name).map_or(0, |r| r.count),
            gpus: Vec::new(),
        })
        .collect();
    for (gpu, uuid) in state.gpus.iter().zip(state.uuids.iter()) {
        let node = &mut nodes[gpu.node as usize];
        let mut jobs = on_gpu.get(&(node.name.clone(), gpu.index)).cloned().unwrap_or_default();
        jobs.dedup();
        let sample = c.shown_sample(&node.name, gpu.index, jobs.first().copied());
        let gpu_model = c.catalog.model(gpu.model);
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
                })
                .collect(),
            _ => Vec::new(),
        };
        node.gpus.push(GpuView {
            index: gpu.index,
            uuid: uuid.clone(),
            model: c.catalog.model(gpu.model).id.clone(),
            mode: format!("{:?}", gpu.units.kind()).to_ascii_lowercase().replace("timeslice", "time-slice"),
            allocated_milli: gpu.used_milli,
            utilization_pct: sample.as_ref().map(|s| s.utilization_pct),
            measured: sample.is_some_and(|s| s.measured),
            jobs,
            instances,
            reconfiguring: super::reconfig::under_way_on(c, &node.name, gpu.index),
        });
    }
    nodes
}
