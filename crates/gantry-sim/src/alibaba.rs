//! Reader for the Alibaba GPU cluster trace v2023 ("openb", used by the FGD paper): a node list
//! (`sn,cpu_milli,memory_mib,gpu,model`) and pod lists (`name,cpu_milli,memory_mib,num_gpu,
//! gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time`).
//!
//! Strict mode refuses the file at the first bad row, naming file, line and column; lenient
//! mode skips bad rows and counts them by reason. Either way a row is never half-read.

use std::collections::BTreeMap;
use std::path::Path;

/// A node of the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceNode {
    pub name: String,
    pub cpu_milli: u32,
    pub memory_mib: u64,
    pub gpus: u32,
    /// GPU model code as in the trace (`T4`, `V100M32`, `G2`, ...); empty for CPU-only nodes.
    pub model: String,
}

/// A pod of the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracePod {
    pub name: String,
    pub cpu_milli: u32,
    pub memory_mib: u64,
    pub num_gpu: u32,
    /// Compute per GPU, 1..=1000 (1000 for whole GPUs; 0 for CPU-only pods).
    pub gpu_milli: u32,
    /// Accepted GPU models (`V100M16|V100M32` → two); empty = any.
    pub gpu_spec: Vec<String>,
    pub qos: String,
    pub creation_s: Option<u64>,
    pub deletion_s: Option<u64>,
    /// Line in its file (for error messages).
    pub line: u64,
}

impl TracePod {
    /// Total GPU compute the pod asks for, in milli-GPU.
    pub fn total_gpu_milli(&self) -> u64 {
        self.gpu_milli as u64 * self.num_gpu as u64
    }
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    // Not `source`: the message carries the I/O error, and a chain printer would say it twice.
    #[error("cannot read {file}: {error}")]
    Io { file: String, error: std::io::Error },
    #[error("{file}: missing column `{column}` (columns: {found})")]
    MissingColumn { file: String, column: String, found: String },
    #[error("{file}:{line}: {problem}")]
    BadRow { file: String, line: u64, problem: String },
    #[error("{file}: no rows")]
    Empty { file: String },
}

/// Rows skipped in lenient mode, by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    pub total: u64,
    pub by_reason: BTreeMap<String, u64>,
}

impl Skipped {
    /// Lenient mode's tally in a line (`None` when nothing was skipped): malformed rows apart
    /// from well-formed pods the node list cannot hold (too large, or a GPU model it lacks:
    /// perhaps the node list is what is wrong).
    pub fn summary(&self) -> Option<String> {
        if self.total == 0 {
            return None;
        }
        let unfit = [SKIPPED_TOO_LARGE, SKIPPED_NO_MODEL];
        let (fit, malformed): (Vec<_>, Vec<_>) = self.by_reason.iter().partition(|(r, _)| unfit.contains(&r.as_str()));
        let malformed_count: u64 = malformed.iter().map(|(_, n)| **n).sum();
        let mut parts = Vec::new();
        if malformed_count > 0 {
            let by: Vec<String> = malformed.iter().map(|(r, n)| format!("{r} {n}")).collect();
            parts.push(format!("{malformed_count} malformed ({})", by.join(", ")));
        }
        for (reason, n) in fit {
            parts.push(format!("{n} {reason}"));
        }
        Some(format!("skipped {} rows: {}", self.total, parts.join("; ")))
    }
}

/// Pod lists, each named by its file's stem.
pub type PodLists = Vec<(String, Vec<TracePod>)>;

/// Every pod list of `pods`, each pod checked against `nodes`.
pub fn read_pod_lists(
    nodes: &[TraceNode],
    pods: &[std::path::PathBuf],
    mode: Mode,
    skipped: &mut Skipped,
) -> Result<PodLists, TraceError> {
    let mut lists = Vec::with_capacity(pods.len());
    for path in pods {
        let read = read_pods(path, mode, skipped)?;
        let read = check_pods_fit(nodes, read, path, mode, skipped)?;
        lists.push((stem(path), read));
    }
    Ok(lists)
}

/// A file's stem (its name without extension), which names its runs in reports.
pub fn stem(path: &Path) -> String {
    path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned())
}

/// Strict: the first bad row is an error. Lenient: bad rows are skipped and counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Strict,
    Lenient,
}

struct Table {
    file: String,
    reader: csv::Reader<std::fs::File>,
    columns: BTreeMap<String, usize>,
}

impl Table {
    fn open(path: &Path, required: &[&str]) -> Result<Table, TraceError> {
        let file = path.display().to_string();
        let handle = std::fs::File::open(path).map_err(|error| TraceError::Io { file: file.clone(), error })?;
        let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(handle);
        let headers = reader
            .headers()
            .map_err(|e| TraceError::BadRow { file: file.clone(), line: 1, problem: e.to_string() })?
            .clone();
        let columns: BTreeMap<String, usize> =
            headers.iter().enumerate().map(|(i, h)| (h.trim().to_string(), i)).collect();
        for column in required {
            if !columns.contains_key(*column) {
                let found = headers.iter().collect::<Vec<_>>().join(",");
                return Err(TraceError::MissingColumn { file, column: column.to_string(), found });
            }
        }
        Ok(Table { file, reader, columns })
    }
}

