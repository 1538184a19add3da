//! `gantry sbatch script.sh` and `gantry submit --gpus N -- command`: Slurm habits translated
//! into a gantry workload file (a `[[job]]` table), which the controller then validates like
//! any other. Supported `#SBATCH` options (and the same on sbatch's command line):
//! `--job-name/-J`, `--gres=gpu[:type]:N`, `--gpus/-G`, `--gpus-per-node`, `--nodes/-N`,
//! `--ntasks-per-node`, `--ntasks/-n`, `--cpus-per-task/-c`, `--mem`, `--time/-t`,
//! `--partition/-p`, `--account/-A`, `--qos`, `--nice`, `--array/-a`, `--dependency/-d`,
//! `--chdir/-D`, `--requeue`/`--no-requeue`, `--hold/-H`, `--export`, `--output/-o` and `--error/-e` (with `%j`, `%x`, `%A`, `%a`, `%u`, `%N`, `%%`), `--gpus-per-task`, `--exclusive` (whole nodes). Any other
//! option is named in a warning and left out; a malformed value of a supported one is an error
//! naming the line.

use crate::SpecError;
use toml::{Table, Value};

/// What a script or the command line asks for, before it becomes a job table.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub name: Option<String>,
    /// `--account`: the queue the job is charged to.
    pub queue: Option<String>,
    /// `--partition`: the node set it runs in (the queue file's `[[partition]]`).
    pub partition: Option<String>,
    /// `--qos`: a name the controller's queue file gives a priority.
    pub qos: Option<String>,
    pub priority: Option<i64>,
    /// GPUs per node (`--gres`) or in all (`--gpus`), and an optional model.
    pub gpus_per_node: Option<u32>,
    pub gpus_total: Option<u32>,
    pub gpu_type: Option<String>,
    pub nodes: Option<u32>,
    pub tasks_per_node: Option<u32>,
    pub tasks: Option<u32>,
    pub cpus_per_task: Option<u32>,
    /// `--gpus-per-task`: GPUs each task of the allocation gets (and `srun` binds).
    pub gpus_per_task: Option<u32>,
    pub memory: Option<String>,
    /// `--mem-per-gpu` or `--mem-per-cpu`: memory per GPU or CPU of the node's share.
    pub memory_per: Option<(MemoryPer, String)>,
    pub time: Option<String>,
    /// `--array`: gantry's array syntax is Slurm's (`0-15%4`, `1,3,5`).
    pub array: Option<String>,
    /// `--dependency`: `afterok:ID` and friends, as gantry's `after` entries.
    pub after: Vec<String>,
    /// `--requeue` / `--no-requeue`: wait again when a node it runs on is lost.
    pub requeue: Option<bool>,
    /// `--hold`: submitted held, started only once released (`gantry release`).
    pub hold: bool,
    /// `--exclusive`: each node of the allocation whole, shared with no other job.
    pub exclusive: bool,
    /// `--constraint`: node features the job's nodes must all have.
    pub features: Vec<String>,
    /// `--export`: which of the submitter's variables the job gets (`None`: all, as Slurm).
    pub export: Option<String>,
    /// Where `sbatch` ran, on which host (`SLURM_SUBMIT_DIR`, `SLURM_SUBMIT_HOST`).
    pub submit_dir: Option<String>,
    pub submit_host: Option<String>,
    /// `--dependency` as written (`SLURM_JOB_DEPENDENCY`).
    pub dependency: Option<String>,
    /// `--chdir`: where the script runs (default: the directory sbatch was run from).
    pub chdir: Option<String>,
    /// `--output` and `--error` patterns.
    pub output: Option<String>,
    pub error: Option<String>,
    /// Options left out (unsupported, or supported without effect), for a warning each.
    pub ignored: Vec<String>,
}

/// A Slurm size (`--mem`): digits and K, M (the default), G or T, as gantry writes it (`100MiB`).
fn slurm_size(option: &str, v: &str) -> Result<String, String> {
    let (digits, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let unit = match unit.to_ascii_uppercase().as_str() {
        "" | "M" => "MiB",
        "K" => "KiB",
        "G" => "GiB",
        "T" => "TiB",
        _ => return Err(format!("{option}={v}: use a size with K, M, G or T")),
    };
    number(option, digits)?;
    Ok(format!("{digits}{unit}"))
}

/// What `--mem-per-gpu` and `--mem-per-cpu` count by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryPer {
    Gpu,
    Cpu,
}

fn number(option: &str, value: &str) -> Result<u32, String> {
    value.trim().parse::<u32>().ok().filter(|&n| n >= 1).ok_or_else(|| format!("{option}={value}: not a count ≥ 1"))
}

