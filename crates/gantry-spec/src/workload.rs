//! The workload file (`workload.toml`): jobs, their task groups and what each task asks for,
//! including Kubernetes-style resource names. See docs/formats.md.
//!
//! Every check that can be made without a fleet is made here, so a job that could never run
//! anywhere (a profile no GPU has, a share larger than a GPU, hard isolation on a time-slice)
//! is refused at submit time with the field and a hint, not left pending forever.

use crate::error::{SpecError, from_toml};
use crate::fleet::{SPEC_BYTES_MAX, unknown_model};
use crate::quantity::{self, Quantity};
use gantry_catalog::Catalog;
use gantry_types::{
    ArrayElement, Bytes, Dependency, DependencyKind, GpuRequest, Isolation, Job, JobControl, MilliCpu, MilliGpu,
    ModelPattern, Purpose, ShareMode, TaskGroup, TaskResources, Topology, TopologyLevel, UnitHint,
};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// Most jobs one file may expand to.
pub const JOBS_MAX: i64 = 1_000_000;
/// Most tasks in one group (the engine's per-job limit).
pub const REPLICAS_MAX: i64 = 4096;
/// Priorities live in this range; the queue issue gives them meaning.
pub const PRIORITY_RANGE: (i64, i64) = (-1_000_000, 1_000_000);
/// Most GPUs one task can hold (one node's worth).
pub const GPUS_PER_TASK_MAX: i64 = 64;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkloadFile {
    #[serde(default)]
    job: Vec<JobEntry>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct JobEntry {
    pub(crate) name: String,
    queue: Option<String>,
    /// Slurm's partition: a node set of the queue file's (`[[partition]]`).
    partition: Option<String>,
    /// A QOS name the queue file gives a priority (`[[qos]]`).
    qos: Option<String>,
    priority: Option<i64>,
    count: Option<i64>,
    preemptible: Option<bool>,
    interactive: Option<bool>,
    /// Wait again when a node it runs on is lost (default true) or end `lost`.
    requeue: Option<bool>,
    /// May be stopped and started again elsewhere (a service replica): the controller may
    /// move it to empty a GPU it reconfigures.
    restartable: Option<bool>,
    after: Option<Vec<String>>,
    min_runtime: Option<crate::quantity::Duration>,
    grace: Option<crate::quantity::Duration>,
    user: Option<String>,
    time_limit: Option<crate::quantity::Duration>,
    hold: Option<bool>,
    array: Option<ArraySpec>,
    command: Option<OneOrMany>,
    env: Option<BTreeMap<String, String>>,
    workdir: Option<String>,
    #[serde(default)]
    task: Vec<TaskEntry>,
    // Single-group shorthand: the task fields, written at job level. They repeat TaskEntry's
    // on purpose: serde's `flatten` cannot be combined with `deny_unknown_fields`, and an
    // unknown key must be an error, not silently ignored.
    replicas: Option<i64>,
    cpu: Option<Quantity>,
    memory: Option<Quantity>,
    gpu: Option<GpuEntry>,
    model: Option<OneOrMany>,
    selector: Option<String>,
    isolation: Option<String>,
    topology: Option<TopologyEntry>,
    tolerations: Option<Vec<String>>,
    resources: Option<BTreeMap<String, Quantity>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TaskEntry {
    name: Option<String>,
    replicas: Option<i64>,
    /// Each task on a node of its own.
    distinct_nodes: Option<bool>,
    exclusive_node: Option<bool>,
    /// Labels a node must carry.
    node_selector: Option<BTreeMap<String, String>>,
    cpu: Option<Quantity>,
    memory: Option<Quantity>,
    gpu: Option<GpuEntry>,
    model: Option<OneOrMany>,
    selector: Option<String>,
    isolation: Option<String>,
    topology: Option<TopologyEntry>,
    tolerations: Option<Vec<String>>,
    resources: Option<BTreeMap<String, Quantity>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuEntry {
    count: Option<i64>,
    mig: Option<String>,
    share: Option<i64>,
    memory: Option<Quantity>,
    mode: Option<String>,
    // Hints for a memory-only request: the advisor picks its unit from them.
    purpose: Option<String>,
    bursty: Option<bool>,
    #[serde(rename = "latency-sensitive")]
    latency_sensitive: Option<bool>,
    trusted: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyEntry {
    within: String,
    required: Option<bool>,
}

/// `array = 8` (indices 0..=7) or `array = "0-15%4"` (Slurm's form: ranges and single
/// indices separated by commas, `%N` = at most N elements running at once).
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum ArraySpec {
    Count(i64),
    Text(String),
}

/// Highest array index (Slurm's default MaxArraySize is 1001; ours is larger, still bounded).
pub const ARRAY_INDEX_MAX: u32 = 100_000;

/// The indices and throttle of an array spec.
fn array_indices(field: &str, spec: &ArraySpec) -> Result<(Vec<u32>, Option<u32>), SpecError> {
    let hint = "array = 8, or \"0-15\", \"1,3,5-7\", \"0-99%10\" (at most 10 running at once)";
    let (list, throttle) = match spec {
        ArraySpec::Count(n) => {
            let n = quantity::count(field, *n, 1, ARRAY_INDEX_MAX as i64 + 1, "array = N makes elements 0..N-1")?;
            return Ok(((0..n).collect(), None));
        }
        ArraySpec::Text(text) => match text.split_once('%') {
            Some((list, t)) => {
                let t: u32 = t
                    .trim()
                    .parse()
                    .ok()
                    .filter(|&t| t >= 1)
                    .ok_or_else(|| SpecError::new(field, format!("%{t} is not a count ≥ 1")).hint(hint))?;
                (list, Some(t))
            }
            None => (text.as_str(), None),
        },
    };
    let index = |s: &str| -> Result<u32, SpecError> {
        s.trim()
            .parse::<u32>()
            .ok()
            .filter(|&i| i <= ARRAY_INDEX_MAX)
            .ok_or_else(|| SpecError::new(field, format!("{s:?} is not an index 0..={ARRAY_INDEX_MAX}")).hint(hint))
    };
    let mut indices = BTreeSet::new();
    for item in list.split(',') {
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (index(a)?, index(b)?);
                if a > b {
                    return Err(SpecError::new(field, format!("range {item:?} runs backwards")).hint(hint));
                }
                indices.extend(a..=b);
            }
            None => {
                indices.insert(index(item)?);
            }
        }
    }
    Ok((indices.into_iter().collect(), throttle))
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// `"afterok:prep"` (Slurm's form; a bare name means afterok).
fn dependency(field: &str, text: &str) -> Result<Dependency, SpecError> {
    let (kind, job) = match text.split_once(':') {
        Some(("afterok", j)) => (DependencyKind::AfterOk, j),
        Some(("afterany", j)) => (DependencyKind::AfterAny, j),
        Some(("afternotok", j)) => (DependencyKind::AfterNotOk, j),
        Some((other, _)) => {
            return Err(SpecError::new(field, format!("unknown dependency kind {other:?}"))
                .hint("afterok:JOB, afterany:JOB or afternotok:JOB"));
        }
        None => (DependencyKind::AfterOk, text),
    };
    if job.trim().is_empty() {
        return Err(SpecError::new(field, format!("{text:?} names no job")));
    }
    Ok(Dependency { kind, job: job.to_string(), id: None })
}

/// What a dependency's name stands for: a job by its name, and an array by its name (all its
/// elements). A job named like an array counts as both.
pub fn dependency_index<'a>(jobs: impl Iterator<Item = &'a Job>) -> BTreeMap<&'a str, Vec<usize>> {
    let mut index: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, job) in jobs.enumerate() {
        index.entry(job.name.as_str()).or_default().push(i);
        if let Some(a) = &job.control.array {
            index.entry(a.array.as_str()).or_default().push(i);
        }
    }
    index
}

