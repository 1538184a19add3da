//! Hostile Slurm input, generated: lines of slurm.conf, gres.conf and sacct made from the
//! pieces a real file has (keys, hostlists, gres entries, huge and negative numbers, times out
//! of order, stray separators). Whatever comes in, the importers answer with a result or a
//! `file:line` error, never a panic; and what they accept reads back.
//!
//! 64 cases per property in the suite; `PROPTEST_CASES=N` explores more.

use gantry_catalog::Catalog;
use gantry_spec::{QueueFrom, SlurmSource, import_sacct, import_slurm_conf};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64)
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..100).prop_map(|n| n.to_string()),
        Just("4294967295".to_string()),
        Just("18446744073709551615".to_string()),
        Just("-1".to_string()),
        Just("x".to_string()),
        Just(String::new()),
    ]
}

fn conf_word() -> impl Strategy<Value = String> {
    let gres = (
        prop_oneof![Just("gpu"), Just("shard"), Just("mps")],
        prop_oneof![
            Just(""),
            Just(":A100-SXM4-80GB"),
            Just(":a100"),
            Just(":1g.10gb"),
            Just(":7g.79gb"),
            Just(":nvidia_a100_3g.40gb"),
        ],
        number(),
    )
        .prop_map(|(name, ty, n)| format!("{name}{ty}:{n}"));
    prop_oneof![
        prop_oneof![Just("n"), Just("gpu[01-04]"), Just("r[1-2]n[1-3]"), Just("b[9-1]"), Just("c[1-"), Just("DEFAULT")]
            .prop_map(|h| format!("NodeName={h}")),
        number().prop_map(|n| format!("CPUs={n}")),
        number().prop_map(|n| format!("RealMemory={n}")),
        number().prop_map(|n| format!("Weight={n}")),
        proptest::collection::vec(gres, 1..4).prop_map(|g| format!("Gres={}", g.join(","))),
        Just("Features=A100-SXM4-80GB,ib".to_string()),
        Just("PartitionName=gpu".to_string()),
        Just("Nodes=ALL".to_string()),
        Just("Include".to_string()),
        Just("\\".to_string()),
        Just("=".to_string()),
        Just("#".to_string()),
    ]
}

fn conf_text() -> impl Strategy<Value = String> {
    let soup = proptest::collection::vec(conf_word(), 1..6).prop_map(|w| w.join(" "));
    // Mostly NodeName lines, as a real slurm.conf is: a hostlist, then fields in any order.
    let node = (
        prop_oneof![Just("n"), Just("gpu[01-04]"), Just("r[1-2]n[1-3]"), Just("b[9-1]"), Just("c[1-"), Just("DEFAULT")],
        proptest::collection::vec(conf_word(), 0..5),
    )
        .prop_map(|(h, fields)| format!("NodeName={h} {}", fields.join(" ")));
    let line = prop_oneof![3 => node, 1 => soup];
    proptest::collection::vec(line, 1..8).prop_map(|lines| lines.join("\n"))
}

fn gres_text() -> impl Strategy<Value = String> {
    let line = (
        prop_oneof![Just("NodeName=n "), Just("NodeName=gpu[01-02] "), Just(""), Just("NodeName=x[ ")],
        prop_oneof![Just("Name=gpu"), Just("Name=shard"), Just("AutoDetect=nvml")],
        prop_oneof![Just(""), Just(" Type=A100-SXM4-80GB"), Just(" Type=1g.10gb"), Just(" Type=?")],
        prop_oneof![
            number().prop_map(|n| format!(" Count={n}")),
            Just(" File=/dev/nvidia[0-3]".to_string()),
            Just(" File=/dev/nvidia[0-99999]".to_string()),
            Just(String::new()),
        ],
    )
        .prop_map(|(a, b, c, d)| format!("{a}{b}{c}{d}"));
    proptest::collection::vec(line, 0..6).prop_map(|l| l.join("\n"))
}

fn time() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u32..3, 0u32..60).prop_map(|(h, m)| format!("2026-11-02T1{h}:{m:02}:00")),
        Just("None".to_string()),
        Just("Unknown".to_string()),
        Just("2026-13-40T99:00:00".to_string()),
        Just(String::new()),
    ]
}

fn sacct_text() -> impl Strategy<Value = String> {
    let row = (
        prop_oneof![(1u32..50).prop_map(|n| n.to_string()), Just("7_3".into()), Just("8+1".into()), Just("9.batch".into()), Just(String::new())],
        time(),
        time(),
        time(),
        prop_oneof![Just("COMPLETED"), Just("RUNNING"), Just("CANCELLED by 0"), Just("PENDING"), Just("")],
        (number(), number(), prop_oneof![Just(""), Just(",gres/gpu:a100=1"), Just(",gres/gpu:1g.10gb=2"), Just(",gres/gpu:v9=1")], prop_oneof![Just("16G"), Just("1T"), Just("12Q"), Just("")]),
        number(),
        0usize..3,
    )
        .prop_map(|(id, submit, start, end, state, (cpu, gpus, typed, mem), nodes, extra)| {
            let row = format!("{id}|ada|gpu|{submit}|{start}|{end}|01:00:00|{state}|cpu={cpu},gres/gpu={gpus}{typed},mem={mem}|{nodes}");
            row + &"|".repeat(extra)
        });
    proptest::collection::vec(row, 0..8).prop_map(|rows| {
        format!("JobID|User|Partition|Submit|Start|End|Timelimit|State|AllocTRES|NNodes\n{}", rows.join("\n"))
    })
}

fn source(map: &BTreeMap<String, String>, lenient: bool) -> SlurmSource<'_> {
    SlurmSource { name: "in".into(), catalog: Catalog::embedded(), map, lenient }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), .. ProptestConfig::default() })]

    #[test]
    fn slurm_conf_and_gres_conf_never_panic_and_what_is_accepted_reads_back(conf in conf_text(), gres in gres_text(), lenient in any::<bool>()) {
        let map = BTreeMap::from([("a100".to_string(), "A100-SXM4-80GB".to_string())]);
        let gres = (!gres.is_empty()).then_some(("gres.conf", gres.as_str()));
        match import_slurm_conf(&conf, gres, &source(&map, lenient)) {
            Ok(imported) => {
                gantry_spec::parse_fleet(&imported.fleet, Catalog::embedded()).expect("an accepted fleet reads back");
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn sacct_never_panics_and_every_row_is_a_job_or_counted(text in sacct_text(), lenient in any::<bool>()) {
        let map = BTreeMap::from([("a100".to_string(), "A100-SXM4-80GB".to_string())]);
        let rows = text.lines().skip(1).filter(|l| !l.trim().is_empty()).count();
        if let Ok(imported) = import_sacct(&text, &source(&map, lenient), QueueFrom::Partition) {
            let left: u64 = imported.skipped.values().sum();
            prop_assert_eq!(imported.jobs + left as usize, rows, "{:?}", imported.skipped);
            if imported.jobs == 0 {
                return Ok(());
            }
            let trace = gantry_spec::read_trace(std::io::Cursor::new(imported.jsonl), Catalog::embedded(), false)
                .expect("an accepted trace reads back");
            prop_assert!(trace.jobs.iter().all(|j| j.started_s.is_none_or(|s| s >= j.arrival_s)));
        } else {
            prop_assert!(!lenient, "lenient mode refuses only a file without a usable header");
        }
    }
}