/// Slurm's time formats: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S` → seconds.
pub fn slurm_time(value: &str) -> Result<u64, SpecError> {
    time_s(value).map_err(|m| SpecError::new("--time", m))
}

/// The longest time limit a Slurm time string may give (what a job file's durations allow).
const TIME_LIMIT_MAX_DAYS: u64 = 100 * 365;

/// `--time`'s value in seconds; the error names the option.
fn time_s(value: &str) -> Result<u64, String> {
    slurm_time_s(value).map_err(|why| format!("--time={value}: {why}"))
}

/// A Slurm time string (`30`, `1:30:00`, `2-00:00:00`) in seconds, more than 0 and at most
/// [`TIME_LIMIT_MAX_DAYS`]; the error says what is wrong with it (`--time` and slurm.conf's
/// `MaxTime` name themselves).
pub(crate) fn slurm_time_s(value: &str) -> Result<u64, String> {
    let bad = || "use minutes, MM:SS, HH:MM:SS or D-HH[:MM[:SS]]".to_string();
    let (days, rest) = match value.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().map_err(|_| bad())?, r),
        None => (0, value),
    };
    let parts: Vec<u64> = rest.split(':').map(|p| p.parse::<u64>().map_err(|_| bad())).collect::<Result<_, _>>()?;
    // Each part in its unit, checked: `--time=99999999999999999` is refused, not wrapped.
    let units: &[u64] = match (value.contains('-'), parts.len()) {
        (false, 1) => &[60],
        (false, 2) => &[60, 1],
        (false, 3) | (true, 3) => &[3600, 60, 1],
        (true, 1) => &[3600],
        (true, 2) => &[3600, 60],
        _ => return Err(bad()),
    };
    let too_long = || format!("longer than {TIME_LIMIT_MAX_DAYS} days");
    let mut total = days.checked_mul(86_400).ok_or_else(too_long)?;
    for (part, unit) in parts.iter().zip(units) {
        total = part.checked_mul(*unit).and_then(|s| total.checked_add(s)).ok_or_else(too_long)?;
    }
    if total > TIME_LIMIT_MAX_DAYS * 86_400 {
        return Err(too_long());
    }
    if total == 0 { Err("a time limit must be more than 0".into()) } else { Ok(total) }
}

impl Request {
    /// Apply one option (`--name=value`, `--name value` already joined, or `-X value`). The
    /// error's message names the option and value.
    pub fn apply(&mut self, option: &str, value: Option<&str>) -> Result<(), SpecError> {
        self.apply_one(option, value).map_err(|m| SpecError::new("", m))
    }