/// Every dependency names a job of the set, and none is part of a cycle (`a → b → a`).
pub(crate) fn check_dependencies<'a>(jobs: impl Iterator<Item = (&'a Job, String)> + Clone) -> Result<(), SpecError> {
    check_dependencies_in(jobs, false)
}

/// As [`check_dependencies`]; with `external`, a name not in the set is left for the caller to
/// resolve (a live service's earlier jobs) instead of refused.
fn check_dependencies_in<'a>(
    jobs: impl Iterator<Item = (&'a Job, String)> + Clone,
    external: bool,
) -> Result<(), SpecError> {
    let list: Vec<(&Job, String)> = jobs.collect();
    let index = dependency_index(list.iter().map(|(j, _)| *j));
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); list.len()];
    for (i, (job, at)) in list.iter().enumerate() {
        for d in &job.after {
            match index.get(d.job.as_str()) {
                Some(targets) => edges[i].extend(targets),
                None if external => {}
                None => {
                    return Err(SpecError::new(format!("{at} / after"), format!("unknown job {:?}", d.job))
                        .hint("a dependency names another job of the same file"));
                }
            }
        }
    }
    // Iterative depth-first search with colours: 1 = on the path, 2 = done.
    let mut colour = vec![0u8; list.len()];
    for start in 0..list.len() {
        if colour[start] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        colour[start] = 1;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if let Some(&to) = edges[node].get(*next) {
                *next += 1;
                match colour[to] {
                    0 => {
                        colour[to] = 1;
                        stack.push((to, 0));
                    }
                    1 => {
                        let from = stack.iter().position(|&(n, _)| n == to).expect("on the path");
                        let mut names: Vec<&str> =
                            stack[from..].iter().map(|&(n, _)| list[n].0.name.as_str()).collect();
                        names.push(list[to].0.name.as_str());
                        return Err(SpecError::new(
                            format!("{} / after", list[to].1),
                            format!("dependency cycle: {}", names.join(" → ")),
                        ));
                    }
                    _ => {}
                }
            } else {
                colour[node] = 2;
                stack.pop();
            }
        }
    }
    Ok(())
}

/// Parse and validate a workload file into jobs, in file order.
pub fn parse_workload(text: &str, catalog: &Catalog) -> Result<Vec<Job>, SpecError> {
    parse_workload_in(text, catalog, false, JOBS_MAX as usize)
}

/// As [`parse_workload`], for a submission to a live service: a dependency may name a job
/// submitted earlier (not in this file); the service resolves it. Cycles are still refused.
/// More than `jobs_max` jobs (counts and arrays expanded) is refused before they are built,
/// with the limit named (`jobs_per_request`).
pub fn parse_submission(text: &str, catalog: &Catalog, jobs_max: usize) -> Result<Vec<Job>, SpecError> {
    parse_workload_in(text, catalog, true, jobs_max)
}

