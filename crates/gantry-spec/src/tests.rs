use super::*;
use gantry_catalog::Catalog;
use gantry_types::{GpuMode, GpuRequest, Isolation, ShareMode, TopologyLevel};

fn catalog() -> &'static Catalog {
    Catalog::embedded()
}

const FLEET: &str = r#"
[[node]]
name = "hgx"
count = 2
cpu = 224
memory = "2TiB"
rack = "r1"
[node.gpus]
model = "H100-SXM5-80GB"
count = 8
numa_nodes = 2
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

[[node]]
name = "pcie"
cpu = "64"
memory = "512GiB"
[node.gpus]
model = "NVIDIA L4"
count = 4
numa = [0, 0, 1, 1]
"#;

#[test]
fn a_fleet_expands_templates_and_modes() {
    let fleet = parse_fleet(FLEET, catalog()).expect("valid fleet");
    let names: Vec<&str> = fleet.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["hgx-0", "hgx-1", "pcie"]);
    let hgx = &fleet.nodes[0];
    assert_eq!(hgx.gpus.len(), 8);
    assert!(matches!(hgx.gpus[0].mode, GpuMode::Mig { ref instances } if instances.len() == 3));
    assert_eq!(hgx.gpus[1].mode, GpuMode::Mps { max_clients: 48 });
    assert!(matches!(hgx.gpus[2].mode, GpuMode::TimeSlice { replicas: 4, .. }));
    assert_eq!(hgx.gpus[3].mode, GpuMode::Whole);
    assert_eq!(hgx.gpus.iter().map(|g| g.numa).collect::<Vec<_>>(), [0, 0, 0, 0, 1, 1, 1, 1]);
    assert!(hgx.gpus.iter().all(|g| g.nvlink_domain == Some(0)), "H100 SXM: NVSwitch by default");
    assert_eq!(fleet.nodes[2].gpus[0].model, "L4-24GB", "NVML name resolved to catalog id");
    assert!(fleet.nodes[2].gpus.iter().all(|g| g.nvlink_domain.is_none()));
    assert_ne!(fleet.nodes[0].gpus[0].uuid, fleet.nodes[1].gpus[0].uuid);
}

#[test]
fn bad_fleets_name_the_field_and_hint() {
    let base = "[[node]]\nname = \"n\"\ncpu = 8\nmemory = \"64GiB\"\n[node.gpus]\n";
    let cases: [(&str, String, &str); 12] = [
        ("unknown model", format!("{base}model = \"H900\"\ncount = 1"), "unknown GPU model \"H900\""),
        ("zero GPUs", format!("{base}model = \"T4\"\ncount = 0"), "gpus.count: 0 is out of range 1..=64"),
        ("absurd GPUs", format!("{base}model = \"T4-16GB\"\ncount = 100000"), "out of range 1..=64"),
        (
            "MIG on T4",
            format!("{base}model = \"T4-16GB\"\ncount = 1\nmig = [\"1g.10gb@0\"]"),
            "T4-16GB does not support MIG",
        ),
        (
            "4 x 3g.20gb",
            format!(
                "{base}model = \"A100-SXM4-40GB\"\ncount = 1\nmig = [\"3g.20gb@0\", \"3g.20gb@4\", \"3g.20gb@0\", \"3g.20gb@4\"]"
            ),
            "at most 2 fit (rule: max instances per profile)",
        ),
        (
            "illegal start",
            format!("{base}model = \"H100-SXM5-80GB\"\ncount = 1\nmig = [\"4g.40gb@4\"]"),
            "rule: legal placements",
        ),
        (
            "too many MPS clients",
            format!("{base}model = \"L4-24GB\"\ncount = 1\nmode = \"mps\"\nmax_clients = 64"),
            "max_clients: 64 is out of range 1..=48",
        ),
        (
            "one replica",
            format!("{base}model = \"L4-24GB\"\ncount = 1\nmode = \"time-slice\"\nreplicas = 1"),
            "replicas: 1 is out of range 2..=64",
        ),
        (
            "overcommitted budget",
            format!(
                "{base}model = \"L4-24GB\"\ncount = 1\nmode = \"time-slice\"\nreplicas = 4\nmemory_per_replica = \"8GiB\""
            ),
            "does not fit in L4-24GB's 24GiB",
        ),
        ("unknown field", format!("{base}model = \"L4-24GB\"\ncount = 1\ncolour = \"red\""), "unknown field `colour`"),
        (
            "stray key",
            format!("{base}model = \"L4-24GB\"\ncount = 1\nreplicas = 4"),
            "replicas does not apply to mode whole",
        ),
        ("bad nvlink", format!("{base}model = \"L4-24GB\"\ncount = 1\nnvlink = \"mesh\""), "unknown NVLink layout"),
    ];
    for (name, text, needle) in cases {
        let err = parse_fleet(&text, catalog()).expect_err(name);
        let shown = err.to_string();
        assert!(shown.contains(needle), "{name}: {shown}");
        assert!(
            shown.contains("hint:") || name == "4 x 3g.20gb" || name == "illegal start" || name == "stray key",
            "{name} has no hint: {shown}"
        );
    }
}

#[test]
fn an_empty_or_garbage_fleet_is_refused() {
    assert!(parse_fleet("", catalog()).expect_err("empty").to_string().contains("no nodes"));
    assert!(
        parse_fleet("[[node]\nname=", catalog()).expect_err("garbage").to_string().contains("not a valid fleet file")
    );
    let huge = "#".repeat(SPEC_BYTES_MAX + 1);
    assert!(parse_fleet(&huge, catalog()).expect_err("huge").to_string().contains("limit"));
}