    fn apply_one(&mut self, option: &str, value: Option<&str>) -> Result<(), String> {
        fn need<'v>(option: &str, v: Option<&'v str>) -> Result<&'v str, String> {
            v.filter(|v| !v.is_empty()).ok_or_else(|| format!("{option} needs a value"))
        }
        match option {
            "--job-name" | "-J" => self.name = Some(need(option, value)?.to_string()),
            "--partition" | "-p" => {
                let v = need(option, value)?;
                if v.contains(',') {
                    return Err(format!(
                        "--partition={v}: gantry takes one partition, not a list to start in the first of"
                    ));
                }
                self.partition = Some(v.to_string());
            }
            "--account" | "-A" => self.queue = Some(need(option, value)?.to_string()),
            "--qos" | "-q" => self.qos = Some(need(option, value)?.to_string()),
            "--gres" => {
                let v = need(option, value)?;
                let parts: Vec<&str> = v.split(':').collect();
                match parts.as_slice() {
                    ["gpu", n] => self.gpus_per_node = Some(number(option, n)?),
                    ["gpu", t, n] => {
                        self.gpu_type = Some(t.to_string());
                        self.gpus_per_node = Some(number(option, n)?);
                    }
                    _ => return Err(format!("--gres={v}: use gpu:N or gpu:TYPE:N")),
                }
            }
            "--gpus" | "-G" => self.gpus_total = Some(self.typed_count(option, need(option, value)?)?),
            "--nodes" | "-N" => self.nodes = Some(number(option, need(option, value)?)?),
            "--ntasks-per-node" => self.tasks_per_node = Some(number(option, need(option, value)?)?),
            "--ntasks" | "-n" => self.tasks = Some(number(option, need(option, value)?)?),
            "--cpus-per-task" | "-c" => self.cpus_per_task = Some(number(option, need(option, value)?)?),
            "--gpus-per-task" => self.gpus_per_task = Some(self.typed_count(option, need(option, value)?)?),
            "--mem" => self.memory = Some(slurm_size(option, need(option, value)?)?),
            "--mem-per-gpu" => self.memory_per = Some((MemoryPer::Gpu, slurm_size(option, need(option, value)?)?)),
            "--mem-per-cpu" => self.memory_per = Some((MemoryPer::Cpu, slurm_size(option, need(option, value)?)?)),
            "--time" | "-t" => {
                let v = need(option, value)?;
                time_s(v)?;
                self.time = Some(v.to_string());
            }
            "--gpus-per-node" => self.gpus_per_node = Some(self.typed_count(option, need(option, value)?)?),
            "--nice" => {
                // Slurm: a higher nice is a lower priority (default adjustment 100).
                let v = value.unwrap_or("100");
                let nice: i64 = v.parse().map_err(|_| format!("--nice={v}: a whole number"))?;
                self.priority = Some(self.priority.unwrap_or(0) - nice);
            }
            "--array" | "-a" => self.array = Some(need(option, value)?.to_string()),
            "--dependency" | "-d" => {
                let v = need(option, value)?;
                self.after.extend(dependencies(v)?);
                self.dependency = Some(v.to_string());
            }
            "--chdir" | "-D" => self.chdir = Some(need(option, value)?.to_string()),
            "--requeue" => self.requeue = Some(true),
            "--export" => self.export = Some(need(option, value)?.to_string()),
            "--constraint" | "-C" => self.features = features(need(option, value)?)?,
            "--hold" | "-H" => self.hold = true,
            "--exclusive" => match value {
                None => self.exclusive = true,
                Some(v) => {
                    return Err(format!(
                        "--exclusive={v}: only --exclusive (whole nodes, shared with no job) is supported"
                    ));
                }
            },
            "--no-requeue" => self.requeue = Some(false),
            "--output" | "-o" => self.output = Some(need(option, value)?.to_string()),
            "--error" | "-e" => self.error = Some(need(option, value)?.to_string()),
            other => self.ignored.push(value.map_or_else(|| other.to_string(), |v| format!("{other}={v}"))),
        }
        Ok(())
    }

    /// `[TYPE:]N` (`--gpus`, `--gpus-per-node`): the count, and the GPU type if given.
    fn typed_count(&mut self, option: &str, value: &str) -> Result<u32, String> {
        match value.split_once(':') {
            Some((t, n)) => {
                self.gpu_type = Some(t.to_string());
                number(option, n)
            }
            None => number(option, value),
        }
    }

    /// The `[[job]]` table for `command` (`gantry submit`): each task runs the command.
    pub fn job(&self, default_name: &str, command: Vec<String>) -> Result<Table, SpecError> {
        let shaped = self.tasks_and_gpus().and_then(|(tasks, gpus_per_task)| {
            let command = match (&self.output, &self.error) {
                (None, None) => command,
                (out, err) => redirected(out.as_deref(), err.as_deref(), command),
            };
            let mut job = self.job_table(default_name)?;
            job.insert("command".into(), Value::Array(command.into_iter().map(Value::String).collect()));
            let task = self.task_table("task", tasks, gpus_per_task, self.cpus_per_task, self.memory.clone());
            job.insert("task".into(), Value::Array(vec![Value::Table(task)]));
            Ok(job)
        });
        shaped.map_err(|m| SpecError::new("", m))
    }

    /// The `[[job]]` table for a batch script as Slurm runs it (`sbatch`): an allocation of
    /// one task per node slot, each holding that node's share (GPUs, CPUs, `--mem` per node);
    /// the first runs `script` once (through `gantry slurm-batch`), the others are step hosts
    /// its `srun` starts tasks through.
    pub fn batch_job(&self, default_name: &str, script: Vec<String>) -> Result<Table, SpecError> {
        self.batch_table(default_name, script).map_err(|m| SpecError::new("", m))
    }

    fn batch_table(&self, default_name: &str, script: Vec<String>) -> Result<Table, String> {
        let shape = self.allocation()?;
        let mut job = self.job_table(default_name)?;
        let mut command = vec!["sh".to_string(), "-c".to_string(), batch_wrapper(&shape, self)];
        command.push("gantry-sbatch".into());
        command.extend(script);
        job.insert("command".into(), Value::Array(command.into_iter().map(Value::String).collect()));
        // Slurm gives each task one CPU unless --cpus-per-task says more.
        let cpus = self.cpus_per_task.unwrap_or(1) * shape.tasks_per_node;
        let memory = self.node_memory(shape.gpus_per_node, cpus)?;
        let mut task = self.task_table("batch", shape.nodes, shape.gpus_per_node, Some(cpus), memory);
        if shape.nodes > 1 {
            task.insert("distinct_nodes".into(), Value::Boolean(true));
        }
        if self.exclusive {
            task.insert("exclusive_node".into(), Value::Boolean(true));
        }
        job.insert("task".into(), Value::Array(vec![Value::Table(task)]));
        Ok(job)
    }

    /// A node's memory: `--mem`, or `--mem-per-gpu` × its GPUs, or `--mem-per-cpu` × its CPUs.
    fn node_memory(&self, gpus: u32, cpus: u32) -> Result<Option<String>, String> {
        match (&self.memory, &self.memory_per) {
            (Some(_), Some(_)) => Err("give --mem or --mem-per-gpu/--mem-per-cpu, not both".into()),
            (Some(m), None) => Ok(Some(m.clone())),
            (None, Some((MemoryPer::Gpu, _))) if gpus == 0 => Err("--mem-per-gpu needs GPUs".into()),
            (None, Some((per, m))) => {
                let count = if *per == MemoryPer::Gpu { gpus } else { cpus };
                Ok(mebibytes(m).map(|mib| format!("{}MiB", mib * u64::from(count))))
            }
            (None, None) => Ok(None),
        }
    }

    /// The allocation's shape: nodes, tasks (per node) and GPUs per node.
    fn allocation(&self) -> Result<Shape, String> {
        let nodes = self.nodes.unwrap_or(1);
        let tasks = match (self.tasks, self.tasks_per_node) {
            (Some(n), _) => n,
            (None, Some(per)) => per * nodes,
            (None, None) => nodes,
        };
        if tasks < nodes {
            return Err(format!("--ntasks={tasks} is fewer than --nodes={nodes}"));
        }
        let tasks_per_node = self.tasks_per_node.unwrap_or_else(|| tasks.div_ceil(nodes));
        let given = [self.gpus_per_node.is_some(), self.gpus_total.is_some(), self.gpus_per_task.is_some()];
        if given.iter().filter(|&&g| g).count() > 1 {
            return Err("give one of --gres, --gpus, --gpus-per-node, --gpus-per-task".into());
        }
        let gpus_per_node = match (self.gpus_per_node, self.gpus_total, self.gpus_per_task) {
            (Some(g), _, _) => g,
            (_, Some(g), _) if g % nodes != 0 => return Err(format!("--gpus={g} does not divide among {nodes} nodes")),
            (_, Some(g), _) => g / nodes,
            (_, _, Some(g)) => g * tasks_per_node,
            _ => 0,
        };
        Ok(Shape { nodes, tasks, tasks_per_node, gpus_per_node })
    }

    fn job_table(&self, default_name: &str) -> Result<Table, String> {
        let mut job = Table::new();
        job.insert("name".into(), Value::String(self.name.clone().unwrap_or_else(|| default_name.to_string())));
        if let Some(q) = &self.queue {
            job.insert("queue".into(), Value::String(q.clone()));
        }
        for (key, value) in [("partition", &self.partition), ("qos", &self.qos)] {
            if let Some(v) = value {
                job.insert(key.into(), Value::String(v.clone()));
            }
        }
        if let Some(p) = self.priority {
            job.insert("priority".into(), Value::Integer(p));
        }
        if let Some(t) = &self.time {
            job.insert("time_limit".into(), Value::Integer(time_s(t)? as i64));
        }
        if let Some(a) = &self.array {
            job.insert("array".into(), Value::String(a.clone()));
        }
        if !self.after.is_empty() {
            job.insert("after".into(), Value::Array(self.after.iter().cloned().map(Value::String).collect()));
        }
        if let Some(dir) = &self.chdir {
            job.insert("workdir".into(), Value::String(dir.clone()));
        }
        if self.hold {
            job.insert("hold".into(), Value::Boolean(true));
        }
        if let Some(requeue) = self.requeue {
            job.insert("requeue".into(), Value::Boolean(requeue));
        }
        Ok(job)
    }

    /// The job's task count (`--ntasks`, else per node × nodes) and GPUs per task.
    fn tasks_and_gpus(&self) -> Result<(u32, u32), String> {
        let nodes = self.nodes.unwrap_or(1);
        let tasks = match (self.tasks, self.tasks_per_node) {
            (Some(n), _) => n,
            (None, Some(per)) => per * nodes,
            (None, None) => nodes,
        };
        let per_node_tasks = tasks.div_ceil(nodes);
        let gpus_per_task = match (self.gpus_per_node, self.gpus_total) {
            (Some(_), Some(_)) => return Err("give --gres or --gpus, not both".into()),
            (Some(g), None) => {
                if g % per_node_tasks != 0 {
                    return Err(format!(
                        "--gres=gpu:{g} per node does not divide among {per_node_tasks} tasks per node"
                    ));
                }
                g / per_node_tasks
            }
            (None, Some(g)) => {
                if g % tasks != 0 {
                    return Err(format!("--gpus={g} does not divide among {tasks} tasks"));
                }
                g / tasks
            }
            (None, None) => 0,
        };
        Ok((tasks, gpus_per_task))
    }

    /// The job's one `[[job.task]]` table.
    fn task_table(
        &self,
        name: &str,
        tasks: u32,
        gpus_per_task: u32,
        cpus: Option<u32>,
        memory: Option<String>,
    ) -> Table {
        let mut task = Table::new();
        task.insert("name".into(), Value::String(name.into()));
        task.insert("replicas".into(), Value::Integer(tasks as i64));
        if let Some(c) = cpus {
            task.insert("cpu".into(), Value::Integer(c as i64));
        }
        if let Some(m) = memory {
            task.insert("memory".into(), Value::String(m));
        }
        if !self.features.is_empty() {
            let selector: Table =
                self.features.iter().map(|f| (format!("slurm.feature/{f}"), Value::String("true".into()))).collect();
            task.insert("node_selector".into(), Value::Table(selector));
        }
        if gpus_per_task > 0 {
            let mut gpu = Table::new();
            gpu.insert("count".into(), Value::Integer(gpus_per_task as i64));
            task.insert("gpu".into(), Value::Table(gpu));
            if let Some(t) = &self.gpu_type {
                task.insert("model".into(), Value::String(format!("{t}*")));
            }
        }
        task
    }
}