fn parse_workload_in(text: &str, catalog: &Catalog, external: bool, jobs_max: usize) -> Result<Vec<Job>, SpecError> {
    if text.len() > SPEC_BYTES_MAX {
        return Err(SpecError::new(
            "",
            format!("workload file is {} bytes, the limit is {SPEC_BYTES_MAX}", text.len()),
        ));
    }
    let file: WorkloadFile = toml::from_str(text).map_err(|e| from_toml("workload", text, e))?;
    let mut jobs = Vec::new();
    let mut names = BTreeSet::new();
    for entry in file.job {
        let at = format!("job {:?}", entry.name);
        if jobs.len() >= jobs_max {
            return Err(too_many_jobs(jobs_max));
        }
        // Over the budget left, the error names the submission's whole limit.
        let job = parse_job(&at, entry, catalog, jobs_max - jobs.len()).map_err(|e| match e.limit {
            Some(("jobs_per_request", _)) => too_many_jobs(jobs_max),
            _ => e,
        })?;
        for one in job {
            if !names.insert(one.name.clone()) {
                return Err(SpecError::new(
                    format!("job {:?}", one.name),
                    format!("job name used twice{}", crate::error::name_lines(text, &one.name)),
                )
                .hint("job names must be unique; count adds -0, -1, ..."));
            }
            jobs.push(one);
        }
    }
    check_dependencies_in(jobs.iter().map(|j| (j, format!("job {:?}", j.name))), external)?;
    Ok(jobs)
}

/// More jobs than one file or submission may hold.
fn too_many_jobs(jobs_max: usize) -> SpecError {
    SpecError::new("job", format!("more than {jobs_max} jobs (counts and arrays expanded)"))
        .hint("split the workload into several submissions")
        .limit("jobs_per_request", jobs_max as u64)
}

/// Longest job or task name, in characters.
pub const NAME_CHARS_MAX: usize = 128;

/// A job or task name: not blank, at most [`NAME_CHARS_MAX`] characters, and nothing a
/// terminal would act on (control characters, bidirectional overrides, zero-width marks) —
/// names are printed by `gantry queue` and shown on the dashboard.
pub fn check_name(field: &str, name: &str) -> Result<(), SpecError> {
    if name.trim().is_empty() {
        return Err(SpecError::new(field, "empty name"));
    }
    let chars = name.chars().count();
    if chars > NAME_CHARS_MAX {
        return Err(SpecError::new(field, format!("the name has {chars} characters, the limit is {NAME_CHARS_MAX}"))
            .limit("name_chars", NAME_CHARS_MAX as u64));
    }
    if let Some(c) = name.chars().find(|&c| !printable(c)) {
        return Err(SpecError::new(field, format!("the name holds the unprintable character U+{:04X}", c as u32))
            .hint("names are letters, digits, punctuation and spaces"));
    }
    Ok(())
}

pub use gantry_types::text::printable;

/// `budget`: how many jobs this entry may expand to (counts and arrays are refused past it
/// before they are built).
pub(crate) fn parse_job(
    at: &str,
    mut entry: JobEntry,
    catalog: &Catalog,
    budget: usize,
) -> Result<Vec<Job>, SpecError> {
    check_name(&format!("{at} / name"), &entry.name)?;
    let tasks = task_entries(at, &mut entry)?;
    let priority = entry.priority.unwrap_or(0);
    if priority < PRIORITY_RANGE.0 || priority > PRIORITY_RANGE.1 {
        return Err(SpecError::new(
            format!("{at} / priority"),
            format!("{priority} is out of range {}..={}", PRIORITY_RANGE.0, PRIORITY_RANGE.1),
        ));
    }
    let groups = task_groups(at, tasks, catalog)?;
    let queue = entry.queue.clone().unwrap_or_else(|| gantry_types::DEFAULT_QUEUE.into());
    let lifecycle = lifecycle(at, &entry)?;
    let after =
        entry.after.iter().flatten().map(|d| dependency(&format!("{at} / after"), d)).collect::<Result<Vec<_>, _>>()?;
    let control = job_control(at, &entry, &lifecycle)?;
    let run = parse_run(at, entry.command.take(), entry.env.take(), entry.workdir.take())?;
    let job =
        Job { name: entry.name.clone(), queue, priority: priority as i32, groups, lifecycle, after, control, run };
    copies(at, &entry, job, budget)
}

/// The job's task groups as written: its `[[job.task]]` tables, or the job-level fields as
/// one group named `main` (not both).
fn task_entries(at: &str, entry: &mut JobEntry) -> Result<Vec<TaskEntry>, SpecError> {
    let shorthand = TaskEntry {
        name: None,
        distinct_nodes: None,
        exclusive_node: None,
        node_selector: None,
        replicas: entry.replicas.take(),
        cpu: entry.cpu.take(),
        memory: entry.memory.take(),
        gpu: entry.gpu.take(),
        model: entry.model.take(),
        selector: entry.selector.take(),
        isolation: entry.isolation.take(),
        topology: entry.topology.take(),
        tolerations: entry.tolerations.take(),
        resources: entry.resources.take(),
    };
    let has_shorthand = shorthand.replicas.is_some()
        || shorthand.cpu.is_some()
        || shorthand.memory.is_some()
        || shorthand.gpu.is_some()
        || shorthand.model.is_some()
        || shorthand.selector.is_some()
        || shorthand.isolation.is_some()
        || shorthand.topology.is_some()
        || shorthand.tolerations.is_some()
        || shorthand.resources.is_some();
    match (entry.task.is_empty(), has_shorthand) {
        (false, true) => Err(SpecError::new(at, "task fields both at job level and in [[job.task]]")
            .hint("use job-level fields for a single-group job, or [[job.task]] tables, not both")),
        (true, _) => Ok(vec![TaskEntry { name: Some("main".into()), ..shorthand }]),
        (false, false) => Ok(std::mem::take(&mut entry.task)),
    }
}

