//! What a job asks for, in gantry's one model. Dialects (Kubernetes resource names, `#SBATCH`)
//! are translated into this at the edge.

use crate::quantity::{Bytes, MilliCpu, MilliGpu};
use serde::{Deserialize, Serialize};

/// A job: task groups whose tasks are all placed together or not at all (a gang).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub name: String,
    pub queue: String,
    pub priority: i32,
    pub groups: Vec<TaskGroup>,
    /// How the job may be stopped for others.
    #[serde(default)]
    pub lifecycle: Lifecycle,
    /// Jobs that must have ended (in the given way) before this one may start.
    #[serde(default)]
    pub after: Vec<Dependency>,
    /// Who submitted it, its time limit, a hold, its place in an array.
    #[serde(default)]
    pub control: JobControl,
    /// What each task runs (the live system; the simulator ignores it).
    #[serde(default)]
    pub run: Run,
}

/// The process every task of a job runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// Program and arguments; empty = a placeholder that reports its devices and exits.
    pub command: Vec<String>,
    /// Extra environment, on top of what gantry sets (devices, ranks).
    pub env: Vec<(String, String)>,
    /// Working directory (default: the agent's job directory).
    pub workdir: Option<String>,
}

/// What the submitter controls about when and how long a job runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobControl {
    /// The submitting user, for per-user limits (`None`: no user limits apply). A live
    /// service sets it from the submitting token.
    pub user: Option<String>,
    /// An admin who submitted on behalf of `user` (set by the service, never by a spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_by: Option<String>,
    /// The job is ended when it has run this long; planning (backfill, estimates) counts on it.
    pub time_limit_s: Option<u64>,
    /// Held: never started until released.
    pub hold: bool,
    /// This job is one element of an array.
    pub array: Option<ArrayElement>,
    /// The submission's idempotency key (set by the service from the request, never by a
    /// spec): a retry with the same key from the same token gets these jobs back instead of
    /// new ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submission_key: Option<String>,
    /// The priority the job's file named, if it named one: a live controller grants the
    /// job its queue's default when it named none, and caps a member's at the queue's maximum
    /// (`priority` is what it was granted; this says what was asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_asked: Option<i32>,
    /// Slurm's partition: the node set the job runs in, with its limits (the queue file's
    /// `[[partition]]`; the controller resolves it at submission and sets it to the default
    /// partition when the job names none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// The QOS the job asked for: a name the queue file gives a priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
}

/// One element of a job array (Slurm's `--array=0-15%4`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayElement {
    /// The array's name (what a dependency on the whole array names).
    pub array: String,
    pub index: u32,
    /// At most this many elements of the array run at once (`%N`).
    pub max_running: Option<u32>,
    /// The array's job id, as Slurm numbers an array (`SLURM_ARRAY_JOB_ID`, `%A`): its first
    /// element's id, set by the controller at submission (`None` before, and in logs from
    /// before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<u64>,
    /// The array's lowest and highest index and its number of elements
    /// (`SLURM_ARRAY_TASK_MIN`, `_MAX`, `_COUNT`; zero in logs from before they were kept).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub count: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Slurm's dependency kinds: start after the named job ended successfully, in any way, or
/// unsuccessfully.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DependencyKind {
    AfterOk,
    AfterAny,
    AfterNotOk,
}

/// One dependency of a job on another, by name — and, once the live service has resolved
/// the name at submission, by id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Dependency {
    pub kind: DependencyKind,
    /// The job (or array) named, as written.
    pub job: String,
    /// The job it stands for (one entry per element when the name is an array's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
}

/// Whether and how a running job may be preempted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifecycle {
    /// May be stopped for a job with a right to the capacity (higher priority, or a queue
    /// reclaiming its guarantee). Default true, as Kubernetes pods are.
    pub preemptible: bool,
    /// Not stopped before it has run this long, seconds.
    pub min_runtime_s: u64,
    /// Between the stop signal and the kill, seconds.
    pub grace_s: u64,
    /// An interactive session (a notebook, a shell): where its queue's idle policy reclaims,
    /// it is reclaimed when idle even if it is not preemptible.
    #[serde(default)]
    pub interactive: bool,
    /// When a node it runs on is lost, the job waits again (true, Slurm's default for batch
    /// jobs) or ends `lost` (false).
    #[serde(default = "requeue_default")]
    pub requeue: bool,
    /// Its tasks may be stopped and started again elsewhere at any time (replicas of a
    /// service, not a training run): the controller may move it to empty a GPU it is
    /// reconfiguring. A move is a requeue, recorded as a move, never a failure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restartable: bool,
}

fn requeue_default() -> bool {
    true
}

/// Default grace period between the stop signal and the kill (Kubernetes' default too).
pub const GRACE_DEFAULT_S: u64 = 30;

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            preemptible: true,
            min_runtime_s: 0,
            grace_s: GRACE_DEFAULT_S,
            interactive: false,
            requeue: true,
            restartable: false,
        }
    }
}

impl Job {
    pub fn task_count(&self) -> u32 {
        self.groups.iter().map(|g| g.replicas).sum()
    }
}

/// `replicas` identical tasks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskGroup {
    pub name: String,
    pub replicas: u32,
    pub resources: TaskResources,
    /// Each task of the group on a node of its own (a Slurm allocation's `--nodes`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub distinct_nodes: bool,
    /// Each task takes its whole node — every CPU, all memory and every GPU — and shares
    /// it with no other work (Slurm's `--exclusive`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclusive_node: bool,
    /// Only nodes with each of these labels (Kubernetes' `nodeSelector`; Slurm's
    /// `--constraint` as `slurm.feature/NAME = "true"`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub node_selector: std::collections::BTreeMap<String, String>,
}