/// `--constraint=a100&ib`: node features, all required (Slurm's `&`). Slurm's other forms
/// (`|`, brackets, counts) are refused by name.
fn features(value: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = value.split('&').map(|f| f.trim().to_string()).collect();
    let plain = |f: &String| !f.is_empty() && f.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if let Some(bad) = names.iter().find(|f| !plain(f)) {
        return Err(format!(
            "--constraint={value}: {bad:?}: gantry takes feature names joined by & (all required); |, brackets and counts are not supported"
        ));
    }
    Ok(names)
}

/// `--dependency=afterok:12:13,afterany:14` → `["afterok:12", "afterok:13", "afterany:14"]`
/// (gantry's `after`; a number is a job id).
fn dependencies(value: &str) -> Result<Vec<String>, String> {
    let mut after = Vec::new();
    for part in value.split(',') {
        let mut fields = part.split(':');
        let kind = fields.next().unwrap_or("");
        if !["afterok", "afterany", "afternotok"].contains(&kind) {
            return Err(format!(
                "--dependency={value}: {kind:?} is not supported (afterok, afterany, afternotok with job ids)"
            ));
        }
        let ids: Vec<&str> = fields.collect();
        if ids.is_empty() || ids.iter().any(|id| id.parse::<u64>().is_err()) {
            return Err(format!("--dependency={value}: use {kind}:ID[:ID...]"));
        }
        after.extend(ids.iter().map(|id| format!("{kind}:{id}")));
    }
    Ok(after)
}