/// Each group checked and named once; at most [`REPLICAS_MAX`] tasks in all.
fn task_groups(at: &str, tasks: Vec<TaskEntry>, catalog: &Catalog) -> Result<Vec<TaskGroup>, SpecError> {
    let mut groups = Vec::new();
    let mut group_names = BTreeSet::new();
    for (i, task) in tasks.into_iter().enumerate() {
        let name = task.name.clone().unwrap_or_else(|| format!("task{i}"));
        check_name(&format!("{at} / task {name:?}"), &name)?;
        let field = format!("{at} / task {name:?}");
        if !group_names.insert(name.clone()) {
            return Err(SpecError::new(field, "task group name used twice"));
        }
        groups.push(parse_task(&field, name, task, catalog)?);
    }
    let total: u64 = groups.iter().map(|g: &TaskGroup| g.replicas as u64).sum();
    if total > REPLICAS_MAX as u64 {
        return Err(SpecError::new(at, format!("{total} tasks, the limit is {REPLICAS_MAX} per job")));
    }
    Ok(groups)
}

/// Preemptible, minimum runtime, grace, interactive, requeue, restartable: each its default
/// where not given.
fn lifecycle(at: &str, entry: &JobEntry) -> Result<gantry_types::Lifecycle, SpecError> {
    let defaults = gantry_types::Lifecycle::default();
    let seconds =
        |name: &str, d: &Option<_>| d.as_ref().map(|d| quantity::seconds(&format!("{at} / {name}"), d, 0)).transpose();
    Ok(gantry_types::Lifecycle {
        preemptible: entry.preemptible.unwrap_or(defaults.preemptible),
        min_runtime_s: seconds("min_runtime", &entry.min_runtime)?.unwrap_or(defaults.min_runtime_s),
        grace_s: seconds("grace", &entry.grace)?.unwrap_or(defaults.grace_s),
        interactive: entry.interactive.unwrap_or(defaults.interactive),
        requeue: entry.requeue.unwrap_or(defaults.requeue),
        restartable: entry.restartable.unwrap_or(defaults.restartable),
    })
}

/// Who runs it, its time limit (never shorter than its minimum runtime), held or not, and the
/// priority it asked for.
fn job_control(at: &str, entry: &JobEntry, lifecycle: &gantry_types::Lifecycle) -> Result<JobControl, SpecError> {
    for (field, name) in [("partition", &entry.partition), ("qos", &entry.qos)] {
        if let Some(name) = name {
            check_name(&format!("{at} / {field}"), name)?;
        }
    }
    let user = match &entry.user {
        None => None,
        Some(u) if u.trim().is_empty() || u.trim() != u || u.chars().any(char::is_control) || u.len() > 64 => {
            return Err(SpecError::new(format!("{at} / user"), format!("{u:?} is not a user name"))
                .hint("a plain name of at most 64 characters, like \"alice\""));
        }
        Some(u) => Some(u.clone()),
    };
    let time_limit_s =
        entry.time_limit.as_ref().map(|d| quantity::seconds(&format!("{at} / time_limit"), d, 1)).transpose()?;
    if let Some(limit) = time_limit_s
        && lifecycle.min_runtime_s > limit
    {
        return Err(SpecError::new(
            format!("{at} / min_runtime"),
            format!("{} s is longer than the time limit ({limit} s)", lifecycle.min_runtime_s),
        )
        .hint("a job can never run past its time limit, so a longer minimum runtime means \"never preempt\": say preemptible = false instead"));
    }
    Ok(JobControl {
        user,
        time_limit_s,
        hold: entry.hold.unwrap_or(false),
        array: None,
        submitted_by: None,
        submission_key: None,
        priority_asked: entry.priority.map(|p| p as i32),
        partition: entry.partition.clone(),
        qos: entry.qos.clone(),
    })
}

/// The job as many times as `count` or `array` say (at most `budget`), else once.
fn copies(at: &str, entry: &JobEntry, job: Job, budget: usize) -> Result<Vec<Job>, SpecError> {
    Ok(match (entry.count, &entry.array) {
        (Some(_), Some(_)) => {
            return Err(SpecError::new(at, "both count and array").hint(
                "count makes independent copies (name-0, name-1, ...); array makes elements name[0], name[1], ... \
                 that a dependency can name together and a %N throttle can limit",
            ));
        }
        (None, None) => vec![job],
        (Some(n), None) => {
            let n =
                quantity::count(&format!("{at} / count"), n, 1, JOBS_MAX, "count makes that many copies of the job")?;
            if n as usize > budget {
                return Err(too_many_jobs(budget));
            }
            (0..n).map(|i| Job { name: format!("{}-{i}", entry.name), ..job.clone() }).collect()
        }
        (None, Some(spec)) => {
            let (indices, max_running) = array_indices(&format!("{at} / array"), spec)?;
            if indices.len() > budget {
                return Err(too_many_jobs(budget));
            }
            let (min, max) = (indices.iter().min().copied(), indices.iter().max().copied());
            let (min, max, count) = (min.unwrap_or_default(), max.unwrap_or_default(), indices.len() as u32);
            indices
                .into_iter()
                .map(|index| {
                    let mut element = Job { name: format!("{}[{index}]", entry.name), ..job.clone() };
                    let array = entry.name.clone();
                    element.control.array =
                        Some(ArrayElement { array, index, max_running, job: None, min, max, count });
                    element
                })
                .collect()
        }
    })
}

