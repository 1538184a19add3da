//! Nodes, the MIG planner's advice and the controller's reconfigurations as `gantry nodes`
//! (`--plan`, `--reconfigurations`) prints them.

use super::{kebab, put, shown};
use crate::{NodeView, PlanView, Reconfiguration, ReconfigurationsView, ReconfigureMode};

/// `gantry nodes`: each node with its flags and confinement, then a line per GPU.
pub fn nodes_text(nodes: &[NodeView]) -> String {
    let mut out = String::new();
    for node in nodes {
        let allocated: u64 = node.gpus.iter().map(|g| u64::from(g.allocated_milli)).sum();
        put!(
            out,
            "{}{}  {} GPUs, {:.2} allocated",
            shown(&node.name),
            node_flags(node),
            node.gpus.len(),
            allocated as f64 / 1000.0
        );
        if let Some(confinement) = &node.confinement {
            put!(out, "  confinement: {}", shown(&confinement.to_string()));
        }
        for g in &node.gpus {
            let jobs: Vec<String> = g.jobs.iter().map(u64::to_string).collect();
            let used = match g.utilization_pct {
                Some(pct) => format!("{pct:>3}% used{}", if g.measured { "" } else { " (sim)" }),
                None => String::new(),
            };
            let reconfiguring = g.reconfiguring.as_ref().map(|r| format!("  [{}]", shown(r))).unwrap_or_default();
            put!(
                out,
                "  gpu{:<3} {:<16} {:<10} {:>5.2}  {:<14} {}{reconfiguring}",
                g.index,
                shown(&g.model),
                shown(&g.mode),
                f64::from(g.allocated_milli) / 1000.0,
                used,
                if jobs.is_empty() { String::new() } else { format!("jobs {}", jobs.join(",")) }
            );
        }
    }
    out
}

/// What `gantry nodes` says beside a node's name: drained, lost, not ready, unconfined, lying.
fn node_flags(node: &NodeView) -> String {
    let mut flags = Vec::new();
    if node.drained {
        flags.push("drained".to_string());
    }
    if node.lost {
        flags.push("LOST".to_string());
    }
    if !node.ready {
        flags.push(match node.heartbeat_age_s {
            Some(age) => format!("not ready: agent silent {age} s"),
            None => "not ready: no agent yet".into(),
        });
    }
    if node.confinement.as_ref().is_some_and(|c| c.kind == gantry_wire::ConfinementKind::Unconfined) {
        flags.push("UNCONFINED".into());
    }
    if node.refused_reports > 0 {
        flags.push(format!("WARNING: {} reports about other nodes' tasks refused", node.refused_reports));
    }
    if flags.is_empty() { String::new() } else { format!(" ({})", flags.join(", ")) }
}

/// `gantry nodes --plan`: the online planner's advice, one line per GPU it would change.
pub fn plan_text(plan: &PlanView) -> String {
    let mut out = String::new();
    put!(out, "planned for {} task(s) of the waiting and running jobs", plan.demand_tasks);
    if plan.reconfigure.is_empty() && plan.drain.is_empty() {
        put!(out, "no change to make now");
    }
    for (what, list) in [("reconfigure now (idle)", &plan.reconfigure), ("drain first (busy)", &plan.drain)] {
        for c in list {
            let (node, from, to) = (shown(&c.node), shown(&c.from), shown(&c.to));
            put!(out, "  {what:<24} {node} gpu{}: {from} -> {to}", c.gpu);
        }
    }
    if plan.deferred > 0 {
        put!(
            out,
            "  {} more change(s) wait: their GPUs' work ends later, or they changed within the cooldown",
            plan.deferred
        );
    }
    match plan.mode {
        ReconfigureMode::Auto => put!(
            out,
            "reconfigure = \"auto\": the controller carries these out itself, within its guards (`gantry nodes --reconfigurations`)"
        ),
        mode => put!(
            out,
            "advice only (reconfigure = \"{}\"): `gantry mig apply` on the node, then restart its agent (the controller takes the layout); or run the controller with --reconfigure auto",
            kebab(&mode)
        ),
    }
    out
}

/// `gantry nodes --reconfigurations`: the counts, what is under way, the latest finished.
pub fn reconfigurations_text(view: &ReconfigurationsView) -> String {
    let mut out = String::new();
    put!(
        out,
        "reconfigure = \"{}\": {} applied, {} refused, {} abandoned, {} replica(s) moved, {:.2} GPU-hours unallocated on cordoned GPUs",
        kebab(&view.mode),
        view.applied,
        view.refused,
        view.abandoned,
        view.moves,
        view.cordoned_idle_gpu_hours
    );
    let line = |out: &mut String, r: &Reconfiguration| {
        let outcome = r.outcome.as_ref().map(|o| format!(": {}", shown(o))).unwrap_or_default();
        let (id, phase, node, to) = (r.id, kebab(&r.phase), shown(&r.node), r.to.text());
        put!(out, "  #{id:<5} {phase:<10} {node} gpu{}  -> {to}  {}{outcome}", r.gpu, shown(&r.reason));
    };
    let under_way = &view.under_way;
    put!(out, "under way: {}", if under_way.is_empty() { "none".to_string() } else { under_way.len().to_string() });
    under_way.iter().for_each(|r| line(&mut out, r));
    if !view.recent.is_empty() {
        put!(out, "latest finished (newest last):");
        view.recent.iter().rev().take(20).rev().for_each(|r| line(&mut out, r));
    }
    out
}
