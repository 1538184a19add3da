//! `GET /metrics`: the controller's state for Prometheus (names in docs/formats.md): GPUs
//! and nodes here, queues and jobs in `metrics_queues.rs`, the process and its API in
//! `metrics_service.rs`.

use crate::auth::Principal;
use crate::control::{Agents, Controller};
use crate::error::ControlError;
use crate::metrics::{Exposition, Scrape};
use crate::views::NodeView;
use std::collections::BTreeMap;

/// `GET /metrics`: the exposition (names in docs/formats.md).
pub fn metrics(c: &Controller, who: &Principal, now: u64, scrape: &Scrape) -> Result<String, ControlError> {
    who.not_agent()?;
    let nodes = super::nodes::nodes(c, now);
    let mut out = Exposition::default();
    super::metrics_service::service(&mut out, scrape);
    gpus(&mut out, c, &nodes);
    mig_instances(&mut out, &nodes);
    fleet(&mut out, &nodes);
    super::metrics_queues::queues(&mut out, c);
    jobs_and_service(&mut out, c);
    node_health(&mut out, c, &nodes);
    confinement(&mut out, c, &nodes);
    Ok(out.finish(scrape.format))
}

/// The name NVML (and so the DCGM exporter's `modelName`) gives a catalog model: the first
/// the catalog lists, else the catalog id.
fn nvml_name(c: &Controller, model: &str) -> String {
    let catalog = c.catalog();
    catalog
        .resolve(model)
        .first()
        .and_then(|&id| catalog.model(id).nvml_names.first().cloned())
        .unwrap_or_else(|| model.to_string())
}

/// Per GPU: allocation, utilization and memory in use, labelled to join the DCGM exporter's
/// series: `gpu` (the NVML index), `UUID` and `model_name` (its `modelName` value) beside
/// gantry's `node` and catalog `model`.
fn gpus(out: &mut Exposition, c: &Controller, nodes: &[NodeView]) {
    out.family(
        "gantry_gpu_allocated_ratio",
        "gauge",
        "",
        "Compute handed out on a GPU, 0 to 1 (a whole GPU, a MIG slice's share, MPS and time-slice shares).",
    );
    out.family("gantry_gpu_utilization_ratio", "gauge", "", "A GPU's utilization, 0 to 1, as its agent last sampled it (DCGM_FI_DEV_GPU_UTIL / 100); simulated on simulated fleets.");
    out.family(
        "gantry_gpu_memory_used_bytes",
        "gauge",
        "bytes",
        "GPU memory in use as NVML measured it with the agent's last sample (DCGM_FI_DEV_FB_USED, in bytes); absent where not measured.",
    );
    let mut names: BTreeMap<&str, String> = BTreeMap::new();
    for n in nodes {
        for g in &n.gpus {
            let model_name = names.entry(g.model.as_str()).or_insert_with(|| nvml_name(c, &g.model)).clone();
            let index = g.index.to_string();
            let labels = [
                ("node", n.name.as_str()),
                ("gpu", &index),
                ("UUID", &g.uuid),
                ("model", &g.model),
                ("model_name", &model_name),
            ];
            out.sample("gantry_gpu_allocated_ratio", &labels, f64::from(g.allocated_milli) / 1000.0);
            if let Some(pct) = g.utilization_pct {
                let simulated = if g.measured { "false" } else { "true" };
                let mut with = labels.to_vec();
                with.push(("simulated", simulated));
                out.sample("gantry_gpu_utilization_ratio", &with, f64::from(pct) / 100.0);
            }
            if let Some(mib) = g.memory_used_mib {
                out.sample("gantry_gpu_memory_used_bytes", &labels, (mib as f64) * 1_048_576.0);
            }
        }
    }
}

/// Per MIG instance: whether a job holds it, labelled with DCGM's `GPU_I_PROFILE` and, where
/// the node's agent read it from NVML, `GPU_I_ID` (the driver's instance id: UUID and
/// `GPU_I_ID` join DCGM's MIG series), and always its first memory slice (`start`).
fn mig_instances(out: &mut Exposition, nodes: &[NodeView]) {
    out.family(
        "gantry_mig_instance_allocated",
        "gauge",
        "",
        "1 while a job holds a MIG instance of a GPU's layout, else 0.",
    );
    for n in nodes {
        for g in &n.gpus {
            let index = g.index.to_string();
            for instance in &g.instances {
                let start = instance.start.to_string();
                let id = instance.gpu_instance_id.map(|i| i.to_string());
                let mut labels = vec![
                    ("node", n.name.as_str()),
                    ("gpu", &index),
                    ("UUID", &g.uuid),
                    ("GPU_I_PROFILE", &instance.profile),
                ];
                if let Some(id) = &id {
                    labels.push(("GPU_I_ID", id));
                }
                labels.push(("start", &start));
                out.sample("gantry_mig_instance_allocated", &labels, if instance.job.is_some() { 1.0 } else { 0.0 });
            }
        }
    }
}

