//! `scontrol`: what scripts and people ask of it most — `show job`, `show node`, `show
//! partition`, `show hostnames` (a hostlist one name per line: the usual way a batch script
//! finds its first node) — and `hold`/`release`. Anything else is refused by name.

use super::ids::{JobRef, job_refs};
use super::sacct::state_name;
use super::sinfo::node_state;
use super::{SlurmArgError, iso_time, reason};
use crate::partitions::Partitions;
use crate::text::shown;
use crate::{JobView, NodeView};

const SUPPORTED: &str = "show job [ID], show node [NAME], show partition [NAME], show hostnames [LIST], show hostlist NAMES, hold ID..., \
    release ID..., requeue ID... (and -o/--oneliner)";

/// What `scontrol` was asked to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Scontrol {
    ShowJobs {
        jobs: Vec<JobRef>,
        one_line: bool,
    },
    ShowNodes {
        names: Vec<String>,
        one_line: bool,
    },
    /// `show partition [NAME]`.
    ShowPartition(Option<String>),
    /// The names of a hostlist (`None`: `$SLURM_JOB_NODELIST`).
    Hostnames(Option<String>),
    /// Names (comma-separated, or a hostlist) in hostlist form.
    Hostlist(String),
    Hold(Vec<JobRef>),
    Release(Vec<JobRef>),
    /// Stop running jobs; each waits again once its tasks have exited.
    Requeue(Vec<JobRef>),
}

/// Read `scontrol`'s arguments.
pub fn parse_scontrol(args: &[String]) -> Result<Scontrol, SlurmArgError> {
    let one_line = args.iter().any(|a| a == "-o" || a == "--oneliner");
    let words: Vec<&str> = args.iter().map(String::as_str).filter(|a| *a != "-o" && *a != "--oneliner").collect();
    if let Some(option) = words.iter().find(|w| w.starts_with('-')) {
        return Err(super::refused("scontrol", option, SUPPORTED));
    }
    let refs = |rest: &[&str]| -> Result<Vec<JobRef>, SlurmArgError> {
        let mut all = Vec::new();
        for w in rest {
            all.extend(job_refs("job id", w)?);
        }
        Ok(all)
    };
    let command = words.first().map(|w| w.to_lowercase());
    let what = words.get(1).map(|w| w.to_lowercase());
    match (command.as_deref(), what.as_deref(), &words[words.len().min(2)..]) {
        (Some("show"), Some("job" | "jobs"), rest) => Ok(Scontrol::ShowJobs { jobs: refs(rest)?, one_line }),
        (Some("show"), Some("node" | "nodes"), rest) => {
            let mut names = Vec::new();
            for w in rest {
                names.extend(expand(w)?);
            }
            Ok(Scontrol::ShowNodes { names, one_line })
        }
        (Some("show"), Some("partition" | "partitions"), rest) if rest.len() <= 1 => {
            Ok(Scontrol::ShowPartition(rest.first().map(|s| s.to_string())))
        }
        (Some("show"), Some("hostnames" | "hostname"), rest) if rest.len() <= 1 => {
            Ok(Scontrol::Hostnames(rest.first().map(|s| s.to_string())))
        }
        (Some("show"), Some("hostlist" | "hostlistsorted"), [list]) => Ok(Scontrol::Hostlist(list.to_string())),
        (Some("hold" | "uhold"), _, _) if words.len() > 1 => Ok(Scontrol::Hold(refs(&words[1..])?)),
        (Some("release"), _, _) if words.len() > 1 => Ok(Scontrol::Release(refs(&words[1..])?)),
        (Some("requeue"), _, _) if words.len() > 1 => Ok(Scontrol::Requeue(refs(&words[1..])?)),
        _ => Err(SlurmArgError::new(words.join(" "), "not supported by gantry's scontrol")
            .hint(format!("supported: {SUPPORTED}"))),
    }
}

/// A hostlist's names, or why not.
pub fn expand(list: &str) -> Result<Vec<String>, SlurmArgError> {
    gantry_spec::expand_hostlist(list).map_err(|why| {
        SlurmArgError::new(list, format!("not a host list gantry can read: {why}")).hint(format!(
            "names and bracketed ranges, e.g. gpu-[01-04],login (at most {} names)",
            gantry_spec::HOSTLIST_MAX
        ))
    })
}

/// `key=value` lines, as scontrol writes a record: the first flush left, the rest indented
/// three spaces, or all on one line.
fn record(lines: &[Vec<(&str, String)>], one_line: bool) -> String {
    let text: Vec<String> = lines
        .iter()
        .map(|l| l.iter().map(|(k, v)| format!("{k}={}", shown(v))).collect::<Vec<_>>().join(" "))
        .collect();
    if one_line { format!("{}\n", text.join(" ")) } else { format!("{}\n\n", text.join("\n   ")) }
}