fn field<'r>(record: &'r csv::StringRecord, columns: &BTreeMap<String, usize>, name: &str) -> Result<&'r str, String> {
    let index = columns[name];
    record
        .get(index)
        .map(str::trim)
        .ok_or_else(|| format!("row has {} fields, `{name}` is field {}", record.len(), index + 1))
}

fn number<T: std::str::FromStr>(text: &str, name: &str) -> Result<T, String> {
    text.parse().map_err(|_| format!("`{name}` is {text:?}, not a non-negative whole number"))
}

/// A milli-CPU column. A fraction ("0.5") is cores written where milli-CPU belongs, and so
/// is a node with less than one core (`node`: the value is a node's capacity): both say so.
fn milli_cpu(text: &str, name: &str, node: bool) -> Result<u32, String> {
    let cores_hint = |cores: f64| {
        format!(
            "`{name}` is {text:?}: that looks like cores, the column is milli-CPU ({text} cores = {:.0})",
            cores * 1000.0
        )
    };
    match text.parse::<u32>() {
        Ok(v) if node && (1..1000).contains(&v) => Err(cores_hint(v as f64)),
        Ok(v) => Ok(v),
        Err(_) => match text.parse::<f64>() {
            Ok(cores) if cores.is_finite() && cores > 0.0 && cores.fract() != 0.0 => Err(cores_hint(cores)),
            _ => number(text, name),
        },
    }
}

fn optional_time(text: &str, name: &str) -> Result<Option<u64>, String> {
    if text.is_empty() || text.eq_ignore_ascii_case("nan") {
        return Ok(None);
    }
    // Times are seconds; some exports write them as floats ("12.0").
    let value: f64 = text.parse().map_err(|_| format!("`{name}` is {text:?}, not a time in seconds"))?;
    if !(value.is_finite() && value >= 0.0) {
        return Err(format!("`{name}` is {text:?}: times must be non-negative"));
    }
    Ok(Some(value as u64))
}

/// Read rows with `parse`, applying the mode's policy to bad rows.
fn read_rows<T>(
    mut table: Table,
    mode: Mode,
    skipped: &mut Skipped,
    mut parse: impl FnMut(&csv::StringRecord, &BTreeMap<String, usize>, u64) -> Result<T, String>,
) -> Result<Vec<T>, TraceError> {
    let mut rows = Vec::new();
    for (i, record) in table.reader.records().enumerate() {
        let line = i as u64 + 2;
        let outcome = record.map_err(|e| e.to_string()).and_then(|r| parse(&r, &table.columns, line));
        match (outcome, mode) {
            (Ok(row), _) => rows.push(row),
            (Err(problem), Mode::Strict) => return Err(TraceError::BadRow { file: table.file.clone(), line, problem }),
            (Err(problem), Mode::Lenient) => {
                let reason = problem.split(" is ").next().unwrap_or(&problem).to_string();
                skipped.total += 1;
                *skipped.by_reason.entry(reason).or_default() += 1;
            }
        }
    }
    if rows.is_empty() {
        return Err(TraceError::Empty { file: table.file });
    }
    Ok(rows)
}

/// Read a node list. GPU-less nodes are kept (CPU-only capacity).
pub fn read_nodes(path: &Path, mode: Mode, skipped: &mut Skipped) -> Result<Vec<TraceNode>, TraceError> {
    let table = Table::open(path, &["sn", "cpu_milli", "memory_mib", "gpu", "model"])?;
    let mut first_line: BTreeMap<String, u64> = BTreeMap::new();
    read_rows(table, mode, skipped, |r, c, line| {
        let name = field(r, c, "sn")?;
        if let Some(first) = first_line.get(name) {
            return Err(format!("`sn` is {name:?}, a node name already used at line {first}"));
        }
        let gpus: u32 = number(field(r, c, "gpu")?, "gpu")?;
        let model = field(r, c, "model")?;
        let model =
            if model.is_empty() || model.eq_ignore_ascii_case("nan") { String::new() } else { model.to_string() };
        if gpus > 64 {
            return Err(format!("`gpu` is {gpus}: more than 64 GPUs on one node"));
        }
        if gpus > 0 && model.is_empty() {
            return Err("`model` is empty for a node with GPUs".into());
        }
        let node = TraceNode {
            name: name.to_string(),
            cpu_milli: milli_cpu(field(r, c, "cpu_milli")?, "cpu_milli", true)?,
            memory_mib: number(field(r, c, "memory_mib")?, "memory_mib")?,
            gpus,
            model,
        };
        first_line.insert(node.name.clone(), line);
        Ok(node)
    })
}