/// Per model: GPUs, allocated, used.
fn fleet(out: &mut Exposition, nodes: &[NodeView]) {
    let mut by_model: BTreeMap<&str, (f64, f64, f64)> = BTreeMap::new();
    for g in nodes.iter().flat_map(|n| &n.gpus) {
        let entry = by_model.entry(g.model.as_str()).or_default();
        let allocated = f64::from(g.allocated_milli) / 1000.0;
        entry.0 += 1.0;
        entry.1 += allocated;
        entry.2 += allocated * f64::from(g.utilization_pct.unwrap_or(0)) / 100.0;
    }
    for (name, help, pick) in [
        ("gantry_fleet_gpus", "GPUs in the fleet.", 0),
        ("gantry_fleet_allocated_gpus", "GPUs' worth of compute handed out.", 1),
        ("gantry_fleet_used_gpus", "GPUs' worth of compute in use: allocation × utilization.", 2),
    ] {
        out.family(name, "gauge", "", help);
        for (model, v) in &by_model {
            out.sample(name, &[("model", model)], [v.0, v.1, v.2][pick]);
        }
    }
}

/// Jobs by queue and state, endings, decisions, cycle and wait times, idle jobs.
fn jobs_and_service(out: &mut Exposition, c: &Controller) {
    jobs_ended(out, c);
    decisions_and_heartbeats(out, c);
    reconfigurations(out, c);
    cycle_time(out, c);
    idle_jobs(out, c);
}

/// Jobs ended, by ending.
fn jobs_ended(out: &mut Exposition, c: &Controller) {
    out.family("gantry_jobs_ended", "counter", "", "Jobs ended since the controller started, by how.");
    // Every ending, at zero until it happens (a rate over a series that appears later misses
    // its first increase).
    use gantry_types::Ending;
    for ending in
        [Ending::Completed, Ending::Failed, Ending::TimedOut, Ending::Cancelled, Ending::Lost, Ending::OutOfMemory]
    {
        let count = c.stats().ended.get(ending.name()).copied().unwrap_or(0);
        out.sample("gantry_jobs_ended_total", &[("ending", ending.name())], count as f64);
    }
}

/// Scheduling decisions and agents' heartbeats.
fn decisions_and_heartbeats(out: &mut Exposition, c: &Controller) {
    out.family(
        "gantry_decisions",
        "counter",
        "",
        "Scheduling decisions since the controller started: starts, and stops for preemption.",
    );
    out.sample("gantry_decisions_total", &[("kind", "start")], c.stats().starts as f64);
    out.sample("gantry_decisions_total", &[("kind", "stop")], c.stats().stops as f64);
    out.family(
        "gantry_heartbeats",
        "counter",
        "",
        "Agents' heartbeats applied since the controller started; logged=false: they changed nothing and were not put in the command log.",
    );
    out.sample("gantry_heartbeats_total", &[("logged", "true")], c.stats().heartbeats.0 as f64);
    out.sample("gantry_heartbeats_total", &[("logged", "false")], c.stats().heartbeats.1 as f64);
}

/// GPU reconfigurations: finished by outcome, under way by phase, and moves.
fn reconfigurations(out: &mut Exposition, c: &Controller) {
    let r = &c.reconfigs();
    out.family(
        "gantry_reconfigurations",
        "counter",
        "",
        "GPU reconfigurations the controller finished since it started, by outcome (applied, refused, abandoned).",
    );
    for (outcome, count) in
        [("applied", r.totals.applied), ("refused", r.totals.refused), ("abandoned", r.totals.abandoned)]
    {
        out.sample("gantry_reconfigurations_total", &[("outcome", outcome)], count as f64);
    }
    out.family("gantry_reconfiguring_gpus", "gauge", "", "GPUs cordoned for a reconfiguration under way, by phase.");
    use crate::control::reconfig::Phase;
    for (name, phase) in [("draining", Phase::Draining), ("ordered", Phase::Ordered)] {
        let count = r.active.values().filter(|x| x.phase == phase).count();
        out.sample("gantry_reconfiguring_gpus", &[("phase", name)], count as f64);
    }
    out.family(
        "gantry_reconfiguration_moves",
        "counter",
        "",
        "Restartable jobs moved to empty GPUs being reconfigured.",
    );
    out.sample("gantry_reconfiguration_moves_total", &[], r.totals.moves as f64);
}

/// Scheduling cycle times.
fn cycle_time(out: &mut Exposition, c: &Controller) {
    out.histogram("gantry_scheduling_cycle_seconds", "Time one scheduling cycle took.", &c.stats().cycle_seconds);
}

