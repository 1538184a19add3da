//! Named scenarios, including the worked examples from the seeds.

use crate::support::*;
use gantry_engine::Policy;
use gantry_types::{GpuGrant, JobOutcome, Reason};

/// 10 A100-80GB: 4 whole for 4 training jobs, 3 as 7 × 1g.10gb for 20 inference models, 3
/// time-sliced × 10 for 30 notebooks. All 54 place, on every policy.
#[test]
fn the_ten_a100_mix_places_all_54_workloads() {
    let fleet = r#"
[[node]]
name = "a100-a"
cpu = 128
memory = "1TiB"
[node.gpus]
model = "A100-SXM4-80GB"
count = 8
[[node.gpu]]
index = 4
mig = ["1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"]
[[node.gpu]]
index = 5
mig = ["1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"]
[[node.gpu]]
index = 6
mig = ["1g.10gb@0", "1g.10gb@1", "1g.10gb@2", "1g.10gb@3", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"]
[[node.gpu]]
index = 7
mode = "time-slice"
replicas = 10

[[node]]
name = "a100-b"
cpu = 32
memory = "256GiB"
[node.gpus]
model = "A100-SXM4-80GB"
count = 2
mode = "time-slice"
replicas = 10
"#;
    let workload = r#"
[[job]]
name = "train"
count = 4
cpu = 8
memory = "64GiB"
gpu = { count = 1 }

[[job]]
name = "infer"
count = 20
cpu = 1
memory = "8GiB"
gpu = { mig = "1g.10gb" }
isolation = "hard"

[[job]]
name = "notebook"
count = 30
cpu = "500m"
memory = "4GiB"
resources = { "nvidia.com/gpu.shared" = 1 }
"#;
    for policy in Policy::ALL {
        let mut engine = engine(fleet, policy);
        let outcomes = place_all(&mut engine, &jobs(workload));
        assert_eq!(outcomes.len(), 54);
        let failed: Vec<_> = outcomes.iter().filter(|o| matches!(o, JobOutcome::Unplaced { .. })).collect();
        assert!(failed.is_empty(), "{policy}: {} of 54 did not place: {failed:?}", failed.len());
        engine.check_invariants().expect("ledger consistent");
    }
}

const HGX: &str = r#"
[[node]]
name = "hgx"
cpu = 224
memory = "2TiB"
[node.gpus]
model = "H100-SXM5-80GB"
count = 8
numa_nodes = 2
"#;

const PCIE_2NUMA: &str = r#"
[[node]]
name = "pcie"
cpu = 64
memory = "512GiB"
[node.gpus]
model = "L40S-48GB"
count = 8
numa_nodes = 2
"#;

#[test]
fn a_4gpu_job_on_an_nvswitch_node_stays_in_the_nvlink_domain() {
    let mut engine = engine(HGX, Policy::Default);
    let outcomes = place_all(
        &mut engine,
        &jobs("[[job]]\nname = \"t\"\ngpu = { count = 4 }\ntopology = { within = \"nvlink\", required = true }"),
    );
    let task = &placed(&outcomes[0])[0];
    assert_eq!(whole_gpus(task).len(), 4);
    let gpus = &engine.state().gpus;
    assert!(task.gpus.iter().all(|g| gpus[g.gpu() as usize].nvlink_domain == Some(0)));
}

#[test]
fn a_4gpu_job_on_a_two_numa_pcie_node_lands_on_one_numa_node() {
    // Take one GPU on NUMA 0 first, so NUMA 0 has 3 free and NUMA 1 has 4.
    let cases = [("NUMA 0 busy", "[[job]]\nname = \"small\"\ngpu = { count = 1 }\n", 1u32)];
    for (name, pre, expect_numa) in cases {
        let mut engine = engine(PCIE_2NUMA, Policy::BestFit);
        let outcomes = place_all(&mut engine, &jobs(&format!("{pre}[[job]]\nname = \"t\"\ngpu = {{ count = 4 }}\n")));
        let small = &placed(&outcomes[0])[0];
        let small_numa = engine.state().gpus[small.gpus[0].gpu() as usize].numa;
        let task = &placed(&outcomes[1])[0];
        let numas: Vec<u32> = task.gpus.iter().map(|g| engine.state().gpus[g.gpu() as usize].numa).collect();
        assert!(numas.iter().all(|&n| n == numas[0]), "{name}: spread across NUMA nodes {numas:?}");
        assert_ne!(numas[0], small_numa, "{name}: should avoid the busy NUMA node");
        let _ = expect_numa;
    }
}

#[test]
fn required_numa_refuses_to_spread_and_preferred_spreads() {
    // Two NUMA nodes of 3 GPUs: no NUMA node holds 4.
    let fleet = "[[node]]\nname = \"n\"\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"L40S-48GB\"\ncount = 6\nnuma = [0, 0, 0, 1, 1, 1]\n";
    let mut engine = engine(fleet, Policy::BestFit);
    let outcomes = place_all(
        &mut engine,
        &jobs(
            "[[job]]\nname = \"req\"\ngpu = { count = 4 }\ntopology = { within = \"numa\", required = true }\n[[job]]\nname = \"pref\"\ngpu = { count = 4 }\n",
        ),
    );
    match &outcomes[0] {
        JobOutcome::Unplaced { reasons } => {
            assert!(matches!(reasons[0].reason, Reason::TopologyUnsatisfiable { need: 4, .. }), "{reasons:?}")
        }
        other => panic!("required NUMA placed across NUMA nodes: {other:?}"),
    }
    assert_eq!(placed(&outcomes[1])[0].gpus.len(), 4, "preferred topology falls back to the node");
}

#[test]
fn mig_on_a_t4_is_rejected_naming_mig_support() {
    let fleet = "[[node]]\nname = \"t4\"\ncpu = 32\nmemory = \"128GiB\"\n[node.gpus]\nmodel = \"T4-16GB\"\ncount = 4\n";
    let mut engine = engine(fleet, Policy::Default);
    let outcomes = place_all(&mut engine, &jobs("[[job]]\nname = \"m\"\ngpu = { mig = \"1g.10gb\" }"));
    let JobOutcome::Unplaced { reasons } = &outcomes[0] else { panic!("a T4 cannot host MIG") };
    assert!(matches!(&reasons[0].reason, Reason::MigNotSupported { profile } if profile == "1g.10gb"), "{reasons:?}");
    assert!(reasons[0].reason.to_string().contains("MIG-capable"), "{}", reasons[0].reason);
}

#[test]
fn a_gang_that_cannot_fully_fit_leaves_nothing_behind() {
    let mut engine = engine(HGX, Policy::Default);
    let before = engine.state().clone();
    let outcomes = place_all(
        &mut engine,
        &jobs("[[job]]\nname = \"big\"\n[[job.task]]\nname = \"w\"\nreplicas = 3\ngpu = { count = 4 }\n"),
    );
    let JobOutcome::Unplaced { reasons } = &outcomes[0] else { panic!("12 GPUs on an 8-GPU fleet") };
    assert!(reasons.iter().any(|r| matches!(r.reason, Reason::GangIncomplete { placed: 2, total: 3 })), "{reasons:?}");
    assert_eq!(engine.state(), &before, "rolled back exactly");
    assert!(engine.allocations().is_empty());
}

#[test]
fn a_gang_within_a_rack_stays_in_one_rack() {
    let fleet = r#"
[[node]]
name = "r1"
count = 2
rack = "rack-1"
cpu = 64
memory = "512GiB"
[node.gpus]
model = "A100-SXM4-80GB"
count = 8
[[node]]
name = "r2"
count = 3
rack = "rack-2"
cpu = 64
memory = "512GiB"
[node.gpus]
model = "A100-SXM4-80GB"
count = 8
"#;
    let mut engine = engine(fleet, Policy::Default);
    let outcomes = place_all(
        &mut engine,
        &jobs(
            "[[job]]\nname = \"g\"\n[[job.task]]\nname = \"w\"\nreplicas = 3\ngpu = { count = 8 }\ntopology = { within = \"rack\", required = true }\n",
        ),
    );
    let tasks = placed(&outcomes[0]);
    assert_eq!(tasks.len(), 3);
    assert!(
        tasks.iter().all(|t| t.node.starts_with("r2-")),
        "only rack-2 holds 24 GPUs: {:?}",
        tasks.iter().map(|t| &t.node).collect::<Vec<_>>()
    );
}

#[test]
fn memory_only_requests_take_the_smallest_unit() {
    let fleet = r#"
[[node]]
name = "n"
cpu = 64
memory = "512GiB"
[node.gpus]
model = "A100-SXM4-80GB"
count = 3
[[node.gpu]]
index = 0
mig = ["3g.40gb@0", "2g.20gb@4", "1g.10gb@6"]
[[node.gpu]]
index = 1
mode = "mps"
"#;
    let mut engine = engine(fleet, Policy::Default);
    let outcomes = place_all(
        &mut engine,
        &jobs(
            "[[job]]\nname = \"s\"\ngpu = { memory = \"15GiB\" }\n[[job]]\nname = \"t\"\ngpu = { memory = \"8GiB\" }\n[[job]]\nname = \"h\"\ngpu = { memory = \"15GiB\" }\nisolation = \"hard\"\n",
        ),
    );
    // 15GiB: MPS share of 15GiB is smaller than the 20GiB MIG instance.
    assert!(matches!(placed(&outcomes[0])[0].gpus[0], GpuGrant::Mps { .. }), "{:?}", outcomes[0]);
    // 8GiB: the 1g.10gb instance (10GiB) loses to an 8GiB MPS share.
    assert!(matches!(placed(&outcomes[1])[0].gpus[0], GpuGrant::Mps { .. }), "{:?}", outcomes[1]);
    // Hard isolation: MPS is out, the 2g.20gb instance is the smallest that holds 15GiB.
    assert!(
        matches!(&placed(&outcomes[2])[0].gpus[0], GpuGrant::Mig { profile, .. } if profile == "2g.20gb"),
        "{:?}",
        outcomes[2]
    );
}

/// A memory-only request with a job shape: the advisor's unit kind goes first on each model.
#[test]
fn memory_only_requests_with_a_purpose_take_the_advised_unit() {
    let fleet = r#"
[[node]]
name = "n"
cpu = 64
memory = "512GiB"
[node.gpus]
model = "A100-SXM4-80GB"
count = 4
[[node.gpu]]
index = 0
mig = ["3g.40gb@0", "2g.20gb@4", "1g.10gb@6"]
[[node.gpu]]
index = 1
mode = "mps"
[[node.gpu]]
index = 2
mode = "time-slice"
replicas = 4
"#;
    let cases: [(&str, &str, fn(&GpuGrant) -> bool); 6] = [
        // Without a hint: the smallest unit (an MPS share of 15GiB beats the 20GiB slice).
        ("none", "", |g| matches!(g, GpuGrant::Mps { .. })),
        // Production inference: a MIG instance, the smallest that holds it.
        (
            "production inference",
            ", purpose = \"inference\", latency-sensitive = true",
            |g| matches!(g, GpuGrant::Mig { profile, .. } if profile == "2g.20gb"),
        ),
        // Training: a whole GPU (GPU 3 is in whole mode).
        ("training", ", purpose = \"training\"", |g| matches!(g, GpuGrant::Whole { gpu: 3 })),
        // Development: a time-slice.
        ("notebook", ", purpose = \"development\"", |g| matches!(g, GpuGrant::TimeSlice { .. })),
        // Bursty inference: never a MIG slice; the advice (a time-slice) goes first.
        ("bursty", ", purpose = \"inference\", bursty = true", |g| matches!(g, GpuGrant::TimeSlice { .. })),
        // Trusted steady inference with soft isolation: an MPS share.
        ("trusted", ", purpose = \"inference\", trusted = true", |g| matches!(g, GpuGrant::Mps { .. })),
    ];
    for (name, hint, expect) in cases {
        let mut engine = engine(fleet, Policy::Default);
        let isolation = if name == "trusted" { "isolation = \"soft\"\n" } else { "" };
        let workload = format!("[[job]]\nname = \"j\"\n{isolation}gpu = {{ memory = \"15GiB\"{hint} }}\n");
        let outcomes = place_all(&mut engine, &jobs(&workload));
        let grant = &placed(&outcomes[0])[0].gpus[0];
        assert!(expect(grant), "{name}: {grant:?}");
    }
}

/// A memory-only request goes to an instance that holds it as the driver reports it: on an
/// A100-80GB a 1g.10gb has 9.5 GiB, so 10 GiB takes the 1g.20gb and 9 GiB the 1g.10gb.
#[test]
fn memory_only_requests_fit_mig_instances_by_their_reported_memory() {
    let fleet = r#"
[[node]]
name = "n"
cpu = 64
memory = "512GiB"
[node.gpus]
model = "A100-SXM4-80GB"
count = 1
mig = ["1g.20gb@0", "1g.10gb@2", "1g.10gb@3"]
"#;
    for (memory, profile) in [("10GiB", "1g.20gb"), ("9GiB", "1g.10gb"), ("9.5GiB", "1g.10gb")] {
        let mut e = engine(fleet, Policy::Default);
        let outcomes = place_all(&mut e, &jobs(&format!("[[job]]\nname = \"m\"\ngpu = {{ memory = \"{memory}\" }}\n")));
        let grant = &placed(&outcomes[0])[0].gpus[0];
        assert!(matches!(grant, GpuGrant::Mig { profile: p, .. } if p == profile), "{memory}: {grant:?}");
    }
}

/// A bursty memory-only request never lands on a MIG instance, even when only MIG has room.
#[test]
fn a_bursty_memory_only_request_never_gets_a_mig_slice() {
    let fleet = r#"
[[node]]
name = "n"
cpu = 64
memory = "512GiB"
[node.gpus]
model = "A100-SXM4-80GB"
count = 1
[[node.gpu]]
index = 0
mig = ["3g.40gb@0", "3g.40gb@4"]
"#;
    let mut engine = engine(fleet, Policy::Default);
    let outcomes = place_all(
        &mut engine,
        &jobs("[[job]]\nname = \"b\"\ngpu = { memory = \"10GiB\", purpose = \"batch\", bursty = true }\n"),
    );
    assert!(matches!(outcomes[0], JobOutcome::Unplaced { .. }), "{:?}", outcomes[0]);
}

#[test]
fn whole_requests_do_not_steal_the_sharing_pool() {
    let fleet = r#"
[[node]]
name = "shared"
cpu = 64
memory = "512GiB"
[node.gpus]
model = "L4-24GB"
count = 2
mode = "time-slice"
replicas = 4
[[node]]
name = "whole"
cpu = 64
memory = "512GiB"
[node.gpus]
model = "L4-24GB"
count = 2
"#;
    for policy in gantry_engine::Policy::ALL {
        let mut engine = engine(fleet, policy);
        let outcomes = place_all(&mut engine, &jobs("[[job]]\nname = \"w\"\ngpu = { count = 1 }\n"));
        assert_eq!(placed(&outcomes[0])[0].node, "whole", "{policy}");
    }
}

#[test]
fn mig_instances_gather_on_the_node_already_sharing() {
    // Three GPUs in the same layout, one on "a", two on "b". Three 4g jobs take one 4g each
    // (a's first: node order); then every GPU has the same three 1g slices free, and node
    // order alone would put a 1g instance on "a". "b" runs more shared GPUs, so the default
    // policy puts it there: shared work stays together, and "a" can empty for whole GPUs.
    let fleet = r#"
[[node]]
name = "a"
cpu = 64
memory = "512GiB"
[node.gpus]
model = "A100-SXM4-80GB"
count = 1
mig = ["4g.40gb@0", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"]
[[node]]
name = "b"
cpu = 64
memory = "512GiB"
[node.gpus]
model = "A100-SXM4-80GB"
count = 2
mig = ["4g.40gb@0", "1g.10gb@4", "1g.10gb@5", "1g.10gb@6"]
"#;
    let mut workload = String::new();
    for i in 0..3 {
        workload.push_str(&format!("[[job]]\nname = \"big-{i}\"\ngpu = {{ mig = \"4g.40gb\" }}\n"));
    }
    workload.push_str("[[job]]\nname = \"small\"\ngpu = { mig = \"1g.10gb\" }\n");
    let where_small_goes = |policy| {
        let mut engine = engine(fleet, policy);
        let outcomes = place_all(&mut engine, &jobs(&workload));
        let nodes: Vec<&str> = outcomes.iter().map(|o| placed(o)[0].node.as_str()).collect();
        assert_eq!(&nodes[..3], ["a", "b", "b"], "{policy}");
        nodes[3].to_string()
    };
    assert_eq!(where_small_goes(gantry_engine::Policy::Default), "b");
    assert_eq!(where_small_goes(gantry_engine::Policy::Fgd), "a", "FGD alone leaves it to node order");
}

#[test]
fn gpu_tasks_heavy_on_cpu_go_where_cpu_will_not_run_out_first() {
    // Two 8-GPU nodes; "lean" (first in node order) has 8 cores per GPU, "rich" 32. The
    // workload so far: a light task (1 GPU, 2 cores) and a heavy one (1 GPU, 16 cores), 9
    // cores per GPU on average. The light task takes a GPU on "lean". Then the heavy one:
    // both nodes still fit every type afterwards, so FGD sees no difference and node order
    // sends it to "lean" — where its 16 cores leave 46 for 6 GPUs, about 5 GPUs' worth at
    // the workload's ratio. `default` counts that stranded compute and picks "rich".
    let fleet = r#"
[[node]]
name = "lean"
cpu = 64
memory = "512GiB"
[node.gpus]
model = "L4-24GB"
count = 8
[[node]]
name = "rich"
cpu = 256
memory = "512GiB"
[node.gpus]
model = "L4-24GB"
count = 8
"#;
    let workload = "[[job]]\nname = \"light\"\ncpu = 2\ngpu = { count = 1 }\n\n[[job]]\nname = \"heavy\"\ncpu = 16\ngpu = { count = 1 }\n";
    let nodes = |policy| {
        let mut engine = engine(fleet, policy);
        let outcomes = place_all(&mut engine, &jobs(workload));
        outcomes.iter().map(|o| placed(o)[0].node.clone()).collect::<Vec<String>>()
    };
    assert_eq!(nodes(gantry_engine::Policy::Default), ["lean", "rich"]);
    assert_eq!(nodes(gantry_engine::Policy::Fgd), ["lean", "lean"], "FGD alone leaves it to node order");
}

/// A share request says what is wrong with it: a fleet with no shared GPU at all, or a
/// time-sliced GPU whose replicas for that share hold less memory than asked (and which
/// share would hold it) — not "at most 1000m free".
#[test]
fn share_requests_name_a_fleet_without_shared_gpus_and_a_replica_memory_budget() {
    let whole =
        "[[node]]\nname = \"n\"\ncpu = 32\nmemory = \"256GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\n";
    let mut e = engine(whole, Policy::Default);
    let outcome = &place_all(&mut e, &jobs("[[job]]\nname = \"s\"\ngpu = { share = 125, memory = \"4GiB\" }\n"))[0];
    let JobOutcome::Unplaced { reasons } = outcome else { panic!("no shared GPU: {outcome:?}") };
    assert_eq!(reasons[0].reason, Reason::NoSharedGpu { modes: "MPS or time-slice".into() }, "{reasons:?}");
    assert!(reasons[0].reason.to_string().contains("none here is shared"), "{}", reasons[0].reason);
    let sliced = format!("{whole}mode = \"time-slice\"\nreplicas = 4\n");
    let mut e = engine(&sliced, Policy::Default);
    let outcome = &place_all(&mut e, &jobs("[[job]]\nname = \"s\"\ngpu = { share = 125, memory = \"40GiB\" }\n"))[0];
    let JobOutcome::Unplaced { reasons } = outcome else { panic!("over the replica budget: {outcome:?}") };
    let text = reasons[0].reason.to_string();
    assert!(matches!(reasons[0].reason, Reason::ShareMemoryOverBudget { replicas: 1, .. }), "{reasons:?}");
    assert!(text.contains("1 replica of 20GiB") && text.contains("share = 500"), "{text}");
    // What the reason advises fits.
    let mut e = engine(&sliced, Policy::Default);
    let outcome = &place_all(&mut e, &jobs("[[job]]\nname = \"s\"\ngpu = { share = 500, memory = \"40GiB\" }\n"))[0];
    assert!(matches!(outcome, JobOutcome::Placed { .. }), "{outcome:?}");
    // More memory than the whole GPU: plain GPU memory, no share would do.
    let mut e = engine(&sliced, Policy::Default);
    let outcome = &place_all(&mut e, &jobs("[[job]]\nname = \"s\"\ngpu = { share = 125, memory = \"100GiB\" }\n"))[0];
    let JobOutcome::Unplaced { reasons } = outcome else { panic!("{outcome:?}") };
    assert!(matches!(reasons[0].reason, Reason::InsufficientGpuMemory { .. }), "{reasons:?}");
}

#[test]
fn reasons_explain_each_kind_of_misfit() {
    let fleet = "[[node]]\nname = \"n\"\ncpu = 8\nmemory = \"32GiB\"\ntaints = [\"dedicated=infer:NoSchedule\"]\n[node.gpus]\nmodel = \"L4-24GB\"\ncount = 2\nmode = \"mps\"\n";
    let cases: [(&str, &str, fn(&Reason) -> bool); 6] = [
        ("taint", "gpu = { share = 100 }", |r| matches!(r, Reason::TaintNotTolerated { .. })),
        ("cpu", "cpu = 16\ntolerations = [\"dedicated\"]", |r| matches!(r, Reason::InsufficientCpu { .. })),
        ("model", "gpu = { count = 1 }\nmodel = \"H100*\"\ntolerations = [\"dedicated=infer\"]", |r| {
            matches!(r, Reason::GpuModelMismatch { .. })
        }),
        (
            "selector",
            "gpu = { share = 100 }\nselector = \"device.memory_gib >= 80\"\ntolerations = [\"dedicated\"]",
            |r| matches!(r, Reason::SelectorRejected { .. }),
        ),
        ("gpu memory", "gpu = { share = 100, memory = \"30GiB\" }\ntolerations = [\"dedicated\"]", |r| {
            matches!(r, Reason::InsufficientGpuMemory { .. })
        }),
        ("isolation", "gpu = { share = 100 }\nisolation = \"soft\"\ntolerations = [\"dedicated\"]", |_| true),
    ];
    for (name, body, expected) in cases {
        let mut engine = engine(fleet, Policy::Default);
        let outcome = &place_all(&mut engine, &jobs(&format!("[[job]]\nname = \"j\"\n{body}\n")))[0];
        match (name, outcome) {
            ("isolation", JobOutcome::Placed { .. }) => {}
            (_, JobOutcome::Unplaced { reasons }) => assert!(expected(&reasons[0].reason), "{name}: {reasons:?}"),
            (_, other) => panic!("{name}: placed {other:?}"),
        }
    }
}

#[test]
fn every_policy_is_selectable_by_name() {
    for policy in Policy::ALL {
        assert_eq!(policy.name().parse::<Policy>(), Ok(policy));
    }
    assert!("tetris".parse::<Policy>().expect_err("unknown").contains("choose one of"));
}

#[test]
fn hardware_that_can_never_serve_a_job_is_reported_as_such() {
    // The T4 node's CPU is used up; for a MIG request its reason must still be "no MIG", since
    // that is true of every T4 node whatever its load.
    let fleet = r#"
[[node]]
name = "t4"
cpu = 4
memory = "32GiB"
[node.gpus]
model = "T4-16GB"
count = 1
[[node]]
name = "a100"
cpu = 64
memory = "256GiB"
[node.gpus]
model = "A100-SXM4-80GB"
count = 1
mig = ["4g.40gb@0", "3g.40gb@4"]
"#;
    let workload = "[[job]]\nname = \"hog\"\ncpu = 4\ngpu = { count = 1 }\nmodel = \"T4*\"\n[[job]]\nname = \"big\"\ncpu = 1\ngpu = { mig = \"4g.40gb\" }\n[[job]]\nname = \"again\"\ncpu = 1\ngpu = { mig = \"4g.40gb\" }\n";
    let mut engine = engine(fleet, Policy::Default);
    let outcomes = place_all(&mut engine, &jobs(workload));
    assert_eq!(placed(&outcomes[0])[0].node, "t4");
    assert_eq!(placed(&outcomes[1])[0].node, "a100");
    let JobOutcome::Unplaced { reasons } = &outcomes[2] else { panic!("the only 4g.40gb is taken") };
    let kinds: Vec<&Reason> = reasons.iter().map(|r| &r.reason).collect();
    assert!(kinds.iter().any(|r| matches!(r, Reason::MigNotSupported { .. })), "{reasons:?}");
    assert!(kinds.iter().any(|r| matches!(r, Reason::MigProfileUnavailable { .. })), "{reasons:?}");
    assert!(!kinds.iter().any(|r| matches!(r, Reason::InsufficientCpu { .. })), "{reasons:?}");
}

#[test]
fn random_draws_the_node_uniformly_whatever_its_gpu_count() {
    // One 8-GPU node and seven 1-GPU nodes, all shared: each node should win about 1/8 of
    // the draws. Drawing per (node, GPU) would hand the big node about 8/15 of them.
    let fleet = r#"
[[node]]
name = "big"
cpu = 64
memory = "256GiB"
[node.gpus]
model = "L4-24GB"
count = 8
mode = "mps"
[[node]]
name = "small"
count = 7
cpu = 64
memory = "256GiB"
[node.gpus]
model = "L4-24GB"
count = 1
mode = "mps"
"#;
    let mut big = 0;
    let draws = 400;
    for seed in 0..draws {
        let catalog = gantry_catalog::Catalog::embedded();
        let fleet = gantry_spec::parse_fleet(fleet, catalog).expect("fleet");
        let config = gantry_engine::EngineConfig {
            policy: Policy::Random,
            seed,
            limits: gantry_engine::SearchLimits::exhaustive(),
            shapes: None,
        };
        let mut engine = gantry_engine::Engine::new(&fleet, catalog, config).expect("engine");
        let outcome = &place_all(&mut engine, &jobs("[[job]]\nname = \"s\"\ngpu = { share = 100 }\n"))[0];
        big += (placed(outcome)[0].node == "big") as u32;
    }
    let share = big as f64 / draws as f64;
    assert!((0.06..=0.20).contains(&share), "big node won {share:.2} of the draws, expected about 0.125");
}

/// Preemption picks the cheapest victims that make room: fewest GPU-seconds of work lost,
/// then fewest jobs, then lowest priority; reclaim takes only other queues' borrowed capacity;
/// a starving job never stops its own queue; never a non-preemptible job or one inside its
/// minimum runtime; and only as many as needed.
#[test]
fn preemption_picks_the_cheapest_sufficient_victims() {
    use gantry_engine::preempt::{Right, Team, Victim};
    use gantry_types::Flavor;
    let fleet =
        "[[node]]\nname = \"n\"\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 4\n";
    let mut engine = engine(fleet, Policy::BestFit);
    let one = jobs("[[job]]\nname = \"x\"\ngpu = { count = 1 }\n").remove(0);
    let ids: Vec<u64> = (0..4)
        .map(|i| {
            let job = gantry_types::Job { name: format!("r{i}"), ..one.clone() };
            engine.place(&engine.compile(&job).expect("compiles")).expect("fits")
        })
        .collect();
    let a100 = Flavor::Model("A100-SXM4-80GB".into());
    let victim = |i: usize, priority, borrower: bool| Victim {
        alloc: ids[i],
        queue: 1,
        priority,
        preemptible: true,
        milli: 1000,
        demand: vec![(a100.clone(), 1000)],
        borrowed: if borrower { vec![a100.clone()] } else { Vec::new() },
        work_lost_milli_s: 100_000 * i as u64,
        way_back_milli_s: 0,
        budget_spent: false,
        min_runtime_left_s: 0,
        started_starved: false,
        reclaim_protected: false,
        restarted_after_reclaim: false,
        preempted_times: 0,
    };
    let right = |priority, guarantee: bool, starving| Right {
        queue: 0,
        priority,
        milli: 2000,
        guarantee: if guarantee { vec![a100.clone()] } else { Vec::new() },
        starving,
        fair_share: false,
        overshoot: false,
        consolidate: false,
        team: Team::Own,
    };
    let two = jobs("[[job]]\nname = \"p\"\ngpu = { count = 2 }\n").remove(0);
    let two = engine.compile(&two).expect("compiles");
    let cases: Vec<(&str, Right, Vec<Victim>, Option<Vec<u64>>)> = vec![
        (
            "lower priority only, least work lost",
            right(5, false, false),
            vec![victim(0, 1, false), victim(1, -1, false), victim(2, 0, false), victim(3, 9, false)],
            Some(vec![ids[0], ids[1]]),
        ),
        (
            "reclaim takes other queues' borrowers even of higher priority, cheapest first with lower priority",
            right(0, true, false),
            vec![victim(0, 3, true), victim(1, -1, false), victim(2, 3, true), victim(3, 3, false)],
            Some(vec![ids[0], ids[1]]),
        ),
        (
            "reclaim never takes an owner's capacity of equal or higher priority",
            right(0, true, false),
            vec![victim(0, 3, false), victim(1, 0, false), victim(2, 3, true), victim(3, 3, true)],
            Some(vec![ids[2], ids[3]]),
        ),
        (
            "a starving job stops its own priority or lower, never work that itself started starved",
            right(0, false, true),
            vec![
                Victim { started_starved: true, ..victim(0, 0, false) },
                victim(1, 1, false),
                victim(2, 0, false),
                victim(3, -1, false),
            ],
            Some(vec![ids[3], ids[2]]),
        ),
        (
            "the starvation guard and reclaim never take the preemptor's own queue",
            right(0, true, true),
            vec![
                Victim { queue: 0, ..victim(0, 0, true) },
                Victim { queue: 0, ..victim(1, 0, true) },
                victim(2, 0, true),
                Victim { queue: 0, ..victim(3, 0, true) },
            ],
            None,
        ),
        (
            "a job a reclaim started is protected from reclaim, not from priority",
            right(0, true, false),
            vec![
                Victim { reclaim_protected: true, ..victim(0, 0, true) },
                Victim { reclaim_protected: true, ..victim(1, 0, true) },
                victim(2, 0, true),
                Victim { reclaim_protected: true, ..victim(3, -1, true) },
            ],
            Some(vec![ids[2], ids[3]]),
        ),
        (
            "a job a reclaim stopped that just restarted is taken last, though it lost least",
            right(0, true, false),
            vec![
                Victim { restarted_after_reclaim: true, ..victim(0, 0, true) },
                victim(1, 0, true),
                victim(2, 0, true),
                victim(3, 0, true),
            ],
            Some(vec![ids[1], ids[2]]),
        ),
        (
            "and taken when nothing else will do: a queue within its guarantee does not wait",
            right(0, true, false),
            vec![
                Victim { restarted_after_reclaim: true, ..victim(0, 0, true) },
                Victim { restarted_after_reclaim: true, ..victim(1, 0, true) },
                Victim { reclaim_protected: true, ..victim(2, 0, true) },
                victim(3, 0, true),
            ],
            Some(vec![ids[0], ids[3]]),
        ),
        (
            "never non-preemptible or inside minimum runtime",
            right(5, false, false),
            vec![
                Victim { preemptible: false, ..victim(0, 0, false) },
                Victim { min_runtime_left_s: 60, ..victim(1, 0, false) },
                victim(2, 0, false),
                victim(3, 7, false),
            ],
            None,
        ),
    ];
    for (name, right, victims, expected) in cases {
        let mut plan = engine.plan_preemption(&two, &right, &victims);
        if let Some(p) = plan.as_mut() {
            p.sort_unstable();
        }
        let mut expected = expected;
        if let Some(e) = expected.as_mut() {
            e.sort_unstable();
        }
        assert_eq!(plan, expected, "{name}");
    }
}

/// Cost cases on a fleet of two 8-GPU nodes: a 1-GPU request stops a 1-GPU job, not an 8-GPU
/// one that ran less long (fewer seconds, more GPU-seconds); a 4-GPU request stops one 4-GPU
/// job rather than four 1-GPU jobs that lose as many GPU-seconds together (fewer jobs).
#[test]
fn victims_are_chosen_by_gpu_seconds_lost_then_count() {
    use gantry_engine::preempt::{Right, Team, Victim};
    let fleet = "[[node]]\nname = \"n\"\ncount = 2\ncpu = 64\nmemory = \"512GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 8\n";
    let mut engine = engine(fleet, Policy::BestFit);
    let place = |engine: &mut gantry_engine::Engine, name: &str, gpus: u32| {
        let job = jobs(&format!("[[job]]\nname = \"{name}\"\ngpu = {{ count = {gpus} }}\n")).remove(0);
        engine.place(&engine.compile(&job).expect("compiles")).expect("fits")
    };
    // Node 0: one 8-GPU job that ran 60 s. Node 1: a 4-GPU job and four 1-GPU jobs, 100 s each.
    let big = place(&mut engine, "big", 8);
    let four = place(&mut engine, "four", 4);
    let ones: Vec<u64> = (0..4).map(|i| place(&mut engine, &format!("one{i}"), 1)).collect();
    let v = |alloc, milli: u64, ran: u64| Victim {
        alloc,
        queue: 1,
        priority: 0,
        preemptible: true,
        milli,
        demand: Vec::new(),
        borrowed: Vec::new(),
        work_lost_milli_s: milli * ran,
        way_back_milli_s: 0,
        budget_spent: false,
        min_runtime_left_s: 0,
        started_starved: false,
        reclaim_protected: false,
        restarted_after_reclaim: false,
        preempted_times: 0,
    };
    let mut victims = vec![v(big, 8000, 60), v(four, 4000, 100)];
    victims.extend(ones.iter().map(|&a| v(a, 1000, 100)));
    let right = Right {
        queue: 0,
        priority: 1,
        milli: 1000,
        guarantee: Vec::new(),
        starving: false,
        fair_share: false,
        overshoot: false,
        consolidate: false,
        team: Team::Own,
    };
    let one_gpu = engine.compile(&jobs("[[job]]\nname = \"p1\"\ngpu = { count = 1 }\n").remove(0)).expect("compiles");
    let four_gpus = engine.compile(&jobs("[[job]]\nname = \"p4\"\ngpu = { count = 4 }\n").remove(0)).expect("compiles");
    assert_eq!(engine.plan_preemption(&one_gpu, &right, &victims), Some(vec![ones[0]]), "100 GPU-s, not 480");
    assert_eq!(
        engine.plan_preemption(&four_gpus, &right, &victims),
        Some(vec![four]),
        "400 GPU-s in one job, not in four"
    );
}
