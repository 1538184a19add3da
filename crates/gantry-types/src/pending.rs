//! Why a job is not running yet. Every pending job carries one typed reason — the first thing
//! that stopped it in the last scheduling pass — and, where the planner made one, an estimate
//! of its start. The simulator reports them and the CLI's `why` prints them; they are data,
//! formatted only for display (DESIGN §3 rule 4).

use crate::outcome::ReasonCount;
use crate::queue::Flavor;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The first thing that kept a job from starting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum PendingReason {
    /// Held by its submitter or an admin; never started until released.
    Held,
    /// Dependencies not yet met (names of the jobs still to end).
    Dependency { waiting_on: Vec<String> },
    /// A dependency ended the way that rules this job out (an `afterok` job failed): it never
    /// starts, and waits to be cancelled (Slurm's `DependencyNeverSatisfied`).
    DependencyNeverSatisfied { failed: Vec<String> },
    /// Jobs ahead of it in priority and fair-share order took the pass (it was not tried).
    QueueOrder,
    /// Its queue, or an ancestor, would go over a quota.
    Quota { queue: String, flavor: Flavor, rule: String, used_milli: u64, asked_milli: u64, bound_milli: u64 },
    /// Its user would go over a per-user limit (`running-jobs` or `gpus`).
    UserLimit { user: String, limit: String, used: u64, bound: u64 },
    /// Its array already runs as many elements as it allows.
    ArrayThrottle { array: String, max_running: u32 },
    /// No node can hold it now: the engine's reasons, with on how many nodes each applied,
    /// and (filled in when explained) what each node class — GPU model — has free.
    Resources {
        reasons: Vec<ReasonCount>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        by_class: Vec<ClassFree>,
    },
    /// It would fit, but starting it would delay a job with a reserved start.
    Reservation { job: String, start_s: u64 },
    /// Lower-priority or borrowing jobs are being stopped for it; it starts when they are gone.
    Preempting { victims: u32, until_s: u64 },
}

/// Every category [`PendingReason::category`] gives, in a fixed order (metrics list each, at
/// 0 when no job waits for it).
pub const REASON_CATEGORIES: [&str; 10] = [
    "held",
    "dependency",
    "dependency-never-satisfied",
    "queue-order",
    "quota",
    "user-limit",
    "array-throttle",
    "resources",
    "reservation",
    "preempting",
];

impl PendingReason {
    /// The reason's kind without its details: one of [`REASON_CATEGORIES`], bounded, for
    /// grouping waiting jobs (metrics, the dashboard).
    pub fn category(&self) -> &'static str {
        match self {
            PendingReason::Held => "held",
            PendingReason::Dependency { .. } => "dependency",
            PendingReason::DependencyNeverSatisfied { .. } => "dependency-never-satisfied",
            PendingReason::QueueOrder => "queue-order",
            PendingReason::Quota { .. } => "quota",
            PendingReason::UserLimit { .. } => "user-limit",
            PendingReason::ArrayThrottle { .. } => "array-throttle",
            PendingReason::Resources { .. } => "resources",
            PendingReason::Reservation { .. } => "reservation",
            PendingReason::Preempting { .. } => "preempting",
        }
    }

    /// A short stable name for the kind, for counting (`resources: insufficient-whole-gpus`).
    pub fn kind(&self) -> String {
        Self::kind_text(self.kind_parts())
    }

    /// The text of a kind given in parts ([`PendingReason::kind_parts`]).
    pub fn kind_text((name, detail): (&'static str, Option<&'static str>)) -> String {
        match detail {
            Some(detail) => format!("{name}: {detail}"),
            None => name.into(),
        }
    }

    /// [`PendingReason::kind`] in its two parts, without building the text: what a count kept
    /// on every change keys by. The first is the category; resources add what refused them.
    pub fn kind_parts(&self) -> (&'static str, Option<&'static str>) {
        let detail = match self {
            PendingReason::Resources { reasons, .. } => reasons.first().map(|r| r.reason.kind()),
            _ => None,
        };
        (self.category(), detail)
    }
}