/// A Slurm file name pattern as a shell word, expanded as Slurm expands it: `%j` the job id,
/// `%x` its name (an array element's is its array's), `%A` the array's job id (the job's own
/// outside an array), `%a` the array index, `%u` the user, `%N` the node, `%%` a percent sign;
/// the rest single-quoted. Relative names are from the working directory. (Slurm's `%J`,
/// `%s`, `%t` are step and task numbers: a batch script has neither, so they stay as written.)
fn pattern_word(pattern: &str) -> String {
    let mut word = String::from("'");
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        let piece = match (c, chars.clone().next()) {
            ('%', Some(k)) if "jxaAuN%".contains(k) => {
                chars.next();
                match k {
                    'j' => "'\"$SLURM_JOB_ID\"'",
                    'x' => "'\"$SLURM_JOB_NAME\"'",
                    'A' => "'\"${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}\"'",
                    'a' => "'\"$SLURM_ARRAY_TASK_ID\"'",
                    'u' => "'\"$USER\"'",
                    'N' => "'\"$SLURMD_NODENAME\"'",
                    _ => "%",
                }
                .to_string()
            }
            ('\'', _) => "'\\''".to_string(),
            (c, _) => c.to_string(),
        };
        word.push_str(&piece);
    }
    word.push('\'');
    word
}

/// `command` with its stdout and stderr sent to `--output` and `--error` files (Slurm: stderr
/// goes with stdout when only `--output` is given).
fn redirected(output: Option<&str>, error: Option<&str>, command: Vec<String>) -> Vec<String> {
    let script = redirections(output, error) + "exec \"$@\"";
    let mut full = vec!["sh".to_string(), "-c".to_string(), script, "gantry-sbatch".to_string()];
    full.extend(command);
    full
}