const WORKLOAD: &str = r#"
[[job]]
name = "train"
queue = "research"
priority = 10
[[job.task]]
name = "worker"
replicas = 2
cpu = 32
memory = "256GiB"
gpu = { count = 4 }
model = ["H100*", "A100-SXM4-80GB"]
topology = { within = "nvlink", required = true }

[[job]]
name = "infer"
count = 3
gpu = { mig = "1g.10gb" }
isolation = "hard"

[[job]]
name = "notebook"
gpu = { share = 250, memory = "8GiB", mode = "time-slice" }

[[job]]
name = "k8s"
resources = { "nvidia.com/mig-3g.40gb" = 1, cpu = "500m", memory = "4Gi" }

[[job]]
name = "sized"
gpu = { memory = "20GiB" }
selector = "device.memory_gib >= 24"
"#;

#[test]
fn a_workload_parses_every_request_kind() {
    let jobs = parse_workload(WORKLOAD, catalog()).expect("valid workload");
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["train", "infer-0", "infer-1", "infer-2", "notebook", "k8s", "sized"]);
    let worker = &jobs[0].groups[0];
    assert_eq!(worker.replicas, 2);
    assert_eq!(worker.resources.gpu, Some(GpuRequest::Whole { count: 4 }));
    assert_eq!(worker.resources.topology.within, TopologyLevel::Nvlink);
    assert!(worker.resources.topology.required);
    assert_eq!(jobs[1].groups[0].resources.isolation, Isolation::Hard);
    assert!(matches!(jobs[4].groups[0].resources.gpu, Some(GpuRequest::Share { mode: ShareMode::TimeSlice, .. })));
    let k8s = &jobs[5].groups[0].resources;
    assert_eq!(k8s.gpu, Some(GpuRequest::Mig { profile: "3g.40gb".into() }));
    assert_eq!(k8s.cpu.0, 500);
    assert!(matches!(jobs[6].groups[0].resources.gpu, Some(GpuRequest::Memory { .. })));
}

#[test]
fn bad_workloads_name_the_field_and_hint() {
    let job = |body: &str| format!("[[job]]\nname = \"j\"\n{body}");
    let cases: [(&str, String, &str); 21] = [
        ("zero GPUs", job("gpu = { count = 0 }"), "gpu.count: 0 is out of range 1..=64"),
        ("negative GPUs", job("gpu = { count = -3 }"), "out of range 1..=64"),
        ("absurd GPUs", job("gpu = { count = 4096 }"), "out of range 1..=64"),
        ("unknown profile", job("gpu = { mig = \"9g.900gb\" }"), "no GPU model has MIG profile \"9g.900gb\""),
        ("unknown model", job("gpu = { count = 1 }\nmodel = \"X100\""), "unknown GPU model \"X100\""),
        (
            "profile the model lacks",
            job("gpu = { mig = \"1g.10gb\" }\nmodel = \"T4*\""),
            "none of T4* offers MIG profile 1g.10gb",
        ),
        ("memory larger than any GPU", job("gpu = { memory = \"4TiB\" }"), "more than any GPU has"),
        ("share above one GPU", job("gpu = { share = 1500 }"), "share: 1500 is out of range 1..=1000"),
        ("malformed CEL", job("gpu = { count = 1 }\nselector = \"device.memory_gib >=\""), "selector does not parse"),
        ("MIG plus mps", job("gpu = { mig = \"1g.10gb\", mode = \"mps\" }"), "mode mps contradicts it"),
        (
            "hard plus time-slice",
            job("gpu = { share = 100, mode = \"time-slice\" }\nisolation = \"hard\""),
            "hard isolation contradicts a shared GPU",
        ),
        ("two kinds", job("gpu = { count = 1, mig = \"1g.10gb\" }"), "give exactly one of"),
        ("unknown resource", job("resources = { \"amd.com/gpu\" = 1 }"), "unknown resource name"),
        ("two MIG devices", job("resources = { \"nvidia.com/mig-1g.10gb\" = 2 }"), "out of range 1..=1"),
        ("unknown field", job("gpus = 2"), "unknown field `gpus`"),
        ("priority out of range", job("priority = 99999999"), "out of range"),
        ("negative cpu", job("cpu = -2"), "negative"),
        ("unknown purpose", job("gpu = { memory = \"8GiB\", purpose = \"gaming\" }"), "unknown purpose \"gaming\""),
        ("hint without purpose", job("gpu = { memory = \"8GiB\", bursty = true }"), "describe a purpose"),
        ("hint on whole GPUs", job("gpu = { count = 1, purpose = \"training\" }"), "hints for a memory-only request"),
        ("hint on a share", job("gpu = { share = 100, latency-sensitive = true }"), "hints for a memory-only request"),
    ];
    for (name, text, needle) in cases {
        let err = parse_workload(&text, catalog()).expect_err(name);
        let shown = err.to_string();
        assert!(shown.contains(needle), "{name}: {shown}");
        assert!(shown.contains("job \"j\"") || name == "unknown field", "{name} does not name the job: {shown}");
    }
}

#[test]
fn duplicate_names_are_refused() {
    let text = "[[job]]\nname = \"a\"\n[[job]]\nname = \"a\"\n";
    assert!(parse_workload(text, catalog()).expect_err("dup").to_string().contains("job name used twice"));
}

fn trace(text: &str, lenient: bool) -> Result<crate::Trace, SpecError> {
    crate::read_trace(text.as_bytes(), catalog(), lenient)
}

