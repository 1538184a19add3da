//! How a node agent confines its tasks, as flags: `gantry agent` and `gantry serve --local`
//! (whose agents run in-process) take the same ones.

use clap::Args;
use gantry_agent::cgroup::Choice;
use gantry_agent::runner::Defaults;

#[derive(Args, Clone, Debug, Default)]
pub struct ConfineArgs {
    /// How tasks are confined: auto (cgroup v2 where /sys/fs/cgroup is one, else the cgroup v1
    /// controllers), cgroup-v1, cgroup-v2, or off. Each job's run on a node is a cgroup held
    /// to its memory (no swap), CPU, processes and granted GPU devices; stopping it kills the
    /// cgroup. Needs root: otherwise, or with off, tasks run unconfined and the node says so.
    #[arg(long, value_name = "MODE", value_parser = parse_choice)]
    pub confinement: Option<Choice>,
    /// Memory a task that asked for none is held to (e.g. 4GiB), or "unlimited". Default 4GiB.
    #[arg(long, value_name = "SIZE")]
    pub memory_unasked: Option<String>,
    /// CPU a task that asked for none gets (cores: 1, 0.5, "500m"), or "unlimited". Default 1.
    #[arg(long, value_name = "CPU")]
    pub cpu_unasked: Option<String>,
    /// Processes and threads one task may run (a fork bomb stops there). Default 4096.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(16..=4_194_304))]
    pub pids_per_task: Option<u64>,
}

fn parse_choice(text: &str) -> Result<Choice, String> {
    text.parse()
}

impl ConfineArgs {
    pub fn choice(&self) -> Choice {
        self.confinement.unwrap_or_default()
    }

    /// What a task that asked for nothing gets, from the flags and the defaults.
    pub fn defaults(&self) -> anyhow::Result<Defaults> {
        use gantry_spec::Quantity;
        let mut defaults = Defaults::default();
        if let Some(text) = &self.memory_unasked {
            defaults.memory_unasked_bytes = match text.as_str() {
                "unlimited" => None,
                size => Some(
                    gantry_spec::parse_memory("--memory-unasked", &Quantity::Text(size.into()))
                        .map_err(|e| anyhow::anyhow!("{e}"))?
                        .0,
                ),
            };
        }
        if let Some(text) = &self.cpu_unasked {
            defaults.cpu_unasked_milli = match text.as_str() {
                "unlimited" => None,
                cpu => Some(u64::from(
                    gantry_spec::parse_cpu("--cpu-unasked", &Quantity::Text(cpu.into()))
                        .map_err(|e| anyhow::anyhow!("{e}"))?
                        .0,
                )),
            };
        }
        if defaults.memory_unasked_bytes == Some(0) || defaults.cpu_unasked_milli == Some(0) {
            anyhow::bail!("--memory-unasked and --cpu-unasked take a size above 0, or unlimited");
        }
        if let Some(pids) = self.pids_per_task {
            defaults.pids_per_task = pids;
        }
        Ok(defaults)
    }
}
