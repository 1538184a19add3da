//! gantry's file formats: the fleet, workload and queue files, in TOML, and the native trace
//! (JSON lines of job specs with arrival and duration).
//!
//! The key decision: files are parsed into private "as written" structs with
//! `deny_unknown_fields`, then validated into `gantry-types` values in one pass that either
//! returns everything or an error naming the field, what is wrong and a hint. Nothing partial
//! ever leaves this crate, so a bad file changes nothing downstream. Dialects (Kubernetes
//! resource names) are translated here, at the edge, into the one model.

mod error;
mod export;
mod export_k8s;
mod files;
mod fleet;
mod fleet_out;
mod hostlist;
mod import_k8s;
mod import_kueue;
mod import_sacct;
mod import_slurm;
mod import_slurm_nodes;
mod import_slurm_partitions;
mod model_map;
mod quantity;
mod queue_partitions;
mod queue_preemption;
mod queues;
/// Slurm habits (`#SBATCH` options, `submit --gpus N -- command`) as gantry job tables.
pub mod sbatch;
pub mod sbatch_cli;
pub mod sbatch_export;
pub mod srun_cli;
mod trace;
mod workload;

pub use error::SpecError;
pub use export::slurm_conf;
pub use export_k8s::{
    DEVICE_PLUGIN_DEFAULT, config_name, device_plugin_yaml, mig_parted_configmap_yaml, mig_parted_yaml, node_labels,
    plan_files,
};
pub use files::{DEMO_FLEET, DEMO_WORKLOAD, FileError, load_fleet, load_workload, read_spec};
pub use fleet::{
    FLEET_NODES_MAX, MPS_CLIENTS_MAX, NODE_GPUS_MAX, SPEC_BYTES_MAX, TIME_SLICE_REPLICAS_MAX, parse_fleet, uuid_for,
};
pub use fleet_out::fleet_to_toml;
pub use import_k8s::{
    ImportedFleet, ImportedTrace, PodOptions, import_nodes as import_kubernetes_nodes,
    import_pods as import_kubernetes_pods,
};
pub use import_kueue::{ImportedQueues, import_kueue};
pub use import_sacct::{QueueFrom, SACCT_FIELDS, SACCT_LINE_BYTES_MAX, import_sacct, sacct_trace};
pub use import_slurm::{
    HOSTLIST_MAX, ImportedSlurm, SLURM_CONF_LINE_BYTES_MAX, SlurmSource, expand_hostlist, import_slurm_conf,
};
pub use model_map::model_map;
pub use quantity::{MEMORY_MAX, Quantity, cpu as parse_cpu, duration_seconds, memory as parse_memory};
pub use queues::{
    HALF_LIFE_DEFAULT_S, QUEUE_DEPTH_MAX, QUEUE_WEIGHT_MAX, QUEUES_MAX, STARVATION_DEFAULT_S, parse_queues,
};
pub use trace::{TRACE_LINE_BYTES_MAX, TRACE_SECONDS_MAX, Trace, TraceJob, parse_trace_line, read_trace};
pub use workload::{
    GPUS_PER_TASK_MAX, JOBS_MAX, NAME_CHARS_MAX, PRIORITY_RANGE, REPLICAS_MAX, check_name, dependency_index,
    parse_submission, parse_workload, printable,
};

#[cfg(test)]
mod tests;