/// Idle jobs flagged now, and idle events by action.
fn idle_jobs(out: &mut Exposition, c: &Controller) {
    out.family(
        "gantry_idle_jobs",
        "gauge",
        "",
        "Running jobs flagged idle now (under the idle threshold past the idle time).",
    );
    out.sample("gantry_idle_jobs", &[], c.idle().flagged() as f64);
    out.family(
        "gantry_idle_events",
        "counter",
        "",
        "Idle jobs flagged since the controller started, by what was done.",
    );
    for action in ["notify", "reclaim"] {
        let count = c.idle().counts.get(action).copied().unwrap_or(0);
        out.sample("gantry_idle_events_total", &[("action", action)], count as f64);
    }
}

/// Nodes taking work, agents' heartbeat ages.
fn node_health(out: &mut Exposition, c: &Controller, nodes: &[NodeView]) {
    out.family(
        "gantry_node_ready",
        "gauge",
        "",
        "1 while a node takes new work (its agent is connected and it is not drained), else 0.",
    );
    for n in nodes {
        out.sample("gantry_node_ready", &[("node", &n.name)], if n.ready && !n.drained { 1.0 } else { 0.0 });
    }
    if matches!(c.agents(), Agents::Remote { .. }) {
        out.family(
            "gantry_agent_heartbeat_age_seconds",
            "gauge",
            "seconds",
            "Seconds since a node's agent last heartbeat.",
        );
        for n in nodes {
            if let Some(age) = n.heartbeat_age_s {
                out.sample("gantry_agent_heartbeat_age_seconds", &[("node", &n.name)], age as f64);
            }
        }
        out.family(
            "gantry_node_refused_reports",
            "counter",
            "",
            "Reports a node's agent made about tasks of other nodes, refused since the controller started (an honest agent makes none).",
        );
        for n in nodes {
            out.sample("gantry_node_refused_reports_total", &[("node", &n.name)], n.refused_reports as f64);
        }
    }
}

/// How each node confines its tasks, and what jobs use as the nodes' cgroups measure it, by
/// queue and node (never by job: labels stay bounded by the fleet and the queue file).
fn confinement(out: &mut Exposition, c: &Controller, nodes: &[NodeView]) {
    if matches!(c.agents(), Agents::Remote { .. }) {
        out.family(
            "gantry_node_confined",
            "gauge",
            "",
            "1 where a node's agent confines its tasks in cgroups (hierarchy cgroup-v1 or cgroup-v2), 0 where they run unconfined.",
        );
        for n in nodes {
            if let Some(confinement) = &n.confinement {
                let kind = serde_json::to_value(confinement.kind).ok();
                let kind = kind.as_ref().and_then(|k| k.as_str()).unwrap_or("unknown");
                let value = if confinement.is_confined() { 1.0 } else { 0.0 };
                out.sample("gantry_node_confined", &[("node", &n.name), ("hierarchy", kind)], value);
            }
        }
    }
    let mut cpu_ms: BTreeMap<String, u64> = c.stats().cpu_ms_by_queue.clone();
    let mut memory: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (job, runs) in c.running() {
        let Some(queue) = c.jobs().get(job).map(|r| r.queue.clone()) else { continue };
        for used in runs.used.values() {
            *cpu_ms.entry(queue.clone()).or_default() += used.used.cpu_ms.unwrap_or(0);
            let node = memory.entry(used.node.clone()).or_default();
            node.0 += used.used.memory_peak_bytes.unwrap_or(0);
            node.1 += used.used.memory_limit_bytes.unwrap_or(0);
        }
    }
    out.family(
        "gantry_queue_cpu_seconds",
        "counter",
        "seconds",
        "CPU time the nodes' cgroups measured of a queue's jobs since the controller started (ended runs, and running ones so far).",
    );
    for (queue, ms) in &cpu_ms {
        out.sample("gantry_queue_cpu_seconds_total", &[("queue", queue)], *ms as f64 / 1000.0);
    }
    out.family(
        "gantry_node_jobs_memory_peak_bytes",
        "gauge",
        "bytes",
        "Sum over the jobs running on a node of the most memory each has held at once there (an upper bound of what they hold now).",
    );
    out.family(
        "gantry_node_jobs_memory_limit_bytes",
        "gauge",
        "bytes",
        "Sum over the jobs running on a node of the memory each is held to there.",
    );
    for n in nodes {
        let (peak, limit) = memory.get(&n.name).copied().unwrap_or_default();
        out.sample("gantry_node_jobs_memory_peak_bytes", &[("node", &n.name)], peak as f64);
        out.sample("gantry_node_jobs_memory_limit_bytes", &[("node", &n.name)], limit as f64);
    }
}