/// Shell lines sending what follows to `--output` and `--error` (none without either).
fn redirections(output: Option<&str>, error: Option<&str>) -> String {
    if output.is_none() && error.is_none() {
        return String::new();
    }
    let mut script = String::new();
    if let Some(out) = output {
        script += &format!("exec >{}; ", pattern_word(out));
    }
    // Stderr with stdout (no --error, or the same pattern) shares its open file: opened
    // twice, each would write over the other from the start.
    match error {
        Some(err) if Some(err) != output => script += &format!("exec 2>{}; ", pattern_word(err)),
        _ if output.is_some() => script += "exec 2>&1; ",
        _ => {}
    }
    script
}

/// The `SLURM_*` variables decided at submission that the batch script sees, as Slurm sets
/// them: where it was submitted from, `--export`'s value, `--mem` per node in MiB,
/// `--ntasks-per-node`, `--dependency` as written, an array's step.
fn submitted_vars(r: &Request) -> Vec<(&'static str, String)> {
    let mut vars = Vec::new();
    vars.extend(r.submit_dir.clone().map(|d| ("SLURM_SUBMIT_DIR", d)));
    vars.extend(r.submit_host.clone().map(|h| ("SLURM_SUBMIT_HOST", h)));
    if let Some(e) = &r.export {
        vars.extend([("SLURM_EXPORT_ENV", e.clone()), ("SLURM_GET_USER_ENV", "1".to_string())]);
    }
    vars.extend(r.memory.as_deref().and_then(mebibytes).map(|m| ("SLURM_MEM_PER_NODE", m.to_string())));
    vars.extend(r.tasks_per_node.map(|n| ("SLURM_NTASKS_PER_NODE", n.to_string())));
    vars.extend(r.dependency.clone().map(|d| ("SLURM_JOB_DEPENDENCY", d)));
    if let Some(a) = &r.array {
        let step = a.split('%').next().and_then(|s| s.split_once(':')).map_or("1", |(_, step)| step);
        vars.push(("SLURM_ARRAY_TASK_STEP", step.to_string()));
    }
    vars
}

/// A `--mem` value as `apply` stored it (`100MiB`, `4GiB`) in MiB.
fn mebibytes(memory: &str) -> Option<u64> {
    let digits = memory.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let n: u64 = digits.parse().ok()?;
    Some(match &memory[digits.len()..] {
        "KiB" => n.div_ceil(1024),
        "GiB" => n * 1024,
        "TiB" => n * 1024 * 1024,
        _ => n,
    })
}

/// One shell word, single-quoted.
pub(crate) fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// What an allocation asks for, in Slurm's terms.
struct Shape {
    nodes: u32,
    tasks: u32,
    tasks_per_node: u32,
    gpus_per_node: u32,
}

/// The task count of the allocation a batch job's command asks for (what `batch_wrapper`
/// wrote after `--tasks`); `None` for a job `sbatch` did not make.
pub fn allocation_tasks(command: &[String]) -> Option<u32> {
    let wrapper = command.get(2).filter(|_| command.get(3).map(String::as_str) == Some("gantry-sbatch"))?;
    let after = wrapper.split(" slurm-batch ").nth(1)?;
    let mut words = after.split_whitespace();
    words.find(|w| *w == "--tasks")?;
    words.next()?.parse().ok()
}

/// The shell every task of a batch job runs (`$@`: the script's command): the first slot runs
/// the script through `gantry slurm-batch` with its output files open; the others serve steps.
fn batch_wrapper(shape: &Shape, request: &Request) -> String {
    let mut host = format!("--nodes {} --tasks {} --tasks-per-node {}", shape.nodes, shape.tasks, shape.tasks_per_node);
    if request.tasks.is_some() || request.tasks_per_node.is_some() {
        host += " --tasks-asked";
    }
    if let Some(c) = request.cpus_per_task {
        host += &format!(" --cpus-per-task {c}");
    }
    if let Some(g) = request.gpus_per_task {
        host += &format!(" --gpus-per-task {g}");
    }
    for (name, value) in submitted_vars(request) {
        host += &format!(" --set {}", quoted(&format!("{name}={value}")));
    }
    let records = gantry_types::STEP_RECORDS_FLAG;
    format!(
        ": \"${{GANTRY_BIN:?this node's gantry agent predates batch jobs (it sets no GANTRY_BIN)}}\"; \
         if [ \"${{GANTRY_RANK:-0}}\" != 0 ]; then exec \"$GANTRY_BIN\" slurm-batch {host} -- true; fi; \
         exec 3>&2; {}exec \"$GANTRY_BIN\" slurm-batch {host} {records} -- \"$@\"",
        redirections(request.output.as_deref(), request.error.as_deref())
    )
}