/// Read a pod list.
pub fn read_pods(path: &Path, mode: Mode, skipped: &mut Skipped) -> Result<Vec<TracePod>, TraceError> {
    let table = Table::open(path, &["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"])?;
    read_rows(table, mode, skipped, |r, c, line| {
        let num_gpu: u32 = number(field(r, c, "num_gpu")?, "num_gpu")?;
        let gpu_milli: u32 = number(field(r, c, "gpu_milli")?, "gpu_milli")?;
        if num_gpu > 64 {
            return Err(format!("`num_gpu` is {num_gpu}: more than any node holds"));
        }
        if num_gpu > 0 && !(1..=1000).contains(&gpu_milli) {
            return Err(format!("`gpu_milli` is {gpu_milli}: must be 1..=1000 for a GPU pod"));
        }
        if num_gpu > 1 && gpu_milli != 1000 {
            return Err(format!("`gpu_milli` is {gpu_milli}: multi-GPU pods take whole GPUs (1000)"));
        }
        let optional = |name: &str| c.get(name).map(|_| field(r, c, name)).transpose();
        let spec = optional("gpu_spec")?.unwrap_or("");
        let gpu_spec = if spec.eq_ignore_ascii_case("nan") {
            Vec::new()
        } else {
            spec.split('|').filter(|s| !s.is_empty()).map(str::to_string).collect()
        };
        let creation_s = optional_time(optional("creation_time")?.unwrap_or(""), "creation_time")?;
        let deletion_s = optional_time(optional("deletion_time")?.unwrap_or(""), "deletion_time")?;
        if let (Some(c), Some(d)) = (creation_s, deletion_s)
            && d < c
        {
            return Err(format!("`deletion_time` is {d}: before creation_time {c}"));
        }
        Ok(TracePod {
            name: field(r, c, "name")?.to_string(),
            cpu_milli: milli_cpu(field(r, c, "cpu_milli")?, "cpu_milli", false)?,
            memory_mib: number(field(r, c, "memory_mib")?, "memory_mib")?,
            num_gpu,
            gpu_milli: if num_gpu == 0 { 0 } else { gpu_milli },
            gpu_spec,
            qos: optional("qos")?.unwrap_or("").to_string(),
            creation_s,
            deletion_s,
            line,
        })
    })
}

/// Lenient mode's count of pods larger than any node.
pub const SKIPPED_TOO_LARGE: &str = "pod larger than any node";
/// Lenient mode's count of pods asking for a GPU model the fleet lacks (counted apart: the
/// fleet file, not the trace, may be what is wrong).
pub const SKIPPED_NO_MODEL: &str = "pod asks for a GPU model the fleet lacks";

/// Pods larger than any node — more CPU, memory or GPUs than the largest node has, or a GPU
/// model no node has: an error in strict mode, dropped and counted in lenient mode. A pod whose
/// requirements each exist somewhere but never together on one node stays: the trace has such
/// pods, and the reference simulator counts them as failed arrivals.
pub fn check_pods_fit(
    nodes: &[TraceNode],
    pods: Vec<TracePod>,
    file: &Path,
    mode: Mode,
    skipped: &mut Skipped,
) -> Result<Vec<TracePod>, TraceError> {
    let max_cpu = nodes.iter().map(|n| n.cpu_milli).max().unwrap_or(0);
    let max_memory = nodes.iter().map(|n| n.memory_mib).max().unwrap_or(0);
    let max_gpus = nodes.iter().map(|n| n.gpus).max().unwrap_or(0);
    let mut kept = Vec::with_capacity(pods.len());
    for pod in pods {
        let model_exists = pod.num_gpu == 0
            || pod.gpu_spec.is_empty()
            || pod.gpu_spec.iter().any(|m| nodes.iter().any(|n| n.gpus > 0 && n.model == *m));
        if pod.cpu_milli <= max_cpu && pod.memory_mib <= max_memory && pod.num_gpu <= max_gpus && model_exists {
            kept.push(pod);
            continue;
        }
        let (problem, reason) = if model_exists {
            let mut over = Vec::new();
            if pod.cpu_milli > max_cpu {
                over.push(format!("cpu {}m (largest node: {max_cpu}m)", pod.cpu_milli));
            }
            if pod.memory_mib > max_memory {
                over.push(format!("memory {} MiB (largest node: {max_memory} MiB)", pod.memory_mib));
            }
            if pod.num_gpu > max_gpus {
                over.push(format!("{} GPUs (largest node: {max_gpus})", pod.num_gpu));
            }
            (format!("pod {} is larger than any node: {}", pod.name, over.join(", ")), SKIPPED_TOO_LARGE)
        } else {
            let mut models: Vec<&str> = nodes.iter().filter(|n| n.gpus > 0).map(|n| n.model.as_str()).collect();
            models.sort_unstable();
            models.dedup();
            (
                format!(
                    "pod {} asks for GPU model {}, which no node of the fleet has (it has: {})",
                    pod.name,
                    pod.gpu_spec.join("|"),
                    if models.is_empty() { "no GPUs".to_string() } else { models.join(", ") }
                ),
                SKIPPED_NO_MODEL,
            )
        };
        match mode {
            Mode::Strict => {
                return Err(TraceError::BadRow { file: file.display().to_string(), line: pod.line, problem });
            }
            Mode::Lenient => {
                skipped.total += 1;
                *skipped.by_reason.entry(reason.into()).or_default() += 1;
            }
        }
    }
    Ok(kept)
}