/// Longest command line, environment or working directory accepted (bytes, all together).
pub const RUN_BYTES_MAX: usize = 64 * 1024;

/// `command = "python train.py"` (run by `sh -c`) or `command = ["python", "train.py"]`;
/// `env = { KEY = "value" }`; `workdir = "/path"`.
fn parse_run(
    at: &str,
    command: Option<OneOrMany>,
    env: Option<BTreeMap<String, String>>,
    workdir: Option<String>,
) -> Result<gantry_types::Run, SpecError> {
    let command = match command {
        None => Vec::new(),
        Some(OneOrMany::One(line)) if line.trim().is_empty() => {
            return Err(SpecError::new(format!("{at} / command"), "empty command"));
        }
        Some(OneOrMany::One(line)) => vec!["sh".into(), "-c".into(), line],
        Some(OneOrMany::Many(argv)) => {
            if argv.first().is_none_or(|p| p.trim().is_empty()) {
                return Err(SpecError::new(format!("{at} / command"), "empty program name")
                    .hint("command = [\"python\", \"train.py\"] or command = \"python train.py\""));
            }
            argv
        }
    };
    let env: Vec<(String, String)> = env.unwrap_or_default().into_iter().collect();
    for (key, _) in &env {
        let valid = !key.is_empty()
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(SpecError::new(format!("{at} / env"), format!("{key:?} is not a variable name"))
                .hint("letters, digits and _, not starting with a digit"));
        }
        if key.starts_with("GANTRY_") || key == "CUDA_VISIBLE_DEVICES" || key == "NVIDIA_VISIBLE_DEVICES" {
            return Err(SpecError::new(format!("{at} / env"), format!("{key} is set by gantry"))
                .hint("gantry sets the device list and GANTRY_* for each task"));
        }
        if gantry_types::job::is_run_variable(key) {
            return Err(SpecError::new(format!("{at} / env"), format!("{key} is set by gantry"))
                .hint("gantry sets SLURM_* and RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT from where each task runs (docs/formats.md)"));
        }
    }
    let size: usize = command.iter().map(String::len).sum::<usize>()
        + env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
        + workdir.as_ref().map_or(0, String::len);
    if size > RUN_BYTES_MAX {
        return Err(SpecError::new(
            at,
            format!("command, env and workdir take {size} bytes, the limit is {RUN_BYTES_MAX}"),
        ));
    }
    let nul = command.iter().chain(env.iter().map(|(_, v)| v)).chain(workdir.iter()).any(|s| s.contains('\0'));
    if nul {
        return Err(SpecError::new(at, "a NUL byte in command, env or workdir"));
    }
    if workdir.as_ref().is_some_and(|w| w.trim().is_empty()) {
        return Err(SpecError::new(format!("{at} / workdir"), "empty working directory"));
    }
    Ok(gantry_types::Run { command, env, workdir })
}

fn parse_task(at: &str, name: String, task: TaskEntry, catalog: &Catalog) -> Result<TaskGroup, SpecError> {
    let replicas = quantity::count(
        &format!("{at} / replicas"),
        task.replicas.unwrap_or(1),
        1,
        REPLICAS_MAX,
        "replicas is the number of identical tasks in the group",
    )?;
    let mut cpu = match &task.cpu {
        Some(q) => quantity::cpu(&format!("{at} / cpu"), q)?,
        None => MilliCpu(0),
    };
    let mut memory = match &task.memory {
        Some(q) => quantity::memory(&format!("{at} / memory"), q)?,
        None => Bytes(0),
    };
    let isolation = parse_isolation(at, task.isolation.as_deref())?;
    let mut gpu = match &task.gpu {
        Some(g) => Some(gpu_request(&format!("{at} / gpu"), g, catalog)?),
        None => None,
    };
    apply_k8s_resources(at, &task, &mut cpu, &mut memory, &mut gpu, catalog)?;
    let models = parse_models(at, task.model, catalog)?;
    check_selector(at, task.selector.as_deref())?;
    let topology = parse_topology(at, task.topology.as_ref())?;
    let isolation = check_isolation(at, isolation, gpu.as_ref())?;
    check_models_offer(at, &models, gpu.as_ref(), catalog)?;
    if gpu.is_none() && task.topology.is_some() {
        return Err(SpecError::new(format!("{at} / topology"), "topology applies to GPUs; this task asks for none"));
    }
    let resources = TaskResources {
        cpu,
        memory,
        gpu,
        models,
        selector: task.selector,
        isolation,
        topology,
        tolerations: task.tolerations.unwrap_or_default(),
    };
    let node_selector = check_node_selector(at, task.node_selector)?;
    Ok(TaskGroup {
        name,
        replicas,
        resources,
        distinct_nodes: task.distinct_nodes.unwrap_or(false),
        exclusive_node: task.exclusive_node.unwrap_or(false),
        node_selector,
    })
}

