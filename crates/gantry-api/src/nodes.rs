//! A node as `GET /v1/nodes` shows it: its GPUs, what each holds and uses, which jobs run
//! there, and how its agent confines tasks.

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A node as `gantry nodes` shows it: its GPUs, what each holds, which jobs run there.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct NodeView {
    pub name: String,
    /// Its CPU and memory, and what running jobs leave of them (millicores, bytes).
    #[serde(default)]
    pub cpu_milli: u64,
    #[serde(default)]
    pub cpu_free_milli: u64,
    #[serde(default)]
    pub memory_bytes: u64,
    #[serde(default)]
    pub memory_free_bytes: u64,
    /// Its labels as `key=value` (Slurm's node features).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
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
    pub confinement: Option<gantry_wire::Confinement>,
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
    /// GPU memory in use as NVML measured it with that sample, MiB (`None`: not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_mib: Option<u64>,
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
    /// The driver's id of the instance (DCGM's `GPU_I_ID`), where the node's agent read it
    /// from NVML.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance_id: Option<u32>,
}