/// `scontrol show job`: one record per job.
pub fn show_job(job: &JobView, now: u64, one_line: bool) -> String {
    let row = &job.row;
    let nodes = super::job_nodes(job);
    let held: u64 = super::held_cpus(job);
    let asked: u64 =
        row.job.groups.iter().map(|g| u64::from(g.resources.cpu.0).div_ceil(1000) * u64::from(g.replicas)).sum();
    let cpus = if row.tasks.is_empty() { asked.max(1) } else { held };
    let tasks = gantry_spec::sbatch::allocation_tasks(&row.job.run.command)
        .unwrap_or_else(|| row.job.groups.iter().map(|g| g.replicas).sum());
    let gpus: usize = super::held_gpus(job);
    let time = |t: Option<u64>| t.map_or_else(|| "Unknown".to_string(), iso_time);
    let ran = row.started_at_s.map_or(0, |s| row.ended_at_s.unwrap_or(now).saturating_sub(s));
    let pending = row.state == gantry_types::JobState::Pending;
    let array = row.job.control.array.as_ref();
    let mut first = vec![("JobId", row.id.to_string()), ("JobName", super::ids::slurm_name(job))];
    if let Some(a) = array {
        first.push(("ArrayJobId", a.job.unwrap_or(row.id).to_string()));
        first.push(("ArrayTaskId", a.index.to_string()));
    }
    let lines = vec![
        first,
        vec![("UserId", row.job.control.user.clone().unwrap_or_default()), ("Account", row.queue.clone())],
        vec![
            ("Priority", row.job.priority.to_string()),
            ("QOS", row.job.control.qos.clone().unwrap_or_else(|| "normal".into())),
        ],
        vec![
            ("JobState", state_name(job).into()),
            ("Reason", ended_reason(job).unwrap_or_else(|| if pending { reason(job) } else { "None" }).into()),
            // Slurm clears a job's dependencies once they are met and it starts.
            ("Dependency", if row.started_at_s.is_some() { "(null)".into() } else { dependency(&row.job.after) }),
        ],
        vec![
            ("Requeue", u8::from(row.job.lifecycle.requeue).to_string()),
            ("Restarts", row.requeues.to_string()),
            ("ExitCode", super::sacct::exit_code(job)),
        ],
        vec![
            ("RunTime", super::duration(ran)),
            ("TimeLimit", row.job.control.time_limit_s.map_or_else(|| "UNLIMITED".into(), super::duration)),
        ],
        vec![("SubmitTime", iso_time(row.submitted_at_s))],
        vec![("StartTime", time(row.started_at_s)), ("EndTime", time(row.ended_at_s))],
        vec![("Partition", row.partition().to_string())],
        vec![
            ("NodeList", if nodes.is_empty() { "(null)".into() } else { gantry_types::text::hostlist(&nodes) }),
            ("BatchHost", nodes.first().cloned().unwrap_or_else(|| "(null)".into())),
        ],
        vec![
            ("NumNodes", nodes.len().max(1).to_string()),
            ("NumCPUs", cpus.to_string()),
            ("NumTasks", tasks.to_string()),
        ],
        vec![(
            "TRES",
            if row.tasks.is_empty() {
                "(null)".into()
            } else {
                format!("cpu={cpus},gres/gpu={gpus},node={}", nodes.len())
            },
        )],
        vec![("WorkDir", row.job.run.workdir.clone().unwrap_or_else(|| "(null)".into()))],
    ];
    record(&lines, one_line)
}

/// Why an ended job ended, as Slurm's `Reason` says it (`None` for the rest).
fn ended_reason(job: &JobView) -> Option<&'static str> {
    use gantry_types::Ending;
    match job.row.outcome.ending? {
        Ending::Failed => Some("NonZeroExitCode"),
        Ending::TimedOut => Some("TimeLimit"),
        Ending::OutOfMemory => Some("OutOfMemory"),
        Ending::Lost => Some("NodeDown"),
        Ending::Completed | Ending::Cancelled => None,
    }
}

/// Dependencies as Slurm writes them: `afterok:12,afterany:13`.
fn dependency(after: &[gantry_types::Dependency]) -> String {
    if after.is_empty() {
        return "(null)".into();
    }
    let kind = |k: gantry_types::DependencyKind| format!("{k:?}").to_lowercase();
    after
        .iter()
        .map(|d| format!("{}:{}", kind(d.kind), d.id.map_or_else(|| d.job.clone(), |i| i.to_string())))
        .collect::<Vec<_>>()
        .join(",")
}