fn gpus(milli: u64) -> String {
    let g = milli as f64 / 1000.0;
    if g.fract() == 0.0 { format!("{g:.0}") } else { format!("{g:.3}") }
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PendingReason::Held => write!(f, "held (release it to let it start)"),
            PendingReason::Dependency { waiting_on } => write!(f, "waiting for {} to end", waiting_on.join(", ")),
            PendingReason::DependencyNeverSatisfied { failed } => {
                write!(f, "can never start: {} ended the way its dependency rules out (cancel it)", failed.join(", "))
            }
            PendingReason::QueueOrder => write!(f, "jobs ahead in priority and fair-share order go first"),
            PendingReason::Quota { queue, flavor, rule, used_milli, asked_milli, bound_milli } => {
                let flavor = match flavor {
                    Flavor::Model(m) => m.clone(),
                    Flavor::MilliPool => "shared milli-GPU".into(),
                };
                write!(
                    f,
                    "queue {queue} would exceed its {rule} for {flavor}: {} in use + {} asked > {} GPUs",
                    gpus(*used_milli),
                    gpus(*asked_milli),
                    gpus(*bound_milli)
                )
            }
            PendingReason::UserLimit { user, limit, used, bound } => match limit.as_str() {
                "gpus" => write!(f, "user {user} holds {} GPUs, the limit is {}", gpus(*used), gpus(*bound)),
                _ => write!(f, "user {user} runs {used} jobs, the limit is {bound}"),
            },
            PendingReason::ArrayThrottle { array, max_running } => {
                write!(f, "array {array} already runs {max_running} elements (its %{max_running} limit)")
            }
            PendingReason::Resources { reasons, by_class } => {
                write!(f, "no node can hold it now")?;
                for (i, r) in reasons.iter().take(3).enumerate() {
                    write!(f, "{} {} on {} node(s)", if i == 0 { ":" } else { ";" }, r.reason, r.count)?;
                }
                let accepted: Vec<String> = by_class
                    .iter()
                    .filter(|c| c.accepted)
                    .map(|c| {
                        format!(
                            "{}: {} free, at most {} whole on one of {} node(s)",
                            c.model,
                            gpus(c.free_milli),
                            c.max_whole_free_on_node,
                            c.nodes
                        )
                    })
                    .collect();
                if !accepted.is_empty() {
                    write!(f, " [{}]", accepted.join("; "))?;
                }
                Ok(())
            }
            PendingReason::Reservation { job, start_s } => {
                write!(f, "starting now would delay job {job}, reserved to start at t={start_s}s")
            }
            PendingReason::Preempting { victims, until_s } => {
                write!(f, "{victims} job(s) are being stopped for it (grace period ends at t={until_s}s)")
            }
        }
    }
}

/// What one node class (the nodes with GPUs of one model) has free, for a job's explanation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClassFree {
    pub model: String,
    /// Does the job accept this model (its model patterns and selector)?
    pub accepted: bool,
    pub nodes: u32,
    /// Most wholly free GPUs of this model on one node, and free milli-GPU across the class.
    pub max_whole_free_on_node: u32,
    pub free_milli: u64,
}

/// One pending job as `why` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PendingJob {
    pub job: String,
    pub queue: String,
    /// Since when it has been eligible (arrived, dependencies met), seconds.
    pub since_s: u64,
    pub reason: PendingReason,
    /// Its expected start, where the planner reserved one (seconds on the same clock).
    pub estimate_s: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Reason, ReasonCount};

    #[test]
    fn a_kind_is_its_category_and_for_resources_what_refused_them_first() {
        assert_eq!(PendingReason::Held.kind(), "held");
        assert_eq!(PendingReason::QueueOrder.kind_parts(), ("queue-order", None));
        let none = PendingReason::Resources { reasons: Vec::new(), by_class: Vec::new() };
        assert_eq!(none.kind(), "resources");
        let whole = ReasonCount { reason: Reason::InsufficientWholeGpus { need: 2, free: 1 }, count: 3 };
        let some = PendingReason::Resources { reasons: vec![whole], by_class: Vec::new() };
        assert_eq!(some.kind(), "resources: insufficient-whole-gpus");
        assert_eq!(PendingReason::kind_text(some.kind_parts()), some.kind());
    }
}
