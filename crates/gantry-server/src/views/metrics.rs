//! `GET /metrics`: the controller's state in the OpenMetrics text format (names in
//! docs/formats.md).

use crate::auth::Principal;
use crate::control::{Agents, Controller};
use crate::error::ControlError;
use crate::metrics::Exposition;
use crate::views::NodeView;
use std::collections::BTreeMap;

/// `GET /metrics`: the OpenMetrics exposition (names in docs/formats.md).
pub fn metrics(c: &Controller, who: &Principal, now: u64) -> Result<String, ControlError> {
    who.not_agent()?;
    let nodes = super::nodes::nodes(c, now);
    let mut out = Exposition::default();
    gpus(&mut out, &nodes);
    fleet(&mut out, &nodes);
    queues(&mut out, c);
    jobs_and_service(&mut out, c);
    node_health(&mut out, c, &nodes);
    confinement(&mut out, c, &nodes);
    Ok(out.finish())
}

/// Per GPU: allocation and utilization.
fn gpus(out: &mut Exposition, nodes: &[NodeView]) {
    out.family(
        "gantry_gpu_allocated_ratio",
        "gauge",
        "",
        "Compute handed out on a GPU, 0 to 1 (a whole GPU, a MIG slice's share, MPS and time-slice shares).",
    );
    for n in nodes {
        for g in &n.gpus {
            let index = g.index.to_string();
            out.sample(
                "gantry_gpu_allocated_ratio",
                &[("node", &n.name), ("gpu", &index), ("model", &g.model)],
                f64::from(g.allocated_milli) / 1000.0,
            );
        }
    }
    out.family("gantry_gpu_utilization_ratio", "gauge", "", "A GPU's utilization, 0 to 1, as its agent last sampled it (DCGM_FI_DEV_GPU_UTIL / 100); simulated on simulated fleets.");
    for n in nodes {
        for g in &n.gpus {
            if let Some(pct) = g.utilization_pct {
                let index = g.index.to_string();
                let simulated = if g.measured { "false" } else { "true" };
                out.sample(
                    "gantry_gpu_utilization_ratio",
                    &[("node", &n.name), ("gpu", &index), ("model", &g.model), ("simulated", simulated)],
                    f64::from(pct) / 100.0,
                );
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

/// Per queue: allocated and used.
fn queues(out: &mut Exposition, c: &Controller) {
    let by_queue: BTreeMap<&String, (f64, f64)> =
        c.usage_meter().queues().iter().map(|(q, held)| (q, held.gpus())).collect();
    out.family("gantry_queue_allocated_gpus", "gauge", "", "GPUs' worth of compute held by a queue's running jobs.");
    for (queue, (allocated, _)) in &by_queue {
        out.sample("gantry_queue_allocated_gpus", &[("queue", queue)], *allocated);
    }
    out.family(
        "gantry_queue_used_gpus",
        "gauge",
        "",
        "GPUs' worth of compute a queue's running jobs use: allocation × utilization.",
    );
    for (queue, (_, used)) in &by_queue {
        out.sample("gantry_queue_used_gpus", &[("queue", queue)], *used);
    }
}

/// Jobs by queue and state, endings, decisions, cycle and wait times, idle jobs.
fn jobs_and_service(out: &mut Exposition, c: &Controller) {
    jobs_by_state(out, c);
    jobs_ended(out, c);
    decisions_and_heartbeats(out, c);
    reconfigurations(out, c);
    cycle_and_wait_times(out, c);
    idle_jobs(out, c);
}

/// Jobs waiting or running, by queue and state.
fn jobs_by_state(out: &mut Exposition, c: &Controller) {
    let mut jobs: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
    for row in c.jobs().values().filter(|r| !r.state.is_final()) {
        *jobs.entry((row.queue.clone(), row.state.name())).or_default() += 1;
    }
    out.family("gantry_jobs", "gauge", "", "Jobs waiting or running, by queue and state.");
    for ((queue, state), count) in &jobs {
        out.sample("gantry_jobs", &[("queue", queue), ("state", state)], *count as f64);
    }
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

/// Scheduling cycle and job wait times.
fn cycle_and_wait_times(out: &mut Exposition, c: &Controller) {
    out.histogram("gantry_scheduling_cycle_seconds", "Time one scheduling cycle took.", &c.stats().cycle_seconds);
    out.histogram(
        "gantry_job_wait_seconds",
        "Time from a job's eligibility to its start, per start.",
        &c.stats().wait_seconds,
    );
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
        "",
        "Sum over the jobs running on a node of the most memory each has held at once there (an upper bound of what they hold now).",
    );
    out.family(
        "gantry_node_jobs_memory_limit_bytes",
        "gauge",
        "",
        "Sum over the jobs running on a node of the memory each is held to there.",
    );
    for n in nodes {
        let (peak, limit) = memory.get(&n.name).copied().unwrap_or_default();
        out.sample("gantry_node_jobs_memory_peak_bytes", &[("node", &n.name)], peak as f64);
        out.sample("gantry_node_jobs_memory_limit_bytes", &[("node", &n.name)], limit as f64);
    }
}