/// The most labels a task's `node_selector` may name.
pub const NODE_SELECTOR_MAX: usize = 32;

/// A task's `node_selector`: at most [`NODE_SELECTOR_MAX`] labels, none empty.
fn check_node_selector(
    at: &str,
    selector: Option<BTreeMap<String, String>>,
) -> Result<BTreeMap<String, String>, SpecError> {
    let selector = selector.unwrap_or_default();
    if selector.len() > NODE_SELECTOR_MAX {
        return Err(SpecError::new(
            format!("{at} / node_selector"),
            format!("{} labels, at most {NODE_SELECTOR_MAX}", selector.len()),
        ));
    }
    if let Some((k, _)) = selector.iter().find(|(k, v)| k.is_empty() || v.is_empty() || k.len() > 253 || v.len() > 253)
    {
        return Err(SpecError::new(
            format!("{at} / node_selector"),
            format!("label {k:?}: a key and a value of 1 to 253 bytes"),
        )
        .hint("node_selector = { pool = \"training\" }"));
    }
    Ok(selector)
}

/// A task's `isolation` field (`hard`, `soft` or `none`), if given.
fn parse_isolation(at: &str, isolation: Option<&str>) -> Result<Option<Isolation>, SpecError> {
    match isolation {
        None => Ok(None),
        Some("hard") => Ok(Some(Isolation::Hard)),
        Some("soft") => Ok(Some(Isolation::Soft)),
        Some("none") => Ok(Some(Isolation::None)),
        Some(other) => Err(SpecError::new(format!("{at} / isolation"), format!("unknown isolation {other:?}"))
            .hint("use hard (whole or MIG), soft (also MPS) or none (anything)")),
    }
}

/// Folds a task's Kubernetes-style `resources` into its GPU, CPU and memory, refusing what
/// is also given in the task's own fields.
fn apply_k8s_resources(
    at: &str,
    task: &TaskEntry,
    cpu: &mut MilliCpu,
    memory: &mut Bytes,
    gpu: &mut Option<GpuRequest>,
    catalog: &Catalog,
) -> Result<(), SpecError> {
    let Some(resources) = &task.resources else { return Ok(()) };
    let translated = k8s_resources(&format!("{at} / resources"), resources, catalog)?;
    if translated.gpu.is_some() && gpu.is_some() {
        return Err(SpecError::new(format!("{at} / resources"), "GPU asked for both in gpu and in resources")
            .hint("keep one of the two"));
    }
    if translated.cpu.is_some() && task.cpu.is_some() || translated.memory.is_some() && task.memory.is_some() {
        return Err(SpecError::new(format!("{at} / resources"), "cpu or memory given twice (field and resources)"));
    }
    *gpu = gpu.take().or(translated.gpu);
    *cpu = translated.cpu.unwrap_or(*cpu);
    *memory = translated.memory.unwrap_or(*memory);
    Ok(())
}

/// A task's `model` field as patterns, each matching some catalog model.
fn parse_models(at: &str, model: Option<OneOrMany>, catalog: &Catalog) -> Result<Vec<ModelPattern>, SpecError> {
    let models: Vec<ModelPattern> = match model {
        None => Vec::new(),
        Some(OneOrMany::One(m)) => vec![ModelPattern(m)],
        Some(OneOrMany::Many(list)) => list.into_iter().map(ModelPattern).collect(),
    };
    for pattern in &models {
        if catalog.matching(pattern).is_empty() {
            return Err(unknown_model(&format!("{at} / model"), &pattern.0, catalog));
        }
    }
    Ok(models)
}

/// Checks that a task's `selector`, if given, compiles.
fn check_selector(at: &str, selector: Option<&str>) -> Result<(), SpecError> {
    if let Some(selector) = selector {
        gantry_selector::Selector::compile(selector).map_err(|e| SpecError::new(format!("{at} / selector"), e.to_string()).hint("attributes: device.model, architecture, memory_gib, compute_capability, sm_count, mig_capable, nvlink, mode"))?;
    }
    Ok(())
}

/// A task's `topology` table (the default when absent).
fn parse_topology(at: &str, topology: Option<&TopologyEntry>) -> Result<Topology, SpecError> {
    let Some(t) = topology else { return Ok(Topology::default()) };
    let within = match t.within.as_str() {
        "nvlink" => TopologyLevel::Nvlink,
        "numa" => TopologyLevel::Numa,
        "node" => TopologyLevel::Node,
        "rack" => TopologyLevel::Rack,
        other => {
            return Err(SpecError::new(format!("{at} / topology.within"), format!("unknown level {other:?}"))
                .hint("use nvlink, numa, node or rack"));
        }
    };
    Ok(Topology { within, required: t.required.unwrap_or(false) })
}

/// The advisor's hint of a memory-only request (`purpose` and its companions), if given.
fn unit_hint(at: &str, g: &GpuEntry) -> Result<Option<UnitHint>, SpecError> {
    let Some(text) = g.purpose.as_deref() else {
        if g.bursty.is_some() || g.latency_sensitive.is_some() || g.trusted.is_some() {
            return Err(SpecError::new(at, "bursty, latency-sensitive and trusted describe a purpose")
                .hint("add purpose = \"training\" | \"inference\" | \"development\" | \"batch\""));
        }
        return Ok(None);
    };
    let purpose = Purpose::parse(text).ok_or_else(|| {
        SpecError::new(format!("{at}.purpose"), format!("unknown purpose {text:?}"))
            .hint("use training, inference, development or batch")
    })?;
    Ok(Some(UnitHint {
        purpose,
        bursty: g.bursty.unwrap_or(false),
        latency_sensitive: g.latency_sensitive.unwrap_or(false),
        trusted: g.trusted.unwrap_or(false),
    }))
}