#[test]
fn a_trace_parses_jobs_in_arrival_order() {
    let text = r#"{"arrival_s": 60, "duration_s": 3600, "utilization": 0.5, "job": {"name": "train", "queue": "research", "cpu": 32, "memory": "256GiB", "gpu": {"count": 8}}}

{"arrival_s": 0, "job": {"name": "nb", "count": 2, "gpu": {"share": 125, "mode": "time-slice"}}}
{"arrival_s": 60, "duration_s": 10, "job": {"name": "gang", "task": [{"name": "w", "replicas": 2, "gpu": {"count": 4}, "topology": {"within": "rack", "required": true}}]}}
"#;
    let t = trace(text, false).expect("a valid trace");
    let names: Vec<&str> = t.jobs.iter().map(|j| j.job.name.as_str()).collect();
    assert_eq!(names, ["nb-0", "nb-1", "train", "gang"], "sorted by arrival, stable in file order");
    assert_eq!((t.jobs[0].line, t.jobs[0].arrival_s, t.jobs[0].duration_s), (3, 0, None));
    assert_eq!((t.jobs[2].duration_s, t.jobs[2].utilization), (Some(3600), Some(0.5)));
    assert_eq!(t.jobs[2].job.queue, "research");
    assert_eq!(t.jobs[3].job.groups[0].replicas, 2);
}

