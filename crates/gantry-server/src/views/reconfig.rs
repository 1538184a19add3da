//! `GET /v1/reconfigurations`, `gantry nodes --reconfigurations`: the GPU reconfigurations
//! the controller has under way and the latest finished ones, with their reasons, and the
//! totals the metrics also export.

use crate::auth::Principal;
use crate::control::Controller;
use crate::control::reconfig::Reconfiguration;
pub use gantry_api::reconfig::ReconfigurationsView;

/// A record as `who` may see it: the waiting jobs it serves only from queues the token sees.
fn visible(c: &Controller, who: &Principal, r: &Reconfiguration) -> Reconfiguration {
    let mut r = r.clone();
    let sees = |id: &u64| c.jobs().get(id).is_some_and(|row| who.sees(&row.queue));
    let hidden = r.serves.iter().any(|id| !sees(id)) || r.moved.iter().any(|id| !sees(id));
    if hidden {
        r.serves.retain(sees);
        r.moved.retain(sees);
        r.reason = "for waiting jobs, some in queues this token does not see".into();
    }
    r
}

pub fn reconfigurations(c: &Controller, who: &Principal) -> ReconfigurationsView {
    let t = &c.reconfigs().totals;
    ReconfigurationsView {
        mode: c.reconfigs().policy.mode,
        under_way: c.reconfigs().active.values().map(|r| visible(c, who, r)).collect(),
        recent: c.reconfigs().recent.iter().map(|r| visible(c, who, r)).collect(),
        applied: t.applied,
        refused: t.refused,
        abandoned: t.abandoned,
        moves: t.moves,
        cordoned_idle_gpu_hours: t.cordoned_idle_milli_s / 1000.0 / 3600.0,
    }
}

/// The reconfiguration under way on a GPU, in a few words (`gantry nodes`, the dashboard).
pub fn under_way_on(c: &Controller, node: &str, gpu: u32) -> Option<String> {
    let r = c.reconfigs().active.get(&(node.to_string(), gpu))?;
    let phase = match r.phase {
        crate::control::reconfig::Phase::Draining if r.moved.is_empty() => "draining",
        crate::control::reconfig::Phase::Draining => "moving replicas off",
        _ => "applying",
    };
    Some(format!("{phase} → {} (reconfiguration {})", r.to.text(), r.id))
}