fn gpu_request(at: &str, g: &GpuEntry, catalog: &Catalog) -> Result<GpuRequest, SpecError> {
    if (g.count.is_some() || g.mig.is_some() || g.share.is_some())
        && (g.purpose.is_some() || g.bursty.is_some() || g.latency_sensitive.is_some() || g.trusted.is_some())
    {
        return Err(SpecError::new(at, "purpose, bursty, latency-sensitive and trusted are hints for a memory-only request")
            .hint("drop them, or ask for gpu = { memory = \"20GiB\", purpose = \"inference\" } and let the advisor pick the unit"));
    }
    let kinds = [g.count.is_some(), g.mig.is_some(), g.share.is_some()].iter().filter(|&&b| b).count();
    if kinds > 1 {
        return Err(SpecError::new(at, "give exactly one of count, mig, share (or memory alone)").hint(
            "gpu = { count = 2 } | { mig = \"1g.10gb\" } | { share = 250, memory = \"8GiB\" } | { memory = \"20GiB\" }",
        ));
    }
    let memory = gpu_memory(at, g, catalog)?;
    let mode = share_mode(at, g)?;
    if let Some(count) = g.count {
        let count = quantity::count(
            &format!("{at}.count"),
            count,
            1,
            GPUS_PER_TASK_MAX,
            "a task holds 1 to 64 whole GPUs on one node; omit gpu for a CPU-only task, use replicas for more",
        )?;
        if memory.is_some() || mode.is_some() {
            return Err(
                SpecError::new(at, "whole GPUs take no memory or mode").hint("a whole GPU brings all its memory")
            );
        }
        return Ok(GpuRequest::Whole { count });
    }
    if let Some(profile) = &g.mig {
        return mig_request(at, profile, memory, mode, catalog);
    }
    if let Some(share) = g.share {
        let milli = quantity::count(
            &format!("{at}.share"),
            share,
            1,
            1000,
            "a share is 1..1000 milli-GPU of one GPU; ask for gpu = { count = N } for more",
        )?;
        let (memory, mode) = (memory.unwrap_or_default(), mode.unwrap_or(ShareMode::Any));
        return Ok(GpuRequest::Share { milli: MilliGpu(milli), memory, mode });
    }
    match (memory, mode) {
        (Some(m), None) if m.0 > 0 => Ok(GpuRequest::Memory { memory: m, hint: unit_hint(at, g)? }),
        (Some(_), Some(_)) => Err(SpecError::new(at, "a memory-only request picks its own unit; mode needs a share")
            .hint("add share = N to ask for an MPS or time-slice share")),
        _ => Err(SpecError::new(at, "empty GPU request").hint(
            "gpu = { count = 2 } | { mig = \"1g.10gb\" } | { share = 250, memory = \"8GiB\" } | { memory = \"20GiB\" }",
        )),
    }
}

/// `memory`, at most what the largest GPU of the catalog has.
fn gpu_memory(at: &str, g: &GpuEntry, catalog: &Catalog) -> Result<Option<Bytes>, SpecError> {
    let Some(q) = &g.memory else { return Ok(None) };
    let m = quantity::memory(&format!("{at}.memory"), q)?;
    if m > catalog.max_memory() {
        return Err(SpecError::new(
            format!("{at}.memory"),
            format!("{m} is more than any GPU has ({} at most)", catalog.max_memory()),
        )
        .hint("use gpu = { count = N } for work larger than one GPU"));
    }
    Ok(Some(m))
}

/// `mode`: mps, time-slice or any.
fn share_mode(at: &str, g: &GpuEntry) -> Result<Option<ShareMode>, SpecError> {
    Ok(match g.mode.as_deref() {
        None => None,
        Some("mps") => Some(ShareMode::Mps),
        Some("time-slice") => Some(ShareMode::TimeSlice),
        Some("any") => Some(ShareMode::Any),
        Some(other) => {
            return Err(SpecError::new(format!("{at}.mode"), format!("unknown share mode {other:?}"))
                .hint("use mps, time-slice or any"));
        }
    })
}

/// A MIG instance of `profile`: no mode or memory beside it, and a profile some model has.
fn mig_request(
    at: &str,
    profile: &str,
    memory: Option<Bytes>,
    mode: Option<ShareMode>,
    catalog: &Catalog,
) -> Result<GpuRequest, SpecError> {
    if let Some(mode) = mode {
        let name = match mode {
            ShareMode::Mps => "mps",
            ShareMode::TimeSlice => "time-slice",
            ShareMode::Any => "any",
        };
        return Err(SpecError::new(
            format!("{at}.mode"),
            format!("a MIG profile is a MIG instance; mode {name} contradicts it"),
        )
        .hint("drop mode, or ask for a share instead of a MIG profile"));
    }
    if memory.is_some() {
        return Err(SpecError::new(format!("{at}.memory"), "a MIG profile fixes the memory")
            .hint("drop memory; the profile name says it (1g.10gb = 10GB)"));
    }
    if !catalog.any_model_has_profile(profile) {
        let mut all: Vec<&str> = catalog
            .models()
            .iter()
            .filter_map(|m| m.mig.as_ref())
            .flat_map(|g| g.profiles.iter().map(|p| p.name.as_str()))
            .collect();
        all.sort_unstable();
        all.dedup();
        return Err(SpecError::new(format!("{at}.mig"), format!("no GPU model has MIG profile {profile:?}"))
            .hint(format!("known profiles: {}", all.join(", "))));
    }
    Ok(GpuRequest::Mig { profile: profile.to_string() })
}