#[test]
fn bad_trace_lines_name_the_line_and_field() {
    let ok = r#"{"arrival_s": 0, "duration_s": 5, "job": {"name": "a", "gpu": {"count": 1}}}"#;
    let big = format!(r#"{{"arrival_s": 0, "job": {{"name": "{}"}}}}"#, "x".repeat(crate::TRACE_LINE_BYTES_MAX));
    let cases: &[(&str, &str, &str)] = &[
        ("not json", "{arrival_s: 0}", "line 2: not a valid trace line"),
        ("unknown field", r#"{"arrival_s": 0, "when": 1, "job": {"name": "b"}}"#, "unknown field `when`"),
        ("missing job", r#"{"arrival_s": 0}"#, "missing field `job`"),
        ("missing arrival", r#"{"job": {"name": "b"}}"#, "missing field `arrival_s`"),
        ("negative arrival", r#"{"arrival_s": -1, "job": {"name": "b"}}"#, "line 2 / arrival_s: -1 is negative"),
        (
            "negative duration",
            r#"{"arrival_s": 1, "duration_s": -5, "job": {"name": "b"}}"#,
            "duration_s: -5 is negative",
        ),
        ("huge time", r#"{"arrival_s": 99999999999999, "job": {"name": "b"}}"#, "more than 100 years"),
        (
            "utilization",
            r#"{"arrival_s": 1, "utilization": 1.5, "job": {"name": "b"}}"#,
            "utilization: 1.5 is outside 0..=1",
        ),
        (
            "bad job",
            r#"{"arrival_s": 1, "job": {"name": "b", "gpu": {"count": 0}}}"#,
            "line 2 / job \"b\" / task \"main\"",
        ),
        ("empty name", r#"{"arrival_s": 1, "job": {"name": " "}}"#, "empty job name"),
        ("duplicate", r#"{"arrival_s": 1, "job": {"name": "a"}}"#, "job \"a\": job name used twice"),
        ("oversized line", &big, "the limit is 65536"),
        ("array", "[1, 2]", "not a valid trace line"),
    ];
    for (name, line, expected) in cases {
        let err = trace(&format!("{ok}\n{line}\n"), false).expect_err(name).to_string();
        assert!(err.contains(expected), "{name}: {err}");
        // Lenient: the bad line is skipped and counted, the good one kept.
        let t = trace(&format!("{ok}\n{line}\n"), true).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((t.jobs.len(), t.skipped.values().sum::<u64>()), (1, 1), "{name}: {:?}", t.skipped);
    }
}

#[test]
fn an_empty_or_unreadable_trace_is_refused() {
    assert_eq!(trace("", false).expect_err("refused").to_string(), "the trace has no jobs");
    assert_eq!(trace("\n  \n", true).expect_err("refused").to_string(), "the trace has no jobs");
    let err = trace("garbage\n{}\n", true).expect_err("refused").to_string();
    assert_eq!(err, "no usable job in the trace (2 lines skipped)");
    let err = crate::read_trace(&b"\xff\xfe\n"[..], catalog(), false).expect_err("refused").to_string();
    assert_eq!(err, "line 1: not UTF-8 text");
}

const QUEUES: &str = r#"
[fair_share]
half_life = "2d"
starvation = "12h"
greedy_reserve_after = "1h"

[billing]
"H100-SXM5-80GB" = 2.0

[[queue]]                 # a child may come before its parent
name = "vision"
parent = "research"
quota = [{ flavor = "H100-SXM5-80GB", guaranteed = 4, limit = 8 }]

[[queue]]
name = "research"
weight = 2
quota = [{ flavor = "h100-sxm5-80gb", guaranteed = 8, limit = 16, lend = false, borrow = 4 }, { flavor = "milli", guaranteed = 2.5 }]

[[queue]]
name = "prod"
"#;

#[test]
fn a_queue_tree_parses_with_parents_first() {
    let tree = crate::parse_queues(QUEUES, catalog()).expect("valid queue file");
    let names: Vec<&str> = tree.queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["research", "prod", "vision"]);
    assert_eq!((tree.half_life_s, tree.starvation_s, tree.greedy_reserve_after_s), (2 * 86_400, 12 * 3600, 3600));
    assert_eq!(tree.billing_milli, [("H100-SXM5-80GB".to_string(), 2000)]);
    let research = &tree.queues[0];
    assert_eq!((research.parent, research.weight), (None, 2));
    let h100 = &research.quotas[0];
    assert_eq!(h100.flavor, gantry_types::Flavor::Model("H100-SXM5-80GB".into()), "name resolved to the canonical id");
    assert_eq!((h100.guaranteed_milli, h100.limit_milli, h100.lend, h100.borrow_milli), (8000, 16_000, false, 4000));
    assert_eq!(research.quotas[1].guaranteed_milli, 2500);
    assert_eq!(tree.queues[2].parent, Some(0));
    assert_eq!(tree.queues[2].quotas[0].borrow_milli, 4000, "borrow defaults to limit − guaranteed");
    let defaults = crate::parse_queues("[[queue]]\nname = \"a\"\n", catalog()).expect("minimal file");
    assert_eq!(
        (defaults.half_life_s, defaults.starvation_s, defaults.greedy_reserve_after_s),
        (crate::HALF_LIFE_DEFAULT_S, crate::STARVATION_DEFAULT_S, gantry_types::GREEDY_RESERVE_AFTER_DEFAULT_S)
    );
}

#[test]
fn bad_queue_files_name_the_queue_and_field() {
    let cases: &[(&str, &str, &str)] = &[
        ("no queues", "", "queue: the file has no queues"),
        ("unknown key", "[[queue]]\nname = \"a\"\nshare = 3\n", "unknown field `share`"),
        (
            "unknown parent",
            "[[queue]]\nname = \"a\"\nparent = \"org\"\n",
            "queue \"a\" / parent: unknown queue \"org\"",
        ),
        (
            "cycle",
            "[[queue]]\nname = \"a\"\nparent = \"b\"\n[[queue]]\nname = \"b\"\nparent = \"a\"\n",
            "queue parents form a cycle: a → b → a",
        ),
        ("self parent", "[[queue]]\nname = \"a\"\nparent = \"a\"\n", "cycle: a → a"),
        ("duplicate", "[[queue]]\nname = \"a\"\n[[queue]]\nname = \"a\"\n", "queue \"a\": queue name used twice"),
        ("empty name", "[[queue]]\nname = \"\"\n", "queue \"\" / name"),
        ("weight", "[[queue]]\nname = \"a\"\nweight = 0\n", "queue \"a\" / weight: 0 is out of range"),
        (
            "unknown flavor",
            "[[queue]]\nname = \"a\"\nquota = [{ flavor = \"Z9000\", guaranteed = 1 }]\n",
            "queue \"a\" / quota \"Z9000\" / flavor: unknown GPU model \"Z9000\"",
        ),
        (
            "limit below guarantee",
            "[[queue]]\nname = \"a\"\nquota = [{ flavor = \"milli\", guaranteed = 4, limit = 2 }]\n",
            "limit 2 is below guaranteed 4",
        ),
        (
            "negative quota",
            "[[queue]]\nname = \"a\"\nquota = [{ flavor = \"milli\", guaranteed = -1 }]\n",
            "guaranteed: -1 is outside",
        ),
        (
            "flavor twice",
            "[[queue]]\nname = \"a\"\nquota = [{ flavor = \"milli\" }, { flavor = \"milli\" }]\n",
            "flavor given twice",
        ),
        (
            "children exceed parent",
            "[[queue]]\nname = \"org\"\nquota = [{ flavor = \"A100-SXM4-80GB\", guaranteed = 4 }]\n\
             [[queue]]\nname = \"x\"\nparent = \"org\"\nquota = [{ flavor = \"A100-SXM4-80GB\", guaranteed = 3 }]\n\
             [[queue]]\nname = \"y\"\nparent = \"org\"\nquota = [{ flavor = \"A100-SXM4-80GB\", guaranteed = 2 }]\n",
            "queue \"org\" / quota \"A100-SXM4-80GB\" / guaranteed: its children (x, y) are guaranteed 5 GPUs, more than its 4",
        ),
        (
            "bad duration",
            "[fair_share]\nhalf_life = \"3 weeks\"\n[[queue]]\nname = \"a\"\n",
            "fair_share.half_life: unknown unit",
        ),
        (
            "zero duration",
            "[fair_share]\nstarvation = 0\n[[queue]]\nname = \"a\"\n",
            "fair_share.starvation: 0 s is outside",
        ),
        (
            "negative greedy_reserve_after",
            "[fair_share]\ngreedy_reserve_after = \"-30m\"\n[[queue]]\nname = \"a\"\n",
            "fair_share.greedy_reserve_after: \"-30m\" is negative",
        ),
        (
            "misspelt greedy_reserve_after",
            "[fair_share]\ngreedy_reserve = \"30m\"\n[[queue]]\nname = \"a\"\n",
            "unknown field `greedy_reserve`",
        ),
        ("billing", "[billing]\n\"A100-SXM4-80GB\" = -2\n[[queue]]\nname = \"a\"\n", "is outside (0, 1000]"),
        ("billing pool", "[billing]\nmilli = 2\n[[queue]]\nname = \"a\"\n", "per GPU model, not the milli pool"),
    ];
    for (name, text, expected) in cases {
        let err = crate::parse_queues(text, catalog()).expect_err(name).to_string();
        assert!(err.contains(expected), "{name}: {err}");
    }
    let deep: String = (0..10)
        .map(|i| {
            if i == 0 {
                "[[queue]]\nname = \"q0\"\n".to_string()
            } else {
                format!("[[queue]]\nname = \"q{i}\"\nparent = \"q{}\"\n", i - 1)
            }
        })
        .collect();
    assert!(crate::parse_queues(&deep, catalog()).expect_err("too deep").to_string().contains("deeper than 8 levels"));
}

#[test]
fn job_lifecycle_fields_parse_with_defaults_and_errors() {
    let jobs = crate::parse_workload(
        "[[job]]\nname = \"a\"\npreemptible = false\nmin_runtime = \"10m\"\ngrace = 90\nrestartable = true\n[[job]]\nname = \"b\"\n",
        catalog(),
    )
    .expect("valid workload");
    assert_eq!(
        jobs[0].lifecycle,
        gantry_types::Lifecycle {
            preemptible: false,
            min_runtime_s: 600,
            grace_s: 90,
            interactive: false,
            requeue: true,
            restartable: true,
        }
    );
    assert_eq!(jobs[1].lifecycle, gantry_types::Lifecycle::default());
    for (text, expected) in [
        ("[[job]]\nname = \"a\"\ngrace = \"5 weeks\"\n", "job \"a\" / grace: unknown unit"),
        ("[[job]]\nname = \"a\"\nmin_runtime = -1\n", "job \"a\" / min_runtime: -1 is negative"),
        ("[[job]]\nname = \"a\"\ntime_limit = \"-5m\"\n", "job \"a\" / time_limit: \"-5m\" is negative"),
        (
            "[[job]]\nname = \"a\"\nmin_runtime = \"2h\"\ntime_limit = \"1h\"\n",
            "job \"a\" / min_runtime: 7200 s is longer than the time limit (3600 s)",
        ),
        ("[[job]]\nname = \"a\"\npreemptible = \"no\"\n", "invalid type"),
    ] {
        let err = crate::parse_workload(text, catalog()).expect_err(text).to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
}

#[test]
fn dependencies_parse_and_cycles_or_unknown_jobs_are_refused() {
    use gantry_types::{Dependency, DependencyKind};
    let jobs = crate::parse_workload(
        "[[job]]\nname = \"prep\"\n[[job]]\nname = \"train\"\nafter = [\"afterok:prep\"]\n\
         [[job]]\nname = \"report\"\nafter = [\"afterany:train\", \"afternotok:prep\", \"prep\"]\n",
        catalog(),
    )
    .expect("valid workload");
    assert_eq!(jobs[1].after, [Dependency { kind: DependencyKind::AfterOk, job: "prep".into(), id: None }]);
    assert_eq!(
        jobs[2].after.iter().map(|d| d.kind).collect::<Vec<_>>(),
        [DependencyKind::AfterAny, DependencyKind::AfterNotOk, DependencyKind::AfterOk]
    );
    for (text, expected) in [
        ("[[job]]\nname = \"a\"\nafter = [\"before:b\"]\n", "job \"a\" / after: unknown dependency kind \"before\""),
        ("[[job]]\nname = \"a\"\nafter = [\"afterok:\"]\n", "names no job"),
        ("[[job]]\nname = \"a\"\nafter = [\"ghost\"]\n", "job \"a\" / after: unknown job \"ghost\""),
        ("[[job]]\nname = \"a\"\nafter = [\"a\"]\n", "dependency cycle: a → a"),
        (
            "[[job]]\nname = \"a\"\nafter = [\"c\"]\n[[job]]\nname = \"b\"\nafter = [\"a\"]\n[[job]]\nname = \"c\"\nafter = [\"b\"]\n",
            "dependency cycle: a → c → b → a",
        ),
    ] {
        let err = crate::parse_workload(text, catalog()).expect_err(text).to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
    let cyclic = "{\"arrival_s\": 0, \"job\": {\"name\": \"x\", \"after\": [\"y\"]}}\n{\"arrival_s\": 1, \"job\": {\"name\": \"y\", \"after\": [\"afterany:x\"]}}\n";
    let err = crate::read_trace(cyclic.as_bytes(), catalog(), true).expect_err("cycle").to_string();
    assert!(err.contains("dependency cycle: x → y → x"), "{err}");
}

#[test]
fn job_controls_parse_arrays_expand_and_bad_values_name_the_field() {
    let jobs = crate::parse_workload(
        "[[job]]\nname = \"sweep\"\narray = \"0-2,7%2\"\nuser = \"alice\"\ntime_limit = \"2h\"\nhold = true\n\
         [[job]]\nname = \"report\"\nafter = [\"afterok:sweep\"]\n",
        catalog(),
    )
    .expect("valid workload");
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["sweep[0]", "sweep[1]", "sweep[2]", "sweep[7]", "report"]);
    let c = &jobs[3].control;
    assert_eq!((c.user.as_deref(), c.time_limit_s, c.hold), (Some("alice"), Some(7200), true));
    assert_eq!(
        c.array,
        Some(gantry_types::ArrayElement {
            array: "sweep".into(),
            index: 7,
            max_running: Some(2),
            job: None,
            min: 0,
            max: 7,
            count: 4
        })
    );
    assert_eq!(jobs[4].control, gantry_types::JobControl::default());
    let eight = crate::parse_workload("[[job]]\nname = \"a\"\narray = 8\n", catalog()).expect("array = N");
    assert_eq!(eight.len(), 8);
    for (text, expected) in [
        ("[[job]]\nname = \"a\"\narray = \"3-1\"\n", "job \"a\" / array: range \"3-1\" runs backwards"),
        ("[[job]]\nname = \"a\"\narray = \"0-9%0\"\n", "job \"a\" / array: %0 is not a count ≥ 1"),
        ("[[job]]\nname = \"a\"\narray = \"x\"\n", "job \"a\" / array: \"x\" is not an index"),
        ("[[job]]\nname = \"a\"\narray = \"0-100001\"\n", "is not an index 0..=100000"),
        ("[[job]]\nname = \"a\"\narray = 0\n", "job \"a\" / array: 0 is out of range"),
        ("[[job]]\nname = \"a\"\narray = 2\ncount = 2\n", "job \"a\": both count and array"),
        ("[[job]]\nname = \"a\"\nuser = \" bob\"\n", "job \"a\" / user: \" bob\" is not a user name"),
        ("[[job]]\nname = \"a\"\ntime_limit = 0\n", "job \"a\" / time_limit: 0 s is outside"),
        ("[[job]]\nname = \"a\"\nhold = \"yes\"\n", "invalid type"),
        ("[[job]]\nname = \"a\"\nafter = [\"afterok:nope\"]\n", "unknown job \"nope\""),
    ] {
        let err = crate::parse_workload(text, catalog()).expect_err(text).to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
}

#[test]
fn user_limits_parse_and_bad_ones_name_the_field() {
    let tree = crate::parse_queues(
        "[[queue]]\nname = \"a\"\n[user_limits]\nmax_running_jobs = 4\n[[user]]\nname = \"bob\"\nmax_gpus = 2.5\n",
        catalog(),
    )
    .expect("valid");
    assert_eq!(tree.user_limit("alice"), gantry_types::UserLimit { max_running_jobs: Some(4), max_gpus_milli: None });
    assert_eq!(tree.user_limit("bob"), gantry_types::UserLimit { max_running_jobs: None, max_gpus_milli: Some(2500) });
    for (text, expected) in [
        ("[user_limits]\nmax_running_jobs = -1\n", "user_limits / max_running_jobs: -1 is out of range"),
        ("[[user]]\nname = \"bob\"\nmax_gpus = -3\n", "user \"bob\" / max_gpus: -3 is outside"),
        ("[[user]]\nname = \"bob\"\n[[user]]\nname = \"bob\"\n", "user \"bob\": user listed twice"),
        ("[[user]]\nname = \"\"\n", "user \"\" / name: empty"),
        ("[user_limits]\nmax_jobs = 3\n", "unknown field `max_jobs`"),
    ] {
        let text = format!("[[queue]]\nname = \"a\"\n{text}");
        let err = crate::parse_queues(&text, catalog()).expect_err(&text).to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
}

#[test]
fn run_fields_parse_and_bad_ones_name_the_field() {
    let jobs = crate::parse_workload(
        "[[job]]\nname = \"a\"\ncommand = \"echo $CUDA_VISIBLE_DEVICES\"\nenv = { LR = \"0.1\" }\nworkdir = \"/tmp\"\n\
         [[job]]\nname = \"b\"\ncommand = [\"python\", \"train.py\"]\n",
        catalog(),
    )
    .expect("valid");
    assert_eq!(jobs[0].run.command, ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"]);
    assert_eq!(jobs[0].run.env, [("LR".to_string(), "0.1".to_string())]);
    assert_eq!(jobs[0].run.workdir.as_deref(), Some("/tmp"));
    assert_eq!(jobs[1].run.command, ["python", "train.py"]);
    for (text, expected) in [
        ("command = \"  \"", "job \"a\" / command: empty command"),
        ("command = []", "job \"a\" / command: empty program name"),
        ("env = { \"1X\" = \"v\" }", "job \"a\" / env: \"1X\" is not a variable name"),
        ("env = { CUDA_VISIBLE_DEVICES = \"0\" }", "CUDA_VISIBLE_DEVICES is set by gantry"),
        ("env = { GANTRY_RANK = \"0\" }", "GANTRY_RANK is set by gantry"),
        ("env = { SLURM_JOB_ID = \"7\" }", "SLURM_JOB_ID is set by gantry"),
        ("env = { WORLD_SIZE = \"64\" }", "WORLD_SIZE is set by gantry"),
        ("workdir = \"\"", "job \"a\" / workdir: empty working directory"),
        ("command = 3", "did not match any variant"),
    ] {
        let text = format!("[[job]]\nname = \"a\"\n{text}\n");
        let err = crate::parse_workload(&text, catalog()).expect_err(&text).to_string();
        assert!(err.contains(expected), "{text}: {err}");
    }
    let long = format!("[[job]]\nname = \"a\"\ncommand = \"{}\"\n", "x".repeat(70_000));
    let err = crate::parse_workload(&long, catalog()).expect_err("long").to_string();
    assert!(err.contains("the limit is 65536"), "{err}");
}

#[test]
fn a_memory_only_request_carries_the_advisor_hint() {
    let text = "[[job]]\nname = \"svc\"\ngpu = { memory = \"20GiB\", purpose = \"inference\", latency-sensitive = true }\n\
                [[job]]\nname = \"plain\"\ngpu = { memory = \"20GiB\" }\n";
    let jobs = parse_workload(text, catalog()).expect("parses");
    let hint = |i: usize| match &jobs[i].groups[0].resources.gpu {
        Some(gantry_types::GpuRequest::Memory { hint, .. }) => *hint,
        other => panic!("memory-only expected: {other:?}"),
    };
    assert_eq!(
        hint(0),
        Some(gantry_types::UnitHint {
            purpose: gantry_types::Purpose::Inference,
            bursty: false,
            latency_sensitive: true,
            trusted: false
        })
    );
    assert_eq!(hint(1), None);
    // The hint survives the store's JSON, and a job stored before hints existed still reads.
    let json = serde_json::to_string(&jobs[0]).expect("json");
    assert_eq!(serde_json::from_str::<gantry_types::Job>(&json).expect("reads"), jobs[0]);
    let old = serde_json::to_string(&jobs[1]).expect("json");
    assert!(!old.contains("hint"), "{old}");
}

#[test]
fn a_submission_over_its_job_budget_is_refused_naming_the_limit() {
    let cases = [
        ("[[job]]\nname = \"a\"\narray = 100000\n", 10_000),
        ("[[job]]\nname = \"a\"\ncount = 11\n", 10),
        ("[[job]]\nname = \"a\"\ncount = 6\n[[job]]\nname = \"b\"\narray = \"0-4\"\n", 10),
        ("[[job]]\nname = \"a\"\n[[job]]\nname = \"b\"\n[[job]]\nname = \"c\"\n", 2),
    ];
    for (text, max) in cases {
        let err = parse_submission(text, catalog(), max).expect_err(text);
        assert_eq!(err.limit, Some(("jobs_per_request", max as u64)), "{text}: {err}");
    }
    assert_eq!(parse_submission("[[job]]\nname = \"a\"\ncount = 10\n", catalog(), 10).expect("at the limit").len(), 10);
}

#[test]
fn names_are_printable_and_bounded() {
    for bad in ["\u{1b}[2J", "a\u{7}", "rtl\u{202e}txt", "zero\u{200b}width", "tab\there", " ", ""] {
        let err = check_name("job", bad).expect_err(bad);
        assert!(err.message.contains("unprintable") || err.message.contains("empty"), "{bad:?}: {err}");
    }
    let long = "x".repeat(NAME_CHARS_MAX + 1);
    assert_eq!(check_name("job", &long).expect_err("long").limit, Some(("name_chars", NAME_CHARS_MAX as u64)));
    for good in ["train", "sweep[3]", "résumé ✓ 训练", "مدل", "a-b_c.d", &"x".repeat(NAME_CHARS_MAX)] {
        check_name("job", good).expect(good);
    }
    // Every invisible or reordering character, one by one: the issue's list and the edges of
    // each range of Unicode's default-ignorable and bidi-control sets.
    let invisible = [
        '\u{00AD}',
        '\u{034F}',
        '\u{061C}',
        '\u{115F}',
        '\u{1160}',
        '\u{17B4}',
        '\u{17B5}',
        '\u{180B}',
        '\u{180E}',
        '\u{180F}',
        '\u{200B}',
        '\u{200E}',
        '\u{200F}',
        '\u{2028}',
        '\u{2029}',
        '\u{202A}',
        '\u{202E}',
        '\u{2060}',
        '\u{2064}',
        '\u{2066}',
        '\u{2069}',
        '\u{206F}',
        '\u{3164}',
        '\u{FE00}',
        '\u{FE0F}',
        '\u{FEFF}',
        '\u{FFA0}',
        '\u{FFF0}',
        '\u{1BCA0}',
        '\u{1BCA3}',
        '\u{1D173}',
        '\u{1D17A}',
        '\u{E0001}',
        '\u{E0020}',
        '\u{E007F}',
        '\u{E0100}',
        '\u{E01EF}',
    ];
    for c in invisible {
        let name = format!("admin{c}");
        let err = check_name("job", &name).expect_err(&format!("U+{:04X}", c as u32));
        assert!(err.message.contains(&format!("U+{:04X}", c as u32)), "{err}");
    }
    for neighbour in ['\u{00AC}', '\u{00AE}', '\u{0620}', '\u{2027}', '\u{202F}', '\u{FE10}', '\u{E1000}'] {
        check_name("job", &format!("a{neighbour}")).expect("a printable neighbour of a refused range");
    }
    // Task names too, in workload files and traces alike.
    let err = parse_workload("[[job]]\nname = \"a\"\n[[job.task]]\nname = \"\\u001b]0;x\"\n", catalog());
    assert!(err.is_err_and(|e| e.message.contains("unprintable")));
}

/// MIG layouts as mig-parted users write them: counts per profile, or profiles without starts,
/// placed largest first at the lowest legal start; an impossible count names the rule.
#[test]
fn mig_layouts_as_counts_or_bare_profiles_are_placed_at_legal_starts() {
    let fleet = |mig: &str| {
        let text = format!(
            "[[node]]\nname = \"n\"\ncpu = 8\nmemory = \"64GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 1\nmig = {mig}\n"
        );
        parse_fleet(&text, catalog()).map(|f| match &f.nodes[0].gpus[0].mode {
            GpuMode::Mig { instances } => {
                instances.iter().map(|i| format!("{}@{}", i.profile, i.start)).collect::<Vec<_>>().join(" ")
            }
            other => panic!("{other:?}"),
        })
    };
    let sevens = (0..7).map(|s| format!("1g.10gb@{s}")).collect::<Vec<_>>().join(" ");
    assert_eq!(fleet("{ \"1g.10gb\" = 7 }").expect("seven"), sevens);
    assert_eq!(fleet("[\"1g.10gb\", \"2g.20gb\", \"3g.40gb\"]").expect("bare"), "3g.40gb@0 2g.20gb@4 1g.10gb@6");
    assert_eq!(
        fleet("{ \"3g.40gb\" = 1, \"1g.10gb\" = 3 }").expect("mixed"),
        "3g.40gb@0 1g.10gb@4 1g.10gb@5 1g.10gb@6"
    );
    // A fourth 1g.10gb has no memory slice left beside a 3g.40gb at 0; the search moves the
    // 3g.40gb to 4 (what NVIDIA's driver does for mig-parted), and a fifth breaks a rule.
    assert_eq!(
        fleet("{ \"3g.40gb\" = 1, \"1g.10gb\" = 4 }").expect("full"),
        "1g.10gb@0 1g.10gb@1 1g.10gb@2 1g.10gb@3 3g.40gb@4"
    );
    assert!(fleet("{ \"3g.40gb\" = 1, \"1g.10gb\" = 5 }").is_err());
    // NVIDIA's all-balanced.
    assert_eq!(
        fleet("{ \"1g.10gb\" = 2, \"2g.20gb\" = 1, \"3g.40gb\" = 1 }").expect("all-balanced"),
        "2g.20gb@0 1g.10gb@2 1g.10gb@3 3g.40gb@4"
    );
    assert_eq!(fleet("[\"3g.40gb@4\", \"3g.40gb\"]").expect("fixed first"), "3g.40gb@0 3g.40gb@4");
    for (mig, rule) in [
        ("{ \"3g.40gb\" = 3 }", "3g.40gb"),
        ("{ \"4g.40gb\" = 1, \"3g.40gb\" = 1, \"1g.10gb\" = 1 }", "compute slices"),
        ("{ \"1g.10gb\" = 8 }", "out of range 1..=7"),
        ("{ \"9g.90gb\" = 1 }", "9g.90gb"),
        ("{ \"7g.80gb\" = 1, \"1g.10gb\" = 1 }", "compute slices"),
    ] {
        let err = fleet(mig).expect_err(mig).to_string();
        assert!(err.contains(rule), "{mig}: {err}");
    }
}

/// An unknown key names the entry it is in and the nearest valid key; a key no valid one is
/// near gets the format pointer only.
#[test]
fn unknown_keys_name_their_entry_and_suggest_the_nearest_valid_key() {
    let fleet = "[[node]]\nname = \"n1\"\ncpu = 32\nmemroy = \"256GiB\"\n";
    let err = parse_fleet(fleet, catalog()).expect_err("typo");
    assert_eq!(err.field, "node \"n1\"", "{err}");
    assert!(err.hint.as_deref().is_some_and(|h| h.starts_with("did you mean `memory`?")), "{err}");
    let workload = "[[job]]\nname = \"a\"\n[[job]]\nname = \"train\"\ngpu = { count = 1 }\ncomand = \"true\"\n";
    let err = parse_workload(workload, catalog()).expect_err("typo");
    assert_eq!(err.field, "job \"train\"", "{err}");
    assert!(err.to_string().contains("did you mean `command`?"), "{err}");
    let err = parse_workload("[[job]]\nname = \"a\"\nflavour = \"x\"\n", catalog()).expect_err("stranger");
    assert!(!err.to_string().contains("did you mean"), "{err}");
}

/// Time-slice set for the node with replicas only on per-GPU entries: the error says where
/// replicas belong.
#[test]
fn replicas_on_a_per_gpu_entry_under_a_node_level_time_slice_explain_where_they_belong() {
    let fleet = "[[node]]\nname = \"n1\"\ncpu = 32\nmemory = \"256GiB\"\n[node.gpus]\nmodel = \"A100-SXM4-80GB\"\ncount = 2\nmode = \"time-slice\"\n[[node.gpu]]\nindex = 0\nreplicas = 4\n";
    let err = parse_fleet(fleet, catalog()).expect_err("replicas misplaced").to_string();
    assert!(err.contains("needs replicas") && err.contains("replicas belongs beside the mode"), "{err}");
}

/// A name used twice says on which lines.
#[test]
fn names_used_twice_say_where() {
    let fleet =
        "[[node]]\nname = \"n1\"\ncpu = 8\nmemory = \"8GiB\"\n[[node]]\nname = \"n1\"\ncpu = 8\nmemory = \"8GiB\"\n";
    let err = parse_fleet(fleet, catalog()).expect_err("twice").to_string();
    assert!(err.contains("node name used twice (lines 2 and 6)"), "{err}");
    let workload = "[[job]]\nname = \"a\"\n[[job]]\nname = \"b\"\n[[job]]\nname = \"a\"\n";
    let err = parse_workload(workload, catalog()).expect_err("twice").to_string();
    assert!(err.contains("job name used twice (lines 2 and 6)"), "{err}");
}

#[test]
fn node_selectors_are_bounded_and_name_no_empty_label() {
    let job = |selector: &str| {
        let text = format!(
            "[[job]]\nname = \"j\"\n[[job.task]]\nname = \"t\"\nnode_selector = {{ {selector} }}\ngpu = {{ count = 1 }}\n"
        );
        parse_workload(&text, catalog())
    };
    let ok = job("pool = \"training\"").expect("valid");
    assert_eq!(ok[0].groups[0].node_selector.get("pool").map(String::as_str), Some("training"));
    let e = job("pool = \"\"").expect_err("empty value");
    assert!(e.to_string().contains("node_selector") && e.to_string().contains("1 to 253 bytes"), "{e}");
    let many: Vec<String> = (0..33).map(|i| format!("k{i} = \"v\"")).collect();
    let e = job(&many.join(", ")).expect_err("too many");
    assert!(e.to_string().contains("33 labels, at most 32"), "{e}");
}
