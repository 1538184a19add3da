//! What a reconfiguration is worth: the tasks of the demand a GPU's new mode serves that its
//! old one did not (matched by mode and by the models a job accepts), taken from a shared
//! pool so that one waiting task justifies one change, and what the change takes away from
//! waiting tasks. A change is made only when it serves enough and takes from no more waiting
//! tasks than it serves.

use super::plan::{Kind, Need};
use gantry_types::GpuMode;
use std::collections::BTreeMap;

/// What a GPU in `mode` offers the demand, one entry per task it can hold.
fn offers(mode: &GpuMode) -> Vec<Kind> {
    match mode {
        GpuMode::Mig { instances } => instances.iter().map(|i| Kind::Profile(i.profile.clone())).collect(),
        GpuMode::Whole => vec![Kind::Whole],
        GpuMode::Mps { .. } | GpuMode::TimeSlice { .. } => vec![Kind::Share],
    }
}

/// `a` less `b`, as multisets.
fn minus(a: Vec<Kind>, b: &[Kind]) -> Vec<Kind> {
    let mut b: Vec<&Kind> = b.iter().collect();
    a.into_iter()
        .filter(|k| match b.iter().position(|x| *x == k) {
            Some(at) => {
                b.swap_remove(at);
                false
            }
            None => true,
        })
        .collect()
}

/// What changing a GPU of `model` from `from` to `to` serves of the demand `pool` (taken
/// from it, so one waiting task justifies one change): the waiting jobs and the reason; or
/// `None` — it serves fewer than `min_tasks`, or it takes from more waiting tasks than it
/// serves (a shared GPU is not turned whole under waiting shares for a forecast).
pub(super) fn benefit(
    from: &GpuMode,
    to: &GpuMode,
    model: gantry_catalog::ModelId,
    pool: &mut Vec<(Need, Option<u64>)>,
    min_tasks: u32,
) -> Option<(Vec<u64>, String)> {
    let (had, will) = (offers(from), offers(to));
    let gained = minus(will.clone(), &had);
    let lost = minus(had, &will);
    // Waiting tasks that could use what the change takes away (one per lost unit).
    let mut harmed = 0;
    let mut waiting: Vec<&Need> =
        pool.iter().filter(|(n, id)| id.is_some() && n.kind != Kind::Any).map(|(n, _)| n).collect();
    for kind in &lost {
        if let Some(at) = waiting.iter().position(|need| need.fits(kind, model)) {
            waiting.swap_remove(at);
            harmed += 1;
        }
    }
    let mut taken = Vec::new();
    let mut left = pool.clone();
    for kind in &gained {
        if let Some(at) = left.iter().position(|(need, _)| need.fits(kind, model)) {
            taken.push(left.remove(at));
        }
    }
    let served_waiting = taken.iter().filter(|(_, id)| id.is_some()).count();
    if (taken.len() as u32) < min_tasks.max(1) || harmed > served_waiting {
        return None;
    }
    *pool = left;
    let mut serves: Vec<u64> = taken.iter().filter_map(|(_, id)| *id).collect();
    serves.dedup();
    let mut what: BTreeMap<String, u32> = BTreeMap::new();
    for (need, _) in &taken {
        let name = match &need.kind {
            Kind::Profile(p) => p.clone(),
            Kind::Whole => "whole GPU".into(),
            Kind::Share => "GPU share".into(),
            Kind::Any => "GPU memory".into(),
        };
        *what.entry(name).or_default() += 1;
    }
    let what: Vec<String> = what.iter().map(|(k, n)| format!("{n} × {k}")).collect();
    let reason = if serves.is_empty() {
        format!("for the demand the last hour's arrivals imply ({})", what.join(", "))
    } else {
        let ids: Vec<String> = serves.iter().map(|id| id.to_string()).collect();
        format!("for waiting job{} {} ({})", if serves.len() == 1 { "" } else { "s" }, ids.join(", "), what.join(", "))
    };
    Some((serves, reason))
}