/// Isolation defaults and contradictions: hard allows only whole GPUs and MIG instances, soft
/// adds MPS, none adds time-slicing.
fn check_isolation(at: &str, isolation: Option<Isolation>, gpu: Option<&GpuRequest>) -> Result<Isolation, SpecError> {
    let field = format!("{at} / isolation");
    match (isolation, gpu) {
        (Some(Isolation::Hard), Some(GpuRequest::Share { .. })) => {
            Err(SpecError::new(field, "hard isolation contradicts a shared GPU")
                .hint("ask for a MIG profile or a memory size (MIG or whole), or use isolation = \"soft\" for MPS"))
        }
        (Some(Isolation::Soft), Some(GpuRequest::Share { mode: ShareMode::TimeSlice, .. })) => {
            Err(SpecError::new(field, "soft isolation contradicts time-slicing (no memory limit)")
                .hint("use mode = \"mps\" or isolation = \"none\""))
        }
        (Some(i), _) => Ok(i),
        (None, _) => Ok(Isolation::None),
    }
}

/// A MIG request limited to models that lack the profile can never run.
fn check_models_offer(
    at: &str,
    models: &[ModelPattern],
    gpu: Option<&GpuRequest>,
    catalog: &Catalog,
) -> Result<(), SpecError> {
    let Some(GpuRequest::Mig { profile }) = gpu else { return Ok(()) };
    if models.is_empty() {
        return Ok(());
    }
    let offers = models
        .iter()
        .flat_map(|p| catalog.matching(p))
        .any(|id| catalog.model(id).mig.as_ref().is_some_and(|g| g.profile(profile).is_some()));
    if offers {
        return Ok(());
    }
    let names: Vec<&str> = models.iter().map(|m| m.0.as_str()).collect();
    Err(SpecError::new(format!("{at} / model"), format!("none of {} offers MIG profile {profile}", names.join(", ")))
        .hint("MIG needs an A100, A30, H100, H200, GH200 or B200 with that profile (run `gantry catalog`)"))
}

/// What Kubernetes-style resource names translate to.
struct Translated {
    gpu: Option<GpuRequest>,
    cpu: Option<MilliCpu>,
    memory: Option<Bytes>,
}

/// `nvidia.com/gpu`, `nvidia.com/mig-<profile>`, `nvidia.com/gpu.shared`, `cpu`, `memory`.
fn k8s_resources(at: &str, resources: &BTreeMap<String, Quantity>, catalog: &Catalog) -> Result<Translated, SpecError> {
    let mut out = Translated { gpu: None, cpu: None, memory: None };
    let integer = |key: &str, q: &Quantity| -> Result<i64, SpecError> {
        match q {
            Quantity::Int(i) => Ok(*i),
            Quantity::Text(t) => t
                .trim()
                .parse()
                .map_err(|_| SpecError::new(format!("{at}.{key:?}"), format!("{t:?} is not a whole number"))),
            Quantity::Float(f) => Err(SpecError::new(format!("{at}.{key:?}"), format!("{f} is not a whole number"))
                .hint("device resources are counted in whole devices")),
        }
    };
    for (key, value) in resources {
        let field = format!("{at}.{key:?}");
        let gpu = if key == "cpu" {
            out.cpu = Some(quantity::cpu(&field, value)?);
            None
        } else if key == "memory" {
            out.memory = Some(quantity::memory(&field, value)?);
            None
        } else if key == "nvidia.com/gpu" {
            let n = quantity::count(&field, integer(key, value)?, 1, GPUS_PER_TASK_MAX, "whole GPUs on one node")?;
            Some(GpuRequest::Whole { count: n })
        } else if key == "nvidia.com/gpu.shared" {
            quantity::count(
                &field,
                integer(key, value)?,
                1,
                1,
                "a task takes one shared replica (like failRequestsGreaterThanOne); use replicas for more tasks",
            )?;
            Some(GpuRequest::Share { milli: MilliGpu(1), memory: Bytes(0), mode: ShareMode::TimeSlice })
        } else if let Some(profile) = key.strip_prefix("nvidia.com/mig-") {
            quantity::count(
                &field,
                integer(key, value)?,
                1,
                1,
                "a task uses one MIG device (CUDA sees one); use replicas for more tasks",
            )?;
            if !catalog.any_model_has_profile(profile) {
                return Err(SpecError::new(field, format!("no GPU model has MIG profile {profile:?}")));
            }
            Some(GpuRequest::Mig { profile: profile.to_string() })
        } else {
            return Err(SpecError::new(field, "unknown resource name")
                .hint("known: cpu, memory, nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-<profile>"));
        };
        if let Some(g) = gpu {
            if out.gpu.is_some() {
                return Err(SpecError::new(at, "more than one GPU resource in one task")
                    .hint("one task asks for one kind of GPU; split into task groups"));
            }
            out.gpu = Some(g);
        }
    }
    Ok(out)
}
