//! The chargeback report (`GET /v1/usage`): allocation and measured use side by side, per
//! user, queue, model or job.

/// What `usage` groups by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UsageBy {
    User,
    Queue,
    Model,
    Job,
}

impl UsageBy {
    /// The name the API and the CLI's `--by` use.
    pub fn name(self) -> &'static str {
        match self {
            UsageBy::User => "user",
            UsageBy::Queue => "queue",
            UsageBy::Model => "model",
            UsageBy::Job => "job",
        }
    }
}

/// One line of a chargeback report: allocation and measured use side by side, the waste in
/// between, in GPU-hours and money.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct UsageLine {
    /// The user, queue, model or job id the line is for.
    pub key: String,
    pub allocated_gpu_hours: f64,
    pub used_gpu_hours: f64,
    /// used / allocated (0 when nothing was allocated).
    pub utilization: f64,
    /// allocated − used.
    pub waste_gpu_hours: f64,
    /// GPU-hours × each model's billing weight.
    pub normalized_allocated_gpu_hours: f64,
    pub normalized_used_gpu_hours: f64,
    /// Dollars at each model's price: billed by allocation, by use, and the difference.
    pub cost_allocated: f64,
    pub cost_used: f64,
    pub waste_cost: f64,
    /// CPU time the nodes measured of the jobs on this line (their cgroups), hours.
    #[serde(default)]
    pub cpu_hours: f64,
    /// The highest memory peak one of its jobs reached on one node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_peak_bytes: Option<u64>,
}

impl UsageLine {
    /// A line with nothing on it yet.
    pub fn empty(key: String) -> UsageLine {
        UsageLine {
            key,
            allocated_gpu_hours: 0.0,
            used_gpu_hours: 0.0,
            utilization: 0.0,
            waste_gpu_hours: 0.0,
            normalized_allocated_gpu_hours: 0.0,
            normalized_used_gpu_hours: 0.0,
            cost_allocated: 0.0,
            cost_used: 0.0,
            waste_cost: 0.0,
            cpu_hours: 0.0,
            memory_peak_bytes: None,
        }
    }
}
