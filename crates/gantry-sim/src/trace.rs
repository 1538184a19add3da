//! From trace rows to engine inputs: the fleet (with generic catalog models for GPUs the
//! catalog does not know), one single-task job per pod, and FGD's typical task types.

use crate::alibaba::{TraceNode, TracePod};
use gantry_catalog::Catalog;
use gantry_engine::{CompiledJob, Engine, EngineError, Shape};
use gantry_types::{
    Bytes, Fleet, Gpu, GpuMode, GpuRequest, Isolation, Job, MilliCpu, MilliGpu, ModelPattern, Node, ShareMode,
    TaskGroup, TaskResources, Topology,
};
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

/// Trace model codes that name catalog models. Others (P100, V100M16, the undisclosed G1/G2/G3)
/// become generic models.
const KNOWN_MODELS: &[(&str, &str)] = &[("T4", "T4-16GB"), ("V100M32", "V100-32GB"), ("A10", "A10-24GB")];

/// Clients one shared GPU may serve: the trace shares GPUs by milli-GPU with no client limit
/// of its own; 1000 is more than any trace puts on one GPU (50 milli is its smallest share).
const SHARE_CLIENTS_MAX: u32 = 1000;

/// Catalog id for a trace model code.
pub fn catalog_model(code: &str) -> String {
    KNOWN_MODELS.iter().find(|(c, _)| *c == code).map_or_else(|| code.to_string(), |(_, id)| id.to_string())
}

/// The catalog extended with the trace's generic models, one per distinct set of names for the
/// life of the process (the engine borrows its catalog for `'static`).
pub fn catalog_for(nodes: &[TraceNode]) -> &'static Catalog {
    static CACHE: OnceLock<Mutex<BTreeMap<Vec<String>, &'static Catalog>>> = OnceLock::new();
    let mut names: Vec<String> = nodes.iter().filter(|n| n.gpus > 0).map(|n| catalog_model(&n.model)).collect();
    names.sort();
    names.dedup();
    let cache = CACHE.get_or_init(|| Mutex::new(BTreeMap::new()));
    let mut cache = cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    cache.entry(names.clone()).or_insert_with(|| {
        Box::leak(Box::new(Catalog::embedded().with_generic_models(names.iter().map(String::as_str))))
    })
}

/// A trace's fleet as the engine sees it.
#[derive(Debug)]
pub struct SimFleet {
    pub fleet: Fleet,
    pub catalog: &'static Catalog,
    /// Total GPU capacity, milli-GPU.
    pub capacity_milli: u64,
}

impl SimFleet {
    /// Every GPU is shared by milli-GPU (MPS-style accounting, no memory limit asked), as in the
    /// trace's cluster; nodes have no NVLink and one NUMA node (the trace says nothing of them).
    pub fn from_trace(nodes: &[TraceNode]) -> SimFleet {
        let catalog = catalog_for(nodes);
        let fleet = Fleet {
            nodes: nodes
                .iter()
                .map(|n| Node {
                    name: n.name.clone(),
                    cpu: MilliCpu(n.cpu_milli),
                    memory: Bytes::mib(n.memory_mib),
                    labels: Default::default(),
                    taints: Vec::new(),
                    rack: None,
                    block: None,
                    gpus: (0..n.gpus)
                        .map(|i| Gpu {
                            index: i,
                            model: catalog_model(&n.model),
                            uuid: format!("{}-gpu{i}", n.name),
                            numa: 0,
                            pcie_switch: 0,
                            nvlink_domain: None,
                            mode: GpuMode::Mps { max_clients: SHARE_CLIENTS_MAX },
                        })
                        .collect(),
                })
                .collect(),
        };
        let capacity_milli = nodes.iter().map(|n| n.gpus as u64 * 1000).sum();
        SimFleet { fleet, catalog, capacity_milli }
    }
}

/// The job for one pod: one task asking for its CPU, memory and GPU share or whole GPUs.
pub fn job_for(pod: &TracePod, name: String) -> Job {
    let gpu = match (pod.num_gpu, pod.gpu_milli) {
        (0, _) => None,
        (1, m) if m < 1000 => Some(GpuRequest::Share { milli: MilliGpu(m), memory: Bytes(0), mode: ShareMode::Any }),
        (n, _) => Some(GpuRequest::Whole { count: n }),
    };
    let resources = TaskResources {
        cpu: MilliCpu(pod.cpu_milli),
        memory: Bytes::mib(pod.memory_mib),
        gpu,
        models: pod.gpu_spec.iter().map(|m| ModelPattern(catalog_model(m))).collect(),
        selector: None,
        isolation: Isolation::None,
        topology: Topology::default(),
        tolerations: Vec::new(),
    };
    Job {
        name,
        queue: if pod.qos.is_empty() { "default".into() } else { pod.qos.clone() },
        priority: 0,
        groups: vec![TaskGroup {
            name: "main".into(),
            replicas: 1,
            resources,
            distinct_nodes: false,
            exclusive_node: false,
            node_selector: Default::default(),
        }],
        lifecycle: Default::default(),
        after: Vec::new(),
        control: Default::default(),
        run: Default::default(),
    }
}

/// Compile one job per pod against an engine (once per distinct pod, copies share it).
pub fn compile_pods(engine: &Engine, pods: &[TracePod]) -> Result<Vec<CompiledJob>, EngineError> {
    pods.iter().map(|p| engine.compile(&job_for(p, p.name.clone()))).collect()
}

/// A pod type as the reference counts it: CPU, per-GPU compute, GPU count, accepted models.
type PodType = (u32, u32, u32, Vec<String>);

/// FGD's typical task types: the most frequent pod types of `pods` (CPU, per-GPU compute, GPU
/// count, accepted models), CPU-only pods included, taken in decreasing frequency until they
/// cover `threshold_pct` of all pods; weights are their counts.
pub fn typical_shapes(engine: &Engine, pods: &[TracePod], threshold_pct: u32) -> Vec<(Shape, u64)> {
    let mut counts: BTreeMap<PodType, u64> = BTreeMap::new();
    for p in pods {
        *counts.entry((p.cpu_milli, p.gpu_milli, p.num_gpu, p.gpu_spec.clone())).or_default() += 1;
    }
    let total: u64 = counts.values().sum();
    let mut ranked: Vec<(PodType, u64)> = counts.into_iter().collect();
    // Decreasing count; among equals, the reference's order (larger CPU, then milli, then count
    // first), so the cut at the threshold falls where theirs does.
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
    let needed = total as f64 * threshold_pct as f64 / 100.0;
    let mut covered = 0u64;
    let mut out = Vec::new();
    for ((cpu, milli, count, spec), n) in ranked {
        if covered as f64 >= needed {
            break;
        }
        covered += n;
        let patterns: Vec<ModelPattern> = spec.iter().map(|m| ModelPattern(catalog_model(m))).collect();
        out.push((Shape { milli, count, cpu, classes: engine.class_mask(&patterns) }, n));
    }
    out
}