/// What one task needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskResources {
    pub cpu: MilliCpu,
    pub memory: Bytes,
    pub gpu: Option<GpuRequest>,
    /// Acceptable GPU models (globs over catalog ids and aliases); empty = any model.
    pub models: Vec<ModelPattern>,
    /// CEL expression over `device` attributes; see docs/formats.md.
    pub selector: Option<String>,
    pub isolation: Isolation,
    pub topology: Topology,
    /// Taints this task tolerates, as `key` or `key=value` (effect ignored).
    pub tolerations: Vec<String>,
}

/// The GPU part of a task's request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum GpuRequest {
    /// `count` whole GPUs on one node.
    Whole { count: u32 },
    /// One MIG instance of this profile (e.g. `1g.10gb`).
    Mig { profile: String },
    /// A fraction of one GPU: compute share plus memory, through MPS or time-slicing.
    Share { milli: MilliGpu, memory: Bytes, mode: ShareMode },
    /// Only a memory size: the engine picks the unit — the kind the sharing-mode advisor
    /// recommends for the hint's job shape where one is given, else the smallest that fits.
    Memory {
        memory: Bytes,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hint: Option<UnitHint>,
    },
}

/// What a job is for, as the sharing-mode advisor weighs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Purpose {
    Training,
    Inference,
    Development,
    Batch,
}

impl Purpose {
    pub fn parse(text: &str) -> Option<Purpose> {
        Some(match text {
            "training" => Purpose::Training,
            "inference" => Purpose::Inference,
            "development" => Purpose::Development,
            "batch" => Purpose::Batch,
            _ => return None,
        })
    }
}

/// A memory-only request's job shape, so the advisor can choose its unit (whole GPU, MIG
/// instance, MPS share or time-slice) on each GPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct UnitHint {
    pub purpose: Purpose,
    #[serde(default)]
    pub bursty: bool,
    #[serde(default)]
    pub latency_sensitive: bool,
    /// Its code may share an MPS server with others (no fault isolation between clients).
    #[serde(default)]
    pub trusted: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShareMode {
    Mps,
    TimeSlice,
    Any,
}

/// How strongly the task must be isolated from its neighbours on a GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    /// Whole GPU or MIG instance only (memory and fault isolation in hardware).
    Hard,
    /// Also MPS (memory limit, no fault isolation).
    Soft,
    /// Anything, time-slicing included.
    #[default]
    None,
}

impl Isolation {
    pub fn name(self) -> &'static str {
        match self {
            Isolation::Hard => "hard",
            Isolation::Soft => "soft",
            Isolation::None => "none",
        }
    }
}

/// Where the GPUs of a task group should sit relative to each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub within: TopologyLevel,
    /// Required: fail rather than spread wider. Preferred: tightest level available wins.
    pub required: bool,
}

impl Default for Topology {
    /// Multi-GPU work prefers one NVLink domain, falling back level by level.
    fn default() -> Self {
        Topology { within: TopologyLevel::Nvlink, required: false }
    }
}

/// Topology levels, tightest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum TopologyLevel {
    Nvlink,
    Numa,
    Node,
    Rack,
    /// Anywhere in the fleet (only as an achieved level, never requested).
    Fleet,
}

impl TopologyLevel {
    pub fn name(self) -> &'static str {
        match self {
            TopologyLevel::Nvlink => "nvlink",
            TopologyLevel::Numa => "numa",
            TopologyLevel::Node => "node",
            TopologyLevel::Rack => "rack",
            TopologyLevel::Fleet => "fleet",
        }
    }
}

/// A GPU model pattern: a glob (`*`, `?`) over catalog ids and aliases, case-insensitive.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ModelPattern(pub String);

impl ModelPattern {
    /// Does `name` match this glob? Case-insensitive, `*` = any run, `?` = one character.
    pub fn matches(&self, name: &str) -> bool {
        glob_match(self.0.to_ascii_lowercase().as_bytes(), name.to_ascii_lowercase().as_bytes())
    }
}

fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    // Iterative matcher with single-star backtracking: linear in practice, no recursion.
    let (mut p, mut t) = (0, 0);
    let (mut star_p, mut star_t) = (usize::MAX, 0);
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star_p = p;
            star_t = t;
            p += 1;
        } else if star_p != usize::MAX {
            p = star_p + 1;
            star_t += 1;
            t = star_t;
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// The variables gantry sets for every task from its place in the run (`SLURM_*`, and
/// `torch.distributed`'s `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`,
/// `MASTER_ADDR`, `MASTER_PORT`): a job may not set them itself, since a rank or a job id
/// that lies would send a program's processes to the wrong peers or files.
pub fn is_run_variable(name: &str) -> bool {
    name.starts_with("SLURM")
        || ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"].contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_case_insensitively() {
        let cases = [
            ("H100*", "H100-SXM5-80GB", true),
            ("h100*", "H100-SXM5-80GB", true),
            ("A100-*80GB", "A100-SXM4-80GB", true),
            ("A100-*80GB", "A100-SXM4-40GB", false),
            ("*", "T4-16GB", true),
            ("T4-1?GB", "T4-16GB", true),
            ("H100", "H100-SXM5-80GB", false),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(ModelPattern(pattern.into()).matches(name), want, "{pattern} vs {name}");
        }
    }
}
