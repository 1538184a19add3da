//! The benches' mixed fleet and request mix (placement, scale): H100 and A100 nodes of 8 GPUs
//! with some MIG, time-sliced and MPS GPUs, and requests of every kind that fit there.

use gantry_types::{
    Bytes, Fleet, Gpu, GpuMode, GpuRequest, Isolation, Job, MigInstanceSpec, MilliCpu, MilliGpu, Node, ShareMode,
    TaskGroup, TaskResources, Topology,
};

pub const GPUS_PER_NODE: usize = 8;

fn mig(layout: &[(&str, u8)]) -> GpuMode {
    GpuMode::Mig { instances: layout.iter().map(|&(p, s)| MigInstanceSpec { profile: p.into(), start: s }).collect() }
}

/// `nodes` nodes: half H100 and half A100-80GB nodes in racks of 32; every 10th node has two MIG GPUs, every
/// 10th (offset) two time-sliced GPUs, every 20th two MPS GPUs.
pub fn fleet(nodes: usize) -> Fleet {
    let nodes = (0..nodes)
        .map(|i| {
            let model = if i % 2 == 0 { "H100-SXM5-80GB" } else { "A100-SXM4-80GB" };
            let gpus = (0..GPUS_PER_NODE)
                .map(|g| {
                    let mode = match (i % 10, i % 20, g) {
                        (0, _, 6) => mig(&[
                            ("1g.10gb", 0),
                            ("1g.10gb", 1),
                            ("1g.10gb", 2),
                            ("1g.10gb", 3),
                            ("1g.10gb", 4),
                            ("1g.10gb", 5),
                            ("1g.10gb", 6),
                        ]),
                        (0, _, 7) => mig(&[("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)]),
                        (5, _, 6 | 7) => GpuMode::TimeSlice { replicas: 4, memory_per_replica: Bytes::gib(20) },
                        (_, 3, 6 | 7) => GpuMode::Mps { max_clients: 48 },
                        _ => GpuMode::Whole,
                    };
                    Gpu {
                        index: g as u32,
                        model: model.into(),
                        uuid: format!("GPU-{i:05}-{g}"),
                        numa: (g / 4) as u32,
                        pcie_switch: (g / 2) as u32,
                        nvlink_domain: Some(0),
                        mode,
                    }
                })
                .collect();
            Node {
                name: format!("node-{i:05}"),
                cpu: MilliCpu(224_000),
                memory: Bytes::gib(2048),
                labels: Default::default(),
                taints: Vec::new(),
                rack: Some(format!("rack-{:03}", i / 32)),
                block: None,
                gpus,
            }
        })
        .collect();
    Fleet { nodes }
}

pub fn job(name: &str, replicas: u32, gpu: GpuRequest, isolation: Isolation, topology: Topology) -> Job {
    let resources = TaskResources {
        cpu: MilliCpu(4000),
        memory: Bytes::gib(32),
        gpu: Some(gpu),
        models: Vec::new(),
        selector: None,
        isolation,
        topology,
        tolerations: Vec::new(),
    };
    Job {
        name: name.into(),
        queue: "bench".into(),
        priority: 0,
        groups: vec![TaskGroup {
            name: "t".into(),
            replicas,
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

/// The single-task request mix: whole 1–8, MIG profiles, MPS/time-slice shares, memory-only.
pub fn single_task_mix() -> Vec<Job> {
    let t = Topology::default();
    vec![
        job("whole-1", 1, GpuRequest::Whole { count: 1 }, Isolation::Hard, t),
        job("whole-1b", 1, GpuRequest::Whole { count: 1 }, Isolation::Hard, t),
        job("whole-2", 1, GpuRequest::Whole { count: 2 }, Isolation::Hard, t),
        job("whole-4", 1, GpuRequest::Whole { count: 4 }, Isolation::Hard, t),
        job("whole-8", 1, GpuRequest::Whole { count: 8 }, Isolation::Hard, t),
        job("mig-1g", 1, GpuRequest::Mig { profile: "1g.10gb".into() }, Isolation::Hard, t),
        job("mig-3g", 1, GpuRequest::Mig { profile: "3g.40gb".into() }, Isolation::Hard, t),
        job(
            "share-250",
            1,
            GpuRequest::Share { milli: MilliGpu(250), memory: Bytes::gib(10), mode: ShareMode::Any },
            Isolation::None,
            t,
        ),
        job(
            "share-500",
            1,
            GpuRequest::Share { milli: MilliGpu(500), memory: Bytes::gib(16), mode: ShareMode::Mps },
            Isolation::Soft,
            t,
        ),
        job("memory-20", 1, GpuRequest::Memory { memory: Bytes::gib(20), hint: None }, Isolation::None, t),
    ]
}