/// Read a batch script's `#SBATCH` lines (those before the first command); an error names
/// its line (`line 3`).
pub fn parse_script(text: &str) -> Result<Request, SpecError> {
    let mut request = Request::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || (line.starts_with('#') && !line.starts_with("#SBATCH")) {
            continue;
        }
        let Some(rest) = line.strip_prefix("#SBATCH") else { break };
        let words: Vec<&str> = rest.split_whitespace().collect();
        let mut k = 0;
        while k < words.len() {
            let word = words[k];
            if word.starts_with('#') {
                break;
            }
            let (option, value) = match word.split_once('=') {
                Some((o, v)) if o.starts_with("--") => (o, Some(v)),
                // `-N2`, `-n4`, `-Jname`: a letter and its value in one word, as Slurm reads them.
                _ if word.starts_with('-') && !word.starts_with("--") && word.len() > 2 => {
                    (&word[..2], Some(&word[2..]))
                }
                Some((o, v)) => (o, Some(v)),
                None if word.starts_with('-') && k + 1 < words.len() && !words[k + 1].starts_with('-') => {
                    k += 1;
                    (word, Some(words[k]))
                }
                None => (word, None),
            };
            request.apply_one(option, value).map_err(|e| SpecError::new(format!("line {}", i + 1), e))?;
            k += 1;
        }
    }
    Ok(request)
}

/// `gantry submit [--gpus …] -- COMMAND`: the job a command runs as, its sbatch-style
/// options (`("--gpus", value)`, …) applied in order and its name the program's.
pub fn command_job(options: &[(&str, Option<&str>)], command: Vec<String>) -> Result<Table, SpecError> {
    let mut request = Request::default();
    for &(option, value) in options {
        if value.is_some() {
            request.apply(option, value)?;
        }
    }
    let program = command
        .first()
        .and_then(|c| std::path::Path::new(c).file_name())
        .map_or_else(|| "job".to_string(), |n| n.to_string_lossy().into_owned());
    request.job(&program, command)
}

/// What runs a batch script, as Slurm runs it: the interpreter its `#!` line names (else
/// `sh`) given the script's text.
pub fn script_command(text: &str) -> Vec<String> {
    let interpreter = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("#!"))
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| "sh".into());
    let mut command: Vec<String> = interpreter.split_whitespace().map(str::to_string).collect();
    command.extend(["-c".to_string(), text.to_string()]);
    command
}

