//! GPU reconfigurations as the API shows them: what the online planner would change
//! (`GET /v1/plan`), and the changes the controller carries out with their phases
//! (`GET /v1/reconfigurations`), each record as the store keeps it.

use gantry_types::GpuMode;
use serde::{Deserialize, Serialize};

/// What the controller does with the online planner's changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReconfigureMode {
    /// No planning at all.
    Off,
    /// Planned and shown (`gantry nodes --plan`, a waiting job's reason); an admin applies.
    #[default]
    Advise,
    /// Carried out by the controller, within the guards.
    Auto,
}

/// Where a reconfiguration is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    Draining,
    Ordered,
    Applied,
    Refused,
    Abandoned,
}

impl Phase {
    pub fn is_final(self) -> bool {
        matches!(self, Phase::Applied | Phase::Refused | Phase::Abandoned)
    }
}

/// One GPU's reconfiguration, as stored and shown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Reconfiguration {
    pub id: u64,
    pub node: String,
    pub gpu: u32,
    #[schema(value_type = Object)]
    pub from: GpuMode,
    #[schema(value_type = Object)]
    pub to: GpuMode,
    pub phase: Phase,
    /// Why, in words: which waiting jobs (or expected demand) it serves.
    pub reason: String,
    /// The waiting jobs it serves.
    pub serves: Vec<u64>,
    pub started_s: u64,
    /// When the agent was ordered to apply it.
    #[serde(default)]
    pub ordered_s: Option<u64>,
    #[serde(default)]
    pub ended_s: Option<u64>,
    /// A drain not empty by then is abandoned.
    pub deadline_s: u64,
    /// When the work on the GPU is planned to end (by time limits), when it was busy.
    #[serde(default)]
    pub busy_until_s: Option<u64>,
    /// Why it was refused or abandoned.
    #[serde(default)]
    pub outcome: Option<String>,
    /// Restartable jobs moved off the GPU for it.
    #[serde(default)]
    pub moved: Vec<u64>,
}

impl Reconfiguration {
    /// When it should be done, as far as anyone knows (a waiting job's estimate).
    pub fn expected_done_s(&self, now: u64) -> u64 {
        /// Seconds an agent takes to apply a layout (NVML creates instances in well under a
        /// minute; the GPU is reported back with the next heartbeat).
        const APPLY_S: u64 = 60;
        match self.phase {
            Phase::Draining => self.busy_until_s.unwrap_or(now).min(self.deadline_s).max(now) + APPLY_S,
            _ => self.ordered_s.unwrap_or(now).max(now) + APPLY_S,
        }
    }
}

/// What the online planner would change now (`GET /v1/plan`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct PlanView {
    /// Idle GPUs it would reconfigure now.
    pub reconfigure: Vec<PlannedChange>,
    /// Busy GPUs it would drain first (their work ends within the drain horizon).
    pub drain: Vec<PlannedChange>,
    /// Changes it wants that wait: work on the GPU ends later, or it changed recently.
    pub deferred: u32,
    /// Tasks planned for: those of the waiting and the running jobs (and the forecast).
    pub demand_tasks: u32,
    /// What the controller does with these changes: off, advise (an admin applies them) or
    /// auto (it carries them out itself, within its guards).
    #[serde(default)]
    pub mode: ReconfigureMode,
}

/// One GPU's mode now and the one the planner wants.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct PlannedChange {
    pub node: String,
    pub gpu: u32,
    pub from: String,
    pub to: String,
}

/// What the controller reconfigures.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ReconfigurationsView {
    /// off, advise or auto.
    pub mode: ReconfigureMode,
    /// Under way: draining (cordoned, its work ending) or ordered (the agent applies it).
    pub under_way: Vec<Reconfiguration>,
    /// Finished (applied, refused, abandoned), newest last; at most 200.
    pub recent: Vec<Reconfiguration>,
    pub applied: u64,
    pub refused: u64,
    pub abandoned: u64,
    /// Restartable jobs moved to empty GPUs.
    pub moves: u64,
    /// GPU-hours left unallocated on GPUs cordoned for reconfiguration.
    pub cordoned_idle_gpu_hours: f64,
}