/// `scontrol show node`: one record per node.
pub fn show_node(n: &NodeView, partitions: &Partitions, one_line: bool) -> String {
    let features = super::sinfo::features(n);
    let lines = vec![
        vec![("NodeName", n.name.clone())],
        vec![
            ("CPUAlloc", (n.cpu_milli.saturating_sub(n.cpu_free_milli)).div_ceil(1000).to_string()),
            ("CPUTot", (n.cpu_milli / 1000).to_string()),
        ],
        vec![("AvailableFeatures", features.clone())],
        vec![("ActiveFeatures", features)],
        vec![("Gres", super::sinfo::gres(n))],
        vec![
            ("RealMemory", (n.memory_bytes >> 20).to_string()),
            ("AllocMem", (n.memory_bytes.saturating_sub(n.memory_free_bytes) >> 20).to_string()),
        ],
        vec![("State", node_state(n).1.to_uppercase())],
        vec![("Partitions", super::partitions::of_node(n, partitions))],
    ];
    record(&lines, one_line)
}

/// `scontrol show partition [NAME]`: each partition (or the one named) with its limits and
/// nodes; an unknown name is Slurm's error.
pub fn show_partition(
    nodes: &[NodeView],
    partitions: &Partitions,
    name: Option<&str>,
) -> Result<String, SlurmArgError> {
    let shown: Vec<_> = super::partitions::shown(nodes, partitions)
        .into_iter()
        .filter(|p| name.is_none_or(|n| n == p.view.name))
        .collect();
    if shown.is_empty() {
        return Err(SlurmArgError::new(name.unwrap_or_default(), "Partition not found"));
    }
    Ok(shown
        .iter()
        .map(|p| {
            let names: Vec<String> = p.nodes.iter().map(|n| n.name.clone()).collect();
            let yes = |b: bool| if b { "YES" } else { "NO" }.to_string();
            let lines = vec![
                vec![("PartitionName", p.view.name.clone())],
                vec![("AllowAccounts", "ALL".into()), ("Default", yes(p.view.default))],
                vec![
                    ("DefaultTime", p.view.default_time_s.map_or_else(|| "NONE".into(), super::elapsed)),
                    ("MaxNodes", p.view.max_nodes.map_or_else(|| "UNLIMITED".into(), |n| n.to_string())),
                    ("MaxTime", p.time_limit("UNLIMITED")),
                ],
                vec![("Nodes", if names.is_empty() { "(null)".into() } else { gantry_types::text::hostlist(&names) })],
                vec![("State", "UP".into()), ("TotalNodes", names.len().to_string())],
            ];
            record(&lines, false)
        })
        .collect())
}

/// The ids each of `refs` names among `jobs`, for hold and release: an array's elements
/// that have not ended (as Slurm skips the rest), a single job whatever its state (the
/// controller says why it cannot), unknown ones by name.
pub fn resolve(refs: &[JobRef], jobs: &[JobView]) -> Vec<Result<u64, String>> {
    refs.iter()
        .flat_map(|r| {
            let named: Vec<&JobView> = jobs.iter().filter(|j| r.names(j)).collect();
            let open: Vec<Result<u64, String>> =
                named.iter().filter(|j| !j.row.state.is_final()).map(|j| Ok(j.row.id)).collect();
            match (named.first(), open.is_empty()) {
                (None, _) => vec![Err(format!("{r:?}"))],
                (Some(j), true) => vec![Ok(j.row.id)],
                (Some(_), false) => open,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn scontrol_reads_its_subcommands_and_refuses_the_rest() {
        assert_eq!(
            parse_scontrol(&args("show job 12")).expect("ok"),
            Scontrol::ShowJobs { jobs: vec![JobRef::Job(12)], one_line: false }
        );
        assert_eq!(
            parse_scontrol(&args("-o show node gpu-[01-02]")).expect("ok"),
            Scontrol::ShowNodes { names: vec!["gpu-01".into(), "gpu-02".into()], one_line: true }
        );
        assert_eq!(
            parse_scontrol(&args("show hostnames n[1-2]")).expect("ok"),
            Scontrol::Hostnames(Some("n[1-2]".into()))
        );
        assert_eq!(
            parse_scontrol(&args("hold 3 4")).expect("ok"),
            Scontrol::Hold(vec![JobRef::Job(3), JobRef::Job(4)])
        );
        assert_eq!(
            parse_scontrol(&args("requeue 3_1")).expect("ok"),
            Scontrol::Requeue(vec![JobRef::Element { array: 3, index: 1 }])
        );
        for bad in [
            "update JobId=3 TimeLimit=5",
            "requeue",
            "requeuehold 3",
            "show reservation",
            "show job x",
            "--json show job",
            "",
        ] {
            assert!(parse_scontrol(&args(bad)).is_err(), "{bad}");
        }
    }
}