/// The workload file (TOML text) for one job table.
pub fn workload(job: Table) -> String {
    let mut file = Table::new();
    file.insert("job".into(), Value::Array(vec![Value::Table(job)]));
    toml::to_string(&file).expect("a table serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_script_becomes_a_job() {
        let script = "#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --gres=gpu:h100:8 --nodes=2\n#SBATCH --ntasks-per-node=8\n#SBATCH -t 1-02:00:00 --account research\n#SBATCH --qos=high\n#SBATCH --output=out.log\nsrun python train.py\n#SBATCH --ignored-after-commands\n";
        let r = parse_script(script).expect("valid");
        assert_eq!(r.name.as_deref(), Some("train"));
        assert_eq!(
            (r.gpus_per_node, r.gpu_type.as_deref(), r.nodes, r.tasks_per_node),
            (Some(8), Some("h100"), Some(2), Some(8))
        );
        assert_eq!(
            (r.queue.as_deref(), r.qos.as_deref(), r.priority, r.ignored.len()),
            (Some("research"), Some("high"), None, 0)
        );
        assert_eq!(r.output.as_deref(), Some("out.log"));
        let job = r.job("script", vec!["/bin/bash".into(), "-c".into(), "srun".into()]).expect("job");
        let text = workload(job);
        let parsed = crate::parse_workload(&text, gantry_catalog::Catalog::embedded()).expect("a valid workload");
        assert_eq!(parsed[0].task_count(), 16);
        assert_eq!(parsed[0].control.time_limit_s, Some(93_600));
        // The controller's queue file says what a QOS is worth; the file carries the name.
        assert_eq!((parsed[0].priority, parsed[0].control.qos.as_deref()), (0, Some("high")));
    }

    #[test]
    fn bad_options_name_the_line() {
        for (script, expected) in [
            ("#SBATCH --gres=fpga:2\n", "line 1: --gres=fpga:2: use gpu:N or gpu:TYPE:N"),
            ("\n#SBATCH --time=abc\n", "line 2: --time=abc: use minutes"),
            ("#SBATCH --time=0\n", "a time limit must be more than 0"),
            ("#SBATCH --time=99999999999999999\n", "longer than 36500 days"),
            ("#SBATCH --time=213503982334601-0\n", "longer than 36500 days"),
            ("#SBATCH -p gpu,cpu\n", "gantry takes one partition"),
            ("#SBATCH --dependency=singleton\n", "\"singleton\" is not supported"),
            ("#SBATCH --dependency=afterok:x\n", "use afterok:ID"),
            ("#SBATCH --nice=lots\n", "--nice=lots: a whole number"),
            ("#SBATCH --nodes=0\n", "--nodes=0: not a count ≥ 1"),
            ("#SBATCH --mem=12X\n", "use a size with K, M, G or T"),
            ("#SBATCH --job-name\n", "--job-name needs a value"),
        ] {
            let err = parse_script(script).expect_err(script).to_string();
            assert!(err.starts_with("line ") && err.contains(expected), "{script}: {err}");
        }
        let r = parse_script("#SBATCH --gres=gpu:3 --ntasks-per-node=2\n").expect("parses");
        assert!(
            r.job("x", vec!["true".into()]).expect_err("3 GPUs over 2 tasks").to_string().contains("does not divide")
        );
    }

    #[test]
    fn common_options_map_and_unsupported_ones_are_named() {
        let r = parse_script("#!/bin/sh\n#SBATCH -N2 -n4 -Jname -c2\n#SBATCH -t10 -o=x.out\n").expect("valid");
        assert_eq!((r.nodes, r.tasks, r.name.as_deref(), r.cpus_per_task), (Some(2), Some(4), Some("name"), Some(2)));
        assert_eq!((r.time.as_deref(), r.output.as_deref(), r.ignored.len()), (Some("10"), Some("=x.out"), 0));
        let script = "#!/bin/sh\n#SBATCH --gpus-per-node=a100:2 --array=0-3%2 --nice=50\n#SBATCH --dependency=afterok:12:13,afterany:14\n#SBATCH --chdir=/data/run --exclusive --no-requeue --mail-type=END\n#SBATCH -o logs/%x-%j.out -e 'it''s-%a.err'\necho hi\n";
        let r = parse_script(script).expect("valid");
        assert_eq!((r.gpus_per_node, r.gpu_type.as_deref(), r.priority), (Some(2), Some("a100"), Some(-50)));
        assert_eq!(r.after, ["afterok:12", "afterok:13", "afterany:14"]);
        assert_eq!(
            (r.ignored.as_slice(), r.requeue, r.exclusive),
            (&["--mail-type=END".to_string()][..], Some(false), true)
        );
        let job = r.job("s", vec!["sh".into(), "-c".into(), "echo hi".into()]).expect("job");
        assert_eq!(job["array"].as_str(), Some("0-3%2"));
        assert_eq!(job["workdir"].as_str(), Some("/data/run"));
        let command: Vec<&str> = job["command"].as_array().expect("argv").iter().filter_map(|v| v.as_str()).collect();
        assert_eq!(&command[..2], ["sh", "-c"]);
        assert!(command[2].contains("exec >'logs/'\"$SLURM_JOB_NAME\"'-'\"$SLURM_JOB_ID\"'.out'"), "{}", command[2]);
        assert_eq!(&command[3..], ["gantry-sbatch", "sh", "-c", "echo hi"]);
    }

    /// The patterns expand in a real shell: `%j`, `%x`, `%a` (an array element), `%%`, and a
    /// quote in the name stays a quote.
    #[test]
    fn output_patterns_expand_in_the_shell() {
        let argv = redirected(Some("/tmp/%x-%A_%a_%j_%N_100%%_it's.log"), None, vec!["true".into()]);
        let script = argv[2].trim_end_matches("exec \"$@\"").replace("exec >", "echo ").replace("exec 2>", "echo ");
        let run = |vars: &[(&str, &str)]| {
            let out = std::process::Command::new("sh").args(["-c", &script]).envs(vars.iter().copied()).output();
            String::from_utf8_lossy(&out.expect("sh runs").stdout).lines().next().unwrap_or_default().to_string()
        };
        // An array element: Slurm's `sweep-45_3.out`, not the element's own name and id.
        let element = [
            ("SLURM_JOB_ID", "48"),
            ("SLURM_JOB_NAME", "train"),
            ("SLURM_ARRAY_JOB_ID", "45"),
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURMD_NODENAME", "gpu-01"),
        ];
        assert_eq!(run(&element), "/tmp/train-45_3_48_gpu-01_100%_it's.log");
        let plain = [("SLURM_JOB_ID", "41"), ("SLURM_JOB_NAME", "train"), ("SLURMD_NODENAME", "gpu-01")];
        assert_eq!(run(&plain), "/tmp/train-41__41_gpu-01_100%_it's.log");
    }

    #[test]
    fn slurm_times_read_as_seconds() {
        for (text, seconds) in [("30", 1800), ("5:30", 330), ("1:00:00", 3600), ("2-0", 172_800), ("1-1:30", 91_800)] {
            assert_eq!(slurm_time(text), Ok(seconds), "{text}");
        }
        for text in ["0", "x", "1-2:3:4:5"] {
            assert_eq!(slurm_time(text).expect_err(text).field, "--time", "{text}");
        }
    }
}
