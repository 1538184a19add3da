//! The node agent, whole: its loop ([`node`]: register the node, heartbeat, carry out the
//! controller's orders), the task [`runner`] (processes, pid and exit files, signals) with how
//! a task's first process is made ([`spawn`]), its [`claims`] and [`files`] (named by rank,
//! never by a member's names), confinement in cgroups ([`cgroup`]), [`mps`]
//! control daemons, GPU discovery ([`discover`]) with how the GPUs connect ([`topology`]), MIG
//! layouts ([`mig`], [`mig_nvml`]; the controller's layout orders in [`layouts`]) and utilization samples ([`sample`]) through NVML, loaded
//! at run time. What `gantry agent` settles before its loop (its node and GPUs, its token, its
//! link, its banner) is in [`setup`]. It speaks to the controller only through `gantry-wire`;
//! `serve --local` runs the same runner in-process.
//!
//! The key decision: the agent is the only code that touches a node (processes, cgroups,
//! NVML), and it decides nothing. It carries out the controller's orders, each idempotent,
//! and reports what is; a task is claimed on disk before it starts, so a restarted agent
//! re-adopts its tasks and a repeated order starts nothing twice.

pub mod account;
pub mod cgroup;
pub mod claims;
pub mod discover;
pub mod error;
pub mod files;
pub mod layouts;
pub mod mig;
pub mod mig_nvml;
pub mod mps;
pub mod node;
pub mod output;
pub mod runner;
pub mod runs;
pub mod sample;
pub mod setup;
pub mod signals;
pub mod spawn;
pub mod steps;
pub mod task_env;
pub mod topology;
