//! The environment Slurm and PyTorch programs read to find their place in a run: `SLURM_*`
//! (job, task, node and array ids, the node list in Slurm's hostlist form) and
//! `torch.distributed`'s `env://` variables (`MASTER_ADDR`, `MASTER_PORT`, `RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`), so a script written for Slurm or for
//! `torchrun` runs unchanged. Built from the launch alone; docs/formats.md has the table.

use gantry_types::text::hostlist;
use gantry_wire::{Launch, RunLayout};

/// The port of a run's rendezvous: one per job, so two jobs whose first tasks share a node
/// do not collide (what `GANTRY_MASTER_PORT` has always been).
pub fn master_port(job: u64) -> u16 {
    (29_500 + job % 10_000) as u16
}

/// The variables for task `l`; `master_addr` is its rendezvous host as this node reaches it.
pub fn run_env(l: &Launch, master_addr: &str) -> Vec<(String, String)> {
    // A launch from a controller that sends no layout: a run of its own on this node.
    let single;
    let layout = match &l.layout {
        Some(layout) => layout,
        None => {
            single = RunLayout {
                nodes: vec![l.node.clone()],
                node_index: 0,
                local_rank: 0,
                local_tasks: 1,
                gpus_on_node: l.devices.len() as u32,
            };
            &single
        }
    };
    let cpus = l.cpu_milli.filter(|&m| m > 0).map(|m| m.div_ceil(1000));
    let mut env: Vec<(&str, String)> = vec![
        ("RANK", l.rank.to_string()),
        ("WORLD_SIZE", l.world_size.to_string()),
        ("LOCAL_RANK", layout.local_rank.to_string()),
        ("LOCAL_WORLD_SIZE", layout.local_tasks.to_string()),
        ("MASTER_ADDR", master_addr.to_string()),
        ("MASTER_PORT", master_port(l.job).to_string()),
        ("SLURM_CLUSTER_NAME", "gantry".to_string()),
        ("SLURM_JOB_ID", l.job.to_string()),
        ("SLURM_JOBID", l.job.to_string()),
        ("SLURM_JOB_NAME", slurm_job_name(l)),
        ("SLURM_NTASKS", l.world_size.to_string()),
        ("SLURM_NPROCS", l.world_size.to_string()),
        ("SLURM_PROCID", l.rank.to_string()),
        ("SLURM_LOCALID", layout.local_rank.to_string()),
        ("SLURM_NODEID", layout.node_index.to_string()),
        ("SLURM_NNODES", layout.nodes.len().to_string()),
        ("SLURM_JOB_NUM_NODES", layout.nodes.len().to_string()),
        ("SLURM_JOB_NODELIST", hostlist(&layout.nodes)),
        ("SLURM_NODELIST", hostlist(&layout.nodes)),
        ("SLURMD_NODENAME", l.node.clone()),
        ("SLURM_TOPOLOGY_ADDR", l.node.clone()),
        ("SLURM_TOPOLOGY_ADDR_PATTERN", "node".to_string()),
        ("SLURM_NODE_ALIASES", "(null)".to_string()),
        ("SLURM_GTIDS", l.rank.to_string()),
        ("SLURM_GPUS_ON_NODE", layout.gpus_on_node.to_string()),
    ];
    env.extend(cpus.map(|c| ("SLURM_CPUS_PER_TASK", c.to_string())));
    env.extend(cpus.map(|c| ("SLURM_CPUS_ON_NODE", c.to_string())));
    // Slurm sets it once a job has been requeued: how many times.
    env.extend((l.attempt > 0).then(|| ("SLURM_RESTART_COUNT", l.attempt.to_string())));
    env.extend((!l.queue.is_empty()).then(|| ("SLURM_JOB_PARTITION", l.queue.clone())));
    env.extend((!l.account.is_empty()).then(|| ("SLURM_JOB_USER", l.account.clone())));
    env.extend(l.workdir.clone().map(|w| ("SLURM_SUBMIT_DIR", w)));
    env.extend(l.array_index.map(|i| ("SLURM_ARRAY_TASK_ID", i.to_string())));
    env.extend(l.array_job.map(|j| ("SLURM_ARRAY_JOB_ID", j.to_string())));
    if let Some([min, max, count]) = l.array_span {
        env.extend([
            ("SLURM_ARRAY_TASK_MIN", min.to_string()),
            ("SLURM_ARRAY_TASK_MAX", max.to_string()),
            ("SLURM_ARRAY_TASK_COUNT", count.to_string()),
        ]);
    }
    env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// The job's name as Slurm gives it: an array element's is its array's (`sweep`, where gantry
/// names the element `sweep[3]`).
fn slurm_job_name(l: &Launch) -> String {
    match l.array_index {
        Some(i) => l.job_name.strip_suffix(&format!("[{i}]")).unwrap_or(&l.job_name).to_string(),
        None => l.job_name.clone(),
    }
}

/// What a batch job's steps need ([`crate::steps`]): the run's step key (when the controller
/// gave one), the run's nodes in order, and this agent's binary (which is also `srun`).
pub fn step_env(l: &Launch) -> Vec<(String, String)> {
    let nodes = l.layout.as_ref().map_or_else(|| l.node.clone(), |layout| layout.nodes.join(","));
    let mut env = vec![("GANTRY_RUN_NODES".to_string(), nodes)];
    env.extend(l.step_key.clone().map(|k| (crate::steps::STEP_KEY_VAR.to_string(), k)));
    env.extend(std::env::current_exe().ok().map(|bin| ("GANTRY_BIN".to_string(), bin.display().to_string())));
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn launch(rank: u32, node: &str, layout: Option<RunLayout>) -> Launch {
        Launch {
            job: 42,
            job_name: "train[3]".into(),
            group: "worker".into(),
            replica: rank,
            rank,
            world_size: 4,
            node: node.into(),
            master_node: "n1".into(),
            devices: vec!["GPU-a".into()],
            mps: None,
            command: Vec::new(),
            env: Vec::new(),
            workdir: Some("/home/alice/run".into()),
            time_limit_s: None,
            grace_s: 0,
            attempt: 0,
            account: "alice".into(),
            cpu_milli: Some(2500),
            memory_bytes: None,
            layout,
            array_index: Some(3),
            step_key: None,
            array_job: Some(40),
            array_span: Some([0, 7, 8]),
            queue: "research".into(),
        }
    }

    #[test]
    fn a_task_learns_its_place_in_the_run() {
        let layout =
            RunLayout { nodes: names(&["n1", "n2"]), node_index: 1, local_rank: 1, local_tasks: 2, gpus_on_node: 2 };
        let env: std::collections::BTreeMap<String, String> =
            run_env(&launch(3, "n2", Some(layout)), "n1").into_iter().collect();
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(
            (get("RANK"), get("WORLD_SIZE"), get("LOCAL_RANK"), get("LOCAL_WORLD_SIZE")),
            (Some("3"), Some("4"), Some("1"), Some("2"))
        );
        assert_eq!((get("MASTER_ADDR"), get("MASTER_PORT")), (Some("n1"), Some("29542")));
        assert_eq!(
            (get("SLURM_JOB_ID"), get("SLURM_PROCID"), get("SLURM_NODEID"), get("SLURM_NNODES")),
            (Some("42"), Some("3"), Some("1"), Some("2"))
        );
        assert_eq!(
            (get("SLURM_JOB_NODELIST"), get("SLURM_GPUS_ON_NODE"), get("SLURM_CPUS_PER_TASK")),
            (Some("n[1-2]"), Some("2"), Some("3"))
        );
        assert_eq!((get("SLURM_ARRAY_TASK_ID"), get("SLURM_SUBMIT_DIR")), (Some("3"), Some("/home/alice/run")));
        assert_eq!(
            (get("SLURM_ARRAY_JOB_ID"), get("SLURM_JOB_NAME")),
            (Some("40"), Some("train")),
            "as Slurm names an array"
        );
        assert_eq!(
            (get("SLURM_JOB_PARTITION"), get("SLURM_JOB_USER"), get("SLURM_NODELIST"), get("SLURM_GTIDS")),
            (Some("research"), Some("alice"), Some("n[1-2]"), Some("3"))
        );
        assert_eq!(
            (get("SLURM_ARRAY_TASK_MIN"), get("SLURM_ARRAY_TASK_MAX"), get("SLURM_ARRAY_TASK_COUNT")),
            (Some("0"), Some("7"), Some("8"))
        );
        // A launch from a controller that sends no layout: a run of its own on this node.
        let env: std::collections::BTreeMap<String, String> =
            run_env(&launch(0, "n1", None), "127.0.0.1").into_iter().collect();
        assert_eq!(
            (env["SLURM_NNODES"].as_str(), env["SLURM_JOB_NODELIST"].as_str(), env["LOCAL_RANK"].as_str()),
            ("1", "n1", "0")
        );
    }
}
